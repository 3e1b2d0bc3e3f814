//! `segment-importance`: Co-S²P's aggregation by segment (Eqs. 4–5).
//!
//! A segment is one unit of the model's unit groups (an attention head: its rows of q, k and v
//! and its columns of the projection; an MLP neuron: its row of `fc1` and column of `fc2`), or a
//! whole tensor no group indexes (embeddings, LayerNorms, the head). Each update n is weighed,
//! segment by segment, by
//!
//! `γ_n^i = ‖Δ_n^i‖₁ / (‖w_q^i − w_{q−τ}^i‖₁ + size(w^i))`,
//!
//! its update's L1 norm over the drift of the segment since the model the client started from
//! (`w_{q−τ}`, the update's base) plus the segment's element count: large updates count more,
//! updates computed on a model that has since moved count less (a fresh update's γ is its mean
//! |Δ|). Each element then moves by the γ-weighted mean of the deltas of the clients that
//! trained it, `w ← w + Σ_n γ̃_n Δ_n` with `γ̃` normalised over those clients (Eq. 5 with the
//! client step η cancelled, as the spec derives); an element nobody trained stays.
//!
//! Damping, not in the paper (a variant's option): `w ← w + r Σ_n γ̃_n s(τ_n) Δ_n`, with the
//! server rate `r` (`rate`, default 1) and each update's staleness weight `s(τ_n)` from the
//! run's `[staleness]` function (constant 1 by default) applied after the normalisation, so
//! that a lone update, whose γ̃ is 1 (the asynchronous variant aggregates every arrival alone),
//! moves the model by `r s(τ) Δ` instead of its whole Δ. The defaults are Eq. 5.
//!
//! A tensor two groups index (a hidden layer's weight between two narrowed layers) takes the
//! segments of its lowest indexed dimension (its output neurons).
//!
//! Diagnostics (the run's `events.jsonl` at each evaluation), shares of the grouped segments'
//! elements (heads, neurons):
//! - `unit_coverage`: moved by the last aggregation. Depth windows and width masks both leave
//!   units out of an aggregation (Co-S²P's AGX clients share one 6-of-8-block window a round:
//!   it read 0.75 throughout the E1 smoke).
//! - `unit_coverage_cycle`: moved by at least one of the last L aggregations, L the model's
//!   blocks. A depth window of k blocks rolls through its L − k + 1 starts in that many
//!   aggregations, so a unit missing here is one that no client's width mask keeps, not one
//!   its windows passed by.
//! - `unit_coverage_ever`: moved by at least one aggregation since the run started.
//!
//! The first counts elements; the other two count whole units, a unit moved when any of its
//! elements moved.

use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{
    AggregateCtx, Aggregator, ClientUpdate, InvalidKey, ParamSet, Result, StateIn, StateOut, Structure, Validate,
};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SegmentImportanceConfig {
    /// The server's rate `r` on the weighted mean delta, in (0, 1] (default 1: Eq. 5).
    #[default(1.0)]
    pub rate: f64,
}

impl Validate for SegmentImportanceConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        InvalidKey::in_unit_interval("rate", self.rate)
    }
}

/// Each element's segment, and the segments' sizes.
struct Segments {
    /// Per tensor, the segment id of every element, flattened (int64).
    ids: Vec<Tensor>,
    /// Elements per segment, `[S]` float.
    sizes: Tensor,
    /// Per tensor, whether a unit group segments it.
    grouped: Vec<bool>,
    /// Segments `0..units` are the groups' units, in group order; the ungrouped tensors follow.
    units: i64,
}

impl Segments {
    fn new(structure: Option<&Structure>, shapes: &[Vec<i64>], device: Device) -> Segments {
        let mut next = 0i64;
        // Per tensor: (dim, block, first id) of the group member that segments it.
        let mut by: Vec<Option<(usize, i64, i64)>> = vec![None; shapes.len()];
        for group in structure.map_or(&[][..], |s| &s.groups[..]) {
            for m in &group.members {
                if by[m.tensor].is_none_or(|(dim, _, _)| m.dim < dim) {
                    by[m.tensor] = Some((m.dim, m.block, next));
                }
            }
            next += group.units;
        }
        let ids: Vec<Tensor> = shapes
            .iter()
            .zip(&by)
            .map(|(shape, by)| match *by {
                Some((dim, block, first)) => {
                    let units =
                        Tensor::arange(shape[dim], (Kind::Int64, device)).divide_scalar_mode(block, "floor") + first;
                    let mut view = vec![1i64; shape.len()];
                    view[dim] = shape[dim];
                    units.reshape(view.as_slice()).expand(shape.as_slice(), false).contiguous().view(-1)
                }
                None => {
                    next += 1;
                    Tensor::full([shape.iter().product::<i64>()], next - 1, (Kind::Int64, device))
                }
            })
            .collect();
        let sizes = Tensor::zeros([next], (Kind::Float, device));
        let sizes = ids.iter().fold(sizes, |s, id| s.index_add(0, id, &id.ones_like().to_kind(Kind::Float)));
        let units = structure.map_or(0, |s| s.groups.iter().map(|g| g.units).sum());
        Segments { ids, sizes, grouped: by.iter().map(Option::is_some).collect(), units }
    }

    /// Per segment, the L1 norm of `tensors` over its elements.
    fn l1(&self, tensors: &[Tensor]) -> Tensor {
        self.ids
            .iter()
            .zip(tensors)
            .fold(self.sizes.zeros_like(), |acc, (id, t)| acc.index_add(0, id, &t.abs().view(-1)))
    }
}

pub struct SegmentImportance {
    cfg: SegmentImportanceConfig,
    segments: Option<Segments>,
    /// The last aggregation's unit coverage (a scalar tensor, read when diagnostics are).
    coverage: Option<Tensor>,
    /// The units' elements and the version of the last aggregation that moved each (−1: none
    /// yet), `[U]` each; none in a model without unit groups.
    unit_moves: Option<(Tensor, Tensor)>,
    /// The version the last aggregation produced, and the aggregations a cycle spans.
    version: i64,
    cycle: i64,
}

impl SegmentImportance {
    pub fn new(cfg: SegmentImportanceConfig) -> Self {
        SegmentImportance { cfg, segments: None, coverage: None, unit_moves: None, version: 0, cycle: 1 }
    }

    /// The share of the units' elements last moved at a version above `after`.
    fn moved_after(&self, after: i64) -> Option<f64> {
        let (sizes, last) = self.unit_moves.as_ref()?;
        let moved = (sizes * last.gt(after).to_kind(Kind::Float)).sum(Kind::Float);
        Some(moved.double_value(&[]) / sizes.sum(Kind::Float).double_value(&[]))
    }
}

impl Aggregator for SegmentImportance {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let shapes = global.shapes();
        let device = global.tensors()[0].device();
        let segments = self.segments.get_or_insert_with(|| Segments::new(ctx.structure, &shapes, device));
        let mut num: Vec<Tensor> = global.tensors().iter().map(Tensor::zeros_like).collect();
        let mut den: Vec<Tensor> = global.tensors().iter().map(Tensor::zeros_like).collect();
        for (u, staleness) in updates.iter().zip(ctx.staleness) {
            let drift: Vec<Tensor> = global.tensors().iter().zip(u.base.tensors()).map(|(g, b)| g - b).collect();
            let gamma = segments.l1(u.delta.tensors()) / (segments.l1(&drift) + &segments.sizes);
            for (i, covered) in u.mask.dense(&shapes, device).into_iter().enumerate() {
                let weight = gamma.index_select(0, &segments.ids[i]).view(shapes[i].as_slice()) * covered;
                num[i] = &num[i] + &weight * &u.delta.tensors()[i] * staleness.weight;
                den[i] = &den[i] + weight;
            }
        }
        let grouped: Vec<&Tensor> = den.iter().zip(&segments.grouped).filter(|(_, g)| **g).map(|(d, _)| d).collect();
        if !grouped.is_empty() {
            let moved = grouped.iter().fold(Tensor::zeros([], (Kind::Float, device)), |acc, d| {
                acc + d.gt(0.0).to_kind(Kind::Float).sum(Kind::Float)
            });
            let elements: i64 = grouped.iter().map(|d| d.numel() as i64).sum();
            self.coverage = Some(moved / elements as f64);
        }
        if segments.units > 0 {
            let moved = segments.ids.iter().zip(&den).fold(segments.sizes.zeros_like(), |acc, (id, d)| {
                acc.index_add(0, id, &d.gt(0.0).to_kind(Kind::Float).view(-1))
            });
            let (_, last) = self.unit_moves.get_or_insert_with(|| {
                let sizes = segments.sizes.narrow(0, 0, segments.units).copy();
                let never = Tensor::full([segments.units], -1, (Kind::Int64, device));
                (sizes, never)
            });
            let _ = last.masked_fill_(&moved.narrow(0, 0, segments.units).gt(0.0), ctx.version as i64 + 1);
        }
        self.version = ctx.version as i64 + 1;
        self.cycle = ctx.structure.map_or(1, |s| s.blocks().max(1) as i64);
        let tensors = global
            .tensors()
            .iter()
            .zip(num.iter().zip(&den))
            .map(|(w, (n, d))| {
                let trained = d.gt(0.0);
                w + (n / d.where_self(&trained, &d.ones_like())) * trained.to_kind(Kind::Float) * self.cfg.rate
            })
            .collect();
        ParamSet::new(global.names().to_vec(), tensors)
    }

    fn diagnostics(&self) -> Vec<(String, f64)> {
        let Some(last) = &self.coverage else { return Vec::new() };
        let mut out = vec![("unit_coverage".to_string(), last.double_value(&[]))];
        // Before a whole cycle has passed, the cycle is the run so far.
        let spans = [("unit_coverage_cycle", (self.version - self.cycle).max(-1)), ("unit_coverage_ever", -1)];
        out.extend(spans.into_iter().filter_map(|(name, after)| Some((name.to_string(), self.moved_after(after)?))));
        out
    }

    // The segments are rebuilt from the structure; the coverage and the versions of the last
    // moves are kept so that a resumed run logs what the uninterrupted one does.
    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        if let Some((sizes, last)) = &self.unit_moves {
            out.put_tensor("unit_sizes", sizes);
            out.put_tensor("unit_last_moved", last);
        }
        out.put("version", &self.version)?;
        out.put("cycle", &self.cycle)?;
        out.put("unit_coverage", &self.coverage.as_ref().map(|c| c.double_value(&[])))
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        // Checkpoints written before a diagnostic existed lack it: it starts again from there.
        let coverage: Option<f64> = saved.get("unit_coverage").ok().flatten();
        self.coverage = coverage.map(|c| Tensor::from(c as f32));
        self.unit_moves = saved.tensor("unit_sizes").ok().zip(saved.tensor("unit_last_moved").ok());
        self.version = saved.get("version").unwrap_or(0);
        self.cycle = saved.get("cycle").unwrap_or(1);
        Ok(())
    }
}

fl_core::register!(Aggregator "segment-importance" => SegmentImportance::new(SegmentImportanceConfig),
    summary: "Co-S²P: each head, neuron or ungrouped tensor moves by its clients' deltas weighted by ‖Δ‖₁ / (‖drift since their start‖₁ + size) (optionally damped by a rate and the staleness weight)",
    paper: "Li et al., Unity is Power (Co-S²P), arXiv:2410.08457, Eqs. 4–5");

#[cfg(test)]
mod tests {
    use super::*;
    use fl_core::{Mask, TensorSpec, UnitGroup, UnitMember, UpdateStaleness};

    fn set(values: &[&[f32]], shapes: &[&[i64]]) -> ParamSet {
        let tensors = values.iter().zip(shapes).map(|(v, s)| Tensor::from_slice(v).reshape(*s)).collect();
        ParamSet::new(vec!["a".into(), "b".into()], tensors).unwrap()
    }

    fn update(base: ParamSet, delta: ParamSet, mask: Mask) -> ClientUpdate {
        fl_core::testing::client_update(base, delta, mask, 1)
    }

    /// `a` `[2, 3]` whose rows are the 2 units of a group; `b` `[3]` in no group.
    fn structure() -> Structure {
        let tensors = vec![TensorSpec::new("a", [2, 3]), TensorSpec::new("b", [3])];
        let member = UnitMember { tensor: 0, dim: 0, block: 1 };
        Structure { tensors, groups: vec![UnitGroup { name: "rows".into(), units: 2, members: vec![member] }] }
    }

    /// The aggregation of fresh `updates` on the model of [`structure`], as values, and the
    /// aggregator's unit coverage after it.
    fn aggregate(global: &ParamSet, updates: &[ClientUpdate]) -> (Vec<Vec<f32>>, f64) {
        damped(global, updates, 1.0, &vec![1.0; updates.len()])
    }

    /// [`aggregate`] at server rate `rate`, update `n` with staleness weight `weights[n]`.
    fn damped(global: &ParamSet, updates: &[ClientUpdate], rate: f64, weights: &[f64]) -> (Vec<Vec<f32>>, f64) {
        let s = structure();
        let staleness: Vec<UpdateStaleness> =
            weights.iter().map(|&weight| UpdateStaleness { versions: 0, seconds: 0.0, weight }).collect();
        let n = updates.len();
        let ctx = AggregateCtx {
            version: 1,
            num_clients: n,
            total_samples: n,
            now: 0,
            staleness: &staleness,
            structure: Some(&s),
        };
        let mut aggregator = SegmentImportance::new(SegmentImportanceConfig { rate });
        assert!(aggregator.diagnostics().is_empty(), "no coverage before an aggregation");
        let next = aggregator.aggregate(global, updates, &ctx).unwrap();
        let coverage = diagnostic(&aggregator, "unit_coverage");
        (next.tensors().iter().map(|t| Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap()).collect(), coverage)
    }

    fn diagnostic(aggregator: &SegmentImportance, name: &str) -> f64 {
        let all = aggregator.diagnostics();
        all.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name} in {all:?}")).1
    }

    /// Two updates of the model `a` = 1, `b` = 0. The first is fresh: segments row 0, row 1
    /// and `b` get γ = |Δ|₁ / size = 0.9/3, 0, 0.6/3. The second started from a model whose row
    /// 0 has since moved by 0.5 per element (drift 1.5): γ = 1.8/(1.5 + 3) = 0.4, 0.9/3 = 0.3,
    /// 0.3/3 = 0.1.
    fn fresh_and_stale(global: &ParamSet) -> [ClientUpdate; 2] {
        let shapes: [&[i64]; 2] = [&[2, 3], &[3]];
        let delta = set(&[&[0.3, 0.3, 0.3, 0.0, 0.0, 0.0], &[0.6, 0.0, 0.0]], &shapes);
        let fresh = update(global.shallow_clone(), delta, Mask::Full);
        let base = set(&[&[0.5, 0.5, 0.5, 1.0, 1.0, 1.0], &[0.0; 3]], &shapes);
        let stale = update(base, set(&[&[0.6, 0.6, 0.6, 0.3, 0.3, 0.3], &[0.0, 0.3, 0.0]], &shapes), Mask::Full);
        [fresh, stale]
    }

    fn assert_close(got: &[Vec<f32>], want: &[Vec<f64>]) {
        for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
            assert!((g - *w as f32).abs() < 1e-6, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn each_segment_weighs_its_clients_by_update_size_over_drift() {
        let shapes: [&[i64]; 2] = [&[2, 3], &[3]];
        let global = set(&[&[1.0; 6], &[0.0; 3]], &shapes);
        let (got, coverage) = aggregate(&global, &fresh_and_stale(&global));
        assert_eq!(coverage, 1.0, "whole models cover every unit");
        // Row 0: 1 + (0.3·0.3 + 0.4·0.6)/0.7; row 1: 1 + (0.3·0.3)/0.3; b: (0.2·0.6)/0.3,
        // (0.1·0.3)/0.3, 0.
        let row0 = 1.0 + (0.09 + 0.24) / 0.7;
        let want = [vec![row0, row0, row0, 1.3, 1.3, 1.3], vec![0.4, 0.1, 0.0]];
        assert_close(&got, &want);
    }

    #[test]
    fn damping_scales_each_delta_by_its_staleness_weight_after_the_normalisation_and_the_step_by_the_rate() {
        let shapes: [&[i64]; 2] = [&[2, 3], &[3]];
        let global = set(&[&[1.0; 6], &[0.0; 3]], &shapes);
        let delta = || set(&[&[0.4, 0.4, 0.4, -0.2, 0.0, 0.2], &[0.6, 0.0, -0.6]], &shapes);
        // A lone update: γ̃ = 1 wherever it moved, so it moves by rate · s · Δ = 0.6 · 0.5 · Δ.
        let lone = update(global.shallow_clone(), delta(), Mask::Full);
        let (got, _) = damped(&global, &[lone], 0.6, &[0.5]);
        let want = [vec![1.12, 1.12, 1.12, 0.94, 1.0, 1.06], vec![0.18, 0.0, -0.18]];
        assert_close(&got, &want);
        // [`fresh_and_stale`], the stale one at s = 0.5, rate 0.5:
        // row 0: 1 + 0.5·(0.3·0.3 + 0.4·0.6·0.5)/0.7 = 1.15; row 1: 1 + 0.5·(0.3·0.3·0.5)/0.3
        // = 1.075; b: 0.5·(0.2·0.6)/0.3 = 0.2, 0.5·(0.1·0.3·0.5)/0.3 = 0.025, 0.
        let (got, _) = damped(&global, &fresh_and_stale(&global), 0.5, &[1.0, 0.5]);
        let want = [vec![1.15, 1.15, 1.15, 1.075, 1.075, 1.075], vec![0.2, 0.025, 0.0]];
        assert_close(&got, &want);
    }

    #[test]
    fn a_rate_outside_zero_to_one_is_refused_by_name() {
        for rate in [0.0, -0.5, 1.5, f64::NAN] {
            let err = SegmentImportanceConfig { rate }.validate().unwrap_err();
            assert_eq!(err.key, "rate", "rate {rate}");
        }
        assert!(SegmentImportanceConfig::default().validate().is_ok());
    }

    #[test]
    fn an_element_outside_every_mask_stays_and_a_lone_trainer_moves_it_fully() {
        let shapes: [&[i64]; 2] = [&[2, 3], &[3]];
        let global = set(&[&[1.0; 6], &[0.0; 3]], &shapes);
        let s = structure();
        // Only row 1 of `a` trained (a structured mask keeping unit 1); `b` left out whole.
        let Mask::Structured(rows) = s.mask_from_units(&[Some(vec![1])]).unwrap() else { unreachable!() };
        let roles = vec![fl_core::TensorRole::Train, fl_core::TensorRole::Freeze];
        let mask = Mask::Structured(rows.with_roles(roles));
        let delta = set(&[&[0.0, 0.0, 0.0, 0.5, -0.5, 0.25], &[0.0; 3]], &shapes);
        let (got, coverage) = aggregate(&global, &[update(global.shallow_clone(), delta, mask)]);
        assert_eq!(got, [vec![1.0, 1.0, 1.0, 1.5, 0.5, 1.25], vec![0.0; 3]]);
        assert_eq!(coverage, 0.5, "one of the group's two units moved");
    }

    #[test]
    fn cycle_coverage_spans_the_last_block_count_of_aggregations_and_ever_coverage_the_run() {
        let shapes: [&[i64]; 2] = [&[2, 3], &[3]];
        // `a` in block 2 of a three-block model: a cycle is the last 3 aggregations.
        let mut s = structure();
        s.tensors[0] = s.tensors[0].clone().at(fl_core::Depth::Block(2));
        let mut aggregator = SegmentImportance::new(SegmentImportanceConfig::default());
        let mut global = set(&[&[1.0; 6], &[0.0; 3]], &shapes);
        // Aggregations 1 to 4 move unit 0, then unit 1 of `a` (and `b`, not a unit).
        let mut seen = Vec::new();
        for (version, unit) in [(0u64, 0i64), (1, 1), (2, 1), (3, 1)] {
            let mut rows = [0.0f32; 6];
            rows[unit as usize * 3..][..3].fill(0.5);
            let delta = set(&[&rows, &[0.1; 3]], &shapes);
            let Mask::Structured(mask) = s.mask_from_units(&[Some(vec![unit])]).unwrap() else { unreachable!() };
            let u = update(global.shallow_clone(), delta, Mask::Structured(mask));
            let staleness = [UpdateStaleness { versions: 0, seconds: 0.0, weight: 1.0 }];
            let ctx = AggregateCtx {
                version,
                num_clients: 1,
                total_samples: 1,
                now: 0,
                staleness: &staleness,
                structure: Some(&s),
            };
            global = aggregator.aggregate(&global, &[u], &ctx).unwrap();
            let read = |name| diagnostic(&aggregator, name);
            seen.push([read("unit_coverage"), read("unit_coverage_cycle"), read("unit_coverage_ever")]);
        }
        // Unit 1 never moved before aggregation 2; unit 0 last moved 3 aggregations before the
        // fourth.
        assert_eq!(seen, [[0.5, 0.5, 0.5], [0.5, 1.0, 1.0], [0.5, 1.0, 1.0], [0.5, 0.5, 1.0]]);
    }
}
