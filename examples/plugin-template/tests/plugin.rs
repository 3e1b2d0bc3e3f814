//! The template plugin's components are listed by its binary and run in an experiment.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fl-plugin-template");

#[test]
fn the_plugin_components_are_listed_beside_the_built_in_ones() {
    let out = Command::new(BIN).arg("list").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["cutoff", "clipped-mean", "deadline-rounds", "fedavg-deadline", "fedavg", "mlp"] {
        assert!(text.lines().any(|l| l.split_whitespace().next() == Some(name)), "`list` lacks `{name}`:\n{text}");
    }
}

/// Runs `experiment` (TOML) with the plugin's binary on CPU; returns its output directory's
/// files by name, or the failed run's stderr.
fn run(experiment: &str) -> std::result::Result<(tempfile::TempDir, std::path::PathBuf), String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plugin.toml");
    std::fs::write(&file, experiment).unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new(BIN)
        .args(["run", file.to_str().unwrap(), "--quiet", "--device", "cpu", "--out", out_dir.to_str().unwrap()])
        .output()
        .unwrap();
    if out.status.success() { Ok((dir, out_dir)) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

/// The plugin's method on FedProx's Synthetic data (no download: 10 devices, their natural
/// partition), with `extra` appended.
fn experiment(extra: &str) -> String {
    format!(
        "clients = 10\nmethod = \"fedavg-deadline\"\n[dataset]\nname = \"synthetic\"\ndevices = 10\n\
         [model]\nname = \"mlp\"\nhidden = [16]\n[trainer]\nlr = 0.05\n{extra}"
    )
}

#[test]
fn the_plugin_method_runs_and_learns() {
    let (_dir, out) = run(&experiment(
        "[scheduler]\nrounds = 15\ndeadline_s = 20.0\nclients_per_round = 5\n[aggregator]\nmax_norm = 5.0\n",
    ))
    .unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["aggregations"].as_u64(), Some(15));
    let metrics = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    let accuracy = |line: &str| -> f64 { line.split(',').nth(3).unwrap().parse().unwrap() };
    let rows: Vec<&str> = metrics.lines().skip(1).collect();
    let (first, last) = (accuracy(rows[0]), accuracy(rows[rows.len() - 1]));
    assert!(last > first + 0.1, "accuracy {first} at the start, {last} after 15 aggregations");
    let config = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(config.contains("deadline_s = 20.0") && config.contains("max_versions = 4"), "resolved config:\n{config}");
}

#[test]
fn a_bad_plugin_parameter_names_the_file_and_the_key() {
    let err = run(&experiment("[scheduler]\ndeadline_s = -1.0\n")).unwrap_err();
    assert!(err.contains("plugin.toml") && err.contains("scheduler.deadline_s") && err.contains("positive"), "{err}");
}
