//! Mask levels (spec §4.3, §5.4): how much of the maskable tensors a client trains in a round,
//! and the per-round draw of which clients are at L under MIX. Shared by the region policy
//! (RA-Fed, RAM-Fed, OAP) and the top-magnitude policy (PruneFL).

use std::collections::BTreeSet;

use fl_core::MaskCtx;
use rand::seq::index;
use serde::{Deserialize, Serialize};

/// How much a client trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// Everything (FedAvg).
    Full,
    /// Half of each maskable tensor (L-Arb.).
    #[default]
    L,
    /// A quarter (S-Arb.).
    S,
    /// A random `mix_l_share` of the clients at L each round, the rest at S (MIX-Arb.).
    Mix,
}

/// What round 0 trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FirstRound {
    /// The full model (the code; it fills RAM-Fed's memories).
    #[default]
    Full,
    /// As any other round.
    Masked,
}

/// The clients at L in the current round under MIX: an exact `round(N · share)`-subset, drawn
/// at the round's first request.
#[derive(Debug, Default)]
pub struct MixDraw {
    drawn: Option<(u64, BTreeSet<usize>)>,
}

impl MixDraw {
    /// Whether `ctx.client` is at L in round `ctx.version`.
    pub fn at_l(&mut self, ctx: &mut MaskCtx, share: f64) -> bool {
        let round = ctx.version;
        if self.drawn.as_ref().is_none_or(|(r, _)| *r != round) {
            let n = ctx.num_clients;
            let l = ((n as f64) * share).round() as usize;
            self.drawn = Some((round, index::sample(ctx.rng, n, l).into_iter().collect()));
        }
        self.drawn.as_ref().is_some_and(|(_, set)| set.contains(&ctx.client))
    }
}

/// `mix_l_share` must be a share.
pub fn validate_share(mix_l_share: f64) -> Result<(), String> {
    if !(0.0..=1.0).contains(&mix_l_share) {
        return Err(format!("mix_l_share: expected a value in [0, 1], got {mix_l_share}"));
    }
    Ok(())
}
