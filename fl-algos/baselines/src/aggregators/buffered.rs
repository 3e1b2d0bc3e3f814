//! FedBuff's server step: once K updates are buffered (the scheduler decides when),
//! `x ← x + η_g · (1/K) Σ_i s(τ_i) Δ_i` with `Δ_i = w_end − w_start` and `s` the staleness
//! weight (1/√(1+τ) in the paper).

use fl_core::{AggregateCtx, Aggregator, ClientUpdate, FromConfig, InvalidKey, ParamSet, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BufferedMeanConfig {
    /// Server learning rate η_g.
    pub server_lr: f64,
}

impl Default for BufferedMeanConfig {
    fn default() -> Self {
        BufferedMeanConfig { server_lr: 1.0 }
    }
}

pub struct BufferedMean {
    cfg: BufferedMeanConfig,
}

impl BufferedMean {
    pub fn new(cfg: BufferedMeanConfig) -> Self {
        BufferedMean { cfg }
    }
}

impl FromConfig for BufferedMean {
    type Config = BufferedMeanConfig;

    fn from_config(cfg: BufferedMeanConfig) -> std::result::Result<Self, InvalidKey> {
        Ok(BufferedMean::new(cfg))
    }
}

impl Aggregator for BufferedMean {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let k = updates.len() as f64;
        let mut x = global.shallow_clone();
        for (u, s) in updates.iter().zip(ctx.staleness) {
            x = x.add_scaled(&u.delta, self.cfg.server_lr * s.weight / k);
        }
        Ok(x)
    }
}

fl_core::register!(Aggregator "buffered-mean" => BufferedMean,
    summary: "x ← x + η_g/K Σ s(τ_i) Δ_i over the K buffered updates (FedBuff)",
    paper: "Nguyen et al., AISTATS 2022");
