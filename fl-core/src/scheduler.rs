//! `Scheduler`: decides who trains what, when.
//!
//! It reacts to engine events (the start, an update's arrival, a timer it set) by acting on a
//! [`SchedCtx`], the [`SchedulingContext`] the engine hands it: dispatch a client, aggregate
//! the pending updates, set a timer, stop. Actions take effect immediately and in order, so a
//! scheduler that aggregates and then dispatches hands the clients the new model.
//!
//! # Design
//! It does not merge models (the aggregator does) nor choose masks (the mask policy does).
//! The context is a trait so that this module needs nothing of the engine, and a scheduler
//! can be tested against a context of the test's own.

use crate::clock::Tick;
use crate::error::Result;
use crate::params::ParamSet;
use crate::profile::DeviceProfile;
use crate::rng::Rng;
use crate::state::{StateIn, StateOut, not_resumable};
use crate::update::ClientUpdate;

/// Decides, event by event, which clients train and when the server aggregates.
///
/// # Contract
/// The engine calls the scheduler on the run's own thread, one event at a time, in virtual
/// time order: [`Scheduler::on_start`] once, after the evaluation of the initial model at
/// version 0; then [`Scheduler::on_arrival`] each time a client's update arrives (it is
/// already among the pending updates and the client is no longer busy), and
/// [`Scheduler::on_timer`] for each timer it set. In each call it acts through the context:
/// dispatching jobs, aggregating the pending updates, setting timers, stopping. An action
/// takes effect at once, at the event's virtual time.
///
/// The run ends when the scheduler calls [`SchedulingContext::stop`], when nothing is left to
/// happen (no job in flight, no timer; periodic evaluations alone do not keep a run going), or
/// at a limit of the `[run]` section (aggregations, virtual time, accuracy). Updates still
/// pending then are never aggregated.
///
/// A scheduler must draw randomness from [`SchedulingContext::rng`] only and never read the
/// host clock, so that a run is a deterministic function of its configuration and seed. It may
/// not dispatch a client that is busy unless [`JobStart::concurrent`] says so (the dispatch
/// fails); an error it returns ends the run.
///
/// # Example
/// Synchronous rounds: every client trains, the server aggregates when the last has arrived.
/// ```
/// use fl_core::{Result, SchedCtx, Scheduler};
///
/// struct EveryClient {
///     rounds: u64,
/// }
///
/// impl Scheduler for EveryClient {
///     fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
///         (0..ctx.num_clients()).try_for_each(|c| ctx.dispatch(c))
///     }
///
///     fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
///         if ctx.in_flight() == 0 {
///             ctx.aggregate()?;
///             if ctx.version() < self.rounds {
///                 return self.on_start(ctx);
///             }
///             ctx.stop();
///         }
///         Ok(())
///     }
///
///     fn planned_aggregations(&self) -> Option<u64> {
///         Some(self.rounds)
///     }
/// }
/// # let _: Box<dyn Scheduler> = Box::new(EveryClient { rounds: 3 });
/// ```
pub trait Scheduler: Send {
    /// The run starts (the global model is at version 0): dispatch the first jobs.
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()>;

    /// `client`'s update has arrived and joined the pending updates.
    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()>;

    /// A timer set with [`SchedulingContext::set_timer`] fired.
    fn on_timer(&mut self, _ctx: &mut SchedCtx, _tag: u64) -> Result<()> {
        Ok(())
    }

    /// Aggregations this scheduler will perform if nothing else stops the run (for progress).
    fn planned_aggregations(&self) -> Option<u64> {
        None
    }

    /// The most jobs it keeps in flight at once among `clients` clients: the engine sizes the
    /// run's memory from it before the run starts (each job holds the model it started from).
    /// The default, every client, is the safe bound.
    fn max_in_flight(&self, clients: usize) -> usize {
        clients
    }

    /// Saves what it remembers between events for a checkpoint ([`crate::state`]). The
    /// default refuses, and runs with this scheduler then write no checkpoints: a scheduler with state
    /// saves it all, one without implements this as `Ok(())`.
    fn save_state(&self, _out: &mut StateOut) -> Result<()> {
        Err(not_resumable("scheduler"))
    }

    /// Restores what [`Scheduler::save_state`] saved, on a scheduler freshly built from the same config.
    fn load_state(&mut self, _saved: &StateIn) -> Result<()> {
        Err(not_resumable("scheduler"))
    }
}

/// The context a [`Scheduler`] acts on, as its methods take it: `ctx: &mut SchedCtx`.
pub type SchedCtx<'a> = dyn SchedulingContext + 'a;

/// What a scheduler reads of the run and does to it; the engine implements it.
pub trait SchedulingContext {
    /// The virtual time, in ticks.
    fn now(&self) -> Tick;

    /// The virtual time, in seconds.
    fn now_s(&self) -> f64;

    /// Current global model version (number of aggregations so far).
    fn version(&self) -> u64;

    /// Clients in the federation; client ids are `0..num_clients()`.
    fn num_clients(&self) -> usize;

    /// Whether `client` has a job in flight.
    fn is_busy(&self, client: usize) -> bool;

    /// Clients not training right now, in id order.
    fn idle_clients(&self) -> Vec<usize>;

    /// Jobs dispatched and not yet arrived.
    fn in_flight(&self) -> usize;

    /// Updates that arrived and were not aggregated yet: (client, base version).
    fn pending(&self) -> Vec<(usize, u64)>;

    /// Number of pending updates (the length of [`SchedulingContext::pending`], without
    /// building it).
    fn pending_len(&self) -> usize;

    /// `client`'s device: its speeds and link.
    fn profile(&self, client: usize) -> &DeviceProfile;

    /// `client`'s training samples.
    fn samples(&self, client: usize) -> usize;

    /// The current global model.
    fn global(&self) -> &ParamSet;

    /// The scheduler's own random stream.
    fn rng(&mut self) -> &mut Rng;

    /// Starts a job for an idle client with the current global model.
    fn dispatch(&mut self, client: usize) -> Result<()>;

    /// Starts a job for an idle client as `start` says (a stale or own start model, a wait
    /// before it starts, a delay for the trainer).
    fn dispatch_job(&mut self, client: usize, start: JobStart) -> Result<()>;

    /// Updates that arrived and were not aggregated yet, in arrival order.
    fn pending_updates(&self) -> &[ClientUpdate];

    /// A freshly initialised model (the model's initialisation drawn from the run's stream
    /// for `key`), on the run's device: a client's own independent start.
    fn fresh_model(&self, key: u64) -> ParamSet;

    /// Alternatives the mask policy offers (Fed-RAA's fragments); 0 if it decides alone.
    fn mask_choices(&self) -> usize;

    /// Like [`SchedulingContext::dispatch`], with the mask policy's alternative `choice`.
    fn dispatch_choice(&mut self, client: usize, choice: usize) -> Result<()>;

    /// Virtual seconds a job of `client` would take under the mask of `choice`, by the cost
    /// model the engine times jobs with, without jitter.
    fn job_duration_s(&mut self, client: usize, choice: Option<usize>) -> Result<f64>;

    /// Sets a scalar diagnostic that every later evaluation logs (per-fragment counts).
    fn set_diagnostic(&mut self, name: &str, value: f64);

    /// Starts a job that, after `share` (in (0, 1)) of its local work, asks for the newest
    /// global model and, if it is newer than its start, downloads it, merges it and goes on.
    fn dispatch_with_pull(&mut self, client: usize, share: f64) -> Result<()>;

    /// Merges every pending update into the global model (no-op without pending updates).
    fn aggregate(&mut self) -> Result<()>;

    /// Calls `on_timer(tag)` at virtual time `at` (not before now).
    fn set_timer(&mut self, at: Tick, tag: u64);

    /// Ends the run after the current event.
    fn stop(&mut self);
}

/// How a job starts, beyond [`SchedulingContext::dispatch`]'s defaults (the current global model, no
/// wait, no delay for the trainer).
#[derive(Default)]
pub struct JobStart {
    /// Train from this model, tagged with its version, instead of the current global model:
    /// a stale start from the scheduler's history of global models (the update's staleness is
    /// then the versions since), or a client's own persistent model.
    pub from: Option<(u64, ParamSet)>,
    /// Virtual seconds the client waits before its download starts (a network or
    /// availability delay drawn by the scheduler).
    pub wait_s: f64,
    /// The delay d the trainer's delay-aware learning rate reads ([`crate::trainer::TrainJob::delay`]).
    pub delay: f64,
    /// Draws the job stands for ([`ClientUpdate::multiplicity`]); 0 is taken as 1.
    pub multiplicity: u32,
    /// Allow the job although the client is already training: a second draw of the same
    /// client in one round, as sampling with replacement makes, trains as a job of its own.
    pub concurrent: bool,
}
