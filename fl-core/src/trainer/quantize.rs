//! Fake quantisation with learned bit-widths while training, after Q-ViT (Li et al., "Q-ViT:
//! Fully Differentiable Quantization for Vision Transformer", arXiv:2201.07703), as Co-S²P's
//! baselines use it (spec cos2p.md §3.6: "FedAvg+Q-ViT").
//!
//! A job with a [`WidthBudget`] keeps full-precision shadow weights and runs its forward pass
//! on LSQ-style fake-quantised copies of the budget groups' weight matrices (biases stay in full
//! precision). Each unit `u` of a group (a head; an MLP neuron) has a learned step `s_u`, each
//! head its own learned bit-width `b_u` and each other group one bit-width for all its units
//! (Q-ViT's head-wise bit-widths). An element `w` of unit `u` becomes
//!
//! ```text
//! w_q = s · round(clamp(w / s, −2^(b̂−1), 2^(b̂−1) − 1)),   b̂ = round(b)
//! ```
//!
//! with straight-through rounding (of `w / s` and of `b`), so that `w` learns as if unquantised
//! inside the range, `s` by LSQ's gradient and `b` through the clipping bounds. The loss adds
//! the memory penalty `λ · max(0, B̄ / 32 − R)`, `B̄` the parameter-weighted mean bit-width and
//! `R` the budget's ratio (the client's memory ratio, spec [R]), so the bit-widths shrink until
//! the quantised weights fit. Steps and bit-widths train with Adam at `lr`, the bit-widths kept
//! within `[min_bits, max_bits]`; they start at LSQ's `2·mean|w| / √(2^(b−1) − 1)` and at the
//! budget's `32·R` bits. The job uploads its shadow weights (FedAvg on full-precision weights);
//! steps and bit-widths start afresh at each job, from the global model it receives.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::error::{Error, InvalidKey, Result};
use crate::learned_width::{WidthBudget, member_tensor};
use crate::structure::Structure;
use crate::trainer::aux_adam::{adam_rows, adam_scales};

/// `[trainer] quantize`: the bit penalty, the rate of the steps and bit-widths, their range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuantizeConfig {
    /// λ: weight of the memory penalty.
    pub lambda: f64,
    /// Adam's rate for the steps and bit-widths.
    pub lr: f64,
    /// Smallest bit-width a unit may learn.
    pub min_bits: f64,
    /// Largest bit-width a unit may learn (and start at).
    pub max_bits: f64,
}

impl Default for QuantizeConfig {
    fn default() -> Self {
        QuantizeConfig { lambda: 1.0, lr: 0.01, min_bits: 2.0, max_bits: 16.0 }
    }
}

impl QuantizeConfig {
    /// Checks every value's range; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.lambda >= 0.0 && self.lambda.is_finite()) {
            return Err(InvalidKey::new(
                "quantize.lambda",
                format!("expected a finite number ≥ 0, got {}", self.lambda),
            ));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(InvalidKey::new("quantize.lr", format!("expected a positive number, got {}", self.lr)));
        }
        if !(self.min_bits >= 2.0 && self.min_bits <= self.max_bits && self.max_bits <= 32.0) {
            return Err(InvalidKey::new(
                "quantize.max_bits",
                format!("expected 2 ≤ min_bits ≤ max_bits ≤ 32, got {} and {}", self.min_bits, self.max_bits),
            ));
        }
        Ok(())
    }
}

/// One quantised weight matrix: its index among the job's tensors, the group and member that
/// index its units, and the stacked unit dimension and block.
struct Quantised {
    tensor: usize,
    group: usize,
    dim: usize,
    block: i64,
}

/// A cohort's quantisers: per budget group its steps `[C, units]` and bit-widths (`[C, units]`
/// for heads, `[C, 1]` otherwise), their Adam moments, and the memory budget.
pub(crate) struct Quantizer {
    cfg: QuantizeConfig,
    weights: Vec<Quantised>,
    steps: Vec<Tensor>,
    bits: Vec<Tensor>,
    moments: Vec<(Tensor, Tensor)>,
    /// Quantised parameters per unit of each budget group, and in all.
    unit_params: Vec<f64>,
    total_params: f64,
    /// Each client's ratio `R`, `[C]`.
    ratio: Tensor,
    /// Adam's step size at each step of the job, `[T]`.
    scales: Tensor,
}

/// A group's unit scale `[k, units]` (or `[k, 1]`) viewed against weight `w` (`[k, ...]`) along
/// its unit dimension `dim`, each unit repeated over its `block` indices.
fn along(per_unit: &Tensor, w: &Tensor, dim: usize, block: i64) -> Tensor {
    let mut shape = vec![1i64; w.dim()];
    shape[0] = per_unit.size()[0];
    if per_unit.size()[1] == 1 {
        return per_unit.reshape(shape.as_slice());
    }
    shape[dim] = w.size()[dim];
    per_unit.repeat_interleave_self_int(block, Some(1), None::<i64>).reshape(shape.as_slice())
}

/// `w` fake-quantised with steps `s` and bit-widths `b` (both viewed against `w`), with
/// straight-through rounding.
pub(crate) fn fake_quantise(w: &Tensor, s: &Tensor, b: &Tensor) -> Tensor {
    let bits = b + (b.round() - b).detach();
    let positive = (bits - 1.0).exp2() - 1.0;
    let negative = -(&positive + 1.0);
    let v = (w / s).maximum(&negative).minimum(&positive);
    let rounded = &v + (v.round() - &v).detach();
    rounded * s
}

impl Quantizer {
    /// The quantisers of a cohort whose jobs hold the budget's groups at full width, their
    /// tensors `names` stacked as `params`, client `c` with memory ratio `ratios[c]`, for jobs
    /// of at most `job_steps` steps.
    pub(crate) fn new(
        cfg: &QuantizeConfig,
        structure: &Structure,
        budget: &WidthBudget,
        names: &[String],
        params: &[Tensor],
        ratios: &[f64],
        job_steps: usize,
    ) -> Result<Quantizer> {
        let device = params[0].device();
        let clients = ratios.len() as i64;
        let groups: Vec<usize> = budget.groups().collect();
        let start_bits: Vec<f32> =
            ratios.iter().map(|r| (32.0 * r).clamp(cfg.min_bits, cfg.max_bits).round() as f32).collect();
        let start_bits = Tensor::from_slice(&start_bits).to_device(device).unsqueeze(1);
        let mut weights = Vec::new();
        let (mut steps, mut bits, mut unit_params) = (Vec::new(), Vec::new(), Vec::new());
        for (slot, &g) in groups.iter().enumerate() {
            let group = &structure.groups[g];
            let mut per_unit = 0.0;
            let mut magnitude = Tensor::zeros([clients, group.units], (Kind::Float, device));
            for m in &group.members {
                let spec = &structure.tensors[m.tensor];
                if spec.shape.len() < 2 || weights.iter().any(|q: &Quantised| names[q.tensor] == spec.name) {
                    continue; // Biases stay in full precision; a matrix is quantised by one group.
                }
                let tensor = member_tensor(structure, names, g, m)?;
                let q = Quantised { tensor, group: slot, dim: m.dim + 1, block: m.block };
                let w = params[tensor].abs().movedim([q.dim as i64], [1i64]);
                let size = w.size();
                let sums = w.reshape([clients, size[1] / q.block, -1]).sum_dim_intlist(2, false, Kind::Float);
                per_unit += (spec.shape.iter().product::<i64>() / spec.shape[m.dim] * m.block) as f64;
                magnitude += sums;
                weights.push(q);
            }
            if per_unit == 0.0 {
                return Err(Error::component("quantize", format!("group `{}` reaches no weight matrix", group.name)));
            }
            let headwise = group.name.ends_with("heads");
            let b = if headwise { start_bits.repeat([1, group.units]) } else { start_bits.shallow_clone() };
            let levels = (&b - 1.0).exp2() - 1.0;
            let mean = magnitude / per_unit;
            let levels = if headwise { levels } else { levels.expand([clients, group.units], false) };
            steps.push((mean * 2.0 / levels.sqrt()).clamp_min(1e-8));
            bits.push(b);
            unit_params.push(per_unit);
        }
        let total_params = groups.iter().zip(&unit_params).map(|(&g, p)| p * structure.groups[g].units as f64).sum();
        let moments = steps.iter().chain(&bits).map(|t| (t.zeros_like(), t.zeros_like())).collect();
        Ok(Quantizer {
            cfg: cfg.clone(),
            weights,
            steps,
            bits,
            moments,
            unit_params,
            total_params,
            ratio: Tensor::from_slice(ratios).to_kind(Kind::Float).to_device(device),
            scales: adam_scales(cfg.lr, job_steps, device),
        })
    }

    /// Leaves for one step of the first `k` clients: their steps, then their bit-widths.
    pub(crate) fn leaves(&self, k: i64) -> Vec<Tensor> {
        self.steps.iter().chain(&self.bits).map(|t| t.narrow(0, 0, k).detach().set_requires_grad(true)).collect()
    }

    /// The forward pass's tensors: `inputs` with the quantised matrices fake-quantised by the
    /// `leaves` of [`Quantizer::leaves`].
    pub(crate) fn forward_inputs(&self, inputs: &[Tensor], leaves: &[Tensor]) -> Vec<Tensor> {
        let groups = self.steps.len();
        let mut out: Vec<Tensor> = inputs.iter().map(Tensor::shallow_clone).collect();
        for q in &self.weights {
            let w = &inputs[q.tensor];
            let s = along(&leaves[q.group], w, q.dim, q.block);
            let b = along(&leaves[groups + q.group], w, q.dim, q.block);
            out[q.tensor] = fake_quantise(w, &s, &b);
        }
        out
    }

    /// Each client's parameter-weighted mean bit-width over the quantised matrices, `[k]`, at
    /// the bit-widths `bits` (one tensor per budget group).
    fn mean_bits(&self, bits: &[Tensor]) -> Tensor {
        let summed = bits
            .iter()
            .zip(&self.unit_params)
            .zip(&self.steps)
            .map(|((b, &p), s)| {
                let per_group = match b.size()[1] {
                    1 => b.squeeze_dim(1) * s.size()[1] as f64,
                    _ => b.sum_dim_intlist(1, false, Kind::Float),
                };
                per_group * p
            })
            .reduce(|a, b| a + b)
            .expect("a budget has at least one group");
        summed / self.total_params
    }

    /// The memory penalty of each of the first `k` clients, `[k]`, at the bit-widths of
    /// `leaves`: `λ · max(0, B̄ / 32 − R)`.
    pub(crate) fn penalty(&self, leaves: &[Tensor], k: i64) -> Tensor {
        let memory = self.mean_bits(&leaves[self.steps.len()..]) / 32.0;
        (memory - self.ratio.narrow(0, 0, k)).clamp_min(0.0) * self.cfg.lambda
    }

    /// Adam's step size at each step, `[T]`: a step reads its row ([`Quantizer::step`]).
    pub(crate) fn scales(&self) -> &Tensor {
        &self.scales
    }

    /// Every tensor a step reads or moves: the steps, the bit-widths, their moments, the ratios
    /// and the step sizes.
    pub(crate) fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        let moments = self.moments.iter_mut().flat_map(|(m, v)| [m, v]);
        self.steps.iter_mut().chain(&mut self.bits).chain(moments).chain([&mut self.ratio, &mut self.scales])
    }

    /// One Adam step of the first `k` clients' steps and bit-widths from their gradients
    /// (undefined where the loss does not reach them), with step size `scale` (this step's row
    /// of [`Quantizer::scales`]).
    pub(crate) fn step(&mut self, grads: Vec<Tensor>, k: i64, scale: &Tensor) {
        let groups = self.steps.len();
        let (min_bits, max_bits) = (self.cfg.min_bits, self.cfg.max_bits);
        let targets = self.steps.iter().chain(&self.bits);
        for (i, ((t, moments), g)) in targets.zip(&self.moments).zip(grads).enumerate() {
            if !g.defined() {
                continue;
            }
            adam_rows(t, moments, &g, k, scale);
            tch::no_grad(|| {
                let mut t = t.narrow(0, 0, k);
                let clamped = if i < groups { t.clamp_min(1e-8) } else { t.clamp(min_bits, max_bits) };
                t.copy_(&clamped);
            });
        }
    }

    /// Each client's parameter-weighted mean bit-width now, `[C]`.
    #[cfg(test)]
    fn client_mean_bits(&self) -> Tensor {
        self.mean_bits(&self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structure::{TensorSpec, UnitGroup, UnitMember};

    fn floats(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.reshape([-1])).unwrap()
    }

    #[test]
    fn fake_quantisation_and_its_gradients_on_hand_computed_numbers() {
        // 3 bits: levels −4 … 3 of step s = 0.5, so values −2 … 1.5.
        let w = Tensor::from_slice(&[0.3f32, -0.8, 1.9, -3.0]).set_requires_grad(true);
        let s = Tensor::from_slice(&[0.5f32]).set_requires_grad(true);
        let b = Tensor::from_slice(&[3.2f32]).set_requires_grad(true);
        let q = fake_quantise(&w, &s, &b);
        // w/s = 0.6, −1.6, 3.8 → clipped to 3, −6 → clipped to −4: rounded 1, −2, 3, −4.
        assert_eq!(floats(&q), [0.5, -1.0, 1.5, -2.0]);
        let grads = Tensor::run_backward(&[q.sum(Kind::Float)], &[&w, &s, &b], false, false);
        // ∂/∂w: 1 inside the range, 0 where clipped.
        assert_eq!(floats(&grads[0]), [1.0, 1.0, 0.0, 0.0]);
        // ∂/∂s (LSQ): round(v) − v inside, the clipping bound outside: (1 − 0.6) + (−2 + 1.6) + 3 − 4.
        assert!((floats(&grads[1])[0] - (0.4 - 0.4 + 3.0 - 4.0)).abs() < 1e-6);
        // ∂/∂b through the bounds (b̂ straight-through): 2^(b̂−1)·ln 2 · s for the upper, the same
        // with a minus sign for the lower: 4 ln 2 · 0.5 · (1 − 1) = 0 here, one element at each.
        assert!(floats(&grads[2])[0].abs() < 1e-6);
        let upper_only = fake_quantise(&w, &s, &b).narrow(0, 0, 3).sum(Kind::Float);
        let g = Tensor::run_backward(&[upper_only], &[&b], false, false);
        assert!((floats(&g[0])[0] - 4.0 * 2f32.ln() * 0.5).abs() < 1e-5, "{:?}", floats(&g[0]));
    }

    /// A layer `fc1` of 2 neurons over 3 inputs (weight `[2, 3]`, bias `[2]`) and a head group
    /// `attn.heads` of 2 heads of 2 rows over 3 inputs (weight `[4, 3]`).
    fn structure() -> Structure {
        let tensors = vec![
            TensorSpec::new("fc1.weight", [2, 3]),
            TensorSpec::new("fc1.bias", [2]),
            TensorSpec::new("attn.q.weight", [4, 3]),
        ];
        let member = |tensor, block| UnitMember { tensor, dim: 0, block };
        let groups = vec![
            UnitGroup { name: "fc1".into(), units: 2, members: vec![member(0, 1), member(1, 1)] },
            UnitGroup { name: "attn.heads".into(), units: 2, members: vec![member(2, 2)] },
        ];
        Structure { tensors, groups }
    }

    #[test]
    fn steps_start_at_lsq_bits_at_the_budget_and_the_penalty_weighs_parameters() {
        let names: Vec<String> = ["fc1.weight", "fc1.bias", "attn.q.weight"].map(String::from).to_vec();
        let fc1 = Tensor::from_slice(&[1.0f32, -1.0, 1.0, 0.5, 0.5, -0.5]).reshape([1, 2, 3]);
        let q = Tensor::ones([1, 4, 3], (Kind::Float, tch::Device::Cpu)) * 0.25;
        let params = [fc1, Tensor::zeros([1, 2], (Kind::Float, tch::Device::Cpu)), q];
        let budget = WidthBudget::new(0.125, vec![0, 1], vec![], true);
        let cfg = QuantizeConfig::default();
        let quantizer = Quantizer::new(&cfg, &structure(), &budget, &names, &params, &[0.125], 1).unwrap();
        // 32 · 0.125 = 4 bits: Q_P = 7; fc1's neurons have mean |w| 1 and 0.5 (the bias stays
        // full precision), so steps 2/√7 and 1/√7; the heads' 0.25 → 0.5/√7.
        let want = [2.0 / 7f32.sqrt(), 1.0 / 7f32.sqrt()];
        for (got, want) in floats(&quantizer.steps[0]).iter().zip(want) {
            assert!((got - want).abs() < 1e-6);
        }
        assert_eq!(quantizer.bits[0].size(), [1, 1], "one bit-width for a layer of neurons");
        assert_eq!(floats(&quantizer.bits[1]), [4.0, 4.0], "one per head");
        assert_eq!(floats(&quantizer.client_mean_bits()), [4.0]);
        // The heads at 8 bits, fc1 at 4: (6 · 4 + 12 · 8) / 18 = 20/3 bits, 0.2083 of 32, over
        // the budget 0.125 by 0.0833; λ = 1.
        let leaves = [
            quantizer.steps[0].shallow_clone(),
            quantizer.steps[1].shallow_clone(),
            quantizer.bits[0].shallow_clone(),
            Tensor::from_slice(&[8.0f32, 8.0]).unsqueeze(0),
        ];
        let penalty = floats(&quantizer.penalty(&leaves, 1))[0];
        assert!((penalty - (20.0 / 3.0 / 32.0 - 0.125)).abs() < 1e-6, "{penalty}");
        // Within the budget: no penalty.
        let low = [
            leaves[0].shallow_clone(),
            leaves[1].shallow_clone(),
            leaves[2].shallow_clone(),
            Tensor::from_slice(&[2.0f32, 2.0]).unsqueeze(0),
        ];
        assert_eq!(floats(&quantizer.penalty(&low, 1)), [0.0]);
    }

    #[test]
    fn the_memory_penalty_lowers_the_bit_widths_to_the_budget() {
        // Start at 8 bits (max_bits) against a budget of 4 (R = 0.125): the penalty alone steps
        // every bit-width down to the budget (Adam's momentum may carry them further, the loss's
        // clipping gradient would push back), never below min_bits.
        let names: Vec<String> = ["fc1.weight", "fc1.bias", "attn.q.weight"].map(String::from).to_vec();
        let params = [
            Tensor::ones([1, 2, 3], (Kind::Float, tch::Device::Cpu)),
            Tensor::zeros([1, 2], (Kind::Float, tch::Device::Cpu)),
            Tensor::ones([1, 4, 3], (Kind::Float, tch::Device::Cpu)),
        ];
        let budget = WidthBudget::new(0.125, vec![0, 1], vec![], true);
        let cfg = QuantizeConfig { lr: 0.5, max_bits: 8.0, ..QuantizeConfig::default() };
        let mut quantizer = Quantizer::new(&cfg, &structure(), &budget, &names, &params, &[0.25], 40).unwrap();
        quantizer.ratio = Tensor::from_slice(&[0.125f32]);
        assert_eq!(floats(&quantizer.client_mean_bits()), [8.0]);
        for t in 0..40 {
            let leaves = quantizer.leaves(1);
            let penalty = quantizer.penalty(&leaves, 1).sum(Kind::Float);
            let grads = Tensor::run_backward(&[penalty], &leaves.iter().collect::<Vec<_>>(), false, true);
            let scale = quantizer.scales().get(t);
            quantizer.step(grads.into_iter().map(|g| if g.defined() { g } else { Tensor::new() }).collect(), 1, &scale);
        }
        let mean = floats(&quantizer.client_mean_bits())[0];
        assert!((2.0..=4.0).contains(&mean), "mean bit-width {mean}");
    }

    #[test]
    fn bad_settings_name_their_key() {
        let bad = |cfg: QuantizeConfig| cfg.validate().unwrap_err().key;
        assert_eq!(bad(QuantizeConfig { lambda: -1.0, ..QuantizeConfig::default() }), "quantize.lambda");
        assert_eq!(bad(QuantizeConfig { lr: 0.0, ..QuantizeConfig::default() }), "quantize.lr");
        assert_eq!(bad(QuantizeConfig { min_bits: 1.0, ..QuantizeConfig::default() }), "quantize.max_bits");
        assert_eq!(
            bad(QuantizeConfig { min_bits: 8.0, max_bits: 4.0, ..QuantizeConfig::default() }),
            "quantize.max_bits"
        );
    }
}
