//! `cnn3`: the three-layer MNIST CNN of the asyncnc paper.
//!
//! A. Forootani and R. Iervolino, "Asynchronous Federated Learning with non-convex client
//! objective functions and heterogeneous dataset" (asyncnc), as its code builds it
//! (<https://github.com/Ali-Forootani/AFL_non_convex_non_iid>): three 3×3 convolutions of 32
//! filters (stride 1, padding 1, each followed by ReLU) at the input resolution, no pooling
//! between them, then a global average pool to 1×1 and a linear layer 32 → classes.
//! Parameters: 320 + 9,248 + 9,248 + 330 = 19,146 for 1×28×28 inputs and 10 classes.
//! Deviation: the model returns logits; the paper's final log-softmax is left to the loss (the
//! trainer's cross-entropy on logits is the paper's NLL of log-softmax outputs).
//!
//! Any input `[channels, H, W]` with every size at least 1 is accepted (the global pool makes
//! the head independent of H and W). Initialisation: convolution weights Xavier-uniform,
//! convolution biases 0, the linear layer PyTorch's default (U(±1/√32) for weight and bias).
//! Tensor names are those of a PyTorch module with submodules `conv1`, `conv2`, `conv3`, `fc`.
//!
//! Unit groups: the output channels of each convolution (a row of its weight, an entry of its
//! bias, an input channel of the next convolution or a column of `fc.weight`, since the pool
//! leaves one feature per channel). `forward` reads every width from the tensors it gets, so a
//! structured sub-model runs as is.
//!
//! FLOPs follow [`crate::flops`]: each convolution's weight and bias counted at its H·W output
//! positions, the linear layer once; ReLU and the pool are not counted. About 29.4 MFLOP per
//! 28×28 sample (14.7 M multiply-adds).

use fl_core::rng::Rng;
use fl_core::{DataSpec, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result};
use fl_core::{Structure, TensorSpec, UnitGroup, UnitMember};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::{cohort, flops, init};

/// Parameters of the `cnn3` component: none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cnn3Config {}

/// Filters of every convolution.
const FILTERS: i64 = 32;
/// Kernel size of every convolution (padding 1 keeps the resolution).
const K: i64 = 3;

/// The asyncnc CNN; see the module documentation.
#[derive(Debug)]
pub struct Cnn3 {
    structure: Structure,
    /// `[channels, H, W]` of one sample.
    input: [i64; 3],
}

impl Cnn3 {
    /// The CNN for `spec.input_shape` = `[channels, H, W]` and `spec.classes` logits.
    pub fn new(spec: &DataSpec) -> Result<Cnn3> {
        let unsupported =
            |expected| ModelError::InputShape { model: "cnn3", expected, found: spec.input_shape.clone() };
        let &[c, h, w] = spec.input_shape.as_slice() else {
            return Err(unsupported("[channels, H, W]").into());
        };
        if c < 1 || h < 1 || w < 1 {
            return Err(unsupported("[channels, H, W], each at least 1").into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: "cnn3", classes: spec.classes }.into());
        }
        let tensors = vec![
            TensorSpec::new("conv1.weight", [FILTERS, c, K, K]),
            TensorSpec::new("conv1.bias", [FILTERS]),
            TensorSpec::new("conv2.weight", [FILTERS, FILTERS, K, K]),
            TensorSpec::new("conv2.bias", [FILTERS]),
            TensorSpec::new("conv3.weight", [FILTERS, FILTERS, K, K]),
            TensorSpec::new("conv3.bias", [FILTERS]),
            TensorSpec::new("fc.weight", [spec.classes, FILTERS]),
            TensorSpec::new("fc.bias", [spec.classes]),
        ];
        let m = |tensor, dim| UnitMember { tensor, dim, block: 1 };
        let group = |name: &str, members| UnitGroup { name: name.into(), units: FILTERS, members };
        let groups = vec![
            group("conv1", vec![m(0, 0), m(1, 0), m(2, 1)]),
            group("conv2", vec![m(2, 0), m(3, 0), m(4, 1)]),
            group("conv3", vec![m(4, 0), m(5, 0), m(6, 1)]),
        ];
        Ok(Cnn3 { structure: Structure { tensors, groups }, input: [c, h, w] })
    }
}

impl Model for Cnn3 {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        let tensors = self
            .structure
            .tensors
            .iter()
            .map(|t| match t.name.as_str() {
                "fc.weight" | "fc.bias" => init::uniform(rng, &t.shape, 1.0 / (FILTERS as f64).sqrt()),
                _ if t.shape.len() == 1 => Tensor::zeros(t.shape.as_slice(), (Kind::Float, Device::Cpu)),
                _ => init::xavier_uniform(rng, &t.shape),
            })
            .collect();
        ParamSet::new(self.structure.names(), tensors).expect("one tensor per structure entry")
    }

    fn features(&self, body: &[Tensor], x: &Tensor, _mode: &mut Mode) -> Tensor {
        let [c1w, c1b, c2w, c2b, c3w, c3b] = body else {
            panic!("cnn3 features: expected 6 tensors before the classifier, got {}", body.len());
        };
        let clients = c1w.size()[0];
        let [c, h, w] = self.input;
        // The three convolutions stay in the grouped layout; only the pooled features leave it.
        let x = cohort::to_grouped(&x.reshape([clients, -1, c, h, w]));
        let x = cohort::conv2d(&x, c1w, c1b, 1, 1).relu();
        let x = cohort::conv2d(&x, c2w, c2b, 1, 1).relu();
        let x = cohort::conv2d(&x, c3w, c3b, 1, 1).relu();
        cohort::global_avg_pool(&x, clients)
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        assert_eq!(shapes.len(), 8, "cnn3 flops: expected 8 shapes, got {}", shapes.len());
        let [_, h, w] = self.input;
        shapes.iter().enumerate().map(|(i, s)| flops::of_tensor(s, if i < 6 { h * w } else { 1 })).collect()
    }
}

impl ModelFromConfig for Cnn3 {
    type Config = Cnn3Config;

    fn from_config(_config: Cnn3Config, spec: &DataSpec) -> Result<Self> {
        Cnn3::new(spec)
    }
}

fl_core::register!(Model "cnn3" => Cnn3,
    summary: "asyncnc MNIST CNN: three 3x3 conv (32 filters, padding 1) + ReLU, global average pool, fc 32-classes",
    paper: "Forootani and Iervolino, Asynchronous Federated Learning with non-convex client objective functions and heterogeneous dataset");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_default_init, assert_grads_flow, input, labels};
    use fl_core::forward_one;
    use rand::SeedableRng;

    fn spec(shape: &[i64]) -> DataSpec {
        DataSpec { input_shape: shape.to_vec(), classes: 10, vocab_size: None }
    }

    fn mnist() -> Cnn3 {
        Cnn3::new(&spec(&[1, 28, 28])).unwrap()
    }

    #[test]
    fn structure_names_shapes_and_parameter_count() {
        let m = mnist();
        let s = m.structure();
        assert_eq!(
            s.names(),
            [
                "conv1.weight",
                "conv1.bias",
                "conv2.weight",
                "conv2.bias",
                "conv3.weight",
                "conv3.bias",
                "fc.weight",
                "fc.bias"
            ]
        );
        assert_eq!(
            s.shapes(),
            vec![
                vec![32, 1, 3, 3],
                vec![32],
                vec![32, 32, 3, 3],
                vec![32],
                vec![32, 32, 3, 3],
                vec![32],
                vec![10, 32],
                vec![10]
            ]
        );
        // 320 + 9,248 + 9,248 + 330.
        assert_eq!(s.num_params(), 19_146);
        assert_eq!(Cnn3::new(&spec(&[3, 32, 32])).unwrap().structure().num_params(), 19_146 + 2 * 9 * 32);
    }

    #[test]
    fn init_is_xavier_for_convolutions_and_default_for_the_head() {
        let m = mnist();
        let p = m.init(&mut Rng::seed_from_u64(1));
        assert_eq!(p.shapes(), m.structure().shapes());
        // Xavier bounds √(6 / (fan_in + fan_out)): conv1 9 + 288, conv2 and conv3 288 + 288.
        for (i, fans) in [(0, 297.0), (2, 576.0), (4, 576.0)] {
            let bound = (6.0f64 / fans).sqrt();
            let max = p.tensors()[i].abs().max().double_value(&[]);
            assert!(max <= bound && max > 0.95 * bound, "tensor {i}: max {max}, bound {bound}");
            assert_eq!(p.tensors()[i + 1].abs().sum(Kind::Double).double_value(&[]), 0.0, "bias {i}");
        }
        assert_default_init(&p.tensors()[6], 32);
        assert_default_init(&p.tensors()[7], 32);
        assert!(p.equal(&m.init(&mut Rng::seed_from_u64(1))));
    }

    #[test]
    fn forward_gives_logits_for_any_image_size() {
        for shape in [[1, 28, 28], [3, 32, 32], [2, 5, 9], [1, 1, 1]] {
            let m = Cnn3::new(&spec(&shape)).unwrap();
            let p = m.init(&mut Rng::seed_from_u64(2));
            let y = forward_one(&m, p.tensors(), &input(&[3, shape[0], shape[1], shape[2]], 1), &mut Mode::Eval);
            assert_eq!(y.size(), [3, 10], "input {shape:?}");
        }
    }

    #[test]
    fn forward_equals_the_layers_written_out() {
        let m = mnist();
        let p = m.init(&mut Rng::seed_from_u64(3));
        let t = p.tensors();
        let x = input(&[4, 1, 28, 28], 2);
        // Explicit zero padding, valid convolutions, and the pool as a plain mean.
        let conv = |x: &Tensor, w: &Tensor, b: &Tensor| {
            x.constant_pad_nd([1, 1, 1, 1]).conv2d(w, Some(b), [1, 1], [0, 0], [1, 1], 1).relu()
        };
        let h = conv(&conv(&conv(&x, &t[0], &t[1]), &t[2], &t[3]), &t[4], &t[5]);
        assert_eq!(h.size(), [4, 32, 28, 28]);
        let pooled = h.reshape([4, 32, 784]).sum_dim_intlist(2, false, None::<Kind>) / 784.0;
        let want = pooled.matmul(&t[6].tr()) + &t[7];
        assert!(forward_one(&m, t, &x, &mut Mode::Eval).allclose(&want, 1e-5, 1e-6, false));
    }

    #[test]
    fn flops_are_the_hand_count() {
        let m = mnist();
        // Per 28×28 sample (784 positions): conv1 2·32·9·784 = 451,584 + bias 25,088; conv2 and
        // conv3 2·32·288·784 = 14,450,688 + 25,088 each; fc 2·10·32 = 640 + 10.
        let want = [451_584.0, 25_088.0, 14_450_688.0, 25_088.0, 14_450_688.0, 25_088.0, 640.0, 10.0];
        let shapes = m.structure().shapes();
        assert_eq!(m.flops_per_tensor(&shapes), want);
        let total = m.forward_flops(&shapes);
        assert_eq!(total, 29_428_874.0);
        assert!((total / 1e6 - 29.4).abs() < 0.1);
    }

    #[test]
    fn half_width_sub_model_runs_and_costs_the_hand_count() {
        let m = mnist();
        let p = m.init(&mut Rng::seed_from_u64(4));
        let mask = m.structure().width_prefix_mask(0.5).unwrap();
        let shapes = mask.sub_shapes(&m.structure().shapes());
        assert_eq!(
            shapes,
            vec![
                vec![16, 1, 3, 3],
                vec![16],
                vec![16, 16, 3, 3],
                vec![16],
                vec![16, 16, 3, 3],
                vec![16],
                vec![10, 16],
                vec![10]
            ]
        );
        // 160 + 2,320 + 2,320 + 170.
        assert_eq!(mask.kept_params(&m.structure().shapes()), 4_970);
        let sub = mask.extract(&p);
        let y = forward_one(&m, sub.tensors(), &input(&[3, 1, 28, 28], 3), &mut Mode::Eval);
        assert_eq!(y.size(), [3, 10]);
        // conv1 2·16·9·784 = 225,792 + 12,544; conv2/3 2·16·144·784 = 3,612,672 + 12,544;
        // fc 2·10·16 = 320 + 10.
        assert_eq!(m.forward_flops(&shapes), 225_792.0 + 2.0 * 3_612_672.0 + 3.0 * 12_544.0 + 330.0);
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        // Scattered channels: a wrong dimension in a unit group would make the sliced
        // sub-model disagree with the zeroed full model.
        let m = Cnn3::new(&spec(&[3, 12, 10])).unwrap();
        let p = m.init(&mut Rng::seed_from_u64(5));
        let kept = [Some(vec![0, 3, 7, 31]), Some((0..32).step_by(3).collect()), Some(vec![1, 2, 20])];
        let mask = m.structure().mask_from_units(&kept).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.shapes()[4], [3, 11, 3, 3]);
        assert_eq!(sub.shapes()[6], [10, 3]);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = input(&[4, 3, 12, 10], 4);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
    }

    #[test]
    fn gradients_reach_every_tensor_of_full_and_sub_models() {
        let m = mnist();
        // Biases start at 0, which is fine for gradients; perturb them anyway so a dead ReLU
        // layer could not hide.
        let p = m.init(&mut Rng::seed_from_u64(6)).map(|t| t + 0.01);
        let x = input(&[8, 1, 28, 28], 5);
        assert_grads_flow(&m, p.tensors(), &x, &labels(8, 10));
        let sub = m.structure().width_prefix_mask(0.5).unwrap().extract(&p);
        assert_grads_flow(&m, sub.tensors(), &x, &labels(8, 10));
    }

    #[test]
    fn unsupported_shapes_are_errors_naming_the_model_and_shape() {
        for shape in [vec![784], vec![1, 28], vec![0, 28, 28], vec![1, 0, 28], vec![1, 28, 28, 1]] {
            let err = Cnn3::new(&spec(&shape)).unwrap_err().to_string();
            assert!(err.contains("cnn3") && err.contains(&format!("{shape:?}")), "{err}");
        }
    }
}
