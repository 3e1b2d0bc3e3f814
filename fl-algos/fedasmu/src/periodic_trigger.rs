//! FedASMU's asynchronous schedule (Alg. 1, lines 2–7, with the spec's [rec] A2): every
//! `period_s` virtual seconds (𝒯 = 10), if fewer than `max_active` devices are training, the
//! server triggers `devices_per_trigger` idle devices (m' = 10) drawn uniformly at random and
//! sends them the current model. Every upload is aggregated on arrival (one version each)
//! until `aggregations` (T·m' = 5000 by the spec's A1).
//!
//! With `pull_at`, each device asks for the newest global model once, after that share of its
//! local work (l*/E: with E = 5 epochs, H1 = 0.2, H2 = 0.4, H3 = 0.8), and merges it if it is
//! newer than its start (the trainer decides how; the engine charges the second download and
//! blocks the device meanwhile). Without it, devices never pull (FedASMU-FA and -0).

use fl_core::clock::{Tick, ticks};
use fl_core::{InvalidKey, Result, SchedCtx, Scheduler, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::start_devices::{start_random_idle, validate_pull_at};

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
    /// Share of its local work after which a device asks for the newest model (absent: never).
    #[default(None)]
    pub pull_at: Option<f64>,
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
        validate_pull_at(self.pull_at)
    }
}

pub struct PeriodicTrigger {
    cfg: PeriodicTriggerConfig,
}

impl PeriodicTrigger {
    pub fn new(cfg: PeriodicTriggerConfig) -> Self {
        PeriodicTrigger { cfg }
    }

    fn max_active(&self) -> usize {
        self.cfg.max_active.unwrap_or(self.cfg.devices_per_trigger)
    }

    /// Triggers m' idle devices if fewer than `max_active` train, then checks again in 𝒯.
    fn check(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        if ctx.in_flight() < self.max_active() {
            start_random_idle(ctx, self.cfg.devices_per_trigger, self.cfg.pull_at)?;
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

    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        ctx.aggregate()?;
        if ctx.version() >= self.cfg.aggregations {
            ctx.stop();
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

    fl_core::stateless!();
}

fl_core::register!(Scheduler "periodic-trigger" => PeriodicTrigger::new(PeriodicTriggerConfig),
    summary: "every period_s, if fewer than max_active devices train, trigger m' idle ones (optionally pulling the newest model after pull_at of their work); aggregate each arrival",
    paper: "Jia, Liu et al., FedASMU, arXiv:2507.06031, Alg. 1");
