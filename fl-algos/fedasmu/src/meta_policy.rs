//! FedASMU's server-side meta policy for a device's first request slot (§4.3.1, Eq. 7, with
//! the spec's [rec] sizes): an LSTM cell of `hidden` units followed by a linear layer reads,
//! after each local epoch l = 1 … E − 1, the previous decision (the start, or "waited") and
//! emits P(request now). The slot l* is the first epoch whose decision is "request", E − 1 if
//! none is (the decisions of Zoph and Le's controller, one per epoch, ending at the first
//! request). Its parameters θ learn by REINFORCE with a moving baseline:
//! `b ← (1 − ρ) b + ρ R`, then `θ ← θ + η_RL (R − b) ∇_θ Σ_l log P(s_l | s_{<l}; θ)`, in the
//! order of the paper's Alg. 2 (lines 14–15).
//!
//! The policy samples its decisions (REINFORCE's gradient is that of the policy's own draws),
//! from the scheduler's random stream; its parameters start from U(−1/√H, 1/√H) drawn from the
//! same stream, as PyTorch initialises an LSTM. It runs on the CPU in double precision:
//! a few thousand parameters, one sequence of at most E − 1 steps per decision.

use fl_core::rng::Rng;
use fl_core::tch::{Kind, Tensor};
use fl_core::{Result, StateIn, StateOut};
use rand::Rng as _;

/// Names of the parameters, in the order of [`MetaPolicy::params`].
const NAMES: [&str; 5] = ["w_ih", "w_hh", "bias", "w_out", "b_out"];

/// Inputs: 0 at the first epoch (the start), 1 after an epoch the device waited.
const INPUTS: i64 = 2;

pub(crate) struct MetaPolicy {
    /// W_ih `[4H, 2]`, W_hh `[4H, H]`, bias `[4H]`, w_out `[H]`, b_out `[]`.
    params: Vec<Tensor>,
    /// The moving baseline b of the rewards.
    baseline: f64,
    hidden: i64,
}

impl MetaPolicy {
    /// A policy with `hidden` units, its parameters drawn from `rng`.
    pub fn new(hidden: usize, rng: &mut Rng) -> Self {
        let h = hidden as i64;
        let bound = 1.0 / (h as f64).sqrt();
        let shapes: [Vec<i64>; 5] = [vec![4 * h, INPUTS], vec![4 * h, h], vec![4 * h], vec![h], vec![]];
        let params = shapes
            .iter()
            .map(|shape| {
                let n: i64 = shape.iter().product();
                let values: Vec<f64> = (0..n).map(|_| rng.random_range(-bound..bound)).collect();
                Tensor::from_slice(&values).reshape(shape.as_slice())
            })
            .collect();
        MetaPolicy { params, baseline: 0.0, hidden: h }
    }

    /// The logits of "request now" after epochs 1 … decisions.len() + 1 for the decisions
    /// taken so far (`false` = waited), as one tensor `[decisions.len() + 1]`.
    fn logits(&self, params: &[Tensor], decisions: &[bool]) -> Tensor {
        let [w_ih, w_hh, bias, w_out, b_out] = params else { unreachable!("five parameters") };
        let mut h = Tensor::zeros([self.hidden], (Kind::Double, fl_core::tch::Device::Cpu));
        let mut c = h.zeros_like();
        let mut out = Vec::with_capacity(decisions.len() + 1);
        for step in 0..=decisions.len() {
            let input = if step == 0 { 0 } else { 1 };
            let gates = w_ih.select(1, input) + w_hh.mv(&h) + bias;
            let [i, f, g, o]: [Tensor; 4] = gates.chunk(4, 0).try_into().expect("four gates");
            c = f.sigmoid() * &c + i.sigmoid() * g.tanh();
            h = o.sigmoid() * c.tanh();
            out.push(w_out.dot(&h) + b_out);
        }
        Tensor::stack(&out, 0)
    }

    /// Draws the decisions for a session of `epochs` local epochs: the slot l* in 1 … E − 1
    /// and the decisions that led to it (waits, then a request unless l* = E − 1 was reached
    /// by waiting).
    pub fn choose(&self, epochs: usize, rng: &mut Rng) -> (usize, Vec<bool>) {
        let mut decisions = Vec::new();
        fl_core::tch::no_grad(|| {
            for l in 1..epochs {
                let p = self.logits(&self.params, &decisions).sigmoid().double_value(&[(l - 1) as i64]);
                let request = rng.random::<f64>() < p;
                decisions.push(request);
                if request {
                    break;
                }
            }
        });
        let slot = decisions.iter().position(|&r| r).map_or(epochs - 1, |i| i + 1);
        (slot, decisions)
    }

    /// P(l* = l) for l = 1 … E − 1: the probability of the first request at each epoch, the
    /// last slot also taking the sequences that never request.
    pub fn slot_probabilities(&self, epochs: usize) -> Vec<f64> {
        let waits = vec![false; epochs.saturating_sub(2)];
        let p: Vec<f64> = fl_core::tch::no_grad(|| {
            Vec::<f64>::try_from(self.logits(&self.params, &waits).sigmoid()).expect("a vector of doubles")
        });
        let mut waited = 1.0;
        let mut out: Vec<f64> = p
            .iter()
            .map(|&p| {
                let first = waited * p;
                waited *= 1.0 - p;
                first
            })
            .collect();
        if let Some(last) = out.last_mut() {
            *last += waited;
        }
        out
    }

    /// One REINFORCE step for `reward` R after the session that took `decisions`.
    pub fn learn(&mut self, decisions: &[bool], reward: f64, baseline_rate: f64, lr: f64) {
        self.baseline = (1.0 - baseline_rate) * self.baseline + baseline_rate * reward;
        let advantage = reward - self.baseline;
        if decisions.is_empty() || advantage == 0.0 || lr == 0.0 {
            return;
        }
        let leaves: Vec<Tensor> = self.params.iter().map(|p| p.detach().set_requires_grad(true)).collect();
        let logits = self.logits(&leaves, &decisions[..decisions.len() - 1]);
        let taken = Tensor::from_slice(&decisions.iter().map(|&r| f64::from(u8::from(r))).collect::<Vec<_>>());
        // log σ(z) for a request, log σ(−z) = log(1 − σ(z)) for a wait.
        let signed = &logits * (taken * 2.0 - 1.0);
        let log_p = signed.log_sigmoid().sum(Kind::Double);
        let grads = Tensor::run_backward(&[log_p], &leaves.iter().collect::<Vec<_>>(), false, false);
        fl_core::tch::no_grad(|| {
            for (p, g) in self.params.iter_mut().zip(grads) {
                *p = &*p + g * (lr * advantage);
            }
        });
    }

    /// The moving baseline b.
    pub fn baseline(&self) -> f64 {
        self.baseline
    }

    pub fn save(&self, out: &mut StateOut) -> Result<()> {
        for (name, p) in NAMES.iter().zip(&self.params) {
            out.put_tensor(&format!("meta.{name}"), p);
        }
        out.put("meta.baseline", &self.baseline)
    }

    pub fn load(&mut self, saved: &StateIn) -> Result<()> {
        for (name, p) in NAMES.iter().zip(self.params.iter_mut()) {
            *p = saved.tensor(&format!("meta.{name}"))?.to_kind(Kind::Double).to_device(fl_core::tch::Device::Cpu);
        }
        self.baseline = saved.get("meta.baseline")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_probabilities_sum_to_one_and_match_the_draws() {
        let mut rng = fl_core::rng::stream(7, &[1]);
        let policy = MetaPolicy::new(8, &mut rng);
        let p = policy.slot_probabilities(5);
        assert_eq!(p.len(), 4);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{p:?}");
        let draws = 20_000;
        let mut seen = [0usize; 4];
        for _ in 0..draws {
            let (slot, decisions) = policy.choose(5, &mut rng);
            assert!((1..=4).contains(&slot));
            assert_eq!(decisions.len(), slot, "one decision per epoch up to the slot");
            assert!(decisions[..slot - 1].iter().all(|r| !r));
            seen[slot - 1] += 1;
        }
        for (s, (&n, &want)) in seen.iter().zip(&p).enumerate() {
            let got = n as f64 / draws as f64;
            assert!((got - want).abs() < 0.015, "slot {}: drawn {got}, policy {want}", s + 1);
        }
    }

    #[test]
    fn reinforce_moves_probability_towards_a_rewarded_slot() {
        // Slot 3 of E = 5 pays 1, every other slot 0: the policy must come to prefer it.
        let mut rng = fl_core::rng::stream(3, &[2]);
        let mut policy = MetaPolicy::new(8, &mut rng);
        let before = policy.slot_probabilities(5)[2];
        for _ in 0..3000 {
            let (slot, decisions) = policy.choose(5, &mut rng);
            policy.learn(&decisions, if slot == 3 { 1.0 } else { 0.0 }, 0.1, 0.1);
        }
        let after = policy.slot_probabilities(5);
        assert!(after[2] > 0.8 && after[2] > before + 0.3, "P(slot 3): {before} → {after:?}");
    }

    #[test]
    fn one_step_is_the_gradient_of_the_log_probability_of_the_decisions() {
        // Against a finite difference of log P(wait, request) in the output bias b_out:
        // ∂/∂b_out [log σ(−z₁) + log σ(z₂)] = −σ(z₁) + 1 − σ(z₂).
        let mut rng = fl_core::rng::stream(5, &[3]);
        let mut policy = MetaPolicy::new(4, &mut rng);
        let z = policy.logits(&policy.params, &[false]);
        let (z1, z2) = (z.double_value(&[0]), z.double_value(&[1]));
        let sigma = |x: f64| 1.0 / (1.0 + (-x).exp());
        let want = -sigma(z1) + 1.0 - sigma(z2);
        let b0 = policy.params[4].double_value(&[]);
        // R = 2 with baseline 0 and ρ = 0.5: b = 1, advantage 1, learning rate 0.01.
        policy.learn(&[false, true], 2.0, 0.5, 0.01);
        assert!((policy.baseline() - 1.0).abs() < 1e-12);
        let step = policy.params[4].double_value(&[]) - b0;
        assert!((step - 0.01 * want).abs() < 1e-12, "step {step}, want {}", 0.01 * want);
    }
}
