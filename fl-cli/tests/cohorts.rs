//! Cohort training inside the engine, on real MNIST: each method trained as one cohort per
//! round, as cohorts of one, and with the per-client loop that preceded cohorts gives the same
//! global model after a round (to 1e-5), and accuracies within 0.3 points after 30 rounds.
//! FedAvg (plain), FedProx (proximal term), RA-Fed (elementwise region masks) and Fed-RAA
//! (structured fragments, asynchronous) cover the trainer's and the engine's paths.

use std::sync::Arc;

use fl_core::engine::Setup;
use fl_core::engine::cohort::Batching;
use fl_core::tch::Device;
use fl_core::trainer::reference::ReferenceSgd;
use fl_core::trainer::sgd::SgdConfig;
use fl_core::{ComponentKind, Experiment, ParamSet, RunOptions, Simulation};

use fl_algos as _;
use fl_data as _;
use fl_models as _;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Cohorts,
    Alone,
    Reference,
}

/// A method on 6,000 MNIST samples split among 8 clients (Dirichlet α = 0.5: unequal sizes),
/// an MLP with dropout, SGD with momentum; `run` ends the run, `trainer` adds trainer keys.
fn experiment(method: &str, run: &str, trainer: &str) -> Experiment {
    let text = format!(
        r#"
        seed = 3
        clients = 8
        method = "{method}"
        [dataset]
        name = "mnist"
        train_samples = 6000
        test_samples = 2000
        [partition]
        name = "dirichlet"
        alpha = 0.5
        min_samples = 20
        [model]
        name = "mlp"
        hidden = [64]
        dropout = 0.2
        [trainer]
        lr = 0.05
        batch_size = 32
        epochs = 1
        momentum = 0.5
        {trainer}
        [run]
        {run}
        "#
    );
    Experiment::parse(&text, method).unwrap()
}

fn run(experiment: &Experiment, mode: Mode) -> (ParamSet, f64) {
    let dir = fl_build::data_dir();
    assert!(
        dir.join("mnist/train-images-idx3-ubyte").exists(),
        "MNIST is not in {}; run `cargo xtask setup`",
        dir.display()
    );
    let mut e = experiment.clone();
    e.run.batching = if mode == Mode::Cohorts { Batching::On } else { Batching::Off };
    let mut setup: Setup = e.setup(&RunOptions { device: Device::Cpu, workers: 2, data_dir: dir }).unwrap();
    if mode == Mode::Reference {
        let cfg: SgdConfig = e.component(ComponentKind::Trainer).params.parse().unwrap();
        setup.trainer = Arc::new(ReferenceSgd::new(cfg));
    }
    let mut sim = Simulation::new(setup).unwrap();
    let summary = sim.run(&mut ()).unwrap();
    (sim.global().shallow_clone(), summary.final_accuracy)
}

fn max_difference(a: &ParamSet, b: &ParamSet) -> f64 {
    a.tensors().iter().zip(b.tensors()).map(|(x, y)| (x - y).abs().max().double_value(&[])).fold(0.0, f64::max)
}

/// Each method with its own trainer keys, and the aggregations of its first round (Fed-RAA is
/// asynchronous: one aggregation per arrival, 8 clients).
const METHODS: [(&str, &str, u64); 4] =
    [("fedavg", "", 1), ("fedprox", "prox_mu = 0.1", 1), ("ra-fed", "", 1), ("fed-raa", "", 8)];

#[test]
fn one_round_gives_the_same_global_model_in_every_mode() {
    for (method, trainer, round) in METHODS {
        let e = experiment(method, &format!("max_aggregations = {round}"), trainer);
        let (cohorts, _) = run(&e, Mode::Cohorts);
        let (alone, _) = run(&e, Mode::Alone);
        let (reference, _) = run(&e, Mode::Reference);
        let moved = max_difference(&alone, &experiment_start(&e));
        assert!(moved > 1e-3, "{method}: the round moved the model by {moved:e} only");
        let (d1, d2) = (max_difference(&cohorts, &alone), max_difference(&alone, &reference));
        assert!(d1 <= 1e-5 && d2 <= 1e-5, "{method}: cohorts vs alone {d1:e}, alone vs reference {d2:e}");
    }
}

/// The global model before any round.
fn experiment_start(e: &Experiment) -> ParamSet {
    let opts = RunOptions { device: Device::Cpu, workers: 1, data_dir: fl_build::data_dir() };
    e.build(&opts).unwrap().global().shallow_clone()
}

#[test]
fn thirty_rounds_reach_the_same_accuracy_in_every_mode() {
    for (method, trainer, round) in METHODS {
        let e = experiment(method, &format!("max_aggregations = {}", 30 * round), trainer);
        let accuracies: Vec<f64> = [Mode::Cohorts, Mode::Alone, Mode::Reference].map(|m| run(&e, m).1).to_vec();
        assert!(accuracies[1] > 0.8, "{method}: {accuracies:?}");
        for a in &accuracies {
            assert!((a - accuracies[1]).abs() <= 0.003, "{method}: cohorts, alone, reference: {accuracies:?}");
        }
    }
}
