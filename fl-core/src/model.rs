//! `Model`: an architecture as a pure function of its parameters.
//!
//! A model holds no weights. `forward` takes the tensors to use, so the same architecture
//! evaluates the global model, trains a client's copy or a physically smaller sub-model
//! sliced out by a structured mask (layers infer their sizes from the tensors they get).

use tch::Tensor;

use crate::params::ParamSet;
use crate::rng::{Rng, TensorNoise};
use crate::structure::Structure;

/// Whether a forward pass trains (dropout active, drawing from the job's noise stream).
pub enum Mode<'a> {
    Eval,
    Train(&'a mut TensorNoise),
}

impl Mode<'_> {
    pub fn is_train(&self) -> bool {
        matches!(self, Mode::Train(_))
    }

    /// Inverted dropout with probability `p` in training mode; the identity otherwise.
    pub fn dropout(&mut self, x: &Tensor, p: f64) -> Tensor {
        match self {
            Mode::Train(noise) if p > 0.0 => x * noise.dropout_mask(&x.size(), p, x.device()),
            _ => x.shallow_clone(),
        }
    }
}

pub trait Model: Send + Sync {
    /// Tensors (names, full shapes) and maskable unit groups.
    fn structure(&self) -> &Structure;

    /// Fresh parameters on the CPU, drawn from `rng` with PyTorch's default initialisation.
    fn init(&self, rng: &mut Rng) -> ParamSet;

    /// Logits for a batch `x` (`[batch, ...input_shape]`), using `params` in structure order;
    /// `params` may be a sub-model of a structured mask.
    fn forward(&self, params: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor;

    /// Forward FLOPs per sample attributed to each tensor, for the given (sub-)model shapes.
    /// A multiply-add counts as 2 FLOPs. The sum is the model's forward cost.
    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64>;

    /// Forward FLOPs per sample of the (sub-)model with these shapes.
    fn forward_flops(&self, shapes: &[Vec<i64>]) -> f64 {
        self.flops_per_tensor(shapes).iter().sum()
    }
}
