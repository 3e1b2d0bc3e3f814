//! `clipped-mean`: FedAvg's mean of the client deltas, weighted by samples times the staleness
//! function's weight, each delta first scaled down to an L2 norm of at most `max_norm` (the
//! clipping of DP-FedAvg, McMahan et al., ICLR 2018, Algorithm 1, without the noise): one
//! client cannot move the model far. With every weight 0 the model stays.

use fl_core::{AggregateCtx, Aggregator, ClientUpdate, InvalidKey, ParamSet, Result, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClippedMeanConfig {
    /// Largest L2 norm of one client's delta (over all its tensors), positive and finite.
    #[default(1.0)]
    pub max_norm: f64,
}

impl Validate for ClippedMeanConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.max_norm > 0.0 && self.max_norm.is_finite()) {
            return Err(InvalidKey::new("max_norm", format!("must be positive and finite, got {}", self.max_norm)));
        }
        Ok(())
    }
}

pub struct ClippedMean {
    max_norm: f64,
}

impl ClippedMean {
    pub fn new(c: ClippedMeanConfig) -> Self {
        ClippedMean { max_norm: c.max_norm }
    }
}

impl Aggregator for ClippedMean {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let weights: Vec<f64> = updates.iter().zip(ctx.staleness).map(|(u, s)| u.samples as f64 * s.weight).collect();
        let total: f64 = weights.iter().sum();
        let mut next = global.shallow_clone();
        if total <= 0.0 {
            return Ok(next);
        }
        for (u, w) in updates.iter().zip(weights) {
            // min(1, C / ‖Δ‖) stays on the device: no host synchronisation per update.
            let factor = (u.delta.norm_sq().sqrt().clamp_min(1e-12).reciprocal() * self.max_norm).clamp_max(1.0);
            next = next.add(&u.delta.map(|t| t * &factor * (w / total)));
        }
        Ok(next)
    }

    fl_core::stateless!();
}
