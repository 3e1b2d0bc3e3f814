//! `[run] max_updates`: a run stops at the first aggregation that brings the updates merged so
//! far to the budget, however many updates each aggregation merges.

use std::sync::Arc;

use fl_core::testing::{KeepGlobal, tiny_setup};
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{Result, SchedCtx, Scheduler, Simulation};

/// Keeps every client training; aggregates once `buffer` updates are pending.
struct Buffered {
    buffer: usize,
}

impl Scheduler for Buffered {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        (0..ctx.num_clients()).try_for_each(|c| ctx.dispatch(c))
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        if ctx.pending_len() >= self.buffer {
            ctx.aggregate()?;
        }
        ctx.dispatch(client)
    }
}

/// (aggregations, updates) of a run aggregating every `buffer` arrivals under `max_updates`.
fn run(buffer: usize, max_updates: u64) -> (u64, u64) {
    let trainer = Arc::new(Sgd::new(SgdConfig { lr: 0.1, batch_size: 1, epochs: 1, ..Default::default() }));
    let mut setup = tiny_setup(trainer, Box::new(Buffered { buffer }), Box::new(KeepGlobal));
    setup.run.max_updates = Some(max_updates);
    let summary = Simulation::new(setup).unwrap().run(&mut ()).unwrap();
    (summary.aggregations, summary.updates)
}

#[test]
fn the_update_budget_ends_a_run_whatever_each_aggregation_merges() {
    assert_eq!(run(1, 7), (7, 7));
    assert_eq!(run(3, 9), (3, 9));
    assert_eq!(run(3, 7), (3, 9), "the aggregation that crosses the budget completes");
}
