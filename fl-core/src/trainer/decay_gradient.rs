//! ASO-Fed's decay-coefficient gradient (Chen, Ning, Slawski and Rangwala, IEEE BigData 2020),
//! for a cohort.
//!
//! At every local step the client replaces its gradient g_t = ∇s(w_t) (the loss with its
//! proximal term) by
//!
//! ```text
//! ζ_t = g_t − g_{t−1} + h_{t−1},   h_t = β h_{t−1} + (1 − β) g_{t−1},
//! ```
//!
//! with h and g_{t−1} zero before the client's first step. Both are kept per client across its
//! jobs (the client's state: `h.<tensor>`, then `prev.<tensor>`), as the public
//! re-implementations keep them in long-lived client objects (AFL-Lib, FedOpt; the paper's
//! text was not available), and the decay term uses the previous gradient, as two of the three
//! do (FedOpt uses the current one).

use tch::Tensor;

use crate::error::Result;
use crate::params::ParamSet;

/// The cohort's decay state: per tensor, h and the previous gradient, stacked `[C, ...]`.
pub(super) struct DecayGradient {
    beta: f64,
    h: Vec<Tensor>,
    prev: Vec<Tensor>,
}

impl DecayGradient {
    /// β and the stacked states (`h` then `prev`, one tensor each per model tensor).
    pub fn new(beta: f64, h: Vec<Tensor>, prev: Vec<Tensor>) -> Self {
        DecayGradient { beta, h, prev }
    }

    /// The names of a client's state for a model with tensors `names`.
    pub fn state_names(names: &[String]) -> Vec<String> {
        names.iter().map(|n| format!("h.{n}")).chain(names.iter().map(|n| format!("prev.{n}"))).collect()
    }

    /// Replaces the first `k` clients' gradients (`grads[i]` undefined for an untrained
    /// tensor) by ζ and moves h and the previous gradient on.
    pub fn apply(&mut self, grads: &mut [Tensor], k: i64) {
        let beta = self.beta;
        tch::no_grad(|| {
            for (i, g) in grads.iter_mut().enumerate().filter(|(_, g)| g.defined()) {
                let (mut h, mut prev) = (self.h[i].narrow(0, 0, k), self.prev[i].narrow(0, 0, k));
                let zeta = &*g - &prev + &h;
                // h ← β h + (1 − β) g_{t−1}, then g_{t−1} ← g_t.
                h *= beta;
                h += &prev * (1.0 - beta);
                prev.copy_(g);
                *g = zeta;
            }
        });
    }

    /// The tensors a step reads and moves on: h, then the previous gradients.
    pub fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        self.h.iter_mut().chain(self.prev.iter_mut())
    }

    /// The state of cohort slot `slot` for the client's next job.
    pub fn state_of(&self, slot: i64, names: &[String]) -> Result<ParamSet> {
        let tensors = self.h.iter().chain(&self.prev).map(|t| t.get(slot).copy()).collect();
        ParamSet::new(Self::state_names(names), tensors)
    }
}
