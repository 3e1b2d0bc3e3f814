//! The job memory estimate against measurement: the activations the ViT's count predicts are
//! the heap growth across a training forward pass (glibc's in-use bytes, where libtorch's CPU
//! tensors live), within 6%, for full, narrowed and depth-window sub-models, with and without
//! dropout; parameters, gradients and Adan's four states follow the shapes.

use fl_core::rng::{CohortNoise, Rng, TensorNoise};
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{DataSpec, Mask, Mode, Model, forward_one, job_memory};
use fl_models::{Vit, VitConfig};
use rand::SeedableRng;

/// The heap is shared by the tests of this file: a measurement runs alone.
static HEAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn vit(hidden: i64, mlp: i64, heads: i64, depth: i64, dropout: f64) -> Vit {
    let cfg = VitConfig {
        depth: Some(depth),
        hidden: Some(hidden),
        mlp: Some(mlp),
        heads: Some(heads),
        patch: Some(4),
        dropout,
        exits: vec![1],
        ..VitConfig::default()
    };
    Vit::new(cfg, &DataSpec { input_shape: vec![3, 32, 32], classes: 10, vocab_size: None }).unwrap()
}

/// Heap bytes that a training forward pass of `mask`'s sub-model on `batch` samples leaves
/// allocated until its backward pass (the loss and its graph alive).
fn measured_activations(m: &Vit, mask: &Mask, batch: i64) -> f64 {
    let full = m.init(&mut Rng::seed_from_u64(1));
    let sub = mask.extract(&full);
    let frozen = mask.frozen(m.structure().tensors.len());
    let p: Vec<Tensor> = sub.tensors().iter().zip(&frozen).map(|(t, &f)| t.copy().set_requires_grad(!f)).collect();
    let x = TensorNoise::new(3).uniform(&[batch, 3, 32, 32], Device::Cpu);
    let y = Tensor::zeros([batch], (Kind::Int64, Device::Cpu));
    let pass = || {
        let mut noise = CohortNoise::new(vec![TensorNoise::new(1)], Device::Cpu);
        forward_one(m, &p, &x, &mut Mode::train(&mut noise)).cross_entropy_for_logits(&y)
    };
    pass().backward(); // Warm-up: libtorch's one-time allocations.
    let before = fl_core::engine::heap_bytes_in_use().expect("glibc heap statistics");
    let loss = pass();
    let after = fl_core::engine::heap_bytes_in_use().unwrap();
    drop(loss);
    after as f64 - before as f64
}

#[test]
fn the_vits_activation_count_matches_the_heap_growth_of_a_forward_pass() {
    let _alone = HEAP.lock().unwrap();
    for (hidden, mlp, heads, depth, dropout, batch) in
        [(64, 128, 4, 2, 0.0, 32), (128, 512, 8, 4, 0.0, 64), (128, 256, 8, 2, 0.1, 16), (96, 384, 6, 3, 0.1, 24)]
    {
        let m = vit(hidden, mlp, heads, depth, dropout);
        let s = m.structure();
        let masks = [
            ("full", Mask::Full),
            ("half width", s.width_prefix_mask(0.5).unwrap()),
            ("window 1..top", s.submodel(1..depth as usize, &vec![None; s.groups.len()]).unwrap()),
        ];
        for (what, mask) in masks {
            let estimate = job_memory(&m, &s.shapes(), &mask, 4, batch as usize).activations;
            let measured = measured_activations(&m, &mask, batch);
            let ratio = measured / estimate;
            assert!(
                (0.94..1.06).contains(&ratio),
                "D {hidden}, MLP {mlp}, {depth} blocks, dropout {dropout}, batch {batch}, {what}: measured {measured:.0} B, estimated {estimate:.0} B (ratio {ratio:.3})"
            );
        }
    }
}

#[test]
fn with_decisions_the_count_matches_the_heap_growth_too() {
    let _alone = HEAP.lock().unwrap();
    for (hidden, mlp, heads, depth, dropout, batch) in [(64, 128, 4, 2, 0.0, 32), (96, 384, 6, 3, 0.1, 24)] {
        let plain = vit(hidden, mlp, heads, depth, dropout);
        let cfg = VitConfig { decisions: Some(Default::default()), ..plain.config().clone() };
        let m = Vit::new(cfg, &DataSpec { input_shape: vec![3, 32, 32], classes: 10, vocab_size: None }).unwrap();
        let estimate = job_memory(&m, &m.structure().shapes(), &Mask::Full, 4, batch as usize).activations;
        let measured = measured_activations(&m, &Mask::Full, batch);
        let ratio = measured / estimate;
        assert!(
            (0.94..1.06).contains(&ratio),
            "D {hidden}, {depth} blocks, dropout {dropout}: measured {measured:.0} B, estimated {estimate:.0} B (ratio {ratio:.3})"
        );
    }
}

#[test]
fn parameters_gradients_and_optimizer_state_follow_the_sub_models_shapes() {
    let _alone = HEAP.lock().unwrap();
    let m = vit(64, 128, 4, 2, 0.0);
    let s = m.structure();
    let shapes = s.shapes();
    let n = s.num_params() as f64;
    let full = job_memory(&m, &shapes, &Mask::Full, 4, 8);
    assert_eq!((full.parameters, full.gradients, full.optimizer), (4.0 * n, 4.0 * n, 16.0 * n));
    // The window 1..2: block 1 and the head trained; the stem and block 0 held frozen; the exit
    // after block 1 dropped.
    let window = s.submodel(1..2, &vec![None; s.groups.len()]).unwrap();
    let w = job_memory(&m, &shapes, &window, 2, 8);
    let count = |prefix: &[&str]| -> f64 {
        s.tensors
            .iter()
            .filter(|t| prefix.iter().any(|p| t.name.starts_with(p)))
            .map(|t| t.shape.iter().product::<i64>() as f64)
            .sum()
    };
    let trained = count(&["blocks.1.", "norm.", "head."]);
    let frozen = count(&["cls_token", "pos_embed", "patch_embed", "blocks.0."]);
    assert_eq!(w.parameters, 4.0 * (trained + frozen));
    assert_eq!((w.gradients, w.optimizer), (4.0 * trained, 8.0 * trained));
    assert!(w.activations < 0.6 * full.activations, "frozen blocks record nothing");
    assert_eq!(w.total(), w.parameters + w.gradients + w.optimizer + w.activations);
}
