//! Fed-RAA: Zhang, Wu, Zou, Xie, Cheng, Yu and Li, "A Resource-Adaptive Approach for Federated
//! Learning under Resource-Constrained Environments". "The code" below is the public reference
//! code `tdwxz/fedraa`, which the paper does not cite.
//!
//! The model is cut into M disjoint fragments (`neuron-fragments`); whenever a client is idle
//! the scheduler (`async-fragments`) assigns it a fragment by Gre-RAA: among the fragments it
//! finishes within the delay bound K, the one updated least. Each arriving fragment is mixed
//! into the global model at once, θʲ ← (1 − α_t) θʲ + α_t θʲ_new, which is the baselines'
//! mask-aware `async-mix`. The ablations of Table 3 are other assignment policies.
//!
//! Deliberate choices where the paper is silent, each switchable: K defaults to the offline
//! optimum K* (`[scheduler] k`); q(j) counts completed updates (`count_inflight`); fragments
//! are neurons of the hidden layer (`[mask] mode = "repo-elementwise"` gives the code's element
//! split of the output layer); model mixing (`[aggregator] target = "delta"` gives the code's
//! step); no proximal term and no staleness damping (`[staleness] name = "inverse-time"` gives
//! the code's 1/(Δt/100 + 1) on virtual seconds, `"fragment-polynomial"` damps by the merges of
//! the arrival's own fragment).

mod assignment;
mod fragment_policy;
mod fragment_staleness;
mod fragments;
mod methods;
mod scheduler;

pub use assignment::{Policy, gre_raa, min_priority, offline_k, random};
pub use fragment_policy::{FragmentMode, NeuronFragments, NeuronFragmentsConfig};
pub use fragment_staleness::FragmentPolynomial;
pub use fragments::{resolve_ratios, split, table4_ratios};
pub use scheduler::{AsyncFragments, AsyncFragmentsConfig};
