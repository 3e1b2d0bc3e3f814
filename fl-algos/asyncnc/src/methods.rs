//! The paper's variants as method presets. The client trainer of every variant is the
//! paper's: Adam (lr γ₀ = 1e-3, re-created every local epoch as in the authors' code), the
//! rate γ₀/(√(e+1)(1 + α·d)) with α = 0.01 and e the local epoch, 10 local epochs of batches
//! of 64, early stopping with patience 10 (inert at 10 epochs: the counter reaches 9 at most).
//!
//! Each preset is the experiment-file fragment `presets/<method>.toml` of this crate.

use fl_core::Method;

inventory::submit! {
    Method {
        name: "asyncnc-afl",
        summary: "AFL (V1, Algorithm 1): J of C clients per round, delays U(0, 2) s, size-weighted model mean, broadcast",
        paper: "Forootani and Iervolino, Asynchronous FL with non-convex client objectives",
        preset: include_str!("../presets/asyncnc-afl.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "asyncnc-afl-code",
        summary: "AFL as the authors' code runs it (V2): own models from independent inits, no broadcast, lr delay D = 2",
        paper: "Forootani and Iervolino, official code (AFL_non_convex_non_iid)",
        preset: include_str!("../presets/asyncnc-afl-code.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "asyncnc-sfl",
        summary: "SFL (V3): AFL without delays (d = 0), the same trainer and aggregation",
        paper: "Forootani and Iervolino, §5 (synchronous baseline)",
        preset: include_str!("../presets/asyncnc-sfl.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "asyncnc-sfl-code",
        summary: "SFL as the authors' MNIST code runs it: V2 without delays, lr delay fixed at 0.02",
        paper: "Forootani and Iervolino, official code (synch_fdl_mnist)",
        preset: include_str!("../presets/asyncnc-sfl-code.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "asyncnc-events",
        summary: "event-driven AFL (V6): all clients loop with delays U(0, 2) s, aggregate every J = 5 arrivals",
        paper: "beyond Forootani and Iervolino: their rounds event-driven, with genuine staleness",
        preset: include_str!("../presets/asyncnc-events.toml"),
        origin: module_path!(),
    }
}
