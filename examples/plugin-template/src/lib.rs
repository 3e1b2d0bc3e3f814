//! Template of a third-party plugin crate. Copy this crate, rename it, and register your own
//! components: each is a type implementing one of fl-core's traits, a serde config struct with
//! its defaults, and one `inventory::submit!`. Nothing in the workspace needs to change.
//!
//! This one adds a staleness function, `cutoff` (weight 1 up to a staleness bound, 0 after it:
//! too-stale updates are ignored), and a method preset using it, `fedasync-cutoff`.

use fl_core::registry::{Builder, Component, Method, defaults_of};
use fl_core::{StalenessCtx, StalenessFn};
use serde::{Deserialize, Serialize};

/// Weight 1 while the staleness is at most `max_versions`, 0 beyond.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cutoff {
    pub max_versions: u64,
}

impl Default for Cutoff {
    fn default() -> Self {
        Cutoff { max_versions: 4 }
    }
}

impl StalenessFn for Cutoff {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        if ctx.versions <= self.max_versions { 1.0 } else { 0.0 }
    }
}

inventory::submit! {
    Component {
        name: "cutoff",
        summary: "1 while staleness ≤ max_versions, else 0 (template plugin)",
        paper: "",
        defaults: defaults_of::<Cutoff>,
        build: Builder::Staleness(|p| Ok(Box::new(p.parse::<Cutoff>()?))),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "fedasync-cutoff",
        summary: "FedAsync that ignores updates staler than 4 versions (template plugin)",
        paper: "",
        preset: r#"
            [scheduler]
            name = "async"
            [aggregator]
            name = "async-mix"
            [staleness]
            name = "cutoff"
        "#,
        origin: module_path!(),
    }
}
