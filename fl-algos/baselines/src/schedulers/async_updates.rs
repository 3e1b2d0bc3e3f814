//! Asynchronous updates (FedAsync, FedBuff): up to `concurrency` clients train at once; each
//! arrival joins a buffer, and the buffer is aggregated once it holds `buffer` updates
//! (1: every arrival, FedAsync; K: FedBuff). After each arrival a client drawn uniformly from
//! the idle ones starts training on the newest model.
//!
//! Without `concurrency`, all clients train at once up to [`DEFAULT_MAX_CONCURRENCY`]: every
//! job in flight holds the model version it started from, so "every client" of a population
//! of 10,000 would hold 10,000 models (FedBuff with 10,000 clients peaked at 21.9 GB that way).

use fl_core::{InvalidKey, Result, SchedCtx, Scheduler, Validate};
use rand::seq::IndexedRandom;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsyncConfig {
    /// Updates aggregated together (K), at least 1.
    #[default(1)]
    pub buffer: usize,
    /// Clients training at the same time (absent: all, up to 100).
    #[default(None)]
    pub concurrency: Option<usize>,
    /// Stop after this many aggregations.
    #[default(1000)]
    pub aggregations: u64,
}

impl Validate for AsyncConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.buffer == 0 {
            return Err(InvalidKey::new("buffer", "expected at least 1"));
        }
        if self.concurrency == Some(0) {
            return Err(InvalidKey::new("concurrency", "expected at least 1"));
        }
        if self.aggregations == 0 {
            return Err(InvalidKey::new("aggregations", "expected at least 1"));
        }
        Ok(())
    }
}

/// Clients training at once when `concurrency` is absent and there are more clients.
pub const DEFAULT_MAX_CONCURRENCY: usize = 100;

pub struct AsyncUpdates {
    cfg: AsyncConfig,
}

impl AsyncUpdates {
    pub fn new(cfg: AsyncConfig) -> Self {
        AsyncUpdates { cfg }
    }

    fn dispatch_random_idle(&self, ctx: &mut SchedCtx) -> Result<()> {
        let idle = ctx.idle_clients();
        if let Some(&c) = idle.choose(ctx.rng()) {
            ctx.dispatch(c)?;
        }
        Ok(())
    }
}

impl Scheduler for AsyncUpdates {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        for _ in 0..self.max_in_flight(ctx.num_clients()) {
            self.dispatch_random_idle(ctx)?;
        }
        Ok(())
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        if ctx.pending_len() >= self.cfg.buffer {
            ctx.aggregate()?;
            if ctx.version() >= self.cfg.aggregations {
                ctx.stop();
                return Ok(());
            }
        }
        self.dispatch_random_idle(ctx)
    }

    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.aggregations)
    }

    fn max_in_flight(&self, clients: usize) -> usize {
        self.cfg.concurrency.unwrap_or(DEFAULT_MAX_CONCURRENCY).min(clients)
    }

    fl_core::stateless!();
}

fl_core::register!(Scheduler "async" => AsyncUpdates::new(AsyncConfig),
    summary: "asynchronous: aggregate every `buffer` arrivals, keep `concurrency` clients training",
    paper: "Xie et al., arXiv:1903.03934; Nguyen et al., AISTATS 2022");

#[cfg(test)]
mod tests {
    use fl_core::scheduler_testing::{Action, RecordingContext};

    use super::*;

    fn started(concurrency: Option<usize>, clients: usize) -> usize {
        let mut s = AsyncUpdates::new(AsyncConfig { concurrency, ..AsyncConfig::default() });
        let mut ctx = RecordingContext::new(clients, 3);
        s.on_start(&mut ctx).unwrap();
        let dispatched = ctx.take_actions().iter().filter(|a| matches!(a, Action::Dispatch(_))).count();
        assert_eq!(dispatched, s.max_in_flight(clients), "the memory check's bound is what starts");
        dispatched
    }

    #[test]
    fn without_a_concurrency_every_client_trains_up_to_the_default_bound() {
        assert_eq!(started(None, 40), 40);
        assert_eq!(started(None, 10_000), DEFAULT_MAX_CONCURRENCY);
        assert_eq!(started(Some(500), 10_000), 500);
        assert_eq!(started(Some(500), 20), 20);
    }
}
