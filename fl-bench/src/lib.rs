//! Shared fixtures of the benchmarks: the MNIST-shaped MLP workload used both by the
//! criterion benchmark and by the comparison against the same loop in PyTorch.

use std::sync::Arc;

use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::rng::{self, TensorNoise};
use fl_core::tch::{Device, Kind as TKind, Tensor};
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{DataSpec, Dataset, LocalTrainer, Model, TrainJob};

use fl_models as _;

/// One client's local training: MLP 784-200-10, `samples` MNIST-shaped inputs, one epoch of
/// mini-batch SGD (batch 32, lr 0.05).
pub struct MlpWorkload {
    pub model: Arc<dyn Model>,
    pub trainer: Sgd,
    pub data: Dataset,
    pub indices: Tensor,
    pub samples: usize,
}

pub const BATCH: usize = 32;
pub const LR: f64 = 0.05;

/// The registered `mlp` for MNIST-shaped inputs (`[1, 28, 28]`, 10 classes), its parameters
/// given as TOML (`"hidden = [200]\ndropout = 0.5"`, the kdd23 model).
pub fn mnist_mlp(params: &str) -> Arc<dyn Model> {
    let registry = Registry::get().expect("registry");
    let spec = DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None };
    let comp = registry.component(ComponentKind::Model, "mlp", "bench", "model").expect("mlp is registered");
    let Builder::Model(build) = comp.build else { unreachable!("registry keys builders by kind") };
    let table: fl_core::toml::Table = fl_core::toml::from_str(params).expect("mlp parameters parse");
    build(&Params::new("bench", "model", table), &spec).expect("mlp builds")
}

impl MlpWorkload {
    pub fn new(samples: usize) -> Self {
        let model = mnist_mlp("hidden = [200]");
        let x = Tensor::rand([samples as i64, 1, 28, 28], (TKind::Float, Device::Cpu));
        let y = Tensor::randint(10, [samples as i64], (TKind::Int64, Device::Cpu));
        let trainer = Sgd::new(SgdConfig { lr: LR, batch_size: BATCH, epochs: 1, ..Default::default() });
        let indices = Tensor::arange(samples as i64, (TKind::Int64, Device::Cpu));
        MlpWorkload { model, trainer, data: Dataset { x, y }, indices, samples }
    }

    /// Runs one epoch; returns the mean loss (forces completion of the work).
    pub fn epoch(&self, seed: u64) -> f64 {
        self.epoch_with(&self.trainer, seed)
    }

    /// One epoch with another trainer of the same configuration (the per-client loop that
    /// preceded cohort training, [`fl_core::trainer::reference::ReferenceSgd`]).
    pub fn epoch_with(&self, trainer: &dyn LocalTrainer, seed: u64) -> f64 {
        let params = self.model.init(&mut rng::stream(seed, &[0]));
        let out = trainer
            .train(TrainJob {
                model: Arc::clone(&self.model),
                params,
                grad_mask: None,
                frozen: Vec::new(),
                data: self.data.shallow_clone(),
                indices: self.indices.shallow_clone(),
                rng: rng::stream(seed, &[1]),
                noise: TensorNoise::new(seed),
                version: 0,
                delay: 0.0,
                width: None,
                state: None,
                batch_size: None,
            })
            .expect("training runs");
        out.mean_loss
    }
}
