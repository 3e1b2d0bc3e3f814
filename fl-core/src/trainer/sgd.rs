//! Mini-batch SGD with momentum, weight decay, an optional proximal term (FedProx) and
//! gradient masking, written directly on tensors so that every random draw comes from the
//! job's own streams. A cohort trains as one computation: parameters, momentum, masks and
//! starting points stacked along the client dimension, one backward pass and one update of
//! the stack per step. A model pulled mid-training is mixed in with weight `pull_weight`.
//!
//! Under an elementwise mask the client starts from the masked model (masked-out weights 0).
//! `masking = "gradient"` multiplies gradients by the mask so those weights stay 0 (the
//! KDD'23 paper); `"zero-init-only"` trains every weight and relies on the engine discarding
//! the masked-out part of the update afterwards (the KDD'23 code).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Reduction, Tensor};

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::{Mode, Model, Training};
use crate::params::ParamSet;
use crate::rng::CohortNoise;
use crate::split::SplitConfig;
use crate::trainer::schedule::{BatchSchedule, ClientPlan};
use crate::trainer::{LocalTrainer, PullInfo, TrainJob, TrainOutcome, TrainSession};

/// How an elementwise mask acts during local training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Masking {
    /// Gradients are multiplied by the mask: masked-out weights never move.
    #[default]
    Gradient,
    /// Masked-out weights start at 0 but train; their change is dropped from the update.
    ZeroInitOnly,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    pub batch_size: usize,
    /// Local epochs over the client's samples.
    pub epochs: usize,
    /// If set, exactly this many mini-batch steps instead of `epochs` (batches cycle over
    /// reshuffled epochs).
    pub steps: Option<usize>,
    pub momentum: f64,
    pub weight_decay: f64,
    /// FedProx's μ: adds μ/2 ‖w − w_start‖² to the loss.
    pub prox_mu: f64,
    /// Weight β of a model pulled mid-training: w ← (1 − β) w + β w_pulled.
    pub pull_weight: f64,
    pub masking: Masking,
    /// Split learning (SplitFed): the client trains up to `split.cut` and the server the rest.
    /// The updates are those of the whole model; only the job's cost changes.
    pub split: Option<SplitConfig>,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 0.05,
            batch_size: 32,
            epochs: 1,
            steps: None,
            momentum: 0.0,
            weight_decay: 0.0,
            prox_mu: 0.0,
            pull_weight: 0.5,
            masking: Masking::Gradient,
            split: None,
        }
    }
}

impl SgdConfig {
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.lr > 0.0) {
            return Err(format!("lr: expected a positive number, got {}", self.lr));
        }
        if self.batch_size == 0 {
            return Err("batch_size: expected at least 1".into());
        }
        if self.epochs == 0 && self.steps.is_none() {
            return Err("epochs: expected at least 1 (or set steps)".into());
        }
        if self.steps == Some(0) {
            return Err("steps: expected at least 1".into());
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(format!("momentum: expected a value in [0, 1), got {}", self.momentum));
        }
        if !(self.weight_decay >= 0.0) {
            return Err(format!("weight_decay: expected a non-negative number, got {}", self.weight_decay));
        }
        if !(self.prox_mu >= 0.0) {
            return Err(format!("prox_mu: expected a non-negative number, got {}", self.prox_mu));
        }
        if !(0.0..=1.0).contains(&self.pull_weight) {
            return Err(format!("pull_weight: expected a value in [0, 1], got {}", self.pull_weight));
        }
        self.split.as_ref().map_or(Ok(()), SplitConfig::validate)
    }
}

#[derive(Debug, Clone)]
pub struct Sgd {
    cfg: SgdConfig,
}

impl Sgd {
    pub fn new(cfg: SgdConfig) -> Self {
        Sgd { cfg }
    }

    pub fn config(&self) -> &SgdConfig {
        &self.cfg
    }

    /// Optimisation steps of a job over `samples` samples.
    pub fn total_steps(&self, samples: usize) -> usize {
        self.cfg.steps.unwrap_or_else(|| self.cfg.epochs * samples.div_ceil(self.cfg.batch_size))
    }
}

impl LocalTrainer for Sgd {
    fn batches(&self) -> bool {
        true
    }

    fn sample_passes(&self, samples: usize) -> f64 {
        match self.cfg.steps {
            Some(steps) => (steps * self.cfg.batch_size.min(samples)) as f64,
            None => (self.cfg.epochs * samples) as f64,
        }
    }

    fn steps(&self, samples: usize) -> f64 {
        self.total_steps(samples) as f64
    }

    fn split(&self) -> Option<&SplitConfig> {
        self.cfg.split.as_ref()
    }

    fn start(&self, jobs: Vec<TrainJob>) -> Result<Box<dyn TrainSession>> {
        Ok(Box::new(SgdCohort::new(self, jobs)?))
    }
}

/// A cohort in training. Tensors are stacked `[C, ...]` in cohort order (longest job first);
/// `order[i]` is the caller's index of cohort slot `i`.
struct SgdCohort {
    cfg: SgdConfig,
    model: Arc<dyn Model>,
    data: Dataset,
    names: Vec<String>,
    /// Per tensor: false for buffers, which the forward pass updates and no step touches.
    trainable: Vec<bool>,
    order: Vec<usize>,
    params: Vec<Tensor>,
    start: Vec<Tensor>,
    /// Momentum buffers (with momentum only), zero at the start.
    velocity: Vec<Tensor>,
    /// Stacked 0/1 gradient masks per tensor (ones for clients that do not mask it).
    grad_mask: Vec<Option<Tensor>>,
    schedule: BatchSchedule,
    noise: CohortNoise,
    step: usize,
    /// Each client's summed batch losses, `[C]`, read once at the end.
    loss_sum: Tensor,
    /// Weight decay, momentum and −lr as 0-d tensors on the device, copied there once.
    factors: [Tensor; 3],
}

impl SgdCohort {
    fn new(sgd: &Sgd, mut jobs: Vec<TrainJob>) -> Result<SgdCohort> {
        let first = jobs.first().ok_or_else(|| Error::invalid("sgd: a cohort needs at least one job"))?;
        let (model, data) = (Arc::clone(&first.model), first.data.shallow_clone());
        let names = first.params.names().to_vec();
        let shapes = first.params.shapes();
        let device = first.indices.device();
        for (j, job) in jobs.iter().enumerate() {
            if !Arc::ptr_eq(&job.model, &model) || job.data.x.data_ptr() != data.x.data_ptr() {
                return Err(Error::invalid(format!("sgd: job {j} of the cohort has another model or training set")));
            }
            if job.params.shapes() != shapes {
                return Err(Error::invalid(format!(
                    "sgd: job {j} of the cohort has (sub-)model shapes {:?}, the first job {shapes:?}",
                    job.params.shapes()
                )));
            }
            if job.indices.size()[0] == 0 {
                return Err(Error::invalid("sgd: the client has no samples"));
            }
        }
        let steps: Vec<usize> = jobs.iter().map(|j| sgd.total_steps(j.indices.size()[0] as usize)).collect();
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&j| std::cmp::Reverse(steps[j]));
        let stack =
            |f: &dyn Fn(&TrainJob) -> Tensor| Tensor::stack(&order.iter().map(|&j| f(&jobs[j])).collect::<Vec<_>>(), 0);
        let start: Vec<Tensor> =
            (0..names.len()).map(|i| stack(&|job| job.params.tensors()[i].shallow_clone())).collect();
        let params = start.iter().map(Tensor::copy).collect();
        let velocity = if sgd.cfg.momentum > 0.0 { start.iter().map(Tensor::zeros_like).collect() } else { Vec::new() };
        let masked = sgd.cfg.masking == Masking::Gradient;
        let grad_mask = (0..names.len())
            .map(|i| {
                let mask_of =
                    |job: &TrainJob| job.grad_mask.as_ref().and_then(|ms| ms[i].as_ref().map(Tensor::shallow_clone));
                (masked && jobs.iter().any(|j| mask_of(j).is_some()))
                    .then(|| stack(&|job| mask_of(job).unwrap_or_else(|| job.params.tensors()[i].ones_like())))
            })
            .collect();
        let noise = CohortNoise::new(order.iter().map(|&j| jobs[j].noise.clone()).collect(), device);
        let mut slots: Vec<Option<&mut TrainJob>> = jobs.iter_mut().map(Some).collect();
        let plans = order
            .iter()
            .map(|&j| {
                let job = slots[j].take().expect("each job once");
                ClientPlan {
                    indices: &job.indices,
                    samples: job.indices.size()[0] as usize,
                    steps: steps[j],
                    rng: &mut job.rng,
                }
            })
            .collect();
        let schedule = BatchSchedule::draw(plans, sgd.cfg.batch_size, device);
        Ok(SgdCohort {
            cfg: sgd.cfg.clone(),
            loss_sum: Tensor::zeros([jobs.len() as i64], (Kind::Float, device)),
            factors: [sgd.cfg.weight_decay, sgd.cfg.momentum, -sgd.cfg.lr]
                .map(|v| Tensor::from(v as f32).to_device(device)),
            trainable: model.structure().trainable(),
            model,
            data,
            names,
            order,
            params,
            start,
            velocity,
            grad_mask,
            schedule,
            noise,
            step: 0,
        })
    }

    fn clients(&self) -> usize {
        self.order.len()
    }

    /// One lockstep step `t` of the clients still training.
    fn sgd_step(&mut self, t: usize) {
        let (k, b) = self.schedule.shape(t);
        let (indices, weights) = self.schedule.batch(t);
        let flat = indices.reshape([-1]);
        let mut x_shape = vec![k, b];
        x_shape.extend(&self.data.x.size()[1..]);
        let x = self.data.x.index_select(0, &flat).reshape(x_shape.as_slice());
        let y = self.data.y.index_select(0, &flat);
        // Buffers (BatchNorm statistics) go in as views the forward pass updates in place.
        let inputs: Vec<Tensor> = self
            .params
            .iter()
            .zip(&self.trainable)
            .map(|(p, &t)| if t { p.narrow(0, 0, k).detach().set_requires_grad(true) } else { p.narrow(0, 0, k) })
            .collect();
        let valid = self.schedule.padded(t).then(|| weights.gt(0.0).to_kind(Kind::Float));
        let mut mode = Mode::Train(Training { noise: &mut self.noise, valid: valid.as_ref() });
        let logits = self.model.forward(&inputs, &x, &mut mode);
        let classes = *logits.size().last().expect("logits have a class dimension");
        let per_sample =
            logits.reshape([-1, classes]).cross_entropy_loss::<Tensor>(&y, None, Reduction::None, -100, 0.0);
        let per_client = (per_sample.reshape([k, b]) * &weights).sum_dim_intlist(1, false, Kind::Float);
        let mut seen = self.loss_sum.narrow(0, 0, k);
        seen += per_client.detach();
        let mut loss = per_client.sum(Kind::Float);
        let leaves: Vec<&Tensor> = inputs.iter().zip(&self.trainable).filter(|(_, t)| **t).map(|(p, _)| p).collect();
        if self.cfg.prox_mu > 0.0 {
            let prox = inputs
                .iter()
                .zip(&self.start)
                .zip(&self.trainable)
                .filter(|(_, t)| **t)
                .map(|((p, s), _)| (p - s.narrow(0, 0, k)).square().sum(Kind::Float))
                .reduce(|a, b| a + b)
                .expect("at least one trainable tensor");
            loss = loss + prox * (self.cfg.prox_mu / 2.0);
        }
        let mut leaf_grads = Tensor::run_backward(&[loss], &leaves, false, false).into_iter();
        let grads: Vec<Tensor> = self
            .trainable
            .iter()
            .map(|&t| if t { leaf_grads.next().expect("one gradient per leaf") } else { Tensor::new() })
            .collect();
        tch::no_grad(|| self.update(k, grads));
    }

    /// One SGD update of the first `k` clients. Each tensor is touched in as few passes as the
    /// options allow (the update runs out of memory bandwidth before compute): the fresh gradient
    /// absorbs weight decay, mask and momentum in place, and becomes the momentum buffer.
    fn update(&mut self, k: i64, grads: Vec<Tensor>) {
        let [decay, momentum, step] = &self.factors;
        let whole = k as usize == self.clients();
        for (i, g) in grads.into_iter().enumerate() {
            if !g.defined() {
                continue; // A tensor the loss does not reach does not move.
            }
            let mut g = if g.is_contiguous() { g } else { g.contiguous() };
            let mut p = self.params[i].narrow(0, 0, k);
            if self.cfg.weight_decay > 0.0 {
                let _ = g.addcmul_(&p, decay);
            }
            if let Some(m) = &self.grad_mask[i] {
                g *= m.narrow(0, 0, k);
            }
            if self.cfg.momentum > 0.0 {
                let _ = g.addcmul_(&self.velocity[i].narrow(0, 0, k), momentum);
                if whole {
                    self.velocity[i] = g.shallow_clone();
                } else {
                    self.velocity[i].narrow(0, 0, k).copy_(&g);
                }
            }
            let _ = p.addcmul_(&g, step);
        }
    }
}

impl TrainSession for SgdCohort {
    fn run_until(&mut self, share: f64) -> Result<()> {
        let until = if self.clients() == 1 {
            let total = self.schedule.total_steps();
            ((share.clamp(0.0, 1.0) * total as f64).round() as usize).min(total)
        } else if share >= 1.0 {
            self.schedule.total_steps()
        } else {
            return Err(Error::invalid("sgd: a cohort of several jobs trains whole jobs only (share 1)"));
        };
        while self.step < until {
            self.sgd_step(self.step);
            self.step += 1;
        }
        Ok(())
    }

    fn merge_pulled(&mut self, pulled: &ParamSet, _info: PullInfo) -> Result<()> {
        if self.clients() != 1 {
            return Err(Error::invalid("sgd: only a cohort of one job merges a pulled model"));
        }
        let shapes: Vec<Vec<i64>> = self.start.iter().map(|s| s.size()[1..].to_vec()).collect();
        if pulled.shapes() != shapes {
            return Err(Error::invalid("sgd: the pulled model's shapes differ from the job's (sub-)model"));
        }
        let beta = self.cfg.pull_weight;
        tch::no_grad(|| {
            for (p, q) in self.params.iter_mut().zip(pulled.tensors()) {
                let merged = &*p * (1.0 - beta) + q.unsqueeze(0) * beta;
                p.copy_(&merged);
            }
        });
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Vec<TrainOutcome>> {
        let losses = Vec::<f32>::try_from(self.loss_sum.to_device(Device::Cpu))
            .map_err(|e| Error::invalid(format!("sgd: reading the losses: {e}")))?;
        let mut outcomes: Vec<Option<TrainOutcome>> = (0..self.clients()).map(|_| None).collect();
        for (slot, &job) in self.order.iter().enumerate() {
            let done = self.step.min(self.schedule.steps()[slot]);
            let tensors = self.params.iter().map(|p| p.get(slot as i64)).collect();
            outcomes[job] = Some(TrainOutcome {
                params: ParamSet::new(self.names.clone(), tensors)?,
                mean_loss: f64::from(losses[slot]) / done.max(1) as f64,
                steps: done,
            });
        }
        Ok(outcomes.into_iter().map(|o| o.expect("every slot filled")).collect())
    }
}
