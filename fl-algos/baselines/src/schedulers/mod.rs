//! Schedulers of the baselines.

pub mod async_updates;
pub mod sync_rounds;
