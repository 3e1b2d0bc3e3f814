//! `model-mean`: the paper's aggregation. The new global model is the weighted mean of the
//! participants' *models* (not of their deltas on the current model, which differ when
//! clients started from stale versions or from their own models):
//!
//! θ^(t+1) = Σ_c p_c θ_c,  p_c = n_c·k_c·s(τ_c) / Σ_c' n_c'·k_c'·s(τ_c'),
//!
//! with n_c the client's samples, k_c the update's multiplicity and s the staleness function
//! (`constant` gives the paper's experiments; `inverse-linear` 1/(1 + α·τ) is our
//! reading of the "staleness-aware aggregation" the paper claims without a formula). Every
//! tensor of the model state is averaged, BatchNorm's running statistics included.
//!
//! `mode = "damped"` is the un-normalised alternative θ^(t+1) = θ^(t) + Σ_c (n_c k_c / Σ n k)·
//! s(τ_c)·(θ_c − θ^(t)), whose penalty also acts when every participant is equally stale.

use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Error, ParamSet, Result, Validate};
use serde::{Deserialize, Serialize};

/// How the participants' models make the new global model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeanMode {
    /// θ ← Σ p_c θ_c, weights normalised with the staleness factors inside.
    #[default]
    Replace,
    /// θ ← θ + Σ (n_c k_c/Σ n k)·s(τ_c)·(θ_c − θ).
    Damped,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelMeanConfig {
    /// Replace the model by the weighted mean, or move it towards the models (`damped`).
    pub mode: MeanMode,
}

impl Validate for ModelMeanConfig {}

pub struct ModelMean {
    cfg: ModelMeanConfig,
}

impl ModelMean {
    pub fn new(cfg: ModelMeanConfig) -> Self {
        ModelMean { cfg }
    }
}

impl Aggregator for ModelMean {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let size: Vec<f64> = updates.iter().map(|u| u.samples as f64 * f64::from(u.multiplicity)).collect();
        let staleness: Vec<f64> = ctx.staleness.iter().map(|s| s.weight).collect();
        let (weights, total) = match self.cfg.mode {
            MeanMode::Replace => {
                let raw: Vec<f64> = size.iter().zip(&staleness).map(|(n, s)| n * s).collect();
                let total = raw.iter().sum::<f64>();
                (raw, total)
            }
            MeanMode::Damped => (size.iter().zip(&staleness).map(|(n, s)| n * s).collect(), size.iter().sum()),
        };
        if !(total > 0.0) || weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
            return Err(Error::component("model-mean", format!("weights {weights:?} must be ≥ 0 with a positive sum")));
        }
        let models: Vec<ParamSet> = updates.iter().map(ClientUpdate::new_params).collect();
        Ok(match self.cfg.mode {
            MeanMode::Replace => {
                let mut mean = models[0].scale(weights[0] / total);
                for (m, w) in models.iter().zip(&weights).skip(1) {
                    mean = mean.add_scaled(m, w / total);
                }
                mean
            }
            MeanMode::Damped => {
                let mut next = global.shallow_clone();
                for (m, w) in models.iter().zip(&weights) {
                    next = next.add_scaled(&m.sub(global), w / total);
                }
                next
            }
        })
    }

    fl_core::stateless!();
}

fl_core::register!(Aggregator "model-mean" => ModelMean::new(ModelMeanConfig),
    summary: "θ ← Σ p_c θ_c over the participants' models, p_c ∝ samples · multiplicity · s(τ_c) (or damped toward θ)",
    paper: "Forootani and Iervolino, Asynchronous FL with non-convex client objectives, §5");
