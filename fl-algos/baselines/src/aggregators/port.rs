//! PORT (Su and Li, "How Asynchronous can Federated Learning Be?", IWQoS 2022): a buffered
//! asynchronous aggregation whose weights favour updates that agree with where the global
//! model has been going and that are fresh:
//!
//! `p_k ∝ (n_k / Σn) · [w_sim · (cos(Δ_k, w − w_hist) + 1) / 2 + w_stal · b / (s_k + b)]`,
//! `w ← w + Σ p_k Δ_k` (the `p_k` normalised to sum 1),
//!
//! with `w_hist` the global model `lag` aggregations ago and `s_k` the update's staleness in
//! versions. As the reference implementation (Plato's `PortAggregationStrategy`) does: the
//! cosine is taken over all tensors at once, and only for updates staler than 1 whose
//! historical model exists (otherwise it counts as 1); `lag = 2`, `b = 10`, both weights 1 by
//! default; weights that sum to 0 become uniform. The historical models are this aggregator's
//! state (kept `lag` deep, saved in checkpoints).

use std::collections::VecDeque;

use fl_core::{AggregateCtx, Aggregator, ClientUpdate, InvalidKey, ParamSet, Result, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PortConfig {
    /// w_sim, the weight of the similarity term.
    #[default(1.0)]
    pub similarity_weight: f64,
    /// w_stal, the weight of the staleness term.
    #[default(1.0)]
    pub staleness_weight: f64,
    /// b, the staleness bound of b / (s + b).
    #[default(10.0)]
    pub staleness_bound: f64,
    /// Aggregations back to the historical global model of the similarity term.
    #[default(2)]
    pub lag: usize,
}

impl Validate for PortConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        for (key, v) in [("similarity_weight", self.similarity_weight), ("staleness_weight", self.staleness_weight)] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(InvalidKey::new(key, format!("expected a finite number ≥ 0, got {v}")));
            }
        }
        if !(self.staleness_bound > 0.0 && self.staleness_bound.is_finite()) {
            return Err(InvalidKey::new(
                "staleness_bound",
                format!("expected a positive number, got {}", self.staleness_bound),
            ));
        }
        if self.lag == 0 {
            return Err(InvalidKey::new("lag", "expected at least 1 aggregation"));
        }
        Ok(())
    }
}

pub struct Port {
    cfg: PortConfig,
    /// The global models seen at the last `lag` aggregations, oldest first, with their versions.
    history: VecDeque<(u64, ParamSet)>,
}

impl Port {
    pub fn new(cfg: PortConfig) -> Self {
        Port { cfg, history: VecDeque::new() }
    }
}

/// The cosine between two parameter sets taken as one vector (0 if either is zero).
fn cosine(a: &ParamSet, b: &ParamSet) -> f64 {
    let dot: f64 = a.tensors().iter().zip(b.tensors()).map(|(x, y)| (x * y).sum(x.kind()).double_value(&[])).sum();
    let norms = a.norm_sq().double_value(&[]).sqrt() * b.norm_sq().double_value(&[]).sqrt();
    if norms > 0.0 { dot / norms } else { 0.0 }
}

impl Aggregator for Port {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let lag = self.cfg.lag as u64;
        let drift = ctx
            .version
            .checked_sub(lag)
            .and_then(|v| self.history.iter().find(|(hv, _)| *hv == v))
            .map(|(_, hist)| global.sub(hist));
        let total: f64 = updates.iter().map(|u| u.samples as f64 * f64::from(u.multiplicity)).sum();
        let raw: Vec<f64> = updates
            .iter()
            .zip(ctx.staleness)
            .map(|(u, s)| {
                let similarity = match &drift {
                    Some(d) if s.versions > 1 => cosine(&u.delta, d),
                    _ => 1.0,
                };
                let fresh = self.cfg.staleness_bound / (s.versions as f64 + self.cfg.staleness_bound);
                let share = u.samples as f64 * f64::from(u.multiplicity) / total;
                share * (self.cfg.similarity_weight * (similarity + 1.0) / 2.0 + self.cfg.staleness_weight * fresh)
            })
            .collect();
        let sum: f64 = raw.iter().sum();
        let p: Vec<f64> =
            if sum > 0.0 { raw.iter().map(|w| w / sum).collect() } else { vec![1.0 / raw.len() as f64; raw.len()] };
        let mut step = updates[0].delta.scale(p[0]);
        for (u, w) in updates.iter().zip(&p).skip(1) {
            step = step.add_scaled(&u.delta, *w);
        }
        self.history.push_back((ctx.version, global.shallow_clone()));
        while self.history.len() > self.cfg.lag {
            self.history.pop_front();
        }
        Ok(global.add(&step))
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("versions", &self.history.iter().map(|(v, _)| *v).collect::<Vec<_>>())?;
        out.put_params_list("history", &self.history.iter().map(|(_, p)| Some(p)).collect::<Vec<_>>())
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        let versions: Vec<u64> = saved.get("versions")?;
        let models = saved.params_list("history")?;
        self.history = versions.into_iter().zip(models).filter_map(|(v, p)| p.map(|p| (v, p))).collect();
        Ok(())
    }
}

fl_core::register!(Aggregator "port" => Port::new(PortConfig),
    summary: "PORT: buffered deltas weighted by samples × [(cos(Δ, w − w_hist) + 1)/2 + b/(s + b)], normalised",
    paper: "Su and Li, IWQoS 2022");
