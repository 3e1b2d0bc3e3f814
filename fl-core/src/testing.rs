//! Small fixtures for tests of the engine and of plugins: a 2→2 linear model with an exact
//! FLOP count and a six-sample dataset, so durations and results can be worked out by hand.

use tch::{Device, Kind, Tensor};

use crate::data::Dataset;
use crate::model::{Mode, Model};
use crate::params::ParamSet;
use crate::rng::Rng;
use crate::structure::{Structure, TensorSpec};

/// `logits = x Wᵀ + b` with `W: [2, 2]`, `b: [2]`, initialised to zero. Forward costs 8 FLOPs
/// per sample (4 multiply-adds; the bias is not counted), so one epoch over n samples is 24n
/// training FLOPs.
pub struct TinyLinear {
    structure: Structure,
}

impl Default for TinyLinear {
    fn default() -> Self {
        let t = |name: &str, shape: Vec<i64>| TensorSpec::new(name, shape);
        TinyLinear { structure: Structure { tensors: vec![t("w", vec![2, 2]), t("b", vec![2])], groups: vec![] } }
    }
}

impl Model for TinyLinear {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, _: &mut Rng) -> ParamSet {
        let zeros = |s: &[i64]| Tensor::zeros(s, (Kind::Float, Device::Cpu));
        ParamSet::new(self.structure.names(), vec![zeros(&[2, 2]), zeros(&[2])]).expect("two names, two tensors")
    }

    fn forward(&self, p: &[Tensor], x: &Tensor, _: &mut Mode) -> Tensor {
        p[1].unsqueeze(1).baddbmm(x, &p[0].transpose(1, 2), 1, 1)
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        vec![2.0 * (shapes[0][0] * shapes[0][1]) as f64, 0.0]
    }
}

/// Six two-feature samples of two classes.
pub fn tiny_dataset() -> Dataset {
    let x = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 0.0, 0.0, -1.0, 2.0, 1.0]).reshape([6, 2]);
    let y = Tensor::from_slice(&[0i64, 1, 0, 1, 0, 1]);
    Dataset { x, y }
}
