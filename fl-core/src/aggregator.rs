//! `Aggregator`: how updates are merged into the global model.
//!
//! # Design
//! It does not decide *when* to merge (the scheduler does) and it does not compute staleness
//! weights (the staleness function does; the weights arrive in the context). It returns the
//! next global model as new tensors and never mutates `global`.

use crate::clock::Tick;
use crate::error::Result;
use crate::params::ParamSet;
use crate::update::ClientUpdate;

/// An update's staleness, as measured by the engine and weighed by the staleness function.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Staleness {
    pub versions: u64,
    pub seconds: f64,
    pub weight: f64,
}

pub struct AggregateCtx<'a> {
    /// The version of `global` (the result becomes `version + 1`).
    pub version: u64,
    /// Clients in the federation (not only those aggregated now).
    pub num_clients: usize,
    pub now: Tick,
    /// One entry per update, same order.
    pub staleness: &'a [Staleness],
}

pub trait Aggregator: Send {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet>;

    /// Scalar diagnostics for the metrics log (name, value), read at each evaluation.
    fn diagnostics(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
}
