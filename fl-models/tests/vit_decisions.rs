//! The `vit` model's AdaViT decisions and the `sgd` trainer's usage loss: decisions that keep
//! everything give the plain ViT, skipped blocks leave the tokens unchanged, the decision nets
//! cost what their linear maps cost, jobs train alike alone and in a cohort, and the usage
//! loss pulls each client's kept shares to its budget's targets.

use std::sync::Arc;

use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::rng::{self, CohortNoise, TensorNoise};
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::trainer::sgd::{Optimizer, Sgd, SgdConfig};
use fl_core::trainer::usage::{UsageConfig, target_share};
use fl_core::{DataSpec, Dataset, Gate, LocalTrainer, Mode, Model, ParamSet, TrainJob, WidthBudget, forward_one};

use fl_models as _;

const PLAIN: &str = "depth = 2\nhidden = 16\nmlp = 16\nheads = 4\npatch = 4";

fn spec() -> DataSpec {
    DataSpec { input_shape: vec![1, 8, 8], classes: 2, vocab_size: None }
}

fn vit(params: &str) -> Arc<dyn Model> {
    let registry = Registry::get().unwrap();
    let Builder::Model(build) = registry.component(ComponentKind::Model, "vit", "test", "model").unwrap().build else {
        unreachable!("registry keys builders by kind")
    };
    build(&Params::new("test", "model", params.parse().unwrap()), &spec()).unwrap()
}

fn with_decisions(extra: &str) -> Arc<dyn Model> {
    vit(&format!("{PLAIN}\ndecisions = {{ {extra} }}"))
}

/// The decision model's parameters: the plain model's `plain` for the shared names, and for the
/// decision nets zero weights and the biases `bias(name)`.
fn decided(model: &dyn Model, plain: &ParamSet, bias: impl Fn(&str) -> f64) -> Vec<Tensor> {
    let fresh = model.init(&mut rng::stream(1, &[]));
    fresh
        .names()
        .iter()
        .zip(fresh.tensors())
        .map(|(name, t)| match plain.names().iter().position(|n| n == name) {
            Some(i) => plain.tensors()[i].shallow_clone(),
            None if name.ends_with(".weight") => t.zeros_like(),
            None => t.full_like(bias(name)),
        })
        .collect()
}

/// Two classes told apart by the images' mean.
fn data(n: i64) -> Dataset {
    let y = Tensor::arange(n, (Kind::Int64, Device::Cpu)).remainder(2);
    let shift = (y.to_kind(Kind::Float) - 0.5).reshape([n, 1, 1, 1]);
    let x = (TensorNoise::new(5).uniform(&[n, 1, 8, 8], Device::Cpu) - 0.5) + shift;
    Dataset { x, y }
}

fn image(seed: u64) -> Tensor {
    TensorNoise::new(seed).uniform(&[6, 1, 8, 8], Device::Cpu)
}

#[test]
fn decisions_that_keep_everything_give_the_plain_vit() {
    let (plain, model) = (vit(PLAIN), with_decisions(""));
    let p = plain.init(&mut rng::stream(2, &[]));
    let t = decided(model.as_ref(), &p, |_| 30.0);
    let x = image(3);
    let want = forward_one(plain.as_ref(), p.tensors(), &x, &mut Mode::Eval);
    assert!(forward_one(model.as_ref(), &t, &x, &mut Mode::Eval).allclose(&want, 1e-5, 1e-6, false));
    // Training draws logistic noise (at most ln 10⁶ ≈ 13.8 in size), which a bias of 30 outweighs.
    let mut noise = CohortNoise::new(vec![TensorNoise::new(4)], Device::Cpu);
    let trained = forward_one(model.as_ref(), &t, &x, &mut Mode::train(&mut noise));
    assert!(trained.allclose(&want, 1e-5, 1e-6, false));
}

#[test]
fn skipped_sub_layers_leave_every_token_unchanged() {
    // Sub-layers decided off give what blocks whose branches add nothing give: the plain model
    // with the attention projections and fc2 zeroed.
    let (plain, model) = (vit(PLAIN), with_decisions(""));
    let p = plain.init(&mut rng::stream(2, &[]));
    let t = decided(model.as_ref(), &p, |name| if name.contains(".decide.layers.") { -30.0 } else { 30.0 });
    let silenced: Vec<Tensor> = p
        .names()
        .iter()
        .zip(p.tensors())
        .map(|(n, t)| if n.contains("attn.proj") || n.contains("mlp.fc2") { t.zeros_like() } else { t.shallow_clone() })
        .collect();
    let x = image(5);
    let want = forward_one(plain.as_ref(), &silenced, &x, &mut Mode::Eval);
    assert!(forward_one(model.as_ref(), &t, &x, &mut Mode::Eval).allclose(&want, 1e-5, 1e-6, false));
    // A training pass records each block's shares: every patch and head kept, no sub-layer.
    let mut noise = CohortNoise::new(vec![TensorNoise::new(4)], Device::Cpu);
    let mut mode = Mode::train(&mut noise);
    let stacked: Vec<Tensor> = t.iter().map(|t| t.unsqueeze(0)).collect();
    let _ = model.forward(&stacked, &x.unsqueeze(0), &mut mode);
    let usage = mode.take_usage();
    assert_eq!(usage.len(), 6, "three kinds of gate in each of two blocks");
    for u in usage {
        let want = if u.gate == Gate::Layers { 0.0 } else { 1.0 };
        assert_eq!(u.kept.double_value(&[0]), want, "{:?}", u.gate);
    }
}

#[test]
fn the_decision_nets_cost_their_linear_maps() {
    // Per block, D = 16: one logit at each of the 4 patches (4·(2·16 + 1)), and on the class
    // token 4 heads (2·4·16 + 4) and 2 sub-layers (2·2·16 + 2): 330 FLOPs.
    let (plain, model) = (vit(PLAIN), with_decisions(""));
    let flops = |m: &dyn Model| m.forward_flops(&m.structure().shapes());
    assert_eq!(flops(model.as_ref()) - flops(plain.as_ref()), 2.0 * 330.0);
    assert!(model.records_usage() && !plain.records_usage());
    // A head's decision row belongs to the head's unit.
    let s = model.structure();
    let heads = s.groups.iter().find(|g| g.name == "blocks.0.heads").unwrap();
    let names: Vec<&str> = heads.members.iter().map(|m| s.tensors[m.tensor].name.as_str()).collect();
    assert!(names.contains(&"blocks.0.decide.heads.weight") && names.contains(&"blocks.0.decide.heads.bias"));
}

/// Job `c` of three clients (16, 8 and 24 samples of `data`) with a width budget of `ratio`
/// over every group; jobs of one model and data set train as one cohort.
fn budget_job(model: &Arc<dyn Model>, data: &Dataset, start: &ParamSet, ratio: f64, c: usize) -> TrainJob {
    let (from, to) = [(0, 16), (16, 24), (24, 48)][c];
    let groups = model.structure().groups.len();
    TrainJob {
        model: Arc::clone(model),
        params: start.shallow_clone(),
        grad_mask: None,
        frozen: Vec::new(),
        data: data.shallow_clone(),
        indices: Tensor::arange_start(from, to, (Kind::Int64, Device::Cpu)),
        rng: rng::stream(7, &[c as u64]),
        noise: TensorNoise::new(11 + c as u64),
        version: 0,
        delay: 0.0,
        width: Some(WidthBudget::new(ratio, (0..groups).collect(), vec![], true)),
        state: None,
        batch_size: None,
    }
}

fn adaptive(weight: f64, epochs: usize) -> Sgd {
    Sgd::new(SgdConfig {
        optimizer: Optimizer::Adam,
        lr: 0.01,
        batch_size: 8,
        epochs,
        usage: Some(UsageConfig { weight }),
        ..SgdConfig::default()
    })
}

#[test]
fn decided_jobs_train_alike_alone_and_in_a_cohort() {
    let model = with_decisions("initial_keep = 0.8");
    let start = model.init(&mut rng::stream(3, &[]));
    let trainer = adaptive(1.0, 2);
    assert_eq!(trainer.budget_use(), fl_core::trainer::BudgetUse::Decisions);
    let ratios = [0.125, 0.5, 1.0];
    let d = data(48);
    let jobs = |c: usize| budget_job(&model, &d, &start, ratios[c], c);
    let together = trainer.train_cohort((0..3).map(jobs).collect()).unwrap();
    for (c, in_cohort) in together.iter().enumerate() {
        let alone = trainer.train(jobs(c)).unwrap();
        assert_eq!(alone.steps, in_cohort.steps);
        assert!((alone.mean_loss - in_cohort.mean_loss).abs() < 1e-5, "client {c}");
        for (a, b) in alone.params.tensors().iter().zip(in_cohort.params.tensors()) {
            assert!(a.allclose(b, 1e-5, 1e-5, false), "client {c}: max diff {}", (a - b).abs().max());
        }
        assert!(in_cohort.kept_units.is_none(), "a deciding job uploads every unit");
    }
}

/// Each gate kind's kept share of a trained model on the data, in training passes (sampled
/// decisions), over a few noise streams.
fn shares(model: &dyn Model, params: &ParamSet) -> [f64; 3] {
    let x = data(48).x;
    let stacked: Vec<Tensor> = params.tensors().iter().map(|t| t.unsqueeze(0)).collect();
    let mut sums = [0.0; 3];
    let mut counts = [0.0; 3];
    for seed in 0..4 {
        let mut noise = CohortNoise::new(vec![TensorNoise::new(100 + seed)], Device::Cpu);
        let mut mode = Mode::train(&mut noise);
        let _ = fl_core::tch::no_grad(|| model.forward(&stacked, &x.unsqueeze(0), &mut mode));
        for u in mode.take_usage() {
            sums[u.gate as usize] += u.kept.double_value(&[0]);
            counts[u.gate as usize] += 1.0;
        }
    }
    [0, 1, 2].map(|g| sums[g] / counts[g])
}

#[test]
fn the_usage_loss_pulls_the_kept_shares_to_the_budgets_targets() {
    // A budget of 1/8 of the compute: each kind's target is ∛(1/8) = 1/2; every decision
    // starts at a keep probability of 0.95.
    let model = with_decisions("");
    let start = model.init(&mut rng::stream(3, &[]));
    let before = shares(model.as_ref(), &start);
    assert!(before.iter().all(|&s| s > 0.85), "{before:?}");
    let target = target_share(0.125);
    let trained = adaptive(2.0, 20).train(budget_job(&model, &data(48), &start, 0.125, 2)).unwrap();
    let after = shares(model.as_ref(), &trained.params);
    for (kind, share) in ["tokens", "heads", "blocks"].iter().zip(after) {
        assert!((share - target).abs() < 0.15, "{kind}: kept {share:.3}, target {target}");
    }
    // Without the loss (weight 0) the decisions stay near where they started.
    let free = adaptive(0.0, 20).train(budget_job(&model, &data(48), &start, 0.125, 2)).unwrap();
    let unpulled = shares(model.as_ref(), &free.params);
    assert!(unpulled.iter().all(|&s| s > 0.75), "{unpulled:?}");
}

#[test]
fn the_usage_loss_needs_decisions_and_pulls_an_unbudgeted_job_to_keep_everything() {
    let plain = vit(PLAIN);
    let start = plain.init(&mut rng::stream(3, &[]));
    let err =
        adaptive(1.0, 1).train(budget_job(&plain, &data(48), &start, 0.5, 0)).err().expect("no decisions to pull");
    assert!(err.to_string().contains("decisions"), "{err}");
    // A job without a budget may use the whole model: its target is 1, and from a keep
    // probability of 0.5 its decisions move up.
    let model = with_decisions("initial_keep = 0.5");
    let start = model.init(&mut rng::stream(3, &[]));
    let before = shares(model.as_ref(), &start);
    let whole = TrainJob { width: None, ..budget_job(&model, &data(48), &start, 0.5, 2) };
    let trained = adaptive(5.0, 10).train(whole).unwrap();
    let after = shares(model.as_ref(), &trained.params);
    for g in 0..3 {
        assert!(after[g] > before[g] + 0.15, "kind {g}: kept {:.3} before, {:.3} after", before[g], after[g]);
    }
}
