//! `Aggregator`: how updates are merged into the global model.
//!
//! # Design
//! It does not decide *when* to merge (the scheduler does) and it does not compute staleness
//! weights (the staleness function does; the weights arrive in the context). It returns the
//! next global model as new tensors and never mutates `global`.

use crate::clock::Tick;
use crate::error::Result;
use crate::params::ParamSet;
use crate::state::{StateIn, StateOut, not_resumable};
use crate::structure::Structure;
use crate::update::ClientUpdate;

/// An update's staleness, as measured by the engine and weighed by the staleness function.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateStaleness {
    /// Global versions (aggregations) since the model the update started from: the version
    /// being aggregated into minus [`ClientUpdate::base_version`].
    pub versions: u64,
    /// Virtual seconds between the job's dispatch and the update's arrival.
    pub seconds: f64,
    /// The staleness function's weight for the update ([`crate::StalenessFn::weight`]).
    pub weight: f64,
}

/// What the engine tells an [`Aggregator`] about an aggregation besides the global model and
/// the updates.
pub struct AggregateCtx<'a> {
    /// The version of `global` (the result becomes `version + 1`).
    pub version: u64,
    /// Clients in the federation (not only those aggregated now).
    pub num_clients: usize,
    /// Training samples of every client of the federation together (n).
    pub total_samples: usize,
    /// The virtual time of the aggregation, in ticks (microseconds, see [`crate::clock`]).
    pub now: Tick,
    /// The staleness of each update, one entry per update in the same order.
    pub staleness: &'a [UpdateStaleness],
    /// The model's tensors and unit groups (for aggregators that weigh heads or neurons as
    /// units); the engine always gives it, a test of an aggregator alone may not.
    pub structure: Option<&'a Structure>,
}

/// Merges client updates into the next global model.
///
/// # Contract
/// The engine calls [`Aggregator::aggregate`] each time the scheduler aggregates
/// ([`crate::SchedulingContext::aggregate`]) and at least one update is pending, on the run's
/// own thread, never concurrently. It passes:
/// - `global`, the model of version `ctx.version`;
/// - `updates`, every update that arrived since the previous aggregation, in arrival order
///   (by virtual time; simultaneous arrivals in the order they were scheduled); each carries
///   its full-shaped `delta` (exactly zero outside its [`crate::Mask`]), its `base` model and
///   its `samples`;
/// - `ctx.staleness[i]`, the staleness of `updates[i]`, already weighed by the run's
///   [`crate::StalenessFn`].
///
/// The implementation returns the model of version `ctx.version + 1` as new tensors with the
/// names and shapes of `global` (the engine fails the run with an error otherwise). It must not
/// modify `global`, nor any update's tensors, in place: in-flight jobs share their storage. It
/// may keep state between calls (server momentum, a buffer of updates), but its result must
/// be a deterministic function of its inputs and that state (no OS randomness, no host clock)
/// so that runs are reproducible. An error ends the run.
///
/// Aggregators that weigh by data size weigh an update by `samples * multiplicity`
/// ([`ClientUpdate::multiplicity`]).
///
/// # Example
/// A staleness-weighted, sample-weighted mean of the deltas, added to the global model:
/// ```
/// use fl_core::{AggregateCtx, Aggregator, ClientUpdate, ParamSet, Result};
///
/// struct WeightedMean;
///
/// impl Aggregator for WeightedMean {
///     fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
///         let weights: Vec<f64> = (updates.iter().zip(ctx.staleness))
///             .map(|(u, s)| u.samples as f64 * f64::from(u.multiplicity) * s.weight)
///             .collect();
///         let total: f64 = weights.iter().sum();
///         let mut next = global.shallow_clone();
///         for (u, w) in updates.iter().zip(weights).filter(|_| total > 0.0) {
///             next = next.add_scaled(&u.delta, w / total);
///         }
///         Ok(next)
///     }
/// }
/// # let _: Box<dyn Aggregator> = Box::new(WeightedMean);
/// ```
pub trait Aggregator: Send {
    /// The next global model (version `ctx.version + 1`) from `global` and the pending
    /// `updates`; see the trait's contract.
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet>;

    /// Model-sized copies it keeps among `clients` clients, for the memory check before the
    /// run (FedASMU's last merge of every device): 0 by default.
    fn model_copies(&self, _clients: usize) -> u64 {
        0
    }

    /// Scalar diagnostics for the metrics log (name, value), read at each evaluation.
    fn diagnostics(&self) -> Vec<(String, f64)> {
        Vec::new()
    }

    /// Saves what it remembers between events for a checkpoint ([`crate::state`]). The
    /// default refuses, and runs with this aggregator then write no checkpoints: a aggregator with state
    /// saves it all, one without implements this as `Ok(())`.
    fn save_state(&self, _out: &mut StateOut) -> Result<()> {
        Err(not_resumable("aggregator"))
    }

    /// Restores what [`Aggregator::save_state`] saved, on a aggregator freshly built from the same config.
    fn load_state(&mut self, _saved: &StateIn) -> Result<()> {
        Err(not_resumable("aggregator"))
    }
}
