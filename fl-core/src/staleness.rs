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

/// What a [`StalenessFn`] weighs: one update at the moment of its aggregation.
pub struct StalenessCtx<'a> {
    /// Global versions (aggregations) since the model the update started from: the current
    /// version minus [`ClientUpdate::base_version`].
    pub versions: u64,
    /// Virtual seconds between the job's dispatch and the update's arrival.
    pub seconds: f64,
    /// The update itself (its client, delta, base model, samples).
    pub update: &'a ClientUpdate,
    /// The current global model, which the update is about to be merged into.
    pub global: &'a ParamSet,
}

/// The weight of a (possibly stale) update.
///
/// # Contract
/// At each aggregation the engine calls [`StalenessFn::weight`] once per pending update, in
/// arrival order, on the run's own thread, before the [`crate::Aggregator`] runs; the weights
/// reach the aggregator as [`crate::UpdateStaleness::weight`]. The engine does not check the value:
/// return a finite, non-negative number (1 conventionally means "no discount"). The function
/// may learn from what it sees (`&mut self`), but must not modify the update or the global
/// model, and must be deterministic (no OS randomness, no host clock).
///
/// # Example
/// FedAsync's polynomial weight (s + 1)^(−a), s the staleness in versions (Xie, Koyejo and
/// Gupta, "Asynchronous Federated Optimization", arXiv:1903.03934, 2019):
/// ```
/// use fl_core::{StalenessCtx, StalenessFn};
///
/// struct Polynomial {
///     a: f64,
/// }
///
/// impl StalenessFn for Polynomial {
///     fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
///         (ctx.versions as f64 + 1.0).powf(-self.a)
///     }
/// }
/// # let _: Box<dyn StalenessFn> = Box::new(Polynomial { a: 0.5 });
/// ```
pub trait StalenessFn: Send {
    /// The weight of `ctx.update`, given its staleness.
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
