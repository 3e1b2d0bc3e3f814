//! The FedASMU method presets: the paper's method, its ablations FedASMU-DA, -FA and -0, the
//! fixed request slots H1, H2 and H3 of its RL ablation, and FedSSMU.

use fl_core::registry::Method;

const PAPER: &str =
    "Jia, Liu et al., Efficient Federated Learning with Timely Update Dissemination (FedASMU), arXiv:2507.06031";

inventory::submit! {
    Method {
        name: "fedasmu",
        summary: "FedASMU: periodic triggers of m' devices, learned staleness-aware merge per arrival, one mid-training pull at an RL-chosen epoch, merged with a learned weight",
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
        summary: "FedSSMU: synchronous rounds of m' devices merged one at a time on arrival with FedASMU's learned weight, pulls of the round's newest model at an RL-chosen epoch",
        paper: PAPER,
        preset: include_str!("../presets/fedssmu.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasmu-h1",
        summary: "FedASMU-H1: FedASMU with the request slot fixed right after the first local epoch instead of learned by RL",
        paper: PAPER,
        preset: include_str!("../presets/fedasmu-h1.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasmu-h2",
        summary: "FedASMU-H2: FedASMU with the request slot fixed midway (after 2 of 5 epochs) instead of learned by RL",
        paper: PAPER,
        preset: include_str!("../presets/fedasmu-h2.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasmu-h3",
        summary: "FedASMU-H3: FedASMU with the request slot fixed in the penultimate epoch (after 4 of 5) instead of learned by RL",
        paper: PAPER,
        preset: include_str!("../presets/fedasmu-h3.toml"),
        origin: module_path!(),
    }
}
