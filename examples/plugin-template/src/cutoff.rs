//! `cutoff`: a staleness function, weight 1 up to a staleness bound and 0 beyond it, so that
//! too-stale updates are ignored. The smallest component: its config is the component itself.

use fl_core::{StalenessCtx, StalenessFn, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

/// Weight 1 while the staleness is at most `max_versions`, 0 beyond.
#[derive(Debug, Clone, Copy, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cutoff {
    /// The largest staleness, in global model versions, whose update still counts.
    #[default(4)]
    pub max_versions: u64,
}

// Every value is a valid bound: nothing to check.
impl Validate for Cutoff {}

impl StalenessFn for Cutoff {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        if ctx.versions <= self.max_versions { 1.0 } else { 0.0 }
    }
}
