//! Pruning while training with PLATON's upper-confidence-bound importance (Zhang et al.,
//! "PLATON: Pruning Large Transformer Models with Upper Confidence Bound of Weight
//! Importance", ICML 2022), on structured units as Co-S²P's baselines use it (spec cos2p.md
//! §3.6: "FedAvg+PLATON").
//!
//! A job with a [`WidthBudget`] trains the whole held model and prunes it on the way. After
//! every step's backward pass each element of the budget groups' tensors gets
//!
//! ```text
//! I = |θ ⊙ ∇θL|,   Ī ← β₁ Ī + (1 − β₁) I,   Ū ← β₂ Ū + (1 − β₂) |I − Ī|,   S = Ī · Ū
//! ```
//!
//! (moments from zero, as the authors' code starts them), and a unit's score is the sum of
//! `S` over the elements it spans. After the step's update the client keeps, by descending
//! score over all budget groups together, the units whose parameters fit within its kept ratio
//! `r(t)` (every group keeping its best unit: [`crate::learned_width::finalize`]) and zeroes
//! the others. `r(t)` follows PLATON's cubic schedule over the job's `T` steps: 1 for the first
//! `t_i = ⌊warmup · T⌋` steps, `R + (1 − R)(1 − (t − t_i)/(T − t_f − t_i))³` after them and
//! the budget's `R^width` for the last `t_f = max(⌊final · T⌋, 1)` (so the job ends at its
//! budget). A pruned unit still receives gradients and may return while `r(t)` allows; the
//! mask of the last step is what the client keeps ([`crate::TrainOutcome::kept_units`]): it
//! uploads those units only, and the server averages each element over the clients that kept
//! it (`coverage-mean`).
//!
//! The paper prunes one fine-tuning run; a federated client prunes its every job from the
//! global model it receives, its moments starting from zero each time.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::error::{InvalidKey, Result};
use crate::learned_width::{
    UnitWeights, WidthBudget, finalize_global_weighted, kept_indices, member_tensor, tensor_factors, unit_params,
};
use crate::structure::Structure;

/// `[trainer] platon`: PLATON's moments and its cubic schedule, as shares of a job's steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlatonConfig {
    /// β₁: the importance's moving average (the paper's 0.85).
    pub beta1: f64,
    /// β₂: the uncertainty's moving average (the paper's 0.95).
    pub beta2: f64,
    /// Share of a job's steps before pruning starts (`t_i`).
    pub warmup: f64,
    /// Share of a job's steps at the final ratio (`t_f`; at least the last step).
    pub final_share: f64,
}

impl Default for PlatonConfig {
    fn default() -> Self {
        PlatonConfig { beta1: 0.85, beta2: 0.95, warmup: 0.1, final_share: 0.3 }
    }
}

impl PlatonConfig {
    /// Checks every value's range; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        for (key, beta) in [("platon.beta1", self.beta1), ("platon.beta2", self.beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(InvalidKey::new(key, format!("expected a value in [0, 1), got {beta}")));
            }
        }
        for (key, share) in [("platon.warmup", self.warmup), ("platon.final_share", self.final_share)] {
            if !(0.0..1.0).contains(&share) {
                return Err(InvalidKey::new(key, format!("expected a share in [0, 1), got {share}")));
            }
        }
        if self.warmup + self.final_share >= 1.0 {
            return Err(InvalidKey::new(
                "platon.final_share",
                format!(
                    "warmup + final_share must leave steps to prune in: {} + {} ≥ 1",
                    self.warmup, self.final_share
                ),
            ));
        }
        Ok(())
    }

    /// The kept ratio at step `t` of a job of `steps` steps whose budget keeps `ratio`.
    pub fn kept_ratio(&self, t: usize, steps: usize, ratio: f64) -> f64 {
        let start = (self.warmup * steps as f64).floor() as usize;
        let end = steps.saturating_sub(((self.final_share * steps as f64).floor() as usize).max(1));
        if t >= end {
            ratio
        } else if t < start {
            1.0
        } else {
            let left = 1.0 - (t - start) as f64 / (end - start) as f64;
            ratio + (1.0 - ratio) * left.powi(3)
        }
    }
}

/// Where one unit group reaches one tensor of the job: the tensor's index among the job's
/// tensors, the unit dimension (of the stacked tensor) and the elements per unit along it.
struct Reach {
    tensor: usize,
    dim: usize,
    block: i64,
}

/// A cohort's pruning state: the moments of every reached tensor and the current masks.
pub(crate) struct Platon {
    cfg: PlatonConfig,
    /// The budget's groups (indices into the structure's), learned ones first.
    groups: Vec<usize>,
    /// Per budget group, where it reaches the job's tensors.
    reaches: Vec<Vec<Reach>>,
    /// What the global allocation weighs the groups' units by: the parameters each spans.
    weights: UnitWeights,
    /// Per job tensor, `(Ī, Ū)` stacked `[C, ...]` where a budget group reaches it.
    moments: Vec<Option<(Tensor, Tensor)>>,
    /// Kept ratio per step and client, `[step][client]` (1 past a client's last step).
    ratios: Vec<Vec<f64>>,
    /// The same, `[T, C]` (float64) on the device: the rows a step reads.
    ratio_table: Tensor,
    /// Per budget group, each client's current 0/1 mask `[C, units]`.
    masks: Vec<Tensor>,
}

impl Platon {
    /// The pruning of a cohort whose jobs hold `names` at full width of `budget`'s groups,
    /// stacked as `params`, client `c` making `steps[c]` steps to keep `ratios[c]`.
    pub(crate) fn new(
        cfg: &PlatonConfig,
        structure: &Structure,
        budget: &WidthBudget,
        names: &[String],
        params: &[Tensor],
        steps: &[usize],
        ratios: &[f64],
    ) -> Result<Platon> {
        let groups: Vec<usize> = budget.groups().collect();
        let mut reaches = Vec::with_capacity(groups.len());
        for &g in &groups {
            let group = &structure.groups[g];
            let mut of_group = Vec::new();
            for m in &group.members {
                let tensor = member_tensor(structure, names, g, m)?;
                of_group.push(Reach { tensor, dim: m.dim + 1, block: m.block });
            }
            reaches.push(of_group);
        }
        let mut moments: Vec<Option<(Tensor, Tensor)>> = (0..names.len()).map(|_| None).collect();
        for reach in reaches.iter().flatten() {
            let p = &params[reach.tensor];
            moments[reach.tensor].get_or_insert_with(|| (p.zeros_like(), p.zeros_like()));
        }
        let longest = steps.iter().copied().max().unwrap_or(0);
        let table: Vec<Vec<f64>> = (0..longest)
            .map(|t| {
                steps.iter().zip(ratios).map(|(&n, &r)| if t < n { cfg.kept_ratio(t, n, r) } else { 1.0 }).collect()
            })
            .collect();
        let (clients, device) = (ratios.len() as i64, params[0].device());
        let masks =
            groups.iter().map(|&g| Tensor::ones([clients, structure.groups[g].units], (Kind::Float, device))).collect();
        let flat: Vec<f64> = table.iter().flatten().copied().collect();
        let ratio_table = Tensor::from_slice(&flat).reshape([longest as i64, clients]).to_device(device);
        let unit_params: Vec<i64> = groups.iter().map(|&g| unit_params(structure, g)).collect();
        let units: Vec<i64> = groups.iter().map(|&g| structure.groups[g].units).collect();
        Ok(Platon {
            cfg: cfg.clone(),
            reaches,
            weights: UnitWeights::new(&units, &unit_params, device),
            groups,
            moments,
            ratios: table,
            ratio_table,
            masks,
        })
    }

    /// Updates the moments of the first `k` clients from their parameters before step's update
    /// and the loss gradients `grads` (undefined for tensors without one).
    pub(crate) fn observe(&mut self, params: &[Tensor], grads: &[Tensor], k: i64) {
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        tch::no_grad(|| {
            for (i, moments) in self.moments.iter_mut().enumerate() {
                let Some((mean, spread)) = moments else { continue };
                if !grads[i].defined() {
                    continue;
                }
                let importance = (params[i].narrow(0, 0, k) * &grads[i]).abs();
                let (mut mean, mut spread) = (mean.narrow(0, 0, k), spread.narrow(0, 0, k));
                mean *= b1;
                mean += &importance * (1.0 - b1);
                spread *= b2;
                spread += (importance - &mean).abs() * (1.0 - b2);
            }
        });
    }

    /// Each budget group's unit scores of the first `k` clients, `[k, units]`: `Ī · Ū` summed
    /// over the elements of each unit.
    fn unit_scores(&self, k: i64) -> Vec<Tensor> {
        self.reaches
            .iter()
            .map(|reaches| {
                reaches
                    .iter()
                    .map(|r| {
                        let (mean, spread) = self.moments[r.tensor].as_ref().expect("reached tensors have moments");
                        let s = mean.narrow(0, 0, k) * spread.narrow(0, 0, k);
                        let along = s.movedim([r.dim as i64], [1i64]);
                        let size = along.size();
                        along.reshape([k, size[1] / r.block, r.block, -1]).sum_dim_intlist(
                            &[2i64, 3][..],
                            false,
                            Kind::Double,
                        )
                    })
                    .reduce(|a, b| a + b)
                    .expect("a group reaches at least one tensor")
            })
            .collect()
    }

    /// Whether step `t` of the first `k` clients prunes: once some ratio is below 1. A step's
    /// shape includes it, so that a step replayed from a CUDA graph runs the pruning of a
    /// step that prunes.
    pub(crate) fn prunes(&self, t: usize, k: i64) -> bool {
        self.ratios[t][..k as usize].iter().any(|&r| r < 1.0)
    }

    /// The kept ratio at each step and client, `[T, C]` float64: a step reads its row.
    pub(crate) fn ratio_table(&self) -> &Tensor {
        &self.ratio_table
    }

    /// Every tensor a step reads or moves: the moments, the masks, the table and the weights.
    pub(crate) fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        let moments = self.moments.iter_mut().flatten().flat_map(|(mean, spread)| [mean, spread]);
        moments.chain(&mut self.masks).chain([&mut self.ratio_table, self.weights.tensor_mut()])
    }

    /// After the update of a step that prunes ([`Platon::prunes`]): re-selects the first `k`
    /// clients' kept units at `r(t)`, their `ratios` (the step's row of
    /// [`Platon::ratio_table`]), and zeroes the others in `params`.
    pub(crate) fn prune(
        &mut self,
        k: i64,
        ratios: &Tensor,
        structure: &Structure,
        names: &[String],
        params: &mut [Tensor],
    ) -> Result<()> {
        let kept = finalize_global_weighted(&self.unit_scores(k), &self.weights, &ratios.narrow(0, 0, k));
        let factors = tensor_factors(structure, names, &self.groups, &kept)?;
        tch::no_grad(|| {
            for (mask, new) in self.masks.iter_mut().zip(&kept) {
                mask.narrow(0, 0, k).copy_(new);
            }
            for (p, f) in params.iter_mut().zip(&factors) {
                if let Some(f) = f {
                    let mut p = p.narrow(0, 0, k);
                    p *= f;
                }
            }
        });
        Ok(())
    }

    /// Cohort slot `slot`'s kept units per unit group of `structure` (`None` outside the
    /// budget), as its last step left them.
    pub(crate) fn kept_units(&self, slot: usize, structure: &Structure) -> Vec<Option<Vec<i64>>> {
        let mut kept = vec![None; structure.groups.len()];
        for (&g, mask) in self.groups.iter().zip(&self.masks) {
            kept[g] = Some(kept_indices(&mask.get(slot as i64)));
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structure::{TensorSpec, UnitGroup, UnitMember};

    #[test]
    fn the_cubic_schedule_holds_one_then_falls_to_the_budget() {
        let cfg = PlatonConfig { warmup: 0.2, final_share: 0.2, ..PlatonConfig::default() };
        // 10 steps: t_i = 2, t_f = 2, so steps 2..8 fall: r = 0.25 + 0.75 (1 − (t − 2)/6)³.
        let r: Vec<f64> = (0..10).map(|t| cfg.kept_ratio(t, 10, 0.25)).collect();
        let want = [1.0, 1.0, 1.0, 0.25 + 0.75 * 125.0 / 216.0, 0.25 + 0.75 * 64.0 / 216.0, 0.25 + 0.75 / 8.0];
        for (got, want) in r.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{r:?}");
        }
        assert!((r[7] - (0.25 + 0.75 / 216.0)).abs() < 1e-12);
        assert_eq!(&r[8..], &[0.25, 0.25]);
        // A job without a final share still ends at its budget.
        let none = PlatonConfig { warmup: 0.0, final_share: 0.0, ..PlatonConfig::default() };
        assert_eq!(none.kept_ratio(0, 4, 0.5), 1.0);
        assert_eq!(none.kept_ratio(3, 4, 0.5), 0.5);
    }

    /// One layer `fc1` of 3 neurons over 2 inputs (weight `[3, 2]`, bias `[3]`), its neurons a group.
    fn structure() -> Structure {
        let tensors = vec![TensorSpec::new("fc1.weight", [3, 2]), TensorSpec::new("fc1.bias", [3])];
        let member = |tensor| UnitMember { tensor, dim: 0, block: 1 };
        Structure {
            tensors,
            groups: vec![UnitGroup { name: "fc1".into(), units: 3, members: vec![member(0), member(1)] }],
        }
    }

    #[test]
    fn moments_and_unit_scores_on_hand_computed_numbers() {
        let structure = structure();
        let names = vec!["fc1.weight".to_string(), "fc1.bias".to_string()];
        let budget = WidthBudget::new(0.5, vec![0], vec![], true);
        let w = Tensor::from_slice(&[1.0f32, -2.0, 0.5, 0.5, 3.0, 0.0]).reshape([1, 3, 2]);
        let b = Tensor::from_slice(&[1.0f32, 1.0, -1.0]).reshape([1, 3]);
        let mut params = vec![w, b];
        let cfg = PlatonConfig { beta1: 0.5, beta2: 0.5, warmup: 0.0, final_share: 0.0 };
        let mut platon = Platon::new(&cfg, &structure, &budget, &names, &params, &[2], &[0.5]).unwrap();
        let gw = Tensor::from_slice(&[2.0f32, 1.0, 4.0, 0.0, -1.0, 5.0]).reshape([1, 3, 2]);
        let gb = Tensor::from_slice(&[0.0f32, 2.0, 1.0]).reshape([1, 3]);
        platon.observe(&params, &[gw, gb], 1);
        // I = |θ g|: weight rows (2, 2), (2, 0), (3, 0), bias (0, 2, 1). From zero moments with
        // β = ½: Ī = I/2, Ū = |I − Ī|/2 = I/4, S = I²/8. Neuron sums: (4 + 4 + 0)/8 = 1,
        // (4 + 0 + 4)/8 = 1, (9 + 0 + 1)/8 = 1.25.
        let scores = Vec::<f64>::try_from(platon.unit_scores(1)[0].reshape([-1])).unwrap();
        assert_eq!(scores, [1.0, 1.0, 1.25]);
        // Step 0 of 2 keeps everything; the last step keeps the budget, 0.5 of 9 parameters
        // (3 per neuron): the best neuron (2) is forced, then neuron 0 (ties to the lower
        // index) would make 6 > 4.5: only neuron 2 stays.
        assert!(!platon.prunes(0, 1) && platon.prunes(1, 1));
        assert_eq!(platon.kept_units(0, &structure), [Some(vec![0, 1, 2])]);
        let last = platon.ratio_table().get(1);
        platon.prune(1, &last, &structure, &names, &mut params).unwrap();
        assert_eq!(platon.kept_units(0, &structure), [Some(vec![2])]);
        let w = Vec::<f32>::try_from(params[0].reshape([-1])).unwrap();
        assert_eq!(w, [0.0, 0.0, 0.0, 0.0, 3.0, 0.0]);
        let b = Vec::<f32>::try_from(params[1].reshape([-1])).unwrap();
        assert_eq!(b, [0.0, 0.0, -1.0]);
    }

    #[test]
    fn bad_settings_name_their_key() {
        let bad = |cfg: PlatonConfig| cfg.validate().unwrap_err().key;
        assert_eq!(bad(PlatonConfig { beta1: 1.0, ..PlatonConfig::default() }), "platon.beta1");
        assert_eq!(bad(PlatonConfig { beta2: -0.1, ..PlatonConfig::default() }), "platon.beta2");
        assert_eq!(
            bad(PlatonConfig { warmup: 0.6, final_share: 0.5, ..PlatonConfig::default() }),
            "platon.final_share"
        );
    }
}
