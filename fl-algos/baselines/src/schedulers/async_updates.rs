//! Asynchronous updates (FedAsync, FedBuff): up to `concurrency` clients train at once; each
//! arrival joins a buffer, and the buffer is aggregated once it holds `buffer` updates
//! (1: every arrival, FedAsync; K: FedBuff). After each arrival a client drawn uniformly from
//! the idle ones starts training on the newest model.
//!
//! The scheduler measures each update's lag ([`super::lags`]): with `trainer_delay`, a
//! client's next job reports its mean lag (ASO-Fed's d̄_k) or its last lag (FedSA's staleness)
//! as the delay its learning rate reads ([`fl_core::TrainJob::delay`]).
//!
//! Without `concurrency`, all clients train at once up to [`DEFAULT_MAX_CONCURRENCY`]: every
//! job in flight holds the model version it started from, so "every client" of a population
//! of 10,000 would hold 10,000 models (FedBuff with 10,000 clients peaked at 21.9 GB that way).

use fl_core::{InvalidKey, Result, SchedCtx, Scheduler, StateIn, StateOut, Validate};
use rand::seq::IndexedRandom;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use super::lags::LagTracker;
pub use super::lags::TrainerDelay;

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
    /// The delay each job reports to the trainer's learning rate.
    pub trainer_delay: TrainerDelay,
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
    lags: LagTracker,
}

impl AsyncUpdates {
    pub fn new(cfg: AsyncConfig) -> Self {
        let lags = LagTracker::new(cfg.trainer_delay);
        AsyncUpdates { cfg, lags }
    }

    fn dispatch_random_idle(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        let idle = ctx.idle_clients();
        let Some(&c) = idle.choose(ctx.rng()) else { return Ok(()) };
        self.lags.dispatch(ctx, c)
    }
}

impl Scheduler for AsyncUpdates {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        for _ in 0..self.max_in_flight(ctx.num_clients()) {
            self.dispatch_random_idle(ctx)?;
        }
        Ok(())
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        self.lags.arrive(ctx, client);
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

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        self.lags.save(out)
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.lags.load(saved)
    }
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

    /// The delays of the jobs dispatched after each of the arrivals a, b, a, b (two clients
    /// training at once, every arrival aggregated): lags 0, 1, 1, 1.
    fn delays(trainer_delay: TrainerDelay) -> Vec<(usize, f64)> {
        let mut s = AsyncUpdates::new(AsyncConfig { concurrency: Some(2), trainer_delay, ..AsyncConfig::default() });
        let mut ctx = RecordingContext::new(2, 3);
        s.on_start(&mut ctx).unwrap();
        let first = ctx.take_actions();
        assert!(first.iter().all(|a| matches!(a, Action::DispatchJob { delay: 0.0, .. })), "{first:?}");
        let mut seen = Vec::new();
        for client in [0, 1, 0, 1] {
            ctx.arrive(client);
            s.on_arrival(&mut ctx, client).unwrap();
            for action in ctx.take_actions() {
                if let Action::DispatchJob { client, delay, .. } = action {
                    seen.push((client, delay));
                }
            }
        }
        seen
    }

    #[test]
    fn jobs_report_their_clients_mean_or_last_lag() {
        assert_eq!(delays(TrainerDelay::MeanLag), [(0, 0.0), (1, 1.0), (0, 0.5), (1, 1.0)]);
        assert_eq!(delays(TrainerDelay::LastLag), [(0, 0.0), (1, 1.0), (0, 1.0), (1, 1.0)]);
    }
}
