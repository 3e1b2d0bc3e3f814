//! FedBuff's server step: once K updates are buffered (the scheduler decides when),
//! `x ← x + η_g · (1/K) Σ_i s(τ_i) Δ_i` with `Δ_i = w_end − w_start` and `s` the staleness
//! weight (1/√(1+τ) in the paper).

use fl_core::registry::{Builder, Component, defaults_of};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, ParamSet, Result};
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

inventory::submit! {
    Component {
        name: "buffered-mean",
        summary: "x ← x + η_g/K Σ s(τ_i) Δ_i over the K buffered updates (FedBuff)",
        paper: "Nguyen et al., AISTATS 2022",
        defaults: defaults_of::<BufferedMeanConfig>,
        build: Builder::Aggregator(|p| Ok(Box::new(BufferedMean::new(p.parse()?)))),
        origin: module_path!(),
    }
}
