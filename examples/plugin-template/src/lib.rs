//! Template of a third-party plugin crate. Copy this crate, rename it, and register your own
//! components: each is a type implementing one of fl-core's traits and [`fl_core::FromConfig`]
//! (its section's keys with their defaults), registered in one `fl_core::register!` line.
//! Nothing in the workspace needs to change.
//!
//! This one adds a staleness function (`cutoff`), an aggregator (`clipped-mean`), a scheduler
//! (`deadline-rounds`) and a method preset using the last two (`fedavg-deadline`).

mod clipped_mean;
mod cutoff;
mod deadline_rounds;

pub use clipped_mean::{ClippedMean, ClippedMeanConfig};
pub use cutoff::Cutoff;
pub use deadline_rounds::{DeadlineRounds, DeadlineRoundsConfig};

fl_core::register!(Staleness "cutoff" => Cutoff,
    summary: "1 while staleness ≤ max_versions, else 0 (template plugin)", paper: "");
fl_core::register!(Aggregator "clipped-mean" => ClippedMean,
    summary: "sample-weighted mean of deltas clipped to L2 norm max_norm (template plugin)",
    paper: "McMahan et al., Learning Differentially Private Recurrent Language Models, ICLR 2018");
fl_core::register!(Scheduler "deadline-rounds" => DeadlineRounds,
    summary: "aggregate what arrived every deadline_s, then start clients_per_round idle clients (template plugin)",
    paper: "");

inventory::submit! {
    fl_core::Method {
        name: "fedavg-deadline",
        summary: "FedAvg with clipped deltas, aggregating every 30 virtual seconds (template plugin)",
        paper: "",
        preset: r#"
            [scheduler]
            name = "deadline-rounds"
            [aggregator]
            name = "clipped-mean"
            [staleness]
            name = "cutoff"
        "#,
        origin: module_path!(),
    }
}
