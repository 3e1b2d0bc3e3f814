//! The KDD'23 base experiments of CIFAR-10 and AG News (`experiments/kdd23/base/`) run end to
//! end, with RA-Fed, IST, PruneFL and RAM-Fed masks on their maskable tensors, on small files
//! written in the official formats (the real datasets are in no package registry; MNIST's base
//! runs in the smoke reproduction). A mask must cut the clients' work: the virtual compute time
//! of every masked method is below FedAvg's (the full model), and IST's, one tenth of the
//! maskable weights per client, below RA-Fed's at level L, half of them.

mod common;

use std::path::Path;

use common::{run_experiment, write_agnews, write_cifar10};

/// Runs the base experiment of `dataset` with `method` at mask `level` for 2 rounds; returns its
/// summary.
fn run(dataset: &str, method: &str, level: &str, data_dir: &Path, out: &Path) -> serde_json::Value {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../experiments/kdd23/base/{dataset}.toml"));
    let text = std::fs::read_to_string(base).unwrap();
    assert!(text.contains("level = \"l\"\n"), "the base experiment sets mask level L");
    let text = text
        .replace("method = \"ra-fed\"", &format!("method = \"{method}\""))
        .replace("level = \"l\"\n", &format!("level = \"{level}\"\n"))
        .replace("rounds = 300", "rounds = 2")
        .replace("[trainer]\n", "[trainer]\nepochs = 1\n");
    run_experiment(&text, &format!("{dataset}-{method}-{level}"), data_dir, out)
}

/// The clients' summed virtual compute time.
fn busy_s(summary: &serde_json::Value) -> f64 {
    summary["clients"].as_array().unwrap().iter().map(|c| c["busy_s"].as_f64().unwrap()).sum()
}

#[test]
fn cifar10_and_agnews_base_experiments_run_with_every_mask_policy_and_masks_cut_the_work() {
    let data = tempfile::tempdir().unwrap();
    write_cifar10(&data.path().join("cifar10"), 1000);
    write_agnews(&data.path().join("agnews"), 800);
    let out = tempfile::tempdir().unwrap();
    for dataset in ["cifar10", "agnews"] {
        let full = busy_s(&run(dataset, "ra-fed", "full", data.path(), out.path()));
        let mut busy = std::collections::BTreeMap::new();
        for method in ["ra-fed", "ist", "prunefl", "ram-fed"] {
            let summary = run(dataset, method, "l", data.path(), out.path());
            assert_eq!(summary["aggregations"].as_u64(), Some(2), "{dataset}/{method}");
            let loss = summary["final_loss"].as_f64();
            assert!(loss.is_some_and(f64::is_finite), "{dataset}/{method}: final loss {loss:?}");
            let b = busy_s(&summary);
            assert!(b < full, "{dataset}/{method}: masked clients worked {b} s, the full model {full} s");
            busy.insert(method, b);
        }
        assert!(busy["ist"] < busy["ra-fed"], "{dataset}: IST (1/10 of the weights) {busy:?}");
    }
}
