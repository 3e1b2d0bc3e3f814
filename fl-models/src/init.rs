//! PyTorch's default initialisation of `nn.Linear`, `nn.Conv2d` and `nn.Embedding`, and
//! `nn.init.xavier_uniform_`, drawn from a host stream.
//!
//! PyTorch initialises linear and convolution weights with `kaiming_uniform_(a = √5)`: the bound
//! `gain · √(3 / fan_in)` with `gain = √(2 / (1 + a²)) = √(1/3)` is exactly `1 / √fan_in`. Biases
//! are U(−1/√fan_in, 1/√fan_in) with the same fan-in (`in_features`, or `in_channels · k · k`).
//! `nn.Embedding` draws N(0, 1) and zeroes the row of its `padding_idx`.
//! The values come from the caller's [`Rng`] on the host and never from libtorch's global
//! generator, which threads share, so a seed fixes the model whatever runs beside it. The
//! numbers are not PyTorch's (its generator differs); the distributions are.

use fl_core::rng::Rng;
use fl_core::{ParamSet, Structure};
use rand::distr::Distribution;
use rand_distr::StandardNormal;
use tch::Tensor;

pub use fl_core::rng::uniform;

/// A CPU float32 tensor of `shape` with elements drawn from N(0, std²).
pub fn normal(rng: &mut Rng, shape: &[i64], std: f64) -> Tensor {
    let n: i64 = shape.iter().product();
    let std = std as f32;
    let values: Vec<f32> =
        (0..n).map(|_| std * <StandardNormal as Distribution<f32>>::sample(&StandardNormal, rng)).collect();
    Tensor::from_slice(&values).reshape(shape)
}

/// PyTorch's `nn.Embedding` weight of shape `[num_embeddings, dim]`: N(0, 1), with row
/// `padding_idx` (if any) set to 0.
///
/// # Panics
/// If `shape` is not two-dimensional or `padding_idx` is outside `0..num_embeddings`.
pub fn embedding(rng: &mut Rng, shape: &[i64], padding_idx: Option<i64>) -> Tensor {
    assert_eq!(shape.len(), 2, "init::embedding: expected [num_embeddings, dim], got {shape:?}");
    let weight = normal(rng, shape, 1.0);
    if let Some(row) = padding_idx {
        assert!((0..shape[0]).contains(&row), "init::embedding: padding_idx {row} outside 0..{}", shape[0]);
        let _ = weight.get(row).zero_();
    }
    weight
}

/// The fan-in of a linear (`[out, in]`) or convolution (`[out, in, kh, kw]`) weight: the
/// product of every dimension after the first.
pub fn fan_in(weight_shape: &[i64]) -> i64 {
    weight_shape.iter().skip(1).product()
}

/// The fan-out of a linear (`[out, in]`) or convolution (`[out, in, kh, kw]`) weight: `out`
/// times the receptive field (`kh · kw`), as PyTorch's `_calculate_fan_in_and_fan_out`.
pub fn fan_out(weight_shape: &[i64]) -> i64 {
    weight_shape.first().copied().unwrap_or(1) * weight_shape.iter().skip(2).product::<i64>()
}

/// PyTorch's `nn.init.xavier_uniform_` (gain 1) for a weight of rank ≥ 2: U(±√(6 / (fan_in +
/// fan_out))).
///
/// # Panics
/// If `shape` has rank below 2 (PyTorch refuses those too).
pub fn xavier_uniform(rng: &mut Rng, shape: &[i64]) -> Tensor {
    assert!(shape.len() >= 2, "init::xavier_uniform: expected a weight of rank >= 2, got {shape:?}");
    let bound = (6.0 / (fan_in(shape) + fan_out(shape)) as f64).sqrt();
    uniform(rng, shape, bound)
}

/// PyTorch's default initialisation for a model made of linear and convolution layers, in
/// structure order: a tensor of rank ≥ 2 is a weight, U(±1/√fan_in); a rank-1 tensor is the bias
/// of the weight before it, U(±1/√fan_in of that weight).
///
/// # Panics
/// If a rank-1 tensor comes before any weight, or a tensor has rank 0.
pub fn pytorch_default(structure: &Structure, rng: &mut Rng) -> ParamSet {
    let mut last_fan_in = None;
    let tensors = structure
        .tensors
        .iter()
        .map(|spec| {
            let fan = match spec.shape.len() {
                0 => panic!("init::pytorch_default: `{}` is a scalar, not a weight or bias", spec.name),
                1 => last_fan_in
                    .unwrap_or_else(|| panic!("init::pytorch_default: bias `{}` has no weight before it", spec.name)),
                _ => {
                    let fan = fan_in(&spec.shape);
                    last_fan_in = Some(fan);
                    fan
                }
            };
            uniform(rng, &spec.shape, 1.0 / (fan as f64).sqrt())
        })
        .collect();
    ParamSet::new(structure.names(), tensors).expect("one tensor per structure entry")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fl_core::TensorSpec;
    use rand::SeedableRng;

    #[test]
    fn fan_in_of_linear_and_conv_weights() {
        assert_eq!(fan_in(&[200, 784]), 784);
        assert_eq!(fan_in(&[16, 6, 5, 5]), 150);
    }

    #[test]
    fn xavier_bound_uses_both_fans() {
        assert_eq!(fan_out(&[32, 16, 3, 3]), 288);
        assert_eq!(fan_out(&[10, 32]), 10);
        // conv 1 → 32, 3×3: fan_in 9, fan_out 288, bound √(6/297) ≈ 0.1421.
        let w = xavier_uniform(&mut Rng::seed_from_u64(3), &[32, 1, 3, 3]);
        let max = w.abs().max().double_value(&[]);
        let bound = (6.0f64 / 297.0).sqrt();
        assert!(max <= bound && max > 0.95 * bound, "max {max}, bound {bound}");
    }

    #[test]
    fn a_bias_takes_the_fan_in_of_its_weight() {
        let spec = |name: &str, shape: &[i64]| TensorSpec::new(name, shape);
        // fan_in 4 → bound 0.5 for both tensors; fan_in 100 → bound 0.1.
        let s = Structure {
            tensors: vec![spec("a.weight", &[1000, 4]), spec("a.bias", &[1000]), spec("b.weight", &[1000, 100])],
            groups: vec![],
        };
        let p = pytorch_default(&s, &mut Rng::seed_from_u64(1));
        let max = |t: &Tensor| t.abs().max().double_value(&[]);
        assert!(max(&p.tensors()[1]) <= 0.5 && max(&p.tensors()[1]) > 0.45);
        assert!(max(&p.tensors()[2]) <= 0.1 && max(&p.tensors()[2]) > 0.099);
    }
}
