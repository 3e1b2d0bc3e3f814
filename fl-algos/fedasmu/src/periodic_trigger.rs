//! FedASMU's asynchronous schedule (Alg. 1, lines 2–7, with the spec's [rec] A2): every
//! `period_s` virtual seconds (𝒯 = 10), if fewer than `max_active` devices are training, the
//! server triggers `devices_per_trigger` idle devices (m' = 10) drawn uniformly at random and
//! sends them the current model. Every upload is aggregated on arrival (one version each)
//! until `aggregations` (T·m' = 5000 by the spec's A1); with `buffer` K, every K uploads (the
//! buffered baselines FedBuff, PORT and FedSA under FedASMU's trigger, as the spec runs every
//! asynchronous baseline). With `trainer_delay`, a device's job reports its mean or last lag
//! to the trainer's learning rate (ASO-Fed, FedSA; [`fl_algo_baselines::LagTracker`]).
//!
//! With `pull_at`, each device asks for the newest global model once, after that share of its
//! local work (l*/E: with E = 5 epochs, H1 = 0.2, H2 = 0.4, H3 = 0.8); with `rl_slot`, after
//! the epoch its RL policy chooses ([`crate::request_slot`]). It merges the model if it is
//! newer than its start (the trainer decides how; the engine charges the second download and
//! blocks the device meanwhile). Without either, devices never pull (FedASMU-FA and -0).

use fl_algo_baselines::{LagTracker, TrainerDelay};
use fl_core::clock::{Tick, ticks};
use fl_core::{InvalidKey, Result, SchedCtx, Scheduler, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::request_slot::{RequestSlot, RlSlotConfig, validate_request};
use crate::start_devices::start_random_idle;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeriodicTriggerConfig {
    /// m': devices triggered at a time.
    #[default(10)]
    pub devices_per_trigger: usize,
    /// 𝒯: virtual seconds between two checks.
    #[default(10.0)]
    pub period_s: f64,
    /// Trigger only while fewer devices than this are training (absent: m').
    #[default(None)]
    pub max_active: Option<usize>,
    /// Stop after this many aggregations.
    #[default(5000)]
    pub aggregations: u64,
    /// Uploads aggregated together (K), at least 1.
    #[default(1)]
    pub buffer: usize,
    /// The delay each job reports to the trainer's learning rate.
    pub trainer_delay: TrainerDelay,
    /// Share of its local work after which a device asks for the newest model (absent: never).
    #[default(None)]
    pub pull_at: Option<f64>,
    /// Ask at a slot learned by RL instead (the paper's FedASMU; excludes `pull_at`).
    #[default(None)]
    pub rl_slot: Option<RlSlotConfig>,
}

impl Validate for PeriodicTriggerConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.devices_per_trigger == 0 {
            return Err(InvalidKey::new("devices_per_trigger", "expected at least 1"));
        }
        if !(self.period_s > 0.0 && self.period_s.is_finite()) {
            return Err(InvalidKey::new(
                "period_s",
                format!("expected a positive number of seconds, got {}", self.period_s),
            ));
        }
        if self.max_active == Some(0) {
            return Err(InvalidKey::new("max_active", "expected at least 1"));
        }
        if self.aggregations == 0 {
            return Err(InvalidKey::new("aggregations", "expected at least 1"));
        }
        if self.buffer == 0 {
            return Err(InvalidKey::new("buffer", "expected at least 1"));
        }
        if self.trainer_delay != TrainerDelay::None && (self.pull_at.is_some() || self.rl_slot.is_some()) {
            return Err(InvalidKey::new(
                "trainer_delay",
                "a job that pulls a model mid-training reports no delay: drop trainer_delay or the pull",
            ));
        }
        validate_request(self.pull_at, self.rl_slot.as_ref())
    }
}

pub struct PeriodicTrigger {
    cfg: PeriodicTriggerConfig,
    request: RequestSlot,
    lags: LagTracker,
}

impl PeriodicTrigger {
    pub fn new(cfg: PeriodicTriggerConfig) -> Self {
        let request = RequestSlot::new(cfg.pull_at, cfg.rl_slot.clone());
        let lags = LagTracker::new(cfg.trainer_delay);
        PeriodicTrigger { cfg, request, lags }
    }

    fn max_active(&self) -> usize {
        self.cfg.max_active.unwrap_or(self.cfg.devices_per_trigger)
    }

    /// Triggers m' idle devices if fewer than `max_active` train, then checks again in 𝒯.
    fn check(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        if ctx.in_flight() < self.max_active() {
            start_random_idle(ctx, self.cfg.devices_per_trigger, &mut self.request, &mut self.lags)?;
        }
        let next: Tick = ctx.now() + ticks(self.cfg.period_s);
        ctx.set_timer(next, 0);
        Ok(())
    }
}

impl Scheduler for PeriodicTrigger {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.check(ctx)
    }

    fn on_timer(&mut self, ctx: &mut SchedCtx, _tag: u64) -> Result<()> {
        self.check(ctx)
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        self.request.on_arrival(ctx, client);
        self.lags.arrive(ctx, client);
        if ctx.pending_len() >= self.cfg.buffer {
            ctx.aggregate()?;
            if ctx.version() >= self.cfg.aggregations {
                ctx.stop();
            }
        }
        Ok(())
    }

    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.aggregations)
    }

    /// A trigger may find max_active − 1 devices training and add m'.
    fn max_in_flight(&self, clients: usize) -> usize {
        (self.max_active() - 1 + self.cfg.devices_per_trigger).min(clients)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        self.request.save(out)?;
        self.lags.save(out)
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.request.load(saved)?;
        self.lags.load(saved)
    }
}

fl_core::register!(Scheduler "periodic-trigger" => PeriodicTrigger::new(PeriodicTriggerConfig),
    summary: "every period_s, if fewer than max_active devices train, trigger m' idle ones (optionally pulling the newest model after pull_at of their work or at an RL-chosen epoch); aggregate every `buffer` arrivals",
    paper: "Jia, Liu et al., FedASMU, arXiv:2507.06031, Alg. 1");

#[cfg(test)]
mod tests {
    use fl_core::scheduler_testing::{Action, RecordingContext};

    use super::*;

    #[test]
    fn a_buffer_aggregates_every_k_arrivals_and_jobs_report_their_lags() {
        let cfg = PeriodicTriggerConfig {
            devices_per_trigger: 2,
            buffer: 2,
            trainer_delay: TrainerDelay::LastLag,
            aggregations: 1,
            ..PeriodicTriggerConfig::default()
        };
        let mut s = PeriodicTrigger::new(cfg);
        let mut ctx = RecordingContext::new(3, 1);
        s.on_start(&mut ctx).unwrap();
        let started: Vec<usize> = ctx
            .take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::DispatchJob { client, delay, .. } => {
                    assert_eq!(delay, 0.0, "no lag before a first arrival");
                    Some(client)
                }
                _ => None,
            })
            .collect();
        assert_eq!(started.len(), 2);
        ctx.arrive(started[0]);
        s.on_arrival(&mut ctx, started[0]).unwrap();
        assert_eq!(ctx.take_actions(), [], "one upload of a buffer of 2 waits");
        ctx.arrive(started[1]);
        s.on_arrival(&mut ctx, started[1]).unwrap();
        assert_eq!(ctx.take_actions(), [Action::Aggregate { updates: 2 }, Action::Stop]);
        // The next trigger starts a device; the first two arrived before any aggregation (lag 0).
        s.on_timer(&mut ctx, 0).unwrap();
        let delays: Vec<f64> = ctx
            .take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::DispatchJob { delay, .. } => Some(delay),
                _ => None,
            })
            .collect();
        assert_eq!(delays, [0.0, 0.0]);
    }

    #[test]
    fn a_lag_for_the_trainer_and_a_pull_exclude_each_other() {
        let cfg = PeriodicTriggerConfig {
            trainer_delay: TrainerDelay::MeanLag,
            pull_at: Some(0.4),
            ..PeriodicTriggerConfig::default()
        };
        assert_eq!(cfg.validate().unwrap_err().key, "trainer_delay");
    }
}
