//! The FedASMU method presets: the paper's method and its ablations FedASMU-DA, -FA and -0.

use fl_core::registry::Method;

const PAPER: &str =
    "Jia, Liu et al., Efficient Federated Learning with Timely Update Dissemination (FedASMU), arXiv:2507.06031";

inventory::submit! {
    Method {
        name: "fedasmu",
        summary: "FedASMU: periodic triggers of m' devices, learned staleness-aware merge per arrival, one mid-training pull merged with a learned weight (slot fixed at 40% of the work until RL lands)",
        paper: PAPER,
        preset: include_str!("../presets/fedasmu.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasmu-da",
        summary: "FedASMU-DA: FedASMU with the server's controls frozen (no dynamic aggregation)",
        paper: PAPER,
        preset: include_str!("../presets/fedasmu-da.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasmu-fa",
        summary: "FedASMU-FA: FedASMU without the devices' mid-training pull and learned merge",
        paper: PAPER,
        preset: include_str!("../presets/fedasmu-fa.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasmu-0",
        summary: "FedASMU-0: neither part (frozen server controls, no pull): FedAsync with a staleness bound",
        paper: PAPER,
        preset: include_str!("../presets/fedasmu-0.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedssmu",
        summary: "FedSSMU: synchronous rounds of m' devices merged one at a time on arrival with FedASMU's learned weight, pulls of the round's newest model (slot fixed at 40% of the work until RL lands)",
        paper: PAPER,
        preset: include_str!("../presets/fedssmu.toml"),
        origin: module_path!(),
    }
}
