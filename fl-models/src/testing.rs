//! Helpers shared by the models' unit tests: deterministic inputs and labels, and checks of
//! the default initialisation and of gradient flow.

use fl_core::rng::{CohortNoise, TensorNoise};
use fl_core::{Mode, Model, forward_one};
use tch::{Device, Kind, Tensor};

/// Deterministic inputs in [-1, 1) (never libtorch's global generator).
pub fn input(shape: &[i64], seed: u64) -> Tensor {
    TensorNoise::new(seed).uniform(shape, Device::Cpu) * 2.0 - 1.0
}

/// The noise of a lone client's stream `seed` (a cohort of one).
pub fn noise(seed: u64) -> CohortNoise {
    CohortNoise::new(vec![TensorNoise::new(seed)], Device::Cpu)
}

/// Labels `0, 1, …, classes - 1, 0, 1, …` for a batch of `n`.
pub fn labels(n: i64, classes: i64) -> Tensor {
    Tensor::arange(n, (Kind::Int64, Device::Cpu)).remainder(classes)
}

/// Checks a tensor drawn from U(±1/√fan_in): inside the bound, its extremes near the bound
/// (for large tensors), mean near 0 and standard deviation near bound/√3.
pub fn assert_default_init(t: &Tensor, fan_in: i64) {
    let bound = 1.0 / (fan_in as f64).sqrt();
    let n = t.numel() as f64;
    let max = t.abs().max().double_value(&[]);
    // The draws use the bound rounded to f32, which may be a hair above it.
    assert!(max <= bound.max(f64::from(bound as f32)), "max |w| {max} exceeds the bound {bound}");
    let mean = t.mean(Kind::Double).double_value(&[]);
    let std = t.to_kind(Kind::Double).std(true).double_value(&[]);
    let want_std = bound / 3f64.sqrt();
    // Standard errors: mean ≈ want_std/√n, std ≈ 0.45·want_std/√n (uniform); allow 5 of them.
    assert!(mean.abs() < 5.0 * want_std / n.sqrt(), "mean {mean} for bound {bound}, n {n}");
    assert!((std - want_std).abs() < 5.0 * 0.45 * want_std / n.sqrt() + 1e-12, "std {std}, want {want_std}, n {n}");
    if n >= 1000.0 {
        assert!(max > 0.99 * bound, "max |w| {max} well inside the bound {bound}");
    }
}

/// Runs forward and backward on a cross-entropy loss and checks that every tensor receives a
/// defined, finite, non-zero gradient of its own shape.
pub fn assert_grads_flow(model: &dyn Model, params: &[Tensor], x: &Tensor, y: &Tensor) {
    let params: Vec<Tensor> = params.iter().map(|t| t.detach().copy().set_requires_grad(true)).collect();
    let loss = forward_one(model, &params, x, &mut Mode::train(&mut noise(1))).cross_entropy_for_logits(y);
    loss.backward();
    for (i, p) in params.iter().enumerate() {
        let g = p.grad();
        assert!(g.defined(), "tensor {i}: no gradient");
        assert_eq!(g.size(), p.size(), "tensor {i}: gradient shape");
        assert!(g.isfinite().all().int64_value(&[]) == 1, "tensor {i}: non-finite gradient");
        assert!(g.abs().sum(Kind::Double).double_value(&[]) > 0.0, "tensor {i}: zero gradient");
    }
}
