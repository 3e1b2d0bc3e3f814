//! Fed-RAA and its ablations (Table 3) as presets: M = 4 neuron fragments of Table 4, the
//! paper's local training (momentum-0.5 SGD, lr 0.005, batch 128, 5 local epochs; ρ = 0, set
//! `[trainer] prox_mu` for the proximal term), each arrival mixed into its fragment with
//! α = 0.5 (not stated in the paper) and no staleness damping (the paper's "optional"
//! s(·) off). Gre-RAA's K is the offline optimum K* unless `[scheduler] k` is set.
//!
//! Each preset is the experiment-file fragment `presets/<method>.toml` of this crate.

use fl_core::Method;

inventory::submit! {
    Method {
        name: "fed-raa",
        summary: "Fed-RAA: async fragment training, Gre-RAA assignment under the delay bound K",
        paper: "Zhang et al., Fed-RAA",
        preset: include_str!("../presets/fed-raa.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fed-raa-random",
        summary: "Random Fed-RAA (Table 3): fragments assigned uniformly at random",
        paper: "Zhang et al., Fed-RAA",
        preset: include_str!("../presets/fed-raa-random.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "mp-raa",
        summary: "MP-RAA (Table 3): the least-updated fragment, no delay bound",
        paper: "Zhang et al., Fed-RAA",
        preset: include_str!("../presets/mp-raa.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fed-raa-sync",
        summary: "Sync Fed-RAA (Table 3): Gre-RAA assignment in synchronous rounds, per-fragment mean then α-mix",
        paper: "Zhang et al., Fed-RAA",
        preset: include_str!("../presets/fed-raa-sync.toml"),
        origin: module_path!(),
    }
}
