//! The baselines added for the FedASMU paper each learn on real MNIST, side by side with
//! FedAvg on the same non-IID federation (10 clients, Dirichlet α = 0.5, an MLP, 20 rounds or
//! 20 aggregations of 10 updates, or 200 of one).

mod common;

use fl_algos as _;
use fl_data as _;
use fl_models as _;

fn best_accuracy(method: &str, extra: &str) -> f64 {
    let e = common::mnist_experiment(method, 10, extra);
    e.build(&common::options()).unwrap().run(&mut ()).unwrap().best_accuracy
}

/// 20 synchronous rounds, or as many aggregations of 10 buffered updates.
const ROUNDS: &str = "[scheduler]\nrounds = 20";

/// Each new baseline's method name and its keys for this federation (ASO-Fed aggregates every
/// arrival: 200 aggregations are 20 rounds' worth of updates).
const BASELINES: [(&str, &str); 6] = [
    ("fedlws", ROUNDS),
    ("port", BUFFERED),
    ("feddyn", ROUNDS),
    ("moon", ROUNDS),
    ("aso-fed", "[scheduler]\naggregations = 200"),
    ("fedsa", BUFFERED),
];

/// 20 aggregations of 10 buffered updates.
const BUFFERED: &str = "[scheduler]\naggregations = 20";

#[test]
fn each_new_baseline_learns_as_fedavg_does() {
    let fedavg = best_accuracy("fedavg", ROUNDS);
    assert!(fedavg > 0.85, "FedAvg {fedavg}");
    for (method, extra) in BASELINES {
        let acc = best_accuracy(method, extra);
        assert!(acc > 0.85 && acc > fedavg - 0.02, "{method}: best accuracy {acc:.4} (FedAvg {fedavg:.4})");
    }
}
