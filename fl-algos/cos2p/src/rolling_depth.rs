//! `rolling-depth`: Co-S²P's sub-model assignment at dispatch (§2.1–2.2, Algorithm 1a).
//!
//! Each client gets a kept-parameter ratio `R_n` (a level chosen from its speed or fixed
//! shares, [`fl_algo_baselines::WidthConfig`]), split into depth and width as
//! `R^depth = √(R_n / ρ)`, `R^width = √(R_n · ρ)` (`ρ = width_over_depth`, 1 in all of the
//! paper's experiments but Table 8's; one above 1 is clipped and the other set to `R_n`). It trains `k = ⌊L · R^depth⌋` consecutive blocks (at least
//! one): in round q (the global version) the window starts at `s = q mod (L − k + 1)`, so that it
//! rolls over every block; the blocks below are frozen, those above dropped, and the sub-model
//! reads out through the model's early exit after `s + k` blocks (give the ViT an exit at every
//! depth it may need, `exits = [1, 2, …, L − 1]`), and, with `inner_exits`, also through the
//! exits at the depths where the shallower clients' windows would end (`s + k_i`), which
//! `[trainer] distill` teaches from the deepest (Eq. 3). Inside the window each head and MLP group
//! keeps `R^width` of its units: a rolling FedRolex window (`width = "rolling"`), the first ones
//! (`"prefix"`), all (`"full"`), or the units the client learns itself (`"learned"`, §2.3–2.4):
//! the window goes out at full width with a [`WidthBudget`] of `R^width` over its trained
//! blocks' groups, and while the round is below `mask_rounds` (Q̂) the client trains its
//! importance scores before its weights (`[trainer] width_masks`); afterwards its scores are
//! fixed and the window goes out physically cut to the units they keep (`width_allocation`:
//! the best over all the window's groups, or each group's own share). Group kinds
//! (`heads`, `mlp`: a group name's last part) outside `learned_groups` get random masks, fixed
//! per client (Table 3's ablation). The early exits a client trains are its own
//! (`personal_exits`, §2.5: "keep exit heads locally"): each job starts from the client's copy,
//! which is neither uploaded nor aggregated; the final head at depth L is shared.

use fl_algo_baselines::{WidthConfig, rolling_units};
use fl_core::{
    Depth, Error, InvalidKey, Mask, MaskCtx, MaskPolicy, Result, Validate, WidthAllocation, WidthBudget, learned_width,
};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

/// Which units of each group a window keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WidthChoice {
    /// `R^width` of the units, rolling with the round as FedRolex does.
    #[default]
    Rolling,
    /// The first `R^width` of the units (HeteroFL's prefix).
    Prefix,
    /// Every unit: depth pruning alone.
    Full,
    /// The units the client's learned scores keep (§2.3–2.4).
    Learned,
}

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RollingDepthConfig {
    /// The kept ratios `R_n` and how a client gets one (Co-S²P's E1 and E2: 0.0625 and 0.5625).
    #[default(WidthConfig { levels: vec![0.5625, 0.0625], ..WidthConfig::default() })]
    pub ratios: WidthConfig,
    /// ρ = R^width / R^depth (Table 8: 0.5, 1, 2).
    #[default(1.0)]
    pub width_over_depth: f64,
    /// Which units of each group the window keeps.
    pub width: WidthChoice,
    /// Also read out inside the window at the depths of the shallower clients' windows
    /// (`s + k_i` for every `k_i < k`), the exits `[trainer] distill` teaches (§2.2).
    #[default(true)]
    pub inner_exits: bool,
    /// Q̂: rounds (global versions) below which clients train their width scores
    /// (`width = "learned"`; E1: 20).
    #[default(20)]
    pub mask_rounds: u64,
    /// Group kinds whose masks clients learn with `width = "learned"`; the others' masks are
    /// random (Table 3: `["heads"]`, `["mlp"]`, `[]`).
    #[default(vec!["heads".to_string(), "mlp".to_string()])]
    pub learned_groups: Vec<String>,
    /// How a learned mask shares `R^width` among the window's groups: over all of them by
    /// score (`"global"`, spec §2.4's FinalizeMask) or `R^width` of each (`"per-group"`).
    pub width_allocation: WidthAllocation,
    /// Whether a client keeps the early exits it trains for itself (never uploaded or
    /// aggregated, [`fl_core::TensorRole::Personal`]) or shares them like any trained tensor.
    #[default(true)]
    pub personal_exits: bool,
}

impl Validate for RollingDepthConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        self.ratios.validate().map_err(|e| InvalidKey::new(format!("ratios.{}", e.key), e.message))?;
        if !(self.width_over_depth > 0.0 && self.width_over_depth.is_finite()) {
            return Err(InvalidKey::new(
                "width_over_depth",
                format!("expected a positive ratio, got {}", self.width_over_depth),
            ));
        }
        Ok(())
    }
}

pub struct RollingDepth {
    cfg: RollingDepthConfig,
}

impl RollingDepth {
    pub fn new(cfg: RollingDepthConfig) -> Self {
        RollingDepth { cfg }
    }

    /// `(R^depth, R^width)` of a client with kept ratio `r`: `√(r/ρ)` and `√(r·ρ)`; one that
    /// exceeds 1 is clipped to 1 and the other becomes `r`, keeping their product (spec §2.7).
    pub fn split(&self, r: f64) -> (f64, f64) {
        let rho = self.cfg.width_over_depth;
        let (depth, width) = ((r / rho).sqrt(), (r * rho).sqrt());
        if depth > 1.0 {
            (1.0, r)
        } else if width > 1.0 {
            (r, 1.0)
        } else {
            (depth, width)
        }
    }

    /// `k = ⌊L · R^depth⌋` (at least 1) trained blocks of a client with depth ratio `depth`.
    pub fn trained_blocks(blocks: usize, depth: f64) -> usize {
        ((blocks as f64 * depth + 1e-9).floor() as usize).clamp(1, blocks)
    }

    /// The window `s..s + k` of a client with depth ratio `depth` among `blocks` blocks in
    /// round `round`.
    pub fn window(blocks: usize, depth: f64, round: u64) -> std::ops::Range<usize> {
        let k = Self::trained_blocks(blocks, depth);
        let s = (round % (blocks - k + 1) as u64) as usize;
        s..s + k
    }

    /// The width budget of a window: `R^width` over the groups of its trained blocks, learned
    /// or random by their kind, scores trained below round Q̂.
    fn budget(&self, ctx: &MaskCtx, window: &std::ops::Range<usize>, width: f64) -> Result<WidthBudget> {
        let kinds: Vec<&str> =
            ctx.structure.groups.iter().map(|g| g.name.rsplit('.').next().unwrap_or(&g.name)).collect();
        if let Some(unknown) = self.cfg.learned_groups.iter().find(|k| !kinds.contains(&k.as_str())) {
            return Err(Error::component(
                "rolling-depth",
                format!("learned_groups: no unit group of kind `{unknown}`; the model's kinds are {kinds:?}"),
            ));
        }
        let in_window = |g: usize| {
            ctx.structure.groups[g].members.iter().all(|m| match ctx.structure.tensors[m.tensor].depth {
                Depth::Block(b) => window.contains(&b),
                _ => false,
            })
        };
        let (learned, random): (Vec<usize>, Vec<usize>) = (0..ctx.structure.groups.len())
            .filter(|&g| in_window(g))
            .partition(|&g| self.cfg.learned_groups.iter().any(|k| k == kinds[g]));
        let learn = ctx.version < self.cfg.mask_rounds && !learned.is_empty();
        Ok(WidthBudget { ratio: width, learned, random, learn, allocation: self.cfg.width_allocation })
    }

    /// The early exits inside `window` at the depths of the shallower clients' windows among
    /// `profiles`: `s + k_i` for every other `k_i < k`, ascending.
    fn inner_exits(
        &self,
        window: &std::ops::Range<usize>,
        blocks: usize,
        profiles: &[fl_core::DeviceProfile],
    ) -> Vec<usize> {
        let mut ks: Vec<usize> = (0..profiles.len())
            .map(|c| Self::trained_blocks(blocks, self.split(self.cfg.ratios.ratio(c, profiles)).0))
            .filter(|&k| k < window.len())
            .collect();
        ks.sort_unstable();
        ks.dedup();
        ks.into_iter().map(|k| window.start + k).collect()
    }
}

impl MaskPolicy for RollingDepth {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        let mask = self.window_mask(ctx)?;
        Ok(match mask {
            Mask::Structured(m) if self.cfg.personal_exits => {
                let exits: Vec<bool> =
                    ctx.structure.tensors.iter().map(|t| matches!(t.depth, Depth::Exit(_))).collect();
                Mask::Structured(m.with_personal(&exits))
            }
            other => other,
        })
    }

    fl_core::stateless!();
}

impl RollingDepth {
    /// The client's depth window at its width, every trained tensor shared.
    fn window_mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        let blocks = ctx.structure.blocks();
        if blocks == 0 {
            return Err(Error::component("rolling-depth", "the model has no blocks to window (use a `vit`)"));
        }
        let (depth, width) = self.split(self.cfg.ratios.ratio(ctx.client, ctx.profiles));
        let window = Self::window(blocks, depth, ctx.version);
        let counts = self.cfg.ratios.kept_counts("rolling-depth", ctx.structure, width)?;
        let kept: Vec<Option<Vec<i64>>> = counts
            .into_iter()
            .zip(&ctx.structure.groups)
            .map(|(n, group)| match (self.cfg.width, n) {
                (WidthChoice::Full | WidthChoice::Learned, _) | (_, None) => None,
                (WidthChoice::Prefix, Some(n)) => Some((0..n).collect()),
                (WidthChoice::Rolling, Some(n)) => Some(rolling_units(group.units, n, ctx.version)),
            })
            .collect();
        let exits = if self.cfg.inner_exits { self.inner_exits(&window, blocks, ctx.profiles) } else { Vec::new() };
        if self.cfg.width != WidthChoice::Learned {
            return ctx.structure.submodel_with_exits(window, &exits, &kept);
        }
        let budget = self.budget(ctx, &window, width)?;
        // Outside the mask rounds a client whose scores cover the window trains it cut to them.
        let cut =
            (!budget.learn).then(|| learned_width::kept_units(ctx.structure, &budget, ctx.client_state)).flatten();
        match cut {
            Some(kept) => ctx.structure.submodel_with_exits(window, &exits, &kept),
            None => match ctx.structure.submodel_with_exits(window, &exits, &vec![None; ctx.structure.groups.len()])? {
                Mask::Structured(mask) => Ok(Mask::Structured(mask.with_width_budget(budget))),
                other => Ok(other),
            },
        }
    }
}

fl_core::register!(MaskPolicy "rolling-depth" => RollingDepth::new(RollingDepthConfig),
    summary: "Co-S²P's sub-models: ⌊L·√R_n⌋ consecutive trained blocks rolling with the round (frozen below, dropped above, read out at the exit on top), √R_n of each group's units",
    paper: "Li et al., Unity is Power (Co-S²P), arXiv:2410.08457, §2.1–2.2");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_roll_over_every_block_with_the_papers_sizes() {
        let policy = RollingDepth::new(RollingDepthConfig::default());
        // E1 (L = 8): R = 0.0625 → √R = 0.25 → k = 2, starts 0..=6; R = 0.5625 → k = 6, 0..=2.
        assert_eq!(policy.split(0.0625), (0.25, 0.25));
        let weak: Vec<_> = (0..8).map(|q| RollingDepth::window(8, 0.25, q)).collect();
        assert_eq!(weak, [0..2, 1..3, 2..4, 3..5, 4..6, 5..7, 6..8, 0..2]);
        let strong: Vec<_> = (0..4).map(|q| RollingDepth::window(8, 0.75, q)).collect();
        assert_eq!(strong, [0..6, 1..7, 2..8, 0..6]);
        // E3 (L = 16): R = 0.015625 → k = 2; Table 8's ρ = 0.5 at R = 0.0625: R^d = 0.354 → 2.83 → 2.
        assert_eq!(RollingDepth::window(16, 0.125, 3), 3..5);
        let rho = RollingDepth::new(RollingDepthConfig { width_over_depth: 0.5, ..RollingDepthConfig::default() });
        let (d, w) = rho.split(0.0625);
        assert!((d - 0.3536).abs() < 1e-4 && (w - 0.1768).abs() < 1e-4);
        assert_eq!(RollingDepth::window(8, d, 0), 0..2);
        // R = 0.5625 at ρ = 0.5: R^d = 1.06 is clipped to 1 and R^w becomes 0.5625.
        assert_eq!(rho.split(0.5625), (1.0, 0.5625));
        let wide = RollingDepth::new(RollingDepthConfig { width_over_depth: 2.0, ..RollingDepthConfig::default() });
        assert_eq!(wide.split(0.5625), (0.5625, 1.0));
    }

    #[test]
    fn a_strong_client_reads_out_where_the_weak_clients_windows_end() {
        // E1's mix: one NX (21 TOPS) at R = 0.0625 (k = 2), seven AGX at R = 0.5625 (k = 6).
        let speeds = [21.0, 200.0, 200.0, 200.0, 275.0, 275.0, 275.0, 275.0];
        let profiles = fl_core::testing::profiles(&speeds);
        let policy = RollingDepth::new(RollingDepthConfig::default());
        // A strong client's window 1..7 reads out after 1 + 2 = 3 blocks too; a weak one's, only at its top.
        assert_eq!(policy.inner_exits(&(1..7), 8, &profiles), [3]);
        assert_eq!(policy.inner_exits(&(4..6), 8, &profiles), Vec::<usize>::new());
    }

    #[test]
    fn a_bad_ratio_split_names_its_key() {
        let bad = RollingDepthConfig { width_over_depth: 0.0, ..RollingDepthConfig::default() };
        assert_eq!(bad.validate().unwrap_err().key, "width_over_depth");
        let levels = RollingDepthConfig {
            ratios: WidthConfig { levels: vec![1.5], ..WidthConfig::default() },
            ..RollingDepthConfig::default()
        };
        assert_eq!(levels.validate().unwrap_err().key, "ratios.levels");
    }
}
