//! What one client job holds while it trains, estimated from its sub-model's shapes: its
//! parameters (trained and frozen), the gradients and optimizer state of the trained ones, and
//! the activations autograd keeps for the backward pass at the trainer's batch size.
//!
//! Four bytes per float. Gradients and optimizer state exist for trained tensors only
//! (elementwise masks train full-shaped tensors); the optimizer's states per trained element
//! come from the trainer ([`crate::LocalTrainer::optimizer_states`]: 0 for plain SGD, 1 with
//! momentum, 2 for Adam, 4 for Adan). Activations are the model's count
//! ([`crate::Model::activation_floats`]) over the trained tensors' layers: a frozen layer below
//! every trained one records nothing for the backward pass (a depth window's frozen blocks).
//! The count leaves out what lives only for one operation (a layer's output before the next
//! one reads it), the data batch and libtorch's workspace; for the ViT the activation count is
//! within 5% of the heap growth measured across a forward pass (see `fl-models`' tests).

use crate::mask::Mask;
use crate::model::Model;

/// Bytes per float.
const FLOAT: f64 = 4.0;

/// A job's memory, by part, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct JobMemory {
    /// Every tensor the job holds, trained or frozen.
    pub parameters: f64,
    /// One gradient per trained element.
    pub gradients: f64,
    /// The optimizer's states per trained element.
    pub optimizer: f64,
    /// What autograd keeps for the backward pass, at the batch size.
    pub activations: f64,
}

impl JobMemory {
    /// The job's whole estimate.
    pub fn total(&self) -> f64 {
        self.parameters + self.gradients + self.optimizer + self.activations
    }

    /// The estimate in words: total and parts in GB.
    pub fn describe(&self) -> String {
        format!(
            "{:.3} GB (parameters {:.3}, gradients {:.3}, optimizer {:.3}, activations {:.3})",
            self.total() / 1e9,
            self.parameters / 1e9,
            self.gradients / 1e9,
            self.optimizer / 1e9,
            self.activations / 1e9
        )
    }
}

/// The memory of a job of `model` (full shapes `shapes`) under `mask`, with `states` optimizer
/// states per trained element and mini-batches of `batch` samples.
pub fn job_memory(model: &dyn Model, shapes: &[Vec<i64>], mask: &Mask, states: u32, batch: usize) -> JobMemory {
    let held: f64 = mask.held_per_tensor(shapes).iter().sum::<i64>() as f64;
    let trained: f64 = match mask {
        // An elementwise mask trains full-shaped tensors: full gradients and states.
        Mask::Elementwise(_) => shapes.iter().map(|s| s.iter().product::<i64>()).sum::<i64>() as f64,
        _ => mask.kept_params(shapes) as f64,
    };
    let activations: f64 = mask
        .held(shapes.len())
        .into_iter()
        .zip(model.activation_floats(&mask.sub_shapes(shapes)))
        .filter(|(t, _)| mask.role(*t).trains())
        .map(|(_, floats)| floats)
        .sum();
    JobMemory {
        parameters: held * FLOAT,
        gradients: trained * FLOAT,
        optimizer: trained * f64::from(states) * FLOAT,
        activations: activations * batch as f64 * FLOAT,
    }
}
