//! Each client's lags (the versions aggregated between a job's dispatch and its arrival) and
//! the delay its next job reports to the trainer's learning rate: the mean lag (ASO-Fed's
//! d̄_k) or the last one (FedSA's staleness), 0 before the client's first arrival.

use fl_core::scheduler::JobStart;
use fl_core::{Result, SchedCtx, StateIn, StateOut};
use serde::{Deserialize, Serialize};

/// What a job reports as its delay to the trainer's learning rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrainerDelay {
    /// Nothing (0).
    #[default]
    None,
    /// The client's mean lag over its arrived updates, in versions (ASO-Fed).
    MeanLag,
    /// The lag of the client's last arrived update, in versions (FedSA).
    LastLag,
}

/// A client's lags so far, in versions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct Lags {
    sum: f64,
    count: u64,
    last: f64,
}

/// Every client's lags, and the version its job in flight started from.
#[derive(Debug, Clone, Default)]
pub struct LagTracker {
    mode: TrainerDelay,
    started: Vec<u64>,
    lags: Vec<Lags>,
}

impl LagTracker {
    pub fn new(mode: TrainerDelay) -> Self {
        LagTracker { mode, started: Vec::new(), lags: Vec::new() }
    }

    fn ensure(&mut self, clients: usize) {
        if self.started.len() != clients {
            self.started = vec![0; clients];
            self.lags = vec![Lags::default(); clients];
        }
    }

    /// Starts a job of idle `client` on the current model, with the delay of its lags (a
    /// plain dispatch when no delay is reported).
    pub fn dispatch(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        self.ensure(ctx.num_clients());
        let lags = self.lags[client];
        let delay = match self.mode {
            TrainerDelay::None => 0.0,
            TrainerDelay::MeanLag => lags.sum / lags.count.max(1) as f64,
            TrainerDelay::LastLag => lags.last,
        };
        self.started[client] = ctx.version();
        match self.mode {
            TrainerDelay::None => ctx.dispatch(client),
            _ => ctx.dispatch_job(client, JobStart { delay, ..JobStart::default() }),
        }
    }

    /// `client`'s job arrived: records its lag.
    pub fn arrive(&mut self, ctx: &mut SchedCtx, client: usize) {
        self.ensure(ctx.num_clients());
        let lag = (ctx.version() - self.started[client]) as f64;
        let lags = &mut self.lags[client];
        (lags.sum, lags.count, lags.last) = (lags.sum + lag, lags.count + 1, lag);
    }

    pub fn save(&self, out: &mut StateOut) -> Result<()> {
        out.put("started", &self.started)?;
        out.put("lags", &self.lags)
    }

    pub fn load(&mut self, saved: &StateIn) -> Result<()> {
        self.started = saved.get("started")?;
        self.lags = saved.get("lags")?;
        Ok(())
    }
}
