//! A model's tensors as its constructor lays them out, layer by layer in `state_dict` order:
//! each tensor's spec, how [`fl_core::Model::init`] fills it (PyTorch's defaults) and the
//! output positions its forward FLOPs are counted at, plus the model's unit groups.
//!
//! The FedASMU models (`cnn2`, `alexnet`, `vgg11`, `textcnn`) are built on it; it is the
//! generalisation of `resnet20`'s private layout (which also records bias-free convolutions
//! and BatchNorm), adding biased convolutions, linear layers and embeddings.

use fl_core::rng::Rng;
use fl_core::{Depth, ParamSet, Structure, TensorSpec, UnitGroup, UnitMember};
use tch::{Device, Kind, Tensor};

use crate::{flops, init};

/// How [`Layout::init`] fills a tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fill {
    /// U(−bound, bound): PyTorch's linear and convolution weights and biases, `1/√fan_in`.
    Uniform {
        bound: f64,
    },
    /// N(0, std²) (timm's ViT weights and embeddings).
    Normal {
        std: f64,
    },
    Zeros,
    Ones,
    /// Every element `value` (a decision's starting bias).
    Constant {
        value: f64,
    },
    /// `nn.Embedding`: N(0, 1) with the row `padding_idx` zeroed.
    Embedding {
        padding_idx: i64,
    },
}

/// Collects tensors, fills, FLOP positions and unit groups while a constructor walks its
/// layers; [`Layout::structure`] then gives the model's [`Structure`].
#[derive(Debug, Default)]
pub(crate) struct Layout {
    pub tensors: Vec<TensorSpec>,
    pub fills: Vec<Fill>,
    /// Per tensor: the output positions its FLOPs are counted at (0 for buffers and lookups).
    pub positions: Vec<i64>,
    pub groups: Vec<UnitGroup>,
    /// The [`Depth`] given to the tensors pushed from now on.
    pub depth: Depth,
}

impl Layout {
    /// A trainable tensor `name` of `shape`, filled as `fill` says, its FLOPs counted at
    /// `positions`; returns its index.
    pub fn tensor(&mut self, name: &str, shape: impl Into<Vec<i64>>, fill: Fill, positions: i64) -> usize {
        self.push(TensorSpec::new(name, shape), fill, positions)
    }

    fn push(&mut self, spec: TensorSpec, fill: Fill, positions: i64) -> usize {
        self.tensors.push(spec.at(self.depth));
        self.fills.push(fill);
        self.positions.push(positions);
        self.tensors.len() - 1
    }

    /// A weight of `shape` (`[out, in, ...]`) and, if `bias`, its bias `[out]`, both
    /// U(±1/√fan_in), counted at `positions`; returns the weight's index (the bias follows it).
    fn weight(&mut self, name: &str, shape: Vec<i64>, with_bias: Bias, positions: i64) -> usize {
        let out = shape[0];
        let bound = 1.0 / (init::fan_in(&shape) as f64).sqrt();
        let w = self.push(TensorSpec::new(format!("{name}.weight"), shape), Fill::Uniform { bound }, positions);
        if with_bias == Bias::With {
            self.push(TensorSpec::new(format!("{name}.bias"), [out]), Fill::Uniform { bound }, positions);
        }
        w
    }

    /// A 2-D convolution `[out, in, k, k]` with its bias, at `positions` output positions;
    /// returns the weight's index.
    pub fn conv(&mut self, name: &str, out: i64, inp: i64, k: i64, positions: i64) -> usize {
        self.weight(name, vec![out, inp, k, k], Bias::With, positions)
    }

    /// A bias-free 2-D convolution (one followed by BatchNorm); returns its index.
    pub fn conv_without_bias(&mut self, name: &str, out: i64, inp: i64, k: i64, positions: i64) -> usize {
        self.weight(name, vec![out, inp, k, k], Bias::Without, positions)
    }

    /// A 1-D convolution `[out, in, k]` with its bias (PyTorch's `nn.Conv1d` layout), at
    /// `positions` output positions; returns the weight's index.
    pub fn conv1d(&mut self, name: &str, out: i64, inp: i64, k: i64, positions: i64) -> usize {
        self.weight(name, vec![out, inp, k], Bias::With, positions)
    }

    /// A linear layer `[out, in]` with its bias; returns the weight's index.
    pub fn linear(&mut self, name: &str, out: i64, inp: i64) -> usize {
        self.weight(name, vec![out, inp], Bias::With, 1)
    }

    /// A linear layer `[out, in]` with weight N(0, std²) and a zero bias (timm's ViT), counted
    /// at `positions` (the tokens it is applied to); returns the weight's index.
    pub fn linear_normal(&mut self, name: &str, out: i64, inp: i64, positions: i64, std: f64) -> usize {
        let w = self.tensor(&format!("{name}.weight"), [out, inp], Fill::Normal { std }, positions);
        self.tensor(&format!("{name}.bias"), [out], Fill::Zeros, positions);
        w
    }

    /// LayerNorm over `d` features: weight (1) and bias (0), no FLOPs counted. Returns the
    /// weight's index.
    pub fn layer_norm(&mut self, name: &str, d: i64) -> usize {
        let w = self.tensor(&format!("{name}.weight"), [d], Fill::Ones, 0);
        self.tensor(&format!("{name}.bias"), [d], Fill::Zeros, 0);
        w
    }

    /// BatchNorm over `ch` channels: weight (1), bias (0), running mean (0) and variance (1)
    /// buffers; the affine pair costs a FLOP per output element each. Returns the indices.
    pub fn batch_norm(&mut self, name: &str, ch: i64, positions: i64) -> [usize; 4] {
        [
            self.push(TensorSpec::new(format!("{name}.weight"), [ch]), Fill::Ones, positions),
            self.push(TensorSpec::new(format!("{name}.bias"), [ch]), Fill::Zeros, positions),
            self.push(TensorSpec::buffer(format!("{name}.running_mean"), [ch]), Fill::Zeros, 0),
            self.push(TensorSpec::buffer(format!("{name}.running_var"), [ch]), Fill::Ones, 0),
        ]
    }

    /// An embedding table `[vocab, dim]` (a lookup: no FLOPs); returns its index.
    pub fn embedding(&mut self, name: &str, vocab: i64, dim: i64, padding_idx: i64) -> usize {
        self.push(TensorSpec::new(format!("{name}.weight"), [vocab, dim]), Fill::Embedding { padding_idx }, 0)
    }

    /// A unit group of `units` units whose members are `(tensor, dim, block)`.
    pub fn group(&mut self, name: &str, units: i64, members: &[(usize, usize, i64)]) {
        let members = members.iter().map(|&(tensor, dim, block)| UnitMember { tensor, dim, block }).collect();
        self.groups.push(UnitGroup { name: name.into(), units, members });
    }

    /// The model's structure.
    pub fn structure(&self) -> Structure {
        Structure { tensors: self.tensors.clone(), groups: self.groups.clone() }
    }

    /// Fresh CPU tensors in structure order, each drawn (or set) as its [`Fill`] says.
    pub fn init(&self, rng: &mut Rng) -> ParamSet {
        let tensors = self
            .tensors
            .iter()
            .zip(&self.fills)
            .map(|(t, fill)| match *fill {
                Fill::Uniform { bound } => init::uniform(rng, &t.shape, bound),
                Fill::Normal { std } => init::normal(rng, &t.shape, std),
                Fill::Zeros => Tensor::zeros(t.shape.as_slice(), (Kind::Float, Device::Cpu)),
                Fill::Ones => Tensor::ones(t.shape.as_slice(), (Kind::Float, Device::Cpu)),
                Fill::Constant { value } => Tensor::full(t.shape.as_slice(), value, (Kind::Float, Device::Cpu)),
                Fill::Embedding { padding_idx } => init::embedding(rng, &t.shape, Some(padding_idx)),
            })
            .collect();
        ParamSet::new(self.tensors.iter().map(|t| t.name.clone()).collect(), tensors)
            .expect("one tensor per structure entry")
    }

    /// Forward FLOPs per sample of each tensor for (sub-)model `shapes`, following
    /// [`crate::flops`] at the recorded positions.
    ///
    /// # Panics
    /// If `shapes` does not have one entry per tensor.
    pub fn flops(&self, model: &str, shapes: &[Vec<i64>]) -> Vec<f64> {
        let want = self.positions.len();
        assert_eq!(shapes.len(), want, "{model} flops: expected {want} shapes, got {}", shapes.len());
        shapes.iter().zip(&self.positions).map(|(s, &positions)| flops::of_tensor(s, positions)).collect()
    }
}

/// Whether [`Layout::weight`] adds a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bias {
    With,
    Without,
}

/// Walks a cohort's tensors in structure order during `forward`.
pub(crate) struct Cursor<'a>(std::slice::Iter<'a, Tensor>);

impl<'a> Cursor<'a> {
    /// A cursor over `params`, which must hold `want` tensors.
    ///
    /// # Panics
    /// If the count differs.
    pub fn new(model: &str, params: &'a [Tensor], want: usize) -> Self {
        assert_eq!(params.len(), want, "{model} forward: expected {want} tensors, got {}", params.len());
        Cursor(params.iter())
    }

    pub fn next(&mut self) -> &'a Tensor {
        self.0.next().expect("the tensor count was checked")
    }

    /// The next two tensors (a weight and its bias).
    pub fn pair(&mut self) -> (&'a Tensor, &'a Tensor) {
        (self.next(), self.next())
    }
}

/// Output size of a convolution or pooling along one axis.
pub(crate) fn out_size(size: i64, kernel: i64, stride: i64, padding: i64) -> i64 {
    (size + 2 * padding - kernel).div_euclid(stride) + 1
}

/// The grouped layout `[B, C·ch, H, W]` of `clients` clients flattened channel first (PyTorch's
/// `flatten(1)` per sample) → `[C, B, ch·H·W]`, ready for [`crate::cohort::linear`].
pub(crate) fn flatten(x: &Tensor, clients: i64) -> Tensor {
    x.reshape([x.size()[0], clients, -1]).transpose(0, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_pytorchs_formula() {
        assert_eq!(out_size(32, 3, 2, 1), 16);
        assert_eq!(out_size(32, 2, 1, 0), 31);
        assert_eq!(out_size(5, 2, 2, 0), 2);
        assert_eq!(out_size(1, 2, 2, 0), 0);
    }
}
