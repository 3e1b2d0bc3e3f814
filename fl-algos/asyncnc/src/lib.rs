//! asyncnc: Forootani and Iervolino, "Asynchronous Federated Learning with non-convex client
//! objective functions and heterogeneous dataset" (official code:
//! `github.com/Ali-Forootani/AFL_non_convex_non_iid`, Zenodo record 14962410).
//!
//! Algorithm 1 is `barrier-rounds`: each round J of C clients, sampled without replacement,
//! start after a delay from a possibly stale global model θ^(t−τ_c) and train locally; the
//! server waits for all of them and replaces the global model by the size-weighted mean of
//! their models (`model-mean`). The client trainer is fl-core's `adam` with the paper's
//! delay-aware rate γ₀/(√(e+1)(1 + α·d)). The presets (`fl list`) name the paper's variants:
//! `asyncnc-afl` (the paper), `asyncnc-afl-code` (what the authors' code runs: own models, no
//! broadcast), `asyncnc-sfl` and `asyncnc-sfl-code` (the synchronous baselines), and
//! `asyncnc-events` (event-driven, genuine staleness).
//!
//! Choices where the paper is silent, each switchable: the delay is U(0, D) virtual seconds
//! with D = 2 (the code's sleep) and delays the client's start; the learning rate reads the
//! sampled delay (`[scheduler] lr_delay`); staleness is not simulated unless `staleness` says
//! so; the staleness weight is constant (`[staleness] name = "inverse-linear"` gives
//! 1/(1 + α·τ)). The sequential analysis model of Lemmas 1–2 (V5) is not offered.

mod barrier_rounds;
mod event_driven;
mod methods;
mod model_mean;
pub mod sampling;

pub use barrier_rounds::{BarrierRounds, BarrierRoundsConfig, LrDelay, StalenessModel};
pub use event_driven::{DelayedAsync, DelayedAsyncConfig};
pub use model_mean::{MeanMode, ModelMean, ModelMeanConfig};
pub use sampling::Sampling;
