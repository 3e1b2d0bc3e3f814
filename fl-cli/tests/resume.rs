//! Resume after a crash (part of the fault suite). Every registered method runs on real MNIST
//! three ways: straight through; again with a checkpoint after every aggregation, which must
//! not change a single record; and from several of those checkpoints in a fresh process state
//! (a new simulation built from the same config, the checkpoint restored from its bytes), which
//! must give the records that followed the checkpoint in the first run, byte for byte, and the
//! same summary. Both batching modes run, so checkpoints taken while jobs wait to join a cohort
//! or train in one are covered, as are schedulers, aggregators and mask policies with state of
//! their own (rounds, fragment counts, RAM-Fed's memory, region draws, stale global models).

use fl_core::engine::cohort::Batching;
use fl_core::engine::{Checkpoint, Summary};
use fl_core::tch::Device;
use fl_core::{EvalRecord, Experiment, Observer, RunOptions, Simulation};

use fl_algos as _;
use fl_data as _;
use fl_models as _;

/// Keeps each evaluation as its metrics row with the diagnostics, and every checkpoint.
#[derive(Default)]
struct Recorder {
    rows: Vec<String>,
    checkpoints: Vec<Checkpoint>,
    every_aggregation: bool,
}

impl Observer for Recorder {
    fn on_eval(&mut self, record: &EvalRecord, diagnostics: &[(String, f64)]) -> fl_core::Result<()> {
        self.rows.push(format!("{} {diagnostics:?}", record.csv_row()));
        Ok(())
    }

    fn on_note(&mut self, note: &str) {
        assert!(!note.starts_with("no checkpoints"), "{note}");
    }

    fn wants_checkpoint(&mut self) -> bool {
        self.every_aggregation
    }

    fn on_checkpoint(&mut self, checkpoint: &Checkpoint) -> fl_core::Result<()> {
        // Through its bytes, as a file would give it back.
        self.checkpoints.push(Checkpoint::from_bytes(checkpoint.bytes().to_vec())?);
        Ok(())
    }
}

fn experiment(method: &str, batching: Batching) -> Experiment {
    let text = format!(
        r#"
        seed = 5
        clients = 5
        method = "{method}"
        [dataset]
        name = "mnist"
        train_samples = 500
        test_samples = 200
        [partition]
        name = "dirichlet"
        alpha = 0.5
        min_samples = 20
        [model]
        name = "mlp"
        hidden = [16]
        dropout = 0.1
        [trainer]
        batch_size = 20
        [eval]
        every_aggregations = 1
        [run]
        max_aggregations = 7
        "#
    );
    let mut e = Experiment::parse(&text, method).unwrap();
    e.run.batching = batching;
    e
}

fn build(e: &Experiment) -> Simulation {
    let opts = RunOptions { device: Device::Cpu, workers: 2, data_dir: fl_build::data_dir() };
    e.build(&opts).unwrap()
}

fn summary_text(s: &Summary) -> String {
    serde_json::to_string(s).unwrap()
}

/// Every method registered, covering each scheduler, aggregator and mask policy.
const METHODS: [&str; 18] = [
    "fedavg",
    "fedprox",
    "fedasync",
    "fedbuff",
    "ra-fed",
    "ram-fed",
    "prunefl",
    "ist",
    "oap",
    "splitfl",
    "fed-raa",
    "fed-raa-random",
    "fed-raa-sync",
    "mp-raa",
    "asyncnc-afl",
    "asyncnc-afl-code",
    "asyncnc-events",
    "asyncnc-sfl",
];

#[test]
fn a_run_resumed_from_any_checkpoint_ends_as_if_it_never_stopped() {
    let dir = fl_build::data_dir();
    assert!(dir.join("mnist/train-images-idx3-ubyte").exists(), "MNIST is not in {}", dir.display());
    for method in METHODS {
        for batching in [Batching::Off, Batching::On] {
            let e = experiment(method, batching);
            let what = format!("{method} (batching {batching:?})");
            let mut straight = Recorder::default();
            let summary = build(&e).run(&mut straight).unwrap();
            assert!(straight.rows.len() >= 4, "{what}: {} evaluations", straight.rows.len());

            let mut saving = Recorder { every_aggregation: true, ..Default::default() };
            let saving_summary = build(&e).run(&mut saving).unwrap();
            assert_eq!(saving.rows, straight.rows, "{what}: taking checkpoints changed the records");
            assert_eq!(summary_text(&saving_summary), summary_text(&summary), "{what}");
            let n = saving.checkpoints.len();
            assert!(n >= 3, "{what}: {n} checkpoints");

            for cp in [&saving.checkpoints[0], &saving.checkpoints[n / 2], &saving.checkpoints[n - 1]] {
                let mut sim = build(&e);
                sim.restore(cp).unwrap();
                let mut resumed = Recorder::default();
                let resumed_summary = sim.run(&mut resumed).unwrap();
                let before = cp.evaluations().unwrap().len();
                assert_eq!(
                    resumed.rows,
                    straight.rows[before..],
                    "{what}: resumed at version {} (after {before} evaluations)",
                    cp.version()
                );
                assert_eq!(summary_text(&resumed_summary), summary_text(&summary), "{what}: at {}", cp.version());
            }
        }
    }
}

#[test]
fn a_checkpoint_restores_only_into_the_setup_it_came_from() {
    let e = experiment("fedavg", Batching::Off);
    let mut saving = Recorder { every_aggregation: true, ..Default::default() };
    build(&e).run(&mut saving).unwrap();
    let cp = &saving.checkpoints[1];

    let mut other = e.clone();
    other.seed = 6;
    let err = build(&other).restore(cp).unwrap_err().to_string();
    assert!(err.contains("another setup"), "{err}");

    let mut started = build(&e);
    started.run(&mut ()).unwrap();
    assert!(started.restore(cp).unwrap_err().to_string().contains("has not started"));

    let mut bytes = cp.bytes().to_vec();
    bytes.truncate(bytes.len() / 2);
    let err = Checkpoint::from_bytes(bytes).and_then(|c| build(&e).restore(&c)).unwrap_err().to_string();
    assert!(err.contains("checkpoint"), "{err}");
    bytes = cp.bytes().to_vec();
    bytes[0] = b'X';
    assert!(Checkpoint::from_bytes(bytes).is_err());
}
