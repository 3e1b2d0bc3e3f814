//! `ClientUpdate`: what arrives at the server when a client job finishes.

use crate::clock::Tick;
use crate::mask::Mask;
use crate::params::ParamSet;

/// A finished job's result as the server receives it, pending until the next aggregation.
#[derive(Debug)]
pub struct ClientUpdate {
    /// The client that trained it.
    pub client: usize,
    /// The engine's job counter, unique per run.
    pub job: u64,
    /// The global model version the client started from.
    pub base_version: u64,
    /// That version's parameters (shared storage, never mutated).
    pub base: ParamSet,
    /// The part of the model the client trained.
    pub mask: Mask,
    /// The mask policy's alternative the scheduler chose for the job (Fed-RAA's fragment).
    pub choice: Option<usize>,
    /// New minus starting parameters, full-shaped; exactly zero outside the mask.
    pub delta: ParamSet,
    /// The newer version merged in mid-training, if the job pulled one.
    pub pulled_version: Option<u64>,
    /// Training samples the client holds.
    pub samples: usize,
    /// How many of the scheduler's draws this job stands for (a client drawn k times in a
    /// round, trained once: sampling with replacement with duplicates merged); 1 otherwise.
    /// Aggregators that weigh by samples multiply by it.
    pub multiplicity: u32,
    /// Mean training loss over the job's steps.
    pub train_loss: f64,
    /// The sum of the learning rates of the job's steps ([`crate::TrainOutcome::lr_sum`]).
    pub lr_sum: f64,
    /// How the model pulled mid-training was merged ([`crate::TrainOutcome::pull_merge`]).
    pub pull_merge: Option<crate::trainer::PullMerge>,
    /// Virtual time of the dispatch, in ticks (before any wait the scheduler asked for).
    pub dispatched_at: Tick,
    /// Virtual time of the arrival at the server, in ticks.
    pub arrived_at: Tick,
}

impl ClientUpdate {
    /// The client's new full-shaped model, `base + delta` (outside the mask: the base).
    pub fn new_params(&self) -> ParamSet {
        self.base.add(&self.delta)
    }
}
