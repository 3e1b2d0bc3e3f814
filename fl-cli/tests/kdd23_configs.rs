//! The KDD'23 base experiments of CIFAR-10 and AG News (`experiments/kdd23/base/`) run end to
//! end, with RA-Fed, IST and PruneFL masks on their maskable tensors, on small files written in
//! the official formats (the real datasets are in no package registry; MNIST's base runs in
//! the smoke reproduction).

mod common;

use std::path::Path;

use common::{run_experiment, write_agnews, write_cifar10};

fn run(dataset: &str, method: &str, data_dir: &Path, out: &Path) -> serde_json::Value {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../experiments/kdd23/base/{dataset}.toml"));
    let text = std::fs::read_to_string(base).unwrap();
    let text = text
        .replace("method = \"ra-fed\"", &format!("method = \"{method}\""))
        .replace("rounds = 300", "rounds = 2")
        .replace("[trainer]\n", "[trainer]\nepochs = 1\n");
    run_experiment(&text, &format!("{dataset}-{method}"), data_dir, out)
}

#[test]
fn cifar10_and_agnews_base_experiments_run_with_every_mask_policy() {
    let data = tempfile::tempdir().unwrap();
    write_cifar10(&data.path().join("cifar10"), 1000);
    write_agnews(&data.path().join("agnews"), 800);
    let out = tempfile::tempdir().unwrap();
    for dataset in ["cifar10", "agnews"] {
        for method in ["ra-fed", "ist", "prunefl", "ram-fed"] {
            let summary = run(dataset, method, data.path(), out.path());
            assert_eq!(summary["aggregations"].as_u64(), Some(2), "{dataset}/{method}");
            let loss = summary["final_loss"].as_f64();
            assert!(loss.is_some_and(f64::is_finite), "{dataset}/{method}: final loss {loss:?}");
        }
    }
}
