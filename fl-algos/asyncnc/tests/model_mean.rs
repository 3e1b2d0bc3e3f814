//! `model-mean` against hand computations: the mean of the participants' models (not of their
//! deltas on the current model), weights ∝ samples · multiplicity · staleness weight, and the
//! damped form; the `inverse-linear` staleness weight.

use fl_algo_asyncnc::{MeanMode, ModelMean, ModelMeanConfig};
use fl_algo_baselines::InverseLinear;
use fl_core::mask::Mask;
use fl_core::tch::Tensor;
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, ParamSet, StalenessCtx, StalenessFn, UpdateStaleness};

fn params(v: [f32; 2]) -> ParamSet {
    ParamSet::new(vec!["p".into()], vec![Tensor::from_slice(&v)]).unwrap()
}

fn update(base: [f32; 2], delta: [f32; 2], samples: usize, multiplicity: u32) -> ClientUpdate {
    ClientUpdate {
        client: 0,
        job: 0,
        base_version: 0,
        base: params(base),
        mask: Mask::Full,
        choice: None,
        delta: params(delta),
        pulled_version: None,
        samples,
        multiplicity,
        train_loss: 0.0,
        lr_sum: 0.0,
        pull_merge: None,
        dispatched_at: 0,
        arrived_at: 0,
    }
}

fn aggregate(mode: MeanMode, updates: &[ClientUpdate], weights: &[f64]) -> Vec<f32> {
    let staleness: Vec<UpdateStaleness> =
        weights.iter().map(|&weight| UpdateStaleness { versions: 0, seconds: 0.0, weight }).collect();
    let ctx =
        AggregateCtx { version: 5, num_clients: 10, total_samples: 0, now: 0, staleness: &staleness, structure: None };
    let out = ModelMean::new(ModelMeanConfig { mode }).aggregate(&params([1.0, 2.0]), updates, &ctx).unwrap();
    Vec::try_from(&out.tensors()[0]).unwrap()
}

fn assert_close(got: &[f32], want: &[f64]) {
    for (g, w) in got.iter().zip(want) {
        assert!((f64::from(*g) - w).abs() < 1e-6, "got {got:?}, want {want:?}");
    }
}

#[test]
fn the_mean_of_models_weighs_samples_multiplicity_and_staleness() {
    // Global θ = (1, 2). A started from θ and moved by (1, 0): θ_A = (2, 2), 100 samples,
    // weight 1. B started from a stale (0, 0) and moved by (4, 4): θ_B = (4, 4), 300 samples,
    // staleness weight 0.5. Raw weights 100 and 150, normalised 0.4 and 0.6:
    // θ' = 0.4·(2, 2) + 0.6·(4, 4) = (3.2, 3.2). A mean of the deltas on θ would give
    // (1, 2) + 0.4·(1, 0) + 0.6·(4, 4) = (3.8, 4.4) instead.
    let ups = [update([1.0, 2.0], [1.0, 0.0], 100, 1), update([0.0, 0.0], [4.0, 4.0], 300, 1)];
    assert_close(&aggregate(MeanMode::Replace, &ups, &[1.0, 0.5]), &[3.2, 3.2]);
    // With s ≡ 1: weights 0.25 and 0.75, θ' = (3.5, 3.5).
    assert_close(&aggregate(MeanMode::Replace, &ups, &[1.0, 1.0]), &[3.5, 3.5]);
    // A drawn twice and trained once (multiplicity 2): raw 200 and 150, θ' = (20/7, 20/7).
    let twice = [update([1.0, 2.0], [1.0, 0.0], 100, 2), update([0.0, 0.0], [4.0, 4.0], 300, 1)];
    assert_close(&aggregate(MeanMode::Replace, &twice, &[1.0, 0.5]), &[20.0 / 7.0, 20.0 / 7.0]);
}

#[test]
fn the_damped_form_moves_the_global_model_by_unnormalised_staleness_weights() {
    // Size shares 0.25 and 0.75, times the staleness weights 1 and 0.5: 0.25 and 0.375.
    // θ' = (1, 2) + 0.25·((2, 2) − (1, 2)) + 0.375·((4, 4) − (1, 2)) = (2.375, 2.75).
    let ups = [update([1.0, 2.0], [1.0, 0.0], 100, 1), update([0.0, 0.0], [4.0, 4.0], 300, 1)];
    assert_close(&aggregate(MeanMode::Damped, &ups, &[1.0, 0.5]), &[2.375, 2.75]);
    // Every participant equally stale (0.5 each): the damped form still halves the step,
    // (1, 2) + 0.5·(0.25·(1, 0) + 0.75·(3, 2)) = (2.25, 2.75); the normalised mean would not.
    assert_close(&aggregate(MeanMode::Damped, &ups, &[0.5, 0.5]), &[2.25, 2.75]);
    assert_close(&aggregate(MeanMode::Replace, &ups, &[0.5, 0.5]), &[3.5, 3.5]);
}

#[test]
fn zero_weights_are_an_error() {
    let ups = [update([1.0, 2.0], [1.0, 0.0], 100, 1)];
    let staleness = [UpdateStaleness { versions: 0, seconds: 0.0, weight: 0.0 }];
    let ctx =
        AggregateCtx { version: 5, num_clients: 10, total_samples: 0, now: 0, staleness: &staleness, structure: None };
    let err = ModelMean::new(ModelMeanConfig::default()).aggregate(&params([1.0, 2.0]), &ups, &ctx).unwrap_err();
    assert!(err.to_string().contains("model-mean"), "{err}");
}

#[test]
fn inverse_linear_is_one_over_one_plus_a_s() {
    // a = 0.01 (the default): s(0) = 1, s(5) = 1/1.05 = 0.952381 (nearly inert);
    // a = 0.5: s(4) = 1/3.
    let global = params([1.0, 2.0]);
    let u = update([1.0, 2.0], [0.0, 0.0], 1, 1);
    let w = |f: &mut dyn StalenessFn, versions| {
        f.weight(&StalenessCtx { versions, seconds: 1000.0, update: &u, global: &global })
    };
    let mut default = InverseLinear::default();
    assert_eq!(w(&mut default, 0), 1.0);
    assert!((w(&mut default, 5) - 0.952_380_952_4).abs() < 1e-9);
    assert!((w(&mut InverseLinear { a: 0.5 }, 4) - 1.0 / 3.0).abs() < 1e-12);
}
