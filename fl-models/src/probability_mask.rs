//! `probability-mask`: FedPM's client network, a frozen network whose weights are kept or
//! dropped by a learned probability mask.
//!
//! Isik, Pase, Gunduz, Weissman and Zorzi, "Sparse Random Networks for Communication-Efficient
//! Federated Learning", ICLR 2023 (arXiv:2209.15328). The weights `w` of the `base` network are
//! drawn once (its initialisation from `weights_seed`, or its pretrained weights) and never
//! trained. The model's parameters are *scores* `s`, one per weight, with keep-probabilities
//! `θ = sigmoid(s)`: in training each forward pass samples a mask `m ~ Bernoulli(θ)` from the
//! client's noise stream and runs the base network on `w ⊙ m`, the gradient reaching `s`
//! through the straight-through estimator (`∂L/∂θ := ∂L/∂m`); in evaluation the mask is the
//! most likely one, `θ > ½`. Buffers (BatchNorm statistics) are the base network's own and
//! pass through unmasked. The server side is the `bayesian-mask` aggregator.
//!
//! Scores start at `logit(initial_probability)` (½: scores 0). The base network's cost model,
//! unit groups and activation count are reused as they are. Two simplifications: the frozen
//! weights live on the host and are copied to the parameters' device at each forward pass (free
//! on the CPU, a transfer per step on a GPU), and a job is priced as the base model's size each
//! way, while FedPM uploads one bit per weight.

use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::rng::{self, Rng};
use fl_core::{DataSpec, Error, InvalidKey, Mode, Model, ModelFromConfig, ParamSet, Result, Structure};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;
use std::sync::Arc;
use tch::{Kind, Tensor};

/// The model's registered name.
const NAME: &str = "probability-mask";

/// Parameters of the `probability-mask` component.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbabilityMaskConfig {
    /// The frozen network's `[model]` table: its `name` and that model's keys.
    pub base: fl_core::toml::Table,
    /// Seed of the frozen weights' draw.
    #[default(0)]
    pub weights_seed: u64,
    /// Every weight's keep-probability at the start, in (0, 1).
    #[default(0.5)]
    pub initial_probability: f64,
}

impl ProbabilityMaskConfig {
    /// Checks the base table has a name and the probability is inside (0, 1).
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !self.base.get("name").is_some_and(|n| n.is_str()) {
            return Err(InvalidKey::new("base", "the frozen network's table needs a `name` (a model, e.g. \"vit\")"));
        }
        if !(self.initial_probability > 0.0 && self.initial_probability < 1.0) {
            return Err(InvalidKey::new(
                "initial_probability",
                format!("must be in (0, 1), got {}", self.initial_probability),
            ));
        }
        Ok(())
    }
}

/// FedPM's network; see the module documentation.
pub struct ProbabilityMask {
    base: Arc<dyn Model>,
    /// Per tensor: the frozen weights (row-major) for a trained tensor, `None` for a buffer.
    weights: Vec<Option<Vec<f32>>>,
    /// Per tensor: the base network's fresh values for its buffers.
    buffers: Vec<Option<Vec<f32>>>,
    initial_score: f64,
}

impl std::fmt::Debug for ProbabilityMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbabilityMask").field("tensors", &self.weights.len()).finish()
    }
}

impl ProbabilityMask {
    /// The masked network over the base model `cfg.base` for `spec`.
    pub fn new(cfg: ProbabilityMaskConfig, spec: &DataSpec) -> Result<ProbabilityMask> {
        cfg.validate().map_err(|key| fl_core::ModelError::Config { model: NAME, key })?;
        let mut table = cfg.base.clone();
        let name = table.remove("name").and_then(|n| n.as_str().map(String::from)).expect("validated");
        if name == NAME {
            return Err(Error::component(NAME, "base: a probability mask cannot wrap another one"));
        }
        let registry = Registry::get()?;
        let component = registry.component(ComponentKind::Model, &name, "experiment", "model.base.name")?;
        let Builder::Model(build) = component.build else { unreachable!("the registry keys builders by kind") };
        let base = build(&Params::new("experiment", "model.base", table), spec)?;
        let fresh = base.init(&mut rng::stream(cfg.weights_seed, &[rng::tag::MODEL_INIT]));
        let host =
            |t: &Tensor| Vec::<f32>::try_from(t.to_kind(Kind::Float).contiguous().view(-1)).expect("float values");
        let trainable = base.structure().trainable();
        let weights = fresh.tensors().iter().zip(&trainable).map(|(t, &on)| on.then(|| host(t))).collect();
        let buffers = fresh.tensors().iter().zip(&trainable).map(|(t, &on)| (!on).then(|| host(t))).collect();
        let p = cfg.initial_probability;
        Ok(ProbabilityMask { base, weights, buffers, initial_score: (p / (1.0 - p)).ln() })
    }

    /// The weights the base network runs on: each trained tensor's frozen weights times its
    /// mask (sampled with a straight-through gradient in training, `θ > ½` in evaluation);
    /// buffers as they are.
    fn effective(&self, scores: &[Tensor], mode: &mut Mode) -> Vec<Tensor> {
        let shapes = self.base.structure().shapes();
        scores
            .iter()
            .enumerate()
            .map(|(i, s)| match &self.weights[i] {
                None => s.shallow_clone(),
                Some(w) => {
                    let w = Tensor::from_slice(w).reshape(shapes[i].as_slice()).to_device(s.device()).unsqueeze(0);
                    let theta = s.sigmoid();
                    let mask = match mode {
                        Mode::Train(t) => {
                            let sampled = t.noise.uniform(&s.size()).lt_tensor(&theta.detach()).to_kind(Kind::Float);
                            // Straight through: the sampled value forward, θ's gradient backward.
                            &theta + (sampled - theta.detach())
                        }
                        Mode::Eval => theta.gt(0.5).to_kind(Kind::Float),
                    };
                    w * mask
                }
            })
            .collect()
    }
}

impl Model for ProbabilityMask {
    fn structure(&self) -> &Structure {
        self.base.structure()
    }

    /// No: each forward pass copies the frozen weights from the host.
    fn replayable(&self) -> bool {
        false
    }

    /// Scores `logit(initial_probability)` for the trained tensors, the base network's fresh
    /// buffers; draws nothing (the frozen weights come from `weights_seed`).
    fn init(&self, _rng: &mut Rng) -> ParamSet {
        let structure = self.base.structure();
        let tensors = structure
            .tensors
            .iter()
            .zip(&self.buffers)
            .map(|(spec, buffer)| match buffer {
                Some(values) => Tensor::from_slice(values).reshape(spec.shape.as_slice()),
                None => Tensor::full(spec.shape.as_slice(), self.initial_score, (Kind::Float, tch::Device::Cpu)),
            })
            .collect();
        ParamSet::new(structure.names(), tensors).expect("one tensor per structure entry")
    }

    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let effective = self.effective(body, mode);
        self.base.features(&effective, x, mode)
    }

    fn forward(&self, params: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let effective = self.effective(params, mode);
        self.base.forward(&effective, x, mode)
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        self.base.flops_per_tensor(shapes)
    }

    fn activation_floats(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        // The base network's, plus each trained tensor's mask and effective weights per client
        // (not per sample: left out).
        self.base.activation_floats(shapes)
    }
}

impl ModelFromConfig for ProbabilityMask {
    type Config = ProbabilityMaskConfig;

    fn validate(config: &ProbabilityMaskConfig) -> std::result::Result<(), InvalidKey> {
        config.validate()
    }

    fn from_config(config: ProbabilityMaskConfig, spec: &DataSpec) -> Result<Self> {
        ProbabilityMask::new(config, spec)
    }
}

fl_core::register!(Model "probability-mask" => ProbabilityMask,
    summary: "FedPM's network: a frozen base network (`base = { name = ... }`) whose weights a learned Bernoulli mask keeps (scores trained through a straight-through estimator)",
    paper: "Isik, Pase, Gunduz, Weissman and Zorzi, Sparse Random Networks for Communication-Efficient Federated Learning (FedPM), ICLR 2023");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{input, labels, noise};
    use fl_core::forward_one;
    use rand::SeedableRng;

    fn mnist() -> DataSpec {
        DataSpec { input_shape: vec![1, 6, 6], classes: 4, vocab_size: None }
    }

    fn masked(base: &str, p: f64) -> ProbabilityMask {
        let cfg = ProbabilityMaskConfig { base: base.parse().unwrap(), weights_seed: 7, initial_probability: p };
        ProbabilityMask::new(cfg, &mnist()).unwrap()
    }

    /// The frozen weights as tensors of the base model's shapes.
    fn frozen(m: &ProbabilityMask) -> Vec<Tensor> {
        let shapes = m.structure().shapes();
        m.weights
            .iter()
            .zip(&shapes)
            .map(|(w, s)| Tensor::from_slice(w.as_ref().unwrap()).reshape(s.as_slice()))
            .collect()
    }

    #[test]
    fn scores_start_at_the_initial_probability_and_the_weights_at_the_bases_draw() {
        let m = masked("name = \"mlp\"\nhidden = [5]", 0.8);
        let p = m.init(&mut Rng::seed_from_u64(1));
        let want = (0.8f64 / 0.2).ln();
        assert!(p.tensors().iter().all(|t| (t - want).abs().max().double_value(&[]) < 1e-6));
        // The frozen weights are the base model's initialisation from weights_seed.
        let base = masked("name = \"mlp\"\nhidden = [5]", 0.5);
        let draw = base.base.init(&mut rng::stream(7, &[rng::tag::MODEL_INIT]));
        assert!(frozen(&m).iter().zip(draw.tensors()).all(|(a, b)| a.equal(b)));
    }

    #[test]
    fn evaluation_runs_the_base_on_the_weights_whose_probability_exceeds_a_half() {
        let m = masked("name = \"mlp\"\nhidden = [5]", 0.5);
        let scores: Vec<Tensor> =
            m.structure().shapes().iter().enumerate().map(|(i, s)| input(s, 3 + i as u64)).collect();
        let x = input(&[7, 1, 6, 6], 2);
        let got = forward_one(&m, &scores, &x, &mut Mode::Eval);
        let kept: Vec<Tensor> =
            frozen(&m).iter().zip(&scores).map(|(w, s)| w * s.gt(0.0).to_kind(Kind::Float)).collect();
        let want = forward_one(m.base.as_ref(), &kept, &x, &mut Mode::Eval);
        assert!(got.allclose(&want, 1e-6, 1e-6, false));
    }

    #[test]
    fn training_samples_masks_from_the_clients_stream_with_a_straight_through_gradient() {
        let m = masked("name = \"mlp\"\nhidden = [5]", 0.5);
        let shapes = m.structure().shapes();
        let scores: Vec<Tensor> =
            shapes.iter().enumerate().map(|(i, s)| input(s, 30 + i as u64).set_requires_grad(true)).collect();
        let (x, y) = (input(&[9, 1, 6, 6], 4), labels(9, 4));
        forward_one(&m, &scores, &x, &mut Mode::train(&mut noise(11))).cross_entropy_for_logits(&y).backward();
        // The same draws by hand: each tensor's uniform noise below θ keeps the weight.
        let mut stream = noise(11);
        let masks: Vec<Tensor> = scores
            .iter()
            .map(|s| {
                let theta = s.detach().sigmoid().unsqueeze(0);
                stream.uniform(&theta.size()).lt_tensor(&theta).to_kind(Kind::Float).squeeze_dim(0)
            })
            .collect();
        let effective: Vec<Tensor> =
            frozen(&m).iter().zip(&masks).map(|(w, k)| (w * k).set_requires_grad(true)).collect();
        forward_one(m.base.as_ref(), &effective, &x, &mut Mode::train(&mut noise(99)))
            .cross_entropy_for_logits(&y)
            .backward();
        for (i, ((s, e), w)) in scores.iter().zip(&effective).zip(frozen(&m)).enumerate() {
            // ∂L/∂s = ∂L/∂(w ⊙ m) ⊙ w ⊙ σ'(s): the mask's gradient taken as θ's.
            let theta = s.detach().sigmoid();
            let want = e.grad() * w * &theta * (1.0 - &theta);
            assert!(s.grad().allclose(&want, 1e-5, 1e-7, false), "tensor {i}");
        }
        let kept = masks.iter().map(|k| k.sum(Kind::Double).double_value(&[])).sum::<f64>();
        let total = shapes.iter().map(|s| s.iter().product::<i64>() as f64).sum::<f64>();
        assert!(kept > 0.2 * total && kept < 0.8 * total, "kept {kept} of {total}");
    }

    #[test]
    fn bad_configs_name_their_key() {
        let bad = |base: &str, p: f64| {
            let cfg = ProbabilityMaskConfig { base: base.parse().unwrap(), weights_seed: 0, initial_probability: p };
            ProbabilityMask::new(cfg, &mnist()).unwrap_err().to_string()
        };
        assert!(bad("hidden = [5]", 0.5).contains("base"));
        assert!(bad("name = \"mlp\"", 1.0).contains("initial_probability"));
        assert!(bad("name = \"probability-mask\"", 0.5).contains("cannot wrap"));
        assert!(bad("name = \"mlp\"\nwidth = 3", 0.5).contains("width"), "{}", bad("name = \"mlp\"\nwidth = 3", 0.5));
    }
}
