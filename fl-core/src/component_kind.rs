//! `ComponentKind`: the kinds of pluggable components, each with its experiment-file section.

use std::fmt;

/// Component kinds, in the order `fl list` prints them. The name is the experiment file's
/// section key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ComponentKind {
    Dataset,
    Partitioner,
    Model,
    Trainer,
    MaskPolicy,
    Scheduler,
    Aggregator,
    Staleness,
}

impl ComponentKind {
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
