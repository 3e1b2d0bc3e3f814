//! Baselines of federated learning under heterogeneity and asynchrony, and the building
//! blocks the paper plugins reuse.
//!
//! - FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from
//!   Decentralized Data", AISTATS 2017. <https://arxiv.org/abs/1602.05629>
//! - FedProx: Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020.
//!   <https://arxiv.org/abs/1812.06127> (the proximal term lives in fl-core's `sgd` trainer).
//! - FedAsync: Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019.
//!   <https://arxiv.org/abs/1903.03934>
//! - FedBuff: Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
//!   AISTATS 2022. <https://arxiv.org/abs/2106.06639>
//!
//! Deliberate deviations: FedAsync's client prox term ρ is the `sgd` trainer's `prox_mu`
//! (off by default, as in most reproductions); under a partial mask, FedAsync mixes only the
//! trained elements; staleness is measured in global model versions (`inverse-time` uses virtual
//! seconds).

mod aggregators;
mod mask_policies;
mod methods;
mod schedulers;
mod staleness;

pub use aggregators::aso_fed::{AsoFed, AsoFedConfig, FeatureAttention};
pub use aggregators::bayesian_mask::{BayesianMask, BayesianMaskConfig};
pub use aggregators::buffered::{BufferedMean, BufferedMeanConfig};
pub use aggregators::coverage_mean::{CoverageMean, CoverageMeanConfig, Uncovered};
pub use aggregators::dynamic::{Dynamic, DynamicConfig};
pub use aggregators::layer_shrinking::{LayerShrinking, LayerShrinkingConfig};
pub use aggregators::mixing::{AsyncMix, AsyncMixConfig, Combine, MixTarget};
pub use aggregators::port::{Port, PortConfig};
pub use aggregators::weighted_mean::{WeightedMean, WeightedMeanConfig, Weighting};
pub use mask_policies::fedrolex::{FedRolex, rolling_units};
pub use mask_policies::heterofl::HeteroFl;
pub use mask_policies::own_width::OwnWidth;
pub use mask_policies::width_levels::{Assign, WidthConfig};
pub use schedulers::async_updates::{AsyncConfig, AsyncUpdates};
pub use schedulers::lags::{LagTracker, TrainerDelay};
pub use schedulers::sync_rounds::{SyncRounds, SyncRoundsConfig};
pub use staleness::{Exponential, Hinge, InverseLinear, InverseSqrt, InverseTime, Polynomial};
