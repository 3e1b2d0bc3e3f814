//! The trainer's Adam and Adan, its learning-rate decay with the delay penalty, optimizer restarts per
//! epoch and early stopping: two Adam steps and two Adan steps worked by hand, the learning rate
//! γ₀/(√(e+1)·(1 + α·d)) of Forootani and Iervolino (§§5.3–5.4) at the delays of their code,
//! to five significant digits, and early stopping that equals a shorter run, alone and in a
//! cohort.

use std::sync::Arc;

use fl_core::rng::{self, TensorNoise};
use fl_core::tch::{Device, Tensor};
use fl_core::testing::{TinyLinear, tiny_dataset};
use fl_core::trainer::rates::{ClientRates, DelayScaling, LrDecay, Moments, RateConfig, RateTable};
use fl_core::trainer::sgd::{Optimizer, Sgd, SgdConfig};
use fl_core::{Dataset, LocalTrainer, Model, ParamSet, TrainJob};

/// The model and training set, shared as the jobs of one cohort must share them.
struct Shared {
    model: Arc<dyn Model>,
    data: Dataset,
}

impl Shared {
    fn new() -> Self {
        Shared { model: Arc::new(TinyLinear::default()), data: tiny_dataset() }
    }

    fn job(&self, params: ParamSet, indices: &[i64], delay: f64, seed: u64) -> TrainJob {
        TrainJob {
            model: Arc::clone(&self.model),
            data: self.data.shallow_clone(),
            ..job(params, indices, delay, seed)
        }
    }
}

fn job(params: ParamSet, indices: &[i64], delay: f64, seed: u64) -> TrainJob {
    TrainJob {
        model: Arc::new(TinyLinear::default()) as Arc<dyn Model>,
        params,
        grad_mask: None,
        frozen: Vec::new(),
        data: tiny_dataset(),
        indices: Tensor::from_slice(indices),
        rng: rng::stream(seed, &[1]),
        noise: TensorNoise::new(seed),
        version: 0,
        delay,
        width: None,
        state: None,
        batch_size: None,
    }
}

fn flat(t: &Tensor) -> Vec<f64> {
    Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap().into_iter().map(f64::from).collect()
}

/// W = all 0.5, b = (0.3, 0.3): the start of the hand computations.
fn symmetric_start() -> ParamSet {
    let w0 = Tensor::from_slice(&[0.5f32; 4]).reshape([2, 2]);
    ParamSet::new(vec!["w".into(), "b".into()], vec![w0, Tensor::from_slice(&[0.3f32, 0.3])]).unwrap()
}

#[test]
fn two_adam_steps_match_the_hand_computation() {
    // One batch per epoch: samples 0 and 1 of `tiny_dataset`, x₀ = (1, 0) of class 0 and
    // x₁ = (0, 1) of class 1; two epochs. lr = 0.1 with delay penalty α = 0.5 at d = 2, so
    // lr₀ = 0.1 / (1 + 0.5·2) = 0.05, and by √(e + 1) in epoch e: lr₁ = 0.05 / √2.
    //
    // Step 1 (as in the FedProx test): g(W) = [[−¼, ¼], [¼, −¼]], g(b) = 0. Adam's first step
    // is m̂ = g, v̂ = g², so W moves by −lr₀ · g / (|g| + ε) = ∓0.05 (to 1e-7):
    // W₁ = [[0.55, 0.45], [0.45, 0.55]]. (b's gradient is 0 only up to float rounding, which
    // Adam's normalisation amplifies, so b is not checked.)
    //
    // Step 2: each sample's true class leads by 0.1, σ = σ(0.1); the gradient is
    // [[−c, c], [c, −c]] with c = ½(1 − σ).
    // - Restarting Adam at the epoch (the asyncnc code re-creates it): a first step again,
    //   W₂[0][0] = 0.55 + lr₁ · c/(c + ε).
    // - Keeping Adam: m = 0.9·0.1·g₁ + 0.1·g₂, v = 0.999·0.001·g₁² + 0.001·g₂²,
    //   m̂ = m / (1 − 0.9²), v̂ = v / (1 − 0.999²), W₂ = W₁ − lr₁ · m̂ / (√v̂ + ε).
    let (lr0, lr1, eps) = (0.05, 0.05 / 2f64.sqrt(), 1e-8);
    let sigma = 1.0 / (1.0 + (-0.1f64).exp());
    let c = 0.5 * (1.0 - sigma);
    let w1 = [0.5 + lr0 * 0.25 / (0.25 + eps), 0.5 - lr0 * 0.25 / (0.25 + eps)];
    let restarted = [w1[0] + lr1 * c / (c + eps), w1[1] - lr1 * c / (c + eps)];
    let m = 0.9 * 0.1 * 0.25 + 0.1 * c;
    let v = 0.999 * 0.001 * 0.0625 + 0.001 * c * c;
    let moved = lr1 * (m / (1.0 - 0.81)) / ((v / (1.0 - 0.999f64.powi(2))).sqrt() + eps);
    let kept = [w1[0] + moved, w1[1] - moved];
    for (reset, want) in [(true, restarted), (false, kept)] {
        let cfg = SgdConfig {
            optimizer: Optimizer::Adam,
            lr: 0.1,
            lr_decay: LrDecay::InvSqrtEpoch,
            delay_alpha: 0.5,
            reset_each_epoch: reset,
            batch_size: 2,
            epochs: 2,
            ..Default::default()
        };
        let out = Sgd::new(cfg).train(job(symmetric_start(), &[0, 1], 2.0, 1)).unwrap();
        assert_eq!(out.steps, 2);
        let w = flat(&out.params.tensors()[0]);
        let want = [want[0], want[1], want[1], want[0]];
        for (g, e) in w.iter().zip(want) {
            assert!((g - e).abs() < 2e-6, "reset_each_epoch = {reset}: W {w:?}, want {want:?}");
        }
    }
    assert!((restarted[0] - kept[0]).abs() > 2e-5, "the two variants differ beyond the tolerance");
}

#[test]
fn two_adan_steps_match_the_authors_update_rule_worked_by_hand() {
    // As the Adam test: samples 0 and 1 in one batch, two epochs, from W = ½, b = 0.3; here a
    // constant lr = 0.1, Adan's defaults (β₁, β₂, β₃) = (0.98, 0.92, 0.99), and the decoupled
    // weight decay λ (0 or 0.5): after each step w ← w · s, s = 1/(1 + lr·λ).
    //
    // Step 1: g₁(W) = [[−¼, ¼], [¼, −¼]]; d₁ = 0, so m̂ = g₁, n̂ = g₁² and W moves by
    // −lr·g₁/(|g₁| + ε): W₁ = s·[[0.6, 0.4], [0.4, 0.6]] (b stays equal across classes).
    // Step 2: the true class leads by 0.2·s, c = ½(1 − σ(0.2 s)), g₂[0][0] = −c, d₂ = ¼ − c:
    // m = (1 − β₁)(β₁ g₁ + g₂), v = (1 − β₂) d₂, n = (1 − β₃)(β₃ g₁² + (g₂ + β₂ d₂)²),
    // W₂ = s·(W₁ − lr·(m/(1 − β₁²) + β₂ v/(1 − β₂²)) / (√(n/(1 − β₃²)) + ε)).
    // Restarting at the epoch makes step 2 a first step again: W₂ = s·(W₁ + lr·c/(c + ε)).
    let (lr, eps, (b1, b2, b3)): (f64, f64, (f64, f64, f64)) = (0.1, 1e-8, (0.98, 0.92, 0.99));
    for decay in [0.0f64, 0.5] {
        let s = 1.0 / (1.0 + lr * decay);
        let w1 = [s * (0.5 + lr * 0.25 / (0.25 + eps)), s * (0.5 - lr * 0.25 / (0.25 + eps))];
        let sigma = 1.0 / (1.0 + (-0.2 * s).exp());
        let c = 0.5 * (1.0 - sigma);
        // For W[0][0] (g₁ = −¼, g₂ = −c); W[0][1] mirrors it.
        let (g1, g2) = (-0.25, -c);
        let d = g2 - g1;
        let m = (1.0 - b1) * (b1 * g1 + g2);
        let v = (1.0 - b2) * d;
        let n = (1.0 - b3) * (b3 * g1 * g1 + (g2 + b2 * d).powi(2));
        let direction = (m / (1.0 - b1 * b1) + b2 * v / (1.0 - b2 * b2)) / ((n / (1.0 - b3 * b3)).sqrt() + eps);
        let kept = [s * (w1[0] - lr * direction), s * (w1[1] + lr * direction)];
        let restarted = [s * (w1[0] + lr * c / (c + eps)), s * (w1[1] - lr * c / (c + eps))];
        assert!((kept[0] - restarted[0]).abs() > 1e-4, "keeping the moments differs beyond the tolerance");
        for (reset, want) in [(true, restarted), (false, kept)] {
            let cfg = SgdConfig {
                optimizer: Optimizer::Adan,
                lr,
                weight_decay: decay,
                reset_each_epoch: reset,
                batch_size: 2,
                epochs: 2,
                ..Default::default()
            };
            let out = Sgd::new(cfg).train(job(symmetric_start(), &[0, 1], 0.0, 1)).unwrap();
            let w = flat(&out.params.tensors()[0]);
            let want = [want[0], want[1], want[1], want[0]];
            for (g, e) in w.iter().zip(want) {
                assert!((g - e).abs() < 2e-6, "λ = {decay}, reset = {reset}: W {w:?}, want {want:?}");
            }
        }
    }
}

#[test]
fn asyncnc_learning_rate_table_matches_hand_computed_values() {
    // γ₀/(√(e+1)·(1 + α·d)) with γ₀ = 1e-3, α = 0.01, epochs e = 0..9, for the authors' code's
    // AFL delay d = 2, its MNIST SFL delay 0.02 and no delay; five significant digits.
    let printed: [(f64, [f64; 10]); 3] = [
        (
            2.0,
            [
                9.8039e-4, 6.9324e-4, 5.6603e-4, 4.9020e-4, 4.3844e-4, 4.0024e-4, 3.7055e-4, 3.4662e-4, 3.2680e-4,
                3.1003e-4,
            ],
        ),
        (
            0.02,
            [
                9.9980e-4, 7.0697e-4, 5.7723e-4, 4.9990e-4, 4.4712e-4, 4.0817e-4, 3.7789e-4, 3.5348e-4, 3.3327e-4,
                3.1616e-4,
            ],
        ),
        (
            0.0,
            [
                1.0000e-3, 7.0711e-4, 5.7735e-4, 5.0000e-4, 4.4721e-4, 4.0825e-4, 3.7796e-4, 3.5355e-4, 3.3333e-4,
                3.1623e-4,
            ],
        ),
    ];
    let epochs: Vec<usize> = (0..10).collect();
    let cfg = RateConfig {
        lr: 1e-3,
        decay: LrDecay::InvSqrtEpoch,
        delay_scaling: DelayScaling::Penalty,
        delay_alpha: 0.01,
        moments: Moments::None,
        decoupled_decay: 0.0,
        reset_each_epoch: false,
    };
    let clients: Vec<ClientRates> =
        printed.iter().map(|(d, _)| ClientRates { epochs: &epochs, delay: *d, version: 0 }).collect();
    let table = RateTable::new(&cfg, &clients, Device::Cpu);
    for (c, (d, want)) in printed.iter().enumerate() {
        let got = flat(&table.step.select(1, c as i64));
        for (e, (g, w)) in got.iter().zip(want).enumerate() {
            // f32 storage: compare the rounded digits, relative 5e-5 (half a unit in the 5th digit).
            assert!((-g - w).abs() <= 5e-5 * w, "d = {d}, epoch {e}: {} vs {w}", -g);
        }
    }
}

#[test]
fn learning_rate_decays_by_step_and_by_round() {
    let epochs = [0usize, 0, 0, 1];
    let table = |decay, version| {
        let cfg = RateConfig {
            lr: 1.0,
            decay,
            delay_scaling: DelayScaling::Penalty,
            delay_alpha: 0.0,
            moments: Moments::None,
            decoupled_decay: 0.0,
            reset_each_epoch: false,
        };
        flat(&RateTable::new(&cfg, &[ClientRates { epochs: &epochs, delay: 0.0, version }], Device::Cpu).step)
    };
    let near = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
    assert!(near(&table(LrDecay::InvSqrtStep, 0), &[-1.0, -1.0 / 2f64.sqrt(), -1.0 / 3f64.sqrt(), -0.5]));
    assert!(near(&table(LrDecay::InvSqrtRound, 3), &[-0.5; 4]));
    assert!(near(&table(LrDecay::Constant, 3), &[-1.0; 4]));
}

#[test]
fn delay_scalings_follow_aso_fed_and_fedsa() {
    // ASO-Fed: lr · max(1, ln d), 1 up to d = e, ln 20 = 2.9957 at d = 20. FedSA: lr / max(1, d).
    // The penalty 1/(1 + α d) with α = 0.5.
    let delays = [0.0, 2.0, std::f64::consts::E, 20.0];
    let rates = |delay_scaling| -> Vec<f64> {
        let cfg = RateConfig {
            lr: 2.0,
            decay: LrDecay::Constant,
            delay_scaling,
            delay_alpha: 0.5,
            moments: Moments::None,
            decoupled_decay: 0.0,
            reset_each_epoch: false,
        };
        let clients: Vec<ClientRates> =
            delays.iter().map(|&delay| ClientRates { epochs: &[0], delay, version: 0 }).collect();
        flat(&RateTable::new(&cfg, &clients, Device::Cpu).step).iter().map(|s| -s).collect()
    };
    let near = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
    let boost = rates(DelayScaling::LogBoost);
    assert!(near(&boost, &[2.0, 2.0, 2.0, 2.0 * 20f64.ln()]), "{boost:?}");
    let inverse = rates(DelayScaling::Inverse);
    assert!(near(&inverse, &[2.0, 1.0, 2.0 / std::f64::consts::E, 0.1]), "{inverse:?}");
    let penalty = rates(DelayScaling::Penalty);
    assert!(near(&penalty, &[2.0, 1.0, 2.0 / (1.0 + 0.5 * std::f64::consts::E), 2.0 / 11.0]), "{penalty:?}");
}

#[test]
fn early_stopping_equals_the_shorter_run_alone_and_in_a_cohort() {
    // With lr = 40 the first client's epoch-mean losses are 33.7, 7.0, 33.3, 26.7, …: the
    // third and fourth epochs do not improve on the second, so patience 2 stops it after four
    // epochs. The second client's large delay shrinks its rate to 0.1; its losses 0.702, 0.680,
    // 0.673, 0.678, 0.642, 0.652 never miss twice in a row, so it never stops.
    let start = || symmetric_start().map(|t| t * 0.0);
    let cfg = |epochs, patience| SgdConfig {
        lr: 40.0,
        delay_alpha: 1.0,
        batch_size: 2,
        epochs,
        patience,
        ..Default::default()
    };
    let shared = Shared::new();
    let a = || shared.job(start(), &[0, 1, 2, 3, 4, 5], 0.0, 7);
    let b = || shared.job(start(), &[0, 1, 2, 3, 4, 5], 399.0, 8);
    let stopped = Sgd::new(cfg(6, Some(2))).train(a()).unwrap();
    let short = Sgd::new(cfg(4, None)).train(a()).unwrap();
    assert_eq!(stopped.steps, 12, "stopped after four epochs of three batches");
    assert!(stopped.params.equal(&short.params), "a stopped client keeps the model of its last epoch");
    assert!((stopped.mean_loss - short.mean_loss).abs() < 1e-6);
    let cohort = Sgd::new(cfg(6, Some(2))).train_cohort(vec![b(), a()]).unwrap();
    let b_alone = Sgd::new(cfg(6, None)).train(b()).unwrap();
    assert_eq!(cohort[0].steps, 18, "the slow learner never stops");
    assert_eq!(cohort[1].steps, 12);
    for (got, want) in [(&cohort[0], &b_alone), (&cohort[1], &short)] {
        for (x, y) in got.params.tensors().iter().zip(want.params.tensors()) {
            assert!((x - y).abs().max().double_value(&[]) < 1e-5);
        }
        assert!((got.mean_loss - want.mean_loss).abs() < 1e-5);
    }
}

#[test]
fn adam_and_adan_cohorts_equal_clients_alone() {
    for optimizer in [Optimizer::Adam, Optimizer::Adan] {
        cohort_equals_alone(optimizer, true);
        cohort_equals_alone(optimizer, false);
    }
}

/// Different delays (rates), sample counts (epoch lengths, restarts) and starts per client.
fn cohort_equals_alone(optimizer: Optimizer, reset_each_epoch: bool) {
    let cfg = SgdConfig {
        optimizer,
        lr: 0.05,
        lr_decay: LrDecay::InvSqrtEpoch,
        delay_alpha: 0.3,
        reset_each_epoch,
        batch_size: 2,
        epochs: 3,
        weight_decay: 0.01,
        ..Default::default()
    };
    let shared = Shared::new();
    let jobs = || {
        vec![
            shared.job(symmetric_start(), &[0, 1, 2], 0.5, 1),
            shared.job(symmetric_start().map(|t| t * 0.5), &[0, 1, 2, 3, 4, 5], 1.5, 2),
            shared.job(symmetric_start().map(|t| -t), &[3, 4], 0.0, 3),
        ]
    };
    let trainer = Sgd::new(cfg);
    let cohort = trainer.train_cohort(jobs()).unwrap();
    for (got, j) in cohort.iter().zip(jobs()) {
        let want = trainer.train(j).unwrap();
        assert_eq!(got.steps, want.steps);
        for (x, y) in got.params.tensors().iter().zip(want.params.tensors()) {
            assert!((x - y).abs().max().double_value(&[]) < 1e-6, "{optimizer:?}, reset {reset_each_epoch}");
        }
    }
}

#[test]
fn bad_optimizer_settings_are_errors_naming_the_key() {
    let bad = [
        (SgdConfig { optimizer: Optimizer::Adam, momentum: 0.9, ..Default::default() }, "momentum"),
        (SgdConfig { betas: [0.9, 1.0], ..Default::default() }, "betas"),
        (SgdConfig { optimizer: Optimizer::Adan, momentum: 0.9, ..Default::default() }, "momentum"),
        (SgdConfig { adan_betas: [0.98, 0.92, 1.0], ..Default::default() }, "adan_betas"),
        (SgdConfig { eps: 0.0, ..Default::default() }, "eps"),
        (SgdConfig { delay_alpha: -1.0, ..Default::default() }, "delay_alpha"),
        (SgdConfig { patience: Some(0), ..Default::default() }, "patience"),
    ];
    for (cfg, key) in bad {
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.key, key, "{err}");
    }
}
