//! Mini-batch SGD with momentum, weight decay, an optional proximal term (FedProx) and
//! gradient masking, written directly on tensors so that every random draw comes from the
//! job's own streams. A model pulled mid-training is mixed in with weight `pull_weight`.
//!
//! Under an elementwise mask the client starts from the masked model (masked-out weights 0).
//! `masking = "gradient"` multiplies gradients by the mask so those weights stay 0 (the
//! KDD'23 paper); `"zero-init-only"` trains every weight and relies on the engine discarding
//! the masked-out part of the update afterwards (the KDD'23 code).

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::error::{Error, Result};
use crate::model::Mode;
use crate::params::ParamSet;
use crate::split::SplitConfig;
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

    fn total_steps(&self, samples: usize) -> usize {
        self.cfg.steps.unwrap_or_else(|| self.cfg.epochs * samples.div_ceil(self.cfg.batch_size))
    }
}

impl LocalTrainer for Sgd {
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

    fn start(&self, job: TrainJob) -> Result<Box<dyn TrainSession>> {
        let n = job.indices.size()[0] as usize;
        if n == 0 {
            return Err(Error::invalid("sgd: the client has no samples"));
        }
        let device = job.indices.device();
        let start = job.params.deep_clone();
        let params = start.tensors().iter().map(|t| t.detach().copy().set_requires_grad(true)).collect();
        let total_steps = self.total_steps(n);
        Ok(Box::new(SgdSession {
            cfg: self.cfg.clone(),
            velocity: job.params.tensors().iter().map(|_| None).collect(),
            params,
            start,
            order: (0..n as i64).collect(),
            epoch: None,
            position: 0,
            step: 0,
            total_steps,
            loss_sum: Tensor::zeros([], (Kind::Float, device)),
            job,
        }))
    }
}

struct SgdSession {
    cfg: SgdConfig,
    job: TrainJob,
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
            return Err(Error::invalid("sgd: the pulled model's shapes differ from the job's (sub-)model"));
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

    fn finish(self: Box<Self>) -> Result<TrainOutcome> {
        let steps = self.step.max(1);
        let mean_loss = (&self.loss_sum / steps as f64).double_value(&[]);
        let trained = self.params.into_iter().map(|p| p.detach()).collect();
        Ok(TrainOutcome { params: ParamSet::new(self.start.names().to_vec(), trained)?, mean_loss, steps: self.step })
    }
}

impl SgdSession {
    fn sgd_step(&mut self, batch: &Tensor) {
        let x = self.job.data.x.index_select(0, batch);
        let y = self.job.data.y.index_select(0, batch);
        let logits = self.job.model.forward(&self.params, &x, &mut Mode::Train(&mut self.job.noise));
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
