//! FedSSMU's synchronous rounds (Alg. 3): each round, m' devices drawn uniformly at random
//! start from the current model; each upload is merged as it arrives, in virtual-time order
//! (the aggregator decides how: FedASMU's learned weight), so the round's k-th arrival has
//! staleness k + 1 on the cumulative version counter (the spec's [rec] A15); the next round
//! starts when the last of them has arrived. With `pull_at` (or `rl_slot`: an epoch its RL
//! policy chooses, [`crate::request_slot`]), a device asks for the newest model after that
//! share of its work and receives the round's merged model if at least one upload
//! of the round has been merged (k > 0), as the engine answers any pull with a newer version.

use fl_algo_baselines::{LagTracker, TrainerDelay};
use fl_core::{InvalidKey, Result, SchedCtx, Scheduler, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::request_slot::{RequestSlot, RlSlotConfig, validate_request};
use crate::start_devices::start_random_idle;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SequentialRoundsConfig {
    /// m': devices per round.
    #[default(10)]
    pub devices_per_round: usize,
    /// T: rounds.
    #[default(500)]
    pub rounds: u64,
    /// Share of its local work after which a device asks for the newest model (absent: never).
    #[default(None)]
    pub pull_at: Option<f64>,
    /// Ask at a slot learned by RL instead (the paper's FedASMU; excludes `pull_at`).
    #[default(None)]
    pub rl_slot: Option<RlSlotConfig>,
}

impl Validate for SequentialRoundsConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.devices_per_round == 0 {
            return Err(InvalidKey::new("devices_per_round", "expected at least 1"));
        }
        if self.rounds == 0 {
            return Err(InvalidKey::new("rounds", "expected at least 1"));
        }
        validate_request(self.pull_at, self.rl_slot.as_ref())
    }
}

pub struct SequentialRounds {
    cfg: SequentialRoundsConfig,
    /// Rounds started so far.
    round: u64,
    request: RequestSlot,
    /// Starts plain jobs (FedSSMU's rounds report no delay).
    lags: LagTracker,
}

impl SequentialRounds {
    pub fn new(cfg: SequentialRoundsConfig) -> Self {
        let request = RequestSlot::new(cfg.pull_at, cfg.rl_slot.clone());
        SequentialRounds { cfg, round: 0, request, lags: LagTracker::new(TrainerDelay::None) }
    }

    fn start_round(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.round += 1;
        start_random_idle(ctx, self.cfg.devices_per_round, &mut self.request, &mut self.lags)
    }
}

impl Scheduler for SequentialRounds {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.start_round(ctx)
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        self.request.on_arrival(ctx, client);
        ctx.aggregate()?;
        if ctx.in_flight() > 0 {
            return Ok(());
        }
        if self.round >= self.cfg.rounds {
            ctx.stop();
            return Ok(());
        }
        self.start_round(ctx)
    }

    /// Rounds × devices, one aggregation per upload.
    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.rounds * self.cfg.devices_per_round as u64)
    }

    fn max_in_flight(&self, clients: usize) -> usize {
        self.cfg.devices_per_round.min(clients)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("round", &self.round)?;
        self.request.save(out)
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.round = saved.get("round")?;
        self.request.load(saved)
    }
}

fl_core::register!(Scheduler "sequential-rounds" => SequentialRounds::new(SequentialRoundsConfig),
    summary: "synchronous rounds of m' devices whose uploads merge one at a time as they arrive (FedSSMU), optionally pulling the round's newest model after pull_at of their work or at an RL-chosen epoch",
    paper: "Jia, Liu et al., FedASMU, arXiv:2507.06031, Alg. 3");

#[cfg(test)]
mod tests {
    use fl_core::scheduler_testing::{Action, RecordingContext};

    use super::*;

    #[test]
    fn every_upload_merges_on_arrival_and_a_round_starts_when_the_last_arrived() {
        let cfg = SequentialRoundsConfig { devices_per_round: 3, rounds: 2, pull_at: Some(0.4), rl_slot: None };
        let mut s = SequentialRounds::new(cfg);
        let mut ctx = RecordingContext::new(5, 1);
        s.on_start(&mut ctx).unwrap();
        let round: Vec<usize> = ctx
            .take_actions()
            .into_iter()
            .map(|a| match a {
                Action::DispatchWithPull { client, share } => {
                    assert_eq!(share, 0.4);
                    client
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(round.len(), 3);
        for (k, &c) in round.iter().enumerate() {
            ctx.arrive(c);
            s.on_arrival(&mut ctx, c).unwrap();
            let actions = ctx.take_actions();
            assert_eq!(actions[0], Action::Aggregate { updates: 1 }, "arrival {k}");
            // The second round's 3 devices start with the first round's last arrival.
            let started = actions.iter().filter(|a| matches!(a, Action::DispatchWithPull { .. })).count();
            assert_eq!(started, if k == 2 { 3 } else { 0 }, "arrival {k}: {actions:?}");
        }
        let second: Vec<usize> = (0..5).filter(|&c| ctx.busy[c]).collect();
        for (k, &c) in second.iter().enumerate() {
            ctx.arrive(c);
            s.on_arrival(&mut ctx, c).unwrap();
            let actions = ctx.take_actions();
            let want = if k == 2 {
                vec![Action::Aggregate { updates: 1 }, Action::Stop]
            } else {
                vec![Action::Aggregate { updates: 1 }]
            };
            assert_eq!(actions, want, "round 2, arrival {k}");
        }
        assert_eq!(ctx.version, 6);
        assert_eq!(s.planned_aggregations(), Some(6));
    }
}
