//! End-to-end tests of the `fl` binary: registry listing, config errors, determinism across
//! worker counts, and accuracy on the real MNIST test set (fetched by `cargo xtask setup`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fl")).args(args).current_dir(workspace()).output().expect("fl runs")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs an experiment into a fresh directory and returns its summary.
fn run(file: &Path, extra: &[&str]) -> (tempfile::TempDir, serde_json::Value) {
    let out = tempfile::tempdir().unwrap();
    let mut args = vec!["run", file.to_str().unwrap(), "--quiet", "--out", out.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = fl(&args);
    assert!(o.status.success(), "fl run {} failed:\n{}", file.display(), stderr(&o));
    let summary = std::fs::read_to_string(out.path().join("summary.json")).unwrap();
    (out, serde_json::from_str(&summary).unwrap())
}

fn mnist_present() {
    let dir = fl_build::data_dir().join("mnist");
    assert!(
        dir.join("train-images-idx3-ubyte").exists(),
        "MNIST is not in {}; run `cargo xtask setup` (or `fl data fetch mnist`)",
        dir.display()
    );
}

#[test]
fn list_shows_the_components_of_every_plugin() {
    let o = fl(&["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    for name in [
        "fedavg",
        "fedprox",
        "fedasync",
        "fedbuff",
        "splitfed",
        "sync-rounds",
        "async",
        "weighted-mean",
        "coverage-mean",
        "async-mix",
        "buffered-mean",
        "constant",
        "polynomial",
        "hinge",
        "exponential",
        "inv-sqrt",
        "inverse-time",
        "full",
        "sgd",
        "mlp",
        "lenet5",
        "mnist",
        "fashion-mnist",
        "cifar10",
        "cifar100",
        "synthetic",
        "iid",
        "dirichlet",
        "shards",
        // KDD'23
        "ra-fed",
        "ram-fed",
        "oap",
        "splitfl",
        "ist",
        "prunefl",
        "region-partition",
        "top-magnitude",
        "fasttext",
        "agnews",
        // Fed-RAA
        "fed-raa",
        "fed-raa-random",
        "mp-raa",
        "fed-raa-sync",
        "neuron-fragments",
        "async-fragments",
        "fragment-polynomial",
    ] {
        assert!(text.lines().any(|l| l.split_whitespace().next() == Some(name)), "`fl list` lacks `{name}`:\n{text}");
    }
    assert!(text.contains("prox_mu = 0.0"), "parameters with defaults are listed");
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const BASE: &str = "clients = 4\nmethod = \"fedavg\"\n[dataset]\nname = \"mnist\"\n[model]\nname = \"mlp\"\n";

#[test]
fn config_errors_name_the_file_the_key_and_the_nearest_names() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "typo.toml",
            format!("{BASE}[scheduler]\nroundz = 3\n"),
            "key `scheduler.roundz`: unknown key `roundz`; valid keys, nearest first: rounds,",
        ),
        (
            "type.toml",
            format!("{BASE}[scheduler]\nrounds = \"ten\"\n"),
            "key `scheduler.rounds`: invalid type: string \"ten\"",
        ),
        (
            "name.toml",
            BASE.replace("\"mlp\"", "\"mpl\""),
            "key `model.name`: unknown model `mpl`; registered models, nearest first: mlp,",
        ),
        (
            "top.toml",
            format!("schedular = 1\n{BASE}"),
            "key `schedular`: unknown key; valid keys, nearest first: scheduler,",
        ),
        (
            "method.toml",
            BASE.replace("\"fedavg\"", "\"fedavgg\""),
            "key `method`: unknown method `fedavgg`; registered methods, nearest first: fedavg,",
        ),
        // Values out of range, checked by the component, the engine's sections and the data.
        ("range.toml", format!("{BASE}[trainer]\nlr = -1.0\n"), "key `trainer.lr`: expected a positive number, got -1"),
        (
            "devices.toml",
            format!("{BASE}[devices]\njitter = -0.5\n"),
            "key `devices.jitter`: expected a lognormal σ in [0, 3] (3 spreads job times over e^±9), got -0.5",
        ),
        (
            "samples.toml",
            BASE.replace("name = \"mnist\"\n", "name = \"mnist\"\ntrain_samples = 70000\n"),
            "key `dataset.train_samples`: asked for the first 70000 samples, but the train split in",
        ),
        // Values a run would accept and then misbehave on: NaN, an accuracy above 1, no
        // aggregation, an evaluation cadence without bound, an empty test set.
        ("nan.toml", format!("{BASE}[trainer]\nlr = nan\n"), "key `trainer.lr`: NaN is not a value; give a number"),
        (
            "target.toml",
            format!("{BASE}[run]\ntarget_accuracy = 2.0\n"),
            "key `run.target_accuracy`: expected an accuracy in (0, 1], got 2",
        ),
        (
            "zero.toml",
            format!("{BASE}[run]\nmax_aggregations = 0\n"),
            "key `run.max_aggregations`: expected at least 1",
        ),
        (
            "threads.toml",
            format!("{BASE}[run]\nthreads_per_job = 0\n"),
            "key `run.threads_per_job`: expected at least 1 (absent: 1)",
        ),
        (
            "cadence.toml",
            format!("{BASE}[eval]\nevery_virtual_s = 1e-9\n[run]\nmax_virtual_time_s = 100.0\n"),
            "key `eval.every_virtual_s`: 0.000000001 s evaluates 100000000000 times over run.max_virtual_time_s = 100; at most 1000000 evaluations",
        ),
        (
            "empty.toml",
            BASE.replace("name = \"mnist\"\n", "name = \"mnist\"\ntest_samples = 0\n"),
            "key `dataset`: dataset `mnist` has an empty test split",
        ),
    ];
    for (file, text, expected) in cases {
        let path = write(dir.path(), file, &text);
        let o = fl(&["run", path.to_str().unwrap(), "--quiet", "--out", dir.path().join("out").to_str().unwrap()]);
        assert!(!o.status.success(), "{file} must be rejected");
        let err = stderr(&o);
        assert!(err.contains(&format!("{}: {expected}", path.display())), "{file}: unexpected error:\n{err}");
    }
}

#[test]
fn a_seed_a_toml_file_cannot_record_is_refused() {
    let o = fl(&["run", "experiments/quickstart.toml", "--seed", "18446744073709551615", "--out", "/nonexistent"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--seed"), "{}", stderr(&o));
}

#[test]
fn same_seed_gives_identical_metrics_with_1_and_4_workers() {
    mnist_present();
    let dir = tempfile::tempdir().unwrap();
    // Asynchronous (arrival order matters), dropout (tensor noise), lognormal devices with jitter.
    let text = r#"
        seed = 5
        clients = 6
        method = "fedbuff"
        [dataset]
        name = "mnist"
        train_samples = 6000
        test_samples = 1000
        [partition]
        name = "dirichlet"
        alpha = 0.5
        min_samples = 10
        [model]
        name = "mlp"
        hidden = [64]
        dropout = 0.2
        [scheduler]
        buffer = 3
        concurrency = 4
        aggregations = 12
        [eval]
        every_aggregations = 3
        [devices]
        jitter = 0.3
    "#;
    // Per-client training (the CPU default), cohorts of at most 2 jobs, and jobs on 3 threads.
    let batched = format!("{text}\n[run]\nbatching = \"on\"\nmax_cohort = 2\n");
    let threaded = format!("{text}\n[run]\nthreads_per_job = 3\n");
    let mut by_mode = Vec::new();
    for (name, text) in [("det.toml", text.to_string()), ("det-cohorts.toml", batched), ("det-threads.toml", threaded)]
    {
        let file = write(dir.path(), name, &text);
        let metrics = |workers: &str, seed: Option<&str>| {
            let mut extra = vec!["--workers", workers, "--device", "cpu"];
            if let Some(s) = seed {
                extra.extend_from_slice(&["--seed", s]);
            }
            let (out, _) = run(&file, &extra);
            std::fs::read(out.path().join("metrics.csv")).unwrap()
        };
        let one = metrics("1", None);
        let four = metrics("4", None);
        assert_eq!(String::from_utf8_lossy(&one), String::from_utf8_lossy(&four), "{name}");
        assert_eq!(
            one.iter().filter(|&&b| b == b'\n').count(),
            1 + 5,
            "header + evaluations at versions 0, 3, 6, 9, 12"
        );
        assert_ne!(one, metrics("4", Some("6")), "another seed must give other numbers");
        by_mode.push(one);
    }
    // The two modes differ by rounding only: accuracies within 0.3 points at every evaluation.
    let accuracies = |m: &[u8]| -> Vec<f64> {
        String::from_utf8_lossy(m).lines().skip(1).map(|l| l.split(',').nth(3).unwrap().parse().unwrap()).collect()
    };
    for (a, b) in accuracies(&by_mode[0]).iter().zip(accuracies(&by_mode[1])) {
        assert!((a - b).abs() <= 0.003, "per client {a}, cohorts {b}");
    }
}

fn accuracy(summary: &serde_json::Value, key: &str) -> f64 {
    summary[key].as_f64().unwrap_or_else(|| panic!("summary has no `{key}`: {summary}"))
}

#[test]
fn quickstart_fedavg_reaches_95_percent_on_mnist() {
    mnist_present();
    let (_out, summary) = run(&workspace().join("experiments/quickstart.toml"), &["--workers", "2"]);
    let acc = accuracy(&summary, "final_accuracy");
    assert!(acc >= 0.95, "FedAvg quickstart: final accuracy {acc} < 0.95");
    for key in ["best_accuracy", "virtual_time_s", "wall_time_s"] {
        assert!(summary[key].is_number(), "summary.json lacks `{key}`");
    }
    assert_eq!(summary["aggregations"].as_u64(), Some(30));
}

/// The async baselines within 300 virtual seconds (their experiment files' budget).
#[test]
fn fedasync_and_fedbuff_reach_90_percent_within_300_virtual_seconds() {
    mnist_present();
    for method in ["fedasync", "fedbuff"] {
        let (_out, summary) =
            run(&workspace().join(format!("experiments/baselines/{method}-mnist.toml")), &["--workers", "2"]);
        let acc = accuracy(&summary, "best_accuracy");
        assert!(acc >= 0.90, "{method}: best accuracy {acc} < 0.90 within the budget");
        assert!(accuracy(&summary, "virtual_time_s") <= 300.0, "{method} overran its virtual-time budget");
        let reached = accuracy(&summary, "time_to_target_s");
        assert!(reached <= 300.0, "{method}: reached 0.90 at {reached} s");
    }
}

#[test]
fn data_info_says_whether_a_dataset_is_there_as_text_and_as_json() {
    mnist_present();
    // The JSON, whatever the state; the exit status says whether a run can use the data.
    let json = |name: &str, data_dir: &Path| -> serde_json::Value {
        let o = Command::new(env!("CARGO_BIN_EXE_fl"))
            .args(["data", "info", name, "--json"])
            .env("FL_DATA_DIR", data_dir)
            .output()
            .unwrap();
        let info: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let usable = matches!(info["state"]["status"].as_str(), Some("present" | "generated"));
        assert_eq!(o.status.success(), usable, "{info}: {}", stderr(&o));
        info
    };
    let mnist = json("mnist", &fl_build::data_dir());
    assert_eq!(mnist["state"]["status"], "present");
    assert_eq!(mnist["state"]["detail"]["train"], 60_000);
    assert_eq!(mnist["state"]["detail"]["test"], 10_000);
    let empty = tempfile::tempdir().unwrap();
    let missing = json("mnist", empty.path());
    assert_eq!(missing["state"]["status"], "missing");
    assert!(missing["state"]["detail"].as_str().unwrap().contains("not found"), "{missing}");
    assert_eq!(json("synthetic", empty.path())["state"]["status"], "generated");
    let text = fl(&["data", "info", "mnist"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("status:   present"));
    assert_eq!(mnist["state"]["detail"]["verified_files"], 4);

    // Random bytes over some test pixels keep every IDX header valid: only the sums tell.
    let altered = tempfile::tempdir().unwrap();
    let copy = altered.path().join("mnist");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(fl_build::data_dir().join("mnist")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.join(path.file_name().unwrap())).unwrap();
    }
    let images = copy.join("t10k-images-idx3-ubyte");
    let mut bytes = std::fs::read(&images).unwrap();
    for (i, b) in bytes[16 + 5000..16 + 5100].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37) ^ 0x5a;
    }
    std::fs::write(&images, bytes).unwrap();
    let info = json("mnist", altered.path());
    assert_eq!(info["state"]["status"], "altered");
    assert!(
        info["state"]["detail"].as_str().unwrap().contains("t10k-images-idx3-ubyte: the file was altered"),
        "{info}"
    );
    // A run refuses the altered files, naming the file and the way out; `verify = false` trusts them.
    let dir = tempfile::tempdir().unwrap();
    let run = |text: &str| {
        let path = write(dir.path(), "run.toml", text);
        Command::new(env!("CARGO_BIN_EXE_fl"))
            .args(["run", path.to_str().unwrap(), "--quiet", "--force", "--out"])
            .arg(dir.path().join("out"))
            .env("FL_DATA_DIR", altered.path())
            .output()
            .unwrap()
    };
    let refused = run(TINY);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("t10k-images-idx3-ubyte: the file was altered"), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("verify = false"), "{}", stderr(&refused));
    let trusted = run(&TINY.replace("test_samples = 100\n", "test_samples = 100\nverify = false\n"));
    assert!(trusted.status.success(), "{}", stderr(&trusted));
}

/// A run of a few seconds on MNIST.
const TINY: &str = "clients = 2\nmethod = \"fedavg\"\n[dataset]\nname = \"mnist\"\ntrain_samples = 200\ntest_samples = 100\n\
                    [model]\nname = \"mlp\"\n[scheduler]\nrounds = 1\n";

#[test]
fn run_directories_take_plain_names_keep_finished_runs_and_admit_one_process() {
    mnist_present();
    let dir = tempfile::tempdir().unwrap();
    let fl_in = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_fl")).args(args).current_dir(dir.path()).output().expect("fl runs")
    };
    // A name that is a path, a parent, hidden, empty or has a control character: refused before
    // anything is written, naming the file and the key.
    for name in ["..", "../../escaped", "/tmp/escaped", "a/b", "a\nb", ".hidden", ""] {
        let path = write(dir.path(), "named.toml", &format!("name = {name:?}\n{TINY}"));
        let o = fl_in(&["run", path.to_str().unwrap(), "--quiet"]);
        assert!(!o.status.success(), "name {name:?} must be refused");
        assert!(stderr(&o).contains(&format!("{}: key `name`:", path.display())), "{name:?}: {}", stderr(&o));
        let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(entries, ["named.toml"], "{name:?}: nothing but the experiment file");
    }
    assert!(!dir.path().parent().unwrap().join("escaped").exists());

    // A plain name runs into runs/<name>; running again is refused and keeps the finished run.
    let path = write(dir.path(), "tiny.toml", &format!("name = \"tiny\"\n{TINY}"));
    let file = path.to_str().unwrap();
    assert!(fl_in(&["run", file, "--quiet"]).status.success());
    let run = dir.path().join("runs/tiny");
    let summary = std::fs::read(run.join("summary.json")).unwrap();
    let again = fl_in(&["run", file, "--quiet"]);
    assert!(!again.status.success());
    assert!(stderr(&again).contains("holds a finished run (summary.json); pass --force"), "{}", stderr(&again));
    assert_eq!(std::fs::read(run.join("summary.json")).unwrap(), summary, "the finished run is intact");

    // The outputs of an interrupted run are kept too; --force starts again.
    std::fs::remove_file(run.join("summary.json")).unwrap();
    let again = fl_in(&["run", file, "--quiet"]);
    assert!(
        stderr(&again).contains("did not finish (metrics.csv, no summary.json); pass --resume"),
        "{}",
        stderr(&again)
    );
    assert!(fl_in(&["run", file, "--quiet", "--force"]).status.success());
    assert!(run.join("summary.json").is_file());

    // While a process holds the directory, another fails at once, even with --force.
    let held = fl_cli::RunDir::reserve(&run, true, false).unwrap();
    let busy = fl_in(&["run", file, "--quiet", "--force"]);
    assert!(stderr(&busy).contains("another fl process is writing this run directory"), "{}", stderr(&busy));
    drop(held);
    assert!(fl_in(&["run", file, "--quiet", "--force"]).status.success(), "free again once released");
}

#[test]
fn a_reader_that_goes_away_is_not_an_error() {
    use std::process::Stdio;
    // `fl list | head -0`: the pipe is closed before fl writes.
    let mut child = Command::new(env!("CARGO_BIN_EXE_fl"))
        .arg("list")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

#[test]
fn more_regions_than_a_tensor_has_units_fail_at_once_naming_the_key() {
    mnist_present();
    let dir = tempfile::tempdir().unwrap();
    let text = "clients = 2\nmethod = \"ra-fed\"\n[dataset]\nname = \"mnist\"\ntrain_samples = 200\ntest_samples = 100\n\
                [model]\nname = \"mlp\"\n[mask]\nregions = 1000000000\nl_regions = 2\ns_regions = 1\n";
    let path = write(dir.path(), "regions.toml", text);
    let o = fl(&["run", path.to_str().unwrap(), "--quiet", "--out", dir.path().join("out").to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "running {}: mask.regions: 1000000000 regions cannot split `fc1.weight`: it has 156800 elements",
            path.display()
        )),
        "{err}"
    );
    assert!(!dir.path().join("out/summary.json").exists());
}

#[test]
fn a_device_too_slow_for_the_virtual_clock_fails_before_the_run_starts() {
    mnist_present();
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{TINY}[devices]\nflops_per_s = {{ dist = \"constant\", value = 1e-30 }}\n");
    let path = write(dir.path(), "slow.toml", &text);
    let o = fl(&["run", path.to_str().unwrap(), "--quiet", "--out", dir.path().join("out").to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("'s job would take") && err.contains("check devices.flops_per_s"), "{err}");
    assert!(!dir.path().join("out/metrics.csv").exists(), "found before the run directory is written");
}

#[test]
fn training_that_diverges_stops_with_an_error_and_keeps_what_was_written() {
    mnist_present();
    let dir = tempfile::tempdir().unwrap();
    // lr = 1e6: the first round's client updates hold NaN; both are rejected (two in a row on
    // two clients) and the run stops, its metrics so far kept, its rejections in the event log.
    let text = TINY.replace("rounds = 1", "rounds = 5") + "[trainer]\nlr = 1e6\n";
    let path = write(dir.path(), "diverges.toml", &text);
    let out = dir.path().join("out");
    let o = fl(&["run", path.to_str().unwrap(), "--quiet", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("training diverged on the clients: the last 2 client updates"), "{err}");
    assert_eq!(err.matches("were rejected before aggregation").count(), 1, "one warning: {err}");
    let metrics = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    assert!(metrics.starts_with("virtual_time_s,") && metrics.lines().count() >= 2, "{metrics}");
    let events = std::fs::read_to_string(out.join("events.jsonl")).unwrap();
    assert_eq!(events.matches("\"event\":\"rejected_update\"").count(), 2, "{events}");
    assert!(!out.join("summary.json").exists());
}

#[test]
fn a_model_too_large_for_memory_fails_before_anything_is_allocated() {
    mnist_present();
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, text: &str| {
        let path = write(dir.path(), name, text);
        let o = fl(&[
            "run",
            path.to_str().unwrap(),
            "--quiet",
            "--workers",
            "2",
            "--out",
            dir.path().join(name).with_extension("").to_str().unwrap(),
        ]);
        assert!(!o.status.success(), "{name} ran");
        stderr(&o)
    };
    // 784·10⁸ + 10⁸ + 10·10⁸ + 10 elements: 318 GB a copy, which used to abort in an allocation.
    let err = run("huge.toml", &TINY.replace("name = \"mlp\"", "name = \"mlp\"\nhidden = [100000000]"));
    assert!(err.contains("a model of 79500000010 elements") && err.contains("over the memory budget"), "{err}");
    // A width whose element count overflows used to panic inside libtorch.
    let err = run("overflow.toml", &TINY.replace("name = \"mlp\"", "name = \"mlp\"\nhidden = [9223372036854775807]"));
    assert!(err.contains("more than 2^64 elements"), "{err}");
    // The budget is the user's to set: the default MLP (159,010 elements; 2 server copies, 2 for
    // each of the 2 jobs in flight, 3 for each training at once on the 2 workers: 12 copies,
    // 7.6 MB) over 5 MB.
    let err = run("budget.toml", &format!("{TINY}[run]\nmemory_budget_gb = 0.005\n"));
    assert!(err.contains("hold about 7.6 MB") && err.contains("over the memory budget of 5.0 MB"), "{err}");
}
