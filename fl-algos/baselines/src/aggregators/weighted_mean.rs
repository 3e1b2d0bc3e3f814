//! FedAvg's aggregation: the global model moves by the weighted mean of the client deltas,
//! `x ← x + η Σ p_i Δ_i` with `p_i ∝ n_i` (samples) or uniform. With full masks and η = 1
//! this is the weighted mean of the client models.

use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Error, ParamSet, Result, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

/// How client contributions are weighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Weighting {
    /// Proportional to the client's sample count (times the update's multiplicity).
    #[default]
    Samples,
    Uniform,
}

impl Weighting {
    pub fn weight(self, update: &ClientUpdate) -> f64 {
        match self {
            Weighting::Samples => update.samples as f64 * f64::from(update.multiplicity),
            Weighting::Uniform => f64::from(update.multiplicity),
        }
    }
}

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WeightedMeanConfig {
    /// How client contributions are weighted: by samples or uniformly.
    #[default(Weighting::Samples)]
    pub weighting: Weighting,
    /// Server learning rate η.
    #[default(1.0)]
    pub server_lr: f64,
    /// Multiply each weight by the update's staleness weight.
    #[default(false)]
    pub use_staleness: bool,
}

impl Validate for WeightedMeanConfig {}

pub struct WeightedMean {
    cfg: WeightedMeanConfig,
}

impl WeightedMean {
    pub fn new(cfg: WeightedMeanConfig) -> Self {
        WeightedMean { cfg }
    }
}

/// Normalised weights `p_i` (sum 1) from the weighting and, optionally, staleness.
pub(crate) fn normalised_weights(
    updates: &[ClientUpdate],
    ctx: &AggregateCtx,
    weighting: Weighting,
    use_staleness: bool,
) -> Result<Vec<f64>> {
    let raw: Vec<f64> = updates
        .iter()
        .zip(ctx.staleness)
        .map(|(u, s)| weighting.weight(u) * if use_staleness { s.weight } else { 1.0 })
        .collect();
    let total: f64 = raw.iter().sum();
    if !(total > 0.0) {
        return Err(Error::component(
            "aggregator",
            format!("aggregation weights sum to {total}; expected a positive sum"),
        ));
    }
    Ok(raw.iter().map(|w| w / total).collect())
}

impl Aggregator for WeightedMean {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let p = normalised_weights(updates, ctx, self.cfg.weighting, self.cfg.use_staleness)?;
        let mut step = updates[0].delta.scale(p[0]);
        for (u, w) in updates.iter().zip(&p).skip(1) {
            step = step.add_scaled(&u.delta, *w);
        }
        Ok(global.add_scaled(&step, self.cfg.server_lr))
    }

    fl_core::stateless!();
}

fl_core::register!(Aggregator "weighted-mean" => WeightedMean::new(WeightedMeanConfig),
    summary: "x ← x + η Σ p_i Δ_i, p_i ∝ samples or uniform (FedAvg)",
    paper: "McMahan et al., AISTATS 2017");
