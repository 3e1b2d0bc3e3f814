//! Mini-batch SGD with momentum, weight decay, an optional proximal term (FedProx) and
//! gradient masking, written directly on tensors so that every random draw comes from the
//! job's own streams.

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::error::{Error, Result};
use crate::model::Mode;
use crate::params::ParamSet;
use crate::trainer::{LocalTrainer, TrainJob, TrainOutcome};

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
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig { lr: 0.05, batch_size: 32, epochs: 1, steps: None, momentum: 0.0, weight_decay: 0.0, prox_mu: 0.0 }
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
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(format!("momentum: expected a value in [0, 1), got {}", self.momentum));
        }
        if self.weight_decay < 0.0 || self.prox_mu < 0.0 {
            return Err("weight_decay and prox_mu must be non-negative".into());
        }
        Ok(())
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

    fn step_count(&self, samples: usize) -> usize {
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

    fn train(&self, mut job: TrainJob) -> Result<TrainOutcome> {
        let n = job.indices.size()[0] as usize;
        if n == 0 {
            return Err(Error::invalid("sgd: the client has no samples"));
        }
        let device = job.indices.device();
        let start = job.params.deep_clone();
        let mut params: Vec<Tensor> =
            start.tensors().iter().map(|t| t.detach().copy().set_requires_grad(true)).collect();
        let mut velocity: Vec<Option<Tensor>> = params.iter().map(|_| None).collect();
        let total_steps = self.step_count(n);
        let mut order: Vec<i64> = (0..n as i64).collect();
        let mut loss_sum = Tensor::zeros([], (Kind::Float, device));
        let mut step = 0;
        while step < total_steps {
            order.shuffle(&mut job.rng);
            let epoch = job.indices.index_select(0, &Tensor::from_slice(&order).to_device(device));
            let mut begin = 0;
            while begin < n && step < total_steps {
                let len = self.cfg.batch_size.min(n - begin);
                let batch = epoch.narrow(0, begin as i64, len as i64);
                let x = job.data.x.index_select(0, &batch);
                let y = job.data.y.index_select(0, &batch);
                let logits = job.model.forward(&params, &x, &mut Mode::Train(&mut job.noise));
                let mut loss = logits.cross_entropy_for_logits(&y);
                loss_sum += loss.detach();
                if self.cfg.prox_mu > 0.0 {
                    let prox = params
                        .iter()
                        .zip(start.tensors())
                        .map(|(p, s)| (p - s).square().sum(Kind::Float))
                        .reduce(|a, b| a + b)
                        .expect("at least one tensor");
                    loss = loss + prox * (self.cfg.prox_mu / 2.0);
                }
                for p in params.iter_mut() {
                    p.zero_grad();
                }
                loss.backward();
                tch::no_grad(|| self.update(&mut params, &mut velocity, job.grad_mask.as_deref()));
                begin += len;
                step += 1;
            }
        }
        let mean_loss = (loss_sum / step as f64).double_value(&[]);
        let trained = params.into_iter().map(|p| p.detach()).collect();
        Ok(TrainOutcome { params: ParamSet::new(start.names().to_vec(), trained)?, mean_loss, steps: step })
    }
}

impl Sgd {
    fn update(&self, params: &mut [Tensor], velocity: &mut [Option<Tensor>], grad_mask: Option<&[Option<Tensor>]>) {
        for (i, p) in params.iter_mut().enumerate() {
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
                g = match velocity[i].take() {
                    Some(v) => v * self.cfg.momentum + g,
                    None => g.copy(),
                };
                velocity[i] = Some(g.shallow_clone());
            }
            *p -= g * self.cfg.lr;
        }
    }
}
