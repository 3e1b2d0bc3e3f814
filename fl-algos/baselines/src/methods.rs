//! The baselines as method presets.

use fl_core::Method;

inventory::submit! {
    Method {
        name: "fedavg",
        summary: "FedAvg: synchronous rounds, sample-weighted mean of the client models",
        paper: "McMahan et al., AISTATS 2017",
        preset: r#"
            [scheduler]
            name = "sync-rounds"
            [aggregator]
            name = "weighted-mean"
        "#,
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedprox",
        summary: "FedProx: FedAvg with the proximal term μ/2 ‖w − w_global‖² in local training",
        paper: "Li et al., MLSys 2020",
        preset: r#"
            [scheduler]
            name = "sync-rounds"
            [aggregator]
            name = "weighted-mean"
            [trainer]
            name = "sgd"
            prox_mu = 0.01
        "#,
        origin: module_path!(),
    }
}

// Assumed, as the SplitFed paper fixes neither: a 100 GFLOP/s server, a 50 ms round trip per
// mini-batch, and the cut after the first layer (fc1 on the client), which suits the MLPs.
inventory::submit! {
    Method {
        name: "splitfed",
        summary: "SplitFed (V1): FedAvg whose clients train up to the cut and relay activations to the server each batch",
        paper: "Thapa et al., AAAI 2022",
        preset: r#"
            [scheduler]
            name = "sync-rounds"
            [aggregator]
            name = "weighted-mean"
            [trainer]
            name = "sgd"
            split = { cut = "fc1.bias", server_flops_per_s = 1e11, round_trip_s = 0.05 }
        "#,
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasync",
        summary: "FedAsync: mix each arrival into the global model with α·(1+s)^−a",
        paper: "Xie et al., arXiv:1903.03934",
        preset: r#"
            [scheduler]
            name = "async"
            buffer = 1
            [aggregator]
            name = "async-mix"
            alpha = 0.6
            [staleness]
            name = "polynomial"
            a = 0.5
        "#,
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedbuff",
        summary: "FedBuff: buffer K = 10 updates, step by their 1/√(1+s)-weighted mean",
        paper: "Nguyen et al., AISTATS 2022",
        preset: r#"
            [scheduler]
            name = "async"
            buffer = 10
            [aggregator]
            name = "buffered-mean"
            server_lr = 1.0
            [staleness]
            name = "inv-sqrt"
        "#,
        origin: module_path!(),
    }
}
