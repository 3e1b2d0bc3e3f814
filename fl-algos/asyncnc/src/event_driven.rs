//! `delayed-async`: the event-driven variant (V6; not in the paper, which never simulates
//! staleness): every client trains in a loop on the virtual clock, each job after a delay
//! d ~ U(0, D), starting from the global model current at its dispatch. The server commits an
//! aggregate whenever `buffer` results have arrived (`buffer = 1`: per arrival, damped by the
//! staleness function), so an update's staleness τ is the number of versions committed while
//! it trained: genuine staleness for the staleness function to weigh.

use fl_core::{InvalidKey, JobStart, Result, SchedCtx, Scheduler, Validate};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::barrier_rounds::LrDelay;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DelayedAsyncConfig {
    /// Aggregations to run (`rounds` is the same key in the paper's terms, so that an
    /// experiment of `barrier-rounds` switches to this scheduler unchanged).
    #[serde(alias = "rounds")]
    #[default(1000)]
    pub aggregations: u64,
    /// Results per aggregation (J; alias `clients_per_round`).
    #[serde(alias = "clients_per_round")]
    #[default(5)]
    pub buffer: usize,
    /// D: each job waits U(0, D) virtual seconds before it starts.
    #[default(2.0)]
    pub max_delay_s: f64,
    /// The trainer's delay: the sampled delay, D, or a fixed value (`"versions"` is unknown
    /// at dispatch here and is refused).
    #[default(LrDelay::Sampled)]
    pub lr_delay: LrDelay,
    /// The delay with `lr_delay = "fixed"`, ≥ 0.
    #[default(0.0)]
    pub lr_delay_value: f64,
}

impl Validate for DelayedAsyncConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.aggregations == 0 {
            return Err(InvalidKey::new("aggregations", "expected at least 1"));
        }
        if self.buffer == 0 {
            return Err(InvalidKey::new("buffer", "expected at least 1"));
        }
        if !(self.max_delay_s >= 0.0 && self.max_delay_s.is_finite()) {
            return Err(InvalidKey::new(
                "max_delay_s",
                format!("expected a finite number ≥ 0, got {}", self.max_delay_s),
            ));
        }
        if self.lr_delay == LrDelay::Versions {
            return Err(InvalidKey::new(
                "lr_delay",
                "\"versions\" is not known when a job starts here; use \"sampled\", \"max\" or \"fixed\"",
            ));
        }
        if !(self.lr_delay_value >= 0.0) {
            return Err(InvalidKey::new(
                "lr_delay_value",
                format!("expected a number ≥ 0, got {}", self.lr_delay_value),
            ));
        }
        Ok(())
    }
}

pub struct DelayedAsync {
    cfg: DelayedAsyncConfig,
}

impl DelayedAsync {
    pub fn new(cfg: DelayedAsyncConfig) -> Self {
        DelayedAsync { cfg }
    }

    fn dispatch(&self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        let delay = if self.cfg.max_delay_s > 0.0 { ctx.rng().random_range(0.0..self.cfg.max_delay_s) } else { 0.0 };
        let lr_delay = match self.cfg.lr_delay {
            LrDelay::Sampled => delay,
            LrDelay::Max => self.cfg.max_delay_s,
            LrDelay::Fixed => self.cfg.lr_delay_value,
            LrDelay::Versions => unreachable!("refused by validate"),
        };
        ctx.dispatch_job(client, JobStart { wait_s: delay, delay: lr_delay, ..JobStart::default() })
    }
}

impl Scheduler for DelayedAsync {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        for client in 0..ctx.num_clients() {
            self.dispatch(ctx, client)?;
        }
        Ok(())
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        if ctx.pending_len() >= self.cfg.buffer {
            ctx.aggregate()?;
            if ctx.version() >= self.cfg.aggregations {
                ctx.stop();
                return Ok(());
            }
        }
        self.dispatch(ctx, client)
    }

    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.aggregations)
    }

    fl_core::stateless!();
}

fl_core::register!(Scheduler "delayed-async" => DelayedAsync::new(DelayedAsyncConfig),
    summary: "every client loops with delays U(0, D); aggregate every `buffer` arrivals (staleness = versions committed meanwhile)",
    paper: "beyond Forootani and Iervolino: their rounds event-driven, with genuine staleness");
