//! FedASMU: Jia, Liu et al., "Efficient Federated Learning with Timely Update Dissemination"
//! (arXiv:2507.06031; spec `../shared/papers/fedasmu.md`).
//!
//! The server merges each upload on arrival with a staleness-aware weight whose controls it
//! learns per device (`staleness-learned`, Eqs. 1–5 through the spec's Algorithm S); devices
//! fetch the newest global model once mid-training and merge it with a weight they learn
//! (the `sgd` trainer's `learned_pull`, Eqs. 9–11); a trigger every 𝒯 virtual
//! seconds keeps m' devices training (`periodic-trigger`), each asking at an epoch chosen by RL
//! (`rl_slot`: a server meta policy, then per-device Q-tables). FedSSMU runs synchronous rounds
//! whose uploads merge one at a time as they arrive (`sequential-rounds`).

mod aggregator;
mod meta_policy;
mod methods;
mod periodic_trigger;
mod request_slot;
mod sequential_rounds;
mod start_devices;

pub use aggregator::{StalenessLearned, StalenessLearnedConfig};
pub use periodic_trigger::{PeriodicTrigger, PeriodicTriggerConfig};
pub use request_slot::RlSlotConfig;
pub use sequential_rounds::{SequentialRounds, SequentialRoundsConfig};
