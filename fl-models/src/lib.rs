//! `fl-models`: the model zoo (`mlp`, `lenet5`, and the text classifier `fasttext`, which takes
//! token ids). Each model is a pure function of its parameters (fl-core's [`fl_core::Model`]),
//! written once in cohort form on the layers of [`cohort`] (a lone model is a cohort of one):
//! it exposes its tensors and maskable unit groups, draws PyTorch's default initialisation from
//! a host stream, runs forward on the full model or on a sub-model sliced out by a structured
//! mask, and counts forward FLOPs per tensor for the cost model.
//!
//! Every model registers itself with `inventory` under the name its file documents; a binary
//! must reference this crate (`use fl_models as _;`) for the registrations to survive linking.

pub mod cohort;
mod fasttext;
pub mod flops;
pub mod init;
mod lenet5;
mod mlp;
#[cfg(test)]
mod testing;

pub use fasttext::{FastText, FastTextConfig};
pub use lenet5::{LeNet5, LeNet5Config};
pub use mlp::{DropoutPosition, Mlp, MlpConfig};
