//! Adan, the adaptive Nesterov momentum of Xie et al. ("Adan: Adaptive Nesterov Momentum
//! Algorithm for Faster Optimizing Deep Models", arXiv:2208.06677, Algorithm 1), in the form
//! of the authors' reference implementation: with the gradient difference d_t = g_t − g_{t−1}
//! (0 at a job's first step and at every restart of the optimizer),
//!
//! `m ← β₁ m + (1 − β₁) g`, `v ← β₂ v + (1 − β₂) d`, `n ← β₃ n + (1 − β₃) (g + β₂ d)²`,
//! `w ← w − lr · (m/(1 − β₁ᵗ) + β₂ v/(1 − β₂ᵗ)) / (√(n/(1 − β₃ᵗ)) + ε)`,
//!
//! then the decoupled weight decay `w ← w / (1 + lr·λ)` (the reference's default, proximal
//! form). The bias corrections and the decay are per step and per client in the
//! [`crate::trainer::rates::RateTable`]; this module keeps the three moments and the previous
//! gradient of each client of a cohort, stacked `[C, ...]` per tensor.

use tch::{Device, Tensor};

/// The moments of a cohort, per tensor.
pub(super) struct AdanMoments {
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    n: Vec<Tensor>,
    previous: Vec<Tensor>,
    /// 1 − β₁, 1 − β₂, 1 − β₃ and β₂, as 0-d tensors on the device.
    factors: [Tensor; 4],
}

impl AdanMoments {
    /// Zero moments shaped as `start`, for `betas` (β₁, β₂, β₃); none for an undefined entry
    /// (a tensor that is not trained).
    pub fn new(start: &[Tensor], betas: [f64; 3], device: Device) -> Self {
        let zeros =
            || start.iter().map(|t| if t.defined() { t.zeros_like() } else { Tensor::new() }).collect::<Vec<_>>();
        let [b1, b2, b3] = betas;
        AdanMoments {
            m: zeros(),
            v: zeros(),
            n: zeros(),
            previous: zeros(),
            factors: [1.0 - b1, 1.0 - b2, 1.0 - b3, b2].map(|v| Tensor::from(v as f32).to_device(device)),
        }
    }

    /// Updates the moments of tensor `i` for the first `k` clients with their gradient `g` and
    /// returns the direction `(m + w_d v) / (√n · c₃ + ε)`, which the step −lr/(1 − β₁ᵗ) scales:
    /// `first` at a job's first step, `keep` (0 where the optimizer restarts), `diff_weight`
    /// (β₂ (1 − β₁ᵗ)/(1 − β₂ᵗ)) and `inv_sqrt_bias3` (c₃ = 1/√(1 − β₃ᵗ)) per client, viewed to
    /// broadcast over the tensor.
    #[allow(clippy::too_many_arguments)]
    pub fn direction(
        &mut self,
        i: usize,
        k: i64,
        g: &Tensor,
        first: bool,
        keep: Option<&Tensor>,
        diff_weight: &Tensor,
        inv_sqrt_bias3: &Tensor,
        eps: &Tensor,
    ) -> Tensor {
        let [one_minus_b1, one_minus_b2, one_minus_b3, b2] = &self.factors;
        let narrow = |t: &Tensor| t.narrow(0, 0, k);
        let (mut m, mut v, mut n, mut previous) =
            (narrow(&self.m[i]), narrow(&self.v[i]), narrow(&self.n[i]), narrow(&self.previous[i]));
        let mut d = if first { g.zeros_like() } else { g - &previous };
        if let Some(keep) = keep {
            m *= keep;
            v *= keep;
            n *= keep;
            d *= keep;
        }
        let _ = m.addcmul_(&(g - &m), one_minus_b1);
        let _ = v.addcmul_(&(&d - &v), one_minus_b2);
        let nesterov = g + &d * b2;
        let _ = n.addcmul_(&(nesterov.square() - &n), one_minus_b3);
        previous.copy_(g);
        let denominator = n.sqrt() * inv_sqrt_bias3 + eps;
        (&m + &v * diff_weight) / denominator
    }
}
