//! `Model`: an architecture as a pure function of its parameters, written once in cohort form.
//!
//! A model holds no weights. `forward` takes the tensors of a *cohort* of clients stacked along
//! a leading client dimension (`[C, ...]` for each tensor, inputs `[C, B, ...]`), so that the
//! clients of a round train as one computation: batched matrix products for linear layers,
//! grouped convolutions for conv layers. A lone client, or the global model under evaluation,
//! is a cohort of one ([`forward_one`]); there is no separate single-model path. The same
//! architecture trains a physically smaller sub-model sliced out by a structured mask (layers
//! infer their sizes from the tensors they get).

use tch::Tensor;

use crate::params::ParamSet;
use crate::rng::{CohortNoise, Rng};
use crate::structure::Structure;

/// Whether a forward pass trains (dropout active, drawing from each client's noise stream;
/// normalisation layers using batch statistics and updating their running buffers).
pub enum Mode<'a> {
    Eval,
    Train(Training<'a>),
}

/// What a training forward pass needs beyond the parameters and inputs.
pub struct Training<'a> {
    pub noise: &'a mut CohortNoise,
    /// `[C, B]`, 1 for a real sample and 0 for padding, when some client's batch is padded
    /// to the cohort's longest batch of the step. Layers that compute statistics over the
    /// batch (BatchNorm) must leave padding out; `None` means every sample is real.
    pub valid: Option<&'a Tensor>,
}

impl<'a> Mode<'a> {
    /// Training mode without padding.
    pub fn train(noise: &'a mut CohortNoise) -> Self {
        Mode::Train(Training { noise, valid: None })
    }

    pub fn is_train(&self) -> bool {
        matches!(self, Mode::Train(_))
    }

    /// The padding mask `[C, B]` of a training pass, if some samples are padding.
    pub fn valid(&self) -> Option<&Tensor> {
        match self {
            Mode::Train(t) => t.valid,
            Mode::Eval => None,
        }
    }

    /// Inverted dropout with probability `p` on `x` (`[C, ...]`, client first) in training
    /// mode, each client's mask from its own stream; the identity otherwise.
    pub fn dropout(&mut self, x: &Tensor, p: f64) -> Tensor {
        match self {
            Mode::Train(t) if p > 0.0 => x * t.noise.dropout_mask(&x.size(), p),
            _ => x.shallow_clone(),
        }
    }
}

pub trait Model: Send + Sync {
    /// Tensors (names, full shapes) and maskable unit groups.
    fn structure(&self) -> &Structure;

    /// Fresh parameters on the CPU, drawn from `rng` with PyTorch's default initialisation.
    fn init(&self, rng: &mut Rng) -> ParamSet;

    /// Logits `[C, B, classes]` of a cohort of `C` clients: `params` in structure order, each
    /// `[C, ...shape]` (shapes may be those of a structured mask's sub-model, equal across the
    /// cohort), and `x` `[C, B, ...input_shape]`. Client `c`'s logits depend on its own slice
    /// of the parameters, inputs and noise alone.
    fn forward(&self, params: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor;

    /// Forward FLOPs per sample attributed to each tensor, for the given (sub-)model shapes.
    /// A multiply-add counts as 2 FLOPs. The sum is the model's forward cost.
    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64>;

    /// Forward FLOPs per sample of the (sub-)model with these shapes.
    fn forward_flops(&self, shapes: &[Vec<i64>]) -> f64 {
        self.flops_per_tensor(shapes).iter().sum()
    }
}

/// Logits `[B, classes]` of one parameter set (unstacked tensors) on a batch `[B, ...]`: the
/// model run as a cohort of one.
pub fn forward_one(model: &dyn Model, params: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
    let stacked: Vec<Tensor> = params.iter().map(|p| p.unsqueeze(0)).collect();
    model.forward(&stacked, &x.unsqueeze(0), mode).squeeze_dim(0)
}
