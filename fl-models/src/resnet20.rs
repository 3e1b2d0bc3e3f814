//! `resnet20`: ResNet-20 with projection shortcuts, the asyncnc CIFAR-10 model.
//!
//! He, Zhang, Ren and Sun, "Deep Residual Learning for Image Recognition", CVPR 2016
//! (<https://arxiv.org/abs/1512.03385>), §4.2's CIFAR network with n = 3, as the code of
//! A. Forootani and R. Iervolino's asyncnc paper builds it
//! (<https://github.com/Ali-Forootani/AFL_non_convex_non_iid>): stem conv3×3(→16, no bias) → BN
//! → ReLU; three stages of three `BasicBlock`s of widths 16, 32, 64, the first block of stages
//! 2 and 3 with stride 2; global average pool; linear 64 → classes. A block computes
//! `ReLU(BN(conv3×3(ReLU(BN(conv3×3_s(x))))) + shortcut(x))`, both convolutions without bias;
//! the shortcut is the identity, or conv1×1(stride s, no bias) + BN where the stride or width
//! changes (He et al.'s option B; the paper's CIFAR networks use option A, zero-padding
//! identity shortcuts, which have no parameters). 272,474 trainable parameters for 3×32×32
//! inputs and 10 classes. Deviation from the asyncnc code: the model returns logits; its final
//! log-softmax is left to the loss (the trainer's cross-entropy on logits is the same NLL).
//!
//! Inputs are `[channels, H, W]` of any size (32×32 for CIFAR); the head averages over
//! whatever H×W the last stage has (8×8 for 32×32 inputs, where it is the code's
//! `avg_pool2d(8)`). FedASMU's Tiny-ImageNet runs (3×64×64, 200 classes) use the same network,
//! as its spec recommends: the last stage is 16×16 before the pool, 284,824 parameters and
//! about 328 MFLOP per sample. BatchNorm is [`cohort::batch_norm`]: its running statistics
//! are buffers ([`TensorSpec::buffer`]) the training forward pass updates in place. Tensor names are those
//! of the PyTorch `state_dict` (`layer2.0.shortcut.1.running_var`, …) without
//! `num_batches_tracked`. Initialisation is PyTorch's default: convolution and linear weights
//! and the linear bias U(±1/√fan_in), BN weight 1 and bias 0, running mean 0 and variance 1.
//!
//! Unit groups: only the inner channels of each block (conv1's output channels: a row of
//! `conv1.weight`, an entry of every `bn1` tensor, an input channel of `conv2.weight`), nine
//! groups. The channels of the residual stream are not maskable: the additions tie them across
//! every block of a stage, the stem and the shortcuts, so a structured mask narrows only the
//! blocks' interiors (a width-prefix mask of ratio r keeps a bit more than r of the
//! parameters).
//!
//! FLOPs follow [`crate::flops`]: each convolution weight counted at its output positions, the
//! BN weight (scale) and bias (shift) one FLOP per output element each, the linear layer once;
//! the buffers, the normalisation by the batch statistics, ReLU, the residual additions and
//! the pool are not counted. About 82.0 MFLOP per 32×32 sample (40.8 M multiply-adds).

use fl_core::rng::Rng;
use fl_core::{DataSpec, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result};
use fl_core::{Structure, TensorSpec, UnitGroup, UnitMember};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::{cohort, flops, init};

/// Parameters of the `resnet20` component: none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResNet20Config {}

/// Width of each stage; the stem has the first stage's width.
const WIDTHS: [i64; 3] = [16, 32, 64];
/// Blocks per stage (ResNet-20: 6n + 2 layers with n = 3).
const BLOCKS_PER_STAGE: usize = 3;

/// How [`Model::init`] fills a tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fill {
    Uniform { bound: f64 },
    Zeros,
    Ones,
}

/// One residual block's shape.
#[derive(Debug, Clone, Copy)]
struct Block {
    stride: i64,
    /// Whether the shortcut is a 1×1 convolution + BN rather than the identity.
    projection: bool,
}

/// ResNet-20; see the module documentation.
#[derive(Debug)]
pub struct ResNet20 {
    structure: Structure,
    /// `[channels, H, W]` of one sample.
    input: [i64; 3],
    blocks: Vec<Block>,
    /// Per tensor, in structure order.
    fills: Vec<Fill>,
    /// Per tensor: the output positions its FLOPs are counted at (0 for buffers).
    positions: Vec<i64>,
}

/// Collects tensors, their fills and FLOP positions, and unit groups while [`ResNet20::new`]
/// walks the layers in `state_dict` order.
#[derive(Default)]
struct Layout {
    tensors: Vec<TensorSpec>,
    fills: Vec<Fill>,
    positions: Vec<i64>,
    groups: Vec<UnitGroup>,
}

impl Layout {
    fn push(&mut self, spec: TensorSpec, fill: Fill, positions: i64) -> usize {
        self.tensors.push(spec);
        self.fills.push(fill);
        self.positions.push(positions);
        self.tensors.len() - 1
    }

    /// A bias-free convolution `[out, in, k, k]`; returns its index.
    fn conv(&mut self, name: &str, out: i64, inp: i64, k: i64, positions: i64) -> usize {
        let bound = 1.0 / ((inp * k * k) as f64).sqrt();
        self.push(TensorSpec::new(format!("{name}.weight"), [out, inp, k, k]), Fill::Uniform { bound }, positions)
    }

    /// BatchNorm over `ch` channels: weight, bias and the two buffers; returns their indices.
    fn bn(&mut self, name: &str, ch: i64, positions: i64) -> [usize; 4] {
        [
            self.push(TensorSpec::new(format!("{name}.weight"), [ch]), Fill::Ones, positions),
            self.push(TensorSpec::new(format!("{name}.bias"), [ch]), Fill::Zeros, positions),
            self.push(TensorSpec::buffer(format!("{name}.running_mean"), [ch]), Fill::Zeros, 0),
            self.push(TensorSpec::buffer(format!("{name}.running_var"), [ch]), Fill::Ones, 0),
        ]
    }
}

/// Output size of a convolution with kernel 3 and padding 1, or kernel 1 and padding 0.
fn strided(size: i64, stride: i64) -> i64 {
    (size - 1) / stride + 1
}

impl ResNet20 {
    /// ResNet-20 for `spec.input_shape` = `[channels, H, W]` and `spec.classes` logits.
    pub fn new(spec: &DataSpec) -> Result<ResNet20> {
        let unsupported =
            |expected| ModelError::InputShape { model: "resnet20", expected, found: spec.input_shape.clone() };
        let &[c, h, w] = spec.input_shape.as_slice() else {
            return Err(unsupported("[channels, H, W]").into());
        };
        if c < 1 || h < 1 || w < 1 {
            return Err(unsupported("[channels, H, W], each at least 1").into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: "resnet20", classes: spec.classes }.into());
        }
        let input = [c, h, w];
        let mut l = Layout::default();
        let (mut h, mut w) = (h, w);
        l.conv("conv1", WIDTHS[0], c, 3, h * w);
        l.bn("bn1", WIDTHS[0], h * w);
        let mut blocks = Vec::new();
        let mut inp = WIDTHS[0];
        for (stage, &width) in WIDTHS.iter().enumerate() {
            for i in 0..BLOCKS_PER_STAGE {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                let projection = stride != 1 || inp != width;
                (h, w) = (strided(h, stride), strided(w, stride));
                let name = format!("layer{}.{i}", stage + 1);
                let conv1 = l.conv(&format!("{name}.conv1"), width, inp, 3, h * w);
                let bn1 = l.bn(&format!("{name}.bn1"), width, h * w);
                let conv2 = l.conv(&format!("{name}.conv2"), width, width, 3, h * w);
                l.bn(&format!("{name}.bn2"), width, h * w);
                if projection {
                    l.conv(&format!("{name}.shortcut.0"), width, inp, 1, h * w);
                    l.bn(&format!("{name}.shortcut.1"), width, h * w);
                }
                let m = |tensor, dim| UnitMember { tensor, dim, block: 1 };
                let mut members = vec![m(conv1, 0)];
                members.extend(bn1.map(|t| m(t, 0)));
                members.push(m(conv2, 1));
                l.groups.push(UnitGroup { name: format!("{name}.conv1"), units: width, members });
                blocks.push(Block { stride, projection });
                inp = width;
            }
        }
        let bound = 1.0 / (inp as f64).sqrt();
        l.push(TensorSpec::new("linear.weight", [spec.classes, inp]), Fill::Uniform { bound }, 1);
        l.push(TensorSpec::new("linear.bias", [spec.classes]), Fill::Uniform { bound }, 1);
        Ok(ResNet20 {
            structure: Structure { tensors: l.tensors, groups: l.groups },
            input,
            blocks,
            fills: l.fills,
            positions: l.positions,
        })
    }
}

/// Walks the cohort's tensors in structure order during `forward`.
struct Cursor<'a>(std::slice::Iter<'a, Tensor>);

impl<'a> Cursor<'a> {
    fn next(&mut self) -> &'a Tensor {
        self.0.next().expect("forward checked the tensor count")
    }

    /// A bias-free convolution and its BatchNorm (the next five tensors), in the grouped layout.
    fn conv_bn(&mut self, x: &Tensor, stride: i64, padding: i64, mode: &Mode) -> Tensor {
        let y = cohort::conv2d_without_bias(x, self.next(), stride, padding);
        let [weight, bias, mean, var] = [self.next(), self.next(), self.next(), self.next()];
        cohort::batch_norm(&y, weight, bias, mean, var, mode)
    }

    /// A residual block (10 or 15 tensors).
    fn block(&mut self, x: &Tensor, block: Block, mode: &Mode) -> Tensor {
        let y = self.conv_bn(x, block.stride, 1, mode).relu();
        let y = self.conv_bn(&y, 1, 1, mode);
        let shortcut = if block.projection { self.conv_bn(x, block.stride, 0, mode) } else { x.shallow_clone() };
        (y + shortcut).relu()
    }
}

impl Model for ResNet20 {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        let tensors = self
            .structure
            .tensors
            .iter()
            .zip(&self.fills)
            .map(|(t, fill)| match *fill {
                Fill::Uniform { bound } => init::uniform(rng, &t.shape, bound),
                Fill::Zeros => Tensor::zeros(t.shape.as_slice(), (Kind::Float, Device::Cpu)),
                Fill::Ones => Tensor::ones(t.shape.as_slice(), (Kind::Float, Device::Cpu)),
            })
            .collect();
        ParamSet::new(self.structure.names(), tensors).expect("one tensor per structure entry")
    }

    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let want = self.structure.tensors.len() - 2;
        assert_eq!(
            body.len(),
            want,
            "resnet20 features: expected {want} tensors before the classifier, got {}",
            body.len()
        );
        let clients = body[0].size()[0];
        let [c, h, w] = self.input;
        let mode = &*mode;
        let mut p = Cursor(body.iter());
        // Every convolution, BatchNorm and addition runs in the grouped layout; only the pooled
        // features leave it.
        let mut x = p.conv_bn(&cohort::to_grouped(&x.reshape([clients, -1, c, h, w])), 1, 1, mode).relu();
        for &block in &self.blocks {
            x = p.block(&x, block, mode);
        }
        cohort::global_avg_pool(&x, clients)
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        let want = self.positions.len();
        assert_eq!(shapes.len(), want, "resnet20 flops: expected {want} shapes, got {}", shapes.len());
        shapes.iter().zip(&self.positions).map(|(s, &positions)| flops::of_tensor(s, positions)).collect()
    }
}

impl ModelFromConfig for ResNet20 {
    type Config = ResNet20Config;

    fn from_config(_config: ResNet20Config, spec: &DataSpec) -> Result<Self> {
        ResNet20::new(spec)
    }
}

fl_core::register!(Model "resnet20" => ResNet20,
    summary: "ResNet-20 for CIFAR (3 stages x 3 BasicBlocks, widths 16-32-64, BatchNorm, projection shortcuts), global average pool, fc 64-classes",
    paper: "He et al., Deep Residual Learning for Image Recognition, CVPR 2016 (as in Forootani and Iervolino's asyncnc code)");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_default_init, input, labels, noise};
    use fl_core::forward_one;
    use rand::SeedableRng;

    fn spec(shape: &[i64]) -> DataSpec {
        DataSpec { input_shape: shape.to_vec(), classes: 10, vocab_size: None }
    }

    fn cifar() -> ResNet20 {
        ResNet20::new(&spec(&[3, 32, 32])).unwrap()
    }

    /// ResNet-20 written out on single-model libtorch ops, reading tensors by name (buffers
    /// move in place in training mode, as in PyTorch).
    fn plain(p: &ParamSet, x: &Tensor, train: bool) -> Tensor {
        let t = |name: String| p.get(&name).unwrap_or_else(|| panic!("no tensor `{name}`"));
        let conv_bn = |x: &Tensor, conv: &str, bn: &str, stride: i64, padding: i64| {
            let y =
                x.conv2d(t(format!("{conv}.weight")), None::<Tensor>, [stride, stride], [padding, padding], [1, 1], 1);
            let [w, b, m, v] = ["weight", "bias", "running_mean", "running_var"].map(|s| t(format!("{bn}.{s}")));
            y.batch_norm(Some(w), Some(b), Some(m), Some(v), train, 0.1, 1e-5, false)
        };
        let mut x = conv_bn(x, "conv1", "bn1", 1, 1).relu();
        for (stage, stride) in [(1, 1), (2, 2), (3, 2)] {
            for i in 0..3 {
                let s = if i == 0 { stride } else { 1 };
                let n = format!("layer{stage}.{i}");
                let y = conv_bn(&x, &format!("{n}.conv1"), &format!("{n}.bn1"), s, 1).relu();
                let y = conv_bn(&y, &format!("{n}.conv2"), &format!("{n}.bn2"), 1, 1);
                let shortcut = if stage > 1 && i == 0 {
                    conv_bn(&x, &format!("{n}.shortcut.0"), &format!("{n}.shortcut.1"), s, 0)
                } else {
                    x.shallow_clone()
                };
                x = (y + shortcut).relu();
            }
        }
        let pooled = x.mean_dim([2i64, 3].as_slice(), false, None::<Kind>);
        pooled.matmul(&t("linear.weight".into()).tr()) + t("linear.bias".into())
    }

    /// Whether `name` belongs to a BatchNorm (`bn1`, `layer1.0.bn2`, `layer2.0.shortcut.1`).
    fn is_bn(name: &str) -> bool {
        name.starts_with("bn") || name.contains(".bn") || name.contains("shortcut.1")
    }

    /// Initial parameters with every BatchNorm tensor moved off its 0 or 1, so a buffer or BN
    /// tensor read in the wrong place shows.
    fn perturbed(m: &ResNet20, seed: u64) -> ParamSet {
        let p = m.init(&mut Rng::seed_from_u64(seed));
        let tensors = p
            .iter()
            .enumerate()
            .map(|(i, (name, t))| {
                if !is_bn(name) {
                    return t.shallow_clone();
                }
                let moved = t + input(&t.size(), seed * 1000 + i as u64) * 0.3;
                if name.ends_with("running_var") { moved.abs() + 0.05 } else { moved }
            })
            .collect();
        ParamSet::new(p.names().to_vec(), tensors).unwrap()
    }

    #[test]
    fn structure_names_shapes_buffers_and_parameter_count() {
        let m = cifar();
        let s = m.structure();
        let names = s.names();
        assert_eq!(names.len(), 107);
        assert_eq!(
            names[..12],
            [
                "conv1.weight",
                "bn1.weight",
                "bn1.bias",
                "bn1.running_mean",
                "bn1.running_var",
                "layer1.0.conv1.weight",
                "layer1.0.bn1.weight",
                "layer1.0.bn1.bias",
                "layer1.0.bn1.running_mean",
                "layer1.0.bn1.running_var",
                "layer1.0.conv2.weight",
                "layer1.0.bn2.weight",
            ]
        );
        assert_eq!(names[names.len() - 2..], ["linear.weight", "linear.bias"]);
        assert!(!names.iter().any(|n| n.contains("num_batches_tracked") || n.starts_with("layer1.0.shortcut")));
        let shape = |name: &str| s.tensors[s.tensor_index(name).unwrap()].shape.clone();
        assert_eq!(shape("layer2.0.conv1.weight"), [32, 16, 3, 3]);
        assert_eq!(shape("layer2.0.shortcut.0.weight"), [32, 16, 1, 1]);
        assert_eq!(shape("layer3.0.shortcut.1.running_var"), [64]);
        assert_eq!(shape("layer3.2.conv2.weight"), [64, 64, 3, 3]);
        assert_eq!(shape("linear.weight"), [10, 64]);
        assert!(s.tensor_index("layer2.1.shortcut.0.weight").is_none());
        // Two buffers per BatchNorm: stem, 2 per block, 2 shortcuts = 21 BatchNorms.
        assert_eq!(s.tensors.iter().filter(|t| !t.trainable).count(), 42);
        assert!(s.tensors.iter().all(|t| t.trainable != t.name.contains("running")));
        assert_eq!(s.num_params(), 272_474);
        // The block interiors are the unit groups.
        assert_eq!(s.groups.len(), 9);
        assert_eq!(s.groups[3].name, "layer2.0.conv1");
        assert_eq!(s.groups[3].units, 32);
        assert_eq!(s.groups[3].members.len(), 6);
    }

    #[test]
    fn init_is_pytorchs_default() {
        let m = cifar();
        let p = m.init(&mut Rng::seed_from_u64(1));
        assert_eq!(p.shapes(), m.structure().shapes());
        let t = |name: &str| p.get(name).unwrap();
        assert_default_init(t("conv1.weight"), 27);
        assert_default_init(t("layer1.1.conv2.weight"), 144);
        assert_default_init(t("layer3.0.conv1.weight"), 288);
        assert_default_init(t("layer3.0.shortcut.0.weight"), 32);
        assert_default_init(t("linear.weight"), 64);
        assert_default_init(t("linear.bias"), 64);
        let bn: Vec<&str> = p.names().iter().map(String::as_str).filter(|n| is_bn(n)).collect();
        assert_eq!(bn.len(), 21 * 4);
        for name in bn {
            let want = if name.ends_with("weight") || name.ends_with("running_var") { 1.0 } else { 0.0 };
            assert!(t(name).eq(want).all().int64_value(&[]) == 1, "{name} is not {want}");
        }
        assert!(p.equal(&m.init(&mut Rng::seed_from_u64(1))));
    }

    #[test]
    fn forward_equals_the_plain_network_in_eval_and_train_mode() {
        let m = cifar();
        let p = perturbed(&m, 3);
        let x = input(&[3, 3, 32, 32], 2);
        let eval = forward_one(&m, p.tensors(), &x, &mut Mode::Eval);
        assert_eq!(eval.size(), [3, 10]);
        assert!(eval.allclose(&plain(&p, &x, false), 1e-4, 1e-5, false));
        let (ours, theirs) = (p.deep_clone(), p.deep_clone());
        let train = forward_one(&m, ours.tensors(), &x, &mut Mode::train(&mut noise(1)));
        assert!(train.allclose(&plain(&theirs, &x, true), 1e-4, 1e-5, false));
        assert!(!train.allclose(&eval, 1e-3, 1e-3, false), "train mode used the running statistics");
        // Every buffer moved, as PyTorch moved it.
        for ((name, a), (b, start)) in ours.iter().zip(theirs.tensors().iter().zip(p.tensors())) {
            assert!(a.allclose(b, 1e-5, 1e-6, false), "{name}");
            assert_eq!(a.equal(start), !name.contains("running"), "{name}");
        }
    }

    #[test]
    fn forward_gives_logits_for_other_image_sizes() {
        for shape in [[3, 32, 32], [1, 28, 28], [2, 9, 5]] {
            let m = ResNet20::new(&spec(&shape)).unwrap();
            let p = m.init(&mut Rng::seed_from_u64(2));
            let x = input(&[2, shape[0], shape[1], shape[2]], 1);
            let y = forward_one(&m, p.tensors(), &x, &mut Mode::train(&mut noise(1)));
            assert_eq!(y.size(), [2, 10], "input {shape:?}");
            assert!(y.isfinite().all().int64_value(&[]) == 1);
        }
    }

    #[test]
    fn flops_are_the_hand_count() {
        let m = cifar();
        let shapes = m.structure().shapes();
        // Multiply-adds of the convolutions per 32×32 sample: stem 27·16·1024; stage 1 six
        // 144·16·1024; stage 2 144·32·256 + five 288·32·256 + shortcut 16·32·256; stage 3
        // 288·64·64 + five 576·64·64 + shortcut 32·64·64.
        let macs: i64 = 27 * 16 * 1024
            + 6 * 144 * 16 * 1024
            + 144 * 32 * 256
            + 5 * 288 * 32 * 256
            + 16 * 32 * 256
            + 288 * 64 * 64
            + 5 * 576 * 64 * 64
            + 32 * 64 * 64;
        assert_eq!(macs, 40_812_544);
        // BatchNorm scale and shift: 7 BatchNorms per resolution (32², 16², 8²).
        let bn = 2 * 7 * (16 * 1024 + 32 * 256 + 64 * 64);
        let linear = 2 * 640 + 10;
        let total = m.forward_flops(&shapes);
        assert_eq!(total, (2 * macs + bn + linear) as f64);
        assert!((total / 1e6 - 82.0).abs() < 0.1, "{total}");
        let per = m.flops_per_tensor(&shapes);
        let at = |name: &str| per[m.structure().tensor_index(name).unwrap()];
        assert_eq!(at("layer1.0.bn1.running_mean"), 0.0);
        assert_eq!(at("layer2.0.shortcut.0.weight"), (2 * 16 * 32 * 256) as f64);
        assert_eq!(at("layer3.1.bn2.bias"), (64 * 64) as f64);
    }

    #[test]
    fn tiny_imagenet_inputs_give_200_logits_at_the_hand_counted_size_and_cost() {
        // FedASMU's ResNet on Tiny-ImageNet: 3×64×64, 200 classes, the same network (the last
        // stage is 16×16, averaged by the global pool).
        let m = ResNet20::new(&DataSpec { input_shape: vec![3, 64, 64], classes: 200, vocab_size: None }).unwrap();
        // The 10-class count less its head (64·10 + 10 = 650) plus 64·200 + 200 = 13,000.
        assert_eq!(m.structure().num_params(), 272_474 - 650 + 13_000);
        assert_eq!(m.structure().num_params(), 284_824);
        // Every convolution and BatchNorm sees 4 times the positions of a 32×32 sample (the
        // hand count of `flops_are_the_hand_count`); the head 2·64·200 + 200.
        let (macs_32, bn_32) = (40_812_544i64, 2 * 7 * (16 * 1024 + 32 * 256 + 64 * 64));
        let want = 4 * (2 * macs_32 + bn_32) + 2 * 64 * 200 + 200;
        assert_eq!(m.forward_flops(&m.structure().shapes()), want as f64);
        let p = perturbed(&m, 7);
        let x = input(&[2, 3, 64, 64], 6);
        let y = forward_one(&m, p.tensors(), &x, &mut Mode::Eval);
        assert_eq!(y.size(), [2, 200]);
        assert!(y.allclose(&plain(&p, &x, false), 1e-4, 1e-5, false));
        assert!(
            forward_one(&m, p.tensors(), &x, &mut Mode::train(&mut noise(1))).isfinite().all().int64_value(&[]) == 1
        );
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        let m = ResNet20::new(&spec(&[3, 16, 16])).unwrap();
        let p = perturbed(&m, 5);
        let kept: Vec<Option<Vec<i64>>> =
            m.structure().groups.iter().map(|g| Some((0..g.units).filter(|u| u % 3 != 1).collect())).collect();
        let mask = m.structure().mask_from_units(&kept).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.get("layer2.1.conv1.weight").unwrap().size(), [21, 32, 3, 3]);
        assert_eq!(sub.get("layer2.1.bn1.running_var").unwrap().size(), [21]);
        assert_eq!(sub.get("layer2.1.conv2.weight").unwrap().size(), [32, 21, 3, 3]);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = input(&[4, 3, 16, 16], 4);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::train(&mut noise(1)));
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::train(&mut noise(1)));
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
        // A width-prefix sub-model keeps the residual stream whole.
        let half = m.structure().width_prefix_mask(0.5).unwrap();
        let shapes = half.sub_shapes(&m.structure().shapes());
        assert!(half.kept_params(&m.structure().shapes()) < 272_474 * 3 / 4);
        let y = forward_one(&m, half.extract(&p).tensors(), &x, &mut Mode::Eval);
        assert_eq!(y.size(), [4, 10]);
        assert!(m.forward_flops(&shapes) < m.forward_flops(&m.structure().shapes()));
    }

    #[test]
    fn gradients_reach_every_parameter_and_no_buffer() {
        let m = ResNet20::new(&spec(&[3, 8, 8])).unwrap();
        let p = perturbed(&m, 6);
        let trainable = m.structure().trainable();
        let params: Vec<Tensor> =
            p.tensors().iter().zip(&trainable).map(|(t, &tr)| t.copy().set_requires_grad(tr)).collect();
        let x = input(&[6, 3, 8, 8], 5);
        let loss =
            forward_one(&m, &params, &x, &mut Mode::train(&mut noise(1))).cross_entropy_for_logits(&labels(6, 10));
        loss.backward();
        for ((t, &tr), name) in params.iter().zip(&trainable).zip(p.names()) {
            let g = t.grad();
            if tr {
                assert!(g.defined() && g.abs().sum(Kind::Double).double_value(&[]) > 0.0, "{name}: no gradient");
            } else {
                assert!(!g.defined(), "{name}: a buffer got a gradient");
            }
        }
    }

    #[test]
    fn unsupported_shapes_are_errors_naming_the_model_and_shape() {
        for shape in [vec![3072], vec![3, 32], vec![0, 32, 32], vec![3, 32, 0]] {
            let err = ResNet20::new(&spec(&shape)).unwrap_err().to_string();
            assert!(err.contains("resnet20") && err.contains(&format!("{shape:?}")), "{err}");
        }
    }
}
