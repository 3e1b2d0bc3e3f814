//! `Scheduler`: decides who trains what, when.
//!
//! It reacts to engine events (the start, an update's arrival, a timer it set) by acting on a
//! [`SchedCtx`]: dispatch a client, aggregate the pending updates, set a timer, stop. Actions
//! take effect immediately and in order, so a scheduler that aggregates and then dispatches
//! hands the clients the new model.
//!
//! # Design
//! It does not merge models (the aggregator does) nor choose masks (the mask policy does).

use crate::error::Result;

pub use crate::engine::SchedCtx;

pub trait Scheduler: Send {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()>;

    /// `client`'s update has arrived and joined the pending updates.
    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()>;

    /// A timer set with [`SchedCtx::set_timer`] fired.
    fn on_timer(&mut self, _ctx: &mut SchedCtx, _tag: u64) -> Result<()> {
        Ok(())
    }

    /// Aggregations this scheduler will perform if nothing else stops the run (for progress).
    fn planned_aggregations(&self) -> Option<u64> {
        None
    }
}
