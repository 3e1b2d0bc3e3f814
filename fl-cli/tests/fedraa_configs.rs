//! The Fed-RAA base experiments of CIFAR-10 and CIFAR-100 (`experiments/fedraa/base/`) run end
//! to end with Fed-RAA, its synchronous ablation, FedAvg and SplitFed, on small files written in
//! the official formats (MNIST's base runs in the smoke reproduction).

mod common;

use std::path::Path;

use common::{run_experiment, write_cifar10, write_cifar100};

fn run(dataset: &str, method: &str, data_dir: &Path, out: &Path) -> serde_json::Value {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../experiments/fedraa/base/{dataset}.toml"));
    let mut text = std::fs::read_to_string(base)
        .unwrap()
        .replace("method = \"fed-raa\"", &format!("method = \"{method}\""))
        .replace("max_virtual_time_s = 1200", "max_virtual_time_s = 1200\nmax_aggregations = 2")
        .replace("epochs = 5", "epochs = 1");
    if !method.starts_with("fed-raa") {
        // Baselines train the full model, as the reproduction's rows configure them.
        text = text.replace("[mask]\nparts = 4", "[mask]\nname = \"full\"");
    }
    run_experiment(&text, &format!("{dataset}-{method}"), data_dir, out)
}

#[test]
fn cifar_base_experiments_run_with_fed_raa_fedavg_and_splitfed() {
    let data = tempfile::tempdir().unwrap();
    write_cifar10(&data.path().join("cifar10"), 500);
    write_cifar100(&data.path().join("cifar100"), 500);
    let out = tempfile::tempdir().unwrap();
    for dataset in ["cifar10", "cifar100"] {
        for method in ["fed-raa", "fed-raa-sync", "fedavg", "splitfed"] {
            let summary = run(dataset, method, data.path(), out.path());
            assert_eq!(summary["aggregations"].as_u64(), Some(2), "{dataset}/{method}");
            let loss = summary["final_loss"].as_f64();
            assert!(loss.is_some_and(f64::is_finite), "{dataset}/{method}: final loss {loss:?}");
        }
    }
}
