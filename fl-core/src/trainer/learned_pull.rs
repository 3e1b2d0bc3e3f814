//! FedASMU's device-side merge of a model pulled mid-training (Jia, Liu et al., §4.3,
//! Eqs. 9–11, as the spec's Algorithm D corrects them), for a job that started from version o
//! and receives version g:
//!
//! `φ = γ/√g · (1 − υ/√(g − o + 1))` (clamped at 0), `β = μ_β φ / (1 + μ_β φ)`,
//! `w ← (1 − β) w_pre + β w_g`.
//!
//! The device's controls γ and υ then take one step of the exact chain rule through β:
//! with c = ⟨∇F_i(w; ζ), w_g − w_pre⟩ on the next mini-batch ζ at the merged model,
//! `γ −= η_γ · c · ∂β/∂γ` and `υ −= η_υ · c · ∂β/∂υ`, where
//! `∂β/∂γ = μ_β/(1 + μ_β φ)² · (1 − υ/√s)/√g` and `∂β/∂υ = −μ_β/(1 + μ_β φ)² · γ/(√g √s)`
//! (s = g − o + 1; no step while φ is clamped). The controls are the client's state, kept
//! across its jobs (`pull.gamma`, `pull.upsilon`). The probe of ζ runs in evaluation mode
//! (no dropout draw, BatchNorm on its running statistics), so the job's own random streams and
//! buffers are those of a run without it; the cost model does not charge it (one mini-batch).

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::error::{InvalidKey, Result};
use crate::params::ParamSet;

/// The `[trainer] learned_pull` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LearnedPullConfig {
    /// μ_β of Eq. 10 (the spec's [rec]: 10).
    pub mu_beta: f64,
    /// Initial γ₀ (the spec's [rec]: 1).
    pub gamma0: f64,
    /// Initial υ₀ (the spec's [rec]: 0.5).
    pub upsilon0: f64,
    /// Learning rate η_γ (Table 3: 1e-4 for LeNet/FMNIST).
    pub lr_gamma: f64,
    /// Learning rate η_υ (Table 3: 1e-4 for LeNet/FMNIST).
    pub lr_upsilon: f64,
}

impl Default for LearnedPullConfig {
    fn default() -> Self {
        LearnedPullConfig { mu_beta: 10.0, gamma0: 1.0, upsilon0: 0.5, lr_gamma: 1e-4, lr_upsilon: 1e-4 }
    }
}

impl LearnedPullConfig {
    /// Checks every value; the error names the key under `learned_pull`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.mu_beta > 0.0 && self.mu_beta.is_finite()) {
            return Err(InvalidKey::new(
                "learned_pull.mu_beta",
                format!("expected a positive number, got {}", self.mu_beta),
            ));
        }
        for (key, v) in [
            ("gamma0", self.gamma0),
            ("upsilon0", self.upsilon0),
            ("lr_gamma", self.lr_gamma),
            ("lr_upsilon", self.lr_upsilon),
        ] {
            if !v.is_finite() || (key.starts_with("lr") && v < 0.0) {
                return Err(InvalidKey::new(
                    format!("learned_pull.{key}"),
                    format!("expected a finite number{}, got {v}", if key.starts_with("lr") { " ≥ 0" } else { "" }),
                ));
            }
        }
        Ok(())
    }
}

/// A device's controls γ and υ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct PullControls {
    pub gamma: f64,
    pub upsilon: f64,
}

/// The names of a client's state.
const NAMES: [&str; 2] = ["pull.gamma", "pull.upsilon"];

impl PullControls {
    /// The controls a job's state holds, or the initial ones.
    pub fn from_state(state: Option<&ParamSet>, cfg: &LearnedPullConfig) -> Self {
        match state {
            Some(s) => {
                PullControls { gamma: s.tensors()[0].double_value(&[]), upsilon: s.tensors()[1].double_value(&[]) }
            }
            None => PullControls { gamma: cfg.gamma0, upsilon: cfg.upsilon0 },
        }
    }

    /// The controls as a client state.
    pub fn to_state(self) -> Result<ParamSet> {
        let scalar = |v: f64| Tensor::from(v).to_kind(Kind::Double);
        ParamSet::new(NAMES.map(String::from).to_vec(), vec![scalar(self.gamma), scalar(self.upsilon)])
    }

    /// Shapes of the state: two scalars.
    pub fn state_shapes() -> Vec<Vec<i64>> {
        vec![vec![], vec![]]
    }

    /// φ before its clamp, and β, for version `g` pulled by a job from version `o`.
    pub fn weight(self, cfg: &LearnedPullConfig, g: u64, o: u64) -> (f64, f64) {
        let (g, s) = ((g.max(1)) as f64, (g.saturating_sub(o) + 1) as f64);
        let phi = self.gamma / g.sqrt() * (1.0 - self.upsilon / s.sqrt());
        let clamped = phi.max(0.0);
        (phi, cfg.mu_beta * clamped / (1.0 + cfg.mu_beta * clamped))
    }

    /// One step of Eq. 11 with `c` = ⟨∇F(w_merged; ζ), w_g − w_pre⟩.
    pub fn learn(&mut self, cfg: &LearnedPullConfig, g: u64, o: u64, c: f64) {
        let (phi, _) = self.weight(cfg, g, o);
        if phi <= 0.0 {
            return;
        }
        let (gs, s) = ((g.max(1) as f64).sqrt(), ((g.saturating_sub(o) + 1) as f64).sqrt());
        let k = cfg.mu_beta / (1.0 + cfg.mu_beta * phi).powi(2);
        let d_gamma = k * (1.0 - self.upsilon / s) / gs;
        let d_upsilon = -k * self.gamma / (gs * s);
        (self.gamma, self.upsilon) =
            (self.gamma - cfg.lr_gamma * c * d_gamma, self.upsilon - cfg.lr_upsilon * c * d_upsilon);
    }
}
