//! `Model`: an architecture as a pure function of its parameters, written once in cohort form.
//!
//! A model holds no weights. `forward` takes the tensors of a *cohort* of clients stacked along
//! a leading client dimension (`[C, ...]` for each tensor, inputs `[C, B, ...]`), so that the
//! clients of a round train as one computation: batched matrix products for linear layers,
//! grouped convolutions for conv layers. A lone client, or the global model under evaluation,
//! is a cohort of one ([`forward_one`]); there is no separate single-model path. The same
//! architecture trains a physically smaller sub-model sliced out by a structured mask (layers
//! infer their sizes from the tensors they get).
//!
//! Every model ends in a linear classifier made of its last two tensors; a model writes the
//! layers before it ([`Model::features`]), so that methods which work on the representation
//! (MOON's contrastive loss, a projection head) reach it in any model.

use tch::Tensor;

use crate::params::ParamSet;
use crate::rng::{CohortNoise, Rng};
use crate::structure::Structure;

/// Whether a forward pass trains (dropout active, drawing from each client's noise stream;
/// normalisation layers using batch statistics and updating their running buffers).
pub enum Mode<'a> {
    /// Evaluation: no dropout, normalisation layers use their running statistics.
    Eval,
    /// Training, with the cohort's noise streams and padding mask.
    Train(Training<'a>),
}

/// What a training forward pass needs beyond the parameters and inputs, and what it reports
/// besides its output.
pub struct Training<'a> {
    /// The cohort's tensor noise (dropout, sampled decisions), one stream per client.
    pub noise: &'a mut CohortNoise,
    /// `[C, B]`, 1 for a real sample and 0 for padding, when some client's batch is padded
    /// to the cohort's longest batch of the step. Layers that compute statistics over the
    /// batch (BatchNorm) must leave padding out; `None` means every sample is real. Read
    /// through [`Mode::valid`], which notes the read.
    valid: Option<&'a Tensor>,
    /// Whether the pass asked for `valid` ([`Mode::reads_padding`]).
    asked_valid: std::cell::Cell<bool>,
    /// The shares of units that input-dependent gates kept, recorded by the pass
    /// ([`Mode::record_usage`]).
    usage: Vec<GateUsage>,
}

/// The kind of unit an input-dependent gate keeps or drops (AdaViT's three decisions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gate {
    /// Tokens (patches) entering a block.
    Tokens,
    /// Attention heads of a block.
    Heads,
    /// A block's sub-layers (its attention and its MLP, each kept or skipped).
    Layers,
}

/// One gate's kept share in one layer: `kept` `[C]`, each client's mean over its real samples
/// and the layer's units of that kind, differentiable (a straight-through estimate).
pub struct GateUsage {
    /// What the gate keeps.
    pub gate: Gate,
    /// `[C]`: the kept share per client.
    pub kept: Tensor,
}

impl<'a> Mode<'a> {
    /// Training mode without padding.
    pub fn train(noise: &'a mut CohortNoise) -> Self {
        Mode::padded(noise, None)
    }

    /// Training mode whose samples `valid` (`[C, B]`, 0 for padding) marks, if some are padding.
    pub fn padded(noise: &'a mut CohortNoise, valid: Option<&'a Tensor>) -> Self {
        Mode::Train(Training { noise, valid, asked_valid: std::cell::Cell::new(false), usage: Vec::new() })
    }

    /// Whether this is a training pass.
    pub fn is_train(&self) -> bool {
        matches!(self, Mode::Train(_))
    }

    /// The padding mask `[C, B]` of a training pass, if some samples are padding. A model
    /// asks for it at every training pass or at none (BatchNorm at every one).
    pub fn valid(&self) -> Option<&Tensor> {
        match self {
            Mode::Train(t) => {
                t.asked_valid.set(true);
                t.valid
            }
            Mode::Eval => None,
        }
    }

    /// Whether this training pass asked for the padding mask ([`Mode::valid`]): a model that
    /// never does computes the same with and without padding marked, so a padded step and a
    /// full one of the same shape can share one CUDA graph.
    pub fn reads_padding(&self) -> bool {
        match self {
            Mode::Train(t) => t.asked_valid.get(),
            Mode::Eval => false,
        }
    }

    /// Inverted dropout with probability `p` on `x` (`[C, ...]`, client first) in training
    /// mode, each client's mask from its own stream; the identity otherwise.
    pub fn dropout(&mut self, x: &Tensor, p: f64) -> Tensor {
        match self.dropout_mask(x, p) {
            Some(mask) => x * mask,
            None => x.shallow_clone(),
        }
    }

    /// The mask [`Mode::dropout`] multiplies `x` by (0 or `1 / (1 − p)`, laid out as `x`), drawn
    /// as it draws it; `None` where dropout is the identity (evaluation, or `p` 0).
    pub fn dropout_mask(&mut self, x: &Tensor, p: f64) -> Option<Tensor> {
        match self {
            Mode::Train(t) if p > 0.0 => Some(t.noise.dropout_mask_for(x, p)),
            _ => None,
        }
    }

    /// Uniform floats in [0, 1) of `shape` (`[C, ...]`), each client's row from its own stream,
    /// in training mode; `None` in evaluation.
    pub fn uniform(&mut self, shape: &[i64]) -> Option<Tensor> {
        match self {
            Mode::Train(t) => Some(t.noise.uniform(shape)),
            Mode::Eval => None,
        }
    }

    /// Records a gate's kept share in a training pass (nothing in evaluation), for the trainer's
    /// usage loss.
    pub fn record_usage(&mut self, gate: Gate, kept: Tensor) {
        if let Mode::Train(t) = self {
            t.usage.push(GateUsage { gate, kept });
        }
    }

    /// The gate usage recorded so far, in the order recorded; none in evaluation.
    pub fn take_usage(&mut self) -> Vec<GateUsage> {
        match self {
            Mode::Train(t) => std::mem::take(&mut t.usage),
            Mode::Eval => Vec::new(),
        }
    }
}

/// An architecture: its [`Structure`], its initialisation and its forward pass in cohort form.
///
/// # Contract
/// A model holds no weights and is shared (`Arc`) by the engine and every worker thread, so
/// its methods take `&self` and must be pure functions of their arguments. `init` draws only
/// from the `rng` it gets. Its last two tensors are a linear classifier (`weight` `[classes,
/// D]`, `bias` `[classes]`) applied to [`Model::features`]. `features` receives the other
/// tensors in [`Model::structure`] order with a leading client dimension, and must keep
/// clients apart: client `c`'s output may depend only on its own slices of the tensors,
/// inputs and noise (that is what makes a client's result
/// the same alone or in a cohort). It must read sizes from the tensors it gets, not from the
/// structure, since a structured mask hands it a smaller sub-model. Buffers
/// ([`crate::TensorSpec::trainable`] false) are updated in place in training mode.
/// `flops_per_tensor` feeds the cost model and must be a deterministic function of the shapes.
///
/// # Example
/// Multinomial logistic regression on flat inputs, `logits = x Wᵀ + b`: no layer before the
/// classifier, so the features are the inputs.
/// ```
/// use fl_core::rng::{self, Rng};
/// use fl_core::tch::{Device, Kind, Tensor};
/// use fl_core::{Mode, Model, ParamSet, Structure, TensorSpec, forward_one};
///
/// struct Logistic(Structure);
///
/// impl Model for Logistic {
///     fn structure(&self) -> &Structure {
///         &self.0
///     }
///     fn init(&self, _: &mut Rng) -> ParamSet {
///         let zeros = |t: &TensorSpec| Tensor::zeros(t.shape.as_slice(), (Kind::Float, Device::Cpu));
///         ParamSet::new(self.0.names(), self.0.tensors.iter().map(zeros).collect()).unwrap()
///     }
///     fn features(&self, _body: &[Tensor], x: &Tensor, _: &mut Mode) -> Tensor {
///         x.shallow_clone() // [C, B, 784]
///     }
///     fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
///         vec![2.0 * (shapes[0][0] * shapes[0][1]) as f64, 0.0]
///     }
/// }
/// let tensors = vec![TensorSpec::new("fc.weight", [10, 784]), TensorSpec::new("fc.bias", [10])];
/// let model = Logistic(Structure { tensors, groups: vec![] });
/// assert_eq!(model.forward_flops(&model.structure().shapes()), 15_680.0);
/// let params = model.init(&mut rng::stream(0, &[]));
/// let x = Tensor::zeros([3, 784], (Kind::Float, Device::Cpu));
/// assert_eq!(forward_one(&model, params.tensors(), &x, &mut Mode::Eval).size(), [3, 10]);
/// ```
pub trait Model: Send + Sync {
    /// Tensors (names, full shapes) and maskable unit groups.
    fn structure(&self) -> &Structure;

    /// Fresh parameters on the CPU, drawn from `rng` with PyTorch's default initialisation.
    fn init(&self, rng: &mut Rng) -> ParamSet;

    /// The representation `[C, B, D]` that the classifier reads, of a cohort of `C` clients:
    /// `body` holds every tensor but the classifier's (the model's last two, `weight`
    /// `[classes, D]` and `bias` `[classes]`) in structure order, each `[C, ...shape]` (shapes
    /// may be those of a structured mask's sub-model, equal across the cohort), and `x`
    /// `[C, B, ...input_shape]`. Client `c`'s features depend on its own slice of the
    /// tensors, inputs and noise alone.
    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor;

    /// Logits `[C, B, classes]` of a cohort: `params` in structure order, each
    /// `[C, ...shape]`; the classifier (the last two tensors) applied to
    /// [`Model::features`] of the others.
    ///
    /// # Panics
    /// If `params` holds fewer than the classifier's two tensors.
    fn forward(&self, params: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let (body, head) = split_classifier(params);
        linear(&self.features(body, x, mode), &head[0], &head[1])
    }

    /// The logits `[C, B, classes]` of each read-out of a (sub-)model that holds several (early
    /// exits, then the deepest): `depths` says after how many blocks each reads
    /// ([`crate::Structure::readouts`]), shallowest first; the last is [`Model::forward`]'s.
    /// A model without early exits has one read-out, and the default runs `forward`.
    ///
    /// # Panics
    /// By default, if `depths` names more than one read-out.
    fn forward_exits(&self, params: &[Tensor], x: &Tensor, mode: &mut Mode, depths: &[usize]) -> Vec<Tensor> {
        assert!(depths.len() <= 1, "this model has one read-out, {} asked for", depths.len());
        vec![self.forward(params, x, mode)]
    }

    /// Forward FLOPs per sample attributed to each tensor, for the given (sub-)model shapes.
    /// A multiply-add counts as 2 FLOPs. The sum is the model's forward cost.
    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64>;

    /// Forward FLOPs per sample of the (sub-)model with these shapes.
    fn forward_flops(&self, shapes: &[Vec<i64>]) -> f64 {
        self.flops_per_tensor(shapes).iter().sum()
    }

    /// Floats per sample that autograd keeps for the backward pass, attributed to the tensors
    /// of the (sub-)model with these shapes (the layer a tensor belongs to saves them), for
    /// [`crate::job_memory()`]. The default is a rough count from the FLOPs: each weight's input
    /// (a linear layer's `in` features; for a convolution `in · k²` per output position, the
    /// unfolded input, which overcounts the saved input by up to k² and leaves out the
    /// activations' own saved outputs). A model states its exact count where memory matters.
    fn activation_floats(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        shapes
            .iter()
            .zip(self.flops_per_tensor(shapes))
            .map(|(s, f)| if s.len() >= 2 && s[0] > 0 { f / (2.0 * s[0] as f64) } else { 0.0 })
            .collect()
    }

    /// Whether a training step of this model may be captured once as a CUDA graph and replayed
    /// ([`crate::trainer::sgd::SgdConfig::cuda_graphs`]): its forward pass must read nothing
    /// from host memory and no host value that changes between steps. Default yes.
    fn replayable(&self) -> bool {
        true
    }

    /// Whether a training pass records input-dependent gates' usage ([`Mode::record_usage`]),
    /// which a usage loss ([`crate::trainer::sgd::SgdConfig::usage`]) needs. Default no.
    fn records_usage(&self) -> bool {
        false
    }

    /// A training step's cross-entropy and its gradients, derived by hand instead of by
    /// autograd, for models whose steps are too small for autograd's bookkeeping to vanish next
    /// to the arithmetic. The loss is [`Model::forward`]'s: client `c`'s is
    /// `Σ_b weights[c, b] · CE(logits[c, b], y[c·B + b])`, with `params`, `x` and `mode` as
    /// `forward` takes them and `y` the labels `[C·B]`. The pass must draw from `mode` exactly
    /// what `forward` draws, so that either way of training a client sees the same noise, and
    /// give every tensor's gradient ([`LossGradients`]). `None` (the default): the trainer
    /// differentiates `forward` with autograd.
    fn loss_gradients(
        &self,
        _params: &[Tensor],
        _x: &Tensor,
        _y: &Tensor,
        _weights: &Tensor,
        _mode: &mut Mode,
    ) -> Option<LossGradients> {
        None
    }
}

/// What [`Model::loss_gradients`] computes.
pub struct LossGradients {
    /// `[C]`: each client's loss (no graph attached).
    pub per_client: Tensor,
    /// The gradient of the summed loss with respect to each tensor of `params`, in order, each
    /// of its tensor's shape (buffers' undefined).
    pub grads: Vec<Tensor>,
}

/// `x Wᵀ + b` per client: `x` `[C, B, in]`, `w` `[C, out, in]`, `b` `[C, out]` → `[C, B, out]`,
/// as one batched matrix product.
///
/// The product is formed as `(W xᵀ + b)ᵀ`: the result is a transposed view (features
/// outermost in memory), and autograd computes the weight's gradient as `gᵀ x`, already in
/// `W`'s row-major layout. The usual `x Wᵀ` hands it back transposed, for the update to read
/// across rows: a CPU step of the MLP 784-200-10 at batch 32 took 390 µs that way and takes
/// 345 µs this way. Elementwise layers keep the layout (dropout draws its mask in it), and the
/// next `linear` reads it as the `xᵀ` it needs without a copy. For many rows per client
/// (token sequences, whose next layers want the features contiguous) use [`linear_rows`].
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    b.unsqueeze(2).baddbmm(w, &x.transpose(1, 2), 1, 1).transpose(1, 2)
}

/// [`linear`] computed as `x Wᵀ + b`, its result row-major `[C, B, out]`: for many rows per
/// client (token sequences), where the weight's transposed gradient costs little next to the
/// product and layer norm and attention read the features contiguous.
pub fn linear_rows(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    b.unsqueeze(1).baddbmm(x, &w.transpose(1, 2), 1, 1)
}

/// Forward FLOPs per sample of one weight (rank ≥ 2) or bias (rank 1) tensor applied at
/// `positions` output positions (1 for a linear layer, `H_out · W_out` for a convolution).
///
/// The convention every model follows: a multiply-add is 2 FLOPs and a bias addition 1 FLOP
/// per output element, so a linear weight `[out, in]` costs `2 · out · in`, its bias `out`, and
/// a convolution weight `[co, ci, kh, kw]` costs `2 · co · ci · kh · kw` at each of its output
/// positions, its bias `co` per position. Activations, pooling, dropout, flattening and the
/// loss are not counted: they attach to no parameter tensor and are a small share of the total.
pub fn tensor_flops(shape: &[i64], positions: i64) -> f64 {
    let elements: i64 = shape.iter().product();
    let per_position = if shape.len() >= 2 { 2 * elements } else { elements };
    (per_position * positions) as f64
}

/// A model's tensors split into its body and its classifier (the last two: weight, bias).
///
/// # Panics
/// If there are fewer than two tensors.
pub fn split_classifier<T>(tensors: &[T]) -> (&[T], &[T]) {
    assert!(
        tensors.len() >= 2,
        "a model ends in a linear classifier: expected at least 2 tensors, got {}",
        tensors.len()
    );
    tensors.split_at(tensors.len() - 2)
}

/// Logits `[B, classes]` of one parameter set (unstacked tensors) on a batch `[B, ...]`: the
/// model run as a cohort of one.
pub fn forward_one(model: &dyn Model, params: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
    let stacked: Vec<Tensor> = params.iter().map(|p| p.unsqueeze(0)).collect();
    model.forward(&stacked, &x.unsqueeze(0), mode).squeeze_dim(0)
}
