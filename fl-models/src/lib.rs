//! `fl-models`: the model zoo (`mlp`, `lenet5`, asyncnc's `cnn3`, `resnet20` with BatchNorm,
//! FedASMU's `cnn2`, `alexnet` and `vgg11` (BatchNorm), the Vision Transformer `vit`, and
//! the text classifiers `fasttext` and `textcnn`, which take token ids). Each model is a pure
//! function of its state (fl-core's [`fl_core::Model`]), written once in cohort form on the layers of
//! [`cohort`] (a lone model is a cohort of one): it exposes its tensors (parameters, and
//! buffers such as BatchNorm's running statistics) and maskable unit groups, draws its
//! initialisation from a host stream (PyTorch's defaults unless its paper says otherwise),
//! runs forward on the full model or on a sub-model sliced out by a structured mask, and
//! counts forward FLOPs per tensor for the cost model.
//!
//! Every model registers itself with `inventory` under the name its file documents; a binary
//! must reference this crate (`use fl_models as _;`) for the registrations to survive linking.

mod alexnet;
pub mod by_hand;
mod cnn2;
mod cnn3;
pub mod cohort;
mod fasttext;
pub mod flops;
pub mod init;
mod layout;
mod lenet5;
mod mlp;
mod pool;
mod probability_mask;
mod resnet20;
#[cfg(test)]
mod testing;
mod textcnn;
mod vgg11;
mod vit;
mod vit_decisions;
pub mod vit_import;

pub use alexnet::{AlexNet, AlexNetConfig};
pub use cnn2::{Cnn2, Cnn2Config};
pub use cnn3::{Cnn3, Cnn3Config};
pub use fasttext::{FastText, FastTextConfig};
pub use lenet5::{LeNet5, LeNet5Config};
pub use mlp::{DropoutPosition, Mlp, MlpConfig};
pub use probability_mask::{ProbabilityMask, ProbabilityMaskConfig};
pub use resnet20::{ResNet20, ResNet20Config};
pub use textcnn::{TextCnn, TextCnnConfig};
pub use vgg11::{Vgg11, Vgg11Config};
pub use vit::{Vit, VitConfig, VitDims, VitPreset};
pub use vit_decisions::DecisionsConfig;
