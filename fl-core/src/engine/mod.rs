//! The discrete-event simulation engine.
//!
//! Virtual time advances from event to event (arrivals, timers, evaluations) in (time,
//! sequence) order. Compute is decoupled from the clock: when a client is dispatched its inputs
//! are fixed, so its training can run on the worker pool concurrently with other jobs, alone
//! at once or later with other jobs as one cohort (see [`cohort`]); its result is *committed*
//! when the virtual clock reaches its arrival time. Every random draw comes from a stream
//! derived from the run seed, so the same configuration and seed give the same metrics whatever
//! the number of workers.

mod allocator;
mod checkpoint;
pub mod cohort;
mod eval;
mod host;
pub mod memory;
pub mod pack;
mod personal;
mod pool;
mod record;
pub mod utilization;
mod world;

use std::collections::BTreeMap;
use std::sync::Arc;

use tch::{Device, Tensor};

pub use allocator::heap_bytes_in_use;
pub use checkpoint::Checkpoint;
pub use eval::{Scores, evaluate};
pub use pool::{JobHandle, WorkerPool};
pub use record::{ClientStats, EvalConfig, EvalRecord, Observer, RejectedUpdate, RunConfig, Summary};

use crate::aggregator::Aggregator;
use crate::clock::{EventQueue, ticks};
use crate::data::Dataset;
use crate::error::{EngineError, Error, InvalidKey, Result};
use crate::mask_policy::MaskPolicy;
use crate::model::Model;
use crate::params::ParamSet;
use crate::profile::DevicesConfig;
use crate::rng::{self, tag};
use crate::scheduler::Scheduler;
use crate::staleness::StalenessFn;
use crate::trainer::LocalTrainer;
use host::Host;
use pack::PackMember;
use utilization::Utilization;
use world::{Client, Event, Window, World};

/// Bytes per transferred parameter (float32).
pub const BYTES_PER_PARAM: f64 = 4.0;

/// Everything a simulation is built from.
pub struct Setup {
    /// The architecture every client trains.
    pub model: Arc<dyn Model>,
    /// The clients' local optimisation.
    pub trainer: Arc<dyn LocalTrainer>,
    /// Who trains when, and when the server aggregates.
    pub scheduler: Box<dyn Scheduler>,
    /// How updates merge into the global model.
    pub aggregator: Box<dyn Aggregator>,
    /// Which part of the model each job trains.
    pub mask_policy: Box<dyn MaskPolicy>,
    /// The weight of a stale update.
    pub staleness: Box<dyn StalenessFn>,
    /// The training set, already on `device`; clients hold indices into it.
    pub train: Dataset,
    /// The test set the global model is evaluated on, already on `device`.
    pub test: Dataset,
    /// Each client's sample indices into `train`.
    pub partition: Vec<Vec<i64>>,
    /// The distributions client device profiles are drawn from, and the per-job jitter.
    pub devices: DevicesConfig,
    /// When and how the global model is evaluated.
    pub eval: EvalConfig,
    /// When the run stops regardless of the scheduler, and how jobs batch into cohorts.
    pub run: RunConfig,
    /// The run seed every random stream derives from.
    pub seed: u64,
    /// The compute device of the model, the data and training.
    pub device: Device,
    /// Worker threads training jobs (at least 1 is used); results do not depend on it.
    pub workers: usize,
}

/// A configured run, ready to start.
pub struct Simulation {
    scheduler: Box<dyn Scheduler>,
    world: World,
    device: Device,
    /// Restored from a checkpoint: the start (first evaluation, first dispatches) is past.
    resumed: bool,
    /// The version of the last checkpoint, and whether checkpoints are off (a component
    /// cannot save its state, or the run is one of a pack).
    checkpointed: u64,
    checkpoints_off: bool,
}

impl Simulation {
    /// A run of `setup`: draws the device profiles and initialises the global model (version
    /// 0) from the seed. Fails if there are no clients, a client has no samples, or the
    /// model's initial shapes or the trainer's split do not fit the model's structure.
    pub fn new(setup: Setup) -> Result<Self> {
        Self::with_pack(setup, None)
    }

    /// A run whose cohorts train together with those of the other runs of its pack.
    pub(crate) fn with_pack(setup: Setup, pack: Option<PackMember>) -> Result<Self> {
        let Setup {
            model,
            trainer,
            scheduler,
            aggregator,
            mask_policy,
            staleness,
            train,
            test,
            partition,
            devices,
            eval,
            run,
            seed,
            device,
            workers,
        } = setup;
        if partition.is_empty() {
            return Err(EngineError::NoClients.into());
        }
        let threads_per_job = run.job_threads();
        if pack.is_some() && threads_per_job != 1 {
            return Err(Error::Key(
                InvalidKey::new("threads_per_job", "a pack trains its runs' cohorts on one thread: leave it out")
                    .under("run"),
            ));
        }
        let cohorts = run.batching.cohorts_on(device);
        let cohort_cap = if cohorts && trainer.batches() { run.max_cohort.unwrap_or(usize::MAX) } else { 1 };
        let in_flight = scheduler.max_in_flight(partition.len());
        let plan = memory::Plan {
            in_flight,
            // The workers' cohorts train at the same moment.
            training: workers.max(1).saturating_mul(cohort_cap),
            client_copies: trainer.client_state_copies() * partition.len() as u64,
            aggregator_copies: aggregator.model_copies(partition.len()),
        };
        memory::check(model.structure().elements(), plan, run.memory_budget_gb)?;
        let memory_note = plan.describe(model.structure().elements());
        if let Some(c) = partition.iter().position(Vec::is_empty) {
            return Err(EngineError::EmptyClient { client: c }.into());
        }
        let mut profile_rng = rng::stream(seed, &[tag::PROFILES]);
        let profiles = devices.draw(partition.len(), &mut profile_rng)?;
        let sessions = devices.draw_sessions(partition.len(), &mut profile_rng);
        let clients = partition
            .iter()
            .enumerate()
            .map(|(c, idx)| {
                let mut split_rng = rng::stream(seed, &[tag::CLIENT_TEST, c as u64]);
                let (trains_on, held_out) = client_split(idx, eval.client_test_share, &mut split_rng);
                Client {
                    indices: Tensor::from_slice(&trains_on).to_device(device),
                    samples: trains_on.len(),
                    test: held_out.map(|held| {
                        let held = Tensor::from_slice(&held).to_device(device);
                        Dataset { x: train.x.index_select(0, &held), y: train.y.index_select(0, &held) }
                    }),
                    running: 0,
                    stats: ClientStats::default(),
                }
            })
            .collect();
        let global = model.init(&mut rng::stream(seed, &[tag::MODEL_INIT])).to_device(device);
        let shapes = model.structure().shapes();
        if global.shapes() != shapes {
            return Err(EngineError::InitShapes.into());
        }
        let mut unsaid = vec![memory_note.as_str()];
        if cohorts && !trainer.batches() {
            unsaid.push("the trainer cannot batch clients: every job trains alone (a cohort of one)");
        }
        let split = trainer
            .split()
            .map(|s| s.resolve(model.structure()))
            .transpose()
            .map_err(|e| Error::Key(e.under("trainer")))?;
        let mut world = World {
            model,
            trainer,
            aggregator,
            mask_policy,
            staleness,
            train,
            test,
            client_state: partition.iter().map(|_| None).collect(),
            last_mask: partition.iter().map(|_| None).collect(),
            clients,
            profiles,
            devices,
            split,
            eval,
            run,
            seed,
            shapes,
            pool: WorkerPool::with_job_threads(workers, threads_per_job),
            cohort_cap,
            deferred: Vec::new(),
            pack,
            notes: unsaid.iter().map(|n| n.to_string()).collect(),
            unsaid: unsaid.iter().map(|n| n.to_string()).collect(),
            sched_rng: rng::stream(seed, &[tag::SCHEDULER]),
            mask_rng: rng::stream(seed, &[tag::MASK]),
            now: 0,
            version: 0,
            global,
            queue: EventQueue::default(),
            in_flight: BTreeMap::new(),
            pending: Vec::new(),
            jobs: 0,
            updates_aggregated: 0,
            rejected_updates: 0,
            rejected_in_a_row: 0,
            bytes_up: 0.0,
            bytes_down: 0.0,
            window: Window::default(),
            utilization: Utilization::default(),
            staleness_histogram: BTreeMap::new(),
            last_eval_version: None,
            evaluations: 0,
            last_tested: false,
            planned: None,
            stopped: false,
            records: Vec::new(),
            sched_diagnostics: BTreeMap::new(),
        };
        if let Some(sessions) = sessions {
            world.set_session_times(&sessions);
        }
        world.check_job_durations()?;
        Ok(Simulation { scheduler, world, device, resumed: false, checkpointed: 0, checkpoints_off: false })
    }

    /// Aggregations the run will make if nothing stops it early: the smaller of the
    /// scheduler's plan and `[run] max_aggregations`, whichever are known (for progress).
    pub fn planned_aggregations(&self) -> Option<u64> {
        match (self.scheduler.planned_aggregations(), self.world.run.max_aggregations) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The current global model (after [`Simulation::run`], the final one).
    pub fn global(&self) -> &ParamSet {
        &self.world.global
    }

    /// The global model's version: the number of aggregations so far.
    pub fn version(&self) -> u64 {
        self.world.version
    }

    /// Puts this run, freshly built from the configuration and seed `checkpoint` was saved
    /// under, where the checkpoint left it; [`Simulation::run`] then goes on from there,
    /// reporting only the evaluations that follow. Fails if the checkpoint is unreadable, comes
    /// from another setup, or a component refuses its state.
    pub fn restore(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        if self.resumed || self.world.jobs > 0 {
            return Err(Error::component("checkpoint", "restores only into a run that has not started"));
        }
        checkpoint::restore(&mut self.world, &mut *self.scheduler, checkpoint, self.device)?;
        self.resumed = true;
        self.checkpointed = checkpoint.version();
        Ok(())
    }

    /// Saves a checkpoint for `observer` if it wants one and the run has aggregated since the
    /// last; a component that cannot save its state turns checkpoints off, with a note.
    fn checkpoint(&mut self, observer: &mut dyn Observer) -> Result<()> {
        let (version, now) = (self.world.version, crate::clock::seconds(self.world.now));
        if self.checkpoints_off || version == self.checkpointed || !observer.wants_checkpoint(version, now) {
            return Ok(());
        }
        if self.world.pack.is_some() {
            self.checkpoints_off = true;
            observer.on_note("runs of a pack write no checkpoints: an interrupted pack starts again");
            return Ok(());
        }
        for note in self.world.unsaid.drain(..) {
            observer.on_note(&note);
        }
        match checkpoint::save(&self.world, &*self.scheduler) {
            Ok(cp) => {
                self.checkpointed = self.world.version;
                observer.on_checkpoint(&cp)
            }
            Err(Error::NotResumable { component }) => {
                self.checkpoints_off = true;
                observer.on_note(&format!(
                    "no checkpoints: the {component} keeps state it cannot save, so this run cannot resume"
                ));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Runs to the end, reporting each evaluation to `observer`. A run of a pack leaves it at
    /// the end, failed or not, so that the others no longer wait for it.
    pub fn run(&mut self, observer: &mut dyn Observer) -> Result<Summary> {
        let summary = self.run_events(observer);
        self.world.pack = None;
        // Notes made on the way to an error (a rejected update before a divergence) still say.
        for note in self.world.unsaid.drain(..) {
            observer.on_note(&note);
        }
        summary
    }

    fn run_events(&mut self, observer: &mut dyn Observer) -> Result<Summary> {
        // As the workers: the evaluation's batches score alike on either.
        pool::pin_intra_op_threads(self.world.run.job_threads());
        let planned = self.planned_aggregations();
        let w = &mut self.world;
        w.planned = planned;
        if !self.resumed {
            if let Some(every) = w.eval.every_virtual_s {
                w.queue.push(ticks(every), Event::Eval);
            }
            w.evaluate(observer)?;
            self.scheduler.on_start(&mut Host { world: &mut self.world, observer })?;
        }
        while !self.world.stopped {
            // Jobs that train alone start once the event that dispatched them is handled, all
            // together, so that the largest start first.
            if self.world.cohort_cap == 1 {
                self.world.flush();
            }
            self.checkpoint(observer)?;
            for note in self.world.unsaid.drain(..) {
                observer.on_note(&note);
            }
            let Some((at, event)) = self.world.queue.pop() else { break };
            if let Some(limit) = self.world.run.max_virtual_time_s.map(ticks) {
                if at > limit {
                    self.world.now = limit;
                    break;
                }
            }
            self.world.now = at;
            match event {
                Event::Arrival(job) => {
                    let client = self.world.commit(job)?;
                    self.scheduler.on_arrival(&mut Host { world: &mut self.world, observer }, client)?;
                }
                Event::Pull(job) => self.world.pull(job)?,
                Event::Timer(tag) => {
                    self.scheduler.on_timer(&mut Host { world: &mut self.world, observer }, tag)?;
                }
                Event::Eval => {
                    let w = &mut self.world;
                    w.evaluate(observer)?;
                    // Evaluations alone do not keep a run alive: with nothing else to
                    // happen the simulation is over.
                    if !w.queue.is_empty() {
                        let every = w.eval.every_virtual_s.expect("eval events need a cadence");
                        w.queue.push(at + ticks(every), Event::Eval);
                    }
                }
            }
        }
        let w = &mut self.world;
        if w.last_eval_version != Some(w.version) || !w.last_tested {
            w.planned = Some(w.version);
            w.evaluate(observer)?;
        }
        Ok(w.summary())
    }
}

/// A client's samples `idx` split into the ones it trains on and its held-out test split of
/// `share` of them (rounded, at least one of each; none below two samples), drawn from `rng`;
/// both keep the samples' order.
fn client_split(idx: &[i64], share: f64, rng: &mut rng::Rng) -> (Vec<i64>, Option<Vec<i64>>) {
    use rand::seq::SliceRandom;
    let n = idx.len();
    if share <= 0.0 || n < 2 {
        return (idx.to_vec(), None);
    }
    let held = ((share * n as f64).round() as usize).clamp(1, n - 1);
    let mut positions: Vec<usize> = (0..n).collect();
    positions.shuffle(rng);
    let mut test = vec![false; n];
    for &p in &positions[..held] {
        test[p] = true;
    }
    let pick = |want: bool| idx.iter().zip(&test).filter(|(_, t)| **t == want).map(|(i, _)| *i).collect();
    (pick(false), Some(pick(true)))
}

#[cfg(test)]
mod client_split_tests {
    use super::*;

    #[test]
    fn a_clients_split_holds_out_its_share_in_order_and_is_reproducible() {
        let idx: Vec<i64> = (100..110).collect();
        let (train, test) = client_split(&idx, 0.2, &mut rng::stream(1, &[2]));
        let test = test.unwrap();
        assert_eq!((train.len(), test.len()), (8, 2));
        assert!(train.windows(2).all(|w| w[0] < w[1]) && test.windows(2).all(|w| w[0] < w[1]), "order kept");
        let mut all = [train.clone(), test.clone()].concat();
        all.sort_unstable();
        assert_eq!(all, idx, "every sample in exactly one part");
        assert_eq!(client_split(&idx, 0.2, &mut rng::stream(1, &[2])), (train, Some(test)));
        assert_eq!(client_split(&idx, 0.0, &mut rng::stream(1, &[2])), (idx.clone(), None));
        assert_eq!(client_split(&[7], 0.5, &mut rng::stream(1, &[2])), (vec![7], None), "one sample: no split");
        assert_eq!(client_split(&idx[..3], 0.01, &mut rng::stream(1, &[2])).1.unwrap().len(), 1, "at least one");
    }
}
