//! Mask levels (Wang et al., §6.2): how much of the maskable tensors a client trains in a
//! round, and which clients are at L under MIX (a per-round draw: a uniform subset, or the
//! code's coin flips) or by capability (their device against the fastest). Shared by the region
//! policy (RA-Fed, RAM-Fed, OAP) and the top-magnitude policy (PruneFL).

use std::collections::BTreeSet;

use fl_core::{InvalidKey, MaskCtx};
use rand::Rng;
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

/// How MIX picks its `round(N · mix_l_share)` clients at L each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MixDraw {
    /// A uniformly random subset (the paper: "we randomly select 50% submodels", §6.2).
    #[default]
    Subset,
    /// The code's procedure: clients in order flip a fair coin for L or S until one level's
    /// count is full, then the rest take the other level. Early clients' levels are
    /// independent, so runs of equal levels are likelier than under `subset`.
    CodeCoinflip,
}

/// The level keys a mask policy's config shares with the others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelRule {
    pub level: Level,
    pub mix_l_share: f64,
    pub mix_draw: MixDraw,
    pub l_min_of_fastest: f64,
}

impl LevelRule {
    /// `mix_l_share` and `l_min_of_fastest` must be shares.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        for (key, share) in [("mix_l_share", self.mix_l_share), ("l_min_of_fastest", self.l_min_of_fastest)] {
            if !(0.0..=1.0).contains(&share) {
                return Err(InvalidKey::new(key, format!("expected a value in [0, 1], got {share}")));
            }
        }
        Ok(())
    }
}

/// Which clients are at L in the current round. Under MIX an exact `round(N · share)`-subset,
/// drawn at the round's first request.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LevelDraw {
    drawn: Option<(u64, BTreeSet<usize>)>,
}

impl LevelDraw {
    /// Whether `ctx.client` is at L (rather than S) in round `ctx.version`; the level is not Full.
    pub fn at_l(&mut self, ctx: &mut MaskCtx, rule: &LevelRule) -> bool {
        match rule.level {
            Level::L => true,
            Level::S => false,
            Level::Mix => self.mix_at_l(ctx, rule),
            Level::ByCapability => {
                let fastest = ctx.profiles.iter().map(|p| p.flops_per_s).fold(0.0, f64::max);
                ctx.profile().flops_per_s >= rule.l_min_of_fastest * fastest
            }
            Level::Full => unreachable!("a full level trains everything"),
        }
    }

    fn mix_at_l(&mut self, ctx: &mut MaskCtx, rule: &LevelRule) -> bool {
        let round = ctx.version;
        if self.drawn.as_ref().is_none_or(|(r, _)| *r != round) {
            let n = ctx.num_clients();
            let l = ((n as f64) * rule.mix_l_share).round() as usize;
            let at_l = match rule.mix_draw {
                MixDraw::Subset => index::sample(ctx.rng, n, l).into_iter().collect(),
                MixDraw::CodeCoinflip => coinflips(ctx.rng, n, l),
            };
            self.drawn = Some((round, at_l));
        }
        self.drawn.as_ref().is_some_and(|(_, set)| set.contains(&ctx.client))
    }
}

/// The clients at L under the code's coin flips: exactly `l` of `n`.
fn coinflips(rng: &mut impl Rng, n: usize, l: usize) -> BTreeSet<usize> {
    let mut at_l = BTreeSet::new();
    let mut at_s = 0;
    for client in 0..n {
        let l_full = at_l.len() == l;
        if !l_full && (at_s == n - l || rng.random_bool(0.5)) {
            at_l.insert(client);
        } else {
            at_s += 1;
        }
    }
    at_l
}
