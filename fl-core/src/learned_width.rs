//! Learned width masks (Co-S²P §2.3–2.4): importance scores a client keeps over the units of
//! some unit groups, and the binary masks they finalise to under a width budget.
//!
//! A mask policy that lets its clients choose their own widths dispatches a depth window at
//! full width with a [`WidthBudget`]: the share `R^width` of the budget groups' parameters the
//! client's mask keeps, the groups whose masks it learns and those it draws at random (Table 3's
//! ablation). The trainer keeps the client's scores as its state
//! ([`crate::TrainOutcome::state`], one `[units]` tensor per group named [`score_name`]): in a
//! mask round it trains them first (`[trainer] width_masks`), then [`finalize`]s them and trains
//! the kept units. Once the scores no longer train, the policy reads them
//! ([`crate::MaskCtx::client_state`]) and dispatches the finalised mask ([`kept_units`]) as a
//! physically smaller sub-model, which prices and trains exactly what the client keeps.

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::mask::StructuredMask;
use crate::params::ParamSet;
use crate::rng::Rng;
use crate::structure::{Structure, UnitMember};

/// What a job's client decides about its own width.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WidthBudget {
    /// `R^width`: the share of the budget groups' parameters the finalised mask keeps.
    pub ratio: f64,
    /// Groups (indices into [`Structure::groups`]) whose masks the client learns.
    pub learned: Vec<usize>,
    /// Groups whose masks are random: scores drawn at the client's first sight of the group and
    /// never trained, each group keeping `R^width` of its units.
    pub random: Vec<usize>,
    /// Whether this job trains the scores (a mask round) before training the weights.
    pub learn: bool,
    /// How the learned groups share the budget.
    #[serde(default)]
    pub allocation: WidthAllocation,
}

/// How a finalised mask shares `R^width` among the learned groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WidthAllocation {
    /// The best units over all learned groups together, each group keeping at least its best
    /// (spec §2.4's FinalizeMask): one group may keep every unit and another one.
    #[default]
    Global,
    /// Each group its own `round(R^width · units)` best units (at least one), as rolling and
    /// random widths keep them.
    PerGroup,
}

impl WidthBudget {
    /// A budget whose learned groups share `ratio` over all of them
    /// ([`WidthAllocation::Global`]).
    pub fn new(ratio: f64, learned: Vec<usize>, random: Vec<usize>, learn: bool) -> Self {
        WidthBudget { ratio, learned, random, learn, allocation: WidthAllocation::Global }
    }

    /// Every group of the budget, learned ones first.
    pub fn groups(&self) -> impl Iterator<Item = usize> + '_ {
        self.learned.iter().chain(&self.random).copied()
    }
}

/// The name of a group's scores in a client's state.
pub fn score_name(group: &str) -> String {
    format!("width_scores.{group}")
}

/// Parameters one unit of group `g` spans over all its member tensors (a head: its rows of
/// q, k, v and their biases, and its columns of the projection).
pub fn unit_params(structure: &Structure, g: usize) -> i64 {
    structure.groups[g]
        .members
        .iter()
        .map(|m| {
            let shape = &structure.tensors[m.tensor].shape;
            shape.iter().product::<i64>() / shape[m.dim] * m.block
        })
        .sum()
}

/// A group's first scores: for a learned group the logit of `ratio` for every unit (each kept
/// with probability `R^width` when sampled; the paper does not say), for a random one uniform
/// draws from `rng`.
pub fn initial_scores(units: i64, ratio: f64, learned: bool, rng: &mut Rng) -> Tensor {
    if learned {
        let p = ratio.clamp(1e-3, 1.0 - 1e-3);
        Tensor::full([units], (p / (1.0 - p)).ln(), (Kind::Float, Device::Cpu))
    } else {
        crate::rng::uniform(rng, &[units], 1.0)
    }
}

/// The 0/1 masks `[C, units]` of a cohort's clients: `learned` and `random` hold their scores
/// `[C, units]` per group, in the budget's order, and `ratio` each client's `R^width` `[C]`.
///
/// Learned groups under [`WidthAllocation::Global`]: every group keeps its best unit (a block
/// never loses a whole layer), then units in descending score over all learned groups
/// together, while the parameters kept stay within `R^width` of theirs (spec §2.4's
/// FinalizeMask, which guarantees the budget); under [`WidthAllocation::PerGroup`] each keeps
/// its own `round(R^width · units)` best (at least one), as random groups always do. Ties go to
/// the lower index.
pub fn finalize(
    learned: &[Tensor],
    unit_params: &[i64],
    random: &[Tensor],
    ratio: &Tensor,
    allocation: WidthAllocation,
) -> (Vec<Tensor>, Vec<Tensor>) {
    let per_group = |scores: &[Tensor]| scores.iter().map(|s| finalize_per_group(s, ratio)).collect();
    let learned = match allocation {
        WidthAllocation::Global => finalize_global(learned, unit_params, ratio),
        WidthAllocation::PerGroup => per_group(learned),
    };
    (learned, per_group(random))
}

fn finalize_global(scores: &[Tensor], unit_params: &[i64], ratio: &Tensor) -> Vec<Tensor> {
    let Some(first) = scores.first() else { return Vec::new() };
    let units: Vec<i64> = scores.iter().map(|s| s.size()[1]).collect();
    finalize_global_weighted(scores, &UnitWeights::new(&units, unit_params, first.device()), ratio)
}

/// What a global allocation weighs each learned unit by: the parameters it spans, in the
/// order [`finalize`] ranks the groups' units (`[U]`, float64, on the scores' device), and
/// their sum. Made once, so that a step finalising at every step copies nothing from the host.
pub struct UnitWeights {
    weights: Tensor,
    total: f64,
}

impl UnitWeights {
    /// For groups of `units[i]` units spanning `unit_params[i]` parameters each.
    pub fn new(units: &[i64], unit_params: &[i64], device: Device) -> Self {
        let weights: Vec<f64> =
            units.iter().zip(unit_params).flat_map(|(&n, &w)| std::iter::repeat_n(w as f64, n as usize)).collect();
        UnitWeights { total: weights.iter().sum(), weights: Tensor::from_slice(&weights).to_device(device) }
    }

    /// The weights' tensor, which a step replayed from a CUDA graph reads.
    pub fn tensor_mut(&mut self) -> &mut Tensor {
        &mut self.weights
    }
}

/// [`finalize`]'s global allocation of the learned groups' `scores`, their units weighed by
/// `weights` (made for these groups).
pub fn finalize_global_weighted(scores: &[Tensor], weights: &UnitWeights, ratio: &Tensor) -> Vec<Tensor> {
    let Some(first) = scores.first() else { return Vec::new() };
    let clients = first.size()[0];
    let forced: Vec<Tensor> =
        scores.iter().map(|s| s.to_kind(Kind::Double).scatter_value(1, &s.argmax(1, true), f64::INFINITY)).collect();
    let priority = Tensor::cat(&forced, 1);
    let total = weights.total;
    let weights = weights.weights.expand([clients, -1], false);
    let (sorted, order) = priority.sort_stable(true, 1, true);
    let cumulative = weights.gather(1, &order, false).cumsum(1, Kind::Double);
    let budget = ratio.to_kind(Kind::Double).unsqueeze(1) * total * (1.0 + 1e-9);
    let keep_sorted = cumulative.le_tensor(&budget).logical_or(&sorted.isinf()).to_kind(Kind::Float);
    let keep = keep_sorted.zeros_like().scatter(1, &order, &keep_sorted);
    let sizes: Vec<i64> = scores.iter().map(|s| s.size()[1]).collect();
    keep.split_with_sizes(&sizes, 1)
}

fn finalize_per_group(scores: &Tensor, ratio: &Tensor) -> Tensor {
    let units = scores.size()[1];
    let count = (ratio.to_kind(Kind::Double) * units as f64).round().clamp(1.0, units as f64).unsqueeze(1);
    let order = scores.to_kind(Kind::Double).sort_stable(true, 1, true).1;
    let rank = order.argsort(1, false);
    rank.to_kind(Kind::Double).lt_tensor(&count).to_kind(Kind::Float)
}

/// The kept units per group of `structure` (`None` outside the budget) that a client whose
/// state is `state` finalises to, or `None` while the state lacks some budget group's scores
/// (a client that has not seen those blocks yet).
pub fn kept_units(
    structure: &Structure,
    budget: &WidthBudget,
    state: Option<&ParamSet>,
) -> Option<Vec<Option<Vec<i64>>>> {
    let state = state?;
    let scores_of = |g: &usize| -> Option<Tensor> {
        let name = score_name(&structure.groups[*g].name);
        let i = state.names().iter().position(|n| *n == name)?;
        Some(state.tensors()[i].to_device(Device::Cpu).unsqueeze(0))
    };
    let learned: Vec<Tensor> = budget.learned.iter().map(scores_of).collect::<Option<_>>()?;
    let random: Vec<Tensor> = budget.random.iter().map(scores_of).collect::<Option<_>>()?;
    let params: Vec<i64> = budget.learned.iter().map(|&g| unit_params(structure, g)).collect();
    let ratio = Tensor::from_slice(&[budget.ratio]);
    let (learned, random) = finalize(&learned, &params, &random, &ratio, budget.allocation);
    let mut kept = vec![None; structure.groups.len()];
    for (g, mask) in budget.groups().zip(learned.iter().chain(&random)) {
        kept[g] = Some(kept_indices(mask));
    }
    Some(kept)
}

/// Where member `m` of group `g` is among a job's tensors `names`; an error naming both when
/// the (sub-)model does not hold it.
pub fn member_tensor(structure: &Structure, names: &[String], g: usize, m: &UnitMember) -> crate::Result<usize> {
    let name = &structure.tensors[m.tensor].name;
    names.iter().position(|n| n == name).ok_or_else(|| {
        crate::Error::component(
            "width budget",
            format!("group `{}` reaches `{name}`, which the sub-model does not hold", structure.groups[g].name),
        )
    })
}

/// The units a 0/1 mask over one group's units keeps, in ascending order.
pub fn kept_indices(mask: &Tensor) -> Vec<i64> {
    let flags = Vec::<f32>::try_from(mask.reshape([-1]).to_device(Device::Cpu)).expect("a float mask reads back");
    (0..flags.len() as i64).filter(|&u| flags[u as usize] > 0.5).collect()
}

/// What a job that chooses its width inside `mask` trains, sized for pricing before the client
/// has chosen: `mask` with every budget group cut to its first `round(R^width · units)` units
/// (at least one). The learned mask keeps at most `R^width` of the learned groups' parameters
/// and each random group that share of its units, so the sizes match up to rounding; which
/// units it keeps does not change the cost.
pub fn budget_sized(structure: &Structure, mask: &StructuredMask, budget: &WidthBudget) -> StructuredMask {
    let mut kept = vec![None; structure.groups.len()];
    for g in budget.groups() {
        kept[g] = Some((0..structure.groups[g].kept_at(budget.ratio)).collect());
    }
    mask.narrowed(structure, &kept)
}

/// Per tensor of a (sub-)model whose tensors are `names`, the `[C, ...]` factor that zeroes
/// the units `masks` drop (one `[C, units]` 0/1 mask per group of `groups`), or `None` where no
/// group reaches the tensor. The groups' tensors must be held at full width.
///
/// [`member_tensor`] finds each member among `names`.
pub fn tensor_factors(
    structure: &Structure,
    names: &[String],
    groups: &[usize],
    masks: &[Tensor],
) -> crate::Result<Vec<Option<Tensor>>> {
    let mut factors: Vec<Option<Tensor>> = (0..names.len()).map(|_| None).collect();
    for (&g, mask) in groups.iter().zip(masks) {
        for m in &structure.groups[g].members {
            let spec = &structure.tensors[m.tensor];
            let i = member_tensor(structure, names, g, m)?;
            let mut shape = vec![1i64; spec.shape.len() + 1];
            shape[0] = mask.size()[0];
            shape[m.dim + 1] = spec.shape[m.dim];
            let factor = mask.repeat_interleave_self_int(m.block, Some(1), None::<i64>).reshape(shape.as_slice());
            factors[i] = Some(match factors[i].take() {
                Some(f) => f * factor,
                None => factor,
            });
        }
    }
    Ok(factors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.reshape([-1])).unwrap()
    }

    #[test]
    fn learned_groups_keep_their_best_units_within_the_parameter_budget() {
        // Group a: 4 units of 10 parameters; group b: 2 units of 30; 100 in all, budget 0.5 → 50.
        let a = Tensor::from_slice(&[0.1f32, 3.0, -1.0, 2.0]).unsqueeze(0);
        let b = Tensor::from_slice(&[-5.0f32, -4.0]).unsqueeze(0);
        let (kept, _) = finalize(&[a, b], &[10, 30], &[], &Tensor::from_slice(&[0.5f64]), WidthAllocation::Global);
        // Forced: a's unit 1 (10) and b's unit 1 (30) → 40; next by score: a's 3 (2.0) → 50 ≤ 50;
        // then a's 0 (0.1) → 60 > 50: stop.
        assert_eq!(floats(&kept[0]), [0.0, 1.0, 0.0, 1.0]);
        assert_eq!(floats(&kept[1]), [0.0, 1.0]);
    }

    #[test]
    fn per_group_allocation_keeps_each_groups_share_where_global_lets_one_group_take_it() {
        // Two groups of 4 units of 10 parameters; budget 0.5 → 40 of 80.
        let a = || Tensor::from_slice(&[3.0f32, 2.0, 1.0, 0.5]).unsqueeze(0);
        let b = || Tensor::from_slice(&[-5.0f32, -4.0, -3.0, -2.0]).unsqueeze(0);
        let ratio = Tensor::from_slice(&[0.5f64]);
        // Global: forced a's 0 and b's 3 (20), then a's 1 (30) and a's 2 (40 ≤ 40), a's 3 → 50.
        let (global, _) = finalize(&[a(), b()], &[10, 10], &[], &ratio, WidthAllocation::Global);
        assert_eq!((floats(&global[0]), floats(&global[1])), (vec![1.0, 1.0, 1.0, 0.0], vec![0.0, 0.0, 0.0, 1.0]));
        // Per group: round(0.5 · 4) = 2 best units of each.
        let (own, _) = finalize(&[a(), b()], &[10, 10], &[], &ratio, WidthAllocation::PerGroup);
        assert_eq!((floats(&own[0]), floats(&own[1])), (vec![1.0, 1.0, 0.0, 0.0], vec![0.0, 0.0, 1.0, 1.0]));
    }

    #[test]
    fn clients_of_a_cohort_finalise_with_their_own_ratios() {
        let scores = Tensor::from_slice(&[4.0f32, 3.0, 2.0, 1.0, 1.0, 2.0, 3.0, 4.0]).reshape([2, 4]);
        let (kept, _) = finalize(&[scores], &[1], &[], &Tensor::from_slice(&[0.25f64, 0.75]), WidthAllocation::Global);
        assert_eq!(floats(&kept[0]), [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn a_budget_is_priced_as_its_share_of_each_group() {
        use crate::structure::{TensorSpec, UnitGroup, UnitMember};
        // 3 → 4 → 2 → 5: fc1 has 4 neurons, fc2 2; R^width = 0.5 keeps 2 and 1 of them.
        let tensors = vec![
            TensorSpec::new("fc1.weight", [4, 3]),
            TensorSpec::new("fc1.bias", [4]),
            TensorSpec::new("fc2.weight", [2, 4]),
            TensorSpec::new("fc2.bias", [2]),
            TensorSpec::new("fc3.weight", [5, 2]),
            TensorSpec::new("fc3.bias", [5]),
        ];
        let member = |tensor, dim| UnitMember { tensor, dim, block: 1 };
        let groups = vec![
            UnitGroup { name: "fc1".into(), units: 4, members: vec![member(0, 0), member(1, 0), member(2, 1)] },
            UnitGroup { name: "fc2".into(), units: 2, members: vec![member(2, 0), member(3, 0), member(4, 1)] },
        ];
        let structure = Structure { tensors, groups };
        let crate::Mask::Structured(whole) = structure.mask_from_units(&[None, None]).unwrap() else { unreachable!() };
        let budget = budget_of(0.5);
        let sized =
            crate::Mask::Structured(budget_sized(&structure, &whole.with_width_budget(budget.clone()), &budget));
        assert_eq!(sized.kept_per_tensor(&structure.shapes()), [6, 2, 2, 1, 5, 5]);
        assert!(sized.width_budget().is_none(), "the sized mask is what the client trains");
        // Unit param counts: a neuron of fc1 spans 3 + 1 + 2 parameters, one of fc2 4 + 1 + 5.
        assert_eq!((unit_params(&structure, 0), unit_params(&structure, 1)), (6, 10));
    }

    fn budget_of(ratio: f64) -> WidthBudget {
        WidthBudget::new(ratio, vec![0], vec![1], true)
    }

    #[test]
    fn random_groups_keep_a_rounded_share_of_each_group() {
        let scores = Tensor::from_slice(&[0.3f32, -0.2, 0.9, 0.1, 0.5, -0.7]).unsqueeze(0);
        let (_, kept) =
            finalize(&[], &[], &[scores.shallow_clone()], &Tensor::from_slice(&[0.5f64]), WidthAllocation::Global);
        assert_eq!(floats(&kept[0]), [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
        // A ratio too small for one unit still keeps one.
        let (_, one) = finalize(&[], &[], &[scores], &Tensor::from_slice(&[0.01f64]), WidthAllocation::Global);
        assert_eq!(floats(&one[0]), [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    }
}
