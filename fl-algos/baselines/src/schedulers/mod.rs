//! Schedulers of the baselines.

pub mod async_updates;
pub mod lags;
pub mod sync_rounds;
