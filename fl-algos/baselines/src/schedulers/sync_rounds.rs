//! Synchronous rounds (FedAvg): each round samples a share of the clients uniformly without
//! replacement, waits for all of them, aggregates, and starts the next round. A round lasts as
//! long as its slowest client.

use fl_core::{InvalidKey, Result, SchedCtx, Scheduler, StateIn, StateOut, Validate};
use rand::seq::index;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncRoundsConfig {
    /// Rounds to run, at least 1.
    #[default(100)]
    pub rounds: u64,
    /// Share of clients sampled each round, in (0, 1] (at least one client).
    #[default(1.0)]
    pub fraction: f64,
    /// If set, exactly this many clients per round (overrides `fraction`).
    #[default(None)]
    pub clients_per_round: Option<usize>,
}

impl Validate for SyncRoundsConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.rounds == 0 {
            return Err(InvalidKey::new("rounds", "expected at least 1"));
        }
        InvalidKey::in_unit_interval("fraction", self.fraction)?;
        if self.clients_per_round == Some(0) {
            return Err(InvalidKey::new("clients_per_round", "expected at least 1"));
        }
        Ok(())
    }
}

pub struct SyncRounds {
    cfg: SyncRoundsConfig,
    round: u64,
    awaiting: usize,
}

impl SyncRounds {
    pub fn new(cfg: SyncRoundsConfig) -> Self {
        SyncRounds { cfg, round: 0, awaiting: 0 }
    }

    /// Clients per round among `n`.
    fn per_round(&self, n: usize) -> usize {
        self.cfg.clients_per_round.unwrap_or_else(|| (self.cfg.fraction * n as f64).round() as usize).clamp(1, n)
    }

    fn start_round(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        let n = ctx.num_clients();
        let m = self.per_round(n);
        let chosen = index::sample(ctx.rng(), n, m).into_vec();
        for c in chosen {
            ctx.dispatch(c)?;
        }
        self.awaiting = m;
        Ok(())
    }
}

impl Scheduler for SyncRounds {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.start_round(ctx)
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        self.awaiting -= 1;
        if self.awaiting > 0 {
            return Ok(());
        }
        ctx.aggregate()?;
        self.round += 1;
        if self.round >= self.cfg.rounds {
            ctx.stop();
            return Ok(());
        }
        self.start_round(ctx)
    }

    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.rounds)
    }

    fn max_in_flight(&self, clients: usize) -> usize {
        self.per_round(clients)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("round", &self.round)?;
        out.put("awaiting", &self.awaiting)
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.round = saved.get("round")?;
        self.awaiting = saved.get("awaiting")?;
        Ok(())
    }
}

fl_core::register!(Scheduler "sync-rounds" => SyncRounds::new(SyncRoundsConfig),
    summary: "synchronous rounds: sample a share of clients, wait for all, aggregate",
    paper: "McMahan et al., AISTATS 2017");
