//! `cutoff`: a staleness function, weight 1 up to a staleness bound and 0 beyond it, so that
//! too-stale updates are ignored. The smallest component: its config is the component itself.

use fl_core::{FromConfig, InvalidKey, StalenessCtx, StalenessFn};
use serde::{Deserialize, Serialize};

/// Weight 1 while the staleness is at most `max_versions`, 0 beyond.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cutoff {
    pub max_versions: u64,
}

impl Default for Cutoff {
    fn default() -> Self {
        Cutoff { max_versions: 4 }
    }
}

impl FromConfig for Cutoff {
    type Config = Cutoff;

    fn from_config(config: Cutoff) -> Result<Self, InvalidKey> {
        Ok(config)
    }
}

impl StalenessFn for Cutoff {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        if ctx.versions <= self.max_versions { 1.0 } else { 0.0 }
    }
}
