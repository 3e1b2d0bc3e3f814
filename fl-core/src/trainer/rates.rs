//! Per-step, per-client factors of a cohort's optimizer: learning rates (with their decay and
//! the client's delay scaling), Adam's and Adan's bias corrections, Adan's decoupled weight
//! decay, and where optimizer state restarts.
//!
//! Every factor depends only on the step, the client's epoch and the job's own delay and
//! version, all known before training, so the whole table is computed on the host once and
//! copied to the device once; the step loop slices it without a host round trip. A client's
//! factors are the same whether it trains alone or in a cohort.

use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

/// How the learning rate decays over a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LrDecay {
    /// The same rate at every step.
    #[default]
    Constant,
    /// lr / √(e + 1) in local epoch e (from 0): the experiments of asyncnc (Forootani and
    /// Iervolino, "Asynchronous Federated Learning with non-convex client objective functions
    /// and heterogeneous dataset", Sections 5.3 and 5.4: "t is the epoch number").
    InvSqrtEpoch,
    /// lr / √(s + 1) at local step s (from 0).
    InvSqrtStep,
    /// lr / √(t + 1) for a job starting from global version t: asyncnc's Lemma 3 (Forootani
    /// and Iervolino, Section 4).
    InvSqrtRound,
}

impl LrDecay {
    fn factor(self, epoch: usize, step: usize, version: u64) -> f64 {
        let t = match self {
            LrDecay::Constant => return 1.0,
            LrDecay::InvSqrtEpoch => epoch as f64,
            LrDecay::InvSqrtStep => step as f64,
            LrDecay::InvSqrtRound => version as f64,
        };
        1.0 / (t + 1.0).sqrt()
    }
}

/// How a job's delay d ([`crate::trainer::TrainJob::delay`]) scales its learning rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DelayScaling {
    /// lr / (1 + α·d), α the trainer's `delay_alpha` (0: no scaling).
    #[default]
    Penalty,
    /// lr · max(1, ln d): ASO-Fed's dynamic step size, a larger step for clients whose
    /// updates arrive late (d their mean staleness; 1 for d ≤ e).
    LogBoost,
    /// lr / max(1, d): FedSA's staleness-scaled rate (d the client's last staleness).
    Inverse,
}

impl DelayScaling {
    /// The factor of the learning rate for delay `d` (`alpha` for [`DelayScaling::Penalty`]).
    pub fn factor(self, d: f64, alpha: f64) -> f64 {
        match self {
            DelayScaling::Penalty => 1.0 / (1.0 + alpha * d),
            DelayScaling::LogBoost => d.ln().max(1.0),
            DelayScaling::Inverse => 1.0 / d.max(1.0),
        }
    }
}

/// What the table is computed from.
pub struct RateConfig {
    /// The base learning rate.
    pub lr: f64,
    /// How it decays over the job.
    pub decay: LrDecay,
    /// How the job's delay scales the rate.
    pub delay_scaling: DelayScaling,
    /// α of [`DelayScaling::Penalty`].
    pub delay_alpha: f64,
    /// The optimizer's moments, whose bias corrections the table holds.
    pub moments: Moments,
    /// Adan's decoupled weight decay λ: after each step w ← w / (1 + lr·λ) (0: none).
    pub decoupled_decay: f64,
    /// Whether optimizer state (momentum, Adam's moments and step count) restarts at every
    /// local epoch, as when the optimizer is re-created per epoch.
    pub reset_each_epoch: bool,
}

/// The moments an optimizer keeps, with their rates.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Moments {
    /// None (SGD; momentum needs no correction).
    #[default]
    None,
    /// Adam's (β₁, β₂).
    Adam(f64, f64),
    /// Adan's (β₁, β₂, β₃): gradient, gradient difference, squared Nesterov gradient.
    Adan(f64, f64, f64),
}

/// One client's inputs to the table.
pub struct ClientRates<'a> {
    /// Its local epoch at each of its steps.
    pub epochs: &'a [usize],
    /// The delay d of its job (see [`crate::trainer::TrainJob::delay`]).
    pub delay: f64,
    /// The global version its job started from.
    pub version: u64,
}

/// `[T, C]` factors on the device; a client past its last step has zeros.
pub struct RateTable {
    /// −lr, or −lr/(1 − β₁ᵗ) for Adam (the step applied to the update direction).
    pub step: Tensor,
    /// Adam: 1/√(1 − β₂ᵗ), which scales √v before ε is added (Adan: 1/√(1 − β₃ᵗ), for √n).
    pub inv_sqrt_bias2: Option<Tensor>,
    /// Adan: β₂ (1 − β₁ᵗ)/(1 − β₂ᵗ), the weight of the difference moment beside the first
    /// moment in the direction `step` scales.
    pub diff_weight: Option<Tensor>,
    /// 1/(1 + lr·λ): Adan's decoupled weight decay after the step.
    pub shrink: Option<Tensor>,
    /// 0 where the client's optimizer state restarts, 1 elsewhere (with `reset_each_epoch`).
    pub keep: Option<Tensor>,
    /// `step` on the host, `[T, C]` row-major.
    host_step: Vec<f32>,
    clients: usize,
}

impl RateTable {
    /// The table of `clients` (in cohort order), on `device`: `T` is the most steps any
    /// client makes.
    pub fn new(cfg: &RateConfig, clients: &[ClientRates], device: Device) -> RateTable {
        let total = clients.iter().map(|c| c.epochs.len()).max().unwrap_or(0);
        let cells = total * clients.len();
        let mut step = vec![0f32; cells];
        let mut bias2 = vec![0f32; cells];
        let mut diff_weight = vec![0f32; cells];
        let mut shrink = vec![1f32; cells];
        let mut keep = vec![1f32; cells];
        for (c, client) in clients.iter().enumerate() {
            let delay_factor = cfg.delay_scaling.factor(client.delay, cfg.delay_alpha);
            let mut since_reset = 0usize;
            for (s, &epoch) in client.epochs.iter().enumerate() {
                let at = s * clients.len() + c;
                let restart = s == 0 || (cfg.reset_each_epoch && epoch != client.epochs[s - 1]);
                if restart {
                    since_reset = 0;
                    keep[at] = 0.0;
                }
                since_reset += 1;
                let lr = cfg.lr * cfg.decay.factor(epoch, s, client.version) * delay_factor;
                let bias = |beta: f64| 1.0 - beta.powi(since_reset as i32);
                step[at] = match cfg.moments {
                    Moments::None => -lr as f32,
                    Moments::Adam(b1, b2) => {
                        bias2[at] = (1.0 / bias(b2).sqrt()) as f32;
                        (-lr / bias(b1)) as f32
                    }
                    Moments::Adan(b1, b2, b3) => {
                        bias2[at] = (1.0 / bias(b3).sqrt()) as f32;
                        diff_weight[at] = (b2 * bias(b1) / bias(b2)) as f32;
                        (-lr / bias(b1)) as f32
                    }
                };
                shrink[at] = (1.0 / (1.0 + lr * cfg.decoupled_decay)) as f32;
            }
        }
        let table = |v: &[f32]| Tensor::from_slice(v).reshape([total as i64, clients.len() as i64]).to_device(device);
        RateTable {
            step: table(&step),
            inv_sqrt_bias2: (cfg.moments != Moments::None).then(|| table(&bias2)),
            diff_weight: matches!(cfg.moments, Moments::Adan(..)).then(|| table(&diff_weight)),
            shrink: (cfg.decoupled_decay > 0.0).then(|| table(&shrink)),
            keep: cfg.reset_each_epoch.then(|| table(&keep)),
            host_step: step,
            clients: clients.len(),
        }
    }

    /// The tables on the device (step, then the optional ones that exist), which a kept
    /// cohort's graphs read where they are ([`crate::trainer::kept_steps`]).
    pub(crate) fn tables_mut(&mut self) -> Vec<&mut Tensor> {
        let optional = [&mut self.inv_sqrt_bias2, &mut self.diff_weight, &mut self.shrink, &mut self.keep];
        std::iter::once(&mut self.step).chain(optional.into_iter().flatten()).collect()
    }

    /// The sum of client `c`'s step sizes over its first `steps` steps (η·steps for a constant
    /// SGD rate).
    pub fn step_sum(&self, c: usize, steps: usize) -> f64 {
        (0..steps).map(|s| -f64::from(self.host_step[s * self.clients + c])).sum()
    }
}
