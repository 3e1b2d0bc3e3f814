//! The template plugin's components are listed by its binary and run in an experiment.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fl-plugin-template");

#[test]
fn the_plugin_components_are_listed_beside_the_built_in_ones() {
    let out = Command::new(BIN).arg("list").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["cutoff", "fedasync-cutoff", "fedavg", "mlp"] {
        assert!(text.lines().any(|l| l.split_whitespace().next() == Some(name)), "`list` lacks `{name}`:\n{text}");
    }
}

#[test]
fn an_experiment_runs_with_the_plugin_method() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plugin.toml");
    // Synthetic data needs no download: 5 devices, natural partition.
    std::fs::write(
        &file,
        "clients = 5\nmethod = \"fedasync-cutoff\"\n[dataset]\nname = \"synthetic\"\ndevices = 5\n\
         [model]\nname = \"mlp\"\nhidden = [16]\n[scheduler]\naggregations = 20\n[staleness]\nmax_versions = 2\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new(BIN)
        .args(["run", file.to_str().unwrap(), "--quiet", "--device", "cpu", "--out", out_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["aggregations"].as_u64(), Some(20));
    let config = std::fs::read_to_string(out_dir.join("config.toml")).unwrap();
    assert!(config.contains("max_versions = 2"), "resolved config keeps the plugin's parameter:\n{config}");
}
