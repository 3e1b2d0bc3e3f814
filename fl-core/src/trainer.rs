//! `LocalTrainer`: the client-side optimisation of one job.
//!
//! A job is self-contained (starting tensors, data view, random streams), so the engine can run
//! it on any worker thread as soon as it is dispatched.

pub mod sgd;

use tch::Tensor;

use crate::data::Dataset;
use crate::error::Result;
use crate::model::Model;
use crate::params::ParamSet;
use crate::rng::{Rng, TensorNoise};

pub struct TrainJob<'a> {
    pub model: &'a dyn Model,
    /// Starting (sub-)model tensors, on the compute device.
    pub params: ParamSet,
    /// For elementwise masks: gradients are multiplied by these 0/1 tensors, so masked
    /// weights never move.
    pub grad_mask: Option<Vec<Option<Tensor>>>,
    /// The shared training set; the client's samples are `indices` into it.
    pub data: &'a Dataset,
    pub indices: &'a Tensor,
    /// The job's host stream (batch order) and tensor noise stream (dropout).
    pub rng: Rng,
    pub noise: TensorNoise,
}

pub struct TrainOutcome {
    pub params: ParamSet,
    /// Mean training loss over the job's steps (read once, at the end of the job).
    pub mean_loss: f64,
    pub steps: usize,
}

pub trait LocalTrainer: Send + Sync {
    fn train(&self, job: TrainJob) -> Result<TrainOutcome>;

    /// Sample passes (forward + backward of one sample) a job makes over `samples` samples;
    /// the cost model turns this into FLOPs and virtual seconds.
    fn sample_passes(&self, samples: usize) -> f64;
}
