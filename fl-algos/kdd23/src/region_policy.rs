//! `region-partition`: the KDD'23 mask policy (§6.2, scheduled as in the authors' code). Each
//! maskable tensor is split into K regions; every round each client trains some regions: L = 2
//! of 4 (50%), S = 1 of 4 (25%), MIX = a random half of the clients at L and the rest at S (a
//! uniform subset, or with `mix_draw = "code-coinflip"` the code's coin flips), or,
//! `by-capability`, the clients with at least `l_min_of_fastest` of the fastest one's
//! throughput at L. Round 0 trains the full model, and every 10th round forces a non-full cover
//! (L: regions {3,4}, S: {4}). Fixed tables of per-client assignments (the paper's Figs. 3–4,
//! code `typep` ids) can replace the draws.
//!
//! Two baselines are the same policy with another `choice`: SplitFL draws one pair per round
//! for every client (`shared`), IST splits into K = N regions and gives client n region n
//! (`own`).

use fl_core::tch::Tensor;
use fl_core::{Error, InvalidKey, Mask, MaskCtx, MaskPolicy, Result, StateIn, StateOut, Validate};
use rand::seq::index;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::levels::{FirstRound, Level, LevelDraw, LevelRule, MixDraw};
use crate::maskable::tensor_indices;
use crate::regions::{Granularity, PartitionKind, argsort_regions, random_regions, region_mask};
use crate::units;

/// Which regions a client trains, once the level fixes how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegionChoice {
    /// Each client draws its own regions uniformly (the "Arb." levels).
    #[default]
    PerClient,
    /// One draw per round, trained by every client (SplitFL's "SameStr.").
    Shared,
    /// Client n trains region n mod K alone, whatever the level (IST's "U.A." with K = N).
    Own,
}

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegionPolicyConfig {
    /// K, the regions each maskable tensor is split into (at least 1).
    #[default(4)]
    pub regions: i64,
    /// The maskable tensors (default as in the authors' code); every other tensor is trained by
    /// all clients.
    #[default(vec!["fc1.weight".into()])]
    pub tensors: Vec<String>,
    /// How a tensor's elements are assigned to regions.
    #[default(PartitionKind::StaticRandom)]
    pub partition: PartitionKind,
    /// What a region is made of: single elements, output units (rows), or the model's units
    /// (heads, neurons, channels) in all their slices.
    #[default(Granularity::Element)]
    pub granularity: Granularity,
    /// How much a client trains: everything, L, S, a mix of L and S, or by capability.
    #[default(Level::L)]
    pub level: Level,
    /// Which regions a client trains once its level fixes how many.
    #[default(RegionChoice::PerClient)]
    pub choice: RegionChoice,
    /// Regions a client at level L trains, in 1..=K.
    #[default(2)]
    pub l_regions: i64,
    /// Regions a client at level S trains, in 1..=K.
    #[default(1)]
    pub s_regions: i64,
    /// Level `mix`: the share of the clients at L, in [0, 1].
    #[default(0.5)]
    pub mix_l_share: f64,
    /// Level `mix`: how the clients at L are drawn.
    #[default(MixDraw::Subset)]
    pub mix_draw: MixDraw,
    /// Level `by-capability`: clients with at least this share of the fastest client's
    /// throughput train at L.
    #[default(0.5)]
    pub l_min_of_fastest: f64,
    /// Whether round 0 trains the full model or follows the level.
    #[default(FirstRound::Full)]
    pub first_round: FirstRound,
    /// Every this many rounds (round > 0), L clients train the last `l_regions` regions and S
    /// clients the last `s_regions`, so some regions go uncovered. 0: never.
    #[default(10)]
    pub non_cover_every: u64,
    /// Per-round tables of per-client code `typep` ids (K = 4): round r ≥ 1 uses table
    /// `r mod len`. Empty: random draws.
    #[default(Vec::new())]
    pub assignments: Vec<Vec<u32>>,
}

impl RegionPolicyConfig {
    pub fn level_rule(&self) -> LevelRule {
        LevelRule {
            level: self.level,
            mix_l_share: self.mix_l_share,
            mix_draw: self.mix_draw,
            l_min_of_fastest: self.l_min_of_fastest,
        }
    }
}

impl Validate for RegionPolicyConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.regions < 1 {
            return Err(InvalidKey::new("regions", format!("expected at least 1, got {}", self.regions)));
        }
        for (key, n) in [("l_regions", self.l_regions), ("s_regions", self.s_regions)] {
            if n < 1 || n > self.regions {
                return Err(InvalidKey::new(key, format!("expected 1..={}, got {n}", self.regions)));
            }
        }
        self.level_rule().validate()?;
        if self.choice == RegionChoice::Shared && matches!(self.level, Level::Mix | Level::ByCapability) {
            return Err(InvalidKey::new(
                "choice",
                "\"shared\" gives every client the same regions; use level \"l\" or \"s\"",
            ));
        }
        if self.tensors.is_empty() {
            return Err(InvalidKey::new("tensors", "name at least one maskable tensor"));
        }
        if !self.assignments.is_empty() {
            if self.regions != 4 {
                return Err(InvalidKey::new("assignments", "typep tables describe K = 4 regions; set regions = 4"));
            }
            if let Some(bad) = self.assignments.iter().flatten().find(|&&t| !(1..=15).contains(&t)) {
                return Err(InvalidKey::new("assignments", format!("typep ids are 1..=15, got {bad}")));
            }
        }
        if self.granularity != Granularity::Element && self.partition == PartitionKind::CodeArgsort {
            return Err(InvalidKey::new(
                "granularity",
                "code-argsort partitions elements; use granularity = \"element\"",
            ));
        }
        Ok(())
    }
}

/// The regions (0-based) of the code's `typep` id (K = 4).
pub fn typep_regions(typep: u32) -> Vec<i64> {
    const PAIRS: [[i64; 2]; 6] = [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]];
    match typep {
        1 => vec![0, 1, 2, 3],
        2..=5 => (0..4).filter(|&r| r != 5 - typep as i64).collect(),
        6..=11 => PAIRS[(typep - 6) as usize].to_vec(),
        12..=15 => vec![typep as i64 - 12],
        _ => unreachable!("validated typep"),
    }
}

pub struct RegionPolicy {
    cfg: RegionPolicyConfig,
    /// Region ids per maskable tensor (structure index, ids) and the round they were drawn for.
    partition: Option<(u64, Vec<(usize, Tensor)>)>,
    levels: LevelDraw,
    /// The regions of the round under `RegionChoice::Shared`.
    shared: Option<(u64, Vec<i64>)>,
    diagnostics: Coverage,
}

impl RegionPolicy {
    pub fn new(cfg: RegionPolicyConfig) -> Self {
        RegionPolicy {
            cfg,
            partition: None,
            levels: LevelDraw::default(),
            shared: None,
            diagnostics: Coverage::default(),
        }
    }

    /// The regions `ctx.client` trains in round `ctx.version`.
    fn choose(&mut self, ctx: &mut MaskCtx) -> Vec<i64> {
        let round = ctx.version;
        let k = self.cfg.regions;
        let all: Vec<i64> = (0..k).collect();
        if self.cfg.level == Level::Full || (round == 0 && self.cfg.first_round == FirstRound::Full) {
            return all;
        }
        if !self.cfg.assignments.is_empty() {
            let table = &self.cfg.assignments[(round % self.cfg.assignments.len() as u64) as usize];
            return typep_regions(table[ctx.client % table.len()]);
        }
        if self.cfg.choice == RegionChoice::Own {
            return vec![ctx.client as i64 % k];
        }
        let cfg = &self.cfg;
        let at_l = self.levels.at_l(ctx, &cfg.level_rule());
        let size = if at_l { cfg.l_regions } else { cfg.s_regions };
        if self.cfg.non_cover_every > 0 && round > 0 && round.is_multiple_of(self.cfg.non_cover_every) {
            return (k - size..k).collect();
        }
        let draw = |rng: &mut fl_core::rng::Rng| {
            let mut chosen: Vec<i64> =
                index::sample(rng, k as usize, size as usize).into_iter().map(|r| r as i64).collect();
            chosen.sort_unstable();
            chosen
        };
        if self.cfg.choice == RegionChoice::Shared {
            if self.shared.as_ref().is_none_or(|(r, _)| *r != round) {
                self.shared = Some((round, draw(ctx.rng)));
            }
            return self.shared.as_ref().expect("drawn above").1.clone();
        }
        draw(ctx.rng)
    }

    /// Fails, before anything is drawn or recorded, where K exceeds the units of a maskable
    /// tensor: regions would be empty, and the per-region bookkeeping would grow with K.
    fn check_regions(&self, ctx: &MaskCtx) -> Result<()> {
        if self.cfg.granularity == Granularity::Unit {
            units::require_groups("region-partition", ctx.structure)?;
            if let Some(g) = ctx.structure.groups.iter().find(|g| g.units < self.cfg.regions) {
                return Err(Error::Key(InvalidKey::new(
                    "mask.regions",
                    format!("{} regions cannot split the units of `{}`: it has {}", self.cfg.regions, g.name, g.units),
                )));
            }
            return Ok(());
        }
        for t in tensor_indices("region-partition", &self.cfg.tensors, ctx.structure)? {
            let shape = &ctx.global.shapes()[t];
            let (units, what) = match self.cfg.granularity {
                Granularity::Element => (shape.iter().product::<i64>(), "elements"),
                Granularity::Neuron => (shape.first().copied().unwrap_or(1), "rows"),
                Granularity::Unit => unreachable!("unit regions are checked against the groups above"),
            };
            if self.cfg.regions > units {
                let name = &ctx.structure.tensors[t].name;
                return Err(Error::Key(InvalidKey::new(
                    "mask.regions",
                    format!("{} regions cannot split `{name}`: it has {units} {what}", self.cfg.regions),
                )));
            }
        }
        Ok(())
    }

    /// Region ids of the maskable tensors for this round, drawn or recomputed as configured.
    fn partition(&mut self, ctx: &mut MaskCtx) -> Result<&[(usize, Tensor)]> {
        let round = ctx.version;
        let stale = match (&self.partition, self.cfg.partition) {
            (None, _) => true,
            (Some(_), PartitionKind::StaticRandom) => false,
            (Some((r, _)), _) => *r != round,
        };
        if stale && self.cfg.granularity == Granularity::Unit {
            let shapes = ctx.global.shapes();
            let device = ctx.global.tensors()[0].device();
            let ids = units::unit_regions(ctx.structure, &shapes, self.cfg.regions, ctx.rng, device);
            self.partition = Some((round, ids));
        } else if stale {
            let mut ids = Vec::with_capacity(self.cfg.tensors.len());
            for t in tensor_indices("region-partition", &self.cfg.tensors, ctx.structure)? {
                let w = &ctx.global.tensors()[t];
                let regions = match self.cfg.partition {
                    PartitionKind::CodeArgsort => argsort_regions(w, self.cfg.regions),
                    _ => random_regions(&w.size(), self.cfg.regions, self.cfg.granularity, ctx.rng, w.device()),
                };
                ids.push((t, regions));
            }
            self.partition = Some((round, ids));
        }
        Ok(&self.partition.as_ref().expect("drawn above").1)
    }
}

impl MaskPolicy for RegionPolicy {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        if self.partition.is_none() {
            self.check_regions(ctx)?;
        }
        let chosen = self.choose(ctx);
        self.diagnostics.record(ctx.version, ctx.client, &chosen, self.cfg.regions, ctx.num_clients());
        if chosen.len() as i64 == self.cfg.regions {
            return Ok(Mask::Full);
        }
        let tensors = ctx.structure.tensors.len();
        let ids = self.partition(ctx)?;
        let mut masks: Vec<Option<Tensor>> = (0..tensors).map(|_| None).collect();
        for (t, regions) in ids {
            units::combine(&mut masks, *t, region_mask(regions, &chosen));
        }
        Ok(Mask::Elementwise(masks))
    }

    fn diagnostics(&self) -> Vec<(String, f64)> {
        self.diagnostics.report()
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        let partition =
            self.partition.as_ref().map(|(round, ids)| (*round, ids.iter().map(|(t, _)| *t).collect::<Vec<_>>()));
        out.put("partition", &partition)?;
        let regions: Vec<Option<Tensor>> =
            self.partition.iter().flat_map(|(_, ids)| ids.iter().map(|(_, r)| Some(r.shallow_clone()))).collect();
        out.put_tensor_list("partition_regions", &regions)?;
        out.put("levels", &self.levels)?;
        out.put("shared", &self.shared)?;
        out.put("coverage", &self.diagnostics)
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        let partition: Option<(u64, Vec<usize>)> = saved.get("partition")?;
        let regions = saved.tensor_list("partition_regions")?;
        self.partition = partition.map(|(round, tensors)| {
            (round, tensors.into_iter().zip(regions).filter_map(|(t, r)| r.map(|r| (t, r))).collect())
        });
        self.levels = saved.get("levels")?;
        self.shared = saved.get("shared")?;
        self.diagnostics = saved.get("coverage")?;
        Ok(())
    }
}

/// The paper's coverage diagnostics (§3, eq. 3; Assumption 6; Figs. 3–4): Γ_q per region,
/// |S_q|, the running Γ* and S*, and τ_q (the longest run of rounds a client has gone without
/// training a region).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Coverage {
    round: Option<u64>,
    gamma: Vec<u64>,
    /// Rounds since client n last trained region i, `[n][i]`, as of the last finished round.
    since: Vec<Vec<u64>>,
    /// Regions each client trains in the current round.
    current: Vec<Option<Vec<i64>>>,
    gamma_star: Option<u64>,
    s_star: Option<u64>,
}

impl Coverage {
    fn record(&mut self, round: u64, client: usize, chosen: &[i64], k: i64, clients: usize) {
        if self.round != Some(round) {
            self.finish_round();
            self.round = Some(round);
            self.gamma = vec![0; k as usize];
            self.current = vec![None; clients];
            if self.since.len() != clients {
                self.since = vec![vec![0; k as usize]; clients];
            }
        }
        for &r in chosen {
            self.gamma[r as usize] += 1;
        }
        self.current[client] = Some(chosen.to_vec());
    }

    /// Folds the finished round into τ, Γ* and S* (round 0, full by design, is left out of the
    /// minima as in the paper).
    fn finish_round(&mut self) {
        let Some(round) = self.round else { return };
        for (n, regions) in self.current.iter().enumerate() {
            for (i, s) in self.since[n].iter_mut().enumerate() {
                let trained = regions.as_ref().is_some_and(|r| r.contains(&(i as i64)));
                *s = if trained { 0 } else { *s + 1 };
            }
        }
        if round > 0 {
            let covered: Vec<u64> = self.gamma.iter().copied().filter(|&g| g > 0).collect();
            let min_gamma = covered.iter().copied().min().unwrap_or(0);
            self.gamma_star = Some(self.gamma_star.map_or(min_gamma, |g| g.min(min_gamma)));
            let s = covered.len() as u64;
            self.s_star = Some(self.s_star.map_or(s, |x| x.min(s)));
        }
    }

    fn report(&self) -> Vec<(String, f64)> {
        if self.round.is_none() {
            return Vec::new();
        }
        let mut out: Vec<(String, f64)> =
            self.gamma.iter().enumerate().map(|(i, g)| (format!("gamma_region{}", i + 1), *g as f64)).collect();
        out.push(("covered_regions".into(), self.gamma.iter().filter(|&&g| g > 0).count() as f64));
        if let Some(g) = self.gamma_star {
            out.push(("gamma_star".into(), g as f64));
        }
        if let Some(s) = self.s_star {
            out.push(("s_star".into(), s as f64));
        }
        // τ including the current round.
        let tau = self
            .since
            .iter()
            .zip(&self.current)
            .flat_map(|(since, regions)| {
                since.iter().enumerate().map(move |(i, s)| {
                    if regions.as_ref().is_some_and(|r| r.contains(&(i as i64))) { 0 } else { s + 1 }
                })
            })
            .max()
            .unwrap_or(0);
        out.push(("tau".into(), tau as f64));
        out
    }
}

fl_core::register!(MaskPolicy "region-partition" => RegionPolicy::new(RegionPolicyConfig),
    summary: "K regions per maskable tensor; clients train 2 (L), 1 (S) or a mix; round 0 full, every 10th non-covering",
    paper: "Wang et al., KDD 2023");
