//! The `sgd` trainer: segmenting a job changes nothing unless a model is merged in, gradient
//! masking freezes masked weights exactly, and the proximal term holds the model near its start
//! (with FedProx's μ/2 ‖w − w₀‖², checked against two steps worked by hand).

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
        frozen: Vec::new(),
        indices: Tensor::arange(data.len() as i64, fl_core::tch::kind::INT64_CPU),
        data,
        rng: rng::stream(3, &[1]),
        noise: TensorNoise::new(3),
        version: 0,
        delay: 0.0,
        width: None,
        state: None,
        batch_size: None,
    }
}

fn sgd(cfg: SgdConfig) -> Sgd {
    Sgd::new(SgdConfig { batch_size: 2, epochs: 3, momentum: 0.9, ..cfg })
}

#[test]
fn a_job_run_in_segments_equals_the_job_run_at_once() {
    let trainer = sgd(SgdConfig::default());
    let whole = trainer.train(job(None)).unwrap();
    let mut session = trainer.start(vec![job(None)]).unwrap();
    session.run_until(0.3).unwrap();
    session.run_until(0.7).unwrap();
    session.run_until(1.0).unwrap();
    let split = session.finish().unwrap().remove(0);
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
        let mut reference = trainer.start(vec![job(None)]).unwrap();
        reference.run_until(0.5).unwrap();
        let mut merged = trainer.start(vec![job(None)]).unwrap();
        merged.run_until(0.5).unwrap();
        merged.merge_pulled(&pulled, info).unwrap();
        let (reference, merged) = (reference.finish().unwrap().remove(0), merged.finish().unwrap().remove(0));
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
fn two_proximal_steps_match_the_hand_computation() {
    // FedProx's local objective is CE + μ/2 ‖w − w₀‖², whose gradient adds μ (w − w₀). At the
    // first step w = w₀ and that term vanishes, so two steps are needed to see μ at all.
    //
    // One batch of samples 0 and 1 of `tiny_dataset`: x₀ = (1, 0) of class 0, x₁ = (0, 1) of
    // class 1. η = 1, μ = 0.5, no momentum. W₀ = [[0.5, 0.5], [0.5, 0.5]], b₀ = (0.3, 0.3).
    //
    // Step 1: W₀'s rows are equal, so both logits are equal and p = (½, ½) for either sample.
    // ∂CE/∂z = p − onehot(y): (−½, ½) for x₀, (½, −½) for x₁. The batch mean of (p − y) xᵀ is
    // ½ ([[−½, 0], [½, 0]] + [[0, ½], [0, −½]]) = [[−¼, ¼], [¼, −¼]]; for b the mean is 0.
    // W₁ = W₀ − η g = [[0.75, 0.25], [0.25, 0.75]], b₁ = b₀.
    //
    // Step 2: x₀'s logits are (1.05, 0.55), x₁'s (0.55, 1.05): each sample's true class leads
    // by 0.5, so p_true = σ = σ(0.5) = 1/(1 + e^−0.5) = 0.6224593312. p − y is (σ − 1, 1 − σ)
    // for x₀ and (1 − σ, σ − 1) for x₁, so the CE gradient is [[−c, c], [c, −c]] with
    // c = ½ (1 − σ) = 0.1887703344, and 0 for b. The proximal gradient is
    // μ (W₁ − W₀) = 0.5 [[¼, −¼], [−¼, ¼]] = [[0.125, −0.125], [−0.125, 0.125]], 0 for b.
    // W₂[0][0] = 0.75 − (−c + 0.125) = 0.8137703344, W₂[0][1] = 0.25 − (c − 0.125) = 0.1862296656,
    // and W₂ is symmetric the same way; b₂ = (0.3, 0.3).
    //
    // With μ ‖w − w₀‖² instead, W₂[0][0] would be 0.75 − (−c + 0.25) = 0.6887703344; without the
    // term, 0.75 + c = 0.9387703344.
    let c = 0.5 * (1.0 - 1.0 / (1.0 + (-0.5f64).exp()));
    let (hi, lo) = (0.75 - (-c + 0.125), 0.25 - (c - 0.125));
    assert!((hi - 0.8137703344).abs() < 1e-9 && (lo - 0.1862296656).abs() < 1e-9, "the comment's numbers");
    let w0 = Tensor::from_slice(&[0.5f32; 4]).reshape([2, 2]);
    let params = ParamSet::new(vec!["w".into(), "b".into()], vec![w0, Tensor::from_slice(&[0.3f32, 0.3])]).unwrap();
    let job = TrainJob { params, indices: Tensor::from_slice(&[0i64, 1]), ..job(None) };
    let cfg = SgdConfig { lr: 1.0, batch_size: 2, steps: Some(2), prox_mu: 0.5, ..Default::default() };
    let out = Sgd::new(cfg).train(job).unwrap();
    assert_eq!(out.steps, 2);
    let got: Vec<Vec<f32>> =
        out.params.tensors().iter().map(|t| Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap()).collect();
    let want = [vec![hi, lo, lo, hi], vec![0.3, 0.3]];
    for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
        assert!((f64::from(*g) - w).abs() < 1e-6, "got {got:?}, want {want:?}");
    }
}

#[test]
fn zero_init_only_masking_trains_the_masked_out_weights_from_zero() {
    // The engine hands a client the masked model (masked-out weights 0). The authors' code
    // (KDD'23) then trains every weight; the paper masks the gradients so those stay 0. One batch
    // of samples 0 and 1 of `tiny_dataset` (x₀ = (1, 0) of class 0, x₁ = (0, 1) of class 1),
    // η = 1, mask [[1, 0], [0, 1]] on W, W₀ = [[0.5, 0], [0, 0.5]], b₀ = (0.3, 0.3).
    //
    // x₀'s logits are (0.8, 0.3), x₁'s (0.3, 0.8): each true class leads by 0.5, so
    // p_true = σ(0.5) and p − y is (−2c, 2c) for x₀, (2c, −2c) for x₁ with
    // c = ½ (1 − σ(0.5)) = 0.1887703344. The batch mean of (p − y) xᵀ is [[−c, c], [c, −c]], of
    // p − y for b (0, 0). Zero-init-only: W₁ = [[0.5 + c, −c], [−c, 0.5 + c]]; masked gradients:
    // W₁ = [[0.5 + c, 0], [0, 0.5 + c]].
    let c = 0.5 * (1.0 - 1.0 / (1.0 + (-0.5f64).exp()));
    assert!((c - 0.1887703344).abs() < 1e-9, "the comment's number");
    let trained = |masking| {
        let w0 = Tensor::from_slice(&[0.5f32, 0.0, 0.0, 0.5]).reshape([2, 2]);
        let params = ParamSet::new(vec!["w".into(), "b".into()], vec![w0, Tensor::from_slice(&[0.3f32, 0.3])]).unwrap();
        let mask_w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0]).reshape([2, 2]);
        let job = TrainJob { params, indices: Tensor::from_slice(&[0i64, 1]), ..job(Some(vec![Some(mask_w), None])) };
        let cfg = SgdConfig { lr: 1.0, batch_size: 2, steps: Some(1), masking, ..Default::default() };
        let out = Sgd::new(cfg).train(job).unwrap();
        let got: Vec<f32> =
            out.params.tensors().iter().flat_map(|t| Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap()).collect();
        got
    };
    for (masking, want) in [
        (fl_core::trainer::sgd::Masking::ZeroInitOnly, [0.5 + c, -c, -c, 0.5 + c, 0.3, 0.3]),
        (fl_core::trainer::sgd::Masking::Gradient, [0.5 + c, 0.0, 0.0, 0.5 + c, 0.3, 0.3]),
    ] {
        let got = trained(masking);
        for (g, w) in got.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{masking:?}: got {got:?}, want {want:?}");
        }
    }
}

#[test]
fn feddyn_adds_its_linear_and_quadratic_terms_and_hands_on_its_state() {
    // The batch and start of the proximal test: x₀ = (1, 0) of class 0, x₁ = (0, 1) of class 1,
    // W₀ = [[0.5, 0.5], [0.5, 0.5]], b₀ = (0.3, 0.3), η = 1, two steps; FedDyn's α = 0.5 and the
    // client's state g = (g_W, g_b) = ([[0.1, 0], [0, 0]], (0, 0.2)). The terms' gradient is
    // α (θ − θ₀) − g.
    //
    // Step 1: the CE gradient is [[−¼, ¼], [¼, −¼]] for W and 0 for b (equal rows); the terms
    // give −g. W₁ = [[0.85, 0.25], [0.25, 0.75]], b₁ = (0.3, 0.5).
    // Step 2: x₀'s logits (1.15, 0.75), x₁'s (0.55, 1.25): p − y = (−(1 − s₀), 1 − s₀) with
    // s₀ = σ(0.4), and (1 − s₁, −(1 − s₁)) with s₁ = σ(0.7). CE gradient: W [[−a, c], [a, −c]]
    // with a = (1 − s₀)/2 = 0.2006561700, c = (1 − s₁)/2 = 0.1659061140; b (c − a, a − c).
    // Terms: α (θ₁ − θ₀) − g = [[0.075, −0.125], [−0.125, 0.125]] and (0, −0.1).
    // W₂ = [[0.85 + a − 0.075, 0.25 − c + 0.125], [0.25 − a + 0.125, 0.75 + c − 0.125]],
    // b₂ = (0.3 − (c − a), 0.5 − (a − c) + 0.1).
    // Next state: g − α (θ₂ − θ₀).
    let sigma = |z: f64| 1.0 / (1.0 + (-z).exp());
    let (a, c) = ((1.0 - sigma(0.4)) / 2.0, (1.0 - sigma(0.7)) / 2.0);
    assert!((a - 0.2006561700).abs() < 1e-9 && (c - 0.1659061140).abs() < 1e-9, "the comment's numbers");
    let w2 = [0.85 + a - 0.075, 0.25 - c + 0.125, 0.25 - a + 0.125, 0.75 + c - 0.125];
    let b2 = [0.3 - (c - a), 0.5 - (a - c) + 0.1];
    let gw = [0.1, 0.0, 0.0, 0.0];
    let gb = [0.0, 0.2];
    let next_w: Vec<f64> = (0..4).map(|i| gw[i] - 0.5 * (w2[i] - 0.5)).collect();
    let next_b: Vec<f64> = (0..2).map(|i| gb[i] - 0.5 * (b2[i] - 0.3)).collect();

    let names = vec!["w".to_string(), "b".to_string()];
    let w0 = Tensor::from_slice(&[0.5f32; 4]).reshape([2, 2]);
    let params = ParamSet::new(names.clone(), vec![w0, Tensor::from_slice(&[0.3f32, 0.3])]).unwrap();
    let state = ParamSet::new(
        names,
        vec![Tensor::from_slice(&[0.1f32, 0.0, 0.0, 0.0]).reshape([2, 2]), Tensor::from_slice(&[0.0f32, 0.2])],
    )
    .unwrap();
    let with_state = TrainJob { params, indices: Tensor::from_slice(&[0i64, 1]), state: Some(state), ..job(None) };
    let cfg = SgdConfig { lr: 1.0, batch_size: 2, steps: Some(2), dyn_alpha: 0.5, ..Default::default() };
    let trainer = Sgd::new(cfg);
    assert_eq!(trainer.client_state_copies(), 1);
    let out = trainer.train(with_state).unwrap();
    let flat = |p: &ParamSet| -> Vec<f64> {
        p.tensors().iter().flat_map(|t| Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap()).map(f64::from).collect()
    };
    let close = |got: Vec<f64>, want: Vec<f64>| {
        assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-6), "got {got:?}, want {want:?}");
    };
    close(flat(&out.params), w2.iter().chain(&b2).copied().collect());
    close(flat(out.state.as_ref().expect("FedDyn hands on a state")), next_w.into_iter().chain(next_b).collect());
    // Without α no state is kept.
    assert!(Sgd::new(SgdConfig::default()).train(job(None)).unwrap().state.is_none());
}

/// A linear layer without bias before a linear classifier: features `A x`, logits `W A x + b`.
/// Its tensors are `a` `[2, 2]`, then the classifier `w` `[2, 2]`, `b` `[2]`.
struct TwoLayer(fl_core::Structure);

impl TwoLayer {
    fn new() -> Self {
        let t = |name: &str, shape: Vec<i64>| fl_core::TensorSpec::new(name, shape);
        TwoLayer(fl_core::Structure {
            tensors: vec![t("a", vec![2, 2]), t("w", vec![2, 2]), t("b", vec![2])],
            groups: vec![],
        })
    }

    /// With its two features a unit group: a row of `a` and a column of `w` each.
    fn with_feature_group() -> Self {
        let mut model = TwoLayer::new();
        let member = |tensor, dim| fl_core::UnitMember { tensor, dim, block: 1 };
        model.0.groups =
            vec![fl_core::UnitGroup { name: "features".into(), units: 2, members: vec![member(0, 0), member(1, 1)] }];
        model
    }
}

impl Model for TwoLayer {
    fn structure(&self) -> &fl_core::Structure {
        &self.0
    }
    fn init(&self, _: &mut rng::Rng) -> ParamSet {
        unreachable!("the tests give the parameters")
    }
    fn features(&self, body: &[Tensor], x: &Tensor, _: &mut fl_core::Mode) -> Tensor {
        x.bmm(&body[0].transpose(1, 2))
    }
    fn flops_per_tensor(&self, _: &[Vec<i64>]) -> Vec<f64> {
        vec![0.0; 3]
    }
}

fn two_layer(values: [[f32; 4]; 2], b: [f32; 2]) -> ParamSet {
    let names = ["a", "w", "b"].map(String::from).to_vec();
    let m = |v: [f32; 4]| Tensor::from_slice(&v).reshape([2, 2]);
    ParamSet::new(names, vec![m(values[0]), m(values[1]), Tensor::from_slice(&b)]).unwrap()
}

fn flat(p: &ParamSet) -> Vec<f64> {
    p.tensors().iter().flat_map(|t| Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap()).map(f64::from).collect()
}

#[test]
fn moon_adds_its_contrastive_gradient_and_keeps_the_trained_model() {
    // One step (η = 1) on sample 0 of `tiny_dataset`, x = (1, 0) of class 0. Start A₀ =
    // [[1, 0.5], [0, 1]], so z = A x = (1, 0) = z_glob: sim(z, z_glob) = 1 and the positive's
    // gradient vanishes there. W₀ = [[0.5, 0.5], [0.5, 0.5]], b₀ = (0, 0): equal logits,
    // p = (½, ½), and Wᵀ (p − y) = 0, so the cross-entropy sends no gradient to A.
    // The previous model's A_prev = [[0, 0], [1, 0]] gives z_prev = (0, 1): s_p = 0.
    //
    // ℓ = softplus((s_p − s_g)/τ); ∂ℓ/∂z = σ((s_p − s_g)/τ)/τ · (∇sim(z, z_prev) − ∇sim(z, z_glob)),
    // with ∇_z sim(z, u) = u/(|z||u|) − sim(z, u) z/|z|²: (0, 1) − 0 for z_prev, 0 for z_glob.
    // With μ = 2, τ = 0.5: ∂(μℓ)/∂z = 2 σ(−2)/0.5 (0, 1) = (0, c), c = 4 σ(−2) = 0.4768116880;
    // ∂/∂A = (∂/∂z) xᵀ = [[0, 0], [c, 0]], so A₁ = [[1, 0.5], [−c, 1]].
    // The classifier: ∂CE/∂W = (p − y) zᵀ = [[−½, 0], [½, 0]], ∂CE/∂b = (−½, ½):
    // W₁ = [[1, 0.5], [0, 0.5]], b₁ = (½, −½).
    // With the signs of the positive and negative swapped, A₁[1][0] = +4 σ(2)… ≠ −c; without
    // τ, c = 2 σ(−1) = 0.5378828428; without μ, c/2.
    let c = 4.0 / (1.0 + 2f64.exp());
    assert!((c - 0.4768116880).abs() < 1e-9, "the comment's number");
    let start = two_layer([[1.0, 0.5, 0.0, 1.0], [0.5; 4]], [0.0, 0.0]);
    let previous = two_layer([[0.0, 0.0, 1.0, 0.0], [9.0; 4]], [9.0, 9.0]);
    let model = Arc::new(TwoLayer::new()) as Arc<dyn Model>;
    let job = |state: Option<ParamSet>| TrainJob {
        model: Arc::clone(&model),
        params: start.deep_clone(),
        indices: Tensor::from_slice(&[0i64]),
        state,
        ..job(None)
    };
    let cfg =
        SgdConfig { lr: 1.0, batch_size: 1, steps: Some(1), moon_mu: 2.0, moon_temperature: 0.5, ..Default::default() };
    let trainer = Sgd::new(cfg.clone());
    assert_eq!(trainer.client_state_copies(), 1);
    let out = trainer.train(job(Some(previous.deep_clone()))).unwrap();
    let want = [1.0, 0.5, -c, 1.0, 1.0, 0.5, 0.0, 0.5, 0.5, -0.5];
    let close = |got: &[f64], want: &[f64]| {
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "got {got:?}, want {want:?}");
    };
    close(&flat(&out.params), &want);
    // The state handed on is the trained model.
    close(&flat(out.state.as_ref().expect("MOON keeps the previous model")), &want);

    // A first job has no previous model: the term vanishes, and the step is plain SGD.
    let first = trainer.train(job(None)).unwrap();
    let plain = Sgd::new(SgdConfig { moon_mu: 0.0, ..cfg }).train(job(None)).unwrap();
    close(&flat(&first.params), &flat(&plain.params));
    close(&flat(&first.params), &[1.0, 0.5, 0.0, 1.0, 1.0, 0.5, 0.0, 0.5, 0.5, -0.5]);
    assert!(first.state.is_some());
}

#[test]
fn moon_jobs_give_the_same_result_alone_and_in_a_cohort() {
    // Three clients, one without a previous model, trained together and one by one.
    let model = Arc::new(TwoLayer::new()) as Arc<dyn Model>;
    let data = tiny_dataset();
    let job = |client: i64, state: Option<ParamSet>| TrainJob {
        model: Arc::clone(&model),
        params: two_layer([[0.3, -0.2, 0.4, 0.1], [0.2, -0.1, 0.5, 0.3]], [0.0, 0.1]),
        indices: Tensor::arange_start(client * 2, client * 2 + 2, fl_core::tch::kind::INT64_CPU),
        data: data.shallow_clone(),
        rng: rng::stream(5, &[client as u64]),
        noise: TensorNoise::new(client as u64),
        state,
        ..job(None)
    };
    let prev = |k: f32| Some(two_layer([[k, 0.2, -0.3, k], [0.0; 4]], [0.0; 2]));
    let states = [prev(0.7), None, prev(-0.4)];
    let state = |c: i64| states[c as usize].as_ref().map(ParamSet::deep_clone);
    let cfg = SgdConfig { lr: 0.1, batch_size: 1, epochs: 2, momentum: 0.5, moon_mu: 1.0, ..Default::default() };
    let trainer = Sgd::new(cfg);
    let together = trainer.train_cohort((0..3).map(|c| job(c, state(c))).collect()).unwrap();
    for c in 0..3 {
        let alone = trainer.train(job(c, state(c))).unwrap();
        let (a, b) = (flat(&alone.params), flat(&together[c as usize].params));
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-6), "client {c}: alone {a:?}, cohort {b:?}");
    }
}

#[test]
fn aso_fed_decay_gradient_matches_two_steps_by_hand_and_hands_on_h_and_the_gradient() {
    // Sample 0 of `tiny_dataset`, x = (1, 0) of class 0, twice; η = 1, β = 0.5. W₀ = ½ everywhere,
    // b₀ = 0. The client's state from its previous job: h = ([[0.2, 0], [0, 0]], (0, 0)),
    // g_prev = (0, (0.1, 0)).
    // Step 1: p = (½, ½), g₁ = ([[−½, 0], [½, 0]], (−½, ½)); ζ₁ = g₁ − g_prev + h =
    // ([[−0.3, 0], [0.5, 0]], (−0.6, 0.5)): W₁ = [[0.8, 0.5], [0, 0.5]], b₁ = (0.6, −0.5);
    // h₁ = ½ h + ½ g_prev = ([[0.1, 0], [0, 0]], (0.05, 0)).
    // Step 2: logits (1.4, −0.5), q = 1 − σ(1.9) = 0.1301085; g₂ = ([[−q, 0], [q, 0]], (−q, q));
    // ζ₂ = g₂ − g₁ + h₁: W₂ = [[0.2 + q, 0.5], [0.5 − q, 0.5]], b₂ = (0.05 + q, −q);
    // h₂ = ½ h₁ + ½ g₁ = ([[−0.2, 0], [0.25, 0]], (−0.225, 0.25)), and g₂ is handed on.
    // With h updated from g_t instead of g_{t−1}, or the state ignored, W₂ differs.
    let q = 1.0 / (1.0 + 1.9f64.exp());
    assert!((q - 0.1301085).abs() < 1e-7, "the comment's number");
    let names = ["w", "b"].map(String::from).to_vec();
    let m = |v: [f32; 4]| Tensor::from_slice(&v).reshape([2, 2]);
    let params = ParamSet::new(names, vec![m([0.5; 4]), Tensor::from_slice(&[0.0f32, 0.0])]).unwrap();
    let state_names = ["h.w", "h.b", "prev.w", "prev.b"].map(String::from).to_vec();
    let state = ParamSet::new(
        state_names.clone(),
        vec![
            m([0.2, 0.0, 0.0, 0.0]),
            Tensor::from_slice(&[0.0f32, 0.0]),
            m([0.0; 4]),
            Tensor::from_slice(&[0.1f32, 0.0]),
        ],
    )
    .unwrap();
    let job = TrainJob { params, indices: Tensor::from_slice(&[0i64]), state: Some(state), ..job(None) };
    let cfg = SgdConfig { lr: 1.0, batch_size: 1, steps: Some(2), aso_beta: Some(0.5), ..Default::default() };
    let trainer = Sgd::new(cfg);
    assert_eq!(trainer.client_state_copies(), 2);
    let out = trainer.train(job).unwrap();
    let close = |got: Vec<f64>, want: &[f64]| {
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "got {got:?}, want {want:?}");
    };
    close(flat(&out.params), &[0.2 + q, 0.5, 0.5 - q, 0.5, 0.05 + q, -q]);
    let next = out.state.expect("ASO-Fed hands on h and the gradient");
    assert_eq!(next.names(), state_names.as_slice());
    close(flat(&next), &[-0.2, 0.0, 0.25, 0.0, -0.225, 0.25, -q, 0.0, q, 0.0, -q, q]);
}

#[test]
fn fedasmu_learned_pull_weight_merges_and_steps_its_controls_as_worked_by_hand() {
    // Sample 0 of `tiny_dataset`, x = (1, 0) of class 0, one sample a step, two steps at lr 1.
    // Step 1 from W = ½, b = 0: W₁ = [[1, ½], [0, ½]], b₁ = (½, −½).
    // The pull: version g = 4 for a job from o = 0 (s = 5), w_g = 0. With γ = 1, υ = ½, μ_β = 10:
    // φ = γ/√g (1 − υ/√s) = ½ (1 − ½/√5) = 0.3881966, β = 10φ/(1 + 10φ) = 0.7951645, and the
    // merged model is (1 − β) w₁. On the next batch (x again) its logits are (1 − β)(1.5, −0.5):
    // q = 1 − σ(2 (1 − β)); ∇ = ([[−q, 0], [q, 0]], (−q, q)); c = ⟨∇, w_g − w₁⟩ = q + q = 2q.
    // k = μ_β/(1 + μ_β φ)²; γ −= 0.1 c k (1 − υ/√s)/√g; υ −= 0.1 c k (−γ/(√g √s)).
    // Step 2 from the merged model with the same gradient: W₂ = (1 − β) W₁ − ∇_W, b₂ likewise.
    let (g, s) = (4f64, 5f64);
    let phi = 1.0 / g.sqrt() * (1.0 - 0.5 / s.sqrt());
    let beta = 10.0 * phi / (1.0 + 10.0 * phi);
    assert!((phi - 0.3881966).abs() < 1e-7 && (beta - 0.7951645).abs() < 1e-7, "the comment's numbers");
    let q = 1.0 - 1.0 / (1.0 + (-2.0 * (1.0 - beta)).exp());
    let (c, k) = (2.0 * q, 10.0 / (1.0 + 10.0 * phi).powi(2));
    let gamma = 1.0 - 0.1 * c * k * (1.0 - 0.5 / s.sqrt()) / g.sqrt();
    let upsilon = 0.5 + 0.1 * c * k / (g.sqrt() * s.sqrt());
    let keep = 1.0 - beta;
    let want = [keep + q, keep * 0.5, -q, keep * 0.5, keep * 0.5 + q, -keep * 0.5 - q];

    let names = ["w", "b"].map(String::from).to_vec();
    let m = |v: [f32; 4]| Tensor::from_slice(&v).reshape([2, 2]);
    let params = ParamSet::new(names.clone(), vec![m([0.5; 4]), Tensor::from_slice(&[0.0f32, 0.0])]).unwrap();
    let pulled = ParamSet::new(names, vec![m([0.0; 4]), Tensor::from_slice(&[0.0f32, 0.0])]).unwrap();
    let pull =
        fl_core::trainer::learned_pull::LearnedPullConfig { lr_gamma: 0.1, lr_upsilon: 0.1, ..Default::default() };
    let cfg = SgdConfig { lr: 1.0, batch_size: 1, steps: Some(2), learned_pull: Some(pull), ..Default::default() };
    let trainer = Sgd::new(cfg);
    let mut session =
        trainer.start(vec![TrainJob { params, indices: Tensor::from_slice(&[0i64]), ..job(None) }]).unwrap();
    session.run_until(0.5).unwrap();
    session.merge_pulled(&pulled, PullInfo { base_version: 0, pulled_version: 4 }).unwrap();
    session.run_until(1.0).unwrap();
    let out = session.finish().unwrap().pop().unwrap();
    let close = |got: Vec<f64>, want: &[f64]| {
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "got {got:?}, want {want:?}");
    };
    close(flat(&out.params), &want);
    let state = out.state.expect("the controls are the client's state");
    assert_eq!(state.names(), ["pull.gamma", "pull.upsilon"]);
    close(flat(&state), &[gamma, upsilon]);
    assert!((out.lr_sum - 2.0).abs() < 1e-9, "two steps at lr 1: {}", out.lr_sum);
    // The request slot's reward: the loss on that batch before the merge, at logits (1.5, −0.5),
    // minus the loss after it, at (1 − β)(1.5, −0.5).
    let reward = (1.0 + (-2.0f64).exp()).ln() - (1.0 + (-2.0 * keep).exp()).ln();
    let merge = out.pull_merge.expect("a learned merge reports its weight and reward");
    assert!((merge.weight - beta).abs() < 1e-12, "weight {}, want {beta}", merge.weight);
    assert!((merge.reward - reward).abs() < 1e-6, "reward {}, want {reward}", merge.reward);
}

/// Job `c` of three clients of 2, 1 and 3 samples of [`tiny_dataset`] on [`TwoLayer`] with its
/// features a unit group, each with a width budget of `ratio` over it; one model and one data
/// set for all, so that the jobs train as one cohort.
fn budget_jobs(ratio: f64) -> impl Fn(usize) -> TrainJob {
    let model = Arc::new(TwoLayer::with_feature_group()) as Arc<dyn Model>;
    let data = tiny_dataset();
    let budget = fl_core::WidthBudget::new(ratio, vec![0], vec![], true);
    move |c: usize| {
        let samples = [(0i64, 2i64), (2, 3), (3, 6)][c];
        TrainJob {
            model: Arc::clone(&model),
            data: data.shallow_clone(),
            params: two_layer([[0.3, -0.2, 0.4, 0.1], [0.2, -0.1, 0.5, 0.3]], [0.0, 0.1]),
            indices: Tensor::arange_start(samples.0, samples.1, fl_core::tch::kind::INT64_CPU),
            rng: rng::stream(5, &[c as u64]),
            width: Some(budget.clone()),
            ..job(None)
        }
    }
}

#[test]
fn platon_jobs_prune_alike_alone_and_in_a_cohort_and_keep_their_budget() {
    // Three clients of 2, 1 and 3 samples (2, 1 and 3 steps an epoch, 2 epochs), each keeping
    // half of the two features' 8 parameters: one feature, whose row of `a` and column of `w`
    // end at zero if pruned. Trained together and one by one, the cohort's per-client schedules
    // and masks must match.
    let job = budget_jobs(0.5);
    let platon = fl_core::trainer::platon::PlatonConfig { warmup: 0.0, final_share: 0.5, ..Default::default() };
    let cfg = SgdConfig { lr: 0.2, batch_size: 1, epochs: 2, platon: Some(platon), ..Default::default() };
    let trainer = Sgd::new(cfg);
    assert_eq!(trainer.budget_use(), fl_core::trainer::BudgetUse::Pruning);
    let together = trainer.train_cohort((0..3).map(&job).collect()).unwrap();
    for (c, in_cohort) in together.iter().enumerate() {
        let alone = trainer.train(job(c)).unwrap();
        let (a, b) = (flat(&alone.params), flat(&in_cohort.params));
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-6), "client {c}: alone {a:?}, cohort {b:?}");
        assert_eq!(alone.kept_units, in_cohort.kept_units, "client {c}");
        let kept = in_cohort.kept_units.clone().expect("a pruning job says what it kept");
        let [Some(units)] = &kept[..] else { panic!("one group, in the budget: {kept:?}") };
        assert_eq!(units.len(), 1, "client {c} keeps one feature of two");
        let dropped = 1 - units[0] as usize;
        // `a` row `dropped` (elements 2·dropped, 2·dropped + 1), `w` column `dropped` (4 + dropped, 6 + dropped).
        for i in [2 * dropped, 2 * dropped + 1, 4 + dropped, 6 + dropped] {
            assert_eq!(b[i], 0.0, "client {c}: the pruned feature's parameter {i} is zero: {b:?}");
        }
    }
}

#[test]
fn a_client_chooses_its_width_one_way() {
    let both =
        SgdConfig { platon: Some(Default::default()), width_masks: Some(Default::default()), ..Default::default() };
    assert_eq!(both.validate().unwrap_err().key, "platon");
    let both = SgdConfig { quantize: Some(Default::default()), usage: Some(Default::default()), ..Default::default() };
    assert_eq!(both.validate().unwrap_err().key, "usage");
}

#[test]
fn a_devices_batch_size_overrides_the_trainers_and_splits_cohorts() {
    // Batch 1 from the device on a trainer of batch 2 trains as a trainer of batch 1: six
    // steps an epoch over the six samples, not three.
    let own = Sgd::new(SgdConfig { batch_size: 1, epochs: 2, lr: 0.1, ..Default::default() });
    let wide = Sgd::new(SgdConfig { batch_size: 2, epochs: 2, lr: 0.1, ..Default::default() });
    let by_device = wide.train(TrainJob { batch_size: Some(1), ..job(None) }).unwrap();
    let by_trainer = own.train(job(None)).unwrap();
    assert_eq!(by_device.steps, 12);
    assert_eq!(flat(&by_device.params), flat(&by_trainer.params));
    assert_eq!(wide.train(job(None)).unwrap().steps, 6);
    assert_eq!((wide.steps(6, Some(1)), wide.steps(6, None)), (12.0, 6.0));
    // Jobs of two batch sizes do not train as one cohort (the engine keeps them apart).
    let first = job(None);
    let second = TrainJob {
        model: Arc::clone(&first.model),
        data: first.data.shallow_clone(),
        batch_size: Some(1),
        ..job(None)
    };
    let mixed = wide.train_cohort(vec![first, second]);
    let message = mixed.err().expect("a mixed cohort is refused").to_string();
    assert!(message.contains("batch size"), "{message}");
}

#[test]
fn quantised_jobs_train_alike_alone_and_in_a_cohort_and_upload_full_precision_weights() {
    // The three clients of the PLATON test, each with a memory ratio of 1/8 (4 bits), their
    // forward passes on fake-quantised weights of the two features.
    let job = budget_jobs(0.125);
    let cfg = SgdConfig { lr: 0.2, batch_size: 1, epochs: 2, quantize: Some(Default::default()), ..Default::default() };
    let trainer = Sgd::new(cfg.clone());
    assert_eq!(trainer.budget_use(), fl_core::trainer::BudgetUse::Quantisation);
    let together = trainer.train_cohort((0..3).map(&job).collect()).unwrap();
    let plain = Sgd::new(SgdConfig { quantize: None, ..cfg });
    for (c, in_cohort) in together.iter().enumerate() {
        let alone = trainer.train(job(c)).unwrap();
        let (a, b) = (flat(&alone.params), flat(&in_cohort.params));
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-6), "client {c}: alone {a:?}, cohort {b:?}");
        assert!(in_cohort.kept_units.is_none(), "a quantising job uploads every unit");
        // Full-precision shadow weights: not on a 4-bit grid, and not what unquantised training gives.
        let unquantised = flat(&plain.train(TrainJob { width: None, ..job(c) }).unwrap().params);
        assert!(
            b.iter().zip(&unquantised).any(|(x, y)| (x - y).abs() > 1e-4),
            "client {c}: quantisation changed nothing"
        );
    }
}

#[test]
fn kept_graphs_need_graphs() {
    let cfg = SgdConfig { keep_graphs: true, cuda_graphs: false, ..Default::default() };
    assert_eq!(cfg.validate().unwrap_err().key, "keep_graphs");
    assert!(SgdConfig { keep_graphs: true, ..Default::default() }.validate().is_ok());
}
