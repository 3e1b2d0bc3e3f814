//! MOON's model-contrastive term (Li, He and Song, "Model-Contrastive Federated Learning",
//! CVPR 2021, Eq. 3), for a cohort.
//!
//! For a sample x with representation z from the model in training, z_glob from the global
//! model the job started from and z_prev from the client's model at the end of its previous
//! job (all three [`Model::features`]; with a [`crate::projection_head`] these are the
//! projection head's outputs):
//!
//! ```text
//! ℓ_con = −log( exp(sim(z, z_glob)/τ) / (exp(sim(z, z_glob)/τ) + exp(sim(z, z_prev)/τ)) )
//!       = softplus((sim(z, z_prev) − sim(z, z_glob)) / τ)
//! ```
//!
//! with `sim` the cosine similarity, averaged over the batch like the cross-entropy and added
//! with weight μ. As in the authors' code, the global and previous models run in evaluation
//! mode (no dropout, BatchNorm on its running statistics) without gradients, and a client
//! without a previous model (its first job) has no negative: its logits are the positive
//! alone, whose cross-entropy is 0, so the term vanishes.

use std::sync::Arc;

use tch::{Kind, Tensor};

use crate::model::{Mode, Model, split_classifier};

/// The term's settings and the cohort's previous models.
pub(super) struct Contrast {
    mu: f64,
    temperature: f64,
    /// Each client's previous model per tensor, stacked (its start model where it has none).
    previous: Vec<Tensor>,
    /// `[C]`: 1 where the client has a previous model, else 0.
    has_previous: Tensor,
}

impl Contrast {
    /// The term with weight `mu` and temperature `temperature`, against `previous` (stacked in
    /// cohort order) where `has_previous` is 1.
    pub fn new(mu: f64, temperature: f64, previous: Vec<Tensor>, has_previous: Tensor) -> Self {
        Contrast { mu, temperature, previous, has_previous }
    }

    /// The tensors a step reads: the previous models, then `has_previous`.
    pub fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        self.previous.iter_mut().chain(std::iter::once(&mut self.has_previous))
    }

    /// μ · Σ_c Σ_b w[c, b] ℓ_con[c, b] for the first `k` clients: `z` `[k, B, D]` their
    /// features in training, `start` the stacked start models, `x` the batch and `weights`
    /// `[k, B]` the batch's loss weights (`1/len`, 0 for padding).
    pub fn loss(&self, model: &Arc<dyn Model>, z: &Tensor, start: &[Tensor], x: &Tensor, weights: &Tensor) -> Tensor {
        let k = z.size()[0];
        let frozen = |tensors: &[Tensor]| {
            let narrowed: Vec<Tensor> = tensors.iter().map(|t| t.narrow(0, 0, k)).collect();
            tch::no_grad(|| model.features(split_classifier(&narrowed).0, x, &mut Mode::Eval))
        };
        let (global, previous) = (frozen(start), frozen(&self.previous));
        let positive = Tensor::cosine_similarity(z, &global, -1, 1e-8);
        let negative = Tensor::cosine_similarity(z, &previous, -1, 1e-8);
        let per_sample = ((negative - positive) / self.temperature).softplus();
        let per_client = (per_sample * weights).sum_dim_intlist(1, false, Kind::Float);
        (per_client * self.has_previous.narrow(0, 0, k)).sum(Kind::Float) * self.mu
    }
}
