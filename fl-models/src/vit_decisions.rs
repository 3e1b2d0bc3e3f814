//! AdaViT's decision networks for the `vit` model's `decisions` (Meng et al., "AdaViT: Adaptive
//! Vision Transformers for Efficient Image Recognition", CVPR 2022, as its authors' code builds
//! them): per sample and per block, which patches and heads to compute and whether to run the
//! block's attention and its MLP.
//!
//! **Decisions.** Each block has three linear maps giving the log-odds `l` of keeping a unit:
//! `decide.tokens` `[1, D]` of each patch token's normalised features (the attention's input),
//! and `decide.heads` `[H, D]` and `decide.layers` `[2, D]` of the class token at the block's
//! input (one logit per head; one for the attention, one for the MLP). In training each
//! decision is a Gumbel-softmax sample over keep and drop, which for two classes is
//! `σ((l + L) / τ)` with `L` logistic noise (the difference of two Gumbel draws, from the
//! client's noise stream); the forward pass uses its rounding (keep where `l + L > 0`, so with
//! probability `σ(l)`) and the backward pass its gradient (straight-through). In evaluation a
//! unit is kept where `l > 0`. The class token is always kept.
//!
//! **What a decision does** (masks `m_tok` per token, `m_head` per head, `m_attn`, `m_mlp` per
//! sample):
//! - a dropped patch takes no part in the attention: it is no key, whose weights are
//!   `a_ij = exp(s_ij) m_j / Σ_k exp(s_ik) m_k` (differentiable in `m`, as DynamicViT writes it;
//!   the authors' code masks the scores before the softmax and detaches the mask), and its
//!   attention output is zero; the MLP still runs on it (the code's default);
//! - a dropped head adds nothing to the attention's output (AdaViT's full deactivation);
//! - a skipped sub-layer adds nothing to the residual stream:
//!   `x ← x + m_attn · m_tok ⊙ proj(m_head ⊙ attention)`, then `x ← x + m_mlp · mlp(LN(x))`.
//!
//! Dropping computes nothing less here (the masks multiply); what a client's device would
//! save is its usage. Each block records the kept shares of patches, heads and sub-layers
//! ([`fl_core::Mode::record_usage`]), each client's mean over its real samples, for AdaViT's
//! usage loss ([`fl_core::trainer::usage`]).

use fl_core::{Gate, InvalidKey, Mode};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::cohort;

/// `decisions` of the `vit` model: the Gumbel-softmax temperature and where the decisions
/// start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecisionsConfig {
    /// τ of the Gumbel-softmax samples: their soft value, whose gradient the hard one takes,
    /// is `σ((l + L) / τ)` (the authors' 5).
    pub temperature: f64,
    /// The probability of keeping a unit that every decision starts at (the biases start at
    /// its log-odds, the weights at N(0, 0.02²)), so that a model trained from scratch starts
    /// nearly whole.
    pub initial_keep: f64,
}

impl Default for DecisionsConfig {
    fn default() -> Self {
        DecisionsConfig { temperature: 5.0, initial_keep: 0.95 }
    }
}

impl DecisionsConfig {
    /// Checks both values; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(InvalidKey::new(
                "decisions.temperature",
                format!("expected a positive number, got {}", self.temperature),
            ));
        }
        if !(self.initial_keep > 0.0 && self.initial_keep < 1.0) {
            return Err(InvalidKey::new(
                "decisions.initial_keep",
                format!("expected a probability in (0, 1), got {}", self.initial_keep),
            ));
        }
        Ok(())
    }

    /// The decisions' starting bias: the log-odds of `initial_keep`.
    pub fn initial_bias(&self) -> f64 {
        (self.initial_keep / (1.0 - self.initial_keep)).ln()
    }
}

/// One block's decisions for a cohort's batch, as multiplicative masks.
pub(crate) struct BlockDecisions {
    /// `[C, B, T, 1]`: 1 for the class token and each kept patch.
    tokens: Tensor,
    /// `[C·B, H, 1, 1]`: 1 for each kept head.
    heads: Tensor,
    /// `[C, B, 1, 1]`: 1 where the attention runs.
    attention: Tensor,
    /// `[C, B, 1, 1]`: 1 where the MLP runs.
    mlp: Tensor,
}

/// Tensors of a block's decision networks, in layout order: tokens, heads, layers (weight and
/// bias each).
pub(crate) const TENSORS: usize = 6;

/// A block's decision networks over `patches` patches and `heads` heads, in layout order: the
/// name, the logits each gives and the positions it runs at (the tokens' at every patch, the
/// heads' and sub-layers' on the class token).
pub(crate) fn nets(patches: i64, heads: i64) -> [(&'static str, i64, i64); TENSORS / 2] {
    [("tokens", 1, patches), ("heads", heads, 1), ("layers", 2, 1)]
}

impl BlockDecisions {
    /// The decisions for the block whose input is `x` `[C, B, T, D]` and whose attention reads
    /// `normed` (its first LayerNorm of `x`), from its decision tensors `[tokens.weight,
    /// tokens.bias, heads.weight, heads.bias, layers.weight, layers.bias]` (stacked); records
    /// their kept shares in a training pass.
    pub fn decide(
        x: &Tensor,
        normed: &Tensor,
        nets: [&Tensor; TENSORS],
        cfg: &DecisionsConfig,
        mode: &mut Mode,
    ) -> Self {
        let cls = x.select(2, 0);
        let [c, b, t] = [x.size()[0], x.size()[1], x.size()[2]];
        let valid = mode.valid().map(Tensor::shallow_clone);
        let mut decide = |logits: Tensor, gate: Gate| {
            let kept = sample(&logits, cfg.temperature, mode);
            mode.record_usage(gate, kept_share(&kept, valid.as_ref()));
            kept
        };
        let patches = normed.narrow(2, 1, t - 1).reshape([c, -1, x.size()[3]]);
        let patches = decide(cohort::linear(&patches, nets[0], nets[1]).reshape([c, b, t - 1]), Gate::Tokens);
        let heads = decide(cohort::linear(&cls, nets[2], nets[3]), Gate::Heads);
        let layers = decide(cohort::linear(&cls, nets[4], nets[5]), Gate::Layers);
        let cls_kept = Tensor::ones([c, b, 1], (patches.kind(), patches.device()));
        let sub_layer = |i: i64| layers.narrow(2, i, 1).unsqueeze(-1);
        BlockDecisions {
            tokens: Tensor::cat(&[cls_kept, patches], 2).unsqueeze(-1),
            heads: heads.reshape([c * b, -1, 1, 1]),
            attention: sub_layer(0),
            mlp: sub_layer(1),
        }
    }

    /// Multi-head attention of `q`, `k`, `v` `[C, B, T, H·head_dim]` in which dropped patches
    /// are no keys and dropped heads output zero.
    pub fn attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, head_dim: i64) -> Tensor {
        let [c, b, t, width] = q.size()[..] else {
            panic!("attention: expected [C, B, T, H·head_dim], got {:?}", q.size())
        };
        let heads = width / head_dim;
        let split = |x: &Tensor| x.reshape([c * b, t, heads, head_dim]).transpose(1, 2);
        let scores = split(q).matmul(&split(k).transpose(2, 3)) / (head_dim as f64).sqrt();
        let keys = self.tokens.reshape([c * b, 1, 1, t]);
        // Shifted by the largest kept score (the class token is always kept), so that no kept
        // exponential underflows beside a dropped key's, and capped at 1, so that a dropped key
        // scoring above every kept one cannot overflow (∞ · 0).
        let kept = keys.gt(0.5);
        let kept_max = scores.where_self(&kept, &scores.full_like(f64::NEG_INFINITY)).amax([-1i64].as_slice(), true);
        let weighted = (&scores - kept_max.detach()).clamp_max(0.0).exp() * keys;
        let weights = &weighted / weighted.sum_dim_intlist(-1, true, Kind::Float);
        let out = weights.matmul(&split(v)) * &self.heads;
        out.transpose(1, 2).reshape([c, b, t, width])
    }

    /// The attention branch's output `[C, B, T, D]` for the tokens and samples it runs on.
    pub fn gate_attention(&self, branch: &Tensor) -> Tensor {
        branch * (&self.tokens * &self.attention)
    }

    /// The MLP branch's output `[C, B, T, D]` for the samples it runs on.
    pub fn gate_mlp(&self, branch: &Tensor) -> Tensor {
        branch * &self.mlp
    }
}

/// Hard keep decisions `[C, B, U]` from logits `[C, B, U]`: in training a straight-through
/// Gumbel-softmax sample (forward value 0 or 1, gradient of `σ((l + L) / τ)`), in evaluation
/// `l > 0`.
fn sample(logits: &Tensor, temperature: f64, mode: &mut Mode) -> Tensor {
    match mode.uniform(&logits.size()) {
        Some(u) => {
            let u = u.clamp(1e-6, 1.0 - 1e-6);
            let logistic = u.log() - (-&u).log1p();
            let soft = ((logits + logistic) / temperature).sigmoid();
            let hard = soft.gt(0.5).to_kind(soft.kind());
            hard - soft.detach() + soft
        }
        None => logits.gt(0.0).to_kind(logits.kind()),
    }
}

/// `[C]`: each client's mean of `kept` `[C, B, U]` over its units and its real samples
/// (`valid` `[C, B]`, 0 for padding; all real when absent).
fn kept_share(kept: &Tensor, valid: Option<&Tensor>) -> Tensor {
    let per_sample = kept.mean_dim(-1, false, Kind::Float);
    match valid {
        Some(v) => (per_sample * v).sum_dim_intlist(1, false, Kind::Float) / v.sum_dim_intlist(1, false, Kind::Float),
        None => per_sample.mean_dim(1, false, Kind::Float),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{input, noise};

    fn tensor(values: &[f32], shape: &[i64]) -> Tensor {
        Tensor::from_slice(values).reshape(shape)
    }

    #[test]
    fn evaluation_keeps_the_units_with_positive_logits() {
        let logits = tensor(&[2.0, -0.5, 0.1, -3.0], &[1, 2, 2]);
        let kept = sample(&logits, 1.0, &mut Mode::Eval);
        assert_eq!(Vec::<f32>::try_from(kept.flatten(0, -1)).unwrap(), [1.0, 0.0, 1.0, 0.0]);
    }

    /// Hard in the forward pass, the soft sample's gradient in the backward pass: with the
    /// noise u, the soft value is σ((l + ln u − ln(1 − u)) / τ) and its derivative in l is
    /// σ'(·) / τ = soft·(1 − soft)/τ.
    #[test]
    fn training_samples_are_hard_with_the_soft_gradient() {
        let logits = tensor(&[0.3, -0.2, 1.5, -1.0, 0.0, 2.5], &[1, 2, 3]).set_requires_grad(true);
        let (tau, mut n) = (0.5, noise(2));
        let u = noise(2).uniform(&[1, 2, 3]).clamp(1e-6, 1.0 - 1e-6);
        let kept = sample(&logits, tau, &mut Mode::train(&mut n));
        let soft = ((logits.detach() + u.log() - (-&u).log1p()) / tau).sigmoid();
        assert!(kept.detach().equal(&soft.gt(0.5).to_kind(Kind::Float)), "{kept} vs {soft}");
        let grad = Tensor::run_backward(&[kept.sum(Kind::Float)], &[&logits], false, false).pop().unwrap();
        let want = &soft * (1.0 - &soft) / tau;
        assert!(grad.allclose(&want, 1e-5, 1e-6, false), "{grad} vs {want}");
    }

    /// The sampled decisions keep a unit with probability σ(l).
    #[test]
    fn training_keeps_a_unit_with_probability_sigmoid_of_its_logit() {
        let logits = Tensor::full([1, 4000, 2], 1.0, (Kind::Float, tch::Device::Cpu));
        let logits = Tensor::cat(&[logits.narrow(2, 0, 1), -logits.narrow(2, 1, 1) * 2.0], 2);
        let mut n = noise(1);
        let kept = sample(&logits, 1.0, &mut Mode::train(&mut n)).mean_dim(1, false, Kind::Float);
        let (sig1, sig_m2) = (1.0 / (1.0 + (-1f64).exp()), 1.0 / (1.0 + 2f64.exp()));
        assert!((kept.double_value(&[0, 0]) - sig1).abs() < 0.03, "{kept}");
        assert!((kept.double_value(&[0, 1]) - sig_m2).abs() < 0.03, "{kept}");
    }

    #[test]
    fn kept_shares_leave_padding_out() {
        // Client 0: samples (1, 0, 1, 1) and (0, 0, 0, 0) → 3/8; client 1: (1, 1, 1, 1) real,
        // (0, 0, 0, 0) padding → 1.
        let kept = tensor(&[1., 0., 1., 1., 0., 0., 0., 0., 1., 1., 1., 1., 0., 0., 0., 0.], &[2, 2, 4]);
        let valid = tensor(&[1., 1., 1., 0.], &[2, 2]);
        let share = kept_share(&kept, Some(&valid));
        assert!(share.allclose(&tensor(&[0.375, 1.0], &[2]), 1e-6, 1e-6, false), "{share}");
        let all = kept_share(&kept, None);
        assert!(all.allclose(&tensor(&[0.375, 0.5], &[2]), 1e-6, 1e-6, false), "{all}");
    }

    /// With every token and head kept the attention is plain softmax attention; a dropped
    /// patch is no key (as if it were absent), and a dropped head outputs zero.
    #[test]
    fn attention_leaves_dropped_patches_and_heads_out() {
        let (c, b, t, heads, hd) = (2, 3, 4, 2, 3);
        let (q, k, v) =
            (input(&[c, b, t, heads * hd], 1), input(&[c, b, t, heads * hd], 2), input(&[c, b, t, heads * hd], 3));
        let all = BlockDecisions {
            tokens: Tensor::ones([c, b, t, 1], (Kind::Float, tch::Device::Cpu)),
            heads: Tensor::ones([c * b, heads, 1, 1], (Kind::Float, tch::Device::Cpu)),
            attention: Tensor::ones([c, b, 1, 1], (Kind::Float, tch::Device::Cpu)),
            mlp: Tensor::ones([c, b, 1, 1], (Kind::Float, tch::Device::Cpu)),
        };
        let plain = cohort::attention(&q, &k, &v, hd);
        assert!(all.attention(&q, &k, &v, hd).allclose(&plain, 1e-5, 1e-6, false));

        // Drop token 2 everywhere and head 1 of every sample.
        let mut tokens = vec![1f32; (c * b * t) as usize];
        for i in 0..(c * b) as usize {
            tokens[i * t as usize + 2] = 0.0;
        }
        let heads_kept = tensor(&[1., 0.].repeat((c * b) as usize), &[c * b, heads, 1, 1]);
        let some = BlockDecisions { tokens: tensor(&tokens, &[c, b, t, 1]), heads: heads_kept, ..all };
        let out = some.attention(&q, &k, &v, hd);
        // Head 0 by hand over keys 0, 1 and 3 alone.
        let keep = Tensor::from_slice(&[0i64, 1, 3]);
        let head0 = |x: &Tensor| x.narrow(3, 0, hd);
        let (k3, v3) = (head0(&k).index_select(2, &keep), head0(&v).index_select(2, &keep));
        let weights = (head0(&q).matmul(&k3.transpose(2, 3)) / (hd as f64).sqrt()).softmax(-1, Kind::Float);
        let without = weights.matmul(&v3);
        assert!(out.narrow(3, 0, hd).allclose(&without, 1e-5, 1e-6, false));
        assert_eq!(out.narrow(3, hd, hd).abs().max().double_value(&[]), 0.0);
    }

    /// A dropped key whose scores dwarf every kept one's (e^1000 overflows float32) changes
    /// nothing: the weights stay finite and over the kept keys.
    #[test]
    fn a_dropped_key_with_overwhelming_scores_is_still_left_out() {
        let (t, hd) = (3, 2);
        let q = Tensor::ones([1, 1, t, hd], (Kind::Float, tch::Device::Cpu));
        let k = tensor(&[0.1, 0.2, 1000.0, 1000.0, -0.3, 0.4], &[1, 1, t, hd]);
        let v = input(&[1, 1, t, hd], 4);
        let some = BlockDecisions {
            tokens: tensor(&[1., 0., 1.], &[1, 1, t, 1]),
            heads: Tensor::ones([1, 1, 1, 1], (Kind::Float, tch::Device::Cpu)),
            attention: Tensor::ones([1, 1, 1, 1], (Kind::Float, tch::Device::Cpu)),
            mlp: Tensor::ones([1, 1, 1, 1], (Kind::Float, tch::Device::Cpu)),
        };
        let out = some.attention(&q, &k, &v, hd);
        let keep = Tensor::from_slice(&[0i64, 2]);
        let want = cohort::attention(&q.narrow(2, 0, 2), &k.index_select(2, &keep), &v.index_select(2, &keep), hd);
        assert!(out.narrow(2, 0, 2).allclose(&want, 1e-5, 1e-6, false), "{out} vs {want}");
    }

    #[test]
    fn bad_values_are_refused() {
        for (cfg, key) in [
            (DecisionsConfig { temperature: 0.0, ..DecisionsConfig::default() }, "decisions.temperature"),
            (DecisionsConfig { initial_keep: 1.0, ..DecisionsConfig::default() }, "decisions.initial_keep"),
            (DecisionsConfig { initial_keep: 0.0, ..DecisionsConfig::default() }, "decisions.initial_keep"),
        ] {
            assert!(cfg.validate().unwrap_err().to_string().contains(key));
        }
        let cfg = DecisionsConfig::default();
        assert!((1.0 / (1.0 + (-cfg.initial_bias()).exp()) - 0.95).abs() < 1e-12);
    }
}
