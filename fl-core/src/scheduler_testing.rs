//! A [`SchedulingContext`] of a test's own: drive a scheduler by hand, event by event, and read
//! what it did. A plugin's scheduler is unit-tested this way without data, models or the
//! engine (see the plugin template's `deadline-rounds` tests).
//!
//! ```
//! use fl_core::scheduler_testing::{Action, RecordingContext};
//! use fl_core::{Result, SchedCtx, Scheduler};
//!
//! /// Starts every client, aggregates at each arrival.
//! struct EveryArrival;
//! impl Scheduler for EveryArrival {
//!     fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
//!         for c in ctx.idle_clients() {
//!             ctx.dispatch(c)?;
//!         }
//!         Ok(())
//!     }
//!     fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
//!         ctx.aggregate()
//!     }
//! }
//!
//! let mut ctx = RecordingContext::new(2, 7);
//! let mut s = EveryArrival;
//! s.on_start(&mut ctx).unwrap();
//! assert_eq!(ctx.take_actions(), [Action::Dispatch(0), Action::Dispatch(1)]);
//! ctx.arrive(1);
//! s.on_arrival(&mut ctx, 1).unwrap();
//! assert_eq!(ctx.take_actions(), [Action::Aggregate { updates: 1 }]);
//! assert_eq!(ctx.version, 1);
//! ```

use std::collections::BTreeMap;

use tch::{Device, Kind, Tensor};

use crate::clock::{Tick, seconds};
use crate::error::{EngineError, Result};
use crate::params::ParamSet;
use crate::profile::DeviceProfile;
use crate::rng::{self, Rng};
use crate::scheduler::{JobStart, SchedulingContext};
use crate::update::ClientUpdate;

/// What a scheduler did to a [`RecordingContext`], in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A job for this client from the current global model.
    Dispatch(usize),
    /// A job started as a [`JobStart`] says.
    DispatchJob {
        /// The client.
        client: usize,
        /// The version of its start model; `None`: the current global model.
        from_version: Option<u64>,
        /// Virtual seconds before its download starts.
        wait_s: f64,
        /// The delay the trainer's delay-aware learning rate reads.
        delay: f64,
    },
    /// A job with the mask policy's alternative `choice`.
    DispatchChoice {
        /// The client.
        client: usize,
        /// The mask policy's alternative.
        choice: usize,
    },
    /// A job that pulls the newest model after `share` of its work.
    DispatchWithPull {
        /// The client.
        client: usize,
        /// Share of the local work, in (0, 1), before the pull.
        share: f64,
    },
    /// An aggregation.
    Aggregate {
        /// Pending updates it merged.
        updates: usize,
    },
    /// A timer.
    Timer {
        /// Virtual time it fires at, ticks (not before the time it was set).
        at: Tick,
        /// The tag `on_timer` receives.
        tag: u64,
    },
    /// The run ends.
    Stop,
}

/// A run reduced to what a scheduler sees, changed only by the scheduler's actions and by the
/// test ([`RecordingContext::arrive`], and its public fields).
pub struct RecordingContext {
    /// Virtual time, ticks: the test advances it.
    pub now: Tick,
    /// Global model version: aggregations so far.
    pub version: u64,
    /// Whether each client has a job in flight.
    pub busy: Vec<bool>,
    /// Each client's training samples (default 100).
    pub samples: Vec<usize>,
    /// Each client's device (default 1 GFLOP/s, 1 MB/s both ways).
    pub profiles: Vec<DeviceProfile>,
    /// Updates that arrived and were not aggregated: (client, base version).
    pub pending: Vec<(usize, u64)>,
    /// What [`SchedulingContext::pending_updates`] returns: empty unless the test fills it.
    pub pending_updates: Vec<ClientUpdate>,
    /// The global model: one scalar tensor `w`.
    pub global: ParamSet,
    /// Alternatives the mask policy offers (0: it decides alone).
    pub mask_choices: usize,
    /// Diagnostics the scheduler set, by name.
    pub diagnostics: BTreeMap<String, f64>,
    /// Whether the scheduler stopped the run.
    pub stopped: bool,
    rng: Rng,
    actions: Vec<Action>,
    /// Base version of each client's job in flight.
    bases: Vec<u64>,
}

impl RecordingContext {
    /// `clients` idle clients, the scheduler's random stream from `seed`.
    pub fn new(clients: usize, seed: u64) -> Self {
        let profile = DeviceProfile {
            flops_per_s: 1e9,
            up_bytes_per_s: 1e6,
            down_bytes_per_s: 1e6,
            memory_bytes: f64::INFINITY,
            batch_size: None,
        };
        let w = Tensor::zeros([1], (Kind::Float, Device::Cpu));
        RecordingContext {
            now: 0,
            version: 0,
            busy: vec![false; clients],
            samples: vec![100; clients],
            profiles: vec![profile; clients],
            pending: Vec::new(),
            pending_updates: Vec::new(),
            global: ParamSet::new(vec!["w".into()], vec![w]).expect("one name, one tensor"),
            mask_choices: 0,
            diagnostics: BTreeMap::new(),
            stopped: false,
            rng: rng::stream(seed, &[rng::tag::SCHEDULER]),
            actions: Vec::new(),
            bases: vec![0; clients],
        }
    }

    /// `client`'s job arrives: the client is idle again and its update pending. Call the
    /// scheduler's `on_arrival` next, as the engine would.
    pub fn arrive(&mut self, client: usize) {
        self.busy[client] = false;
        self.pending.push((client, self.bases[client]));
    }

    /// The actions since the last call, in order.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    fn start(&mut self, client: usize, base: u64, action: Action) -> Result<()> {
        match self.busy.get(client) {
            None => return Err(EngineError::UnknownClient { client, have: self.busy.len() }.into()),
            Some(true) => return Err(EngineError::ClientBusy { client }.into()),
            Some(false) => {}
        }
        self.busy[client] = true;
        self.bases[client] = base;
        self.actions.push(action);
        Ok(())
    }
}

impl SchedulingContext for RecordingContext {
    fn now(&self) -> Tick {
        self.now
    }

    fn now_s(&self) -> f64 {
        seconds(self.now)
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn num_clients(&self) -> usize {
        self.busy.len()
    }

    fn is_busy(&self, client: usize) -> bool {
        self.busy[client]
    }

    fn idle_clients(&self) -> Vec<usize> {
        (0..self.busy.len()).filter(|&c| !self.busy[c]).collect()
    }

    fn in_flight(&self) -> usize {
        self.busy.iter().filter(|&&b| b).count()
    }

    fn pending(&self) -> Vec<(usize, u64)> {
        self.pending.clone()
    }

    fn pending_len(&self) -> usize {
        self.pending.len()
    }

    fn profile(&self, client: usize) -> &DeviceProfile {
        &self.profiles[client]
    }

    fn samples(&self, client: usize) -> usize {
        self.samples[client]
    }

    fn global(&self) -> &ParamSet {
        &self.global
    }

    fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    fn dispatch(&mut self, client: usize) -> Result<()> {
        self.start(client, self.version, Action::Dispatch(client))
    }

    fn dispatch_job(&mut self, client: usize, start: JobStart) -> Result<()> {
        let from_version = start.from.as_ref().map(|(v, _)| *v);
        let action = Action::DispatchJob { client, from_version, wait_s: start.wait_s, delay: start.delay };
        if start.concurrent && self.busy.get(client) == Some(&true) {
            self.actions.push(action);
            return Ok(());
        }
        self.start(client, from_version.unwrap_or(self.version), action)
    }

    fn pending_updates(&self) -> &[ClientUpdate] {
        &self.pending_updates
    }

    fn fresh_model(&self, _key: u64) -> ParamSet {
        self.global.zeros_like()
    }

    fn mask_choices(&self) -> usize {
        self.mask_choices
    }

    fn dispatch_choice(&mut self, client: usize, choice: usize) -> Result<()> {
        self.start(client, self.version, Action::DispatchChoice { client, choice })
    }

    /// The cost model reduced to the client's speed: 1 GFLOP of work.
    fn job_duration_s(&mut self, client: usize, _choice: Option<usize>) -> Result<f64> {
        Ok(1e9 / self.profiles[client].flops_per_s)
    }

    fn set_diagnostic(&mut self, name: &str, value: f64) {
        self.diagnostics.insert(name.to_string(), value);
    }

    fn dispatch_with_pull(&mut self, client: usize, share: f64) -> Result<()> {
        self.start(client, self.version, Action::DispatchWithPull { client, share })
    }

    fn aggregate(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.actions.push(Action::Aggregate { updates: self.pending.len() });
            self.pending.clear();
            self.pending_updates.clear();
            self.version += 1;
        }
        Ok(())
    }

    fn set_timer(&mut self, at: Tick, tag: u64) {
        self.actions.push(Action::Timer { at: at.max(self.now), tag });
    }

    fn stop(&mut self) {
        self.stopped = true;
        self.actions.push(Action::Stop);
    }
}
