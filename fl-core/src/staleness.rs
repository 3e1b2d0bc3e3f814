//! `StalenessFn`: the weight of a stale update.
//!
//! It receives a context, not just an integer: staleness in model versions and in virtual
//! seconds, the client, and the update itself (for functions that weigh model drift or learn
//! per-client parameters).
//!
//! # Design
//! It only weighs; what the weight multiplies (a mixing rate, a buffered step) is the
//! aggregator's business.

use crate::params::ParamSet;
use crate::update::ClientUpdate;

pub struct StalenessCtx<'a> {
    /// Aggregations between the update's dispatch and now.
    pub versions: u64,
    /// Virtual seconds between dispatch and arrival.
    pub seconds: f64,
    pub update: &'a ClientUpdate,
    pub global: &'a ParamSet,
}

pub trait StalenessFn: Send {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64;
}

/// Weight 1 whatever the staleness.
#[derive(Debug, Default, Clone, Copy)]
pub struct Constant;

impl StalenessFn for Constant {
    fn weight(&mut self, _: &StalenessCtx) -> f64 {
        1.0
    }
}
