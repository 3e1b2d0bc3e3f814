//! Packs: several runs in one process whose client cohorts train together.
//!
//! On a GPU one run's cohort is a handful of small kernels per step, so the step's latency is
//! launch overhead and the device idles; runs side by side in separate processes queue their
//! tiny kernels behind each other. A pack instead merges the cohorts of its runs: the runs of
//! a grid that train the same model on the same data with the same trainer configuration
//! (typically every method of one dataset column) stack their clients into one cohort, so
//! one step's kernels do the work of every run at nearly the latency of one.
//!
//! Each run of a pack runs on a thread of its own. A run that needs the result of a deferred
//! job submits its cohorts to the pack and waits; when *every* run still going waits, the
//! waiting thread that completed the set trains all submitted cohorts, merged where they are
//! compatible (see [`RunPack`]), and hands each run its outcomes. Evaluations of the global
//! models go the same way: those of one model and test set run as one cohort, so a column of
//! runs evaluates in a few hundred launches rather than a few hundred per run. The set of
//! cohorts computed together therefore depends only on each run's own (deterministic)
//! progress, never on thread timing, so a pack's metrics are a deterministic function of its runs' configurations. (As
//! with cohorts of different sizes, a run's results may differ in their last bits between a
//! pack and a run alone.)

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::eval::{self, evaluate_cohort};
use crate::data::{Dataset, FederatedData};
use crate::error::{EngineError, JobFailure, Result};
use crate::model::Model;
use crate::params::ParamSet;
use crate::trainer::{LocalTrainer, TrainJob, TrainOutcome};

type Outcomes = std::result::Result<Vec<TrainOutcome>, JobFailure>;

/// The scores of one evaluation.
type Scores = std::result::Result<eval::Scores, JobFailure>;

/// Runs built to share one process, their data and their cohorts. Build every run of the pack
/// with [`crate::Experiment::build_in`] before any of them starts, then run each on a thread of
/// its own (a run waits for the others at every cohort, so runs of one pack run one after the
/// other would wait forever).
///
/// Runs share a training set when their `[dataset]` sections and seeds are equal, a model when
/// their `[model]` sections are equal too, and their cohorts merge when, in addition, their
/// `[trainer]` sections are equal and their (sub-)model shapes match.
#[derive(Default)]
pub struct RunPack {
    pack: Arc<Pack>,
    data: Mutex<BTreeMap<String, FederatedData>>,
    models: Mutex<BTreeMap<String, Arc<dyn Model>>>,
}

impl RunPack {
    /// An empty pack: runs join it as they are built with [`crate::Experiment::build_in`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The data loaded under `key`, or what `load` returns (kept for the next run).
    pub(crate) fn dataset(&self, key: String, load: impl FnOnce() -> Result<FederatedData>) -> Result<FederatedData> {
        let mut data = lock(&self.data)?;
        if let Some(d) = data.get(&key) {
            return Ok(share(d));
        }
        let d = load()?;
        data.insert(key, share(&d));
        Ok(d)
    }

    /// The model built under `key`, or what `build` returns (kept for the next run).
    pub(crate) fn model(&self, key: String, build: impl FnOnce() -> Result<Arc<dyn Model>>) -> Result<Arc<dyn Model>> {
        let mut models = lock(&self.models)?;
        if let Some(m) = models.get(&key) {
            return Ok(Arc::clone(m));
        }
        let m = build()?;
        models.insert(key, Arc::clone(&m));
        Ok(m)
    }

    /// What the pack has trained so far.
    pub fn stats(&self) -> PackStats {
        self.pack.state.lock().map(|s| s.stats).unwrap_or_default()
    }

    /// Host wall time the pack has spent computing cohorts so far (training and evaluations):
    /// against the pack's wall time, the rest is its runs' own work between them (aggregation,
    /// masks, scheduling).
    pub fn training_time(&self) -> std::time::Duration {
        self.pack.state.lock().map(|s| s.training).unwrap_or_default()
    }

    /// A new member whose cohorts merge with those of other members of equal `key`.
    pub(crate) fn join(&self, key: String) -> Result<PackMember> {
        let mut state = lock(&self.pack.state)?;
        let id = state.members;
        state.members += 1;
        state.live += 1;
        Ok(PackMember { pack: Arc::clone(&self.pack), id, key: key.into(), submitted: 0 })
    }
}

fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>> {
    m.lock().map_err(|_| EngineError::PackPoisoned.into())
}

fn share(d: &FederatedData) -> FederatedData {
    FederatedData {
        train: d.train.shallow_clone(),
        test: d.test.shallow_clone(),
        spec: d.spec.clone(),
        natural_partition: d.natural_partition.clone(),
    }
}

/// The barrier and the cohorts submitted since the last training.
#[derive(Default)]
struct Pack {
    state: Mutex<State>,
    trained: Condvar,
}

#[derive(Default)]
struct State {
    members: usize,
    /// Members still running.
    live: usize,
    /// Members blocked until the next training. A training releases them all at once (the
    /// count drops to 0 then, not as each wakes): a member that wakes first and waits again
    /// must not count those that have not woken yet as waiting.
    waiting: usize,
    /// Trainings so far: a waiting member wakes when this changes.
    generation: u64,
    pending: Vec<Entry>,
    evaluations: Vec<Evaluation>,
    stats: PackStats,
    /// Host wall time spent computing cohorts (reported, never fed back into a run).
    training: std::time::Duration,
}

/// What a pack has trained so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackStats {
    /// Cohorts its runs submitted.
    pub cohorts: u64,
    /// Computations they trained as, after merging.
    pub computations: u64,
    /// Client jobs in them.
    pub jobs: u64,
}

/// One submitted cohort.
struct Entry {
    member: usize,
    seq: u64,
    key: Arc<str>,
    /// What the jobs share ([`TrainJob::signature`]).
    signature: crate::trainer::JobSignature,
    cap: usize,
    trainer: Arc<dyn LocalTrainer>,
    jobs: Vec<TrainJob>,
    reply: Sender<Outcomes>,
}

/// One submitted evaluation of a run's global model.
struct Evaluation {
    member: usize,
    model: Arc<dyn Model>,
    params: ParamSet,
    test: Dataset,
    batch_size: usize,
    reply: Sender<Scores>,
}

impl Evaluation {
    /// Whether `other` evaluates the same architecture on the same test set the same way.
    fn joins(&self, other: &Evaluation) -> bool {
        Arc::ptr_eq(&self.model, &other.model)
            && self.test.x.data_ptr() == other.test.x.data_ptr()
            && self.batch_size == other.batch_size
            && self.params.shapes() == other.params.shapes()
    }
}

/// One run's place in a pack; leaving (on drop) releases the others from waiting for it.
pub(crate) struct PackMember {
    pack: Arc<Pack>,
    id: usize,
    key: Arc<str>,
    submitted: u64,
}

/// A submitted cohort's outcomes (or an evaluation's scores), once the pack has computed it.
pub(crate) struct PackTicket<T = Vec<TrainOutcome>> {
    pack: Arc<Pack>,
    receiver: Receiver<std::result::Result<T, JobFailure>>,
}

impl PackMember {
    /// Submits a cohort of jobs of equal shapes; at most `cap` jobs train as one computation.
    pub(crate) fn submit(&mut self, trainer: &Arc<dyn LocalTrainer>, jobs: Vec<TrainJob>, cap: usize) -> PackTicket {
        let (reply, receiver) = mpsc::channel();
        let entry = Entry {
            member: self.id,
            seq: self.submitted,
            key: Arc::clone(&self.key),
            signature: jobs.first().map(TrainJob::signature).unwrap_or_default(),
            cap,
            trainer: Arc::clone(trainer),
            jobs,
            reply,
        };
        self.submitted += 1;
        match self.pack.state.lock() {
            Ok(mut state) => state.pending.push(entry),
            // The entry drops with its sender: the ticket reports the failure.
            Err(_) => drop(entry),
        }
        PackTicket { pack: Arc::clone(&self.pack), receiver }
    }

    /// Submits an evaluation of `params` (the run's global model) on `test`.
    pub(crate) fn evaluate(
        &mut self,
        model: &Arc<dyn Model>,
        params: &ParamSet,
        test: &Dataset,
        batch_size: usize,
    ) -> PackTicket<eval::Scores> {
        let (reply, receiver) = mpsc::channel();
        let evaluation = Evaluation {
            member: self.id,
            model: Arc::clone(model),
            params: params.shallow_clone(),
            test: test.shallow_clone(),
            batch_size,
            reply,
        };
        match self.pack.state.lock() {
            Ok(mut state) => state.evaluations.push(evaluation),
            Err(_) => drop(evaluation),
        }
        PackTicket { pack: Arc::clone(&self.pack), receiver }
    }
}

impl Drop for PackMember {
    fn drop(&mut self) {
        let Ok(mut state) = self.pack.state.lock() else { return };
        state.live -= 1;
        state.pending.retain(|e| e.member != self.id);
        // A member leaves only after its own evaluations returned: none of its are pending.
        if state.live > 0 && state.waiting == state.live {
            self.pack.train(&mut state);
        }
    }
}

impl<T> PackTicket<T> {
    /// Blocks until the pack has computed the submission and returns its result (a cohort's
    /// outcomes in job order).
    pub(crate) fn wait(self) -> std::result::Result<T, JobFailure> {
        let pack = &self.pack;
        let mut state = pack.state.lock().map_err(|_| JobFailure::PackPoisoned)?;
        loop {
            match self.receiver.try_recv() {
                Ok(outcomes) => return outcomes,
                Err(TryRecvError::Disconnected) => return Err(JobFailure::PackDropped),
                Err(TryRecvError::Empty) => {}
            }
            if state.pending.is_empty() && state.evaluations.is_empty() && state.waiting + 1 == state.live {
                return Err(JobFailure::PackIdle);
            }
            state.waiting += 1;
            if state.waiting == state.live {
                pack.train(&mut state);
            } else {
                let generation = state.generation;
                while state.generation == generation {
                    state = pack.trained.wait(state).map_err(|_| JobFailure::PackPoisoned)?;
                }
            }
        }
    }
}

impl Pack {
    /// Trains every pending cohort (all members wait): entries in (member, submission) order,
    /// those of equal key and signature (shapes, frozen tensors) merged and cut into parts of at most the smallest cap;
    /// then runs the pending evaluations, those of one model and test set as one cohort.
    fn train(&self, state: &mut State) {
        let mut entries = std::mem::take(&mut state.pending);
        entries.sort_by_key(|e| (e.member, e.seq));
        let mut groups: Vec<Vec<Entry>> = Vec::new();
        for e in entries {
            match groups.iter_mut().find(|g| g[0].key == e.key && g[0].signature == e.signature && e.trainer.batches())
            {
                Some(g) => g.push(e),
                None => groups.push(vec![e]),
            }
        }
        let started = wall_clock();
        for group in groups {
            state.stats.cohorts += group.len() as u64;
            state.stats.jobs += group.iter().map(|e| e.jobs.len() as u64).sum::<u64>();
            state.stats.computations += train_group(group);
        }
        // In member order, so that what evaluates together never depends on thread timing.
        let mut evaluations = std::mem::take(&mut state.evaluations);
        evaluations.sort_by_key(|e| e.member);
        while !evaluations.is_empty() {
            let first = evaluations.remove(0);
            let joined: Vec<Evaluation> = evaluations.extract_if(.., |e| first.joins(e)).collect();
            let group: Vec<Evaluation> = std::iter::once(first).chain(joined).collect();
            evaluate_group(group);
        }
        state.training += started.elapsed();
        state.waiting = 0;
        state.generation += 1;
        self.trained.notify_all();
    }
}

#[allow(clippy::disallowed_methods)] // reason: reported by RunPack::training_time, never fed back into a run
fn wall_clock() -> std::time::Instant {
    std::time::Instant::now()
}

/// Evaluates one group of joining evaluations as a cohort and replies to each with its scores.
fn evaluate_group(group: Vec<Evaluation>) {
    let first = &group[0];
    let params: Vec<&ParamSet> = group.iter().map(|e| &e.params).collect();
    let scored =
        catch_unwind(AssertUnwindSafe(|| evaluate_cohort(&*first.model, &params, &first.test, first.batch_size)));
    match scored {
        Ok(scores) => {
            for (e, s) in group.iter().zip(scores) {
                let _ = e.reply.send(Ok(s));
            }
        }
        Err(_) => {
            for e in &group {
                let _ = e.reply.send(Err(JobFailure::EvaluationPanicked));
            }
        }
    }
}

/// Trains one group of merged entries and replies to each with its own outcomes; returns the
/// number of computations it took.
fn train_group(mut group: Vec<Entry>) -> u64 {
    let cap = group.iter().map(|e| e.cap).min().unwrap_or(1).max(1);
    let sizes: Vec<usize> = group.iter().map(|e| e.jobs.len()).collect();
    let jobs: Vec<TrainJob> = group.iter_mut().flat_map(|e| std::mem::take(&mut e.jobs)).collect();
    let trainer = Arc::clone(&group[0].trainer);
    let total = jobs.len();
    let parts = total.div_ceil(cap);
    let mut rest = jobs.into_iter();
    let mut outcomes: Outcomes = Ok(Vec::with_capacity(total));
    for p in 0..parts {
        let size = total / parts + usize::from(p < total % parts);
        let part: Vec<TrainJob> = rest.by_ref().take(size).collect();
        let trained = catch_unwind(AssertUnwindSafe(|| trainer.train_cohort(part)));
        outcomes = match (outcomes, trained) {
            (Ok(mut all), Ok(Ok(out))) => {
                all.extend(out);
                Ok(all)
            }
            (Err(e), _) => Err(e),
            (_, Ok(Err(e))) => Err(JobFailure::Training(Arc::new(e))),
            (_, Err(_)) => Err(JobFailure::MergedCohortPanicked),
        };
    }
    match outcomes {
        Ok(all) => {
            let mut all = all.into_iter();
            for (e, n) in group.iter().zip(sizes) {
                let _ = e.reply.send(Ok(all.by_ref().take(n).collect()));
            }
        }
        Err(failure) => {
            for e in &group {
                let _ = e.reply.send(Err(failure.clone()));
            }
        }
    }
    parts as u64
}
