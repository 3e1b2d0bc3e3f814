//! FedBuff's server step: once K updates are buffered (the scheduler decides when),
//! `x ← x + η_g · (1/K) Σ_i s(τ_i) Δ_i` with `Δ_i = w_end − w_start` and `s` the staleness
//! weight (1/√(1+τ) in the paper).

use fl_core::{AggregateCtx, Aggregator, ClientUpdate, ParamSet, Result, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BufferedMeanConfig {
    /// Server learning rate η_g.
    #[default(1.0)]
    pub server_lr: f64,
}

impl Validate for BufferedMeanConfig {}

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

    fl_core::stateless!();
}

fl_core::register!(Aggregator "buffered-mean" => BufferedMean::new(BufferedMeanConfig),
    summary: "x ← x + η_g/K Σ s(τ_i) Δ_i over the K buffered updates (FedBuff)",
    paper: "Nguyen et al., AISTATS 2022");
