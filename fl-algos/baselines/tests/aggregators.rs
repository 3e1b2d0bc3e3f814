//! Golden tests of the baseline aggregators against hand-computed numbers, and a conformance
//! suite every registered aggregator must pass.

use fl_algo_baselines::{
    AsoFed, AsoFedConfig, AsyncMix, AsyncMixConfig, BayesianMask, BayesianMaskConfig, BufferedMean, BufferedMeanConfig,
    Combine, CoverageMean, CoverageMeanConfig, Dynamic, DynamicConfig, FeatureAttention, InverseTime, LayerShrinking,
    LayerShrinkingConfig, MixTarget, Polynomial, Port, PortConfig, WeightedMean, WeightedMeanConfig, Weighting,
};
use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::tch::Tensor;
use fl_core::{
    AggregateCtx, Aggregator, ClientUpdate, Mask, ParamSet, StalenessCtx, StalenessFn, StructuredMask, UpdateStaleness,
};

fn set(values: &[&[f32]]) -> ParamSet {
    let names = (0..values.len()).map(|i| format!("p{i}")).collect();
    ParamSet::new(names, values.iter().map(|v| Tensor::from_slice(v)).collect()).unwrap()
}

fn values(p: &ParamSet) -> Vec<Vec<f32>> {
    p.tensors().iter().map(|t| Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap()).collect()
}

fn update(base: &ParamSet, delta: ParamSet, mask: Mask, samples: usize, base_version: u64) -> ClientUpdate {
    ClientUpdate { base_version, ..fl_core::testing::client_update(base.shallow_clone(), delta, mask, samples) }
}

fn fresh(n: usize) -> Vec<UpdateStaleness> {
    vec![UpdateStaleness { versions: 0, seconds: 0.0, weight: 1.0 }; n]
}

fn aggregate(
    agg: &mut dyn Aggregator,
    global: &ParamSet,
    updates: &[ClientUpdate],
    staleness: &[UpdateStaleness],
) -> Vec<Vec<f32>> {
    // The federation: the clients of these updates.
    let total_samples = updates.iter().map(|u| u.samples).sum();
    let ctx = AggregateCtx { version: 3, num_clients: 3, total_samples, now: 0, staleness, structure: None };
    values(&agg.aggregate(global, updates, &ctx).unwrap())
}

fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() < 1e-6, "got {got:?}, want {want:?}");
        }
    }
}

#[test]
fn feddyn_server_keeps_h_across_rounds() {
    // m = 3 clients (the helper's context), α = 0.1, θ = [1, 2]; round 1: Δ_A = [1, 0],
    // Δ_B = [0, 2]: h = −(0.1/3)[1, 2] = [−1/30, −2/30], θ = [1, 2] + [0.5, 1] − h/0.1
    // = [1.5 + 1/3, 3 + 2/3]. Round 2: one update Δ = 0: h stays, θ moves by −h/α again.
    let mut dynamic = Dynamic::new(DynamicConfig { alpha: 0.1 });
    let x = set(&[&[1.0, 2.0]]);
    let ups = [update(&x, set(&[&[1.0, 0.0]]), Mask::Full, 1, 3), update(&x, set(&[&[0.0, 2.0]]), Mask::Full, 3, 3)];
    let x1 = vec![1.5 + 1.0 / 3.0, 3.0 + 2.0 / 3.0];
    assert_close(&aggregate(&mut dynamic, &x, &ups, &fresh(2)), std::slice::from_ref(&x1));
    let g1 = set(&[&x1]);
    let still = [update(&g1, set(&[&[0.0, 0.0]]), Mask::Full, 1, 3)];
    assert_close(&aggregate(&mut dynamic, &g1, &still, &fresh(1)), &[vec![x1[0] + 1.0 / 3.0, x1[1] + 2.0 / 3.0]]);
}

#[test]
fn port_weighs_by_samples_agreement_with_the_drift_and_freshness() {
    let mut port = Port::new(PortConfig::default());
    let stale = |vs: &[u64]| -> Vec<UpdateStaleness> {
        vs.iter().map(|&versions| UpdateStaleness { versions, seconds: 0.0, weight: 1.0 }).collect()
    };
    let mut at = |version: u64, global: &ParamSet, ups: &[ClientUpdate], s: &[UpdateStaleness]| {
        let ctx = AggregateCtx { version, num_clients: 3, total_samples: 0, now: 0, staleness: s, structure: None };
        values(&port.aggregate(global, ups, &ctx).unwrap())
    };
    // Versions 0 and 1: one update each, weight 1 whatever its terms: [0, 0] → [1, 0] → [1, 1].
    let g0 = set(&[&[0.0, 0.0]]);
    assert_close(&at(0, &g0, &[update(&g0, set(&[&[1.0, 0.0]]), Mask::Full, 1, 0)], &stale(&[0])), &[vec![1.0, 0.0]]);
    let g1 = set(&[&[1.0, 0.0]]);
    assert_close(&at(1, &g1, &[update(&g1, set(&[&[0.0, 1.0]]), Mask::Full, 1, 1)], &stale(&[0])), &[vec![1.0, 1.0]]);
    // Version 2: the drift since version 0 is [1, 1].
    // A: n = 1, s = 0 (cosine not taken: 1), Δ = [1, 0]: raw = 1/4 · (1 + 10/10) = 0.5.
    // B: n = 3, s = 3, Δ = [-1, 3]: cos = 2 / (√10 √2) = 1/√5, raw = 3/4 · ((1 + 1/√5)/2 + 10/13).
    // p = raw / Σ raw; the new model is [1, 1] + p_A [1, 0] + p_B [-1, 3].
    let g2 = set(&[&[1.0, 1.0]]);
    let ups = [update(&g2, set(&[&[1.0, 0.0]]), Mask::Full, 1, 2), update(&g2, set(&[&[-1.0, 3.0]]), Mask::Full, 3, 0)];
    let raw_b = 0.75 * ((1.0 + 1.0 / 5f64.sqrt()) / 2.0 + 10.0 / 13.0);
    let (pa, pb) = (0.5 / (0.5 + raw_b), raw_b / (0.5 + raw_b));
    let want = vec![(1.0 + pa - pb) as f32, (1.0 + 3.0 * pb) as f32];
    assert_close(&at(2, &g2, &ups, &stale(&[0, 3])), &[want]);
}

#[test]
fn layer_shrinking_scales_each_layer_by_its_own_gamma() {
    // Layers: [fc.weight, fc.bias] (closed by the bias) and [out.weight].
    // w = fc.weight [3, 4], fc.bias [0], out.weight [2]: ‖w_fc‖ = 5, ‖w_out‖ = 2.
    // A: n = 1, Δ = [1, 0], [0], [1]; B: n = 3, Δ = [-1, 0], [2], [1]. p = [1/4, 3/4].
    // Step: fc.weight [-0.5, 0], fc.bias [1.5], out [1]; ‖step_fc‖ = √2.5.
    // Unweighted mean Δ: fc [0, 0], [1]; out [1]. Spreads: A fc (1, 0, -1) and B fc (-1, 0, 1),
    // both √2; out 0 for both. β = 0.1: τ_fc = 0.1 √2 (inside [0.01, 0.2]), τ_out = 0 → 0.01.
    // γ_fc = 5 / (5 + 0.1 √2 · √2.5) = 5 / (5 + √0.05); γ_out = 2 / (2 + 0.01 · 1) = 2 / 2.01.
    // New: γ_fc · [2.5, 4], γ_fc · [1.5], γ_out · [3].
    let names = vec!["fc.weight".to_string(), "fc.bias".to_string(), "out.weight".to_string()];
    let named = |v: &[&[f32]]| ParamSet::new(names.clone(), v.iter().map(|v| Tensor::from_slice(v)).collect()).unwrap();
    let x = named(&[&[3.0, 4.0], &[0.0], &[2.0]]);
    let ups = [
        update(&x, named(&[&[1.0, 0.0], &[0.0], &[1.0]]), Mask::Full, 1, 3),
        update(&x, named(&[&[-1.0, 0.0], &[2.0], &[1.0]]), Mask::Full, 3, 3),
    ];
    let g_fc = (5.0 / (5.0 + 0.05f64.sqrt())) as f32;
    let g_out = (2.0 / 2.01) as f32;
    let mut lws = LayerShrinking::new(LayerShrinkingConfig { beta: 0.1, ..Default::default() });
    let want = [vec![2.5 * g_fc, 4.0 * g_fc], vec![1.5 * g_fc], vec![3.0 * g_out]];
    assert_close(&aggregate(&mut lws, &x, &ups, &fresh(2)), &want);
    // β = 1: τ_fc = √2 is clamped to 0.2, so γ_fc = 5 / (5 + 0.2 √2.5).
    let g_fc = (5.0 / (5.0 + 0.2 * 2.5f64.sqrt())) as f32;
    let mut lws = LayerShrinking::new(LayerShrinkingConfig { beta: 1.0, ..Default::default() });
    let want = [vec![2.5 * g_fc, 4.0 * g_fc], vec![1.5 * g_fc], vec![3.0 * g_out]];
    assert_close(&aggregate(&mut lws, &x, &ups, &fresh(2)), &want);
}

#[test]
fn weighted_mean_by_samples_uniform_and_server_lr() {
    // x = [1, 2]; A: n=1, Δ=[1, 0]; B: n=3, Δ=[-1, 4].
    // Samples: p = [1/4, 3/4], step = [1/4 - 3/4, 3] = [-0.5, 3] → [0.5, 5].
    // Uniform: p = [1/2, 1/2], step = [0, 2] → [1, 4]. Samples with η = 0.5 → [0.75, 3.5].
    let x = set(&[&[1.0, 2.0]]);
    let ups = [update(&x, set(&[&[1.0, 0.0]]), Mask::Full, 1, 3), update(&x, set(&[&[-1.0, 4.0]]), Mask::Full, 3, 3)];
    let mut samples = WeightedMean::new(WeightedMeanConfig::default());
    assert_close(&aggregate(&mut samples, &x, &ups, &fresh(2)), &[vec![0.5, 5.0]]);
    let mut uniform = WeightedMean::new(WeightedMeanConfig { weighting: Weighting::Uniform, ..Default::default() });
    assert_close(&aggregate(&mut uniform, &x, &ups, &fresh(2)), &[vec![1.0, 4.0]]);
    let mut half = WeightedMean::new(WeightedMeanConfig { server_lr: 0.5, ..Default::default() });
    assert_close(&aggregate(&mut half, &x, &ups, &fresh(2)), &[vec![0.75, 3.5]]);
}

#[test]
fn coverage_mean_keeps_uncovered_elements() {
    // x = [1, 2, 3]; A: n=1, mask [1,1,0], Δ=[2, 4, 0]; B: n=3, mask [1,0,0], Δ=[-2, 0, 0].
    // den = [1/4 + 3/4, 1/4, 0], num = [2/4 - 6/4, 4/4, 0] → step = [-1, 4, 0] → [0, 6, 3].
    let x = set(&[&[1.0, 2.0, 3.0]]);
    let m = |v: &[f32]| Mask::Elementwise(vec![Some(Tensor::from_slice(v))]);
    let ups = [
        update(&x, set(&[&[2.0, 4.0, 0.0]]), m(&[1.0, 1.0, 0.0]), 1, 3),
        update(&x, set(&[&[-2.0, 0.0, 0.0]]), m(&[1.0, 0.0, 0.0]), 3, 3),
    ];
    let mut agg = CoverageMean::new(CoverageMeanConfig::default());
    assert_close(&aggregate(&mut agg, &x, &ups, &fresh(2)), &[vec![0.0, 6.0, 3.0]]);
}

#[test]
fn coverage_mean_with_a_structured_row_mask() {
    // W = [[1,1],[1,1]]; A trains row 0 only (Δ=[[1,1],[0,0]]), B the whole tensor (Δ=3).
    // Uniform weights: row 0 = 1 + (1+3)/2 = 3, row 1 = 1 + 3 = 4.
    let x = ParamSet::new(vec!["w".into()], vec![Tensor::ones([2, 2], fl_core::tch::kind::FLOAT_CPU)]).unwrap();
    let row0 = Mask::Structured(StructuredMask::new(vec![vec![Some(vec![0]), None]]));
    let da =
        ParamSet::new(vec!["w".into()], vec![Tensor::from_slice(&[1.0f32, 1.0, 0.0, 0.0]).reshape([2, 2])]).unwrap();
    let db = ParamSet::new(vec!["w".into()], vec![Tensor::full([2, 2], 3.0, fl_core::tch::kind::FLOAT_CPU)]).unwrap();
    let ups = [update(&x, da, row0, 1, 3), update(&x, db, Mask::Full, 1, 3)];
    let mut agg = CoverageMean::new(CoverageMeanConfig { weighting: Weighting::Uniform, ..Default::default() });
    assert_close(&aggregate(&mut agg, &x, &ups, &fresh(2)), &[vec![3.0, 3.0, 4.0, 4.0]]);
}

#[test]
fn fedasync_mixing_with_polynomial_staleness() {
    // α = 0.6, a = 0.5. First arrival: staleness 3 → s = 4^-0.5 = 0.5 → α_t = 0.3;
    // x = [1, 1], x_new = [0,0] + [2, 4] → 0.7·[1,1] + 0.3·[2,4] = [1.3, 1.9].
    // Second arrival: staleness 0 → α_t = 0.6, x_new = [1,1] + [1,-1] = [2, 0]
    // → 0.4·[1.3, 1.9] + 0.6·[2, 0] = [1.72, 0.76].
    let x = set(&[&[1.0, 1.0]]);
    let base0 = set(&[&[0.0, 0.0]]);
    let ups =
        [update(&base0, set(&[&[2.0, 4.0]]), Mask::Full, 5, 0), update(&x, set(&[&[1.0, -1.0]]), Mask::Full, 5, 3)];
    let mut poly = Polynomial { a: 0.5 };
    let staleness: Vec<UpdateStaleness> = ups
        .iter()
        .map(|u| {
            let versions = 3 - u.base_version;
            let weight = poly.weight(&StalenessCtx { versions, seconds: 0.0, update: u, global: &x });
            UpdateStaleness { versions, seconds: 0.0, weight }
        })
        .collect();
    assert_eq!(staleness[0].weight, 0.5);
    let mut agg = AsyncMix::new(AsyncMixConfig { alpha: 0.6, ..Default::default() });
    assert_close(&aggregate(&mut agg, &x, &ups[..1], &staleness[..1]), &[vec![1.3, 1.9]]);
    assert_close(&aggregate(&mut agg, &x, &ups, &staleness), &[vec![1.72, 0.76]]);
}

#[test]
fn delta_mixing_steps_by_the_clients_change() {
    // x = [1, 1]; the client started from [0, 0] and moved by Δ = [2, 4]; α = 0.6 at weight
    // 0.5: x + 0.3 Δ = [1.6, 2.2] (mixing towards its model would give [1.3, 1.9]).
    let x = set(&[&[1.0, 1.0]]);
    let ups = [update(&set(&[&[0.0, 0.0]]), set(&[&[2.0, 4.0]]), Mask::Full, 5, 0)];
    let staleness = [UpdateStaleness { versions: 3, seconds: 0.0, weight: 0.5 }];
    let mut agg = AsyncMix::new(AsyncMixConfig { alpha: 0.6, target: MixTarget::Delta, ..Default::default() });
    assert_close(&aggregate(&mut agg, &x, &ups, &staleness), &[vec![1.6, 2.2]]);
}

#[test]
fn mean_mixing_merges_each_element_towards_the_weighted_mean_of_its_trainers() {
    // x = [1, 1, 1], α = 0.5. A (1 sample) trained elements 0, 1 to [3, 3]; B (3 samples)
    // trained element 1 to 5. Element 0: 1 + 0.5 (3 − 1) = 2. Element 1: target
    // (3 + 3·5)/4 = 4.5, 1 + 0.5 · 3.5 = 2.75; with B at staleness weight 0.5 the rate is
    // α (1 + 3·0.5)/4: 1 + 0.5 · 3.5 · 0.625 = 2.09375. Element 2: nobody, stays 1.
    let x = set(&[&[1.0, 1.0, 1.0]]);
    let elementwise = |m: &[f32]| Mask::Elementwise(vec![Some(Tensor::from_slice(m))]);
    let ups = [
        update(&x, set(&[&[2.0, 2.0, 0.0]]), elementwise(&[1.0, 1.0, 0.0]), 1, 3),
        update(&x, set(&[&[0.0, 4.0, 0.0]]), elementwise(&[0.0, 1.0, 0.0]), 3, 3),
    ];
    let mut agg = AsyncMix::new(AsyncMixConfig { alpha: 0.5, combine: Combine::Mean, ..Default::default() });
    assert_close(&aggregate(&mut agg, &x, &ups, &fresh(2)), &[vec![2.0, 2.75, 1.0]]);
    let stale = [fresh(1)[0], UpdateStaleness { versions: 1, seconds: 0.0, weight: 0.5 }];
    assert_close(&aggregate(&mut agg, &x, &ups, &stale), &[vec![2.0, 2.09375, 1.0]]);
}

#[test]
fn fedbuff_buffered_step() {
    // K = 2, x = [1, 1]; Δ1 = [2, 0] at staleness 0 (w = 1), Δ2 = [0, 4] at staleness 3
    // (w = 1/√4 = 0.5): x + η/2 (Δ1 + 0.5 Δ2) = [1,1] + η [1, 1] → [2, 2] (η = 1), [1.5, 1.5] (η = 0.5).
    let x = set(&[&[1.0, 1.0]]);
    let ups = [update(&x, set(&[&[2.0, 0.0]]), Mask::Full, 1, 3), update(&x, set(&[&[0.0, 4.0]]), Mask::Full, 1, 0)];
    let staleness = [
        UpdateStaleness { versions: 0, seconds: 0.0, weight: 1.0 },
        UpdateStaleness { versions: 3, seconds: 0.0, weight: 1.0 / (1.0f64 + 3.0).sqrt() },
    ];
    let mut agg = BufferedMean::new(BufferedMeanConfig::default());
    assert_close(&aggregate(&mut agg, &x, &ups, &staleness), &[vec![2.0, 2.0]]);
    let mut half = BufferedMean::new(BufferedMeanConfig { server_lr: 0.5 });
    assert_close(&aggregate(&mut half, &x, &ups, &staleness), &[vec![1.5, 1.5]]);
}

/// Aggregators whose result must not depend on the order of the updates, and that return a
/// single fresh full-mask update's model unchanged (with their default parameters).
const MEAN_LIKE: [&str; 3] = ["weighted-mean", "coverage-mean", "buffered-mean"];

/// Aggregators whose global model is not a mix of client models: FedPM's server turns the
/// clients' scores into sampled masks and returns the posterior's mode (its own tests above).
const NOT_MIXING: [&str; 1] = ["bayesian-mask"];

#[test]
fn every_registered_aggregator_conforms() {
    let registry = Registry::get().unwrap();
    let x = set(&[&[1.0, -2.0, 0.5], &[3.0]]);
    let delta_a = || set(&[&[0.5, 1.0, -1.0], &[2.0]]);
    let delta_b = || set(&[&[-1.5, 0.0, 2.0], &[-1.0]]);
    let a = || update(&x, delta_a(), Mask::Full, 2, 3);
    let b = || update(&x, delta_b(), Mask::Full, 5, 3);
    let client_model = values(&a().new_params());
    let dist = |m: &[Vec<f32>]| -> f32 {
        m.iter().flatten().zip(client_model.iter().flatten()).map(|(p, q)| (p - q).powi(2)).sum()
    };
    let mut names = Vec::new();
    for c in registry.components(ComponentKind::Aggregator) {
        let Builder::Aggregator(build) = c.build else { unreachable!("registry keys builders by kind") };
        let make = || build(&Params::new("test", "aggregator", fl_core::toml::Table::new())).unwrap();
        let one = aggregate(&mut *make(), &x, &[a()], &fresh(1));
        assert!(one.iter().flatten().all(|v| v.is_finite()), "{}: non-finite output", c.name);
        assert!(
            NOT_MIXING.contains(&c.name) || dist(&one) < dist(&values(&x)),
            "{}: a single update must move towards the client model",
            c.name
        );
        if MEAN_LIKE.contains(&c.name) {
            assert_close(&one, &client_model);
            let ab = aggregate(&mut *make(), &x, &[a(), b()], &fresh(2));
            let ba = aggregate(&mut *make(), &x, &[b(), a()], &fresh(2));
            assert_close(&ab, &ba);
        }
        names.push(c.name);
    }
    for expected in MEAN_LIKE.iter().chain(&["async-mix"]) {
        assert!(names.contains(expected), "aggregator `{expected}` is not registered (have {names:?})");
    }
}

#[test]
fn inverse_time_damps_by_the_virtual_seconds_since_dispatch() {
    // scale 100: 50 s late → 1/1.5, 300 s late → 1/4, on time → 1.
    let x = set(&[&[1.0]]);
    let u = update(&x, set(&[&[0.0]]), Mask::Full, 1, 0);
    let mut f = InverseTime::default();
    let w =
        |f: &mut InverseTime, seconds: f64| f.weight(&StalenessCtx { versions: 7, seconds, update: &u, global: &x });
    assert_eq!([w(&mut f, 0.0), w(&mut f, 50.0), w(&mut f, 300.0)], [1.0, 1.0 / 1.5, 0.25]);
}

#[test]
fn aso_fed_moves_by_the_federation_share_then_reweights_the_first_layer() {
    // n = 10 samples in the federation; one arrival of client k with n_k = 2 and
    // Δ = ([[1, 0], [0, 2]], [5, 5]) onto W = [[0, 1], [2, 0]], b = [0, 0]:
    // W' = W + 0.2 Δ_W = [[0.2, 1], [2, 0.4]], b' = [1, 1] (the bias is not re-weighted).
    // softmax over dimension 0 (per input column j, over the output units i):
    //   column 0: (e^0.2, e^2)/(e^0.2 + e^2), column 1: (e^1, e^0.4)/(e^1 + e^0.4).
    // scaled (K = 2): W'' = 2 softmax₀(W') ⊙ W'; literal: softmax₀(W') ⊙ W'.
    let (e02, e2, e1, e04) = (0.2f64.exp(), 2f64.exp(), 1f64.exp(), 0.4f64.exp());
    let soft = [e02 / (e02 + e2), e1 / (e1 + e04), e2 / (e02 + e2), e04 / (e1 + e04)];
    let moved = [0.2, 1.0, 2.0, 0.4];
    let reweighted = |k: f64| -> Vec<f32> { (0..4).map(|i| (k * soft[i] * moved[i]) as f32).collect() };
    let w = Tensor::from_slice(&[0.0f32, 1.0, 2.0, 0.0]).reshape([2, 2]);
    let names = vec!["fc.weight".to_string(), "fc.bias".to_string()];
    let global = ParamSet::new(names.clone(), vec![w, Tensor::from_slice(&[0.0f32, 0.0])]).unwrap();
    let delta = ParamSet::new(
        names,
        vec![Tensor::from_slice(&[1.0f32, 0.0, 0.0, 2.0]).reshape([2, 2]), Tensor::from_slice(&[5.0f32, 5.0])],
    )
    .unwrap();
    let ups = [update(&global, delta, Mask::Full, 2, 3)];
    let ctx =
        AggregateCtx { version: 3, num_clients: 5, total_samples: 10, now: 0, staleness: &fresh(1), structure: None };
    for (attention, want) in [
        (FeatureAttention::Scaled, reweighted(2.0)),
        (FeatureAttention::Literal, reweighted(1.0)),
        (FeatureAttention::Off, moved.map(|v| v as f32).to_vec()),
    ] {
        let mut agg = AsoFed::new(AsoFedConfig { feature_attention: attention });
        let got = values(&agg.aggregate(&global, &ups, &ctx).unwrap());
        assert_close(&got, &[want, vec![1.0, 1.0]]);
    }
}

/// Scores so large that their keep-probabilities are exactly 0 or 1 in float32, so the
/// clients' sampled masks are known.
const SURE: f32 = 60.0;

/// The score `logit(p)` as the aggregator computes it, in float32.
fn score32(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

#[test]
fn bayesian_mask_counts_the_clients_masks_into_a_beta_posterior() {
    // Global scores 0 (θ = ½) on three weights a, b, c; client 1 keeps a and b, client 2
    // keeps a; both drop c.
    let global = set(&[&[0.0, 0.0, 0.0]]);
    let client = |scores: &[f32]| update(&global, set(&[scores]), Mask::Full, 10, 3);
    let updates = [client(&[SURE, SURE, -SURE]), client(&[SURE, -SURE, -SURE])];
    let mut agg = BayesianMask::new(BayesianMaskConfig { reset_every: 2, ..BayesianMaskConfig::default() });
    // Prior Beta(1, 1): α = 1 + (2, 1, 0), β = 1 + (0, 1, 2); the mode (α − 1)/(α + β − 2) is
    // (1, ½, 0), clamped to (0.999, ½, 0.001): scores logit = (6.9068, 0, −6.9068).
    let logit = score32(0.999);
    let got = aggregate(&mut agg, &global, &updates, &fresh(2));
    assert_close(&got, &[vec![logit, 0.0, score32(0.001)]]);
    // Without a reset the next round adds to the same posterior: one client keeping a, b and
    // c gives α = (4, 3, 2), β = (1, 2, 3): modes (1, ⅔, ⅓).
    let next = set(&[&got[0]]);
    let one = [update(&next, set(&[&[SURE - got[0][0], SURE, SURE + got[0][0]]]), Mask::Full, 10, 4)];
    let got = aggregate(&mut agg, &next, &one, &fresh(1));
    assert_close(&got, &[vec![logit, score32(2.0 / 3.0), score32(1.0 / 3.0)]]);
    // The reset (every 2 aggregations): the same update alone gives modes (1, 1, 1).
    let got = aggregate(&mut agg, &next, &one, &fresh(1));
    assert_close(&got, &[vec![logit, logit, logit]]);
}

#[test]
fn bayesian_mask_draws_each_mask_with_the_clients_probabilities_and_keeps_uncovered_weights() {
    // One client with θ = 0.3 on 20,000 weights: the posterior mode is its mask's mean.
    let n = 20_000;
    let global = ParamSet::new(
        vec!["w".into()],
        vec![Tensor::zeros([n], (fl_core::tch::Kind::Float, fl_core::tch::Device::Cpu))],
    )
    .unwrap();
    let s = (0.3f64 / 0.7).ln();
    let delta = ParamSet::new(vec!["w".into()], vec![global.tensors()[0].full_like(s)]).unwrap();
    let mut agg = BayesianMask::new(BayesianMaskConfig { clamp: 0.4, ..BayesianMaskConfig::default() });
    let got = aggregate(&mut agg, &global, &[update(&global, delta, Mask::Full, 5, 3)], &fresh(1));
    // Each weight's mode is 0 or 1, clamped to 0.4 or 0.6: the share at 0.6 is the keep rate.
    let up = got[0].iter().filter(|&&v| v > 0.0).count() as f64 / n as f64;
    assert!((up - 0.3).abs() < 0.015, "kept share {up}");
    // A weight outside every client's mask keeps its score.
    let global = set(&[&[1.5, -0.5]]);
    let mask = Mask::Structured(StructuredMask::new(vec![vec![Some(vec![0])]]));
    let u = update(&global, set(&[&[SURE]]), mask, 5, 3);
    let mut agg = BayesianMask::new(BayesianMaskConfig::default());
    let got = aggregate(&mut agg, &global, &[u], &fresh(1));
    assert_close(&got, &[vec![score32(0.999), -0.5]]);
}
