//! The convolutional models in cohort form: for random small cohorts of `cnn3`, `resnet20`,
//! `lenet5` and FedASMU's `cnn2`, `alexnet`, `vgg11` and `textcnn` with random parameters (and
//! random BatchNorm statistics, and dropout in training mode), client `c`'s logits in the cohort
//! equal its logits alone (`forward_one`) to 1e-5, in eval and in training mode, and in
//! training mode every client ends with the BatchNorm buffers it ends with alone, also when
//! clients are padded to the cohort's longest batch (the padding mask of the step).

use std::sync::Arc;

use fl_core::rng::{CohortNoise, Rng, TensorNoise};
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{Builder, DataSpec, Mode, Model, Params, Registry, forward_one};
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
/// and 1 and between clients. A drawn tensor moves by up to a tenth of its largest value, a
/// constant one (BatchNorm's) by up to 0.1: moving the small weights of a deep, wide model by
/// 0.1 would blow its activations up by orders of magnitude per layer.
fn client_state(model: &dyn Model, j: u64, seed: u64) -> Vec<Tensor> {
    let p = model.init(&mut Rng::seed_from_u64(seed + j));
    p.iter()
        .enumerate()
        .map(|(i, (name, t))| {
            let (lo, hi) = (t.min().double_value(&[]), t.max().double_value(&[]));
            let amount = if lo == hi { 0.1 } else { 0.1 * lo.abs().max(hi.abs()) };
            let moved = t + uniform(&t.size(), seed * 7919 + j * 131 + i as u64) * amount;
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
    cohort_vs_alone_with(name, "", spec, batch, real, train, seed)
}

/// [`cohort_vs_alone`] of the model built from the `[model]` keys `table`.
fn cohort_vs_alone_with(
    name: &str,
    table: &str,
    spec: &DataSpec,
    batch: i64,
    real: &[i64],
    train: bool,
    seed: u64,
) -> f64 {
    let model = build(name, table, spec).unwrap();
    let clients = real.len() as i64;
    let states: Vec<Vec<Tensor>> = (0..clients as u64).map(|j| client_state(&*model, j, seed)).collect();
    let stacked: Vec<Tensor> = (0..states[0].len())
        .map(|i| Tensor::stack(&states.iter().map(|s| s[i].shallow_clone()).collect::<Vec<_>>(), 0))
        .collect();
    let mut shape = vec![clients, batch];
    shape.extend(&spec.input_shape);
    let x = match spec.vocab_size {
        // Token ids in [0, V), about a quarter of them padding (id 0).
        Some(v) => {
            let u = (uniform(&shape, seed + 1) + 1.0) / 2.0;
            let id = (&u * (v - 1) as f64).to_kind(Kind::Int64) + 1;
            id.where_self(&u.ge(0.25), &id.zeros_like())
        }
        None => uniform(&shape, seed + 1),
    };
    let valid = Tensor::stack(
        &real
            .iter()
            .map(|&n| Tensor::arange(batch, (Kind::Int64, Device::Cpu)).lt(n).to_kind(Kind::Float))
            .collect::<Vec<_>>(),
        0,
    );
    let padded = real.iter().any(|&n| n < batch);
    let mut noise = CohortNoise::new((0..clients as u64).map(TensorNoise::new).collect(), Device::Cpu);
    let mut mode = if train { Mode::padded(&mut noise, padded.then_some(&valid)) } else { Mode::Eval };
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

/// The defaults of a model without keys of its own: the projection head's, off.
fn only_projection_dim() -> toml::Table {
    toml::from_str("projection_dim = 0").unwrap()
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
        assert_eq!((c.defaults)(), only_projection_dim(), "{name}");
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

fn text(vocab: i64, seq_len: i64, classes: i64) -> DataSpec {
    DataSpec { input_shape: vec![seq_len], classes, vocab_size: Some(vocab) }
}

#[test]
fn fedasmu_models_are_registered_with_their_parameter_counts() {
    let registry = Registry::get().unwrap();
    let cifar = |classes| DataSpec { input_shape: vec![3, 32, 32], classes, vocab_size: None };
    for (name, spec, params) in [
        ("cnn2", cifar(10), 297_066),
        ("cnn2", cifar(100), 2_889_156),
        ("alexnet", cifar(10), 23_272_266),
        ("vgg11", cifar(100), 9_274_532),
        ("textcnn", text(25_000, 256, 2), 2_620_902),
        ("resnet20", DataSpec { input_shape: vec![3, 64, 64], classes: 200, vocab_size: None }, 284_824),
        ("lenet5", DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None }, 61_706),
    ] {
        let c = registry.component(fl_core::ComponentKind::Model, name, "", "").unwrap();
        assert!(!c.summary.is_empty() && !c.paper.is_empty(), "{name}");
        assert_eq!(model(name, &spec).structure().num_params(), params, "{name}");
        let err = build(name, "width = 2", &spec).err().expect("unknown key").to_string();
        assert!(err.contains("width"), "{err}");
    }
    let defaults = |name| (registry.component(fl_core::ComponentKind::Model, name, "", "").unwrap().defaults)();
    assert_eq!(defaults("alexnet")["dropout"].as_float(), Some(0.5));
    let t = defaults("textcnn");
    assert_eq!(
        (t["dim"].as_integer(), t["filters"].as_integer(), t["dropout"].as_float()),
        (Some(100), Some(100), Some(0.5))
    );
    assert_eq!(t["widths"].as_array().unwrap().iter().map(|w| w.as_integer().unwrap()).collect::<Vec<_>>(), [3, 4, 5]);
    assert_eq!((defaults("cnn2"), defaults("vgg11")), (only_projection_dim(), only_projection_dim()));
    let small = build("textcnn", "dim = 4\nfilters = 2\nwidths = [2]\ndropout = 0.0", &text(10, 5, 2)).unwrap();
    // Embedding 10·4 + conv 2·4·2 + 2 + fc 2·2 + 2.
    assert_eq!(small.structure().num_params(), 40 + 18 + 6);
    let err = build("textcnn", "widths = [0]", &text(10, 5, 2)).err().unwrap().to_string();
    assert!(err.contains("model.widths"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn cnn2_cohort_is_each_client_alone(
        clients in 1i64..4, batch in 1i64..4, side in 3i64..12,
        train in any::<bool>(), padded in any::<bool>(), seed in 0u64..1000,
    ) {
        let real = real_counts(clients, batch, padded, 1);
        let d = cohort_vs_alone("cnn2", &image(3, side), batch, &real, train, seed);
        prop_assert!(d <= 1e-5, "max difference {}", d);
    }

    #[test]
    fn lenet5_cohort_is_each_client_alone(
        clients in 1i64..4, batch in 1i64..4, mnist in any::<bool>(),
        train in any::<bool>(), padded in any::<bool>(), seed in 0u64..1000,
    ) {
        let real = real_counts(clients, batch, padded, 1);
        let spec = if mnist { image(1, 28) } else { image(3, 32) };
        let d = cohort_vs_alone("lenet5", &spec, batch, &real, train, seed);
        prop_assert!(d <= 1e-5, "max difference {}", d);
    }

    #[test]
    fn textcnn_cohort_is_each_client_alone_with_its_dropout(
        clients in 1i64..4, batch in 1i64..5, seq_len in 5i64..20,
        train in any::<bool>(), padded in any::<bool>(), seed in 0u64..1000,
    ) {
        let real = real_counts(clients, batch, padded, 1);
        let d = cohort_vs_alone("textcnn", &text(50, seq_len, 2), batch, &real, train, seed);
        prop_assert!(d <= 1e-5, "max difference {}", d);
    }
}

/// Every (training mode, padded) pair.
const ALL_CASES: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];

/// The brief's case for the larger models, at full size: a cohort of 3 clients with their own
/// parameters, client 0 with B real samples and the others fewer where `padded`, in eval or in
/// training mode (dropout, BatchNorm batch statistics and buffer updates), for each of `cases`
/// `(train, padded)`.
fn full_size_cohort_of_three(name: &str, spec: &DataSpec, batch: i64, cases: &[(bool, bool)]) {
    for &(train, padded) in cases {
        let real = real_counts(3, batch, padded, 2);
        let d = cohort_vs_alone(name, spec, batch, &real, train, 11);
        assert!(d <= 1e-5, "{name} train {train} padded {padded}: max difference {d}");
    }
}

#[test]
fn cnn2_cohort_of_cifar_images_is_each_client_alone() {
    full_size_cohort_of_three("cnn2", &DataSpec { classes: 100, ..image(3, 32) }, 4, &ALL_CASES);
}

#[test]
fn alexnet_cohort_of_cifar_images_is_each_client_alone_with_its_dropout() {
    // Its 23 M parameters per client make each case slow on CPU: eval, and training with padding
    // (dropout draws for the real samples only).
    full_size_cohort_of_three("alexnet", &image(3, 32), 4, &[(false, false), (true, true)]);
}

#[test]
fn vgg11_cohort_of_cifar_images_is_each_client_alone_with_its_batchnorm_buffers() {
    full_size_cohort_of_three("vgg11", &image(3, 32), 4, &ALL_CASES);
}

#[test]
fn textcnn_cohort_of_imdb_sized_documents_is_each_client_alone_with_its_dropout() {
    full_size_cohort_of_three("textcnn", &text(5_000, 256, 2), 4, &ALL_CASES);
}

#[test]
fn resnet20_cohort_of_tiny_imagenet_images_is_each_client_alone() {
    // Tiny-ImageNet: 3×64×64, 200 classes; the last stage is 16×16, then the global pool.
    full_size_cohort_of_three("resnet20", &DataSpec { classes: 200, ..image(3, 64) }, 3, &ALL_CASES);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn a_projection_head_cohort_is_each_client_alone(
        clients in 1i64..4, batch in 2i64..4, train in any::<bool>(), padded in any::<bool>(), seed in 0u64..1000,
        name in prop::sample::select(vec!["lenet5", "vgg11", "mlp"]),
    ) {
        let spec = if name == "vgg11" { image(3, 32) } else { image(1, 28) };
        let real = real_counts(clients, batch, padded, 2);
        let d = cohort_vs_alone_with(name, "projection_dim = 8", &spec, batch, &real, train, seed);
        prop_assert!(d <= 1e-5, "max difference {}", d);
    }
}
