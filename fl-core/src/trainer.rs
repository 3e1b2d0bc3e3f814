//! `LocalTrainer`: the client-side optimisation of a cohort of jobs.
//!
//! A job is self-contained (starting tensors, data view, random streams), so the engine can run
//! it on any worker thread as soon as it is dispatched. Jobs whose inputs are fixed together
//! train as one *cohort*: one computation over their parameters stacked along a client
//! dimension, each client with its own samples, masks, momentum and random streams, so that a
//! client's result is the same (up to floating-point rounding) alone or in a cohort. A lone job
//! is a cohort of one.
//!
//! A job may be split into segments: it trains up to a share of its work, the engine lets
//! virtual time reach the moment the client asks for the newest global model (FedASMU's
//! mid-training pull), the session merges what it received, and training resumes. Such a job
//! trains as a cohort of one.

mod adan;
pub mod augment;
mod aux_adam;
mod captured_steps;
mod contrastive;
pub mod cuda_graph;
mod decay_gradient;
pub mod distill;
mod fused_sgd;
mod kept_steps;
pub mod learned_pull;
pub mod platon;
pub mod quantize;
pub mod rates;
pub mod reference;
mod schedule;
pub mod sgd;
pub mod usage;
pub mod width_masks;

use std::sync::Arc;

use tch::Tensor;

use crate::data::Dataset;
use crate::error::{Result, TrainerError};
use crate::learned_width::WidthBudget;
use crate::model::Model;
use crate::params::ParamSet;
use crate::rng::{Rng, TensorNoise};
use crate::split::SplitConfig;

/// One client's local training, self-contained: everything the trainer needs, fixed at
/// dispatch.
pub struct TrainJob {
    /// The architecture (shared by every job of the run).
    pub model: Arc<dyn Model>,
    /// Starting (sub-)model tensors, on the compute device. They may share storage with the
    /// global model: never modify them in place.
    pub params: ParamSet,
    /// For elementwise masks: gradients are multiplied by these 0/1 tensors, so masked
    /// weights never move.
    pub grad_mask: Option<Vec<Option<Tensor>>>,
    /// Per starting tensor, whether the job only runs it forward (a depth window's frozen
    /// blocks): no gradient, no optimizer state, its value unchanged. Empty: none frozen.
    pub frozen: Vec<bool>,
    /// The shared training set (shallow handles); the client's samples are `indices` into it.
    pub data: Dataset,
    /// The client's sample indices into `data`, `[n]` int64 on the compute device.
    pub indices: Tensor,
    /// The job's host stream (batch order).
    pub rng: Rng,
    /// The job's tensor noise stream (dropout).
    pub noise: TensorNoise,
    /// The global version the job starts from.
    pub version: u64,
    /// The client's delay d for this job, as the scheduler reports it (virtual seconds, or
    /// versions, by the scheduler's choice; 0 when it has none): delay-aware learning rates
    /// divide by 1 + α·d.
    pub delay: f64,
    /// Where the client chooses its own width (learned width masks, [`crate::learned_width`]):
    /// the job holds those groups at full width, and `[trainer] width_masks` learns and applies
    /// the client's mask. None: the job trains what it holds.
    pub width: Option<WidthBudget>,
    /// What the trainer kept of this client's previous job ([`TrainOutcome::state`]: FedDyn's
    /// gradient estimate, a previous model), on the compute device; none at its first job.
    pub state: Option<ParamSet>,
    /// The client's mini-batch size where its device sets one
    /// ([`crate::DeviceProfile::batch_size`]); None: the trainer's.
    pub batch_size: Option<usize>,
}

impl TrainJob {
    /// What jobs must share to train as one cohort ([`JobSignature`]).
    pub fn signature(&self) -> JobSignature {
        JobSignature {
            shapes: self.params.shapes(),
            frozen: if self.frozen.iter().any(|&f| f) { self.frozen.clone() } else { Vec::new() },
            names: self.params.names().to_vec(),
            width: self.width.as_ref().map(|w| (w.learned.clone(), w.random.clone(), w.learn)),
            batch_size: self.batch_size,
        }
    }

    /// Per starting tensor, whether the job trains it: not a buffer of the model (found by
    /// name, since a sub-model may hold only some of its tensors) and not frozen.
    pub fn trainable(&self) -> Vec<bool> {
        let structure = self.model.structure();
        self.params
            .names()
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let buffer = structure.tensor_index(name).is_some_and(|t| !structure.tensors[t].trainable);
                !buffer && !self.frozen.get(i).copied().unwrap_or(false)
            })
            .collect()
    }
}

/// What jobs of one cohort share ([`TrainJob::signature`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobSignature {
    /// The starting tensors' shapes.
    pub shapes: Vec<Vec<i64>>,
    /// Which of them are frozen (empty: none).
    pub frozen: Vec<bool>,
    /// Which tensors of the model they are: sub-models of equal shapes may hold other tensors
    /// (a depth window's exits).
    pub names: Vec<String>,
    /// The groups whose widths the clients choose (learned, random) and whether they train
    /// their scores.
    pub width: Option<(Vec<usize>, Vec<usize>, bool)>,
    /// The clients' mini-batch size, where their devices set one.
    pub batch_size: Option<usize>,
}

/// How a trainer's jobs use a width budget ([`TrainJob::width`]): what they train and upload,
/// which the cost model prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BudgetUse {
    /// The client learns its mask first, then trains and uploads the units it keeps (Co-S²P's
    /// learned width masks, [`sgd::SgdConfig::width_masks`]).
    #[default]
    LearnedMask,
    /// The client trains the whole held sub-model, pruning it on the way, and uploads the units
    /// it kept ([`TrainOutcome::kept_units`]; PLATON, [`platon`]).
    Pruning,
    /// The client trains the whole held sub-model on fake-quantised weights within its memory
    /// ratio and uploads its full-precision weights (Q-ViT, [`quantize`]).
    Quantisation,
    /// The client trains the whole held sub-model, whose input-dependent decisions drop
    /// patches, heads and sub-layers at a usage pulled to its budget, and uploads it whole (AdaViT,
    /// [`usage`]): its training computes every unit (the decisions mask them), so it is priced
    /// as the whole.
    Decisions,
}

/// What a job returns to the engine.
pub struct TrainOutcome {
    /// The trained (sub-)model: the job's starting tensors' names and shapes, new values.
    pub params: ParamSet,
    /// Mean training loss over the job's steps (read once, at the end of the cohort).
    pub mean_loss: f64,
    /// Optimisation steps the job made (fewer than planned if it stopped early).
    pub steps: usize,
    /// The sum of the learning rates of those steps (η·steps for a constant SGD rate): the
    /// model's displacement divided by it is the job's mean gradient (FedASMU's server reads it).
    pub lr_sum: f64,
    /// How a model pulled mid-training was merged, where the trainer measures it.
    pub pull_merge: Option<PullMerge>,
    /// State to hand the client's next job ([`TrainJob::state`]); the engine keeps it per
    /// client, in host memory, and in checkpoints. None: keep nothing.
    pub state: Option<ParamSet>,
    /// Where the job pruned its width while training ([`BudgetUse::Pruning`]),
    /// the units it kept per unit group of the model (`None` for a group outside its budget):
    /// its update covers those units only. None: the update covers what the job held.
    pub kept_units: Option<Vec<Option<Vec<i64>>>>,
}

/// What a session learns about a model pulled mid-training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PullInfo {
    /// Version the job started from.
    pub base_version: u64,
    /// Version received (newer than `base_version`).
    pub pulled_version: u64,
}

/// How a session merged a model pulled mid-training: the weight it gave the pulled model and
/// the merge's reward, the loss on one batch before the merge minus the loss after it
/// (FedASMU's request-slot policy learns from it; its traces show the weights).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PullMerge {
    /// β: the pulled model's share of the merged one.
    pub weight: f64,
    /// Loss before the merge minus loss after it, on the batch the job trains on next.
    pub reward: f64,
}

/// A cohort in progress, movable between worker threads.
pub trait TrainSession: Send {
    /// Trains until `share` (in (0, 1]) of each job's steps are done. Sessions of more than one
    /// job train whole jobs only (`share` = 1).
    fn run_until(&mut self, share: f64) -> Result<()>;

    /// Merges a newer global (sub-)model received mid-training into the local model of a
    /// cohort of one.
    fn merge_pulled(&mut self, pulled: &ParamSet, info: PullInfo) -> Result<()>;

    /// Ends the cohort (after `run_until(1.0)`): one outcome per job, in the jobs' order.
    fn finish(self: Box<Self>) -> Result<Vec<TrainOutcome>>;
}

/// Client-side optimisation: trains cohorts of [`TrainJob`]s.
///
/// # Contract
/// The trainer is shared (`Arc`) by the engine and its worker threads. For an ordinary job the
/// engine calls [`LocalTrainer::train_cohort`] on a worker thread (for the runs of a
/// [`crate::engine::pack::RunPack`], on a run's thread), with one job or, when
/// [`LocalTrainer::batches`] is true and batching is on, several; a job that pulls the global
/// model mid-training goes through a [`TrainSession`] of its own: `start`, `run_until(share)`,
/// `merge_pulled` if a newer model exists, `run_until(1.0)`, `finish`, each step possibly on
/// another worker thread. The outcome's `params` must have the names and shapes of the job's
/// `params`; the engine turns them into the update's delta.
///
/// A trainer must not modify a job's starting tensors in place (they may be the global
/// model's) and must draw randomness only from the job's `rng` and `noise`. It should give
/// each job the same result (up to floating-point rounding) alone or in a cohort, so that
/// batching does not change a run's metrics.
/// [`LocalTrainer::sample_passes`] and [`LocalTrainer::steps`] feed the cost model, on the
/// engine's thread: they must be deterministic functions of the client's sample count.
///
/// # Example
/// A trainer that leaves the model as it is (no step at all), for tests of schedulers:
/// ```
/// use fl_core::trainer::{PullInfo, TrainSession};
/// use fl_core::{LocalTrainer, ParamSet, Result, TrainJob, TrainOutcome};
///
/// struct Idle(Vec<TrainJob>);
///
/// impl TrainSession for Idle {
///     fn run_until(&mut self, _share: f64) -> Result<()> { Ok(()) }
///     fn merge_pulled(&mut self, _: &ParamSet, _: PullInfo) -> Result<()> { Ok(()) }
///     fn finish(self: Box<Self>) -> Result<Vec<TrainOutcome>> {
///         Ok(self.0.into_iter().map(|j| TrainOutcome { params: j.params, mean_loss: 0.0, steps: 0, lr_sum: 0.0, pull_merge: None, state: j.state, kept_units: None }).collect())
///     }
/// }
///
/// struct NoTraining;
///
/// impl LocalTrainer for NoTraining {
///     fn start(&self, jobs: Vec<TrainJob>) -> Result<Box<dyn TrainSession>> { Ok(Box::new(Idle(jobs))) }
///     fn sample_passes(&self, samples: usize, _batch: Option<usize>) -> f64 { samples as f64 }
/// }
/// # let _: std::sync::Arc<dyn LocalTrainer> = std::sync::Arc::new(NoTraining);
/// ```
pub trait LocalTrainer: Send + Sync {
    /// Starts a cohort: jobs of one model on one training set whose (sub-)models have equal
    /// shapes. A trainer that cannot batch accepts only cohorts of one
    /// ([`LocalTrainer::batches`] is false).
    fn start(&self, jobs: Vec<TrainJob>) -> Result<Box<dyn TrainSession>>;

    /// Whether `start` trains cohorts of more than one job as one computation.
    fn batches(&self) -> bool {
        false
    }

    /// Sample passes (forward + backward of one sample) a job makes over `samples` samples in
    /// mini-batches of `batch` (None: the trainer's); the cost model turns this into FLOPs and
    /// virtual seconds.
    fn sample_passes(&self, samples: usize, batch: Option<usize>) -> f64;

    /// Sample passes a job whose client learns its width ([`TrainJob::width`]) makes over
    /// `samples` samples training its scores, before its weights; priced over the held
    /// sub-model. 0 by default.
    fn width_mask_passes(&self, _samples: usize) -> f64 {
        0.0
    }

    /// How its jobs use a width budget ([`TrainJob::width`]), which the cost model prices.
    fn budget_use(&self) -> BudgetUse {
        BudgetUse::LearnedMask
    }

    /// Optimisation steps (mini-batches of `batch`, None: the trainer's) of a job over
    /// `samples` samples.
    fn steps(&self, samples: usize, batch: Option<usize>) -> f64 {
        self.sample_passes(samples, batch)
    }

    /// The client/server split its jobs train under (split learning), if any.
    fn split(&self) -> Option<&SplitConfig> {
        None
    }

    /// Optimizer states per trained element (momentum buffers, moments), for the job memory
    /// estimate ([`crate::job_memory()`]): 0 by default.
    fn optimizer_states(&self) -> u32 {
        0
    }

    /// Samples per mini-batch of a job whose device sets none ([`TrainJob::batch_size`]), for
    /// the job memory estimate; `None` where it has none.
    fn batch_size(&self) -> Option<usize> {
        None
    }

    /// Model-sized copies of per-client state it keeps between a client's jobs
    /// ([`TrainOutcome::state`]), for the memory check before the run: 0 by default.
    fn client_state_copies(&self) -> u64 {
        0
    }

    /// A whole cohort in one segment; one outcome per job, in order.
    fn train_cohort(&self, jobs: Vec<TrainJob>) -> Result<Vec<TrainOutcome>> {
        let mut session = self.start(jobs)?;
        session.run_until(1.0)?;
        session.finish()
    }

    /// One whole job, as a cohort of one.
    fn train(&self, job: TrainJob) -> Result<TrainOutcome> {
        Ok(self.train_cohort(vec![job])?.pop().ok_or(TrainerError::NoOutcome)?)
    }
}
