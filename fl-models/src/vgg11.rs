//! `vgg11`: VGG-11 with BatchNorm for 32×32 images, as the FedASMU experiments use it.
//!
//! Simonyan and Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
//! Recognition", ICLR 2015 (configuration A, 11 weight layers); used on CIFAR-10/100 by J. Jia,
//! J. Liu et al., "Efficient Federated Learning with Timely Update Dissemination" (FedASMU,
//! arXiv:2507.06031), which does not state its CIFAR variant. This is the spec's recommended
//! one ([rec], §4.1), the common CIFAR VGG (kuangliu's `pytorch-cifar`): eight 3×3 convolutions
//! (padding 1) of widths `[64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M]`, each followed
//! by BatchNorm and ReLU, `M` a 2×2 max-pool; then a single linear layer 512 → classes.
//!
//! Deviations and choices: the convolutions have **no bias** (BatchNorm's shift makes it
//! redundant: in training mode the batch mean removes it exactly, so it would get a zero
//! gradient); `pytorch-cifar` keeps it, for 2,752 more parameters. The five pools take 32×32 to
//! 1×1; the head averages the last map over H×W (the identity at 1×1, like `pytorch-cifar`'s
//! `AvgPool2d(1, 1)`), so inputs of any size ≥ 32×32 work. Parameters: 9,228,362 for 10 classes,
//! 9,274,532 for 100. Logits out; the softmax is left to the loss.
//!
//! **BatchNorm in cohort form** is [`cohort::batch_norm`], as in `resnet20`: each BatchNorm
//! has trainable `weight` and `bias` and two buffers ([`TensorSpec::buffer`]) `running_mean`
//! and `running_var`, all stacked `[C, ch]` like every other tensor, so each client keeps its
//! own running statistics. In training mode every client normalises with the mean and variance
//! of its own real samples (padding excluded by [`Mode::valid`]) and its buffers move in place
//! (momentum 0.1, ε = 1e-5, PyTorch's defaults); in evaluation mode its buffers normalise.
//! Buffers get no gradient; what an aggregator does with them is the algorithm's business.
//!
//! Tensor names: `features.{i}.conv`, `features.{i}.bn` for the i-th convolution (0-based) and
//! `classifier`. Initialisation: PyTorch's default (convolution and linear weights and the
//! linear bias U(±1/√fan_in), BN weight 1 and bias 0, running mean 0 and variance 1).
//!
//! Unit groups: the output channels of each convolution (a row of its weight, an entry of each
//! of its BatchNorm's four tensors, an input channel of the next convolution or a column of
//! `classifier.weight`), eight groups.
//!
//! FLOPs follow [`crate::flops`]: each convolution counted at its output positions, the BN
//! scale and shift one FLOP per output element each, the classifier once; the buffers, the
//! normalisation by the statistics, ReLU and pooling are not counted. About 306 MFLOP per
//! 32×32 sample (152.8 M multiply-adds, the spec's "about 153 MMAC").

#[cfg(doc)]
use fl_core::TensorSpec;
use fl_core::rng::Rng;
use fl_core::{DataSpec, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result, Structure};
use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::cohort;
use crate::layout::{Cursor, Layout};
use crate::pool::max_pool2;

/// The model's registered name, which its errors begin with.
const NAME: &str = "vgg11";

/// Parameters of the `vgg11` component: none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Vgg11Config {}

/// VGG configuration A: a convolution's width, or `None` for a 2×2 max-pool.
const CFG: [Option<i64>; 13] = [
    Some(64),
    None,
    Some(128),
    None,
    Some(256),
    Some(256),
    None,
    Some(512),
    Some(512),
    None,
    Some(512),
    Some(512),
    None,
];

/// VGG-11 with BatchNorm; see the module documentation.
#[derive(Debug)]
pub struct Vgg11 {
    layout: Layout,
    structure: Structure,
    /// `[channels, H, W]` of one sample.
    input: [i64; 3],
}

impl Vgg11 {
    /// VGG-11 for `spec.input_shape` = `[channels, H, W]` (H, W ≥ 32) and `spec.classes` logits.
    pub fn new(spec: &DataSpec) -> Result<Vgg11> {
        let unsupported = |expected| ModelError::InputShape { model: NAME, expected, found: spec.input_shape.clone() };
        if spec.vocab_size.is_some() {
            return Err(ModelError::NeedsRealValues { model: NAME }.into());
        }
        let &[c, h, w] = spec.input_shape.as_slice() else {
            return Err(unsupported("[channels, H, W]").into());
        };
        if c < 1 || h < 32 || w < 32 {
            return Err(unsupported("[channels, H, W] with channels >= 1 and H, W >= 32 (five 2x2 pools)").into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: NAME, classes: spec.classes }.into());
        }
        let input = [c, h, w];
        let mut l = Layout::default();
        let (mut h, mut w, mut inp) = (h, w, c);
        let mut convs = Vec::new();
        for entry in CFG {
            let Some(out) = entry else {
                (h, w) = (h / 2, w / 2);
                continue;
            };
            let name = format!("features.{}", convs.len());
            let conv = l.conv_without_bias(&format!("{name}.conv"), out, inp, 3, h * w);
            let bn = l.batch_norm(&format!("{name}.bn"), out, h * w);
            convs.push((name, out, conv, bn));
            inp = out;
        }
        let classifier = l.linear("classifier", spec.classes, inp);
        for (i, (name, out, conv, bn)) in convs.iter().enumerate() {
            let next = convs.get(i + 1).map_or(classifier, |n| n.2);
            let mut members = vec![(*conv, 0, 1)];
            members.extend(bn.map(|t| (t, 0, 1)));
            members.push((next, 1, 1));
            l.group(name, *out, &members);
        }
        Ok(Vgg11 { structure: l.structure(), layout: l, input })
    }
}

impl Model for Vgg11 {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        self.layout.init(rng)
    }

    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let mut p = Cursor::new(NAME, body, self.structure.tensors.len() - 2);
        let clients = body[0].size()[0];
        let [c, h, w] = self.input;
        let mode = &*mode;
        let mut x = cohort::to_grouped(&x.reshape([clients, -1, c, h, w]));
        for entry in CFG {
            x = match entry {
                None => max_pool2(&x),
                Some(_) => {
                    let y = cohort::conv2d_without_bias(&x, p.next(), 1, 1);
                    let [weight, bias, mean, var] = [p.next(), p.next(), p.next(), p.next()];
                    cohort::batch_norm(&y, weight, bias, mean, var, mode).relu()
                }
            };
        }
        cohort::global_avg_pool(&x, clients)
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        self.layout.flops(NAME, shapes)
    }
}

impl ModelFromConfig for Vgg11 {
    type Config = Vgg11Config;

    fn from_config(_config: Vgg11Config, spec: &DataSpec) -> Result<Self> {
        Vgg11::new(spec)
    }
}

fl_core::register!(Model "vgg11" => Vgg11,
    summary: "VGG-11 with BatchNorm for 32x32 images (8 bias-free 3x3 convs 64-128-256-256-512-512-512-512, 5 max-pools), fc 512-classes",
    paper: "Simonyan and Zisserman, Very Deep Convolutional Networks for Large-Scale Image Recognition, ICLR 2015 \
                (CIFAR variant of the FedASMU spec, arXiv:2507.06031)");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_default_init, input, labels, noise};
    use fl_core::forward_one;
    use rand::SeedableRng;
    use tch::Kind;

    /// Tensors per convolution: its weight and its BatchNorm's weight, bias, mean and variance.
    const PER_CONV: usize = 5;

    fn spec(shape: &[i64], classes: i64) -> DataSpec {
        DataSpec { input_shape: shape.to_vec(), classes, vocab_size: None }
    }

    fn cifar(classes: i64) -> Vgg11 {
        Vgg11::new(&spec(&[3, 32, 32], classes)).unwrap()
    }

    /// VGG-11 written out on single-model libtorch ops, reading tensors by name (buffers move
    /// in place in training mode, as in PyTorch).
    fn plain(p: &ParamSet, x: &Tensor, train: bool) -> Tensor {
        let t = |name: String| p.get(&name).unwrap_or_else(|| panic!("no tensor `{name}`"));
        let mut x = x.shallow_clone();
        let mut i = 0;
        for entry in CFG {
            if entry.is_none() {
                x = x.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false);
                continue;
            }
            let y = x.conv2d(t(format!("features.{i}.conv.weight")), None::<Tensor>, [1, 1], [1, 1], [1, 1], 1);
            let [w, b, m, v] =
                ["weight", "bias", "running_mean", "running_var"].map(|s| t(format!("features.{i}.bn.{s}")));
            x = y.batch_norm(Some(w), Some(b), Some(m), Some(v), train, 0.1, 1e-5, false).relu();
            i += 1;
        }
        let pooled = x.mean_dim([2i64, 3].as_slice(), false, None::<Kind>);
        pooled.matmul(&t("classifier.weight".into()).tr()) + t("classifier.bias".into())
    }

    /// Initial parameters with every BatchNorm tensor moved off its 0 or 1.
    fn perturbed(m: &Vgg11, seed: u64) -> ParamSet {
        let p = m.init(&mut Rng::seed_from_u64(seed));
        let tensors = p
            .iter()
            .enumerate()
            .map(|(i, (name, t))| {
                if !name.contains(".bn.") {
                    return t.shallow_clone();
                }
                let moved = t + input(&t.size(), seed * 1000 + i as u64) * 0.3;
                if name.ends_with("running_var") { moved.abs() + 0.05 } else { moved }
            })
            .collect();
        ParamSet::new(p.names().to_vec(), tensors).unwrap()
    }

    #[test]
    fn structure_buffers_and_parameter_counts_match_the_hand_count() {
        let m = cifar(10);
        let s = m.structure();
        assert_eq!(s.tensors.len(), 8 * PER_CONV + 2);
        assert_eq!(
            s.names()[..6],
            [
                "features.0.conv.weight",
                "features.0.bn.weight",
                "features.0.bn.bias",
                "features.0.bn.running_mean",
                "features.0.bn.running_var",
                "features.1.conv.weight"
            ]
        );
        let convs: Vec<Vec<i64>> = s.shapes().into_iter().step_by(PER_CONV).take(8).collect();
        assert_eq!(
            convs,
            [[64, 3], [128, 64], [256, 128], [256, 256], [512, 256], [512, 512], [512, 512], [512, 512]]
                .map(|[o, i]| vec![o, i, 3, 3])
        );
        assert_eq!(s.shapes()[40], [10, 512]);
        assert_eq!(s.tensors.iter().filter(|t| !t.trainable).count(), 16);
        // Convolution weights: 3·64·9 = 1,728; 64·128·9 = 73,728; 128·256·9 = 294,912;
        // 256·256·9 = 589,824; 256·512·9 = 1,179,648; three 512·512·9 = 2,359,296: 9,217,728.
        // BatchNorm weight and bias: 2·(64 + 128 + 256 + 256 + 4·512) = 5,504. Classifier
        // 512·10 + 10 = 5,130. Total 9,228,362 (the spec's "about 9.2 M"; pytorch-cifar's VGG11,
        // with conv biases, has 2,752 more: 9,231,114).
        assert_eq!(s.num_params(), 9_228_362);
        // Classifier 512·100 + 100 = 51,300 instead: 9,274,532.
        assert_eq!(cifar(100).structure().num_params(), 9_274_532);
        assert_eq!(s.groups.len(), 8);
        assert_eq!(s.groups[7].members.len(), 6);
        assert_eq!(s.groups[7].members[5], fl_core::UnitMember { tensor: 40, dim: 1, block: 1 });
    }

    #[test]
    fn flops_per_sample_match_the_hand_count() {
        let m = cifar(10);
        // Multiply-adds at 32², 16², 8², 4², 2² output positions.
        let macs: i64 = 27 * 64 * 1024
            + 576 * 128 * 256
            + (1152 * 256 + 2304 * 256) * 64
            + (2304 * 512 + 4608 * 512) * 16
            + (4608 * 512 + 4608 * 512) * 4
            + 512 * 10;
        assert_eq!(macs, 152_769_536);
        // BN scale and shift per output element, classifier bias.
        let bn = 2 * (64 * 1024 + 128 * 256 + 2 * 256 * 64 + 2 * 512 * 16 + 2 * 512 * 4);
        assert_eq!(m.forward_flops(&m.structure().shapes()), (2 * macs + bn + 10) as f64);
        let per = m.flops_per_tensor(&m.structure().shapes());
        assert_eq!(per[3], 0.0, "running mean");
        assert_eq!(per[1], (64 * 1024) as f64);
    }

    #[test]
    fn init_is_pytorchs_default() {
        let m = cifar(10);
        let p = m.init(&mut Rng::seed_from_u64(1));
        let t = |name: &str| p.get(name).unwrap();
        assert_default_init(t("features.0.conv.weight"), 27);
        assert_default_init(t("features.5.conv.weight"), 4608);
        assert_default_init(t("classifier.weight"), 512);
        assert_default_init(t("classifier.bias"), 512);
        for (name, x) in p.iter().filter(|(n, _)| n.contains(".bn.")) {
            let want = if name.ends_with("weight") || name.ends_with("running_var") { 1.0 } else { 0.0 };
            assert!(x.eq(want).all().int64_value(&[]) == 1, "{name} is not {want}");
        }
    }

    #[test]
    fn forward_equals_the_plain_network_in_eval_and_train_mode() {
        let m = cifar(10);
        let p = perturbed(&m, 3);
        let x = input(&[3, 3, 32, 32], 2);
        let eval = forward_one(&m, p.tensors(), &x, &mut Mode::Eval);
        assert_eq!(eval.size(), [3, 10]);
        assert!(eval.allclose(&plain(&p, &x, false), 1e-4, 1e-5, false));
        let (ours, theirs) = (p.deep_clone(), p.deep_clone());
        let train = forward_one(&m, ours.tensors(), &x, &mut Mode::train(&mut noise(1)));
        assert!(train.allclose(&plain(&theirs, &x, true), 1e-4, 1e-5, false));
        for ((name, a), (b, start)) in ours.iter().zip(theirs.tensors().iter().zip(p.tensors())) {
            assert!(a.allclose(b, 1e-5, 1e-6, false), "{name}");
            assert_eq!(a.equal(start), !name.contains("running"), "{name}");
        }
    }

    #[test]
    fn gradients_reach_every_parameter_and_no_buffer() {
        let m = cifar(10);
        let p = perturbed(&m, 6);
        let trainable = m.structure().trainable();
        let params: Vec<Tensor> =
            p.tensors().iter().zip(&trainable).map(|(t, &tr)| t.copy().set_requires_grad(tr)).collect();
        let x = input(&[4, 3, 32, 32], 5);
        let loss =
            forward_one(&m, &params, &x, &mut Mode::train(&mut noise(1))).cross_entropy_for_logits(&labels(4, 10));
        loss.backward();
        for ((t, &tr), name) in params.iter().zip(&trainable).zip(p.names()) {
            let g = t.grad();
            if tr {
                assert!(g.defined() && g.isfinite().all().int64_value(&[]) == 1, "{name}: no finite gradient");
                assert!(g.abs().sum(Kind::Double).double_value(&[]) > 0.0, "{name}: zero gradient");
            } else {
                assert!(!g.defined(), "{name}: a buffer got a gradient");
            }
        }
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        let m = cifar(10);
        let p = perturbed(&m, 5);
        let kept: Vec<Option<Vec<i64>>> =
            m.structure().groups.iter().map(|g| Some((0..g.units).filter(|u| u % 3 != 1).collect())).collect();
        let mask = m.structure().mask_from_units(&kept).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.get("features.1.conv.weight").unwrap().size(), [85, 43, 3, 3]);
        assert_eq!(sub.get("classifier.weight").unwrap().size(), [10, 341]);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = input(&[2, 3, 32, 32], 4);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
    }

    #[test]
    fn forward_gives_logits_for_64x64_inputs_and_rejects_small_ones() {
        let m = Vgg11::new(&spec(&[3, 64, 64], 200)).unwrap();
        let p = m.init(&mut Rng::seed_from_u64(2));
        let y = forward_one(&m, p.tensors(), &input(&[2, 3, 64, 64], 1), &mut Mode::Eval);
        assert_eq!(y.size(), [2, 200]);
        for shape in [vec![3, 28, 28], vec![3072], vec![0, 32, 32]] {
            let err = Vgg11::new(&spec(&shape, 10)).unwrap_err().to_string();
            assert!(err.contains("vgg11") && err.contains(&format!("{shape:?}")), "{err}");
        }
    }
}
