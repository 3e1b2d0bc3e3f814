//! Umbrella crate: links every algorithm plugin of the workspace, so a binary that depends on
//! it gets all their registrations.

pub use fl_algo_asyncnc as asyncnc;
pub use fl_algo_baselines as baselines;
pub use fl_algo_cos2p as cos2p;
pub use fl_algo_fedasmu as fedasmu;
pub use fl_algo_fedraa as fedraa;
pub use fl_algo_kdd23 as kdd23;
