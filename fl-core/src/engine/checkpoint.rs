//! Checkpoints: the whole state of a run between two events, so that a run stopped by a
//! crash, a kill or the end of a session resumes where it was and ends with the same metrics,
//! byte for byte, as if it had never stopped.
//!
//! A checkpoint holds the virtual clock and the event queue; the global model, its version,
//! the counters, the evaluations so far and the notes said; the scheduler's and the mask
//! policy's random streams; every job in flight with what it started from (base model, mask,
//! timings) and its training outcome where it has one; the pending updates; and the
//! scheduler's, aggregator's and mask policy's own state ([`crate::state`]). A job's training
//! is a deterministic function of its inputs and the seed, so a job without an outcome (one
//! waiting to join a cohort, one that pulls mid-training) is rebuilt on resume and trains
//! again. Parameter sets and tensors shared by several jobs are stored once.
//!
//! The engine never reads the host clock: the observer says when it wants a checkpoint and
//! writes it where it likes ([`super::Observer::wants_checkpoint`],
//! [`super::Observer::on_checkpoint`]).
//!
//! The file: the 8 bytes `FL-CKPT1`, the length of the description (u64, little-endian), the
//! description (CBOR), then every tensor's bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use super::cohort::CohortSlot;
use super::record::{ClientStats, EvalRecord};
use super::utilization::Utilization;
use super::world::{Event, InFlight, PullStage, Work, World};
use crate::clock::{EventQueue, Tick};
use crate::error::{Error, Result};
use crate::mask::{Mask, StructuredMask};
use crate::params::ParamSet;
use crate::profile::Phases;
use crate::rng::Rng;
use crate::state::{StateOut, TensorHeader, decode_tensor, encode_tensor};
use crate::trainer::{PullInfo, PullMerge, TrainOutcome};
use crate::update::ClientUpdate;

const MAGIC: &[u8; 8] = b"FL-CKPT1";

/// A run's state at one moment between events, as bytes ready to write.
pub struct Checkpoint {
    bytes: Vec<u8>,
    version: u64,
}

impl Checkpoint {
    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A checkpoint read back from a file's bytes (checked when a run restores it).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let (meta, _) = parse(&bytes)?;
        Ok(Checkpoint { version: meta.world.version, bytes })
    }

    /// The global model's version at the checkpoint.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The evaluations the run had made and reported at the checkpoint.
    pub fn evaluations(&self) -> Result<Vec<EvalRecord>> {
        Ok(parse(&self.bytes)?.0.world.records)
    }
}

/// What identifies a run's setup: a checkpoint restores only into the same.
#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Fingerprint {
    seed: u64,
    samples: Vec<usize>,
    shapes: Vec<Vec<i64>>,
    /// Each client's FLOP/s and link speeds.
    profiles: Vec<[f64; 3]>,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    fingerprint: Fingerprint,
    world: WorldState,
    scheduler: ComponentState,
    aggregator: ComponentState,
    mask_policy: ComponentState,
    sets: Vec<SetState>,
    tensors: Vec<TensorHeader>,
}

/// A component's values, and its tensors by key as ids into the checkpoint's tensors.
#[derive(Serialize, Deserialize)]
struct ComponentState {
    out: StateOut,
    tensors: BTreeMap<String, usize>,
}

/// A parameter set: its tensors' names and ids.
#[derive(Serialize, Deserialize)]
struct SetState {
    names: Vec<String>,
    tensors: Vec<usize>,
}

#[derive(Serialize, Deserialize)]
struct RngState {
    seed: [u8; 32],
    stream: u64,
    word_pos: u128,
}

impl RngState {
    fn of(rng: &Rng) -> Self {
        RngState { seed: rng.get_seed(), stream: rng.get_stream(), word_pos: rng.get_word_pos() }
    }

    fn rng(&self) -> Rng {
        let mut rng = Rng::from_seed(self.seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(self.word_pos);
        rng
    }
}

#[derive(Serialize, Deserialize)]
enum MaskState {
    Full,
    Structured(StructuredMask),
    Elementwise(Vec<Option<usize>>),
}

#[derive(Serialize, Deserialize)]
struct JobState {
    job: u64,
    client: usize,
    base_version: u64,
    base: usize,
    mask: MaskState,
    choice: Option<usize>,
    dispatched_at: Tick,
    /// Download, compute and upload seconds.
    phases: [f64; 3],
    pull_share: Option<f64>,
    pulled_version: Option<u64>,
    pulled: Option<usize>,
    delay: f64,
    multiplicity: u32,
    transfer_bytes: f64,
    relay_bytes: f64,
    /// Trained parameters (a set), mean loss and steps, for a job that trained in a cohort.
    outcome: Option<(usize, f64, usize)>,
    /// The client state that outcome hands on (a set).
    outcome_state: Option<usize>,
    /// That outcome's sum of learning rates (0 in checkpoints written before it existed).
    #[serde(default)]
    outcome_lr_sum: f64,
    #[serde(default)]
    outcome_pull_merge: Option<PullMerge>,
    /// The units that outcome kept, where its job pruned while training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome_kept_units: Option<Vec<Option<Vec<i64>>>>,
}

#[derive(Serialize, Deserialize)]
struct UpdateState {
    client: usize,
    job: u64,
    base_version: u64,
    base: usize,
    mask: MaskState,
    choice: Option<usize>,
    delta: usize,
    pulled_version: Option<u64>,
    samples: usize,
    multiplicity: u32,
    train_loss: f64,
    #[serde(default)]
    lr_sum: f64,
    #[serde(default)]
    pull_merge: Option<PullMerge>,
    dispatched_at: Tick,
    arrived_at: Tick,
}

#[derive(Serialize, Deserialize)]
struct WorldState {
    now: Tick,
    version: u64,
    global: usize,
    jobs: u64,
    updates_aggregated: u64,
    rejected_updates: u64,
    rejected_in_a_row: u64,
    bytes_up: f64,
    bytes_down: f64,
    /// The open window: train loss sum, updates, staleness sum and max.
    window: (f64, u64, u64, u64),
    /// Resource utilisation summed in the open window and over the run.
    #[serde(default)]
    utilization: (Utilization, Utilization),
    staleness_histogram: BTreeMap<u64, u64>,
    last_eval_version: Option<u64>,
    evaluations: u64,
    last_tested: bool,
    planned: Option<u64>,
    records: Vec<EvalRecord>,
    sched_diagnostics: BTreeMap<String, f64>,
    notes: Vec<String>,
    sched_rng: RngState,
    mask_rng: RngState,
    /// Each client's jobs in flight and statistics.
    clients: Vec<(u32, ClientStats)>,
    /// Each client's state kept by the trainer (a set).
    client_state: Vec<Option<usize>>,
    /// Each client's last arrived job's mask (absent in older checkpoints: none).
    #[serde(default)]
    last_mask: Vec<Option<MaskState>>,
    queue: Vec<(Tick, u64, Event)>,
    queue_seq: u64,
    in_flight: Vec<JobState>,
    /// Jobs waiting to join a cohort, in dispatch order.
    deferred: Vec<u64>,
    pending: Vec<UpdateState>,
}

/// Collects tensors and parameter sets, each stored once however many hold it.
#[derive(Default)]
struct Store {
    blob: Vec<u8>,
    tensors: Vec<TensorHeader>,
    tensor_ids: BTreeMap<(usize, Vec<i64>, Vec<i64>), usize>,
    sets: Vec<SetState>,
    set_ids: BTreeMap<Vec<usize>, usize>,
}

impl Store {
    fn tensor(&mut self, t: &Tensor) -> Result<usize> {
        // Storage address, shape and strides: the same values whoever holds the handle.
        let key = (t.data_ptr() as usize, t.size(), t.stride());
        if let Some(&id) = self.tensor_ids.get(&key) {
            return Ok(id);
        }
        self.tensors.push(encode_tensor(t, &mut self.blob)?);
        self.tensor_ids.insert(key, self.tensors.len() - 1);
        Ok(self.tensors.len() - 1)
    }

    fn set(&mut self, p: &ParamSet) -> Result<usize> {
        let tensors = p.tensors().iter().map(|t| self.tensor(t)).collect::<Result<Vec<_>>>()?;
        if let Some(&id) = self.set_ids.get(&tensors) {
            if self.sets[id].names == p.names() {
                return Ok(id);
            }
        }
        self.sets.push(SetState { names: p.names().to_vec(), tensors: tensors.clone() });
        self.set_ids.insert(tensors, self.sets.len() - 1);
        Ok(self.sets.len() - 1)
    }

    fn mask(&mut self, m: &Mask) -> Result<MaskState> {
        Ok(match m {
            Mask::Full => MaskState::Full,
            Mask::Structured(s) => MaskState::Structured(s.clone()),
            Mask::Elementwise(ms) => MaskState::Elementwise(
                ms.iter().map(|m| m.as_ref().map(|t| self.tensor(t)).transpose()).collect::<Result<_>>()?,
            ),
        })
    }

    fn component(&mut self, out: StateOut) -> Result<ComponentState> {
        let tensors = out.tensors().iter().map(|(k, t)| Ok((k.clone(), self.tensor(t)?))).collect::<Result<_>>()?;
        Ok(ComponentState { out, tensors })
    }
}

/// The tensors and sets of a checkpoint, on the run's device.
struct Loaded {
    tensors: Vec<Tensor>,
    sets: Vec<ParamSet>,
}

impl Loaded {
    fn tensor(&self, id: usize) -> Result<Tensor> {
        self.tensors.get(id).map(Tensor::shallow_clone).ok_or_else(|| corrupt(format!("no tensor {id}")))
    }

    fn set(&self, id: usize) -> Result<ParamSet> {
        self.sets.get(id).map(ParamSet::shallow_clone).ok_or_else(|| corrupt(format!("no parameter set {id}")))
    }

    fn mask(&self, m: &MaskState) -> Result<Mask> {
        Ok(match m {
            MaskState::Full => Mask::Full,
            MaskState::Structured(s) => Mask::Structured(s.clone()),
            MaskState::Elementwise(ms) => {
                Mask::Elementwise(ms.iter().map(|id| id.map(|i| self.tensor(i)).transpose()).collect::<Result<_>>()?)
            }
        })
    }

    fn component(&self, c: ComponentState) -> Result<crate::state::StateIn> {
        let tensors = c.tensors.iter().map(|(k, &id)| Ok((k.clone(), self.tensor(id)?))).collect::<Result<_>>()?;
        Ok(c.out.into_input(tensors))
    }
}

fn corrupt(what: String) -> Error {
    Error::component("checkpoint", what)
}

fn parse(bytes: &[u8]) -> Result<(Meta, &[u8])> {
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(corrupt("not a checkpoint of this version of fl (its first bytes differ)".into()));
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")) as usize;
    let meta_bytes = bytes.get(16..16 + len).ok_or_else(|| corrupt("truncated".into()))?;
    let meta: Meta = ciborium::from_reader(meta_bytes).map_err(|e| corrupt(format!("unreadable: {e}")))?;
    Ok((meta, &bytes[16 + len..]))
}

fn fingerprint(w: &World) -> Fingerprint {
    Fingerprint {
        seed: w.seed,
        samples: w.clients.iter().map(|c| c.samples).collect(),
        shapes: w.shapes.clone(),
        profiles: w.profiles.iter().map(|p| [p.flops_per_s, p.up_bytes_per_s, p.down_bytes_per_s]).collect(),
    }
}

/// The checkpoint of `w` and its components at this moment. Waits for the outcomes of the
/// jobs in flight that train in cohorts; nothing else of the run changes.
pub(super) fn save(w: &World, scheduler: &dyn crate::scheduler::Scheduler) -> Result<Checkpoint> {
    let mut parts = [StateOut::default(), StateOut::default(), StateOut::default()];
    scheduler.save_state(&mut parts[0])?;
    w.aggregator.save_state(&mut parts[1])?;
    w.mask_policy.save_state(&mut parts[2])?;
    let [sched, agg, mask] = parts;
    let mut store = Store::default();
    let (scheduler, aggregator, mask_policy) = (store.component(sched)?, store.component(agg)?, store.component(mask)?);
    let mut in_flight = Vec::with_capacity(w.in_flight.len());
    for (&job, f) in &w.in_flight {
        let (outcome, outcome_state, outcome_lr_sum, outcome_pull_merge, outcome_kept_units) = match &f.work {
            Work::Cohort(slot, i) => {
                let o = slot.outcome(*i).map_err(|e| crate::error::EngineError::JobFailed {
                    job,
                    client: f.client,
                    source: Box::new(e),
                })?;
                let state = o.state.as_ref().map(|s| store.set(s)).transpose()?;
                (Some((store.set(&o.params)?, o.mean_loss, o.steps)), state, o.lr_sum, o.pull_merge, o.kept_units)
            }
            Work::Deferred | Work::Session(_) => (None, None, 0.0, None, None),
        };
        in_flight.push(JobState {
            job,
            client: f.client,
            base_version: f.base_version,
            base: store.set(&f.base)?,
            mask: store.mask(&f.mask)?,
            choice: f.choice,
            dispatched_at: f.dispatched_at,
            phases: [f.phases.down_s, f.phases.compute_s, f.phases.up_s],
            pull_share: f.pull_share,
            pulled_version: f.pulled_version,
            pulled: f.pulled.as_ref().map(|p| store.set(p)).transpose()?,
            delay: f.delay,
            multiplicity: f.multiplicity,
            transfer_bytes: f.transfer_bytes,
            relay_bytes: f.relay_bytes,
            outcome,
            outcome_state,
            outcome_lr_sum,
            outcome_pull_merge,
            outcome_kept_units,
        });
    }
    let pending = w
        .pending
        .iter()
        .map(|u| {
            Ok(UpdateState {
                client: u.client,
                job: u.job,
                base_version: u.base_version,
                base: store.set(&u.base)?,
                mask: store.mask(&u.mask)?,
                choice: u.choice,
                delta: store.set(&u.delta)?,
                pulled_version: u.pulled_version,
                samples: u.samples,
                multiplicity: u.multiplicity,
                train_loss: u.train_loss,
                lr_sum: u.lr_sum,
                pull_merge: u.pull_merge,
                dispatched_at: u.dispatched_at,
                arrived_at: u.arrived_at,
            })
        })
        .collect::<Result<_>>()?;
    let (queue, queue_seq) = w.queue.entries();
    let world = WorldState {
        now: w.now,
        version: w.version,
        global: store.set(&w.global)?,
        jobs: w.jobs,
        updates_aggregated: w.updates_aggregated,
        rejected_updates: w.rejected_updates,
        rejected_in_a_row: w.rejected_in_a_row,
        bytes_up: w.bytes_up,
        bytes_down: w.bytes_down,
        window: (w.window.train_loss_sum, w.window.updates, w.window.staleness_sum, w.window.staleness_max),
        utilization: (w.window.utilization, w.utilization),
        staleness_histogram: w.staleness_histogram.clone(),
        last_eval_version: w.last_eval_version,
        evaluations: w.evaluations,
        last_tested: w.last_tested,
        planned: w.planned,
        records: w.records.clone(),
        sched_diagnostics: w.sched_diagnostics.clone(),
        notes: w.notes.iter().cloned().collect(),
        sched_rng: RngState::of(&w.sched_rng),
        mask_rng: RngState::of(&w.mask_rng),
        clients: w.clients.iter().map(|c| (c.running, c.stats.clone())).collect(),
        client_state: w
            .client_state
            .iter()
            .map(|s| s.as_ref().map(|s| store.set(s)).transpose())
            .collect::<Result<_>>()?,
        last_mask: w.last_mask.iter().map(|m| m.as_ref().map(|m| store.mask(m)).transpose()).collect::<Result<_>>()?,
        queue: queue.into_iter().map(|(t, s, e)| (t, s, *e)).collect(),
        queue_seq,
        in_flight,
        deferred: w.deferred.iter().map(|(id, _)| *id).collect(),
        pending,
    };
    let Store { blob, tensors, sets, .. } = store;
    let meta = Meta { fingerprint: fingerprint(w), world, scheduler, aggregator, mask_policy, sets, tensors };
    let mut head = Vec::new();
    ciborium::into_writer(&meta, &mut head).map_err(|e| corrupt(format!("writing: {e}")))?;
    let mut bytes = Vec::with_capacity(16 + head.len() + blob.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(head.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&head);
    bytes.extend_from_slice(&blob);
    Ok(Checkpoint { bytes, version: w.version })
}

/// Puts `w` (a run freshly built from the same configuration) and its components in the state
/// `checkpoint` saved; jobs in flight without an outcome start training again.
pub(super) fn restore(
    w: &mut World,
    scheduler: &mut dyn crate::scheduler::Scheduler,
    checkpoint: &Checkpoint,
    device: Device,
) -> Result<()> {
    let (meta, blob) = parse(&checkpoint.bytes)?;
    let Meta { fingerprint: saved, world: s, scheduler: sched, aggregator: agg, mask_policy: mask, sets, tensors } =
        meta;
    if saved != fingerprint(w) {
        return Err(corrupt(
            "saved by a run of another setup (seed, clients' samples, model shapes or device profiles differ)".into(),
        ));
    }
    let tensors = tensors.iter().map(|h| decode_tensor(h, blob, device)).collect::<Result<Vec<_>>>()?;
    let mut loaded = Loaded { tensors, sets: Vec::new() };
    loaded.sets = sets
        .iter()
        .map(|s| ParamSet::new(s.names.clone(), s.tensors.iter().map(|&i| loaded.tensor(i)).collect::<Result<_>>()?))
        .collect::<Result<_>>()?;
    scheduler.load_state(&loaded.component(sched)?)?;
    w.aggregator.load_state(&loaded.component(agg)?)?;
    w.mask_policy.load_state(&loaded.component(mask)?)?;

    w.now = s.now;
    w.version = s.version;
    w.global = loaded.set(s.global)?;
    w.jobs = s.jobs;
    w.updates_aggregated = s.updates_aggregated;
    w.rejected_updates = s.rejected_updates;
    w.rejected_in_a_row = s.rejected_in_a_row;
    w.bytes_up = s.bytes_up;
    w.bytes_down = s.bytes_down;
    (w.window.train_loss_sum, w.window.updates, w.window.staleness_sum, w.window.staleness_max) = s.window;
    (w.window.utilization, w.utilization) = s.utilization;
    w.staleness_histogram = s.staleness_histogram;
    w.last_eval_version = s.last_eval_version;
    w.evaluations = s.evaluations;
    w.last_tested = s.last_tested;
    w.planned = s.planned;
    w.records = s.records;
    w.sched_diagnostics = s.sched_diagnostics;
    w.notes = s.notes.into_iter().collect();
    w.unsaid.clear();
    w.sched_rng = s.sched_rng.rng();
    w.mask_rng = s.mask_rng.rng();
    if s.clients.len() != w.clients.len() {
        return Err(corrupt("client count differs".into()));
    }
    for (c, (running, stats)) in w.clients.iter_mut().zip(s.clients) {
        c.running = running;
        c.stats = stats;
    }
    // Kept on the host, as the engine keeps it.
    w.client_state = s
        .client_state
        .iter()
        .map(|id| id.map(|i| loaded.set(i).map(|p| p.to_device(Device::Cpu))).transpose())
        .collect::<Result<_>>()?;
    w.last_mask = match s.last_mask.len() {
        0 => w.clients.iter().map(|_| None).collect(),
        n if n == w.clients.len() => {
            s.last_mask.iter().map(|m| m.as_ref().map(|m| loaded.mask(m)).transpose()).collect::<Result<_>>()?
        }
        _ => return Err(corrupt("last-mask count differs".into())),
    };
    let awaiting_pull: BTreeSet<u64> =
        s.queue.iter().filter_map(|(_, _, e)| if let Event::Pull(job) = e { Some(*job) } else { None }).collect();
    w.queue = EventQueue::from_entries(s.queue, s.queue_seq);
    w.pending = s
        .pending
        .into_iter()
        .map(|u| {
            Ok(ClientUpdate {
                client: u.client,
                job: u.job,
                base_version: u.base_version,
                base: loaded.set(u.base)?,
                mask: loaded.mask(&u.mask)?,
                choice: u.choice,
                delta: loaded.set(u.delta)?,
                pulled_version: u.pulled_version,
                samples: u.samples,
                multiplicity: u.multiplicity,
                train_loss: u.train_loss,
                lr_sum: u.lr_sum,
                pull_merge: u.pull_merge,
                dispatched_at: u.dispatched_at,
                arrived_at: u.arrived_at,
            })
        })
        .collect::<Result<_>>()?;
    w.in_flight.clear();
    w.deferred.clear();
    let mut deferred_jobs = BTreeMap::new();
    for j in s.in_flight {
        let base = loaded.set(j.base)?;
        let mask = loaded.mask(&j.mask)?;
        let start = mask.extract(&base);
        let pulled = j.pulled.map(|id| loaded.set(id)).transpose()?;
        let (outcome_state, outcome_lr_sum, pull_merge) = (j.outcome_state, j.outcome_lr_sum, j.outcome_pull_merge);
        let kept_units = j.outcome_kept_units;
        let work = match (j.outcome, j.pull_share) {
            (Some((params, mean_loss, steps)), _) => {
                let state = outcome_state.map(|id| loaded.set(id)).transpose()?;
                let outcome = TrainOutcome {
                    params: loaded.set(params)?,
                    mean_loss,
                    steps,
                    lr_sum: outcome_lr_sum,
                    pull_merge,
                    state,
                    kept_units,
                };
                Work::Cohort(Arc::new(CohortSlot::done(vec![outcome])), 0)
            }
            (None, Some(share)) => {
                let (job, _) = w.train_job(j.client, j.job, &start, &mask, j.base_version, j.delay);
                // A job whose pull event is still queued has not asked yet; one whose pull found
                // nothing newer goes on from its share without a merge.
                let stage = if awaiting_pull.contains(&j.job) {
                    PullStage::Waiting
                } else {
                    PullStage::Done(match (&pulled, j.pulled_version) {
                        (Some(p), Some(v)) => {
                            Some((p.shallow_clone(), PullInfo { base_version: j.base_version, pulled_version: v }))
                        }
                        _ => None,
                    })
                };
                Work::Session(w.session(job, share, stage))
            }
            (None, None) => {
                let (job, _) = w.train_job(j.client, j.job, &start, &mask, j.base_version, j.delay);
                deferred_jobs.insert(j.job, job);
                Work::Deferred
            }
        };
        let [down_s, compute_s, up_s] = j.phases;
        w.in_flight.insert(
            j.job,
            InFlight {
                client: j.client,
                base_version: j.base_version,
                base,
                mask,
                choice: j.choice,
                start,
                dispatched_at: j.dispatched_at,
                phases: Phases { down_s, compute_s, up_s },
                pull_share: j.pull_share,
                pulled_version: j.pulled_version,
                pulled,
                delay: j.delay,
                multiplicity: j.multiplicity,
                transfer_bytes: j.transfer_bytes,
                relay_bytes: j.relay_bytes,
                work,
            },
        );
    }
    for id in s.deferred {
        let job = deferred_jobs.remove(&id).ok_or_else(|| corrupt(format!("deferred job {id} is not in flight")))?;
        w.deferred.push((id, job));
    }
    if !deferred_jobs.is_empty() {
        return Err(corrupt("jobs in flight without an outcome nor a place among the deferred".into()));
    }
    Ok(())
}
