//! The baselines as method presets.
//!
//! Each preset is the experiment-file fragment `presets/<method>.toml` of this crate.

use fl_core::Method;

inventory::submit! {
    Method {
        name: "fedavg",
        summary: "FedAvg: synchronous rounds, sample-weighted mean of the client models",
        paper: "McMahan et al., AISTATS 2017",
        preset: include_str!("../presets/fedavg.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedprox",
        summary: "FedProx: FedAvg with the proximal term μ/2 ‖w − w_global‖² in local training",
        paper: "Li et al., MLSys 2020",
        preset: include_str!("../presets/fedprox.toml"),
        origin: module_path!(),
    }
}

// The buffer is not stated by the paper (Plato's `minimum_clients_aggregated`); FedBuff's K = 10.
inventory::submit! {
    Method {
        name: "port",
        summary: "PORT: buffer 10 updates, weight each by samples × (agreement with the recent drift + b/(s + b))",
        paper: "Su and Li, IWQoS 2022",
        preset: include_str!("../presets/port.toml"),
        origin: module_path!(),
    }
}

// α is not stated by the FedASMU paper; the spec's 0.01, on both sides.
inventory::submit! {
    Method {
        name: "feddyn",
        summary: "FedDyn: clients add α/2 ‖w − w_t‖² − ⟨g_k, w⟩ and keep g_k; the server corrects the mean by its state h",
        paper: "Acar et al., ICLR 2021",
        preset: include_str!("../presets/feddyn.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "aso-fed",
        summary: "ASO-Fed: per arrival w += (n_k/n) Δ_k, first layer re-weighted by softmax; clients with a proximal term (λ = 0.01), the decay-coefficient gradient (β = 0.5) and lr · max(1, ln d̄)",
        paper: "Chen, Ning, Slawski and Rangwala, Asynchronous Online Federated Learning for Edge Devices with Non-IID Data, IEEE BigData 2020",
        preset: include_str!("../presets/aso-fed.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedsa",
        summary: "FedSA (as the FedASMU spec recommends): aggregate every M = 10 arrivals weighted by n_k, client lr / max(1, last lag)",
        paper: "Chen, Mao and Ma, FedSA: a staleness-aware asynchronous federated learning algorithm with non-IID data, FGCS 120, 2021",
        preset: include_str!("../presets/fedsa.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "moon",
        summary: "MOON: FedAvg rounds, clients add μ·ℓ_con between the projections of their model, the global one and their previous one (μ = 1, τ = 0.5, head 256)",
        paper: "Li, He and Song, Model-Contrastive Federated Learning, CVPR 2021",
        preset: include_str!("../presets/moon.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedlws",
        summary: "FedLWS: FedAvg's mean, each layer shrunk by γ_l from the spread of the clients' updates (β = 0.03, τ ∈ [0.01, 0.2])",
        paper: "Shi et al., ICLR 2025",
        preset: include_str!("../presets/fedlws.toml"),
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
        preset: include_str!("../presets/splitfed.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasync",
        summary: "FedAsync: mix each arrival into the global model with α·(1+s)^−a",
        paper: "Xie et al., arXiv:1903.03934",
        preset: include_str!("../presets/fedasync.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedbuff",
        summary: "FedBuff: buffer K = 10 updates, step by their 1/√(1+s)-weighted mean",
        paper: "Nguyen et al., AISTATS 2022",
        preset: include_str!("../presets/fedbuff.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "heterofl",
        summary: "HeteroFL: synchronous rounds; each client trains the first share of every unit group (its level from its speed); elements averaged over the clients that trained them",
        paper: "Diao, Ding and Tarokh, ICLR 2021",
        preset: include_str!("../presets/heterofl.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedrolex",
        summary: "FedRolex: synchronous rounds; each client trains a window of every unit group rolling by one unit per round (its width from its speed); elements averaged over the clients that trained them",
        paper: "Alam, Liu, Yan and Zhang, NeurIPS 2022",
        preset: include_str!("../presets/fedrolex.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedavg-platon",
        summary: "FedAvg+PLATON: synchronous rounds; each client trains the whole model and prunes its units to its width share by PLATON's upper-confidence-bound importance; elements averaged over the clients that kept them",
        paper: "Zhang et al., PLATON, ICML 2022 (a baseline of Li et al., Co-S²P, arXiv:2410.08457)",
        preset: include_str!("../presets/fedavg-platon.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedavg-qvit",
        summary: "FedAvg+Q-ViT: synchronous rounds; each client trains the whole model on fake-quantised weights whose learned head-wise bit-widths fit its memory ratio; full-precision weights averaged",
        paper: "Li et al., Q-ViT, arXiv:2201.07703 (a baseline of Li et al., Co-S²P, arXiv:2410.08457)",
        preset: include_str!("../presets/fedavg-qvit.toml"),
        origin: module_path!(),
    }
}

// The model must have AdaViT's decision networks: `[model] name = "vit"` with `decisions = {}`.
inventory::submit! {
    Method {
        name: "fedavg-adavit",
        summary: "FedAvg+AdaViT: synchronous rounds; each client trains the whole ViT whose per-block decision networks drop patches, heads and sub-layers per sample, a usage loss pulling their kept shares to its budget; backbone and decision networks averaged",
        paper: "Meng et al., AdaViT, CVPR 2022 (a baseline of Li et al., Co-S²P, arXiv:2410.08457)",
        preset: include_str!("../presets/fedavg-adavit.toml"),
        origin: module_path!(),
    }
}

// The model must be the masked network: `[model] name = "probability-mask"` with the frozen
// network as `base = { name = ... }`; scores train best with Adam at a high rate (FedPM: 0.1).
inventory::submit! {
    Method {
        name: "fedpm",
        summary: "FedPM: synchronous rounds of a probability-mask network (frozen weights, learned Bernoulli masks); the server counts the clients' masks into a Beta posterior per weight",
        paper: "Isik, Pase, Gunduz, Weissman and Zorzi, ICLR 2023",
        preset: include_str!("../presets/fedpm.toml"),
        origin: module_path!(),
    }
}
