//! FedAsync's mixing: for each arriving model in arrival order,
//! `x ← (1 − α_t) x + α_t x_new` with `α_t = α · s(staleness)`. Under a partial mask only
//! the trained elements are mixed.

use fl_core::registry::{Builder, Component, defaults_of};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Mask, ParamSet, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsyncMixConfig {
    /// Base mixing rate α.
    pub alpha: f64,
}

impl Default for AsyncMixConfig {
    fn default() -> Self {
        AsyncMixConfig { alpha: 0.6 }
    }
}

impl AsyncMixConfig {
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.alpha > 0.0 && self.alpha <= 1.0) {
            return Err(format!("alpha: expected a value in (0, 1], got {}", self.alpha));
        }
        Ok(())
    }
}

pub struct AsyncMix {
    cfg: AsyncMixConfig,
}

impl AsyncMix {
    pub fn new(cfg: AsyncMixConfig) -> Self {
        AsyncMix { cfg }
    }
}

impl Aggregator for AsyncMix {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let mut x = global.shallow_clone();
        for (u, s) in updates.iter().zip(ctx.staleness) {
            let alpha = self.cfg.alpha * s.weight;
            let new = u.new_params();
            x = match &u.mask {
                Mask::Full => x.lerp(&new, alpha),
                mask => {
                    let dense = mask.dense(&x.shapes(), x.tensors()[0].device());
                    let mut i = 0;
                    x.zip_map(&new, |a, b| {
                        let out = a + (b - a) * &dense[i] * alpha;
                        i += 1;
                        out
                    })
                }
            };
        }
        Ok(x)
    }
}

inventory::submit! {
    Component {
        name: "async-mix",
        summary: "x ← (1−α_t) x + α_t x_new per arrival, α_t = α·s(staleness) (FedAsync)",
        paper: "Xie et al., arXiv:1903.03934",
        defaults: defaults_of::<AsyncMixConfig>,
        build: Builder::Aggregator(|p| Ok(Box::new(AsyncMix::new(p.parse_valid(AsyncMixConfig::validate)?)))),
        origin: module_path!(),
    }
}
