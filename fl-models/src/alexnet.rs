//! `alexnet`: AlexNet adapted to 32×32 images, as the FedASMU experiments use it.
//!
//! Krizhevsky, Sutskever and Hinton, "ImageNet Classification with Deep Convolutional Neural
//! Networks", NeurIPS 2012; used on CIFAR-10/100 by J. Jia, J. Liu et al., "Efficient Federated
//! Learning with Timely Update Dissemination" (FedASMU, arXiv:2507.06031), which does not state
//! its CIFAR adaptation. This is the spec's recommended one ([rec], §4.1), the common CIFAR
//! AlexNet:
//!
//! ```text
//! conv3×3(→64, stride 2, pad 1) – ReLU – maxpool 2 – conv3×3(64→192, pad 1) – ReLU – maxpool 2
//!   – conv3×3(192→384, pad 1) – ReLU – conv3×3(384→256, pad 1) – ReLU – conv3×3(256→256, pad 1)
//!   – ReLU – maxpool 2 – flatten (256·2·2 = 1,024) – dropout – fc 1024→4096 – ReLU – dropout
//!   – fc 4096→4096 – ReLU – fc 4096→classes
//! ```
//!
//! The spec fixes the first convolution's kernel, stride and padding and the widths; the other
//! convolutions are 3×3 with padding 1 (the only choice that gives its 1,024 flattened features
//! and "about 63 MMAC"), the pools are `MaxPool2d(2)`. Dropout (the spec's "[dropout]") is a
//! parameter, `dropout = 0.5` by default as in Krizhevsky et al.; each client's mask comes from
//! its own noise stream ([`Mode::dropout`]). Parameters: 23,272,266 for 3×32×32 inputs and 10
//! classes (23,640,996 for 100). Logits out; the softmax is left to the loss.
//!
//! Other input sizes work where three halvings leave at least 1×1 (H, W ≥ 15); fc1's width
//! follows. Initialisation: PyTorch's default (U(±1/√fan_in) for every weight and bias). Tensor
//! names: `conv1` … `conv5`, `fc1` … `fc3`.
//!
//! Unit groups: the output channels of each convolution (a row of its weight, its bias entry,
//! an input channel of the next convolution, or for conv5 the H'·W' consecutive columns of
//! `fc1.weight` its channel flattens to), and the neurons of fc1 and fc2.
//!
//! FLOPs follow [`crate::flops`], each convolution counted at its output positions; ReLU,
//! pooling and dropout are not counted. About 125.5 MFLOP per 32×32 sample (62.7 M
//! multiply-adds, the spec's "about 63 MMAC").

use fl_core::rng::Rng;
use fl_core::{DataSpec, InvalidKey, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result, Structure};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;
use tch::Tensor;

use crate::cohort;
use crate::layout::{Cursor, Layout, flatten, out_size};
use crate::pool::max_pool2;

/// The model's registered name, which its errors begin with.
const NAME: &str = "alexnet";

/// Parameters of the `alexnet` component.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlexNetConfig {
    /// Dropout probability before fc1 and before fc2, in [0, 1); 0 disables it.
    #[default(0.5)]
    pub dropout: f64,
}

impl AlexNetConfig {
    /// Checks the dropout probability; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(InvalidKey::new("dropout", format!("must be in [0, 1), got {}", self.dropout)));
        }
        Ok(())
    }
}

/// Output channels of the five convolutions.
const CHANNELS: [i64; 5] = [64, 192, 384, 256, 256];
/// Width of the two hidden fully connected layers.
const HIDDEN: i64 = 4096;

/// The CIFAR AlexNet; see the module documentation.
#[derive(Debug)]
pub struct AlexNet {
    cfg: AlexNetConfig,
    layout: Layout,
    structure: Structure,
    /// `[channels, H, W]` of one sample.
    input: [i64; 3],
}

impl AlexNet {
    /// AlexNet for `spec.input_shape` = `[channels, H, W]` (H, W ≥ 15) and `spec.classes` logits.
    pub fn new(cfg: AlexNetConfig, spec: &DataSpec) -> Result<AlexNet> {
        cfg.validate().map_err(|key| ModelError::Config { model: NAME, key })?;
        let unsupported = |expected| ModelError::InputShape { model: NAME, expected, found: spec.input_shape.clone() };
        if spec.vocab_size.is_some() {
            return Err(ModelError::NeedsRealValues { model: NAME }.into());
        }
        let &[c, h, w] = spec.input_shape.as_slice() else {
            return Err(unsupported("[channels, H, W]").into());
        };
        // conv1 (stride 2) and three 2×2 pools: the last map is at least 1×1 from 15×15 on.
        let sizes = |s: i64| {
            let s1 = out_size(s, 3, 2, 1);
            let s2 = s1 / 2;
            let s3 = s2 / 2;
            [s1, s2, s3, s3 / 2]
        };
        let (hs, ws) = (sizes(h), sizes(w));
        if c < 1 || h < 1 || w < 1 || hs[3] < 1 || ws[3] < 1 {
            return Err(unsupported("[channels, H, W] with channels >= 1 and H, W >= 15").into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: NAME, classes: spec.classes }.into());
        }
        let mut l = Layout::default();
        let positions = [hs[0] * ws[0], hs[1] * ws[1], hs[2] * ws[2], hs[2] * ws[2], hs[2] * ws[2]];
        let mut convs = Vec::new();
        let mut inp = c;
        for (i, (&out, &pos)) in CHANNELS.iter().zip(&positions).enumerate() {
            convs.push(l.conv(&format!("conv{}", i + 1), out, inp, 3, pos));
            inp = out;
        }
        let features = hs[3] * ws[3];
        let fc1 = l.linear("fc1", HIDDEN, CHANNELS[4] * features);
        let fc2 = l.linear("fc2", HIDDEN, HIDDEN);
        let fc3 = l.linear("fc3", spec.classes, HIDDEN);
        for i in 0..CHANNELS.len() {
            let next = if i + 1 < CHANNELS.len() { (convs[i + 1], 1, 1) } else { (fc1, 1, features) };
            l.group(&format!("conv{}", i + 1), CHANNELS[i], &[(convs[i], 0, 1), (convs[i] + 1, 0, 1), next]);
        }
        l.group("fc1", HIDDEN, &[(fc1, 0, 1), (fc1 + 1, 0, 1), (fc2, 1, 1)]);
        l.group("fc2", HIDDEN, &[(fc2, 0, 1), (fc2 + 1, 0, 1), (fc3, 1, 1)]);
        Ok(AlexNet { cfg, structure: l.structure(), layout: l, input: [c, h, w] })
    }

    pub fn config(&self) -> &AlexNetConfig {
        &self.cfg
    }
}

impl Model for AlexNet {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        self.layout.init(rng)
    }

    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let mut p = Cursor::new(NAME, body, 14);
        let clients = body[0].size()[0];
        let [c, h, w] = self.input;
        let mut x = cohort::to_grouped(&x.reshape([clients, -1, c, h, w]));
        for i in 0..CHANNELS.len() {
            let (weight, bias) = p.pair();
            x = cohort::conv2d(&x, weight, bias, if i == 0 { 2 } else { 1 }, 1).relu();
            if matches!(i, 0 | 1 | 4) {
                x = max_pool2(&x);
            }
        }
        let p_drop = self.cfg.dropout;
        let x = mode.dropout(&flatten(&x, clients), p_drop);
        let (weight, bias) = p.pair();
        let x = mode.dropout(&cohort::linear(&x, weight, bias).relu(), p_drop);
        let (weight, bias) = p.pair();
        cohort::linear(&x, weight, bias).relu()
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        self.layout.flops(NAME, shapes)
    }
}

impl ModelFromConfig for AlexNet {
    type Config = AlexNetConfig;

    fn validate(config: &AlexNetConfig) -> std::result::Result<(), InvalidKey> {
        config.validate()
    }

    fn from_config(config: AlexNetConfig, spec: &DataSpec) -> Result<Self> {
        AlexNet::new(config, spec)
    }
}

fl_core::register!(Model "alexnet" => AlexNet,
    summary: "AlexNet for 32x32 images (five 3x3 convs 64-192-384-256-256, first stride 2, three max-pools, dropout, fc 1024-4096-4096-classes)",
    paper: "Krizhevsky et al., ImageNet Classification with Deep Convolutional Neural Networks, NeurIPS 2012 \
                (CIFAR adaptation of the FedASMU spec, arXiv:2507.06031)");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_default_init, assert_grads_flow, input, labels, noise};
    use fl_core::forward_one;
    use rand::SeedableRng;

    fn spec(shape: &[i64], classes: i64) -> DataSpec {
        DataSpec { input_shape: shape.to_vec(), classes, vocab_size: None }
    }

    fn cifar(classes: i64) -> AlexNet {
        AlexNet::new(AlexNetConfig::default(), &spec(&[3, 32, 32], classes)).unwrap()
    }

    #[test]
    fn structure_and_parameter_counts_match_the_hand_count() {
        let m = cifar(10);
        let s = m.structure();
        assert_eq!(s.names().len(), 16);
        assert_eq!(
            s.shapes().iter().step_by(2).cloned().collect::<Vec<_>>(),
            vec![
                vec![64, 3, 3, 3],
                vec![192, 64, 3, 3],
                vec![384, 192, 3, 3],
                vec![256, 384, 3, 3],
                vec![256, 256, 3, 3],
                vec![4096, 1024],
                vec![4096, 4096],
                vec![10, 4096]
            ]
        );
        // conv1 64·27 + 64 = 1,792; conv2 192·576 + 192 = 110,784; conv3 384·1,728 + 384 =
        // 663,936; conv4 256·3,456 + 256 = 884,992; conv5 256·2,304 + 256 = 590,080;
        // fc1 4,096·1,024 + 4,096 = 4,198,400; fc2 4,096·4,096 + 4,096 = 16,781,312;
        // fc3 10·4,096 + 10 = 40,970: 23,272,266 (the spec's "about 23 M").
        assert_eq!(s.num_params(), 23_272_266);
        // fc3 100·4,096 + 100 = 409,700 instead: 23,640,996.
        assert_eq!(cifar(100).structure().num_params(), 23_640_996);
        let groups: Vec<(&str, i64)> = s.groups.iter().map(|g| (g.name.as_str(), g.units)).collect();
        assert_eq!(
            groups,
            [
                ("conv1", 64),
                ("conv2", 192),
                ("conv3", 384),
                ("conv4", 256),
                ("conv5", 256),
                ("fc1", 4096),
                ("fc2", 4096)
            ]
        );
        assert_eq!(s.groups[4].members[2], fl_core::UnitMember { tensor: 10, dim: 1, block: 4 });
    }

    #[test]
    fn flops_per_sample_match_the_hand_count() {
        let m = cifar(10);
        // Multiply-adds: conv1 27·64 at 16·16; conv2 576·192 at 8·8; conv3 1,728·384, conv4
        // 3,456·256, conv5 2,304·256 at 4·4; fc 1,024·4,096 + 4,096·4,096 + 4,096·10.
        let macs: i64 = 27 * 64 * 256
            + 576 * 192 * 64
            + (1728 * 384 + 3456 * 256 + 2304 * 256) * 16
            + 1024 * 4096
            + 4096 * 4096
            + 4096 * 10;
        assert_eq!(macs, 62_742_528);
        let biases: i64 = 64 * 256 + 192 * 64 + (384 + 256 + 256) * 16 + 4096 + 4096 + 10;
        assert_eq!(m.forward_flops(&m.structure().shapes()), (2 * macs + biases) as f64);
        let per = m.flops_per_tensor(&m.structure().shapes());
        assert_eq!(per[2], (2 * 192 * 64 * 9 * 64) as f64);
        assert_eq!(per[3], (192 * 64) as f64);
    }

    #[test]
    fn init_is_pytorch_default() {
        let m = cifar(10);
        let p = m.init(&mut Rng::seed_from_u64(1));
        assert_eq!(p.shapes(), m.structure().shapes());
        let fans = [27, 576, 1728, 3456, 2304, 1024, 4096, 4096];
        for (i, fan) in fans.into_iter().enumerate() {
            assert_default_init(&p.tensors()[2 * i], fan);
            assert_default_init(&p.tensors()[2 * i + 1], fan);
        }
    }

    #[test]
    fn forward_equals_the_layers_written_out_in_eval_mode() {
        let m = AlexNet::new(AlexNetConfig::default(), &spec(&[3, 32, 32], 10)).unwrap();
        let p = m.init(&mut Rng::seed_from_u64(3));
        let t = p.tensors();
        let x = input(&[2, 3, 32, 32], 2);
        let conv = |x: &Tensor, i: usize, stride: i64| {
            x.conv2d(&t[2 * i], Some(&t[2 * i + 1]), [stride, stride], [1, 1], [1, 1], 1).relu()
        };
        let pool = |x: Tensor| x.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false);
        let h = conv(&pool(conv(&pool(conv(&x, 0, 2)), 1, 1)), 2, 1);
        let h = pool(conv(&conv(&h, 3, 1), 4, 1));
        assert_eq!(h.size(), [2, 256, 2, 2]);
        let h = (h.reshape([2, 1024]).matmul(&t[10].tr()) + &t[11]).relu();
        let h = (h.matmul(&t[12].tr()) + &t[13]).relu();
        let want = h.matmul(&t[14].tr()) + &t[15];
        let got = forward_one(&m, t, &x, &mut Mode::Eval);
        assert!(got.allclose(&want, 1e-4, 1e-6, false));
        // Training mode drops units: other logits; with dropout 0 the same.
        assert!(!forward_one(&m, t, &x, &mut Mode::train(&mut noise(1))).allclose(&want, 1e-4, 1e-6, false));
        let plain = AlexNet::new(AlexNetConfig { dropout: 0.0 }, &spec(&[3, 32, 32], 10)).unwrap();
        assert!(forward_one(&plain, t, &x, &mut Mode::train(&mut noise(1))).allclose(&want, 1e-4, 1e-6, false));
    }

    #[test]
    fn gradients_reach_every_tensor() {
        let m = cifar(10);
        let p = m.init(&mut Rng::seed_from_u64(6));
        let x = input(&[8, 3, 32, 32], 5);
        assert_grads_flow(&m, p.tensors(), &x, &labels(8, 10));
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        let m = AlexNet::new(AlexNetConfig::default(), &spec(&[3, 16, 16], 10)).unwrap();
        assert_eq!(m.structure().shapes()[10], [4096, 256]);
        let p = m.init(&mut Rng::seed_from_u64(5));
        let kept: Vec<Option<Vec<i64>>> =
            m.structure().groups.iter().map(|g| Some((0..g.units).filter(|u| u % 4 != 1).collect())).collect();
        let mask = m.structure().mask_from_units(&kept).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.shapes()[10], [3072, 192]);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = input(&[3, 3, 16, 16], 4);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
    }

    #[test]
    fn bad_inputs_and_config_are_errors() {
        for shape in [vec![3, 14, 32], vec![3072], vec![0, 32, 32]] {
            let err = AlexNet::new(AlexNetConfig::default(), &spec(&shape, 10)).unwrap_err().to_string();
            assert!(err.contains("alexnet") && err.contains(&format!("{shape:?}")), "{err}");
        }
        assert!(AlexNet::new(AlexNetConfig::default(), &spec(&[3, 15, 15], 10)).is_ok());
        assert_eq!(AlexNetConfig { dropout: 1.0 }.validate().unwrap_err().key, "dropout");
    }
}
