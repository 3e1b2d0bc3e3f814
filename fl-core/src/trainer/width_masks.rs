//! Learning a client's width mask before training its weights (Co-S²P §2.3–2.4, Algorithm 2).
//!
//! A job with a [`WidthBudget`] holds its budget groups at full width. In a mask round
//! (`learn`) the client first trains its importance scores `I` for `epochs` epochs with the
//! weights frozen: at every step each learned unit is kept with probability `σ(I)`
//! (Bernoulli, straight-through: the forward sees the 0/1 draw, the gradient flows to `I`
//! through `σ`), the weights are multiplied by the sampled masks, and the loss is Eq. 2:
//!
//! ```text
//! L_mask = CE(ŷ, y) + λ₁ · | Σ_g p_g Σ_j M_gj / Σ_g p_g U_g − R^width |
//! ```
//!
//! with `ŷ` the deepest read-out, `p_g` the parameters one unit of group `g` spans and `U_g`
//! its units; the penalty runs over the learned groups (random ones sit at `R^width` by
//! construction). Scores step with Adam at `lr` (the paper gives η̂ but not the optimizer).
//! Then the scores are finalised ([`crate::learned_width::finalize`]) and the weight epochs
//! train the kept units only: dropped units start at zero and their gradients are masked,
//! which computes what the physically smaller sub-model computes; their values go back
//! unchanged, a zero delta. The scores are the client's state for its next job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::data::Dataset;
use crate::error::{InvalidKey, Result};
use crate::learned_width::{WidthBudget, finalize, initial_scores, score_name, tensor_factors, unit_params};
use crate::model::{Mode, Model};
use crate::params::ParamSet;
use crate::rng::CohortNoise;
use crate::structure::Structure;
use crate::trainer::TrainJob;
use crate::trainer::augment::AugmentConfig;
use crate::trainer::aux_adam::{adam_rows, adam_scales};
use crate::trainer::captured_steps::{CapturedSteps, StepShape};
use crate::trainer::schedule::{BatchSchedule, StepAt};
use crate::trainer::sgd::cross_entropy;

/// `[trainer] width_masks`: how a client learns its width mask (Co-S²P's Ê, η̂, λ₁; E1's
/// values by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WidthMaskConfig {
    /// Ê: epochs over the client's samples that train the scores in a mask round.
    pub epochs: usize,
    /// η̂: the scores' learning rate (Adam).
    pub lr: f64,
    /// λ₁: weight of the kept-ratio penalty of Eq. 2.
    pub lambda: f64,
}

impl Default for WidthMaskConfig {
    fn default() -> Self {
        WidthMaskConfig { epochs: 5, lr: 0.01, lambda: 1.0 }
    }
}

impl WidthMaskConfig {
    /// Checks every value's range; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.epochs == 0 {
            return Err(InvalidKey::new("width_masks.epochs", "expected at least 1"));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(InvalidKey::new("width_masks.lr", format!("expected a positive number, got {}", self.lr)));
        }
        if !(self.lambda >= 0.0 && self.lambda.is_finite()) {
            return Err(InvalidKey::new(
                "width_masks.lambda",
                format!("expected a finite number ≥ 0, got {}", self.lambda),
            ));
        }
        Ok(())
    }
}

/// Eq. 2's penalty per client, `[k]`: `λ₁ · |Σ_g p_g Σ_j M_gj / total − R^width|`, with
/// `masks` the sampled `[k, units]` masks of the learned groups, `unit_params` their `p_g`
/// and `total` their parameters `Σ_g p_g U_g`.
pub(crate) fn ratio_penalty(masks: &[Tensor], unit_params: &[i64], total: f64, ratio: &Tensor, lambda: f64) -> Tensor {
    let kept = masks
        .iter()
        .zip(unit_params)
        .map(|(m, &p)| m.sum_dim_intlist(1, false, Kind::Float) * p as f64)
        .reduce(|a, b| a + b)
        .expect("at least one learned group");
    (kept / total - ratio).abs() * lambda
}

/// What the mask epochs read of a cohort in training: its model, tensor names, stacked
/// parameters `[C, ...]`, training set and augmentation.
#[derive(Clone, Copy)]
pub(crate) struct CohortInputs<'a> {
    pub(crate) model: &'a dyn Model,
    pub(crate) names: &'a [String],
    pub(crate) params: &'a [Tensor],
    pub(crate) data: &'a Dataset,
    pub(crate) augment: Option<&'a AugmentConfig>,
}

/// A cohort's width masks: scores, their training, and the factors that apply the finalised
/// masks to the weights.
pub(crate) struct WidthMasks {
    cfg: WidthMaskConfig,
    budget: WidthBudget,
    /// Parameters per unit of each learned group, and their total over the learned groups.
    unit_params: Vec<i64>,
    learned_params: f64,
    /// Each client's `R^width`, `[C]`.
    ratio: Tensor,
    /// `[C, units]` per learned group, then per random group.
    learned: Vec<Tensor>,
    random: Vec<Tensor>,
    /// The random groups' fixed 0/1 masks, `[C, units]`.
    random_masks: Vec<Tensor>,
    /// Adam's moments of the learned scores.
    moments: Vec<(Tensor, Tensor)>,
    /// The mask epochs' batches, while the scores still have to train.
    schedule: Option<BatchSchedule>,
    /// Adam's step size at each mask step, `[T]`: a step reads its row.
    scales: Tensor,
    /// Each client's state as it came (other groups' scores pass through), cohort order.
    prior: Vec<Option<ParamSet>>,
    /// Per job tensor, the factor zeroing the dropped units, once finalised.
    factors: Option<Vec<Option<Tensor>>>,
}

impl WidthMasks {
    /// The width masks of a cohort whose jobs (in cohort `order`) share one budget's groups
    /// and `learn` flag, slot `c` keeping `ratio[c]`; draws the mask epochs' batches and first
    /// scores from the jobs' streams.
    pub(crate) fn new(
        cfg: &WidthMaskConfig,
        structure: &Structure,
        jobs: &mut [TrainJob],
        order: &[usize],
        ratio: &[f64],
        batch_size: usize,
    ) -> Result<WidthMasks> {
        let budget = jobs[order[0]].width.clone().expect("the cohort learns its widths");
        let device = jobs[order[0]].indices.device();
        let scores_of = |groups: &[usize], learned: bool, jobs: &mut [TrainJob]| -> Vec<Tensor> {
            groups
                .iter()
                .map(|&g| {
                    let group = &structure.groups[g];
                    let name = score_name(&group.name);
                    let rows: Vec<Tensor> = order
                        .iter()
                        .zip(ratio)
                        .map(|(&j, &r)| {
                            let job = &mut jobs[j];
                            let kept = job.state.as_ref().and_then(|s| {
                                s.names().iter().position(|n| *n == name).map(|i| s.tensors()[i].shallow_clone())
                            });
                            kept.unwrap_or_else(|| initial_scores(group.units, r, learned, &mut job.rng))
                                .to_device(device)
                                .to_kind(Kind::Float)
                        })
                        .collect();
                    Tensor::stack(&rows, 0)
                })
                .collect()
        };
        let learned = scores_of(&budget.learned, true, jobs);
        let random = scores_of(&budget.random, false, jobs);
        let unit_params: Vec<i64> = budget.learned.iter().map(|&g| unit_params(structure, g)).collect();
        let learned_params =
            budget.learned.iter().zip(&unit_params).map(|(&g, &p)| (p * structure.groups[g].units) as f64).sum();
        let learns = budget.learn && !budget.learned.is_empty();
        let schedule = learns.then(|| {
            let steps: Vec<usize> =
                jobs.iter().map(|j| cfg.epochs * (j.indices.size()[0] as usize).div_ceil(batch_size)).collect();
            BatchSchedule::draw_for_jobs(jobs, order, &steps, batch_size, device)
        });
        let moments = learned.iter().map(|s| (s.zeros_like(), s.zeros_like())).collect();
        let mask_steps = schedule.as_ref().map_or(0, BatchSchedule::total_steps);
        let scales = adam_scales(cfg.lr, mask_steps, device);
        let ratio = Tensor::from_slice(ratio).to_kind(Kind::Float).to_device(device);
        let random_masks = finalize(&[], &[], &random, &ratio, budget.allocation).1;
        Ok(WidthMasks {
            cfg: cfg.clone(),
            budget,
            unit_params,
            learned_params,
            ratio,
            learned,
            random,
            random_masks,
            moments,
            schedule,
            scales,
            prior: order.iter().map(|&j| jobs[j].state.as_ref().map(ParamSet::shallow_clone)).collect(),
            factors: None,
        })
    }

    /// The factors zeroing each job tensor's dropped units, training the scores first if this
    /// is a mask round (once; later calls return the same factors), their steps `replayed` as
    /// the cohort's are ([`WidthMasks::learn`]).
    pub(crate) fn factors(
        &mut self,
        cohort: &CohortInputs,
        noise: &mut CohortNoise,
        replayed: bool,
    ) -> Result<&[Option<Tensor>]> {
        if self.factors.is_none() {
            if let Some(schedule) = self.schedule.take() {
                self.learn(&schedule, cohort, noise, replayed)?;
            }
            let learned = finalize(&self.learned, &self.unit_params, &[], &self.ratio, self.budget.allocation).0;
            let masks: Vec<Tensor> =
                learned.into_iter().chain(self.random_masks.iter().map(Tensor::shallow_clone)).collect();
            let groups: Vec<usize> = self.budget.groups().collect();
            self.factors = Some(tensor_factors(cohort.model.structure(), cohort.names, &groups, &masks)?);
        }
        Ok(self.factors.as_deref().expect("finalised above"))
    }

    /// The factors, once finalised.
    pub(crate) fn factors_if_final(&self) -> Option<&[Option<Tensor>]> {
        self.factors.as_deref()
    }

    /// Trains the scores over the mask epochs' `schedule`. Where `replayed`, as the cohort's
    /// weight steps are (`SgdCohort::run_captured`): step 0 eagerly, then every step reading its
    /// batch, step size and noise at counters on the device, replayed from a CUDA graph per
    /// step shape on CUDA (emulated elsewhere, [`CapturedSteps`]); the noise goes back to the
    /// host's count after the last.
    fn learn(
        &mut self,
        schedule: &BatchSchedule,
        cohort: &CohortInputs,
        noise: &mut CohortNoise,
        replayed: bool,
    ) -> Result<()> {
        let total = schedule.total_steps();
        if !replayed || total == 0 {
            return (0..total).try_for_each(|t| self.step(schedule, StepAt::host(t), cohort, noise));
        }
        let counter = Tensor::zeros([1], (Kind::Int64, self.ratio.device()));
        let at = |t| StepAt { t, device: Some(&counter) };
        noise.record_step();
        self.step(schedule, at(0), cohort, noise)?;
        noise.count_on_device(total as u64 - 1);
        let shape = |t: usize| {
            let (clients, batch) = schedule.shape(t);
            StepShape { clients, batch, padded: schedule.padded(t), prunes: false, epoch_ends: false }
        };
        let mut steps = CapturedSteps::new((1..total).map(shape), counter.device().is_cuda(), BTreeMap::new());
        for t in 1..total {
            noise.start_step();
            let mut failed = Ok(());
            steps.run(shape(t), t, |i| failed = self.step(schedule, at(i), cohort, noise))?;
            failed?;
        }
        noise.count_on_host();
        Ok(())
    }

    /// One step of the scores on mask batch `at`, whose rows it reads there (and advances the
    /// device's counter, if any).
    fn step(
        &mut self,
        schedule: &BatchSchedule,
        at: StepAt,
        cohort: &CohortInputs,
        noise: &mut CohortNoise,
    ) -> Result<()> {
        let CohortInputs { model, names, params, data, augment } = *cohort;
        let t = at.t;
        let (k, _, x, y, weights) = schedule.inputs(data, at);
        let x = match augment {
            Some(augment) => augment.apply(&x, noise),
            None => x,
        };
        let leaves: Vec<Tensor> =
            self.learned.iter().map(|s| s.narrow(0, 0, k).detach().set_requires_grad(true)).collect();
        let sampled: Vec<Tensor> = leaves
            .iter()
            .map(|scores| {
                let p = scores.sigmoid();
                let draw = noise.uniform(&scores.size()).lt_tensor(&p).to_kind(Kind::Float);
                &p + (draw - &p).detach()
            })
            .collect();
        let ratio = self.ratio.narrow(0, 0, k);
        let random = self.random_masks.iter().map(|m| m.narrow(0, 0, k));
        let masks: Vec<Tensor> = sampled.iter().map(Tensor::shallow_clone).chain(random).collect();
        let groups: Vec<usize> = self.budget.groups().collect();
        let factors = tensor_factors(model.structure(), names, &groups, &masks)?;
        let inputs: Vec<Tensor> = params
            .iter()
            .zip(&factors)
            .map(|(p, f)| {
                let p = p.narrow(0, 0, k).detach();
                match f {
                    Some(f) => p * f,
                    None => p,
                }
            })
            .collect();
        let valid = schedule.padded(t).then(|| weights.gt(0.0).to_kind(Kind::Float));
        let logits = model.forward(&inputs, &x, &mut Mode::padded(noise, valid.as_ref()));
        let ce = cross_entropy(&logits, &y, &weights);
        let penalty = ratio_penalty(&sampled, &self.unit_params, self.learned_params, &ratio, self.cfg.lambda);
        let loss = (ce + penalty).sum(Kind::Float);
        let grads = Tensor::run_backward(&[loss], &leaves.iter().collect::<Vec<_>>(), false, false);
        let scale = at.row(&self.scales);
        for ((scores, moments), g) in self.learned.iter().zip(&self.moments).zip(grads) {
            adam_rows(scores, moments, &g, k, &scale);
        }
        if let Some(counter) = at.device {
            let _ = tch::no_grad(|| counter.shallow_clone().g_add_scalar_(1));
        }
        Ok(())
    }

    /// Cohort slot `slot`'s state for its next job: its scores of every group it has seen.
    pub(crate) fn state_of(&self, slot: usize, structure: &Structure) -> Result<ParamSet> {
        let mut names: Vec<String> = Vec::new();
        let mut tensors: Vec<Tensor> = Vec::new();
        if let Some(prior) = &self.prior[slot] {
            names.extend(prior.names().iter().cloned());
            tensors.extend(prior.tensors().iter().map(Tensor::shallow_clone));
        }
        for (g, scores) in self.budget.groups().zip(self.learned.iter().chain(&self.random)) {
            let name = score_name(&structure.groups[g].name);
            let row = scores.get(slot as i64).copy();
            match names.iter().position(|n| *n == name) {
                Some(i) => tensors[i] = row,
                None => {
                    names.push(name);
                    tensors.push(row);
                }
            }
        }
        ParamSet::new(names, tensors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_penalty_of_eq_2_and_its_straight_through_gradient() {
        // Group a: 2 units of 2 parameters, scores 0 and ln 3; group b: 1 unit of 4, score −ln 3.
        // Draws 1, 0 and 1: kept (2·1 + 4·1) / 8 = 0.75 against R = 0.5; λ₁ = 2 → 0.5.
        let a = Tensor::from_slice(&[0.0f32, 3f32.ln()]).unsqueeze(0).set_requires_grad(true);
        let b = Tensor::from_slice(&[-(3f32.ln())]).unsqueeze(0).set_requires_grad(true);
        let ste = |scores: &Tensor, draw: &[f32]| {
            let p = scores.sigmoid();
            &p + (Tensor::from_slice(draw).unsqueeze(0) - &p).detach()
        };
        let masks = [ste(&a, &[1.0, 0.0]), ste(&b, &[1.0])];
        let penalty = ratio_penalty(&masks, &[2, 4], 8.0, &Tensor::from_slice(&[0.5f32]), 2.0);
        assert!((penalty.double_value(&[0]) - 0.5).abs() < 1e-6);
        let grads = Tensor::run_backward(&[penalty.sum(Kind::Float)], &[&a, &b], false, false);
        // ∂/∂I_u = λ₁ · p_u / 8 · σ'(I_u): σ'(0) = 0.25, σ'(±ln 3) = 0.1875.
        let got: Vec<f32> = grads.iter().flat_map(|g| Vec::<f32>::try_from(g.reshape([-1])).unwrap()).collect();
        for (g, want) in got.iter().zip([0.125f32, 0.09375, 0.1875]) {
            assert!((g - want).abs() < 1e-6, "{got:?}");
        }
    }

    #[test]
    fn bad_settings_name_their_key() {
        let bad = |cfg: WidthMaskConfig| cfg.validate().unwrap_err().key;
        assert_eq!(bad(WidthMaskConfig { epochs: 0, ..WidthMaskConfig::default() }), "width_masks.epochs");
        assert_eq!(bad(WidthMaskConfig { lr: 0.0, ..WidthMaskConfig::default() }), "width_masks.lr");
        assert_eq!(bad(WidthMaskConfig { lambda: -1.0, ..WidthMaskConfig::default() }), "width_masks.lambda");
    }
}
