//! FedDyn's server (Acar et al., "Federated Learning Based on Dynamic Regularization", ICLR
//! 2021, Algorithm 1): with the participants `P_t` of the round and `m` clients in all,
//!
//! `h ← h − (α/m) Σ_{k∈P_t} (θ_k − θ)`, `θ ← (1/|P_t|) Σ_{k∈P_t} θ_k − h/α`,
//!
//! `h` starting at zero. The clients' side is the trainer's `dyn_alpha` (the same α: the
//! `feddyn` method sets both). `θ_k − θ` is each update's delta; the mean over the
//! participants is unweighted, as in the paper. `h` is this aggregator's state, saved in
//! checkpoints.

use fl_core::{AggregateCtx, Aggregator, ClientUpdate, InvalidKey, ParamSet, Result, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DynamicConfig {
    /// α, FedDyn's regularisation weight (the trainer's `dyn_alpha`); the spec's 0.01.
    #[default(0.01)]
    pub alpha: f64,
}

impl Validate for DynamicConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.alpha > 0.0 && self.alpha.is_finite()) {
            return Err(InvalidKey::new("alpha", format!("expected a positive number, got {}", self.alpha)));
        }
        Ok(())
    }
}

pub struct Dynamic {
    cfg: DynamicConfig,
    /// The server state h (none until the first aggregation: zero).
    h: Option<ParamSet>,
}

impl Dynamic {
    pub fn new(cfg: DynamicConfig) -> Self {
        Dynamic { cfg, h: None }
    }
}

impl Aggregator for Dynamic {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let alpha = self.cfg.alpha;
        let sum = updates.iter().skip(1).fold(updates[0].delta.shallow_clone(), |s, u| s.add(&u.delta));
        let h = self.h.take().unwrap_or_else(|| global.zeros_like());
        let h = h.add_scaled(&sum, -alpha / ctx.num_clients as f64);
        let next = global.add_scaled(&sum, 1.0 / updates.len() as f64).add_scaled(&h, -1.0 / alpha);
        self.h = Some(h);
        Ok(next)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put_params_opt("h", self.h.as_ref());
        Ok(())
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.h = saved.params_opt("h")?;
        Ok(())
    }
}

fl_core::register!(Aggregator "dynamic" => Dynamic::new(DynamicConfig),
    summary: "FedDyn's server: h ← h − (α/m) Σ Δ_k, θ ← mean of the participants' models − h/α",
    paper: "Acar et al., ICLR 2021");
