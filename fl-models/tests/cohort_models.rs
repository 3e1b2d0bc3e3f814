//! The convolutional models in cohort form: for random small cohorts of `cnn3` and `resnet20`
//! with random parameters (and random BatchNorm statistics), client `c`'s logits in the cohort
//! equal its logits alone (`forward_one`) to 1e-5, in eval and in training mode, and in
//! training mode every client ends with the BatchNorm buffers it ends with alone, also when
//! clients are padded to the cohort's longest batch (the padding mask of the step).

use std::sync::Arc;

use fl_core::rng::{CohortNoise, Rng, TensorNoise};
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{Builder, DataSpec, Mode, Model, Params, Registry, Training, forward_one};
use proptest::prelude::*;
use rand::SeedableRng;

use fl_models as _;

fn build(name: &str, table: &str, spec: &DataSpec) -> fl_core::Result<Arc<dyn Model>> {
    let registry = Registry::get()?;
    let Builder::Model(build) = registry.component(fl_core::ComponentKind::Model, name, "test", "model")?.build else {
        unreachable!("registry keys builders by kind")
    };
    build(&Params::new("test", "model", toml::from_str(table).unwrap()), spec)
}

fn model(name: &str, spec: &DataSpec) -> Arc<dyn Model> {
    build(name, "", spec).unwrap()
}

fn uniform(shape: &[i64], seed: u64) -> Tensor {
    TensorNoise::new(seed).uniform(shape, Device::Cpu) * 2.0 - 1.0
}

/// Client `j`'s state: its own initialisation, with every tensor moved a little (running
/// variances kept positive) so that BatchNorm's buffers and affine parameters differ from 0
/// and 1 and between clients.
fn client_state(model: &dyn Model, j: u64, seed: u64) -> Vec<Tensor> {
    let p = model.init(&mut Rng::seed_from_u64(seed + j));
    p.iter()
        .enumerate()
        .map(|(i, (name, t))| {
            let moved = t + uniform(&t.size(), seed * 7919 + j * 131 + i as u64) * 0.1;
            if name.ends_with("running_var") { moved.abs() + 0.5 } else { moved }
        })
        .collect()
}

/// A cohort of `real.len()` clients of `name` on `[C, B, ...spec.input_shape]` inputs run as
/// one computation and each client alone: returns the largest difference (relative where a
/// value exceeds 1) of the logits on real samples and of the tensors after the pass (buffers
/// move in training mode). Client `j`
/// has `real[j]` real samples of the `batch`; the rest are padding.
fn cohort_vs_alone(name: &str, spec: &DataSpec, batch: i64, real: &[i64], train: bool, seed: u64) -> f64 {
    let model = model(name, spec);
    let clients = real.len() as i64;
    let states: Vec<Vec<Tensor>> = (0..clients as u64).map(|j| client_state(&*model, j, seed)).collect();
    let stacked: Vec<Tensor> = (0..states[0].len())
        .map(|i| Tensor::stack(&states.iter().map(|s| s[i].shallow_clone()).collect::<Vec<_>>(), 0))
        .collect();
    let mut shape = vec![clients, batch];
    shape.extend(&spec.input_shape);
    let x = uniform(&shape, seed + 1);
    let valid = Tensor::stack(
        &real
            .iter()
            .map(|&n| Tensor::arange(batch, (Kind::Int64, Device::Cpu)).lt(n).to_kind(Kind::Float))
            .collect::<Vec<_>>(),
        0,
    );
    let padded = real.iter().any(|&n| n < batch);
    let mut noise = CohortNoise::new((0..clients as u64).map(TensorNoise::new).collect(), Device::Cpu);
    let mut mode =
        if train { Mode::Train(Training { noise: &mut noise, valid: padded.then_some(&valid) }) } else { Mode::Eval };
    let logits = model.forward(&stacked, &x, &mut mode);
    assert_eq!(logits.size(), [clients, batch, spec.classes]);
    let mut worst = 0f64;
    let mut diff = |a: &Tensor, b: &Tensor| {
        assert_eq!(a.size(), b.size());
        // Relative above 1: running variances can be large.
        worst = worst.max(((a - b).abs() / b.abs().clamp_min(1.0)).max().double_value(&[]));
    };
    for (j, own) in states.iter().enumerate() {
        let (c, n) = (j as i64, real[j]);
        let mut alone_noise = CohortNoise::new(vec![TensorNoise::new(j as u64)], Device::Cpu);
        let mut mode = if train { Mode::train(&mut alone_noise) } else { Mode::Eval };
        let alone = forward_one(&*model, own, &x.get(c).narrow(0, 0, n), &mut mode);
        diff(&logits.get(c).narrow(0, 0, n), &alone);
        for (s, o) in stacked.iter().zip(own) {
            diff(&s.get(c), o);
        }
    }
    worst
}

fn image(channels: i64, side: i64) -> DataSpec {
    DataSpec { input_shape: vec![channels, side, side], classes: 10, vocab_size: None }
}

/// Real samples per client: all `batch`, or (padded) fewer for every client but the first,
/// at least `min`.
fn real_counts(clients: i64, batch: i64, padded: bool, min: i64) -> Vec<i64> {
    (0..clients).map(|j| if padded && j > 0 { (batch - j).max(min) } else { batch }).collect()
}

#[test]
fn both_models_are_registered_without_parameters() {
    let registry = Registry::get().unwrap();
    for (name, spec, params) in [("cnn3", image(1, 28), 19_146), ("resnet20", image(3, 32), 272_474)] {
        let c = registry.component(fl_core::ComponentKind::Model, name, "", "").unwrap();
        assert!((c.defaults)().is_empty(), "{name}");
        assert_eq!(model(name, &spec).structure().num_params(), params);
        let err = build(name, "width = 2", &spec).err().expect("unknown key").to_string();
        assert!(err.contains("width"), "{err}");
        let err = build(name, "", &DataSpec { input_shape: vec![784], ..spec }).err().expect("bad shape").to_string();
        assert!(err.contains(name) && err.contains("[784]"), "{err}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10))]

    #[test]
    fn cnn3_cohort_is_each_client_alone(
        clients in 1i64..4, batch in 1i64..4, channels in 1i64..3, side in 1i64..9,
        train in any::<bool>(), padded in any::<bool>(), seed in 0u64..1000,
    ) {
        let real = real_counts(clients, batch, padded, 1);
        let d = cohort_vs_alone("cnn3", &image(channels, side), batch, &real, train, seed);
        prop_assert!(d <= 1e-5, "max difference {}", d);
    }

    #[test]
    fn resnet20_cohort_is_each_client_alone_with_its_batchnorm_buffers(
        clients in 1i64..4, batch in 2i64..5, side in 5i64..11,
        train in any::<bool>(), padded in any::<bool>(), seed in 0u64..1000,
    ) {
        // At least 2 real samples: the last stage is 2×2 or 3×3, so every BatchNorm has more
        // than one value per channel.
        let real = real_counts(clients, batch, padded, 2);
        let d = cohort_vs_alone("resnet20", &image(3, side), batch, &real, train, seed);
        prop_assert!(d <= 1e-5, "max difference {}", d);
    }
}

#[test]
fn resnet20_cohort_of_cifar_images_with_padding_is_each_client_alone() {
    // The brief's case at full size: client 0 has B = 4 real samples, client 1 B − 2.
    for train in [false, true] {
        let d = cohort_vs_alone("resnet20", &image(3, 32), 4, &[4, 2], train, 3);
        assert!(d <= 1e-5, "train {train}: max difference {d}");
    }
}
