//! Small fixtures for tests of the engine and of plugins: a 2→2 linear model with an exact
//! FLOP count, a six-sample dataset and a run of both, so durations and results can be worked
//! out by hand; devices of given speeds and a client update to hand a policy or an aggregator.

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use crate::aggregator::Aggregator;
use crate::data::Dataset;
use crate::engine::{EvalConfig, RunConfig, Setup};
use crate::mask::Mask;
use crate::mask_policy::FullModel;
use crate::model::{Mode, Model};
use crate::params::ParamSet;
use crate::profile::{DeviceProfile, DevicesConfig, Quantity};
use crate::rng::Rng;
use crate::scheduler::Scheduler;
use crate::staleness::Constant;
use crate::structure::{Structure, TensorSpec};
use crate::trainer::LocalTrainer;
use crate::update::ClientUpdate;

/// `logits = x Wᵀ + b` with `W: [2, 2]`, `b: [2]`, initialised to zero. Forward costs 8 FLOPs
/// per sample (4 multiply-adds; the bias is not counted), so one epoch over n samples is 24n
/// training FLOPs.
pub struct TinyLinear {
    structure: Structure,
}

impl Default for TinyLinear {
    fn default() -> Self {
        let t = |name: &str, shape: Vec<i64>| TensorSpec::new(name, shape);
        TinyLinear { structure: Structure { tensors: vec![t("w", vec![2, 2]), t("b", vec![2])], groups: vec![] } }
    }
}

impl Model for TinyLinear {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, _: &mut Rng) -> ParamSet {
        let zeros = |s: &[i64]| Tensor::zeros(s, (Kind::Float, Device::Cpu));
        ParamSet::new(self.structure.names(), vec![zeros(&[2, 2]), zeros(&[2])]).expect("two names, two tensors")
    }

    fn features(&self, _body: &[Tensor], x: &Tensor, _: &mut Mode) -> Tensor {
        x.shallow_clone()
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        vec![2.0 * (shapes[0][0] * shapes[0][1]) as f64, 0.0]
    }
}

/// Six two-feature samples of two classes.
pub fn tiny_dataset() -> Dataset {
    let x = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 0.0, 0.0, -1.0, 2.0, 1.0]).reshape([6, 2]);
    let y = Tensor::from_slice(&[0i64, 1, 0, 1, 0, 1]);
    Dataset { x, y }
}

/// A run of [`TinyLinear`] on [`tiny_dataset`] split among three clients of 3, 1 and 2 samples,
/// each computing 24 FLOP/s with free transfers (a job of one epoch over n samples takes n
/// virtual seconds): the full model, constant staleness weights, the default evaluation and
/// run settings, seed 7, CPU, one worker. Tests replace what they exercise:
/// `Setup { seed: 5, ..tiny_setup(trainer, scheduler, aggregator) }`.
pub fn tiny_setup(
    trainer: Arc<dyn LocalTrainer>,
    scheduler: Box<dyn Scheduler>,
    aggregator: Box<dyn Aggregator>,
) -> Setup {
    let data = tiny_dataset();
    let free = Quantity::Constant { value: 1e15 };
    Setup {
        model: Arc::new(TinyLinear::default()),
        trainer,
        scheduler,
        aggregator,
        mask_policy: Box::new(FullModel),
        staleness: Box::new(Constant),
        train: data.shallow_clone(),
        test: data,
        partition: vec![vec![0, 1, 2], vec![3], vec![4, 5]],
        devices: DevicesConfig {
            flops_per_s: Quantity::Constant { value: 24.0 },
            up_bytes_per_s: free.clone(),
            down_bytes_per_s: free,
            jitter: 0.0,
            ..Default::default()
        },
        eval: EvalConfig::default(),
        run: RunConfig::default(),
        seed: 7,
        device: Device::Cpu,
        workers: 1,
    }
}

/// An aggregator that keeps the global model as it is: for tests of the engine around it.
pub struct KeepGlobal;

impl Aggregator for KeepGlobal {
    fn aggregate(
        &mut self,
        global: &ParamSet,
        _: &[crate::update::ClientUpdate],
        _: &crate::aggregator::AggregateCtx,
    ) -> crate::error::Result<ParamSet> {
        Ok(global.shallow_clone())
    }
}

/// Devices of these speeds (FLOP/s) with unit links and no memory limit.
pub fn profiles(speeds: &[f64]) -> Vec<DeviceProfile> {
    speeds
        .iter()
        .map(|&s| DeviceProfile {
            flops_per_s: s,
            up_bytes_per_s: 1.0,
            down_bytes_per_s: 1.0,
            memory_bytes: f64::INFINITY,
            batch_size: None,
        })
        .collect()
}

/// The update of client 0's job 0 from `base` (version 0): `delta` under `mask`, `samples`
/// samples, arrived at once; every other field neutral.
pub fn client_update(base: ParamSet, delta: ParamSet, mask: Mask, samples: usize) -> ClientUpdate {
    ClientUpdate {
        client: 0,
        job: 0,
        base_version: 0,
        base,
        mask,
        choice: None,
        delta,
        pulled_version: None,
        samples,
        multiplicity: 1,
        train_loss: 0.0,
        lr_sum: 0.0,
        pull_merge: None,
        dispatched_at: 0,
        arrived_at: 0,
    }
}
