//! `semi-async`: Co-S²P's semi-asynchronous server loop (Algorithm 1, §4.3).
//!
//! Each round starts a job on every idle client with the current global model. The server
//! counts the updates that arrive (stale ones included: a client still training an older
//! round's job delivers it whenever it finishes); once it has ⌈μN⌉ of them it waits `t_clk_s`
//! more virtual seconds, aggregates everything received (each update weighed against the model
//! it started from: staleness τ is the versions since), and starts the next round. Clients
//! that have not returned keep training and join a later round.
//!
//! Li et al., "Unity is Power: Semi-Asynchronous Collaborative Training of Large-Scale Models
//! with Structured Pruning in Resource-Limited Clients" (Co-S²P, arXiv:2410.08457). With
//! `mu = 1` and `t_clk_s = 0` this is synchronous FedAvg's schedule; with ⌈μN⌉ = 1 and
//! `t_clk_s = 0` every arrival is aggregated at once and the client restarts (the paper's
//! Co-S²P Async).

use fl_core::clock::ticks;
use fl_core::{InvalidKey, Result, SchedCtx, Scheduler, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SemiAsyncConfig {
    /// μ: the share of the N clients whose updates the server waits for, in (0, 1].
    #[default(0.5)]
    pub mu: f64,
    /// T_clk: virtual seconds the server keeps collecting after ⌈μN⌉ updates (≥ 0).
    #[default(60.0)]
    pub t_clk_s: f64,
    /// Q: rounds (aggregations) before the run stops.
    #[default(120)]
    pub rounds: u64,
}

impl Validate for SemiAsyncConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        InvalidKey::in_unit_interval("mu", self.mu)?;
        if !(self.t_clk_s >= 0.0 && self.t_clk_s.is_finite()) {
            return Err(InvalidKey::new("t_clk_s", format!("expected seconds ≥ 0, got {}", self.t_clk_s)));
        }
        if self.rounds == 0 {
            return Err(InvalidKey::new("rounds", "expected at least 1"));
        }
        Ok(())
    }
}

pub struct SemiAsync {
    cfg: SemiAsyncConfig,
    /// Updates counted since the round began.
    received: usize,
    /// Whether the T_clk wait has started (its timer is set).
    waiting: bool,
}

impl SemiAsync {
    pub fn new(cfg: SemiAsyncConfig) -> Self {
        SemiAsync { cfg, received: 0, waiting: false }
    }

    /// ⌈μN⌉ (at least 1): the updates a round waits for (E2: ⌈0.4 · 16⌉ = 7).
    pub fn quorum(&self, clients: usize) -> usize {
        // A hair below the product, so that μN = 4.0 computed as 4.000000001 still needs 4.
        ((self.cfg.mu * clients as f64) - 1e-9).ceil().max(1.0) as usize
    }

    /// Starts a round: every idle client trains from the current global model.
    fn start_round(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.received = 0;
        self.waiting = false;
        ctx.idle_clients().into_iter().try_for_each(|c| ctx.dispatch(c))
    }

    /// Aggregates what arrived and starts the next round, or stops after the last.
    fn close_round(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        ctx.aggregate()?;
        if ctx.version() >= self.cfg.rounds {
            ctx.stop();
            return Ok(());
        }
        self.start_round(ctx)
    }
}

impl Scheduler for SemiAsync {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.start_round(ctx)
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        self.received += 1;
        if self.waiting || self.received < self.quorum(ctx.num_clients()) {
            return Ok(());
        }
        if self.cfg.t_clk_s == 0.0 {
            return self.close_round(ctx);
        }
        self.waiting = true;
        let at = ctx.now() + ticks(self.cfg.t_clk_s);
        ctx.set_timer(at, 0);
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut SchedCtx, _tag: u64) -> Result<()> {
        self.close_round(ctx)
    }

    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.rounds)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("received", &self.received)?;
        out.put("waiting", &self.waiting)
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.received = saved.get("received")?;
        self.waiting = saved.get("waiting")?;
        Ok(())
    }
}

fl_core::register!(Scheduler "semi-async" => SemiAsync::new(SemiAsyncConfig),
    summary: "Co-S²P's server loop: every idle client trains; after ⌈μN⌉ updates (stale ones included) wait T_clk more seconds, aggregate all received, next round",
    paper: "Li et al., Unity is Power (Co-S²P), arXiv:2410.08457, Algorithm 1");

#[cfg(test)]
mod tests {
    use super::*;
    use fl_core::clock::ticks;
    use fl_core::scheduler_testing::{Action, RecordingContext};

    fn scheduler(mu: f64, t_clk_s: f64, rounds: u64) -> SemiAsync {
        SemiAsync::new(SemiAsyncConfig { mu, t_clk_s, rounds })
    }

    #[test]
    fn the_quorum_is_the_ceiling_of_mu_n() {
        // E1: μN = 0.5 · 8 = 4; E2/E3: 0.4 · 16 = 6.4 → 7 (the spec's reading of `cnt < μN`).
        assert_eq!(scheduler(0.5, 60.0, 1).quorum(8), 4);
        assert_eq!(scheduler(0.4, 100.0, 1).quorum(16), 7);
        assert_eq!(scheduler(0.01, 0.0, 1).quorum(16), 1);
    }

    #[test]
    fn a_round_waits_for_the_quorum_then_t_clk_and_stragglers_join_a_later_round() {
        let mut s = scheduler(0.5, 60.0, 3);
        let mut ctx = RecordingContext::new(4, 1);
        s.on_start(&mut ctx).unwrap();
        assert_eq!(ctx.take_actions(), (0..4).map(Action::Dispatch).collect::<Vec<_>>());
        // The first arrival does not reach ⌈0.5 · 4⌉ = 2; the second starts the 60 s wait.
        ctx.now = ticks(10.0);
        ctx.arrive(2);
        s.on_arrival(&mut ctx, 2).unwrap();
        assert!(ctx.take_actions().is_empty());
        ctx.now = ticks(20.0);
        ctx.arrive(0);
        s.on_arrival(&mut ctx, 0).unwrap();
        assert_eq!(ctx.take_actions(), [Action::Timer { at: ticks(80.0), tag: 0 }]);
        // An arrival during the wait joins this round without a second timer.
        ctx.now = ticks(50.0);
        ctx.arrive(3);
        s.on_arrival(&mut ctx, 3).unwrap();
        assert!(ctx.take_actions().is_empty());
        // At 80 s: aggregate the three, restart the idle clients (client 1 still trains).
        ctx.now = ticks(80.0);
        s.on_timer(&mut ctx, 0).unwrap();
        assert_eq!(
            ctx.take_actions(),
            [Action::Aggregate { updates: 3 }, Action::Dispatch(0), Action::Dispatch(2), Action::Dispatch(3)]
        );
        // Round 2: the straggler's stale update counts towards the new quorum.
        ctx.now = ticks(90.0);
        ctx.arrive(1);
        s.on_arrival(&mut ctx, 1).unwrap();
        ctx.arrive(0);
        s.on_arrival(&mut ctx, 0).unwrap();
        assert_eq!(ctx.take_actions(), [Action::Timer { at: ticks(150.0), tag: 0 }]);
        ctx.now = ticks(150.0);
        s.on_timer(&mut ctx, 0).unwrap();
        assert_eq!(ctx.take_actions(), [Action::Aggregate { updates: 2 }, Action::Dispatch(0), Action::Dispatch(1)]);
        // Round 3 is the last: it stops after aggregating.
        for c in [2, 3] {
            ctx.arrive(c);
            s.on_arrival(&mut ctx, c).unwrap();
        }
        ctx.take_actions();
        s.on_timer(&mut ctx, 0).unwrap();
        assert_eq!(ctx.take_actions(), [Action::Aggregate { updates: 2 }, Action::Stop]);
    }

    #[test]
    fn without_a_wait_every_quorum_aggregates_at_once() {
        // Co-S²P Async: a quorum of one and no wait aggregates each arrival and restarts it.
        let mut s = scheduler(0.25, 0.0, 10);
        let mut ctx = RecordingContext::new(4, 2);
        s.on_start(&mut ctx).unwrap();
        ctx.take_actions();
        ctx.arrive(3);
        s.on_arrival(&mut ctx, 3).unwrap();
        assert_eq!(ctx.take_actions(), [Action::Aggregate { updates: 1 }, Action::Dispatch(3)]);
    }

    #[test]
    fn bad_settings_name_their_key() {
        let bad = |cfg: SemiAsyncConfig| cfg.validate().unwrap_err().key;
        assert_eq!(bad(SemiAsyncConfig { mu: 0.0, ..SemiAsyncConfig::default() }), "mu");
        assert_eq!(bad(SemiAsyncConfig { mu: 1.5, ..SemiAsyncConfig::default() }), "mu");
        assert_eq!(bad(SemiAsyncConfig { t_clk_s: -1.0, ..SemiAsyncConfig::default() }), "t_clk_s");
        assert_eq!(bad(SemiAsyncConfig { rounds: 0, ..SemiAsyncConfig::default() }), "rounds");
    }
}
