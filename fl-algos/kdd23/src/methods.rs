//! The paper's methods and baselines as presets: uniform weighting, momentum-0.5 SGD with batch
//! 128 and 5 local epochs (§6.2; epochs as the authors' code runs them), full participation,
//! masks at level L where a level applies (override `[mask] level`). The learning rate is the
//! MNIST-MLP one (0.01); set `[trainer] lr` per task. FedAvg of the paper is `ra-fed` with
//! `[mask] level = "full"` (an unweighted mean, as in the authors' code).
//!
//! Each preset is the experiment-file fragment `presets/<method>.toml` of this crate.

use fl_core::Method;

inventory::submit! {
    Method {
        name: "ra-fed",
        summary: "RA-Fed: region submodels, each coordinate averaged over the clients that trained it",
        paper: "Wang et al., KDD 2023",
        preset: include_str!("../presets/ra-fed.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "ram-fed",
        summary: "RAM-Fed: RA-Fed plus every client's stored update standing in where it did not train",
        paper: "Wang et al., KDD 2023",
        preset: include_str!("../presets/ram-fed.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "oap",
        summary: "OAP as run in KDD'23: RA-Fed's masks, but coordinates nobody trained are set to 0",
        paper: "Zhou et al., arXiv:2201.11803; as configured by Wang et al., KDD 2023",
        preset: include_str!("../presets/oap.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "splitfl",
        summary: "SplitFL as run in KDD'23 (SameStr.): one random region pair per round, trained by every client",
        paper: "Thapa et al., SplitFed, AAAI 2022; as configured by Wang et al., KDD 2023",
        preset: include_str!("../presets/splitfl.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "ist",
        summary: "IST as run in KDD'23 (U.A.): the maskable weights split into N disjoint groups redrawn each round, one per client",
        paper: "Yuan et al., Distributed Learning of Fully Connected Neural Networks using Independent Subnet Training, VLDB 2022",
        preset: include_str!("../presets/ist.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "prunefl",
        summary: "PruneFL as run in KDD'23: clients train the largest-magnitude 50% (L) / 25% (S) of each maskable tensor",
        paper: "Jiang et al., IEEE TNNLS 2022; as configured by Wang et al., KDD 2023",
        preset: include_str!("../presets/prunefl.toml"),
        origin: module_path!(),
    }
}
