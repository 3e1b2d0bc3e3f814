//! `fl-core`: the vocabulary of federated learning on tensors, the component traits, the
//! registry, experiment configuration and the virtual-clock simulation engine.
//!
//! Plugins depend on this crate and register components with `inventory`; this crate never
//! depends on a plugin.

#![deny(missing_docs)]

pub mod aggregator;
mod builtin;
pub mod clock;
pub mod component_kind;
pub mod config;
pub mod data;
pub mod engine;
pub mod error;
pub mod from_config;
pub mod job_memory;
pub mod learned_width;
pub mod mask;
pub mod mask_policy;
pub mod model;
pub mod params;
pub mod profile;
pub mod projection_head;
pub mod registry;
pub mod rng;
pub mod scheduler;
pub mod scheduler_testing;
pub mod split;
pub mod staleness;
pub mod state;
pub mod structure;
#[doc(hidden)]
pub mod testing;
pub mod trainer;
pub mod update;

pub use aggregator::{AggregateCtx, Aggregator, UpdateStaleness};
pub use component_kind::ComponentKind;
pub use config::{Experiment, RunOptions};
pub use data::{DataSpec, Dataset, FederatedData, Partitioner};
pub use engine::{ClientStats, EvalRecord, Observer, Simulation, Summary};
pub use error::{
    EngineError, Error, InvalidKey, JobFailure, ModelError, RegistrationError, Result, ShapeError, TrainerError,
};
pub use from_config::{FromConfig, ModelFromConfig, NoParams, Validate};
pub use job_memory::{JobMemory, job_memory};
pub use learned_width::{WidthAllocation, WidthBudget};
pub use mask::{Coverage, Mask, StructuredMask, TensorRole};
pub use mask_policy::{MaskCtx, MaskPolicy};
pub use model::{Gate, GateUsage, LossGradients, Mode, Model, Training, forward_one};
pub use params::ParamSet;
pub use profile::{DeviceProfile, Pricing};
pub use registry::{Builder, Component, Method, Params, Registry};
pub use scheduler::{JobStart, SchedCtx, Scheduler, SchedulingContext};
pub use staleness::{StalenessCtx, StalenessFn};
pub use state::{StateIn, StateOut};
pub use structure::{Depth, Structure, TensorSpec, UnitGroup, UnitMember};
pub use trainer::{LocalTrainer, TrainJob, TrainOutcome};
pub use update::ClientUpdate;

// Re-exported so plugins register with the same `inventory` and tensors as the core.
pub use inventory;
pub use tch;
pub use toml;
