//! RA-Fed and RAM-Fed: Wang et al., "Theoretical Convergence Guaranteed Resource-Adaptive
//! Federated Learning with Mixed Heterogeneity", KDD '23. <https://doi.org/10.1145/3580305.3599521>
//!
//! Clients train element regions of the maskable tensors (`region-partition`); RA-Fed averages
//! each coordinate over the clients that trained it (`coverage-mean`, uniform, from the
//! baselines), OAP zeroes what nobody trained (`coverage-mean-zero-uncovered`), RAM-Fed adds
//! every client's stored update (`ram-fed`). The paper's other baselines are presets too:
//! SplitFL and IST are the region policy with a shared or an own region per client, PruneFL
//! trains the largest weights (`top-magnitude`).
//!
//! Deliberate choices where the paper is silent or the authors' released code departs from it,
//! each switchable: regions are a static seeded random partition (`partition = "code-argsort"`
//! reproduces the code); local training masks gradients (`trainer.masking = "zero-init-only"`
//! reproduces the code); RAM-Fed weighs the correction by 1/Γ as in the paper (`correction =
//! "n"` gives the code's rule) and keeps one memory per client (`memory = "code-shared"`
//! reproduces the code's aliasing bug). The off-by-one complement of the code's MNIST
//! `RAM-Fed.py` is not reproduced: it crashes the code at S-Arb.

mod levels;
mod maskable;
mod methods;
mod oap_aggregator;
mod ram_fed;
mod region_policy;
mod regions;
mod top_magnitude;
mod units;

pub use levels::{FirstRound, Level, LevelRule, MixDraw};
pub use oap_aggregator::ZeroUncoveredConfig;
pub use ram_fed::{Correction, Memory, RamFed, RamFedConfig};
pub use region_policy::{RegionChoice, RegionPolicy, RegionPolicyConfig, typep_regions};
pub use regions::{Granularity, PartitionKind};
pub use top_magnitude::{Importance, TopMagnitude, TopMagnitudeConfig};
