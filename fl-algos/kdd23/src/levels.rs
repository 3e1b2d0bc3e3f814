//! Mask levels (spec §4.3, §5.4): how much of the maskable tensors a client trains in a round,
//! and which clients are at L under MIX (a per-round draw) or by capability (their device
//! against the fastest). Shared by the region policy (RA-Fed, RAM-Fed, OAP) and the
//! top-magnitude policy (PruneFL).

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
    /// Clients with at least `l_min_of_fastest` × the fastest client's throughput at L, the
    /// others at S: sub-models "assigned according to local computing resources", as Fed-RAA
    /// describes RAM-Fed.
    ByCapability,
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

/// Which clients are at L in the current round. Under MIX an exact `round(N · share)`-subset,
/// drawn at the round's first request.
#[derive(Debug, Default)]
pub struct LevelDraw {
    drawn: Option<(u64, BTreeSet<usize>)>,
}

impl LevelDraw {
    /// Whether `ctx.client` is at L (rather than S) in round `ctx.version`; `level` is not Full.
    pub fn at_l(&mut self, ctx: &mut MaskCtx, level: Level, mix_l_share: f64, l_min_of_fastest: f64) -> bool {
        match level {
            Level::L => true,
            Level::S => false,
            Level::Mix => self.mix_at_l(ctx, mix_l_share),
            Level::ByCapability => {
                let fastest = ctx.profiles.iter().map(|p| p.flops_per_s).fold(0.0, f64::max);
                ctx.profile().flops_per_s >= l_min_of_fastest * fastest
            }
            Level::Full => unreachable!("a full level trains everything"),
        }
    }

    fn mix_at_l(&mut self, ctx: &mut MaskCtx, share: f64) -> bool {
        let round = ctx.version;
        if self.drawn.as_ref().is_none_or(|(r, _)| *r != round) {
            let n = ctx.num_clients();
            let l = ((n as f64) * share).round() as usize;
            self.drawn = Some((round, index::sample(ctx.rng, n, l).into_iter().collect()));
        }
        self.drawn.as_ref().is_some_and(|(_, set)| set.contains(&ctx.client))
    }
}

/// `mix_l_share` and `l_min_of_fastest` must be shares.
pub fn validate_level(mix_l_share: f64, l_min_of_fastest: f64) -> Result<(), String> {
    for (key, share) in [("mix_l_share", mix_l_share), ("l_min_of_fastest", l_min_of_fastest)] {
        if !(0.0..=1.0).contains(&share) {
            return Err(format!("{key}: expected a value in [0, 1], got {share}"));
        }
    }
    Ok(())
}
