//! `clipped-mean` against hand-computed numbers.

use fl_core::tch::Tensor;
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, FromConfig, Mask, ParamSet, UpdateStaleness};
use fl_plugin_template::{ClippedMean, ClippedMeanConfig};

fn set(v: &[f32]) -> ParamSet {
    ParamSet::new(vec!["w".into()], vec![Tensor::from_slice(v)]).unwrap()
}

fn update(delta: &[f32], samples: usize) -> ClientUpdate {
    fl_core::testing::client_update(set(&[0.0, 0.0]), set(delta), Mask::Full, samples)
}

fn aggregate(weights: [f64; 2]) -> Vec<f32> {
    let mut agg = ClippedMean::from_config(ClippedMeanConfig { max_norm: 1.0 }).unwrap();
    // Δ₁ = (3, 4) has norm 5 and is clipped to (0.6, 0.8); Δ₂ = (0.3, 0.4) (norm 0.5) is kept.
    let updates = [update(&[3.0, 4.0], 1), update(&[0.3, 0.4], 3)];
    let staleness = weights.map(|weight| UpdateStaleness { versions: 0, seconds: 0.0, weight });
    let ctx =
        AggregateCtx { version: 0, num_clients: 2, total_samples: 0, now: 0, staleness: &staleness, structure: None };
    let next = agg.aggregate(&set(&[1.0, 1.0]), &updates, &ctx).unwrap();
    Vec::<f32>::try_from(&next.tensors()[0]).unwrap()
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert!(got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "got {got:?}, want {want:?}");
}

#[test]
fn deltas_are_clipped_then_averaged_by_samples_and_staleness_weight() {
    // Weights 1·1 and 3·1: 1 + ¼·(0.6, 0.8) + ¾·(0.3, 0.4) = (1.375, 1.5).
    assert_close(&aggregate([1.0, 1.0]), &[1.375, 1.5]);
    // The first update's staleness weight 0 leaves the second alone: 1 + (0.3, 0.4).
    assert_close(&aggregate([0.0, 1.0]), &[1.3, 1.4]);
    // Every weight 0: the model stays.
    assert_close(&aggregate([0.0, 0.0]), &[1.0, 1.0]);
}

#[test]
fn a_non_positive_bound_is_refused_with_its_key() {
    let e = ClippedMean::from_config(ClippedMeanConfig { max_norm: 0.0 }).err().unwrap();
    assert_eq!(e.key, "max_norm");
}
