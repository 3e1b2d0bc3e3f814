//! The `sgd` trainer: segmenting a job changes nothing unless a model is merged in, gradient
//! masking freezes masked weights exactly, and the proximal term holds the model near its start.

use std::sync::Arc;

use fl_core::rng::{self, TensorNoise};
use fl_core::tch::Tensor;
use fl_core::testing::{TinyLinear, tiny_dataset};
use fl_core::trainer::PullInfo;
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{LocalTrainer, Model, ParamSet, TrainJob};

fn start_params() -> ParamSet {
    let w = Tensor::from_slice(&[0.5f32, -0.25, 0.1, 0.3]).reshape([2, 2]);
    ParamSet::new(vec!["w".into(), "b".into()], vec![w, Tensor::from_slice(&[0.0f32, 0.1])]).unwrap()
}

fn job(grad_mask: Option<Vec<Option<Tensor>>>) -> TrainJob {
    let data = tiny_dataset();
    TrainJob {
        model: Arc::new(TinyLinear::default()) as Arc<dyn Model>,
        params: start_params(),
        grad_mask,
        indices: Tensor::arange(data.len() as i64, fl_core::tch::kind::INT64_CPU),
        data,
        rng: rng::stream(3, &[1]),
        noise: TensorNoise::new(3),
    }
}

fn sgd(cfg: SgdConfig) -> Sgd {
    Sgd::new(SgdConfig { batch_size: 2, epochs: 3, momentum: 0.9, ..cfg })
}

#[test]
fn a_job_run_in_segments_equals_the_job_run_at_once() {
    let trainer = sgd(SgdConfig::default());
    let whole = trainer.train(job(None)).unwrap();
    let mut session = trainer.start(job(None)).unwrap();
    session.run_until(0.3).unwrap();
    session.run_until(0.7).unwrap();
    session.run_until(1.0).unwrap();
    let split = session.finish().unwrap();
    assert_eq!(whole.steps, 9, "3 epochs of 3 batches");
    assert_eq!(split.steps, 9);
    assert!(whole.params.equal(&split.params), "segmenting must not change the result");
    assert_eq!(whole.mean_loss, split.mean_loss);
    assert!(!whole.params.equal(&start_params()), "training moved the model");
}

#[test]
fn merging_a_pulled_model_mixes_with_the_pull_weight() {
    // With β = 1 the local model becomes the pulled one; with β = 0 nothing changes.
    let pulled = start_params().map(|t| t * 2.0);
    let info = PullInfo { base_version: 0, pulled_version: 4 };
    for (beta, expect_pulled) in [(1.0, true), (0.0, false)] {
        let trainer = sgd(SgdConfig { pull_weight: beta, ..Default::default() });
        let mut reference = trainer.start(job(None)).unwrap();
        reference.run_until(0.5).unwrap();
        let mut merged = trainer.start(job(None)).unwrap();
        merged.run_until(0.5).unwrap();
        merged.merge_pulled(&pulled, info).unwrap();
        let (reference, merged) = (reference.finish().unwrap(), merged.finish().unwrap());
        assert_eq!(merged.params.equal(&pulled), expect_pulled, "β = {beta}");
        assert_eq!(merged.params.equal(&reference.params), !expect_pulled, "β = {beta}");
    }
}

#[test]
fn gradient_masking_keeps_masked_weights_exactly_unchanged() {
    let mask_w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0]).reshape([2, 2]);
    let trainer = sgd(SgdConfig { weight_decay: 0.01, ..Default::default() });
    let out = trainer.train(job(Some(vec![Some(mask_w), None]))).unwrap();
    let before: Vec<f32> = Vec::try_from(&start_params().tensors()[0].flatten(0, -1)).unwrap();
    let after: Vec<f32> = Vec::try_from(&out.params.tensors()[0].flatten(0, -1)).unwrap();
    assert_eq!((after[1], after[2]), (before[1], before[2]), "masked elements are frozen bit for bit");
    assert_ne!(after[0], before[0]);
    assert_ne!(after[3], before[3]);
}

#[test]
fn the_proximal_term_keeps_the_model_closer_to_its_start() {
    let drift = |mu: f64| {
        let out = sgd(SgdConfig { prox_mu: mu, ..Default::default() }).train(job(None)).unwrap();
        out.params.sub(&start_params()).norm_sq().double_value(&[])
    };
    let (free, held) = (drift(0.0), drift(10.0));
    assert!(held < 0.5 * free, "drift with μ = 10: {held}, without: {free}");
}

#[test]
fn zero_init_only_masking_lets_masked_weights_train() {
    let mask_w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0]).reshape([2, 2]);
    let cfg = SgdConfig { masking: fl_core::trainer::sgd::Masking::ZeroInitOnly, ..Default::default() };
    let out = sgd(cfg).train(job(Some(vec![Some(mask_w), None]))).unwrap();
    let before: Vec<f32> = Vec::try_from(&start_params().tensors()[0].flatten(0, -1)).unwrap();
    let after: Vec<f32> = Vec::try_from(&out.params.tensors()[0].flatten(0, -1)).unwrap();
    assert!(after[1] != before[1] || after[2] != before[2], "masked-out weights train under zero-init-only");
}
