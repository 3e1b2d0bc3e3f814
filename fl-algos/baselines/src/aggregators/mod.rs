//! Aggregators of the baselines.

pub mod aso_fed;
pub mod bayesian_mask;
pub mod buffered;
pub mod coverage_mean;
pub mod dynamic;
pub mod layer_shrinking;
pub mod mixing;
pub mod port;
pub mod weighted_mean;
