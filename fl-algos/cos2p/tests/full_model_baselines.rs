//! FedAvg+PLATON, FedAvg+Q-ViT and FedAvg+AdaViT on real Fashion-MNIST with a small ViT. Under
//! PLATON the slow clients receive the whole model, prune their heads and neurons to their
//! width share while training, and upload the units they kept, no others; the server averages
//! each element over the clients that kept it. Under Q-ViT they train on fake-quantised weights
//! and upload their whole full-precision models; under AdaViT they train the whole model with
//! decisions pulled to their budgets and upload it whole. Every global model learns.

use std::sync::Mutex;

use fl_algo_baselines::{CoverageMean, CoverageMeanConfig};
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Experiment, Mask, ParamSet, Result, RunOptions};
use fl_data as _;
use fl_models as _;

/// What each update covered: client, parameters its mask keeps, whether it carries a budget
/// still, and whether its delta is zero outside its mask.
static SEEN: Mutex<Vec<(usize, i64, bool, bool)>> = Mutex::new(Vec::new());

/// Held by each test for its whole run: the tests share [`SEEN`].
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `coverage-mean`, recording what every update covers.
struct Recorded(CoverageMean);

impl Recorded {
    fn new() -> Self {
        Recorded(CoverageMean::new(CoverageMeanConfig::default()))
    }
}

impl Aggregator for Recorded {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let shapes = global.shapes();
        for u in updates {
            let dense = u.mask.dense(&shapes, Device::Cpu);
            let outside: f64 = u
                .delta
                .tensors()
                .iter()
                .zip(&dense)
                .map(|(d, m)| {
                    let off: Tensor = m.ones_like() - m;
                    (d.to_device(Device::Cpu) * off).abs().sum(Kind::Double).double_value(&[])
                })
                .sum();
            let kept = match &u.mask {
                Mask::Full => shapes.iter().map(|s| s.iter().product::<i64>()).sum(),
                m => m.kept_params(&shapes),
            };
            SEEN.lock().unwrap().push((u.client, kept, u.mask.width_budget().is_some(), outside == 0.0));
        }
        self.0.aggregate(global, updates, ctx)
    }
}

fl_core::register!(Aggregator "recorded-coverage-mean" => Recorded::new(),
    summary: "coverage-mean that records what each update covers (a test's)",
    paper: "-");

/// The summary and recorded updates of `method` on 4 clients (two slow ones, at `slow_speed`)
/// of Fashion-MNIST with a 2-block ViT, the slow ones at width level `slow_level`, 8 rounds.
fn run(method: &str, slow_level: f64, slow_speed: f64) -> (fl_core::Summary, Vec<(usize, i64, bool, bool)>) {
    // FedAvg+AdaViT's ViT has its decision networks.
    let decisions = if method == "fedavg-adavit" { "decisions = {}" } else { "" };
    let text = format!(
        r#"
        seed = 3
        clients = 4
        method = "{method}"
        [dataset]
        name = "fashion-mnist"
        train_samples = 3000
        test_samples = 1000
        [partition]
        name = "dirichlet"
        alpha = 1.5
        [model]
        name = "vit"
        depth = 2
        hidden = 32
        mlp = 64
        heads = 4
        patch = 7
        {decisions}
        [trainer]
        optimizer = "adam"
        lr = 0.003
        batch_size = 32
        [mask]
        levels = [1.0, {slow_level}]
        [scheduler]
        rounds = 8
        clients_per_round = 4
        [aggregator]
        name = "recorded-coverage-mean"
        [devices]
        flops_per_s = {{ dist = "per-client", values = [1e10, 1e10, {slow_speed:e}, {slow_speed:e}] }}
    "#
    );
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    SEEN.lock().unwrap().clear();
    let e = Experiment::parse(&text, method).unwrap();
    let opts = RunOptions { device: Device::Cpu, workers: 2, data_dir: fl_build::data_dir() };
    let summary = e.build(&opts).unwrap().run(&mut ()).unwrap();
    let seen = SEEN.lock().unwrap().clone();
    (summary, seen)
}

#[test]
fn slow_clients_prune_while_training_and_upload_the_units_they_kept() {
    let (summary, seen) = run("fedavg-platon", 0.25, 2.5e9);
    assert!(summary.best_accuracy > 0.5, "best accuracy {}", summary.best_accuracy);
    assert_eq!(seen.len(), 32, "8 rounds of 4 updates");
    let full = seen.iter().filter(|s| s.0 < 2).map(|s| s.1).max().unwrap();
    for &(client, kept, budget, zero_outside) in &seen {
        assert!(!budget && zero_outside, "client {client}: an update keeps its budget or moves outside its mask");
        if client < 2 {
            assert_eq!(kept, full, "a full-speed client keeps the whole model");
        } else {
            // The blocks' heads and neurons, most of the model, are pruned to a quarter of their
            // parameters; the embeddings, LayerNorms, projection biases and head stay whole
            // (6228 of 19,658 parameters kept).
            assert!(kept > full / 4 && kept < full * 2 / 5, "client {client} kept {kept} of {full}");
        }
    }
}

/// Runs `method` with the slow clients at `slow_level`; checks that the global model beats
/// `accuracy` and that every update, the slow clients' (8 or more) included, carries the whole
/// model.
fn whole_model_updates(method: &str, slow_level: f64, accuracy: f64) {
    let (summary, seen) = run(method, slow_level, 1e9);
    assert!(summary.best_accuracy > accuracy, "{method}: best accuracy {}", summary.best_accuracy);
    let full = seen.iter().map(|s| s.1).max().unwrap();
    assert!(seen.iter().filter(|s| s.0 >= 2).count() >= 8);
    assert!(seen.iter().all(|s| s.1 == full && s.3), "{method}: {seen:?}");
}

#[test]
fn quantising_clients_upload_their_whole_full_precision_models_and_learn() {
    // The slow clients (a memory ratio of 1/16: 2-bit weights) train and upload every unit.
    whole_model_updates("fedavg-qvit", 0.0625, 0.5);
}

#[test]
fn deciding_clients_upload_their_whole_models_and_the_global_model_learns() {
    // The slow clients' budget (1/8) pulls their decisions to keep half of each kind; the fast
    // ones' (1) keeps everything. The global model, whose evaluation follows its decisions,
    // learns (best 0.42 when written, 0.25 after the first round; FedAvg on the same
    // federation 0.53; chance 0.1).
    whole_model_updates("fedavg-adavit", 0.125, 0.35);
}
