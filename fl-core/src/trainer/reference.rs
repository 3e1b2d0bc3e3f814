//! The per-client SGD loop that preceded cohort training, kept as a test oracle: one client at
//! a time, a host shuffle at each epoch, mean-reduced batch losses, one tensor op per tensor
//! and step. The equivalence tests train the same jobs with [`super::sgd::Sgd`] in cohorts and
//! with this loop, and require the same parameters (to rounding); it is not a component.

use rand::seq::SliceRandom;
use tch::{Kind, Tensor};

use crate::error::{Result, TrainerError};
use crate::model::{Mode, forward_one};
use crate::params::ParamSet;
use crate::rng::CohortNoise;
use crate::trainer::sgd::{Masking, Sgd, SgdConfig};
use crate::trainer::{LocalTrainer, PullInfo, TrainJob, TrainOutcome, TrainSession};

/// The name its errors begin with.
const NAME: &str = "reference sgd";

/// SGD one job at a time (cohorts of one), with the configuration of [`Sgd`].
#[derive(Debug, Clone)]
pub struct ReferenceSgd {
    sgd: Sgd,
}

impl ReferenceSgd {
    /// The reference loop with `cfg` (not validated here). It implements plain SGD with
    /// momentum, weight decay, the proximal term, gradient masking and pulls; it ignores
    /// `optimizer`, `lr_decay`, `delay_alpha`, `reset_each_epoch` and `patience`.
    pub fn new(cfg: SgdConfig) -> Self {
        ReferenceSgd { sgd: Sgd::new(cfg) }
    }
}

impl LocalTrainer for ReferenceSgd {
    fn sample_passes(&self, samples: usize, batch: Option<usize>) -> f64 {
        self.sgd.sample_passes(samples, batch)
    }

    fn steps(&self, samples: usize, batch: Option<usize>) -> f64 {
        self.sgd.steps(samples, batch)
    }

    fn split(&self) -> Option<&crate::split::SplitConfig> {
        self.sgd.split()
    }

    fn start(&self, mut jobs: Vec<TrainJob>) -> Result<Box<dyn TrainSession>> {
        let count = jobs.len();
        let (Some(job), true) = (jobs.pop(), jobs.is_empty()) else {
            return Err(TrainerError::OneJobOnly { trainer: NAME, jobs: count }.into());
        };
        let n = job.indices.size()[0] as usize;
        if n == 0 {
            return Err(TrainerError::NoSamples { trainer: NAME }.into());
        }
        let device = job.indices.device();
        let start = job.params.deep_clone();
        // Buffers and frozen tensors take no gradient, so they never move.
        let params = start
            .tensors()
            .iter()
            .zip(job.trainable())
            .map(|(t, on)| t.detach().copy().set_requires_grad(on))
            .collect();
        let noise = CohortNoise::new(vec![job.noise.clone()], device);
        let batch_size = job.batch_size.unwrap_or(self.sgd.config().batch_size);
        Ok(Box::new(SgdSession {
            cfg: SgdConfig { batch_size, ..self.sgd.config().clone() },
            velocity: job.params.tensors().iter().map(|_| None).collect(),
            params,
            start,
            order: (0..n as i64).collect(),
            epoch: None,
            position: 0,
            step: 0,
            total_steps: self.sgd.total_steps(n, Some(batch_size)),
            loss_sum: Tensor::zeros([], (Kind::Float, device)),
            noise,
            job,
        }))
    }
}

struct SgdSession {
    cfg: SgdConfig,
    job: TrainJob,
    noise: CohortNoise,
    start: ParamSet,
    params: Vec<Tensor>,
    velocity: Vec<Option<Tensor>>,
    /// The current epoch's sample order (indices into the training set) and the position in it.
    order: Vec<i64>,
    epoch: Option<Tensor>,
    position: usize,
    step: usize,
    total_steps: usize,
    loss_sum: Tensor,
}

impl TrainSession for SgdSession {
    fn run_until(&mut self, share: f64) -> Result<()> {
        let until = ((share.clamp(0.0, 1.0) * self.total_steps as f64).round() as usize).min(self.total_steps);
        let n = self.order.len();
        let device = self.job.indices.device();
        while self.step < until {
            if self.epoch.is_none() || self.position >= n {
                self.order.shuffle(&mut self.job.rng);
                let perm = Tensor::from_slice(&self.order).to_device(device);
                self.epoch = Some(self.job.indices.index_select(0, &perm));
                self.position = 0;
            }
            let len = self.cfg.batch_size.min(n - self.position);
            let batch = self.epoch.as_ref().expect("epoch drawn above").narrow(0, self.position as i64, len as i64);
            self.sgd_step(&batch);
            self.position += len;
            self.step += 1;
        }
        Ok(())
    }

    fn merge_pulled(&mut self, pulled: &ParamSet, _info: PullInfo) -> Result<()> {
        if pulled.shapes() != self.start.shapes() {
            return Err(TrainerError::PulledShapes { trainer: NAME }.into());
        }
        let beta = self.cfg.pull_weight;
        tch::no_grad(|| {
            for (p, q) in self.params.iter_mut().zip(pulled.tensors()) {
                let merged = &*p * (1.0 - beta) + q * beta;
                p.copy_(&merged);
            }
        });
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Vec<TrainOutcome>> {
        let steps = self.step.max(1);
        let mean_loss = (&self.loss_sum / steps as f64).double_value(&[]);
        let trained = self.params.into_iter().map(|p| p.detach()).collect();
        Ok(vec![TrainOutcome {
            state: None,
            kept_units: None,
            params: ParamSet::new(self.start.names().to_vec(), trained)?,
            mean_loss,
            steps: self.step,
            lr_sum: self.cfg.lr * self.step as f64,
            pull_merge: None,
        }])
    }
}

impl SgdSession {
    fn sgd_step(&mut self, batch: &Tensor) {
        let x = self.job.data.x.index_select(0, batch);
        let y = self.job.data.y.index_select(0, batch);
        let logits = forward_one(&*self.job.model, &self.params, &x, &mut Mode::train(&mut self.noise));
        let mut loss = logits.cross_entropy_for_logits(&y);
        self.loss_sum += loss.detach();
        if self.cfg.prox_mu > 0.0 {
            let prox = self
                .params
                .iter()
                .zip(self.start.tensors())
                .map(|(p, s)| (p - s).square().sum(Kind::Float))
                .reduce(|a, b| a + b)
                .expect("at least one tensor");
            loss = loss + prox * (self.cfg.prox_mu / 2.0);
        }
        for p in self.params.iter_mut() {
            p.zero_grad();
        }
        loss.backward();
        tch::no_grad(|| self.update());
    }

    fn update(&mut self) {
        let grad_mask = self.job.grad_mask.as_deref().filter(|_| self.cfg.masking == Masking::Gradient);
        for (i, p) in self.params.iter_mut().enumerate() {
            let mut g = p.grad();
            if !g.defined() {
                continue;
            }
            if self.cfg.weight_decay > 0.0 {
                g = g + &*p * self.cfg.weight_decay;
            }
            if let Some(Some(m)) = grad_mask.map(|ms| &ms[i]) {
                g = g * m;
            }
            if self.cfg.momentum > 0.0 {
                g = match self.velocity[i].take() {
                    Some(v) => v * self.cfg.momentum + g,
                    None => g.copy(),
                };
                self.velocity[i] = Some(g.shallow_clone());
            }
            *p -= g * self.cfg.lr;
        }
    }
}
