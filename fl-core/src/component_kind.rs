//! `ComponentKind`: the kinds of pluggable components, each with its experiment-file section.

use std::fmt;

/// Component kinds, in the order `fl list` prints them. The name is the experiment file's
/// section key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ComponentKind {
    /// Loads train and test data (`[dataset]`).
    Dataset,
    /// Splits the training samples among clients (`[partition]`).
    Partitioner,
    /// The architecture (`[model]`).
    Model,
    /// Clients' local optimisation (`[trainer]`).
    Trainer,
    /// Which part of the model a job trains (`[mask]`).
    MaskPolicy,
    /// Who trains when, and when the server aggregates (`[scheduler]`).
    Scheduler,
    /// How updates merge into the global model (`[aggregator]`).
    Aggregator,
    /// The weight of a stale update (`[staleness]`).
    Staleness,
}

impl ComponentKind {
    /// Every kind, in declaration order (the order `fl list` prints them in).
    pub const ALL: [ComponentKind; 8] = [
        ComponentKind::Dataset,
        ComponentKind::Partitioner,
        ComponentKind::Model,
        ComponentKind::Trainer,
        ComponentKind::MaskPolicy,
        ComponentKind::Scheduler,
        ComponentKind::Aggregator,
        ComponentKind::Staleness,
    ];

    /// The experiment file's section for this kind.
    pub fn section(self) -> &'static str {
        match self {
            ComponentKind::Dataset => "dataset",
            ComponentKind::Partitioner => "partition",
            ComponentKind::Model => "model",
            ComponentKind::Trainer => "trainer",
            ComponentKind::MaskPolicy => "mask",
            ComponentKind::Scheduler => "scheduler",
            ComponentKind::Aggregator => "aggregator",
            ComponentKind::Staleness => "staleness",
        }
    }
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ComponentKind::Dataset => "dataset",
            ComponentKind::Partitioner => "partitioner",
            ComponentKind::Model => "model",
            ComponentKind::Trainer => "trainer",
            ComponentKind::MaskPolicy => "mask policy",
            ComponentKind::Scheduler => "scheduler",
            ComponentKind::Aggregator => "aggregator",
            ComponentKind::Staleness => "staleness function",
        };
        f.write_str(s)
    }
}
