//! FedASMU's server on numbers worked by hand: the weight of Eq. 2, the merge of Eq. 1, and
//! the controls' hyper-gradient steps of Algorithm S (the corrected Eqs. 3–5) with and without
//! the decay of a previous merge carried forward, and the printed forms behind their switches.

use fl_algo_fedasmu::{StalenessLearned, StalenessLearnedConfig};
use fl_core::tch::Tensor;
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Mask, ParamSet, UpdateStaleness};

fn set(v: [f64; 2]) -> ParamSet {
    ParamSet::new(vec!["w".into()], vec![Tensor::from_slice(&[v[0] as f32, v[1] as f32])]).unwrap()
}

fn values(p: &ParamSet) -> [f64; 2] {
    let v = Vec::<f32>::try_from(&p.tensors()[0]).unwrap();
    [f64::from(v[0]), f64::from(v[1])]
}

/// Device `client`'s upload of a job started from `base` at version `o`, moved by `delta`
/// with learning rates summing to `lr_sum`.
struct Upload {
    client: usize,
    o: u64,
    base: [f64; 2],
    delta: [f64; 2],
    lr_sum: f64,
}

/// `up` merged into `global` at version `v`.
fn arrive(agg: &mut StalenessLearned, global: [f64; 2], v: u64, up: Upload) -> [f64; 2] {
    let update = ClientUpdate {
        client: up.client,
        job: 0,
        base_version: up.o,
        base: set(up.base),
        mask: Mask::Full,
        choice: None,
        delta: set(up.delta),
        pulled_version: None,
        samples: 1,
        multiplicity: 1,
        train_loss: 0.0,
        lr_sum: up.lr_sum,
        pull_merge: None,
        dispatched_at: 0,
        arrived_at: 0,
    };
    let staleness = [UpdateStaleness { versions: v - up.o, seconds: 0.0, weight: 1.0 }];
    let ctx =
        AggregateCtx { version: v, num_clients: 2, total_samples: 2, now: 0, staleness: &staleness, structure: None };
    values(&agg.aggregate(&set(global), &[update], &ctx).unwrap())
}

fn alpha(xi: f64) -> f64 {
    xi / (1.0 + xi)
}

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-5, "{what}: got {got}, want {want}");
}

fn config() -> StalenessLearnedConfig {
    StalenessLearnedConfig { lr_lambda: 0.1, lr_sigma: 0.1, lr_iota: 0.1, ..Default::default() }
}

#[test]
fn merges_weigh_by_learned_controls_and_the_controls_follow_algorithm_s() {
    // μ_α = 1, λ₀ = 1, σ₀ = 0.5, ι₀ = 0.05, control learning rates 0.1.
    let mut agg = StalenessLearned::new(config());
    // 1. A at version 0 from w₀ = 0, Δ = (1, 0): s = 1, t = 1, ξ = 1 + 0.05 = 1.05,
    //    α₁ = 1.05/2.05 = 0.5121951; w₁ = α₁ (1, 0). No previous merge: no control step.
    let a1 = alpha(1.05);
    close(a1, 0.5121951, "α₁");
    let w1 =
        arrive(&mut agg, [0.0, 0.0], 0, Upload { client: 0, o: 0, base: [0.0, 0.0], delta: [1.0, 0.0], lr_sum: 1.0 });
    close(w1[0], a1, "w₁");
    // 2. B at version 1 from w₀ (s = 2), Δ = (0, 2): ξ = 1/(1·√2) + 0.05 = 0.7571068,
    //    α₂ = 0.4308827; its merge step Δ_B = w_B − w₁ = (−α₁, 2); w₂ = w₁ + α₂ Δ_B.
    let xi2 = 1.0 / 2f64.sqrt() + 0.05;
    let a2 = alpha(xi2);
    close(a2, 0.4308827, "α₂");
    let step_b = [-a1, 2.0];
    let w2 = [a1 + a2 * step_b[0], a2 * step_b[1]];
    let got = arrive(&mut agg, w1, 1, Upload { client: 1, o: 0, base: [0.0, 0.0], delta: [0.0, 2.0], lr_sum: 2.0 });
    close(got[0], w2[0], "w₂[0]");
    close(got[1], w2[1], "w₂[1]");
    // 3. B again at version 2, from w₂ (s = 1), Δ = (0.5, −1) with Ση = 0.5: ĝ = −Δ/Ση = (−1, 2).
    //    B's last merge was into version 1 (v_m = 1 = o − 1): D = 1 (an empty product).
    //    c = ⟨ĝ, Δ_B⟩ = α₁ + 4; k = 1/(1 + ξ₂)²; den = √1 · 2^0.5.
    //    λ = 1 − 0.1 c k/den; σ = 0.5 − 0.1 c k (−1 · ln 2)/den; ι = 0.05 − 0.1 c k.
    let (c, k, den) = (a1 + 4.0, 1.0 / (1.0 + xi2).powi(2), 2f64.sqrt());
    let lambda = 1.0 - 0.1 * c * k / den;
    let sigma = 0.5 + 0.1 * c * k * 2f64.ln() / den;
    let iota = 0.05 - 0.1 * c * k;
    close(lambda, 0.8966574, "λ_B");
    //    Then ξ = λ/(√2 · 1^σ) + ι at t = 2, s = 1, and w₃ = w₂ + α₃ Δ.
    let a3 = alpha((lambda / 2f64.sqrt() + iota).max(0.0));
    let w3 = [w2[0] + a3 * 0.5, w2[1] - a3];
    let got = arrive(&mut agg, w2, 2, Upload { client: 1, o: 2, base: w2, delta: [0.5, -1.0], lr_sum: 0.5 });
    let (l, s, i) = agg.controls(1);
    close(l, lambda, "λ_B");
    close(s, sigma, "σ_B");
    close(i, iota, "ι_B");
    close(got[0], w3[0], "w₃[0]");
    close(got[1], w3[1], "w₃[1]");
    // 4. A again at version 3, from w₂ (o = 2, s = 2), Δ = (−1, 1), Ση = 1: ĝ = (1, −1).
    //    A's last merge went into version 0; carried to version 2 by D = 1 − α₂. c = D ⟨ĝ,
    //    (1, 0)⟩ = 1 − α₂; k = 1/2.05²; den = √max(0, 1) · 1^0.5 = 1; s_m = 1, so σ stays.
    let (c, k) = (1.0 - a2, 1.0 / 2.05f64.powi(2));
    let (lambda_a, iota_a) = (1.0 - 0.1 * c * k, 0.05 - 0.1 * c * k);
    let a4 = alpha(lambda_a / (3f64.sqrt() * 2f64.powf(0.5)) + iota_a);
    let step_a = [w2[0] - 1.0 - w3[0], w2[1] + 1.0 - w3[1]];
    let got = arrive(&mut agg, w3, 3, Upload { client: 0, o: 2, base: w2, delta: [-1.0, 1.0], lr_sum: 1.0 });
    let (l, s, i) = agg.controls(0);
    close(l, lambda_a, "λ_A");
    close(s, 0.5, "σ_A");
    close(i, iota_a, "ι_A");
    close(got[0], w3[0] + a4 * step_a[0], "w₄[0]");
    close(got[1], w3[1] + a4 * step_a[1], "w₄[1]");
    // The trace the metrics log gets: the last α and the two devices' mean controls.
    let d: std::collections::BTreeMap<String, f64> = agg.diagnostics().into_iter().collect();
    close(d["alpha_last"], a4, "alpha_last");
    close(d["lambda_mean"], (lambda + lambda_a) / 2.0, "lambda_mean");
    close(d["sigma_mean"], (sigma + 0.5) / 2.0, "sigma_mean");
    close(d["iota_mean"], (iota + iota_a) / 2.0, "iota_mean");
}

#[test]
fn the_printed_forms_and_the_frozen_controls_differ_as_documented() {
    // Arrivals 1–3 of the test above; only B's controls after its second upload are compared.
    let run = |cfg: StalenessLearnedConfig| {
        let mut agg = StalenessLearned::new(cfg);
        let w1 = arrive(
            &mut agg,
            [0.0, 0.0],
            0,
            Upload { client: 0, o: 0, base: [0.0, 0.0], delta: [1.0, 0.0], lr_sum: 1.0 },
        );
        let w2 = arrive(&mut agg, w1, 1, Upload { client: 1, o: 0, base: [0.0, 0.0], delta: [0.0, 2.0], lr_sum: 2.0 });
        arrive(&mut agg, w2, 2, Upload { client: 1, o: 2, base: w2, delta: [0.5, -1.0], lr_sum: 0.5 });
        agg.controls(1)
    };
    let a1 = alpha(1.05);
    let xi2 = 1.0 / 2f64.sqrt() + 0.05;
    let (c, k, den) = (a1 + 4.0, 1.0 / (1.0 + xi2).powi(2), 2f64.sqrt());
    // literal_sign: ĝ = +Δ/Ση, so every step goes the other way.
    let (l, _, i) = run(StalenessLearnedConfig { literal_sign: true, ..config() });
    close(l, 1.0 + 0.1 * c * k / den, "λ literal");
    close(i, 0.05 + 0.1 * c * k, "ι literal");
    // printed_sigma_grad: σ −= η_σ c k ln(σ_m)/den.
    let (_, s, _) = run(StalenessLearnedConfig { printed_sigma_grad: true, ..config() });
    close(s, 0.5 - 0.1 * c * k * 0.5f64.ln() / den, "σ printed");
    // learn = false (FedASMU-DA): the initial controls stay.
    assert_eq!(run(StalenessLearnedConfig { learn: false, ..config() }), (1.0, 0.5, 0.05));
}

#[test]
fn uploads_staler_than_tau_max_are_discarded() {
    let mut agg = StalenessLearned::new(StalenessLearnedConfig { tau_max: 2, ..config() });
    // s = 3 − 0 + 1 = 4 > 2: the model stays.
    assert_eq!(
        arrive(&mut agg, [0.5, 0.5], 3, Upload { client: 0, o: 0, base: [0.0, 0.0], delta: [1.0, 1.0], lr_sum: 1.0 }),
        [0.5, 0.5]
    );
    // s = 2: merged.
    assert_ne!(
        arrive(&mut agg, [0.5, 0.5], 3, Upload { client: 0, o: 2, base: [0.0, 0.0], delta: [1.0, 1.0], lr_sum: 1.0 }),
        [0.5, 0.5]
    );
}
