//! FedProx's Synthetic(α, β) data (Li et al., "Federated Optimization in Heterogeneous
//! Networks", MLSys 2020, §5.1 and `data/synthetic_*/generate_synthetic.py` of their code),
//! registered as the dataset `synthetic`. It is naturally federated: the loader returns each
//! device's own training samples as `natural_partition`, and the experiment's `clients` must
//! equal the `devices` parameter.
//!
//! For each device k:
//! - n_k = ⌊lognormal(μ = 4, σ = 2)⌋ + 50 samples (the power law of the FedProx code);
//! - u_k ~ N(0, α), W_k ~ N(u_k, 1) (`classes × dim`), b_k ~ N(u_k, 1) (`classes`);
//! - B_k ~ N(0, β), v_k ~ N(B_k, 1) (`dim`);
//! - x ~ N(v_k, Σ) with Σ diagonal, Σ_jj = j^(-1.2) (j = 1..dim);
//! - y = argmax(softmax(W_k x + b_k)).
//!
//! As in the FedProx code, α and β are standard deviations (numpy's `scale`). Note what this
//! implies: every entry of W_k and b_k shares the mean u_k, so u_k adds the same amount
//! u_k (1 + Σ_j x_j) to every class's logit and cannot change the argmax. The data therefore
//! do not depend on α at all (the test `alpha_does_not_change_the_data` shows it); β, which
//! moves each device's inputs, is what makes devices differ. We keep α for fidelity.
//!
//! Deviations from the FedProx code: the last `test_fraction` (default 20%) of each device's
//! samples form the pooled test set (FedProx shuffles and holds out 10% per device; samples
//! of a device are i.i.d., so taking the last ones is the same in distribution); the random
//! numbers come from the run's `DATASET` stream, not numpy's, so the values differ while the
//! distributions agree.

use fl_core::registry::{Builder, Component, DataContext, defaults_of};
use fl_core::rng::{self, Rng, tag};
use fl_core::{DataSpec, Dataset, FederatedData, InvalidKey, Result};
use rand_distr::{Distribution, LogNormal, StandardNormal};
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

/// Parameters of `synthetic`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyntheticConfig {
    /// Standard deviation of the per-device model mean u_k.
    pub alpha: f64,
    /// Standard deviation of the per-device input mean B_k.
    pub beta: f64,
    /// Input dimension.
    pub dim: usize,
    pub classes: usize,
    /// Number of devices; must equal the experiment's `clients`.
    pub devices: usize,
    /// Share of each device's samples (its last ones) held out into the test set.
    pub test_fraction: f64,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        SyntheticConfig { alpha: 1.0, beta: 1.0, dim: 60, classes: 10, devices: 30, test_fraction: 0.2 }
    }
}

impl SyntheticConfig {
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.alpha >= 0.0 && self.alpha.is_finite()) {
            return Err(InvalidKey::new("alpha", format!("must be a finite number >= 0, got {}", self.alpha)));
        }
        if !(self.beta >= 0.0 && self.beta.is_finite()) {
            return Err(InvalidKey::new("beta", format!("must be a finite number >= 0, got {}", self.beta)));
        }
        if self.dim == 0 {
            return Err(InvalidKey::new("dim", "must be at least 1"));
        }
        if self.classes < 2 {
            return Err(InvalidKey::new("classes", format!("must be at least 2, got {}", self.classes)));
        }
        if self.devices == 0 {
            return Err(InvalidKey::new("devices", "must be at least 1"));
        }
        if !(0.0..0.9).contains(&self.test_fraction) {
            return Err(InvalidKey::new("test_fraction", format!("must be in [0, 0.9), got {}", self.test_fraction)));
        }
        Ok(())
    }
}

/// The generated data on the host: inputs row-major `[n, dim]`, labels, and each device's
/// sample count before the train/test split.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticHost {
    pub x: Vec<f32>,
    pub y: Vec<i64>,
    pub per_device: Vec<usize>,
}

/// Draws every device's samples, device after device, from `rng`. The draw order is fixed:
/// all n_k, all u_k, all B_k, then per device v_k, then per device W_k, b_k and its samples.
pub fn generate(cfg: &SyntheticConfig, rng: &mut Rng) -> SyntheticHost {
    let (dim, classes, devices) = (cfg.dim, cfg.classes, cfg.devices);
    let normal = |rng: &mut Rng| -> f64 { StandardNormal.sample(rng) };
    let lognormal = LogNormal::new(4.0, 2.0).expect("constant parameters are valid");
    let per_device: Vec<usize> = (0..devices).map(|_| lognormal.sample(rng) as usize + 50).collect();
    let u: Vec<f64> = (0..devices).map(|_| cfg.alpha * normal(rng)).collect();
    let big_b: Vec<f64> = (0..devices).map(|_| cfg.beta * normal(rng)).collect();
    let v: Vec<Vec<f64>> = big_b.iter().map(|&b| (0..dim).map(|_| b + normal(rng)).collect()).collect();
    let sd: Vec<f64> = (1..=dim).map(|j| (j as f64).powf(-1.2).sqrt()).collect();
    let total: usize = per_device.iter().sum();
    let mut x = Vec::with_capacity(total * dim);
    let mut y = Vec::with_capacity(total);
    let mut sample = vec![0.0f64; dim];
    for k in 0..devices {
        let w: Vec<f64> = (0..classes * dim).map(|_| u[k] + normal(rng)).collect();
        let b: Vec<f64> = (0..classes).map(|_| u[k] + normal(rng)).collect();
        for _ in 0..per_device[k] {
            for j in 0..dim {
                sample[j] = v[k][j] + sd[j] * normal(rng);
            }
            // softmax is monotone, so the argmax of the logits is the argmax of the softmax.
            let mut best = (f64::NEG_INFINITY, 0);
            for c in 0..classes {
                let row = &w[c * dim..(c + 1) * dim];
                let logit = b[c] + row.iter().zip(&sample).map(|(a, s)| a * s).sum::<f64>();
                if logit > best.0 {
                    best = (logit, c);
                }
            }
            x.extend(sample.iter().map(|&s| s as f32));
            y.push(best.1 as i64);
        }
    }
    SyntheticHost { x, y, per_device }
}

/// Builds the federated data: train = each device's first samples, test = their last
/// `test_fraction`, and `natural_partition[k]` = device k's indices in the pooled train set.
pub fn build(cfg: &SyntheticConfig, seed: u64, device: Device) -> FederatedData {
    let host = generate(cfg, &mut rng::stream(seed, &[tag::DATASET]));
    let dim = cfg.dim;
    let (mut train_x, mut train_y, mut test_x, mut test_y) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut partition = Vec::with_capacity(cfg.devices);
    let mut start = 0;
    for &n in &host.per_device {
        let n_test = (n as f64 * cfg.test_fraction).floor() as usize;
        let n_train = n - n_test;
        let first = train_y.len() as i64;
        partition.push((first..first + n_train as i64).collect());
        train_x.extend_from_slice(&host.x[start * dim..(start + n_train) * dim]);
        train_y.extend_from_slice(&host.y[start..start + n_train]);
        test_x.extend_from_slice(&host.x[(start + n_train) * dim..(start + n) * dim]);
        test_y.extend_from_slice(&host.y[start + n_train..start + n]);
        start += n;
    }
    let dataset = |x: &[f32], y: &[i64]| Dataset {
        x: Tensor::from_slice(x).view([y.len() as i64, dim as i64]).to_device(device),
        y: Tensor::from_slice(y).to_device(device),
    };
    FederatedData {
        train: dataset(&train_x, &train_y),
        test: dataset(&test_x, &test_y),
        spec: DataSpec { input_shape: vec![dim as i64], classes: cfg.classes as i64, vocab_size: None },
        natural_partition: Some(partition),
    }
}

fn build_component(params: &fl_core::Params, ctx: &DataContext) -> Result<FederatedData> {
    let cfg: SyntheticConfig = params.parse_valid(SyntheticConfig::validate)?;
    Ok(build(&cfg, ctx.seed, ctx.device))
}

inventory::submit! {
    Component {
        name: "synthetic",
        summary: "FedProx's Synthetic(alpha, beta): per-device softmax models, lognormal sizes, natural partition over `devices` clients",
        paper: "Li et al., Federated Optimization in Heterogeneous Networks, MLSys 2020",
        defaults: defaults_of::<SyntheticConfig>,
        build: Builder::Dataset(build_component),
        origin: module_path!(),
    }
}
