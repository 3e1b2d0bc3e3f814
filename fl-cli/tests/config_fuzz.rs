//! A config fuzzer (part of the fault suite): valid experiments, each with one random mutation
//! of its resolved config (a key set to a value of another type or an extreme of its range —
//! NaN, infinities, 2^63 − 1, negative numbers, empty strings and arrays, a path out of the
//! run directory —, a key removed, or an unknown key added), run by the `fl` binary under a
//! time cap. Every case must end with a run that finishes, an error that names the mutated key
//! (or the entry it belongs to, for a field of a distribution like `devices.flops_per_s`), or
//! the numerical guard's divergence error: no panic, no abort, no hang, and no config error
//! found only after the run directory was written. The cases are drawn from a fixed seed, so a
//! failure repeats; the summary line prints how the cases ended. For a longer search,
//! `FL_FUZZ_CASES=1000 FL_FUZZ_SEED=7 cargo test -p fl-cli --test config_fuzz -- --nocapture`
//! draws other cases.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fl_core::toml::{self, Table, Value};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use fl_algos as _;
use fl_data as _;
use fl_models as _;

/// Small valid experiments of each scheduler family: synchronous, asynchronous, buffered,
/// masked and pull-based (mid-training model pulls).
const BASES: [&str; 5] = ["fedavg", "fedasync", "fedbuff", "ra-fed", "fed-raa"];

/// Values a mutated key takes, as TOML.
const VALUES: [&str; 22] = [
    "-1",
    "0",
    "1",
    "2147483648",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "-inf",
    "0.5",
    "-0.5",
    "1e-300",
    "\"\"",
    "\"zzz\"",
    "true",
    "[]",
    "[0]",
    "[-1, 2]",
    "{}",
    "\"../../outside\"",
];

/// Keys whose large values ask for proportionally long work: a case that only reaches the
/// time cap through one of them is slow, not hung.
const WORK_KEYS: [&str; 12] = [
    "rounds",
    "aggregations",
    "max_aggregations",
    "epochs",
    "steps",
    "max_virtual_time_s",
    "hidden",
    "clients",
    "test_every",
    "every_aggregations",
    "concurrency",
    "buffer",
];

/// The most a case may run.
const CAP: Duration = Duration::from_secs(40);

fn base(method: &str) -> String {
    format!(
        "seed = 3\nclients = 4\nmethod = \"{method}\"\n[dataset]\nname = \"mnist\"\ntrain_samples = 200\n\
         test_samples = 100\n[model]\nname = \"mlp\"\nhidden = [16]\n[run]\nmax_aggregations = 2\n"
    )
}

/// The resolved config of `text`: every key with its value, defaults included.
fn resolved(text: &str) -> Table {
    let experiment = fl_core::Experiment::parse(text, "base.toml").expect("the base experiments are valid");
    toml::from_str(&experiment.resolved_toml().expect("resolves")).expect("the resolved config is TOML")
}

/// Paths of every leaf (a value that is not a table), in document order.
fn leaves(table: &Table, prefix: &[String], out: &mut Vec<Vec<String>>) {
    for (key, value) in table {
        let mut path = prefix.to_vec();
        path.push(key.clone());
        match value {
            Value::Table(t) => leaves(t, &path, out),
            _ => out.push(path),
        }
    }
}

fn table_at<'a>(table: &'a mut Table, path: &[String]) -> &'a mut Table {
    path.iter().fold(table, |t, k| t.get_mut(k).and_then(Value::as_table_mut).expect("a table on the path"))
}

#[derive(Debug, Clone)]
enum Mutation {
    Set(Vec<String>, &'static str),
    Remove(Vec<String>),
    Unknown(Vec<String>),
}

impl Mutation {
    fn apply(&self, table: &mut Table) {
        match self {
            Mutation::Set(path, literal) => {
                let value: Table = toml::from_str(&format!("v = {literal}")).expect("the pool is TOML");
                let (leaf, parent) = path.split_last().expect("a leaf has a name");
                table_at(table, parent).insert(leaf.clone(), value["v"].clone());
            }
            Mutation::Remove(path) => {
                let (leaf, parent) = path.split_last().expect("a leaf has a name");
                table_at(table, parent).remove(leaf);
            }
            Mutation::Unknown(path) => {
                table_at(table, &path[..path.len() - 1]).insert("zzz_unknown".into(), Value::Integer(1));
            }
        }
    }

    /// What an error about this mutation must name: the key, or the entry it belongs to.
    fn names(&self) -> Vec<String> {
        match self {
            Mutation::Set(path, _) | Mutation::Remove(path) => {
                let mut names = vec![path.last().expect("a leaf has a name").clone()];
                if path.len() >= 2 {
                    names.push(path[..path.len() - 1].join("."));
                }
                names
            }
            Mutation::Unknown(_) => vec!["zzz_unknown".into()],
        }
    }
}

enum Outcome {
    Finished,
    Refused,
    Diverged,
    Slow,
}

#[allow(clippy::disallowed_methods)] // reason: the time cap of a child process, not the simulation's clock
fn now() -> Instant {
    Instant::now()
}

/// Runs `fl run` on `text` in `dir`; an error unless it finished, failed naming the key, or
/// was slow through a work key.
fn run_case(dir: &Path, text: &str, mutation: &Mutation) -> Result<Outcome, String> {
    let file = dir.join("case.toml");
    std::fs::write(&file, text).unwrap();
    let _ = std::fs::remove_dir_all(dir.join("out"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_fl"))
        .args(["run", file.to_str().unwrap(), "--quiet", "--force", "--workers", "1", "--out"])
        .arg(dir.join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > CAP {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let context = || format!("{mutation:?}\n--- stderr:\n{stderr}\n--- config:\n{text}");
    match status {
        None if WORK_KEYS.iter().any(|k| mutation.names()[0] == *k) => Ok(Outcome::Slow),
        None => Err(format!("still running after {CAP:?}: {}", context())),
        Some(s) if s.success() => Ok(Outcome::Finished),
        Some(s) if s.code() == Some(1) && stderr.contains("error: ") && !stderr.contains("panicked") => {
            if stderr.contains("diverged") {
                Ok(Outcome::Diverged)
            } else if mutation.names().iter().any(|n| stderr.contains(n.as_str())) {
                // A config error is found before the run starts: no run directory is written.
                if dir.join("out/metrics.csv").exists() {
                    Err(format!("refused only after the run started: {}", context()))
                } else {
                    Ok(Outcome::Refused)
                }
            } else {
                Err(format!("the error does not name `{}`: {}", mutation.names()[0], context()))
            }
        }
        Some(s) => Err(format!("crashed ({s}): {}", context())),
    }
}

#[test]
fn mutated_configs_run_or_fail_naming_the_key_never_panic_or_hang() {
    let dir = tempfile::tempdir().unwrap();
    let bases: Vec<(String, Table, Vec<Vec<String>>)> = BASES
        .iter()
        .map(|m| {
            let text = base(m);
            let table = resolved(&text);
            let mut paths = Vec::new();
            leaves(&table, &[], &mut paths);
            (text, table, paths)
        })
        .collect();
    let case = (0..BASES.len(), 0..3u8, any::<prop::sample::Index>(), 0..VALUES.len());
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (cases, seed) = (env("FL_FUZZ_CASES", 120), env("FL_FUZZ_SEED", 0));
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config { failure_persistence: None, ..Config::default() },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let (mut finished, mut refused, mut diverged, mut slow) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    // Every case is kept (no shrinking): each failure is reported whole.
    for _ in 0..cases {
        let (b, kind, at, value) = case.new_tree(&mut runner).unwrap().current();
        let (_, table, paths) = &bases[b];
        let path = at.get(paths).clone();
        let mutation = match kind {
            0 => Mutation::Set(path, VALUES[value]),
            1 => Mutation::Remove(path),
            _ => Mutation::Unknown(path),
        };
        let mut mutated = table.clone();
        mutation.apply(&mut mutated);
        match run_case(dir.path(), &toml::to_string(&mutated).unwrap(), &mutation) {
            Ok(Outcome::Finished) => finished += 1,
            Ok(Outcome::Refused) => refused += 1,
            Ok(Outcome::Diverged) => diverged += 1,
            Ok(Outcome::Slow) => slow += 1,
            Err(e) => failures.push(e),
        }
    }
    println!(
        "config fuzzer: {cases} cases (seed {seed}), {finished} finished, {refused} refused naming the key, {diverged} stopped as \
         diverged, {slow} slow (work keys), {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{} case(s) failed:\n\n{}", failures.len(), failures.join("\n\n"));
}
