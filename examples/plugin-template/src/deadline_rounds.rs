//! `deadline-rounds`: a semi-synchronous scheduler. Every `deadline_s` virtual seconds the
//! server aggregates whatever has arrived and starts up to `clients_per_round` idle clients on
//! the new model; a client that misses the deadline joins a later aggregation with its
//! staleness. It stops after `rounds` aggregations.

use fl_core::clock::ticks;
use fl_core::{InvalidKey, Result, SchedCtx, Scheduler, Validate};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadlineRoundsConfig {
    /// Aggregations to run.
    #[default(50)]
    pub rounds: u64,
    /// Virtual seconds between aggregations, positive.
    #[default(30.0)]
    pub deadline_s: f64,
    /// Idle clients started after each aggregation, at least 1.
    #[default(10)]
    pub clients_per_round: usize,
}

impl Validate for DeadlineRoundsConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.deadline_s > 0.0 && self.deadline_s.is_finite()) {
            return Err(InvalidKey::new("deadline_s", format!("must be positive, got {}", self.deadline_s)));
        }
        if self.clients_per_round == 0 {
            return Err(InvalidKey::new("clients_per_round", "must be at least 1"));
        }
        Ok(())
    }
}

pub struct DeadlineRounds {
    cfg: DeadlineRoundsConfig,
}

impl DeadlineRounds {
    pub fn new(cfg: DeadlineRoundsConfig) -> Self {
        DeadlineRounds { cfg }
    }

    /// Starts up to `clients_per_round` idle clients, drawn at random, and the next deadline.
    fn start_round(&self, ctx: &mut SchedCtx) -> Result<()> {
        let mut idle = ctx.idle_clients();
        idle.shuffle(ctx.rng());
        for &client in idle.iter().take(self.cfg.clients_per_round) {
            ctx.dispatch(client)?;
        }
        ctx.set_timer(ctx.now() + ticks(self.cfg.deadline_s), 0);
        Ok(())
    }
}

impl Scheduler for DeadlineRounds {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.start_round(ctx)
    }

    fn on_arrival(&mut self, _ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        Ok(()) // The update waits for the deadline.
    }

    fn on_timer(&mut self, ctx: &mut SchedCtx, _tag: u64) -> Result<()> {
        ctx.aggregate()?;
        if ctx.version() >= self.cfg.rounds {
            ctx.stop();
            return Ok(());
        }
        self.start_round(ctx)
    }

    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.rounds)
    }

    fl_core::stateless!();
}
