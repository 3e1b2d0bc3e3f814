//! FedAsync's mixing: for each arriving model in arrival order,
//! `x ← (1 − α_t) x + α_t x_new` with `α_t = α · s(staleness)`. Under a partial mask only
//! the trained elements are mixed (Fed-RAA's per-fragment merge, shared tensors included).
//!
//! `target = "delta"` steps by the client's change instead, `x ← x + α_t (x_new − x_sent)`
//! (the Fed-RAA code). `combine = "mean"` merges all updates of one aggregation at once (Sync
//! Fed-RAA): each element moves towards the sample-weighted mean of the updates that trained
//! it, at rate α times their weighted mean staleness weight; untrained elements stay.

use fl_core::tch::Tensor;
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, InvalidKey, Mask, ParamSet, Result, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

/// What an update pulls the model towards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MixTarget {
    /// The client's new model: `x + α_t (x_new − x)`.
    #[default]
    Model,
    /// The client's change: `x + α_t (x_new − x_sent)`.
    Delta,
}

/// How several updates of one aggregation are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Combine {
    /// One after the other, in arrival order.
    #[default]
    Sequential,
    /// At once, per element, by the sample-weighted mean of the updates that trained it.
    Mean,
}

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsyncMixConfig {
    /// Base mixing rate α, in (0, 1].
    #[default(0.6)]
    pub alpha: f64,
    /// What an update pulls the model towards: its new model or its change.
    #[default(MixTarget::Model)]
    pub target: MixTarget,
    /// How the updates of one aggregation are merged: in arrival order or at once.
    #[default(Combine::Sequential)]
    pub combine: Combine,
}

impl Validate for AsyncMixConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        InvalidKey::in_unit_interval("alpha", self.alpha)
    }
}

pub struct AsyncMix {
    cfg: AsyncMixConfig,
}

impl AsyncMix {
    pub fn new(cfg: AsyncMixConfig) -> Self {
        AsyncMix { cfg }
    }

    /// The direction update `u` pulls tensor `i` of `x` in (before masking and rate).
    fn step(&self, x: &Tensor, u: &ClientUpdate, new: &ParamSet, i: usize) -> Tensor {
        match self.cfg.target {
            MixTarget::Model => &new.tensors()[i] - x,
            MixTarget::Delta => u.delta.tensors()[i].shallow_clone(),
        }
    }

    fn sequential(&self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> ParamSet {
        let mut x = global.shallow_clone();
        for (u, s) in updates.iter().zip(ctx.staleness) {
            let alpha = self.cfg.alpha * s.weight;
            let new = u.new_params();
            let dense = (!u.mask.is_full()).then(|| u.mask.dense(&x.shapes(), x.tensors()[0].device()));
            let mut i = 0;
            x = x.map(|a| {
                let mut step = self.step(a, u, &new, i) * alpha;
                if let Some(d) = &dense {
                    step = step * &d[i];
                }
                i += 1;
                a + step
            });
        }
        x
    }

    fn mean(&self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> ParamSet {
        let shapes = global.shapes();
        let device = global.tensors()[0].device();
        let news: Vec<ParamSet> = updates.iter().map(ClientUpdate::new_params).collect();
        let masks: Vec<Vec<Tensor>> = updates
            .iter()
            .map(|u| match &u.mask {
                Mask::Full => Vec::new(),
                m => m.dense(&shapes, device),
            })
            .collect();
        let mut i = 0;
        global.map(|x| {
            let (mut weight, mut rate, mut step) = (x.zeros_like(), x.zeros_like(), x.zeros_like());
            for (((u, new), mask), s) in updates.iter().zip(&news).zip(&masks).zip(ctx.staleness) {
                let w = match mask.get(i) {
                    Some(m) => m * u.samples as f64,
                    None => x.ones_like() * u.samples as f64,
                };
                step += self.step(x, u, new, i) * &w;
                rate += &w * s.weight;
                weight += w;
            }
            i += 1;
            // Elements nobody trained have weight 0: their step and rate are 0 too.
            let denom = weight.clamp_min(1e-30);
            x + (step / &denom) * (rate / &denom) * self.cfg.alpha
        })
    }
}

impl Aggregator for AsyncMix {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        Ok(match self.cfg.combine {
            Combine::Sequential => self.sequential(global, updates, ctx),
            Combine::Mean => self.mean(global, updates, ctx),
        })
    }

    fl_core::stateless!();
}

fl_core::register!(Aggregator "async-mix" => AsyncMix::new(AsyncMixConfig),
    summary: "x ← (1−α_t) x + α_t x_new over the trained elements, α_t = α·s(staleness) (FedAsync, Fed-RAA)",
    paper: "Xie et al., arXiv:1903.03934; Zhang et al. (Fed-RAA)");
