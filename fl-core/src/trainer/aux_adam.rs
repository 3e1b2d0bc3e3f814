//! Adam on a cohort's auxiliary learned tensors: Co-S²P's width scores, Q-ViT's quantisation
//! steps and bit-widths. Each is stacked `[C, ...]`; a step moves the rows of the clients still
//! training, all of which have made the same number of updates.

use tch::{Device, Tensor};

/// Adam's constants (the papers give an optimizer for none of these tensors).
const BETAS: (f64, f64) = (0.9, 0.999);
const EPS: f64 = 1e-8;

/// Adam's step size at update `step` (from 1) with rate `lr`, lr·√(1 − β₂^step) / (1 − β₁^step),
/// in float32, the precision the update multiplies by it in.
pub(crate) fn adam_scale(lr: f64, step: usize) -> f32 {
    let (b1, b2) = BETAS;
    let step = i32::try_from(step).expect("fewer than 2^31 updates");
    (lr * (1.0 - b2.powi(step)).sqrt() / (1.0 - b1.powi(step))) as f32
}

/// The step sizes of updates 1 to `steps`, `[steps]` on `device`: one row a step, which a step
/// replayed from a CUDA graph reads at the device's step index.
pub(crate) fn adam_scales(lr: f64, steps: usize, device: Device) -> Tensor {
    let scales: Vec<f32> = (1..=steps).map(|step| adam_scale(lr, step)).collect();
    Tensor::from_slice(&scales).to_device(device)
}

/// One Adam step, in place, of the first `k` rows of `value` and of its moments `(m, v)`, from
/// the gradient `g` of those rows, with step size `scale` (a scalar tensor, [`adam_scale`]).
pub(crate) fn adam_rows(value: &Tensor, (m, v): &(Tensor, Tensor), g: &Tensor, k: i64, scale: &Tensor) {
    let (b1, b2) = BETAS;
    tch::no_grad(|| {
        let (mut m, mut v, mut value) = (m.narrow(0, 0, k), v.narrow(0, 0, k), value.narrow(0, 0, k));
        let _ = m.addcmul_(&(g - &m), &Tensor::from(1.0 - b1));
        let _ = v.addcmul_(&(g.square() - &v), &Tensor::from(1.0 - b2));
        value -= (&m / (v.sqrt() + EPS)) * scale;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_step_moves_each_row_by_the_rate_against_its_gradient() {
        // At step 1 the bias-corrected m/√v is g/|g|: each moved row moves by lr against the
        // sign of its gradient; rows past k do not move.
        let value = Tensor::from_slice(&[1.0f32, 1.0, 1.0]).reshape([3, 1]);
        let moments = (value.zeros_like(), value.zeros_like());
        let g = Tensor::from_slice(&[0.5f32, -2.0]).reshape([2, 1]);
        adam_rows(&value, &moments, &g, 2, &Tensor::from(adam_scale(0.1, 1)));
        let got = Vec::<f32>::try_from(value.reshape([-1])).unwrap();
        for (got, want) in got.iter().zip([0.9f32, 1.1, 1.0]) {
            assert!((got - want).abs() < 1e-5, "{got} against {want}");
        }
        let m = Vec::<f32>::try_from(moments.0.reshape([-1])).unwrap();
        assert_eq!(m, [0.05, -0.2, 0.0], "m = (1 − β₁) g on the moved rows");
    }
}
