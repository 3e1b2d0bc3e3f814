//! `lenet5`: LeNet-5 as federated-learning papers use it.
//!
//! Follows LeCun, Bottou, Bengio and Haffner, "Gradient-Based Learning Applied to Document
//! Recognition", Proc. IEEE 86(11), 1998, in the form common to FL code (the CIFAR-10 CNN of
//! the KDD '23 RA-Fed code, FedASMU's LeNet5): conv(C→6, 5×5) → ReLU → max-pool 2 → conv(6→16,
//! 5×5) → ReLU → max-pool 2 → flatten (16·5·5 = 400) → fc 400→120 → ReLU → fc 120→84 → ReLU →
//! fc 84→classes. Deviations from the 1998 paper, as in that code: ReLU instead of scaled tanh,
//! max-pooling instead of trainable subsampling, full conv2 connectivity, a linear output layer
//! instead of RBF units.
//!
//! Inputs are `[C, 28, 28]` (conv1 padded by 2, as for MNIST / Fashion-MNIST) or `[C, 32, 32]`
//! (no padding, as for CIFAR); both give 16·5·5 = 400 features. Parameters: 61,706 for 1×28×28
//! and 62,006 for 3×32×32 (KDD '23 states 62,006).
//!
//! Unit groups: conv1's and conv2's output channels and fc1's and fc2's neurons. A conv2
//! channel feeds 25 consecutive columns of `fc1.weight` (PyTorch flattens `[C, 5, 5]` channel
//! first). `forward` reads every width from the tensors it gets, so a structured sub-model runs
//! as is.
//!
//! FLOPs follow [`crate::flops`]: 2 per multiply-add, 1 per bias addition, counted at each
//! output position of a convolution (28·28 for conv1, 10·10 for conv2); ReLU and pooling are
//! not counted.

use fl_core::rng::Rng;
use fl_core::{DataSpec, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result};
use fl_core::{Structure, TensorSpec, UnitGroup, UnitMember};
use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::pool::max_pool2;
use crate::{cohort, flops, init};

/// Parameters of the `lenet5` component: none; the input shape fixes the padding.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeNet5Config {}

/// Kernel size of both convolutions.
const K: i64 = 5;
/// Spatial size after conv2 and the second pooling: 5×5, so a conv2 channel feeds 25 features.
const FEATURES_PER_CHANNEL: i64 = 25;

/// LeNet-5; see the module documentation.
#[derive(Debug)]
pub struct LeNet5 {
    structure: Structure,
    /// `[C, H, W]` of one sample.
    input: [i64; 3],
    /// conv1's zero padding on each side.
    padding: i64,
    /// Output positions (H_out · W_out) of conv1 and conv2.
    positions: [i64; 2],
}

impl LeNet5 {
    /// LeNet-5 for `spec.input_shape` = `[C, 28, 28]` or `[C, 32, 32]` and `spec.classes` logits.
    pub fn new(spec: &DataSpec) -> Result<LeNet5> {
        let unsupported = || ModelError::InputShape {
            model: "lenet5",
            expected: "[C, 28, 28] (conv1 padded by 2) or [C, 32, 32]",
            found: spec.input_shape.clone(),
        };
        let &[c, h, w] = spec.input_shape.as_slice() else {
            return Err(unsupported().into());
        };
        if c < 1 || h != w || !(h == 28 || h == 32) {
            return Err(unsupported().into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: "lenet5", classes: spec.classes }.into());
        }
        let padding = (32 - h) / 2;
        // conv1: 32 → 28, pool → 14; conv2: 14 → 10, pool → 5.
        let conv1_out = h + 2 * padding - K + 1;
        let conv2_out = conv1_out / 2 - K + 1;
        debug_assert_eq!(conv2_out / 2 * (conv2_out / 2), FEATURES_PER_CHANNEL);
        let spec_of = |name: &str, shape: &[i64]| TensorSpec::new(name, shape);
        let tensors = vec![
            spec_of("conv1.weight", &[6, c, K, K]),
            spec_of("conv1.bias", &[6]),
            spec_of("conv2.weight", &[16, 6, K, K]),
            spec_of("conv2.bias", &[16]),
            spec_of("fc1.weight", &[120, 16 * FEATURES_PER_CHANNEL]),
            spec_of("fc1.bias", &[120]),
            spec_of("fc2.weight", &[84, 120]),
            spec_of("fc2.bias", &[84]),
            spec_of("fc3.weight", &[spec.classes, 84]),
            spec_of("fc3.bias", &[spec.classes]),
        ];
        let m = |tensor, dim, block| UnitMember { tensor, dim, block };
        let group = |name: &str, units, members| UnitGroup { name: name.into(), units, members };
        let groups = vec![
            group("conv1", 6, vec![m(0, 0, 1), m(1, 0, 1), m(2, 1, 1)]),
            group("conv2", 16, vec![m(2, 0, 1), m(3, 0, 1), m(4, 1, FEATURES_PER_CHANNEL)]),
            group("fc1", 120, vec![m(4, 0, 1), m(5, 0, 1), m(6, 1, 1)]),
            group("fc2", 84, vec![m(6, 0, 1), m(7, 0, 1), m(8, 1, 1)]),
        ];
        Ok(LeNet5 {
            structure: Structure { tensors, groups },
            input: [c, h, w],
            padding,
            positions: [conv1_out * conv1_out, conv2_out * conv2_out],
        })
    }

    /// conv1's zero padding on each side (2 for 28×28 inputs, 0 for 32×32).
    pub fn padding(&self) -> i64 {
        self.padding
    }
}

/// Convolution, ReLU and 2×2 max-pooling of every client, in the grouped layout.
fn conv_relu_pool(x: &Tensor, w: &Tensor, b: &Tensor, padding: i64) -> Tensor {
    max_pool2(&cohort::conv2d(x, w, b, 1, padding).relu())
}

impl Model for LeNet5 {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        init::pytorch_default(&self.structure, rng)
    }

    fn features(&self, body: &[Tensor], x: &Tensor, _mode: &mut Mode) -> Tensor {
        let [c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b] = body else {
            panic!("lenet5 features: expected 8 tensors before the classifier, got {}", body.len());
        };
        let clients = c1w.size()[0];
        let [c, h, w] = self.input;
        let x = cohort::to_grouped(&x.reshape([clients, -1, c, h, w]));
        let x = conv_relu_pool(&x, c1w, c1b, self.padding);
        // `[batch, clients · channels, 5, 5]` → `[clients, batch, channels · 25]`, channel first,
        // for any kept channel count.
        let x = conv_relu_pool(&x, c2w, c2b, 0);
        let x = x.reshape([x.size()[0], clients, -1]).transpose(0, 1);
        let x = cohort::linear(&x, f1w, f1b).relu();
        cohort::linear(&x, f2w, f2b).relu()
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        assert_eq!(shapes.len(), 10, "lenet5 flops: expected 10 shapes, got {}", shapes.len());
        shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let positions = match i {
                    0 | 1 => self.positions[0],
                    2 | 3 => self.positions[1],
                    _ => 1,
                };
                flops::of_tensor(s, positions)
            })
            .collect()
    }
}

impl ModelFromConfig for LeNet5 {
    type Config = LeNet5Config;

    fn from_config(_config: LeNet5Config, spec: &DataSpec) -> Result<Self> {
        LeNet5::new(spec)
    }
}

fl_core::register!(Model "lenet5" => LeNet5,
    summary: "LeNet-5 (two 5x5 conv + max-pool, fc 400-120-84-classes, ReLU) for [C,28,28] or [C,32,32] inputs",
    paper: "LeCun et al., Gradient-Based Learning Applied to Document Recognition, Proc. IEEE 1998");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_default_init, assert_grads_flow, input, labels};
    use fl_core::forward_one;
    use rand::SeedableRng;

    fn spec(shape: &[i64]) -> DataSpec {
        DataSpec { input_shape: shape.to_vec(), classes: 10, vocab_size: None }
    }

    fn mnist() -> LeNet5 {
        LeNet5::new(&spec(&[1, 28, 28])).unwrap()
    }

    fn cifar() -> LeNet5 {
        LeNet5::new(&spec(&[3, 32, 32])).unwrap()
    }

    #[test]
    fn structure_names_shapes_and_groups() {
        let m = mnist();
        let s = m.structure();
        assert_eq!(
            s.names(),
            [
                "conv1.weight",
                "conv1.bias",
                "conv2.weight",
                "conv2.bias",
                "fc1.weight",
                "fc1.bias",
                "fc2.weight",
                "fc2.bias",
                "fc3.weight",
                "fc3.bias"
            ]
        );
        assert_eq!(
            s.shapes(),
            vec![
                vec![6, 1, 5, 5],
                vec![6],
                vec![16, 6, 5, 5],
                vec![16],
                vec![120, 400],
                vec![120],
                vec![84, 120],
                vec![84],
                vec![10, 84],
                vec![10]
            ]
        );
        let names: Vec<(&str, i64)> = s.groups.iter().map(|g| (g.name.as_str(), g.units)).collect();
        assert_eq!(names, [("conv1", 6), ("conv2", 16), ("fc1", 120), ("fc2", 84)]);
        assert_eq!(s.groups[1].members[2], UnitMember { tensor: 4, dim: 1, block: 25 });
        assert_eq!(m.padding(), 2);
        assert_eq!(cifar().padding(), 0);
        assert_eq!(cifar().structure().tensors[0].shape, [6, 3, 5, 5]);
    }

    #[test]
    fn parameter_counts_match_the_hand_count() {
        // conv1 6·1·25 + 6 = 156, conv2 16·6·25 + 16 = 2,416, fc1 120·400 + 120 = 48,120,
        // fc2 84·120 + 84 = 10,164, fc3 10·84 + 10 = 850: 61,706.
        assert_eq!(mnist().structure().num_params(), 61_706);
        // conv1 6·3·25 + 6 = 456 instead of 156: 62,006 (the KDD '23 spec states 62,006).
        assert_eq!(cifar().structure().num_params(), 62_006);
        assert_eq!(LeNet5::new(&spec(&[1, 32, 32])).unwrap().structure().num_params(), 61_706);
    }

    #[test]
    fn flops_per_sample_match_the_hand_count() {
        let m = mnist();
        // conv1 2·6·1·25·784 = 235,200 + bias 6·784 = 4,704; conv2 2·16·6·25·100 = 480,000 +
        // bias 1,600; fc1 2·120·400 = 96,000 + 120; fc2 2·84·120 = 20,160 + 84; fc3 2·10·84 = 1,680 + 10.
        let want = [235_200.0, 4_704.0, 480_000.0, 1_600.0, 96_000.0, 120.0, 20_160.0, 84.0, 1_680.0, 10.0];
        assert_eq!(m.flops_per_tensor(&m.structure().shapes()), want);
        assert_eq!(m.forward_flops(&m.structure().shapes()), 839_558.0);
        // Three input channels: conv1 2·6·3·25·784 = 705,600 instead of 235,200.
        let c = cifar();
        assert_eq!(c.forward_flops(&c.structure().shapes()), 1_309_958.0);
    }

    #[test]
    fn init_is_pytorch_default_and_deterministic() {
        let m = cifar();
        let p = m.init(&mut Rng::seed_from_u64(1));
        assert_eq!(p.names(), m.structure().names().as_slice());
        assert_eq!(p.shapes(), m.structure().shapes());
        // fan_in: conv1 3·5·5 = 75, conv2 6·5·5 = 150, fc1 400, fc2 120, fc3 84.
        for (i, fan) in [75, 75, 150, 150, 400, 400, 120, 120, 84, 84].into_iter().enumerate() {
            assert_default_init(&p.tensors()[i], fan);
        }
        assert!(p.equal(&m.init(&mut Rng::seed_from_u64(1))));
        let q = m.init(&mut Rng::seed_from_u64(2));
        assert!(p.tensors().iter().zip(q.tensors()).all(|(a, b)| !a.equal(b)));
    }

    #[test]
    fn forward_gives_logits_for_both_input_sizes() {
        for shape in [[1, 28, 28], [1, 32, 32], [3, 32, 32], [3, 28, 28]] {
            let m = LeNet5::new(&spec(&shape)).unwrap();
            let p = m.init(&mut Rng::seed_from_u64(2));
            let y = forward_one(&m, p.tensors(), &input(&[5, shape[0], shape[1], shape[2]], 1), &mut Mode::Eval);
            assert_eq!(y.size(), [5, 10], "input {shape:?}");
        }
    }

    #[test]
    fn forward_equals_the_layers_written_out() {
        let m = mnist();
        let p = m.init(&mut Rng::seed_from_u64(3));
        let t = p.tensors();
        let x = input(&[4, 1, 28, 28], 2);
        // Padding 2 by hand, then valid convolutions and an explicit channel-first reshape.
        let padded = x.constant_pad_nd([2, 2, 2, 2]);
        let h = padded.conv2d(&t[0], Some(&t[1]), [1, 1], [0, 0], [1, 1], 1).relu().max_pool2d(
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            false,
        );
        let h = h.conv2d(&t[2], Some(&t[3]), [1, 1], [0, 0], [1, 1], 1).relu().max_pool2d(
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            false,
        );
        assert_eq!(h.size(), [4, 16, 5, 5]);
        let h = h.reshape([4, 400]);
        let h = (h.matmul(&t[4].tr()) + &t[5]).relu();
        let h = (h.matmul(&t[6].tr()) + &t[7]).relu();
        let want = h.matmul(&t[8].tr()) + &t[9];
        assert!(forward_one(&m, t, &x, &mut Mode::Eval).allclose(&want, 1e-5, 1e-6, false));
    }

    #[test]
    fn half_width_sub_model_runs_and_costs_the_hand_count() {
        let m = mnist();
        let p = m.init(&mut Rng::seed_from_u64(4));
        let mask = m.structure().width_prefix_mask(0.5).unwrap();
        let shapes = mask.sub_shapes(&m.structure().shapes());
        assert_eq!(shapes[0], [3, 1, 5, 5]);
        assert_eq!(shapes[2], [8, 3, 5, 5]);
        assert_eq!(shapes[4], [60, 200]);
        assert_eq!(shapes[6], [42, 60]);
        assert_eq!(shapes[8], [10, 42]);
        // 75 + 3 + 600 + 8 + 12,000 + 60 + 2,520 + 42 + 420 + 10.
        assert_eq!(mask.kept_params(&m.structure().shapes()), 15_738);
        let sub = mask.extract(&p);
        let y = forward_one(&m, sub.tensors(), &input(&[3, 1, 28, 28], 3), &mut Mode::Eval);
        assert_eq!(y.size(), [3, 10]);
        // conv1 2·3·25·784 = 117,600 + 3·784 = 2,352; conv2 2·8·3·25·100 = 120,000 + 800;
        // fc1 2·60·200 = 24,000 + 60; fc2 2·42·60 = 5,040 + 42; fc3 2·10·42 = 840 + 10.
        let want = [117_600.0, 2_352.0, 120_000.0, 800.0, 24_000.0, 60.0, 5_040.0, 42.0, 840.0, 10.0];
        assert_eq!(m.flops_per_tensor(&shapes), want);
        assert_eq!(m.forward_flops(&shapes), 270_744.0);
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        // Scattered (not prefix) channels and neurons: a wrong block or dimension in the unit
        // groups would make the sliced sub-model disagree with the zeroed full model.
        let m = cifar();
        let p = m.init(&mut Rng::seed_from_u64(5));
        let kept = [
            Some(vec![0, 2, 5]),
            Some(vec![1, 3, 4, 8, 15]),
            Some((0..120).step_by(7).collect()),
            Some(vec![2, 40, 83]),
        ];
        let mask = m.structure().mask_from_units(&kept).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.shapes()[4], [18, 125]);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = input(&[4, 3, 32, 32], 4);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
    }

    #[test]
    fn gradients_reach_every_tensor_of_full_and_sub_models() {
        let m = mnist();
        let p = m.init(&mut Rng::seed_from_u64(6));
        let x = input(&[16, 1, 28, 28], 5);
        assert_grads_flow(&m, p.tensors(), &x, &labels(16, 10));
        let sub = m.structure().width_prefix_mask(0.5).unwrap().extract(&p);
        assert_grads_flow(&m, sub.tensors(), &x, &labels(16, 10));
    }

    #[test]
    fn unsupported_shapes_are_errors_naming_the_shape() {
        for shape in [vec![1, 30, 30], vec![784], vec![1, 28, 32], vec![0, 28, 28]] {
            let err = LeNet5::new(&spec(&shape)).unwrap_err().to_string();
            assert!(err.contains(&format!("{shape:?}")), "{err}");
        }
    }
}
