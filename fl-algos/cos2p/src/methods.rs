//! Co-S²P's methods: its presets, selected by `method = "…"`.

use fl_core::Method;

inventory::submit! {
    Method {
        name: "cos2p",
        summary: "Co-S²P: semi-asynchronous rounds (⌈μN⌉ updates, then T_clk), segment-importance aggregation, rolling depth windows with learned width masks and self-distilled exits (E1's settings)",
        paper: "Li et al., Unity is Power (Co-S²P), arXiv:2410.08457",
        preset: include_str!("../presets/cos2p.toml"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "cos2p-async",
        summary: "Co-S²P (Async.): Co-S²P aggregating every update on arrival (⌈μN⌉ = 1, T_clk = 0)",
        paper: "Li et al., Unity is Power (Co-S²P), arXiv:2410.08457",
        preset: include_str!("../presets/cos2p-async.toml"),
        origin: module_path!(),
    }
}
