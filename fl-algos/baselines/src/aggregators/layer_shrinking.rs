//! FedLWS (Shi et al., "FedLWS: Federated Learning with Adaptive Layer-wise Weight
//! Shrinking", ICLR 2025): FedAvg, then each layer of the averaged model shrunk by its own
//! factor,
//!
//! `γ_l = ‖w_prev,l‖ / (‖w_prev,l‖ + τ_l ‖w_avg,l − w_prev,l‖)`, `w_new,l = γ_l w_avg,l`,
//!
//! with `τ_l = β · mean_k ‖Δ_k,l − mean_j Δ_j,l‖` clamped to `[τ_min, τ_max]`: the more the
//! clients' updates of a layer disagree, the more the layer shrinks (the paper's link between
//! gradient variance and the best shrinking factor, without a proxy dataset).
//!
//! As the authors' code does: `w_avg = Σ p_k w_k` with `p_k ∝ n_k` (or uniform), the spread
//! `τ_l` over an *unweighted* mean of the deltas, a layer made of consecutive tensors up to
//! and including each tensor whose name contains `bias` (a conv without bias joins the batch
//! norm after it; tensors after the last bias form a last layer), norms over the whole layer,
//! and the defaults β = 0.03, τ ∈ [0.01, 0.2]. Where the paper is silent and the code cannot
//! say (a layer whose previous weights and step are both zero), γ = 1.

use fl_core::tch::Tensor;
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, InvalidKey, ParamSet, Result, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use super::weighted_mean::{Weighting, normalised_weights};

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LayerShrinkingConfig {
    /// How client models are weighted in the average: by samples or uniformly.
    #[default(Weighting::Samples)]
    pub weighting: Weighting,
    /// β, the scale from the clients' spread to τ.
    #[default(0.03)]
    pub beta: f64,
    /// The clamp of τ.
    #[default(0.01)]
    pub tau_min: f64,
    #[default(0.2)]
    pub tau_max: f64,
}

impl Validate for LayerShrinkingConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.beta >= 0.0 && self.beta.is_finite()) {
            return Err(InvalidKey::new("beta", format!("expected a finite number ≥ 0, got {}", self.beta)));
        }
        if !(self.tau_min >= 0.0 && self.tau_min <= self.tau_max && self.tau_max.is_finite()) {
            return Err(InvalidKey::new(
                "tau_min",
                format!("expected 0 ≤ tau_min ≤ tau_max < ∞, got [{}, {}]", self.tau_min, self.tau_max),
            ));
        }
        Ok(())
    }
}

pub struct LayerShrinking {
    cfg: LayerShrinkingConfig,
}

impl LayerShrinking {
    pub fn new(cfg: LayerShrinkingConfig) -> Self {
        LayerShrinking { cfg }
    }
}

/// The layers of a parameter set: ranges of tensor indices, each closed by a tensor whose name
/// contains `bias`.
fn layers(names: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, n) in names.iter().enumerate() {
        if n.contains("bias") {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < names.len() {
        out.push(start..names.len());
    }
    out
}

/// The L2 norm over the tensors `range` of `ts`, as a host number.
fn norm(ts: &[Tensor], range: std::ops::Range<usize>) -> f64 {
    ts[range].iter().map(|t| t.square().sum(t.kind()).double_value(&[])).sum::<f64>().sqrt()
}

impl Aggregator for LayerShrinking {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let p = normalised_weights(updates, ctx, self.cfg.weighting, false)?;
        let mut step = updates[0].delta.scale(p[0]);
        for (u, w) in updates.iter().zip(&p).skip(1) {
            step = step.add_scaled(&u.delta, *w);
        }
        let k = updates.len() as f64;
        let mean = updates.iter().skip(1).fold(updates[0].delta.shallow_clone(), |m, u| m.add(&u.delta)).scale(1.0 / k);
        let spreads: Vec<ParamSet> = updates.iter().map(|u| u.delta.sub(&mean)).collect();
        let averaged = global.add(&step);
        let mut gammas = vec![1.0; global.len()];
        for layer in layers(global.names()) {
            let spread = spreads.iter().map(|s| norm(s.tensors(), layer.clone())).sum::<f64>() / k * self.cfg.beta;
            let tau = spread.clamp(self.cfg.tau_min, self.cfg.tau_max);
            let prev = norm(global.tensors(), layer.clone());
            let moved = norm(step.tensors(), layer.clone());
            let denominator = prev + tau * moved;
            let gamma = if denominator > 0.0 { prev / denominator } else { 1.0 };
            gammas[layer].iter_mut().for_each(|g| *g = gamma);
        }
        let mut i = 0;
        Ok(averaged.map(|t| {
            let out = t * gammas[i];
            i += 1;
            out
        }))
    }

    fl_core::stateless!();
}

fl_core::register!(Aggregator "layer-shrinking" => LayerShrinking::new(LayerShrinkingConfig),
    summary: "FedAvg's mean, then each layer scaled by γ_l = ‖w_l‖ / (‖w_l‖ + τ_l ‖Δw_l‖), τ_l from the clients' spread (FedLWS)",
    paper: "Shi et al., FedLWS, ICLR 2025");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_closes_at_each_bias_and_the_rest_is_one_more() {
        let names = |ns: &[&str]| ns.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            layers(&names(&["a.weight", "a.bias", "b.weight", "bn.weight", "bn.bias", "c.weight"])),
            vec![0..2, 2..5, 5..6]
        );
    }
}
