//! Packs of runs (`fl_core::engine::pack`, `fl pack`) on real MNIST: every run of a pack ends
//! with the global model it reaches alone (to 1e-5), the cohorts of compatible runs merge, a
//! pack repeats itself exactly, and a run that fails leaves the others to finish.

use std::path::Path;
use std::process::Command;

use fl_core::engine::cohort::Batching;
use fl_core::engine::pack::RunPack;
use fl_core::tch::Device;
use fl_core::{Experiment, ParamSet, RunOptions, Simulation};

use fl_algos as _;
use fl_data as _;
use fl_models as _;

/// `method` on 3,000 MNIST samples split among 6 clients (Dirichlet α = `alpha`), an MLP
/// with dropout, cohorts on, until `aggregations`; `extra` is appended (more sections).
fn experiment_text(method: &str, alpha: f64, aggregations: u64, extra: &str) -> String {
    format!(
        r#"
        seed = 4
        clients = 6
        method = "{method}"
        [dataset]
        name = "mnist"
        train_samples = 3000
        test_samples = 1000
        [partition]
        name = "dirichlet"
        alpha = {alpha}
        min_samples = 20
        [model]
        name = "mlp"
        hidden = [32]
        dropout = 0.2
        [run]
        batching = "on"
        max_aggregations = {aggregations}
        {extra}
        "#
    )
}

/// Two FedAvg runs that share data, model and trainer (their cohorts merge), FedProx (another
/// trainer: its cohorts train apart), FedBuff (asynchronous: cohorts of the jobs dispatched
/// between two arrivals) and Fed-RAA (mid-training pulls: sessions outside the pack).
fn experiments() -> Vec<Experiment> {
    [
        experiment_text("fedavg", 0.5, 3, ""),
        experiment_text("fedavg", 0.1, 3, ""),
        experiment_text("fedprox", 0.5, 3, "[trainer]\nprox_mu = 0.1"),
        experiment_text("fedbuff", 0.5, 6, "[scheduler]\nbuffer = 2\nconcurrency = 4\naggregations = 6"),
        experiment_text("fed-raa", 0.5, 6, ""),
    ]
    .iter()
    .enumerate()
    .map(|(i, text)| Experiment::parse(text, &format!("run{i}")).unwrap())
    .collect()
}

fn options() -> RunOptions {
    let dir = fl_build::data_dir();
    assert!(
        dir.join("mnist/train-images-idx3-ubyte").exists(),
        "MNIST is not in {}; run `cargo xtask setup`",
        dir.display()
    );
    RunOptions { device: Device::Cpu, workers: 1, data_dir: dir }
}

fn run_alone(e: &Experiment) -> ParamSet {
    let mut sim = e.build(&options()).unwrap();
    sim.run(&mut ()).unwrap();
    sim.global().shallow_clone()
}

/// Runs `experiments` as one pack; returns each run's global model and the pack's counts.
fn run_packed(experiments: &[Experiment]) -> (Vec<ParamSet>, fl_core::engine::pack::PackStats) {
    let pack = RunPack::new();
    let mut sims: Vec<Simulation> = experiments.iter().map(|e| e.build_in(&options(), &pack).unwrap()).collect();
    // The simulations outlive their runs (borrowed, not moved, into the threads): a run
    // leaves the pack when it ends, not when it is dropped, or the longer runs would wait.
    let globals = std::thread::scope(|s| {
        let runs: Vec<_> = sims
            .iter_mut()
            .map(|sim| {
                s.spawn(move || {
                    sim.run(&mut ()).unwrap();
                    sim.global().shallow_clone()
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    (globals, pack.stats())
}

fn max_difference(a: &ParamSet, b: &ParamSet) -> f64 {
    a.tensors().iter().zip(b.tensors()).map(|(x, y)| (x - y).abs().max().double_value(&[])).fold(0.0, f64::max)
}

fn identical(a: &ParamSet, b: &ParamSet) -> bool {
    a.tensors().iter().zip(b.tensors()).all(|(x, y)| x.equal(y))
}

#[test]
fn packed_runs_end_where_they_end_alone_and_repeat_exactly() {
    let experiments = experiments();
    assert!(experiments.iter().all(|e| e.run.batching == Batching::On));
    let (packed, stats) = run_packed(&experiments);
    for (i, (e, global)) in experiments.iter().zip(&packed).enumerate() {
        let alone = run_alone(e);
        let d = max_difference(global, &alone);
        assert!(d <= 1e-5, "run {i} ({}): packed vs alone differ by {d:e}", e.file);
    }
    // The two FedAvg runs' 3 rounds train together: fewer computations than cohorts.
    assert!(stats.computations + 3 <= stats.cohorts, "{stats:?}");
    let (again, stats_again) = run_packed(&experiments);
    assert_eq!(stats, stats_again);
    for (i, (a, b)) in packed.iter().zip(&again).enumerate() {
        assert!(identical(a, b), "run {i}: a pack repeated gives another model");
    }
}

#[test]
fn fl_pack_writes_every_run_directory_and_reports_the_run_that_fails() {
    let _ = options();
    let dir = tempfile::tempdir().unwrap();
    let good = ["a", "b"].map(|name| dir.path().join(name));
    for (d, alpha) in good.iter().zip([0.5, 0.1]) {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("experiment.toml"), experiment_text("fedavg", alpha, 2, "")).unwrap();
    }
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("experiment.toml"), experiment_text("fedavg", 0.5, 2, "[trainer]\nlr = -1.0")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fl"))
        .arg("pack")
        .args([&good[0], &bad, &good[1]])
        .args(["--device", "cpu", "--workers", "1"])
        .env("FL_DATA_DIR", fl_build::data_dir())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a failed run must fail the pack");
    assert!(stderr.contains("1 of 3 packed run(s) failed"), "{stderr}");
    let log = std::fs::read_to_string(bad.join("log.txt")).unwrap();
    assert!(log.contains("experiment.toml") && log.contains("lr"), "the error names the file and the key: {log}");
    for d in &good {
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["aggregations"].as_u64(), Some(2), "{}", d.display());
        assert!(read(d, "log.txt").contains("final accuracy"));
        assert_eq!(read(d, "metrics.csv").lines().count(), 1 + 3, "header + versions 0, 1, 2");
    }
}

#[test]
fn a_packed_run_keeps_one_thread_per_job() {
    let threaded = Experiment::parse(&experiment_text("fedavg", 0.5, 2, "threads_per_job = 2"), "threaded").unwrap();
    let err = threaded.build_in(&options(), &RunPack::new()).err().expect("a pack trains on one thread");
    assert!(err.to_string().contains("run.threads_per_job"), "{err}");
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}
