//! The discrete-event simulation engine.
//!
//! Virtual time advances from event to event (arrivals, timers, evaluations) in (time,
//! sequence) order. Compute is decoupled from the clock: when a client is dispatched its inputs
//! are fixed, so its training can run on the worker pool concurrently with other jobs, alone
//! at once or later with other jobs as one cohort (see [`cohort`]); its result is *committed*
//! when the virtual clock reaches its arrival time. Every random draw comes from a stream
//! derived from the run seed, so the same configuration and seed give the same metrics whatever
//! the number of workers.

pub mod cohort;
mod eval;
pub mod pack;
mod pool;
mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tch::{Device, Tensor};

pub use eval::evaluate;
pub use pool::{JobHandle, WorkerPool};
pub use record::{ClientStats, EvalConfig, EvalRecord, Observer, RunConfig, Summary};

use crate::aggregator::{AggregateCtx, Aggregator, Staleness};
use crate::clock::{EventQueue, Tick, seconds, ticks};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::mask::Mask;
use crate::mask_policy::{MaskCtx, MaskPolicy};
use crate::model::Model;
use crate::params::ParamSet;
use crate::profile::{DeviceProfile, DevicesConfig, JobCost, Phases, train_flops};
use crate::rng::{self, Rng, TensorNoise, tag};
use crate::scheduler::{JobStart, Scheduler, SchedulingContext};
use crate::split::SplitPoint;
use crate::staleness::{StalenessCtx, StalenessFn};
use crate::trainer::{LocalTrainer, PullInfo, TrainJob, TrainOutcome, TrainSession};
use crate::update::ClientUpdate;
use cohort::CohortSlot;
use pack::PackMember;

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

enum Event {
    Arrival(u64),
    /// A job asks for the newest global model mid-training.
    Pull(u64),
    Timer(u64),
    Eval,
}

type SessionHandle = JobHandle<Result<Box<dyn TrainSession>>>;

/// Where a job's training stands.
enum Work {
    /// Waiting in `World::deferred` to join a cohort.
    Deferred,
    /// Training (or trained) as job `i` of a cohort.
    Cohort(Arc<CohortSlot>, usize),
    /// A job split into segments (it pulls mid-training): a session of its own.
    Session(SessionHandle),
}

struct InFlight {
    client: usize,
    base_version: u64,
    base: ParamSet,
    mask: Mask,
    choice: Option<usize>,
    /// The (sub-)model the job started from, to compute its delta.
    start: ParamSet,
    dispatched_at: Tick,
    /// Jittered phase durations of the job.
    phases: Phases,
    /// Share of the work done before the pull, if the job pulls.
    pull_share: Option<f64>,
    pulled_version: Option<u64>,
    multiplicity: u32,
    transfer_bytes: f64,
    /// Bytes relayed each way across a split during training.
    relay_bytes: f64,
    work: Work,
}

struct Client {
    indices: Tensor,
    samples: usize,
    /// Jobs of the client in flight.
    running: u32,
    /// Jobs dispatched and their virtual seconds (client fairness).
    stats: ClientStats,
}

/// Counters accumulated between two evaluations.
#[derive(Default)]
struct Window {
    train_loss_sum: f64,
    updates: u64,
    staleness_sum: u64,
    staleness_max: u64,
}

/// The simulation state the scheduler acts on.
pub(crate) struct World {
    model: Arc<dyn Model>,
    trainer: Arc<dyn LocalTrainer>,
    aggregator: Box<dyn Aggregator>,
    mask_policy: Box<dyn MaskPolicy>,
    staleness: Box<dyn StalenessFn>,
    train: Dataset,
    test: Dataset,
    clients: Vec<Client>,
    /// Each client's device, in id order.
    profiles: Vec<DeviceProfile>,
    devices: DevicesConfig,
    /// The trainer's client/server cut, resolved against the model.
    split: Option<SplitPoint>,
    eval: EvalConfig,
    run: RunConfig,
    seed: u64,
    shapes: Vec<Vec<i64>>,
    pool: WorkerPool,
    /// Most jobs in a cohort (1: no batching).
    cohort_cap: usize,
    /// Dispatched jobs waiting to train, in dispatch order.
    deferred: Vec<(u64, TrainJob)>,
    pack: Option<PackMember>,
    /// Notes for the run log, each said once.
    notes: BTreeSet<&'static str>,
    unsaid: Vec<&'static str>,
    sched_rng: Rng,
    mask_rng: Rng,
    now: Tick,
    version: u64,
    global: ParamSet,
    queue: EventQueue<Event>,
    in_flight: BTreeMap<u64, InFlight>,
    pending: Vec<ClientUpdate>,
    jobs: u64,
    updates_aggregated: u64,
    bytes_up: f64,
    bytes_down: f64,
    window: Window,
    staleness_histogram: BTreeMap<u64, u64>,
    last_eval_version: Option<u64>,
    /// Evaluations so far, and whether the latest one ran the test set.
    evaluations: u64,
    last_tested: bool,
    /// Aggregations the run will make if nothing stops it early (the last one is tested).
    planned: Option<u64>,
    stopped: bool,
    records: Vec<EvalRecord>,
    /// Diagnostics the scheduler published, logged at each evaluation.
    sched_diagnostics: BTreeMap<String, f64>,
}

/// The engine's side of [`SchedulingContext`]: the run and the observer of its evaluations.
struct Host<'a> {
    world: &'a mut World,
    observer: &'a mut dyn Observer,
}

impl SchedulingContext for Host<'_> {
    fn now(&self) -> Tick {
        self.world.now
    }

    fn now_s(&self) -> f64 {
        seconds(self.world.now)
    }

    fn version(&self) -> u64 {
        self.world.version
    }

    fn num_clients(&self) -> usize {
        self.world.clients.len()
    }

    fn is_busy(&self, client: usize) -> bool {
        self.world.clients[client].running > 0
    }

    fn idle_clients(&self) -> Vec<usize> {
        (0..self.world.clients.len()).filter(|&c| self.world.clients[c].running == 0).collect()
    }

    fn in_flight(&self) -> usize {
        self.world.in_flight.len()
    }

    fn pending(&self) -> Vec<(usize, u64)> {
        self.world.pending.iter().map(|u| (u.client, u.base_version)).collect()
    }

    fn pending_len(&self) -> usize {
        self.world.pending.len()
    }

    fn profile(&self, client: usize) -> &DeviceProfile {
        &self.world.profiles[client]
    }

    fn samples(&self, client: usize) -> usize {
        self.world.clients[client].samples
    }

    fn global(&self) -> &ParamSet {
        &self.world.global
    }

    fn rng(&mut self) -> &mut Rng {
        &mut self.world.sched_rng
    }

    fn dispatch(&mut self, client: usize) -> Result<()> {
        self.world.dispatch(client, None, None, JobStart::default())
    }

    fn dispatch_job(&mut self, client: usize, start: JobStart) -> Result<()> {
        if !(start.wait_s >= 0.0 && start.wait_s.is_finite()) {
            return Err(Error::invalid(format!("dispatch: wait_s must be finite and ≥ 0, got {}", start.wait_s)));
        }
        if let Some((version, params)) = &start.from {
            if *version > self.world.version {
                return Err(Error::invalid(format!(
                    "dispatch: start version {version} is newer than the global model's {}",
                    self.world.version
                )));
            }
            if params.shapes() != self.world.shapes {
                return Err(Error::invalid("dispatch: the start model's shapes differ from the model's"));
            }
        }
        self.world.dispatch(client, None, None, start)
    }

    fn pending_updates(&self) -> &[ClientUpdate] {
        &self.world.pending
    }

    fn fresh_model(&self, key: u64) -> ParamSet {
        let device = self.world.global.tensors().first().map_or(Device::Cpu, Tensor::device);
        self.world.model.init(&mut rng::stream(self.world.seed, &[tag::MODEL_INIT, 1, key])).to_device(device)
    }

    fn mask_choices(&self) -> usize {
        self.world.mask_policy.choices()
    }

    fn dispatch_choice(&mut self, client: usize, choice: usize) -> Result<()> {
        self.world.dispatch(client, None, Some(choice), JobStart::default())
    }

    fn job_duration_s(&mut self, client: usize, choice: Option<usize>) -> Result<f64> {
        let w = &mut *self.world;
        // Pricing must not advance the policy's stream: it draws from a copy.
        let mut rng = w.mask_rng.clone();
        let mask = w.mask_for(client, choice, &mut rng)?;
        Ok(w.profiles[client].duration_s(&w.job_cost(client, &mask)))
    }

    fn set_diagnostic(&mut self, name: &str, value: f64) {
        self.world.sched_diagnostics.insert(name.to_string(), value);
    }

    fn dispatch_with_pull(&mut self, client: usize, share: f64) -> Result<()> {
        if !(share > 0.0 && share < 1.0) {
            return Err(Error::invalid(format!("dispatch_with_pull: share must be in (0, 1), got {share}")));
        }
        self.world.dispatch(client, Some(share), None, JobStart::default())
    }

    fn aggregate(&mut self) -> Result<()> {
        self.world.aggregate(self.observer)
    }

    fn set_timer(&mut self, at: Tick, tag: u64) {
        let at = at.max(self.world.now);
        self.world.queue.push(at, Event::Timer(tag));
    }

    fn stop(&mut self) {
        self.world.stopped = true;
    }
}

/// A configured run, ready to start.
pub struct Simulation {
    scheduler: Box<dyn Scheduler>,
    world: World,
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
            return Err(Error::invalid("simulation: no clients"));
        }
        if let Some(c) = partition.iter().position(Vec::is_empty) {
            return Err(Error::invalid(format!("simulation: client {c} has no training samples")));
        }
        let profiles = devices.draw(partition.len(), &mut rng::stream(seed, &[tag::PROFILES]))?;
        let clients = partition
            .iter()
            .map(|idx| Client {
                indices: Tensor::from_slice(idx).to_device(device),
                samples: idx.len(),
                running: 0,
                stats: ClientStats::default(),
            })
            .collect();
        let global = model.init(&mut rng::stream(seed, &[tag::MODEL_INIT])).to_device(device);
        let shapes = model.structure().shapes();
        if global.shapes() != shapes {
            return Err(Error::invalid("model init: parameter shapes differ from the model's structure"));
        }
        let cohorts = run.batching.cohorts_on(device);
        let cohort_cap = if cohorts && trainer.batches() { run.max_cohort.unwrap_or(usize::MAX) } else { 1 };
        let mut unsaid = Vec::new();
        if cohorts && !trainer.batches() {
            unsaid.push("the trainer cannot batch clients: every job trains alone (a cohort of one)");
        }
        let split = trainer
            .split()
            .map(|s| s.resolve(model.structure()))
            .transpose()
            .map_err(|e| Error::invalid(format!("trainer.{e}")))?;
        let world = World {
            model,
            trainer,
            aggregator,
            mask_policy,
            staleness,
            train,
            test,
            clients,
            profiles,
            devices,
            split,
            eval,
            run,
            seed,
            shapes,
            pool: WorkerPool::new(workers),
            cohort_cap,
            deferred: Vec::new(),
            pack,
            notes: unsaid.iter().copied().collect(),
            unsaid,
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
            bytes_up: 0.0,
            bytes_down: 0.0,
            window: Window::default(),
            staleness_histogram: BTreeMap::new(),
            last_eval_version: None,
            evaluations: 0,
            last_tested: false,
            planned: None,
            stopped: false,
            records: Vec::new(),
            sched_diagnostics: BTreeMap::new(),
        };
        Ok(Simulation { scheduler, world })
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

    /// Runs to the end, reporting each evaluation to `observer`. A run of a pack leaves it at
    /// the end, failed or not, so that the others no longer wait for it.
    pub fn run(&mut self, observer: &mut dyn Observer) -> Result<Summary> {
        let summary = self.run_events(observer);
        self.world.pack = None;
        summary
    }

    fn run_events(&mut self, observer: &mut dyn Observer) -> Result<Summary> {
        tch::set_num_threads(1);
        let planned = self.planned_aggregations();
        let w = &mut self.world;
        w.planned = planned;
        if let Some(every) = w.eval.every_virtual_s {
            w.queue.push(ticks(every), Event::Eval);
        }
        w.evaluate(observer)?;
        self.scheduler.on_start(&mut Host { world: &mut self.world, observer })?;
        while !self.world.stopped {
            for note in self.world.unsaid.drain(..) {
                observer.on_note(note);
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

impl World {
    /// The mask policy's mask for a job of `client` (with the scheduler's `choice`, if any).
    fn mask_for(&mut self, client: usize, choice: Option<usize>, rng: &mut Rng) -> Result<Mask> {
        if client >= self.clients.len() {
            return Err(Error::invalid(format!("dispatch: no client {client} (have {})", self.clients.len())));
        }
        let choices = self.mask_policy.choices();
        if let Some(j) = choice.filter(|&j| j >= choices) {
            return Err(Error::invalid(format!(
                "dispatch: mask choice {j} out of range (the mask policy offers {choices})"
            )));
        }
        let mask = self.mask_policy.mask(&mut MaskCtx {
            client,
            profiles: &self.profiles,
            version: self.version,
            choice,
            structure: self.model.structure(),
            global: &self.global,
            rng,
        })?;
        if let Mask::Structured(s) = &mask {
            s.validate(&self.shapes)?;
        }
        Ok(mask)
    }

    /// Bytes each way and training FLOPs of a job of `client` under `mask`; under a split,
    /// the client's part of them, the relay across the cut and the server's seconds.
    fn job_cost(&self, client: usize, mask: &Mask) -> JobCost {
        let kept = mask.kept_per_tensor(&self.shapes);
        let flops = self.forward_flops_per_tensor(mask, &kept);
        let samples = self.clients[client].samples;
        let passes = self.trainer.sample_passes(samples);
        let client_tensors = self.split.map_or(kept.len(), |s| s.client_tensors);
        let bytes = kept[..client_tensors].iter().sum::<i64>() as f64 * BYTES_PER_PARAM;
        let mut cost = JobCost {
            down_bytes: bytes,
            train_flops: train_flops(flops[..client_tensors].iter().sum(), passes),
            up_bytes: bytes,
            ..JobCost::default()
        };
        if let Some(split) = self.split {
            cost.relay_bytes = passes * split.activation_floats * BYTES_PER_PARAM;
            cost.server_s = train_flops(flops[client_tensors..].iter().sum(), passes) / split.server_flops_per_s
                + self.trainer.steps(samples) * split.round_trip_s;
        }
        cost
    }

    fn dispatch(&mut self, client: usize, pull_share: Option<f64>, choice: Option<usize>, how: JobStart) -> Result<()> {
        if self.clients.get(client).is_some_and(|c| c.running > 0) && !how.concurrent {
            return Err(Error::invalid(format!("dispatch: client {client} is already training")));
        }
        let (base_version, base) = how.from.unwrap_or_else(|| (self.version, self.global.shallow_clone()));
        let mut mask_rng = self.mask_rng.clone();
        let mask = self.mask_for(client, choice, &mut mask_rng)?;
        self.mask_rng = mask_rng;
        let c = &self.clients[client];
        let job = self.jobs;
        self.jobs += 1;
        let mut job_rng = rng::stream(self.seed, &[tag::JOB, client as u64, job]);
        let cost = self.job_cost(client, &mask);
        let bytes = cost.up_bytes;
        let phases = self.profiles[client].phases(&cost).scaled(self.devices.jitter_factor(&mut job_rng));
        let noise = TensorNoise::new(rng::derive_seed(self.seed, &[tag::JOB, client as u64, job, 1]));
        let start = mask.extract(&base);
        let grad_mask = match &mask {
            Mask::Elementwise(ms) => Some(ms.iter().map(|m| m.as_ref().map(Tensor::shallow_clone)).collect()),
            _ => None,
        };
        let train_job = TrainJob {
            model: Arc::clone(&self.model),
            params: start.shallow_clone(),
            grad_mask,
            data: self.train.shallow_clone(),
            indices: c.indices.shallow_clone(),
            rng: job_rng,
            noise,
            version: base_version,
            delay: how.delay,
        };
        let work = match pull_share {
            Some(share) => {
                if self.cohort_cap > 1 {
                    self.note("jobs that pull the global model mid-training train alone (cohorts of one)");
                }
                let trainer = Arc::clone(&self.trainer);
                Work::Session(self.pool.submit(move || -> Result<Box<dyn TrainSession>> {
                    let mut session = trainer.start(vec![train_job])?;
                    session.run_until(share)?;
                    Ok(session)
                }))
            }
            None => {
                self.deferred.push((job, train_job));
                Work::Deferred
            }
        };
        let (at, event) = match pull_share {
            Some(share) => (how.wait_s + phases.down_s + share * phases.compute_s, Event::Pull(job)),
            None => (how.wait_s + phases.total_s(), Event::Arrival(job)),
        };
        self.queue.push(self.now + ticks(at), event);
        self.in_flight.insert(
            job,
            InFlight {
                client,
                base_version,
                base,
                mask,
                choice,
                start,
                dispatched_at: self.now,
                phases,
                pull_share,
                pulled_version: None,
                multiplicity: how.multiplicity.max(1),
                transfer_bytes: bytes,
                relay_bytes: cost.relay_bytes,
                work,
            },
        );
        if self.deferred.len() >= self.cohort_cap {
            self.flush();
        }
        self.bytes_down += bytes + cost.relay_bytes;
        let c = &mut self.clients[client];
        c.running += 1;
        c.stats.jobs += 1;
        c.stats.busy_s += how.wait_s + phases.total_s();
        Ok(())
    }

    /// A job's mid-training request: the global model current *now* is what it receives (if
    /// newer than its start, after a second download); the rest of its work then resumes.
    fn pull(&mut self, job: u64) -> Result<()> {
        let mut f = self.in_flight.remove(&job).expect("every pull has an in-flight job");
        let Work::Session(handle) = f.work else { unreachable!("pulling jobs train in sessions of their own") };
        let session = handle.wait().map_err(|e| Error::invalid(format!("job {job} of client {}: {e}", f.client)))??;
        let share = f.pull_share.expect("pull events come from pulling jobs");
        let pulled = (self.version > f.base_version).then(|| {
            let info = PullInfo { base_version: f.base_version, pulled_version: self.version };
            (f.mask.extract(&self.global), info)
        });
        let mut resume_at = self.now;
        if pulled.is_some() {
            resume_at += ticks(f.phases.down_s);
            self.bytes_down += f.transfer_bytes;
            f.pulled_version = Some(self.version);
        }
        let mut session = session;
        f.work = Work::Session(self.pool.submit(move || -> Result<Box<dyn TrainSession>> {
            if let Some((params, info)) = pulled {
                session.merge_pulled(&params, info)?;
            }
            session.run_until(1.0)?;
            Ok(session)
        }));
        let rest = (1.0 - share) * f.phases.compute_s + f.phases.up_s;
        self.queue.push(resume_at + ticks(rest), Event::Arrival(job));
        self.in_flight.insert(job, f);
        Ok(())
    }

    /// Forward FLOPs per sample under `mask`: the sub-model's for structured masks, each
    /// tensor's share scaled by its kept density for elementwise masks.
    fn forward_flops_per_tensor(&self, mask: &Mask, kept: &[i64]) -> Vec<f64> {
        match mask {
            Mask::Elementwise(_) => self
                .model
                .flops_per_tensor(&self.shapes)
                .iter()
                .zip(kept.iter().zip(&self.shapes))
                .map(|(f, (k, s))| f * *k as f64 / s.iter().product::<i64>() as f64)
                .collect(),
            _ => self.model.flops_per_tensor(&mask.sub_shapes(&self.shapes)),
        }
    }

    /// Says `note` in the run log, once per run.
    fn note(&mut self, note: &'static str) {
        if self.notes.insert(note) {
            self.unsaid.push(note);
        }
    }

    /// Starts training every deferred job, in cohorts (see [`cohort`]).
    fn flush(&mut self) {
        let deferred = std::mem::take(&mut self.deferred);
        let shapes: Vec<(u64, Vec<Vec<i64>>)> = deferred.iter().map(|(id, j)| (*id, j.params.shapes())).collect();
        let cohorts = cohort::cohorts(shapes.iter().map(|(id, s)| (*id, s.as_slice())), self.cohort_cap);
        let mut jobs: BTreeMap<u64, TrainJob> = deferred.into_iter().collect();
        for ids in cohorts {
            let members: Vec<TrainJob> =
                ids.iter().map(|id| jobs.remove(id).expect("each deferred job once")).collect();
            let slot = Arc::new(match &mut self.pack {
                Some(pack) => CohortSlot::packed(pack.submit(&self.trainer, members, self.cohort_cap)),
                None => {
                    let trainer = Arc::clone(&self.trainer);
                    CohortSlot::new(self.pool.submit(move || trainer.train_cohort(members)))
                }
            });
            for (i, id) in ids.iter().enumerate() {
                self.in_flight.get_mut(id).expect("deferred jobs are in flight").work =
                    Work::Cohort(Arc::clone(&slot), i);
            }
        }
    }

    /// Waits for a job's result and makes it a pending update; returns its client.
    fn commit(&mut self, job: u64) -> Result<usize> {
        if self.in_flight.get(&job).is_some_and(|f| matches!(f.work, Work::Deferred)) {
            self.flush();
        }
        let f = self.in_flight.remove(&job).expect("every arrival has an in-flight job");
        let fail = |e: String| Error::invalid(format!("job {job} of client {}: {e}", f.client));
        let out: TrainOutcome = match f.work {
            Work::Cohort(slot, i) => slot.take(i).map_err(fail)?,
            Work::Session(handle) => {
                handle.wait().map_err(fail)??.finish()?.pop().ok_or_else(|| fail("no outcome".into()))?
            }
            Work::Deferred => unreachable!("flushed above"),
        };
        let delta = f.mask.scatter(&out.params.sub(&f.start), &self.shapes);
        self.clients[f.client].running -= 1;
        self.bytes_up += f.transfer_bytes + f.relay_bytes;
        self.pending.push(ClientUpdate {
            client: f.client,
            job,
            base_version: f.base_version,
            base: f.base,
            mask: f.mask,
            choice: f.choice,
            delta,
            pulled_version: f.pulled_version,
            samples: self.clients[f.client].samples,
            multiplicity: f.multiplicity,
            train_loss: out.mean_loss,
            dispatched_at: f.dispatched_at,
            arrived_at: self.now,
        });
        Ok(f.client)
    }

    fn aggregate(&mut self, observer: &mut dyn Observer) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let updates = std::mem::take(&mut self.pending);
        let staleness: Vec<Staleness> = updates
            .iter()
            .map(|u| {
                let versions = self.version - u.base_version;
                let secs = seconds(u.arrived_at - u.dispatched_at);
                let weight =
                    self.staleness.weight(&StalenessCtx { versions, seconds: secs, update: u, global: &self.global });
                Staleness { versions, seconds: secs, weight }
            })
            .collect();
        let next = self.aggregator.aggregate(
            &self.global,
            &updates,
            &AggregateCtx {
                version: self.version,
                num_clients: self.clients.len(),
                now: self.now,
                staleness: &staleness,
            },
        )?;
        if next.shapes() != self.shapes {
            return Err(Error::invalid("aggregator returned parameters of the wrong shapes"));
        }
        self.global = next;
        self.version += 1;
        self.updates_aggregated += updates.len() as u64;
        for (u, s) in updates.iter().zip(&staleness) {
            self.window.train_loss_sum += u.train_loss;
            self.window.updates += 1;
            self.window.staleness_sum += s.versions;
            self.window.staleness_max = self.window.staleness_max.max(s.versions);
            *self.staleness_histogram.entry(s.versions).or_default() += 1;
        }
        if self.eval.every_aggregations.is_some_and(|k| k > 0 && self.version.is_multiple_of(k)) {
            self.evaluate(observer)?;
        }
        if self.run.max_aggregations.is_some_and(|m| self.version >= m) {
            self.stopped = true;
        }
        Ok(())
    }

    fn evaluate(&mut self, observer: &mut dyn Observer) -> Result<()> {
        let test =
            self.evaluations.is_multiple_of(self.eval.test_every) || self.planned.is_some_and(|p| self.version >= p);
        self.evaluations += 1;
        self.last_tested = test;
        let (accuracy, loss) = if test {
            evaluate(&*self.model, &self.global, &self.test, self.eval.batch_size)
        } else {
            (f64::NAN, f64::NAN)
        };
        let w = std::mem::take(&mut self.window);
        let per_update = |x: f64| if w.updates == 0 { f64::NAN } else { x / w.updates as f64 };
        let record = EvalRecord {
            virtual_time_s: seconds(self.now),
            version: self.version,
            updates: self.updates_aggregated,
            accuracy,
            loss,
            train_loss: per_update(w.train_loss_sum),
            mean_staleness: per_update(w.staleness_sum as f64),
            max_staleness: w.staleness_max,
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
        };
        self.last_eval_version = Some(self.version);
        let mut diagnostics = self.mask_policy.diagnostics();
        diagnostics.extend(self.aggregator.diagnostics());
        diagnostics.extend(self.sched_diagnostics.iter().map(|(k, v)| (k.clone(), *v)));
        observer.on_eval(&record, &diagnostics)?;
        self.records.push(record);
        if self.run.stop_at_accuracy.is_some_and(|a| accuracy >= a) {
            self.stopped = true;
        }
        Ok(())
    }

    fn summary(&self) -> Summary {
        Summary::from_records(
            &self.records,
            seconds(self.now),
            self.version,
            self.updates_aggregated,
            &self.staleness_histogram,
            self.run.target_accuracy,
            self.clients.iter().map(|c| c.stats.clone()).collect(),
        )
    }
}
