//! The FedASMU base experiments of CIFAR-10 and CIFAR-100 (`experiments/fedasmu/base/`) run end
//! to end, as the reproduction's columns set them (LeNet-5, the CNN, ResNet-20), with FedASMU,
//! FedSSMU and FedAvg in its rounds, on small files written in the official formats
//! (Fashion-MNIST's base runs in the smoke reproduction).

mod common;

use std::path::Path;

use common::{run_experiment, write_cifar10, write_cifar100};

/// The base of `dataset` with `model` and `method`, 10 devices and 20 sessions of one epoch.
fn run(dataset: &str, model: &str, method: &str, data_dir: &Path, out: &Path) -> serde_json::Value {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../experiments/fedasmu/base/{dataset}.toml"));
    let mut text = std::fs::read_to_string(base)
        .unwrap()
        .replace("clients = 100", "clients = 10")
        .replace("method = \"fedasmu\"", &format!("method = \"{method}\""))
        .replace("name = \"lenet5\"", &format!("name = \"{model}\""))
        .replace("epochs = 5", "epochs = 1")
        .replace("max_updates = 5000", "max_updates = 20");
    if method == "fedavg" {
        text.push_str("\n[scheduler]\nrounds = 500\nclients_per_round = 10\n");
    }
    run_experiment(&text, &format!("{dataset}-{model}-{method}"), data_dir, out)
}

#[test]
fn cifar_base_experiments_run_their_models_with_fedasmu_fedssmu_and_fedavg() {
    let data = tempfile::tempdir().unwrap();
    write_cifar10(&data.path().join("cifar10"), 500);
    write_cifar100(&data.path().join("cifar100"), 500);
    let out = tempfile::tempdir().unwrap();
    for (dataset, model) in [("cifar10", "lenet5"), ("cifar10", "cnn2"), ("cifar100", "resnet20")] {
        for method in ["fedasmu", "fedssmu", "fedavg"] {
            let summary = run(dataset, model, method, data.path(), out.path());
            assert_eq!(summary["updates"].as_u64(), Some(20), "{dataset}/{model}/{method}: the session budget");
            let loss = summary["final_loss"].as_f64();
            assert!(loss.is_some_and(f64::is_finite), "{dataset}/{model}/{method}: final loss {loss:?}");
        }
    }
}
