//! Template of a third-party plugin crate. Copy this crate, rename it, and register your own
//! components: each is a type implementing one of fl-core's traits, with a config struct (its
//! section's keys, each default beside its field, checked by [`fl_core::Validate`]) and a
//! constructor taking it, registered in one `fl_core::register!` declaration. Nothing in the
//! workspace needs to change.
//!
//! This one adds a staleness function (`cutoff`), an aggregator (`clipped-mean`), a scheduler
//! (`deadline-rounds`) and a method preset using the last two (`fedavg-deadline`).

mod clipped_mean;
mod cutoff;
mod deadline_rounds;

pub use clipped_mean::{ClippedMean, ClippedMeanConfig};
pub use cutoff::Cutoff;
pub use deadline_rounds::{DeadlineRounds, DeadlineRoundsConfig};

// `Cutoff` is its own config: `From`'s identity builds it.
fl_core::register!(Staleness "cutoff" => Cutoff::from(Cutoff),
    summary: "1 while staleness ≤ max_versions, else 0 (template plugin)", paper: "");
fl_core::register!(Aggregator "clipped-mean" => ClippedMean::new(ClippedMeanConfig),
    summary: "sample-weighted mean of deltas clipped to L2 norm max_norm (template plugin)",
    paper: "McMahan et al., Learning Differentially Private Recurrent Language Models, ICLR 2018");
fl_core::register!(Scheduler "deadline-rounds" => DeadlineRounds::new(DeadlineRoundsConfig),
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
