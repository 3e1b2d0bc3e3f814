//! Asynchronous updates (FedAsync, FedBuff): up to `concurrency` clients train at once; each
//! arrival joins a buffer, and the buffer is aggregated once it holds `buffer` updates
//! (1: every arrival, FedAsync; K: FedBuff). After each arrival a client drawn uniformly from
//! the idle ones starts training on the newest model.

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
    /// Clients training at the same time (absent: all).
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
        let n = ctx.num_clients();
        let c = self.cfg.concurrency.unwrap_or(n).min(n);
        for _ in 0..c {
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
}

fl_core::register!(Scheduler "async" => AsyncUpdates::new(AsyncConfig),
    summary: "asynchronous: aggregate every `buffer` arrivals, keep `concurrency` clients training",
    paper: "Xie et al., arXiv:1903.03934; Nguyen et al., AISTATS 2022");
