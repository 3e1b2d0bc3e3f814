//! AdaViT's usage loss (Meng et al., "AdaViT: Adaptive Vision Transformers for Efficient Image
//! Recognition", CVPR 2022, as its authors' code computes it), as Co-S²P's FedAvg+AdaViT
//! baseline uses it (spec cos2p.md §3.6: "a usage loss towards R_n").
//!
//! A model with input-dependent decisions (a `vit` with `decisions`) keeps or drops each
//! patch, head and sub-layer per sample and records the kept shares in the training pass
//! ([`crate::Mode::record_usage`]). The loss adds, per client,
//!
//! ```text
//! weight · ((ū_tokens − γ)² + |ū_heads − γ| + |ū_layers − γ|)
//! ```
//!
//! with `ū_g` the client's kept share of gate kind `g` over its real samples, the units and the
//! layers, and `γ` its target: the authors' code takes the squared distance for tokens and the
//! absolute one for heads and sub-layers, each weighted 2. (It also adds small per-layer
//! "diverse", entropy and minimum-usage terms, left out here.) A client's budget ratio `R` (its
//! [`WidthBudget`], the share of the model its device affords; 1 for a job without one) is
//! read as a share of the model's compute; a block's attention scales with its kept tokens and
//! heads, and a skipped sub-layer costs nothing, so the three shares multiply and each kind's
//! target is `γ = R^{1/3}` (spec [R]: AdaViT sets one target per kind; the spec names R_n
//! alone).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::error::InvalidKey;
use crate::model::{Gate, GateUsage};

/// `[trainer] usage`: the weight of AdaViT's usage loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// Each kind's weight against the cross-entropy (the authors' 2).
    pub weight: f64,
}

impl Default for UsageConfig {
    fn default() -> Self {
        UsageConfig { weight: 2.0 }
    }
}

impl UsageConfig {
    /// Checks the weight; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.weight >= 0.0 && self.weight.is_finite()) {
            return Err(InvalidKey::new("usage.weight", format!("expected a finite number ≥ 0, got {}", self.weight)));
        }
        Ok(())
    }
}

/// Each kind's target share for a budget ratio `r` in (0, 1]: `r^{1/3}`.
pub fn target_share(ratio: f64) -> f64 {
    ratio.cbrt()
}

/// The usage loss of a cohort: the weight and each client's target share.
pub(crate) struct UsageLoss {
    weight: f64,
    /// `[C]`: each client's target share γ, in cohort order.
    targets: Tensor,
}

impl UsageLoss {
    /// The loss of clients with budget ratios `ratios` (cohort order).
    pub fn new(cfg: &UsageConfig, ratios: &[f64], device: Device) -> Self {
        let targets: Vec<f32> = ratios.iter().map(|&r| target_share(r) as f32).collect();
        UsageLoss { weight: cfg.weight, targets: Tensor::from_slice(&targets).to_device(device) }
    }

    /// The tensor a step reads: the targets.
    pub fn targets_mut(&mut self) -> &mut Tensor {
        &mut self.targets
    }

    /// `[k]`: the loss of the first `k` clients from the gate usage a pass recorded.
    ///
    /// # Panics
    /// If the pass recorded nothing: the cohort checks at its start that the model records
    /// usage ([`crate::Model::records_usage`]).
    pub fn loss(&self, recorded: Vec<GateUsage>, k: i64) -> Tensor {
        assert!(!recorded.is_empty(), "usage loss: the forward pass recorded no gate usage");
        let mut by_gate: BTreeMap<Gate, Vec<Tensor>> = BTreeMap::new();
        for u in recorded {
            by_gate.entry(u.gate).or_default().push(u.kept);
        }
        let targets = self.targets.narrow(0, 0, k);
        by_gate
            .into_iter()
            .map(|(gate, layers)| {
                let off = Tensor::stack(&layers, 0).mean_dim(0, false, Kind::Float) - &targets;
                match gate {
                    Gate::Tokens => off.square(),
                    Gate::Heads | Gate::Layers => off.abs(),
                }
            })
            .reduce(|a, b| a + b)
            .expect("at least one gate kind")
            * self.weight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(gate: Gate, kept: &[f32]) -> GateUsage {
        GateUsage { gate, kept: Tensor::from_slice(kept) }
    }

    #[test]
    fn targets_are_cube_roots_of_the_ratios() {
        assert!((target_share(0.125) - 0.5).abs() < 1e-12);
        assert!((target_share(1.0) - 1.0).abs() < 1e-12);
        assert!((target_share(0.064) - 0.4).abs() < 1e-12);
    }

    /// By hand, two clients (ratios 0.125 and 1: targets 0.5 and 1), weight 2:
    /// tokens over two blocks: client 0 (0.9 + 0.7)/2 = 0.8, client 1 (1 + 0.6)/2 = 0.8;
    /// heads: 0.5 and 0.5; sub-layers: 0.3 and 1.
    /// client 0: 2·((0.8 − 0.5)² + |0.5 − 0.5| + |0.3 − 0.5|) = 2·(0.09 + 0 + 0.2) = 0.58;
    /// client 1: 2·((0.8 − 1)² + |0.5 − 1| + |1 − 1|) = 2·(0.04 + 0.5 + 0) = 1.08.
    #[test]
    fn loss_is_the_squared_token_and_absolute_head_and_layer_distance_to_the_targets() {
        let loss = UsageLoss::new(&UsageConfig { weight: 2.0 }, &[0.125, 1.0], Device::Cpu);
        let recorded = vec![
            usage(Gate::Tokens, &[0.9, 1.0]),
            usage(Gate::Heads, &[0.5, 0.5]),
            usage(Gate::Layers, &[0.3, 1.0]),
            usage(Gate::Tokens, &[0.7, 0.6]),
        ];
        let got = loss.loss(recorded, 2);
        assert!(got.allclose(&Tensor::from_slice(&[0.58f32, 1.08]), 1e-6, 1e-6, false), "{got}");
        // The first client alone: its own row.
        let one = loss.loss(vec![usage(Gate::Layers, &[0.3])], 1);
        assert!((one.double_value(&[0]) - 2.0 * 0.2).abs() < 1e-6);
    }

    #[test]
    fn bad_weights_are_refused() {
        for weight in [-1.0, f64::NAN, f64::INFINITY] {
            let err = UsageConfig { weight }.validate().unwrap_err();
            assert!(err.to_string().contains("usage.weight"), "{err}");
        }
        UsageConfig::default().validate().unwrap();
    }
}
