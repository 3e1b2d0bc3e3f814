//! The simulation state: clients, jobs in flight, pending updates, the event queue and the
//! global model, and what happens to them (dispatch, pulls, cohorts, commits, aggregation,
//! evaluation). The run loop in [`super::Simulation`] and the scheduler's side in
//! [`super::host`] act on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tch::Tensor;

use super::BYTES_PER_PARAM;
use super::allocator;
use super::cohort::{self, CohortSlot};
use super::eval::{Scores, evaluate, evaluate_shared};
use super::pack::PackMember;
use super::personal;
use super::pool::{JobHandle, WorkerPool};
use super::record::{ClientStats, EvalConfig, EvalRecord, Observer, RejectedUpdate, RunConfig, Summary};
use super::utilization::Utilization;
use crate::aggregator::{AggregateCtx, Aggregator, UpdateStaleness};
use crate::clock::{EventQueue, Tick, seconds, ticks};
use crate::data::Dataset;
use crate::error::{EngineError, JobFailure, Result};
use crate::job_memory::{JobMemory, job_memory};
use crate::learned_width::{WidthBudget, budget_sized};
use crate::mask::{Mask, TensorRole};
use crate::mask_policy::{MaskCtx, MaskPolicy};
use crate::model::Model;
use crate::params::ParamSet;
use crate::profile::{DeviceProfile, DevicesConfig, JobCost, Phases, Pricing, train_flops};
use crate::rng::{self, Rng, TensorNoise, tag};
use crate::scheduler::JobStart;
use crate::split::SplitPoint;
use crate::staleness::{StalenessCtx, StalenessFn};
use crate::trainer::{BudgetUse, LocalTrainer, PullInfo, TrainJob, TrainOutcome, TrainSession};
use crate::update::ClientUpdate;

/// The longest job, in virtual seconds: a thousandth of what the tick counter holds, so that a
/// duration it cannot hold never piles every later event at its end.
const JOB_SECONDS_LIMIT: f64 = u64::MAX as f64 / crate::clock::TICKS_PER_SECOND / 1e3;

/// Fails when `client`'s job of `seconds` would outlast [`JOB_SECONDS_LIMIT`] (NaN included).
fn within_clock(client: usize, seconds: f64) -> Result<()> {
    if seconds <= JOB_SECONDS_LIMIT {
        Ok(())
    } else {
        Err(EngineError::JobDuration { client, seconds, limit: JOB_SECONDS_LIMIT }.into())
    }
}

/// The run log's note when the server rejects a client update.
const NON_FINITE_UPDATES: &str = "client updates with NaN or infinite values were rejected before aggregation \
     (counted in metrics.csv's rejected_updates; the learning rate may be too large)";

#[derive(Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(super) enum Event {
    Arrival(u64),
    /// A job asks for the newest global model mid-training.
    Pull(u64),
    Timer(u64),
    Eval,
}

pub(super) type SessionHandle = JobHandle<Result<Box<dyn TrainSession>>>;

/// Where a pulling job stands with its pull.
pub(super) enum PullStage {
    /// It has not asked yet.
    Waiting,
    /// It asked and received this newer model, or nothing newer.
    Done(Option<(ParamSet, PullInfo)>),
}

/// Where a job's training stands.
pub(super) enum Work {
    /// Waiting in `World::deferred` to join a cohort.
    Deferred,
    /// Training (or trained) as job `i` of a cohort.
    Cohort(Arc<CohortSlot>, usize),
    /// A job split into segments (it pulls mid-training): a session of its own.
    Session(SessionHandle),
}

pub(super) struct InFlight {
    pub(super) client: usize,
    pub(super) base_version: u64,
    pub(super) base: ParamSet,
    pub(super) mask: Mask,
    pub(super) choice: Option<usize>,
    /// The (sub-)model the job started from, to compute its delta.
    pub(super) start: ParamSet,
    pub(super) dispatched_at: Tick,
    /// Jittered phase durations of the job.
    pub(super) phases: Phases,
    /// Share of the work done before the pull, if the job pulls.
    pub(super) pull_share: Option<f64>,
    pub(super) pulled_version: Option<u64>,
    /// The model it pulled (its mask's part), kept for checkpoints.
    pub(super) pulled: Option<ParamSet>,
    /// The delay its trainer reads ([`TrainJob::delay`]).
    pub(super) delay: f64,
    pub(super) multiplicity: u32,
    pub(super) transfer_bytes: f64,
    /// Bytes relayed each way across a split during training.
    pub(super) relay_bytes: f64,
    pub(super) work: Work,
}

pub(super) struct Client {
    /// The samples it trains on, indices into the training set.
    pub(super) indices: Tensor,
    pub(super) samples: usize,
    /// Its held-out test split (`[eval] client_test_share`), gathered from the training set.
    pub(super) test: Option<Dataset>,
    /// Jobs of the client in flight.
    pub(super) running: u32,
    /// Jobs dispatched and their virtual seconds (client fairness).
    pub(super) stats: ClientStats,
}

/// Counters accumulated between two evaluations.
#[derive(Default)]
pub(super) struct Window {
    pub(super) train_loss_sum: f64,
    pub(super) updates: u64,
    pub(super) staleness_sum: u64,
    pub(super) staleness_max: u64,
    pub(super) utilization: Utilization,
}

/// The simulation state the scheduler acts on.
pub(crate) struct World {
    pub(super) model: Arc<dyn Model>,
    pub(super) trainer: Arc<dyn LocalTrainer>,
    pub(super) aggregator: Box<dyn Aggregator>,
    pub(super) mask_policy: Box<dyn MaskPolicy>,
    pub(super) staleness: Box<dyn StalenessFn>,
    pub(super) train: Dataset,
    pub(super) test: Dataset,
    pub(super) clients: Vec<Client>,
    /// What the trainer keeps of each client between its jobs ([`TrainOutcome::state`]), on
    /// the host: the last job to arrive sets it.
    pub(super) client_state: Vec<Option<ParamSet>>,
    /// The mask of each client's last arrived job, its personalised model's shape (kept for
    /// clients with a test split only).
    pub(super) last_mask: Vec<Option<Mask>>,
    /// Each client's device, in id order.
    pub(super) profiles: Vec<DeviceProfile>,
    pub(super) devices: DevicesConfig,
    /// The trainer's client/server cut, resolved against the model.
    pub(super) split: Option<SplitPoint>,
    pub(super) eval: EvalConfig,
    pub(super) run: RunConfig,
    pub(super) seed: u64,
    pub(super) shapes: Vec<Vec<i64>>,
    pub(super) pool: WorkerPool,
    /// Most jobs in a cohort (1: no batching).
    pub(super) cohort_cap: usize,
    /// Dispatched jobs waiting to train, in dispatch order.
    pub(super) deferred: Vec<(u64, TrainJob)>,
    pub(super) pack: Option<PackMember>,
    /// Notes for the run log, each said once.
    pub(super) notes: BTreeSet<String>,
    pub(super) unsaid: Vec<String>,
    pub(super) sched_rng: Rng,
    pub(super) mask_rng: Rng,
    pub(super) now: Tick,
    pub(super) version: u64,
    pub(super) global: ParamSet,
    pub(super) queue: EventQueue<Event>,
    pub(super) in_flight: BTreeMap<u64, InFlight>,
    pub(super) pending: Vec<ClientUpdate>,
    pub(super) jobs: u64,
    pub(super) updates_aggregated: u64,
    /// Client updates rejected for NaN or infinite values, in all and since the last finite one.
    pub(super) rejected_updates: u64,
    pub(super) rejected_in_a_row: u64,
    pub(super) bytes_up: f64,
    pub(super) bytes_down: f64,
    pub(super) window: Window,
    /// Resource utilisation over every aggregation of the run.
    pub(super) utilization: Utilization,
    pub(super) staleness_histogram: BTreeMap<u64, u64>,
    pub(super) last_eval_version: Option<u64>,
    /// Evaluations so far, and whether the latest one ran the test set.
    pub(super) evaluations: u64,
    pub(super) last_tested: bool,
    /// Aggregations the run will make if nothing stops it early (the last one is tested).
    pub(super) planned: Option<u64>,
    pub(super) stopped: bool,
    pub(super) records: Vec<EvalRecord>,
    /// Diagnostics the scheduler published, logged at each evaluation.
    pub(super) sched_diagnostics: BTreeMap<String, f64>,
}

impl World {
    /// The mask policy's mask for a job of `client` (with the scheduler's `choice`, if any).
    pub(super) fn mask_for(&mut self, client: usize, choice: Option<usize>, rng: &mut Rng) -> Result<Mask> {
        if client >= self.clients.len() {
            return Err(EngineError::UnknownClient { client, have: self.clients.len() }.into());
        }
        let choices = self.mask_policy.choices();
        if let Some(j) = choice.filter(|&j| j >= choices) {
            return Err(EngineError::MaskChoice { choice: j, choices }.into());
        }
        let mask = self.mask_policy.mask(&mut MaskCtx {
            client,
            profiles: &self.profiles,
            version: self.version,
            choice,
            structure: self.model.structure(),
            global: &self.global,
            client_state: self.client_state[client].as_ref(),
            rng,
        })?;
        if let Mask::Structured(s) = &mask {
            s.validate(&self.shapes)?;
        }
        Ok(mask)
    }

    /// Bytes each way and training FLOPs of a job of `client` under `mask`; under a split,
    /// the client's part of them, the relay across the cut and the server's seconds.
    /// A frozen tensor costs its forward pass alone (a third of a trained one's), a dropped
    /// one nothing; the client downloads what it holds and uploads what it trains.
    pub(super) fn job_cost(&self, client: usize, mask: &Mask) -> JobCost {
        // A client that chooses its width trains (and uploads) what its budget keeps, after
        // training its scores over the whole held sub-model in a mask round; one that prunes
        // while training trains the whole held sub-model and uploads what its budget keeps; one
        // that quantises, or decides per input what to compute, trains and uploads the whole
        // held sub-model.
        let whole = || (mask.shallow_clone(), mask.shallow_clone(), 0.0);
        let (trained, uploaded_mask, mask_passes) = match (self.width_trained(mask), self.trainer.budget_use()) {
            (None, _) | (Some(_), BudgetUse::Quantisation | BudgetUse::Decisions) => whole(),
            (Some((sized, _)), BudgetUse::Pruning) => (mask.shallow_clone(), sized, 0.0),
            (Some((sized, budget)), BudgetUse::LearnedMask) if budget.learn => {
                (sized.shallow_clone(), sized, self.trainer.width_mask_passes(self.clients[client].samples))
            }
            (Some((sized, _)), BudgetUse::LearnedMask) => (sized.shallow_clone(), sized, 0.0),
        };
        let forward = |m: &Mask| -> Vec<f64> {
            let kept = m.kept_per_tensor(&self.shapes);
            match self.devices.pricing {
                Pricing::Compute => self.forward_flops_per_tensor(m, &kept),
                Pricing::MaskShare => {
                    let share = mask_share(&kept, &self.shapes);
                    self.model.flops_per_tensor(&self.shapes).iter().map(|f| f * share).collect()
                }
            }
        };
        let uploaded = uploaded_mask.uploaded_per_tensor(&self.shapes);
        let held = mask.held_per_tensor(&self.shapes);
        let flops = forward(&trained);
        let (samples, batch) = (self.clients[client].samples, self.profiles[client].batch_size);
        let passes = self.trainer.sample_passes(samples, batch);
        let client_tensors = self.split.map_or(uploaded.len(), |s| s.client_tensors);
        let bytes = |per_tensor: &[i64]| per_tensor[..client_tensors].iter().sum::<i64>() as f64 * BYTES_PER_PARAM;
        let score_flops = match mask_passes > 0.0 {
            true => train_flops(forward(mask)[..client_tensors].iter().sum(), mask_passes),
            false => 0.0,
        };
        let mut cost = JobCost {
            down_bytes: bytes(&held),
            train_flops: train_flops(flops[..client_tensors].iter().sum(), passes) + score_flops,
            up_bytes: bytes(&uploaded),
            ..JobCost::default()
        };
        if let Some(split) = self.split {
            cost.relay_bytes = passes * split.activation_floats * BYTES_PER_PARAM;
            cost.server_s = train_flops(flops[client_tensors..].iter().sum(), passes) / split.server_flops_per_s
                + self.trainer.steps(samples, batch) * split.round_trip_s;
        }
        cost
    }

    /// For a mask inside which the client chooses its width, what it trains (sized by its
    /// budget, [`budget_sized`]) and the budget.
    fn width_trained<'m>(&self, mask: &'m Mask) -> Option<(Mask, &'m WidthBudget)> {
        let (Mask::Structured(s), Some(budget)) = (mask, mask.width_budget()) else { return None };
        Some((Mask::Structured(budget_sized(self.model.structure(), s, budget)), budget))
    }

    /// A job's memory estimate ([`crate::job_memory()`]). A client that chooses its width
    /// needs the larger of its score epochs (the whole held window forward and backward, no
    /// weight gradients or optimizer states) and its weight epochs (the budget-sized sub-model);
    /// one that prunes or quantises while training, the whole held sub-model's.
    fn job_memory_estimate(&self, client: usize, mask: &Mask) -> JobMemory {
        let batch = self.profiles[client]
            .batch_size
            .or(self.trainer.batch_size())
            .unwrap_or(1)
            .min(self.clients[client].samples.max(1));
        let states = self.trainer.optimizer_states();
        let estimate = |m: &Mask| job_memory(self.model.as_ref(), &self.shapes, m, states, batch);
        match self.width_trained(mask) {
            Some((sized, budget)) if self.trainer.budget_use() == BudgetUse::LearnedMask => {
                let weights = estimate(&sized);
                let whole = estimate(mask);
                let scores = JobMemory { gradients: 0.0, optimizer: 0.0, ..whole };
                if budget.learn && scores.total() > weights.total() { scores } else { weights }
            }
            _ => estimate(mask),
        }
    }

    /// Fails when the job's memory estimate exceeds the client's device memory.
    fn check_job_memory(&self, client: usize, needed: &JobMemory) -> Result<()> {
        let available = self.profiles[client].memory_bytes;
        if needed.total() > available {
            return Err(
                EngineError::JobMemory { client, needed: needed.describe(), available_gb: available / 1e9 }.into()
            );
        }
        Ok(())
    }

    /// Sets each client's throughput so that its full job (the whole model, all its samples)
    /// computes for `sessions[client]` seconds (`[devices] session_s`).
    pub(super) fn set_session_times(&mut self, sessions: &[f64]) {
        for (c, &seconds) in sessions.iter().enumerate() {
            let flops = self.job_cost(c, &Mask::Full).train_flops;
            self.profiles[c].flops_per_s = flops / seconds;
        }
    }

    /// Fails, before the run starts, when some client's job on the whole model (without
    /// jitter) would last longer than the virtual clock can count: a device too slow for the
    /// clock is a config error, not one found at its first job. (Jitter can still stretch a job
    /// past the limit; [`World::dispatch`] checks every job.)
    pub(super) fn check_job_durations(&self) -> Result<()> {
        (0..self.clients.len()).try_for_each(|client| {
            within_clock(client, self.profiles[client].phases(&self.job_cost(client, &Mask::Full)).total_s())
        })
    }

    pub(super) fn dispatch(
        &mut self,
        client: usize,
        pull_share: Option<f64>,
        choice: Option<usize>,
        how: JobStart,
    ) -> Result<()> {
        if self.clients.get(client).is_some_and(|c| c.running > 0) && !how.concurrent {
            return Err(EngineError::ClientBusy { client }.into());
        }
        let (base_version, base) = how.from.unwrap_or_else(|| (self.version, self.global.shallow_clone()));
        let mut mask_rng = self.mask_rng.clone();
        let mask = self.mask_for(client, choice, &mut mask_rng)?;
        self.mask_rng = mask_rng;
        let memory = self.job_memory_estimate(client, &mask);
        self.check_job_memory(client, &memory)?;
        let job = self.jobs;
        self.jobs += 1;
        let start = mask.extract(&base);
        let (train_job, jitter) = self.train_job(client, job, &start, &mask, base_version, how.delay);
        let cost = self.job_cost(client, &mask);
        let bytes = cost.up_bytes;
        let phases = self.profiles[client].phases(&cost).scaled(jitter);
        within_clock(client, phases.total_s())?;
        let work = match pull_share {
            Some(share) => {
                if self.cohort_cap > 1 {
                    self.note("jobs that pull the global model mid-training train alone (cohorts of one)");
                }
                Work::Session(self.session(train_job, share, PullStage::Waiting))
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
                pulled: None,
                delay: how.delay,
                multiplicity: how.multiplicity.max(1),
                transfer_bytes: bytes,
                relay_bytes: cost.relay_bytes,
                work,
            },
        );
        // Jobs alone wait for the end of the event that dispatched them (see `flush`).
        if self.cohort_cap > 1 && self.deferred.len() >= self.cohort_cap {
            self.flush();
        }
        self.bytes_down += bytes + cost.relay_bytes;
        let c = &mut self.clients[client];
        c.running += 1;
        c.stats.jobs += 1;
        c.stats.busy_s += how.wait_s + phases.total_s();
        c.stats.peak_memory_bytes = c.stats.peak_memory_bytes.max(memory.total());
        Ok(())
    }

    /// The training inputs of job `job` of `client`, starting from `start` (the mask's part
    /// of the model of version `version`), and the job's duration jitter, the first draw of
    /// its stream: a deterministic function of the run seed, the client and the job number,
    /// so that a resumed run rebuilds the jobs it had in flight exactly.
    pub(super) fn train_job(
        &self,
        client: usize,
        job: u64,
        start: &ParamSet,
        mask: &Mask,
        version: u64,
        delay: f64,
    ) -> (TrainJob, f64) {
        let mut job_rng = rng::stream(self.seed, &[tag::JOB, client as u64, job]);
        let jitter = self.devices.jitter_factor(&mut job_rng);
        let grad_mask = match mask {
            Mask::Elementwise(ms) => Some(ms.iter().map(|m| m.as_ref().map(Tensor::shallow_clone)).collect()),
            _ => None,
        };
        let state = self.client_state[client].as_ref();
        let job = TrainJob {
            model: Arc::clone(&self.model),
            params: personal::own_copies(start, mask, self.global.names(), state),
            grad_mask,
            frozen: mask.frozen(self.shapes.len()),
            data: self.train.shallow_clone(),
            indices: self.clients[client].indices.shallow_clone(),
            rng: job_rng,
            noise: TensorNoise::new(rng::derive_seed(self.seed, &[tag::JOB, client as u64, job, 1])),
            version,
            delay,
            width: mask.width_budget().cloned(),
            state: personal::trainer_state(state).map(|s| s.to_device(self.global.tensors()[0].device())),
            batch_size: self.profiles[client].batch_size,
        };
        (job, jitter)
    }

    /// Trains `job` alone in a session of its own up to `share` of its work, on a worker; a
    /// resumed job whose pull had already happened (`PullStage::Done`) merges what it received,
    /// if anything, and trains to the end.
    pub(super) fn session(&self, job: TrainJob, share: f64, stage: PullStage) -> SessionHandle {
        let trainer = Arc::clone(&self.trainer);
        self.pool.submit(move || -> Result<Box<dyn TrainSession>> {
            let mut session = trainer.start(vec![job])?;
            session.run_until(share)?;
            if let PullStage::Done(pulled) = stage {
                if let Some((params, info)) = pulled {
                    session.merge_pulled(&params, info)?;
                }
                session.run_until(1.0)?;
            }
            Ok(session)
        })
    }

    /// A job's mid-training request: the global model current *now* is what it receives (if
    /// newer than its start, after a second download); the rest of its work then resumes.
    pub(super) fn pull(&mut self, job: u64) -> Result<()> {
        let mut f = self.in_flight.remove(&job).expect("every pull has an in-flight job");
        let Work::Session(handle) = f.work else { unreachable!("pulling jobs train in sessions of their own") };
        let session =
            handle.wait().map_err(|e| EngineError::JobFailed { job, client: f.client, source: Box::new(e) })??;
        let share = f.pull_share.expect("pull events come from pulling jobs");
        let pulled = (self.version > f.base_version).then(|| {
            let info = PullInfo { base_version: f.base_version, pulled_version: self.version };
            (f.mask.extract(&self.global), info)
        });
        let mut resume_at = self.now;
        if let Some((params, _)) = &pulled {
            resume_at += ticks(f.phases.down_s);
            self.bytes_down += f.transfer_bytes;
            f.pulled_version = Some(self.version);
            f.pulled = Some(params.shallow_clone());
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

    /// Forward FLOPs per sample under `mask`, per model tensor, weighted for training: the
    /// sub-model's for structured masks (0 for a dropped tensor, a third for a frozen one,
    /// which trains nothing: [`train_flops`] triples the sum), each tensor's share scaled by
    /// its kept density for elementwise masks.
    pub(super) fn forward_flops_per_tensor(&self, mask: &Mask, kept: &[i64]) -> Vec<f64> {
        match mask {
            Mask::Elementwise(_) => self
                .model
                .flops_per_tensor(&self.shapes)
                .iter()
                .zip(kept.iter().zip(&self.shapes))
                .map(|(f, (k, s))| f * *k as f64 / s.iter().product::<i64>() as f64)
                .collect(),
            _ => {
                let sub = self.model.flops_per_tensor(&mask.sub_shapes(&self.shapes));
                let mut flops = vec![0.0; self.shapes.len()];
                for (t, f) in mask.held(self.shapes.len()).into_iter().zip(sub) {
                    flops[t] = if mask.role(t) == TensorRole::Freeze { f / 3.0 } else { f };
                }
                flops
            }
        }
    }

    /// Says `note` in the run log, once per run.
    pub(super) fn note(&mut self, note: &'static str) {
        if self.notes.insert(note.to_string()) {
            self.unsaid.push(note.to_string());
        }
    }

    /// Starts training every deferred job, in cohorts (see [`cohort`]), the cohort with the
    /// most samples first: the workers then finish a burst of jobs together instead of one
    /// waiting on a large job started last. What a cohort computes does not depend on when it
    /// starts; a pack keeps dispatch order, which decides what its runs stack together.
    pub(super) fn flush(&mut self) {
        let deferred = std::mem::take(&mut self.deferred);
        let signatures: Vec<(u64, _)> = deferred.iter().map(|(id, j)| (*id, j.signature())).collect();
        let mut cohorts = cohort::cohorts(signatures.iter().map(|(id, s)| (*id, s)), self.cohort_cap);
        let mut jobs: BTreeMap<u64, TrainJob> = deferred.into_iter().collect();
        if self.pack.is_none() {
            let samples = |ids: &Vec<u64>| ids.iter().map(|id| jobs[id].indices.size()[0]).max().unwrap_or(0);
            cohorts.sort_by_cached_key(|ids| std::cmp::Reverse(samples(ids)));
        }
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
    pub(super) fn commit(&mut self, job: u64) -> Result<usize> {
        if self.in_flight.get(&job).is_some_and(|f| matches!(f.work, Work::Deferred)) {
            self.flush();
        }
        let mut f = self.in_flight.remove(&job).expect("every arrival has an in-flight job");
        let fail = |e: JobFailure| EngineError::JobFailed { job, client: f.client, source: Box::new(e) };
        let out: TrainOutcome = match f.work {
            Work::Cohort(slot, i) => slot.take(i).map_err(fail)?,
            Work::Session(handle) => {
                handle.wait().map_err(fail)??.finish()?.pop().ok_or_else(|| fail(JobFailure::NoOutcome { index: 0 }))?
            }
            Work::Deferred => unreachable!("flushed above"),
        };
        let mut delta = f.mask.scatter_named(&out.params.sub(&f.start), self.global.names(), &self.shapes);
        // The mask the job trained under, whose shapes its outcome has.
        let held = f.mask.shallow_clone();
        // A job that pruned while training covers the units it kept, no others.
        if let (Some(kept), Mask::Structured(structured)) = (&out.kept_units, &held) {
            let narrowed = structured.narrowed(self.model.structure(), kept);
            narrowed.validate(&self.shapes)?;
            let narrowed = Mask::Structured(narrowed);
            delta = narrowed.scatter_named(&narrowed.extract(&delta), self.global.names(), &self.shapes);
            f.mask = narrowed;
        }
        let (train_loss, lr_sum, pull_merge) = (out.mean_loss, out.lr_sum, out.pull_merge);
        if self.clients[f.client].test.is_some() {
            self.last_mask[f.client] = Some(f.mask.shallow_clone());
        }
        let previous = self.client_state[f.client].take();
        self.client_state[f.client] =
            personal::kept_state(previous, out.state, &out.params, &held, self.global.names());
        // The trained model is freed here: give its pages back.
        drop(out.params);
        allocator::release_free_memory();
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
            train_loss,
            lr_sum,
            pull_merge,
            dispatched_at: f.dispatched_at,
            arrived_at: self.now,
        });
        Ok(f.client)
    }

    pub(super) fn aggregate(&mut self, observer: &mut dyn Observer) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let arrived = std::mem::take(&mut self.pending);
        let finite = ParamSet::all_finite(&arrived.iter().map(|u| &u.delta).collect::<Vec<_>>());
        let mut updates = Vec::with_capacity(arrived.len());
        for (u, ok) in arrived.into_iter().zip(finite) {
            if ok {
                updates.push(u);
                self.rejected_in_a_row = 0;
                continue;
            }
            self.rejected_updates += 1;
            self.rejected_in_a_row += 1;
            self.note(NON_FINITE_UPDATES);
            observer.on_rejected(&RejectedUpdate {
                client: u.client,
                job: u.job,
                base_version: u.base_version,
                version: self.version + 1,
                virtual_time_s: seconds(self.now),
                train_loss: u.train_loss,
            });
        }
        if self.rejected_in_a_row >= self.clients.len() as u64 {
            return Err(EngineError::UpdatesRejected { in_a_row: self.rejected_in_a_row, version: self.version }.into());
        }
        let staleness: Vec<UpdateStaleness> = updates
            .iter()
            .map(|u| {
                let versions = self.version - u.base_version;
                let secs = seconds(u.arrived_at - u.dispatched_at);
                let weight =
                    self.staleness.weight(&StalenessCtx { versions, seconds: secs, update: u, global: &self.global });
                UpdateStaleness { versions, seconds: secs, weight }
            })
            .collect();
        // With every update rejected the aggregation still happens, as a no-op: schedulers
        // count aggregations, and the aggregator never sees an empty list.
        let next = if updates.is_empty() {
            self.global.shallow_clone()
        } else {
            self.aggregator.aggregate(
                &self.global,
                &updates,
                &AggregateCtx {
                    version: self.version,
                    num_clients: self.clients.len(),
                    total_samples: self.clients.iter().map(|c| c.samples).sum(),
                    now: self.now,
                    staleness: &staleness,
                    structure: Some(self.model.structure()),
                },
            )?
        };
        if next.shapes() != self.shapes {
            return Err(EngineError::AggregatedShapes.into());
        }
        if !updates.is_empty() && !ParamSet::all_finite(&[&next])[0] {
            return Err(EngineError::Diverged {
                version: self.version + 1,
                last_finite: self.version,
                rejected: self.rejected_updates,
            }
            .into());
        }
        self.global = next;
        self.version += 1;
        self.updates_aggregated += updates.len() as u64;
        let times: Vec<f64> = updates.iter().map(|u| seconds(u.arrived_at - u.dispatched_at)).collect();
        self.window.utilization.add(&times);
        self.utilization.add(&times);
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
        if self.run.max_aggregations.is_some_and(|m| self.version >= m)
            || self.run.max_updates.is_some_and(|m| self.updates_aggregated >= m)
        {
            self.stopped = true;
        }
        // The round's updates are freed here: give their pages back.
        drop(updates);
        allocator::release_free_memory();
        Ok(())
    }

    pub(super) fn evaluate(&mut self, observer: &mut dyn Observer) -> Result<()> {
        let test =
            self.evaluations.is_multiple_of(self.eval.test_every) || self.planned.is_some_and(|p| self.version >= p);
        self.evaluations += 1;
        self.last_tested = test;
        let scores = if test {
            match &mut self.pack {
                Some(pack) => pack
                    .evaluate(&self.model, &self.global, &self.test, self.eval.batch_size)
                    .wait()
                    .map_err(|source| EngineError::Evaluation { source })?,
                None => evaluate_shared(&self.pool, &self.model, &self.global, &self.test, self.eval.batch_size),
            }
        } else {
            Scores::NONE
        };
        let accuracy = scores.accuracy;
        let clients = if test { self.client_scores() } else { Scores::NONE };
        let w = std::mem::take(&mut self.window);
        let per_update = |x: f64| if w.updates == 0 { f64::NAN } else { x / w.updates as f64 };
        let record = EvalRecord {
            virtual_time_s: seconds(self.now),
            version: self.version,
            updates: self.updates_aggregated,
            accuracy,
            loss: scores.loss,
            top5: scores.top5,
            macro_f1: scores.macro_f1,
            resource_utilization: w.utilization.mean(),
            client_accuracy: clients.accuracy,
            client_top5: clients.top5,
            client_macro_f1: clients.macro_f1,
            train_loss: per_update(w.train_loss_sum),
            mean_staleness: per_update(w.staleness_sum as f64),
            max_staleness: w.staleness_max,
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
            rejected_updates: self.rejected_updates,
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

    /// The clients' personalised models on their own test splits, weighted by the clients'
    /// data sizes (NaN scores without splits): each client's last job's sub-model of the
    /// current global model with its own personal tensors (the global model for a client that
    /// has not trained yet).
    fn client_scores(&self) -> Scores {
        let (mut sum, mut weight) = ([0.0; 4], 0.0);
        for (c, client) in self.clients.iter().enumerate() {
            let Some(test) = &client.test else { continue };
            let mask = self.last_mask[c].as_ref().map_or(Mask::Full, Mask::shallow_clone);
            let start = mask.extract(&self.global);
            let params = personal::own_copies(&start, &mask, self.global.names(), self.client_state[c].as_ref());
            let s = evaluate(&*self.model, &params, test, self.eval.batch_size);
            let size = (client.samples + test.len()) as f64;
            for (total, v) in sum.iter_mut().zip([s.accuracy, s.loss, s.top5, s.macro_f1]) {
                *total += size * v;
            }
            weight += size;
        }
        if weight == 0.0 {
            return Scores::NONE;
        }
        let [accuracy, loss, top5, macro_f1] = sum.map(|v| v / weight);
        Scores { accuracy, loss, top5, macro_f1 }
    }

    pub(super) fn summary(&self) -> Summary {
        let summary = Summary::from_records(
            &self.records,
            seconds(self.now),
            self.version,
            self.updates_aggregated,
            &self.staleness_histogram,
            self.run.target_accuracy,
            self.clients.iter().map(|c| c.stats.clone()).collect(),
        );
        Summary { resource_utilization: self.utilization.mean(), ..summary }
    }
}

/// The share of the masked tensors' elements a mask keeps: over the tensors it does not keep
/// whole, kept elements / all elements; 1 when it keeps everything.
fn mask_share(kept: &[i64], shapes: &[Vec<i64>]) -> f64 {
    let (kept_sum, total) = kept
        .iter()
        .zip(shapes)
        .map(|(k, s)| (*k, s.iter().product::<i64>()))
        .filter(|(k, n)| k < n)
        .fold((0i64, 0i64), |(a, b), (k, n)| (a + k, b + n));
    if total == 0 { 1.0 } else { kept_sum as f64 / total as f64 }
}

#[cfg(test)]
mod pricing_tests {
    use super::mask_share;

    #[test]
    fn the_mask_share_counts_only_the_tensors_a_mask_cuts() {
        let shapes = vec![vec![200, 784], vec![200], vec![10, 200], vec![10]];
        // A fragment of a quarter of the output layer's weights; every other tensor whole.
        assert_eq!(mask_share(&[156_800, 200, 500, 10], &shapes), 0.25);
        assert_eq!(mask_share(&[156_800, 200, 2_000, 10], &shapes), 1.0, "a full mask");
        // Two tensors cut: their elements together.
        assert_eq!(mask_share(&[78_400, 200, 1_000, 10], &shapes), 0.5);
    }
}
