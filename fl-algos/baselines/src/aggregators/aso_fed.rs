//! ASO-Fed's server step (Chen, Ning, Slawski and Rangwala, "Asynchronous Online Federated
//! Learning for Edge Devices with Non-IID Data", IEEE BigData 2020): each arrival moves the
//! global model by its delta weighted by the client's share of all the federation's data,
//!
//! `w ← w + Σ_k (n_k / n) Δ_k`, `n` the samples of every client (not only those aggregated),
//!
//! and the server's "feature representation learning" may then re-weight the first layer's
//! weight (the model's first tensor of rank ≥ 2) by a softmax of its own values over its output
//! units (dimension 0): `W₁ ← a ⊙ W₁` with `a = softmax₀(W₁)` (`literal`) or `a = K softmax₀(W₁)`,
//! K the number of output units, so that the factors average 1 (`scaled`). By default (`off`)
//! it does not.
//!
//! The paper's text was not available; this follows the three public re-implementations that
//! agree (AFL-Lib `alg/asofed.py`, FedOpt `ASOFed.py`, and a Keras one): the delta form (the
//! convex mix `(1 − n_k/n) w + (n_k/n) w_k` equals it only for a fresh update), n over all
//! clients, and the attention as the Keras code's element-wise softmax of the weights, bias
//! untouched, after every update. Neither reading trains: literally, every factor is below 1
//! and the layer shrinks geometrically arrival after arrival (by about 1/K each time); scaled,
//! each arrival multiplies a weight w by about 1 + w − w̄, which compounds into divergence. On
//! real MNIST (MLP 784-64-10, 10 clients, Dirichlet 0.5, 200 arrivals) `literal` stays at 10%
//! accuracy and `scaled` diverges by the 56th arrival, while `off` reaches 90%; hence the
//! default. The paper's own form of the step is unknown here.

use fl_core::tch::{Kind, Tensor};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Error, ParamSet, Result, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

/// The first layer's re-weighting after each update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FeatureAttention {
    /// No re-weighting.
    #[default]
    Off,
    /// `W₁ ← K softmax₀(W₁) ⊙ W₁`: the factors average 1.
    Scaled,
    /// `W₁ ← softmax₀(W₁) ⊙ W₁`, as the Keras re-implementation writes it.
    Literal,
}

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsoFedConfig {
    /// The first layer's re-weighting after each update.
    pub feature_attention: FeatureAttention,
}

impl Validate for AsoFedConfig {}

pub struct AsoFed {
    cfg: AsoFedConfig,
}

impl AsoFed {
    pub fn new(cfg: AsoFedConfig) -> Self {
        AsoFed { cfg }
    }
}

impl Aggregator for AsoFed {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        if ctx.total_samples == 0 {
            return Err(Error::component("aso-fed", "the federation holds no samples (n = 0)"));
        }
        let n = ctx.total_samples as f64;
        let mut next = global.shallow_clone();
        for u in updates {
            next = next.add_scaled(&u.delta, u.samples as f64 * f64::from(u.multiplicity) / n);
        }
        let first = next.tensors().iter().position(|t| t.dim() >= 2);
        let scale = match self.cfg.feature_attention {
            FeatureAttention::Off => return Ok(next),
            FeatureAttention::Literal => 1.0,
            FeatureAttention::Scaled => first.map_or(1.0, |i| next.tensors()[i].size()[0] as f64),
        };
        let tensors = next
            .tensors()
            .iter()
            .enumerate()
            .map(|(i, t)| if Some(i) == first { attend(t, scale) } else { t.shallow_clone() })
            .collect();
        ParamSet::new(next.names().to_vec(), tensors)
    }

    fl_core::stateless!();
}

/// `scale · softmax₀(w) ⊙ w`.
fn attend(w: &Tensor, scale: f64) -> Tensor {
    w.softmax(0, Kind::Float) * scale * w
}

fl_core::register!(Aggregator "aso-fed" => AsoFed::new(AsoFedConfig),
    summary: "w ← w + Σ (n_k/n) Δ_k with n all the federation's samples, optionally the first layer re-weighted by softmax over its outputs (ASO-Fed)",
    paper: "Chen, Ning, Slawski and Rangwala, IEEE BigData 2020");
