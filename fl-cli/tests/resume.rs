//! Resume after a crash (part of the fault suite). Every registered method runs on real MNIST
//! three ways: straight through; again with a checkpoint after every aggregation, which must
//! not change a single record; and from several of those checkpoints in a fresh process state
//! (a new simulation built from the same config, the checkpoint restored from its bytes), which
//! must give the records that followed the checkpoint in the first run, byte for byte, and the
//! same summary. Both batching modes run, so checkpoints taken while jobs wait to join a cohort
//! or train in one are covered, as are schedulers, aggregators and mask policies with state of
//! their own (rounds, fragment counts, RAM-Fed's memory, region draws, stale global models),
//! and jobs checkpointed after a pull that found nothing newer (FedASMU's early pulls: they
//! once resumed as if still waiting for it and stopped at their pull share).

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

    fn wants_checkpoint(&mut self, _: u64, _: f64) -> bool {
        self.every_aggregation
    }

    fn on_checkpoint(&mut self, checkpoint: &Checkpoint) -> fl_core::Result<()> {
        // Through its bytes, as a file would give it back.
        self.checkpoints.push(Checkpoint::from_bytes(checkpoint.bytes().to_vec())?);
        Ok(())
    }
}

fn experiment(method: &str, batching: Batching) -> Experiment {
    // Co-S²P windows blocks: a small ViT with an exit after each block but the last.
    // FedAvg+AdaViT's decisions are the ViT's.
    let model = match method {
        m if m.starts_with("cos2p") => {
            "name = \"vit\"\ndepth = 3\nexits = [1, 2]\nhidden = 16\nmlp = 32\nheads = 4\npatch = 7\ndropout = 0.1"
        }
        "fedavg-adavit" => {
            "name = \"vit\"\ndepth = 2\nhidden = 16\nmlp = 32\nheads = 4\npatch = 7\ndropout = 0.1\ndecisions = {}"
        }
        _ => "name = \"mlp\"\nhidden = [16]\ndropout = 0.1",
    };
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
        {model}
        [trainer]
        batch_size = 20
        [eval]
        every_aggregations = 1
        client_test_share = 0.2
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

/// Every registered method, so that each scheduler, aggregator and mask policy (and each one
/// added later) is covered.
fn methods() -> Vec<&'static str> {
    let mut names: Vec<&str> = fl_core::inventory::iter::<fl_core::Method>().map(|m| m.name).collect();
    names.sort_unstable();
    assert!(names.len() >= 23, "{names:?}");
    names
}

#[test]
fn a_run_resumed_from_any_checkpoint_ends_as_if_it_never_stopped() {
    let dir = fl_build::data_dir();
    assert!(dir.join("mnist/train-images-idx3-ubyte").exists(), "MNIST is not in {}", dir.display());
    for method in methods() {
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

/// `fl run` killed with SIGKILL at several moments (some likely inside a checkpoint write)
/// and resumed each time with `--resume` ends with the same `metrics.csv` and `events.jsonl`,
/// byte for byte, and the same summary as a run that was never stopped: a synchronous, a
/// buffered asynchronous, an asynchronous masked and a stale-start scheduler, each under a
/// checkpoint cadence of its own.
#[test]
fn fl_run_killed_repeatedly_and_resumed_writes_what_an_uninterrupted_run_writes() {
    for (method, cadence) in [("fedavg", "0"), ("fedbuff", "3agg"), ("fed-raa", "0"), ("asyncnc-afl", "2vs")] {
        killed_and_resumed(method, cadence);
    }
}

#[allow(clippy::disallowed_methods)] // reason: a time cap on the child process, not the simulation's clock
fn killed_and_resumed(method: &str, cadence: &str) {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("e.toml");
    std::fs::write(
        &file,
        format!(
            "name = \"killed\"\nseed = 4\nclients = 12\nmethod = \"{method}\"\n[dataset]\nname = \"mnist\"\n\
             train_samples = 3000\ntest_samples = 500\n[model]\nname = \"mlp\"\nhidden = [32]\n\
             [eval]\nevery_aggregations = 2\n[run]\nmax_aggregations = 40\n"
        ),
    )
    .unwrap();
    let fl = |out: &std::path::Path, extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fl"));
        c.arg("run").arg(&file).arg("--out").arg(out).args(["--quiet", "--device", "cpu", "--workers", "2"]);
        c.args(extra).stdout(Stdio::null()).stderr(Stdio::piped());
        c
    };
    let (straight, killed) = (tmp.path().join("straight"), tmp.path().join("killed"));
    let o = fl(&straight, &["--checkpoint-every", "never"]).output().unwrap();
    assert!(o.status.success(), "{method}: {}", String::from_utf8_lossy(&o.stderr));

    let rows =
        |dir: &std::path::Path| std::fs::read_to_string(dir.join("metrics.csv")).map_or(0, |s| s.lines().count());
    let mut kills = 0;
    for stop_after_rows in [4, 8, 12, 16] {
        let resume: &[&str] = if kills == 0 { &[] } else { &["--resume"] };
        let mut child = fl(&killed, &[resume, &["--checkpoint-every", cadence]].concat()).spawn().unwrap();
        let start = Instant::now();
        while rows(&killed) < stop_after_rows && child.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(120), "{method}: no progress");
            std::thread::sleep(Duration::from_millis(5));
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
    }
    assert!(kills >= 2, "{method}: the run ended before it could be killed twice");
    let o = fl(&killed, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--resume"), "{method}: a plain run over an interrupted one: {err}");
    let o = fl(&killed, &["--resume", "--checkpoint-every", cadence]).output().unwrap();
    assert!(o.status.success(), "{method}: {}", String::from_utf8_lossy(&o.stderr));

    for name in ["metrics.csv", "events.jsonl"] {
        let (a, b) = (std::fs::read(straight.join(name)).unwrap(), std::fs::read(killed.join(name)).unwrap());
        assert!(a == b, "{method}: {name} differs after {kills} kills");
    }
    let summary = |dir: &std::path::Path| {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("wall_time_s");
        v
    };
    assert_eq!(summary(&straight), summary(&killed), "{method}");
    assert!(!killed.join("checkpoint").exists(), "{method}: a finished run keeps no checkpoint");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(killed.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["resumed"].as_array().map(Vec::len), Some(kills), "{method}");
    let timing = std::fs::read_to_string(killed.join("timing.csv")).unwrap();
    assert_eq!(timing.lines().count(), rows(&killed), "{method}: one timing row per metrics row");
}

/// `--resume` refuses a config other than the one the run started with.
#[test]
fn fl_run_resume_refuses_a_changed_config() {
    use std::process::Command;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("e.toml");
    let text = |rounds: u32| {
        format!(
            "name = \"e\"\nseed = 1\nclients = 3\nmethod = \"fedavg\"\n[scheduler]\nrounds = {rounds}\n[dataset]\n\
             name = \"mnist\"\ntrain_samples = 300\ntest_samples = 100\n[model]\nname = \"mlp\"\nhidden = [8]\n"
        )
    };
    let out = tmp.path().join("out");
    let fl = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_fl"))
            .arg("run")
            .arg(&file)
            .arg("--out")
            .arg(&out)
            .args(["--quiet", "--device", "cpu"])
            .args(extra)
            .output()
            .unwrap()
    };
    std::fs::write(&file, text(3)).unwrap();
    assert!(fl(&[]).status.success());
    let metrics = std::fs::read(out.join("metrics.csv")).unwrap();
    // Interrupted before its first checkpoint (a finished run keeps none): it starts over.
    std::fs::remove_file(out.join("summary.json")).unwrap();
    let o = fl(&["--resume"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no checkpoint, starting from the beginning"));
    assert_eq!(std::fs::read(out.join("metrics.csv")).unwrap(), metrics);
    // Interrupted again, then the config changes.
    std::fs::remove_file(out.join("summary.json")).unwrap();
    std::fs::write(&file, text(4)).unwrap();
    let o = fl(&["--resume"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("config.toml") && err.contains("resumes only"), "{err}");
}
