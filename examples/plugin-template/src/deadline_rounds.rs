//! `deadline-rounds`: a semi-synchronous scheduler. Every `deadline_s` virtual seconds the
//! server aggregates whatever has arrived and starts up to `clients_per_round` idle clients on
//! the new model; a client that misses the deadline joins a later aggregation with its
//! staleness. It stops after `rounds` aggregations.

use fl_core::clock::ticks;
use fl_core::{FromConfig, InvalidKey, Result, SchedCtx, Scheduler};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadlineRoundsConfig {
    pub rounds: u64,
    /// Virtual seconds between aggregations.
    pub deadline_s: f64,
    pub clients_per_round: usize,
}

impl Default for DeadlineRoundsConfig {
    fn default() -> Self {
        DeadlineRoundsConfig { rounds: 50, deadline_s: 30.0, clients_per_round: 10 }
    }
}

pub struct DeadlineRounds {
    cfg: DeadlineRoundsConfig,
}

impl FromConfig for DeadlineRounds {
    type Config = DeadlineRoundsConfig;

    fn from_config(cfg: DeadlineRoundsConfig) -> std::result::Result<Self, InvalidKey> {
        if !(cfg.deadline_s > 0.0 && cfg.deadline_s.is_finite()) {
            return Err(InvalidKey::new("deadline_s", format!("must be positive, got {}", cfg.deadline_s)));
        }
        if cfg.clients_per_round == 0 {
            return Err(InvalidKey::new("clients_per_round", "must be at least 1"));
        }
        Ok(DeadlineRounds { cfg })
    }
}

impl DeadlineRounds {
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
}
