//! `cnn2`: the two-convolution "CNN" of the FedASMU experiments.
//!
//! J. Jia, J. Liu et al., "Efficient Federated Learning with Timely Update Dissemination"
//! (FedASMU / FedSSMU, arXiv:2507.06031, Table 2): conv1 (64 channels, kernel 2) → activation →
//! conv2 (32 channels, kernel 2) → activation → flatten → dense (units = classes) → softmax.
//! The table leaves the rest unstated; as the spec recommends ([rec], A21), the activations
//! are ReLU, both convolutions have stride 1, no padding and a bias, there is **no pooling**,
//! and the dense layer has one unit per class (the table's "units = 10" also on CIFAR-100).
//! For 3×32×32 inputs: 32 → 31 → 30, so the dense layer sees 32·30·30 = 28,800 features.
//! Parameters: 297,066 for 10 classes, 2,889,156 for 100. The softmax is left to the loss: the
//! model returns logits, as the other image models do.
//!
//! Any input `[channels, H, W]` with H, W ≥ 3 is accepted (the dense layer's width follows).
//! Tensor names are those of a PyTorch module with submodules `conv1`, `conv2`, `fc`;
//! initialisation is PyTorch's default (U(±1/√fan_in) for every weight and bias).
//!
//! Unit groups: conv1's output channels (a row of `conv1.weight`, an entry of `conv1.bias`, an
//! input channel of `conv2.weight`) and conv2's (a row, a bias entry, and the H'·W' consecutive
//! columns of `fc.weight` that the channel-first flatten gives it). `forward` reads every width
//! from the tensors, so a structured sub-model runs as is.
//!
//! FLOPs follow [`crate::flops`], each convolution counted at its output positions: about
//! 16.9 MFLOP per 3×32×32 sample with 10 classes (8.4 M multiply-adds).

use fl_core::rng::Rng;
use fl_core::{DataSpec, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result, Structure};
use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::cohort;
use crate::layout::{Cursor, Layout, flatten, out_size};

/// The model's registered name, which its errors begin with.
const NAME: &str = "cnn2";

/// Parameters of the `cnn2` component: none; the classes come from the data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cnn2Config {}

/// Output channels of conv1 and conv2 (Table 2).
const CHANNELS: [i64; 2] = [64, 32];
/// Kernel size of both convolutions (Table 2).
const K: i64 = 2;

/// FedASMU's CNN; see the module documentation.
#[derive(Debug)]
pub struct Cnn2 {
    layout: Layout,
    structure: Structure,
    /// `[channels, H, W]` of one sample.
    input: [i64; 3],
}

impl Cnn2 {
    /// The CNN for `spec.input_shape` = `[channels, H, W]` (H, W ≥ 3) and `spec.classes` logits.
    pub fn new(spec: &DataSpec) -> Result<Cnn2> {
        let unsupported = |expected| ModelError::InputShape { model: NAME, expected, found: spec.input_shape.clone() };
        if spec.vocab_size.is_some() {
            return Err(ModelError::NeedsRealValues { model: NAME }.into());
        }
        let &[c, h, w] = spec.input_shape.as_slice() else {
            return Err(unsupported("[channels, H, W]").into());
        };
        if c < 1 || h < 3 || w < 3 {
            return Err(unsupported("[channels, H, W] with channels >= 1 and H, W >= 3").into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: NAME, classes: spec.classes }.into());
        }
        let (h1, w1) = (out_size(h, K, 1, 0), out_size(w, K, 1, 0));
        let (h2, w2) = (out_size(h1, K, 1, 0), out_size(w1, K, 1, 0));
        let mut l = Layout::default();
        let conv1 = l.conv("conv1", CHANNELS[0], c, K, h1 * w1);
        let conv2 = l.conv("conv2", CHANNELS[1], CHANNELS[0], K, h2 * w2);
        let fc = l.linear("fc", spec.classes, CHANNELS[1] * h2 * w2);
        l.group("conv1", CHANNELS[0], &[(conv1, 0, 1), (conv1 + 1, 0, 1), (conv2, 1, 1)]);
        l.group("conv2", CHANNELS[1], &[(conv2, 0, 1), (conv2 + 1, 0, 1), (fc, 1, h2 * w2)]);
        Ok(Cnn2 { structure: l.structure(), layout: l, input: [c, h, w] })
    }
}

impl Model for Cnn2 {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        self.layout.init(rng)
    }

    fn features(&self, body: &[Tensor], x: &Tensor, _mode: &mut Mode) -> Tensor {
        let mut p = Cursor::new(NAME, body, 4);
        let clients = body[0].size()[0];
        let [c, h, w] = self.input;
        let x = cohort::to_grouped(&x.reshape([clients, -1, c, h, w]));
        let (weight, bias) = p.pair();
        let x = cohort::conv2d(&x, weight, bias, 1, 0).relu();
        let (weight, bias) = p.pair();
        let x = cohort::conv2d(&x, weight, bias, 1, 0).relu();
        flatten(&x, clients)
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        self.layout.flops(NAME, shapes)
    }
}

impl ModelFromConfig for Cnn2 {
    type Config = Cnn2Config;

    fn from_config(_config: Cnn2Config, spec: &DataSpec) -> Result<Self> {
        Cnn2::new(spec)
    }
}

fl_core::register!(Model "cnn2" => Cnn2,
    summary: "FedASMU's CNN (Table 2): conv 64 k2 - ReLU - conv 32 k2 - ReLU - flatten - fc-classes, no pooling",
    paper: "Jia, Liu et al., Efficient Federated Learning with Timely Update Dissemination (FedASMU), arXiv:2507.06031, Table 2");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_default_init, assert_grads_flow, input, labels};
    use fl_core::forward_one;
    use rand::SeedableRng;

    fn spec(shape: &[i64], classes: i64) -> DataSpec {
        DataSpec { input_shape: shape.to_vec(), classes, vocab_size: None }
    }

    fn cifar(classes: i64) -> Cnn2 {
        Cnn2::new(&spec(&[3, 32, 32], classes)).unwrap()
    }

    #[test]
    fn structure_and_parameter_counts_match_the_hand_count() {
        let m = cifar(10);
        let s = m.structure();
        assert_eq!(s.names(), ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc.weight", "fc.bias"]);
        assert_eq!(
            s.shapes(),
            vec![vec![64, 3, 2, 2], vec![64], vec![32, 64, 2, 2], vec![32], vec![10, 28_800], vec![10]]
        );
        // conv1 64·3·2·2 + 64 = 832; conv2 32·64·2·2 + 32 = 8,224; fc (32·30·30 = 28,800 inputs)
        // 10·28,800 + 10 = 288,010: 297,066 (the spec's "about 0.30 M").
        assert_eq!(s.num_params(), 297_066);
        // fc 100·28,800 + 100 = 2,880,100 instead: 2,889,156 (the spec's "about 2.9 M").
        assert_eq!(cifar(100).structure().num_params(), 2_889_156);
        let groups: Vec<(&str, i64)> = s.groups.iter().map(|g| (g.name.as_str(), g.units)).collect();
        assert_eq!(groups, [("conv1", 64), ("conv2", 32)]);
        assert_eq!(s.groups[1].members[2], fl_core::UnitMember { tensor: 4, dim: 1, block: 900 });
    }

    #[test]
    fn flops_per_sample_match_the_hand_count() {
        let m = cifar(10);
        // conv1 at 31·31 = 961 positions: 2·64·3·4·961 = 1,476,096, bias 64·961 = 61,504;
        // conv2 at 30·30 = 900: 2·32·64·4·900 = 14,745,600, bias 32·900 = 28,800;
        // fc 2·10·28,800 = 576,000, bias 10.
        let want = [1_476_096.0, 61_504.0, 14_745_600.0, 28_800.0, 576_000.0, 10.0];
        assert_eq!(m.flops_per_tensor(&m.structure().shapes()), want);
        assert_eq!(m.forward_flops(&m.structure().shapes()), 16_888_010.0);
    }

    #[test]
    fn init_is_pytorch_default() {
        let m = cifar(10);
        let p = m.init(&mut Rng::seed_from_u64(1));
        assert_eq!(p.shapes(), m.structure().shapes());
        // fan_in: conv1 3·2·2 = 12, conv2 64·2·2 = 256, fc 28,800.
        for (i, fan) in [12, 12, 256, 256, 28_800, 28_800].into_iter().enumerate() {
            assert_default_init(&p.tensors()[i], fan);
        }
        assert!(p.equal(&m.init(&mut Rng::seed_from_u64(1))));
    }

    #[test]
    fn forward_equals_the_layers_written_out() {
        let m = cifar(10);
        let p = m.init(&mut Rng::seed_from_u64(3));
        let t = p.tensors();
        let x = input(&[4, 3, 32, 32], 2);
        let h = x.conv2d(&t[0], Some(&t[1]), [1, 1], [0, 0], [1, 1], 1).relu();
        let h = h.conv2d(&t[2], Some(&t[3]), [1, 1], [0, 0], [1, 1], 1).relu();
        assert_eq!(h.size(), [4, 32, 30, 30]);
        let want = h.reshape([4, 28_800]).matmul(&t[4].tr()) + &t[5];
        let got = forward_one(&m, t, &x, &mut Mode::Eval);
        assert_eq!(got.size(), [4, 10]);
        assert!(got.allclose(&want, 1e-5, 1e-6, false));
    }

    #[test]
    fn gradients_reach_every_tensor_of_full_and_sub_models() {
        let m = cifar(100);
        let p = m.init(&mut Rng::seed_from_u64(6));
        let x = input(&[8, 3, 32, 32], 5);
        assert_grads_flow(&m, p.tensors(), &x, &labels(8, 100));
        let sub = m.structure().width_prefix_mask(0.5).unwrap().extract(&p);
        assert_eq!(sub.shapes()[4], [100, 16 * 900]);
        assert_grads_flow(&m, sub.tensors(), &x, &labels(8, 100));
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        let m = Cnn2::new(&spec(&[3, 8, 8], 10)).unwrap();
        let p = m.init(&mut Rng::seed_from_u64(5));
        let mask = m.structure().mask_from_units(&[Some((0..64).step_by(3).collect()), Some(vec![1, 4, 30])]).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.shapes()[4], [10, 3 * 36]);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = input(&[4, 3, 8, 8], 4);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
    }

    #[test]
    fn unsupported_inputs_are_errors_naming_the_model() {
        for shape in [vec![3072], vec![3, 2, 32], vec![0, 32, 32]] {
            let err = Cnn2::new(&spec(&shape, 10)).unwrap_err().to_string();
            assert!(err.contains("cnn2") && err.contains(&format!("{shape:?}")), "{err}");
        }
        let text = DataSpec { input_shape: vec![256], classes: 2, vocab_size: Some(100) };
        assert!(Cnn2::new(&text).unwrap_err().to_string().contains("real-valued"));
    }
}
