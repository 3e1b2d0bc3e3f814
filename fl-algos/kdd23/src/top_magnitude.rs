//! `top-magnitude`: PruneFL as the KDD'23 paper runs it (Tables 2–3; it does not say how). Each
//! round a client trains the most important ρ of every maskable tensor, ρ = `l_fraction` at L
//! and `s_fraction` at S (MIX: a random `mix_l_share` of the clients at L; by capability: the
//! clients with at least `l_min_of_fastest` of the fastest one's throughput). Importance is
//! |θ_q| ("high-weight parameter selection"), or with `importance = "grad-sq"` the square of
//! the last aggregated update θ_q − θ_{q−1}, the server-side stand-in for PruneFL's squared
//! aggregated gradient (magnitude until a first update exists). Every client at a level gets
//! the same mask and the masks are nested, so the top quarter is trained by everyone. Round 0
//! is full.

use fl_core::tch::{Kind, Tensor};
use fl_core::{InvalidKey, Mask, MaskCtx, MaskPolicy, Result, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::levels::{FirstRound, Level, LevelDraw, LevelRule, MixDraw};
use crate::maskable::tensor_indices;
use crate::regions::Granularity;
use crate::units;

/// What ranks the parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Importance {
    /// |θ_q|.
    #[default]
    Magnitude,
    /// (θ_q − θ_{q−1})².
    GradSq,
}

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopMagnitudeConfig {
    /// The maskable tensors (default as in the authors' code).
    #[default(vec!["fc1.weight".into()])]
    pub tensors: Vec<String>,
    /// How much a client trains: everything, L, S, a mix of L and S, or by capability.
    #[default(Level::L)]
    pub level: Level,
    /// The share ρ of each maskable tensor a client at L trains, in (0, 1].
    #[default(0.5)]
    pub l_fraction: f64,
    /// The share ρ of each maskable tensor a client at S trains, in (0, 1].
    #[default(0.25)]
    pub s_fraction: f64,
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
    /// What ranks the parameters: |θ| or the squared last update.
    #[default(Importance::Magnitude)]
    pub importance: Importance,
    /// What is kept or masked: single entries of `tensors` (the KDD'23 runs), or the model's
    /// units (heads, neurons, channels), ranked by their entries' summed importance, the top ρ
    /// of every unit group (`tensors` is then not read; `neuron` is not offered).
    #[default(Granularity::Element)]
    pub granularity: Granularity,
}

impl TopMagnitudeConfig {
    pub fn level_rule(&self) -> LevelRule {
        LevelRule {
            level: self.level,
            mix_l_share: self.mix_l_share,
            mix_draw: self.mix_draw,
            l_min_of_fastest: self.l_min_of_fastest,
        }
    }
}

impl Validate for TopMagnitudeConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        InvalidKey::in_unit_interval("l_fraction", self.l_fraction)?;
        InvalidKey::in_unit_interval("s_fraction", self.s_fraction)?;
        self.level_rule().validate()?;
        if self.tensors.is_empty() {
            return Err(InvalidKey::new("tensors", "name at least one maskable tensor"));
        }
        if self.granularity == Granularity::Neuron {
            return Err(InvalidKey::new("granularity", "expected \"element\" or \"unit\""));
        }
        Ok(())
    }
}

/// The masks of one round, per level.
struct RoundMasks {
    round: u64,
    l: Vec<Option<Tensor>>,
    s: Vec<Option<Tensor>>,
}

pub struct TopMagnitude {
    cfg: TopMagnitudeConfig,
    masks: Option<RoundMasks>,
    levels: LevelDraw,
    /// The global model the last masks were computed from (for `grad-sq`).
    previous: Option<(u64, Vec<Tensor>)>,
}

impl TopMagnitude {
    pub fn new(cfg: TopMagnitudeConfig) -> Self {
        TopMagnitude { cfg, masks: None, levels: LevelDraw::default(), previous: None }
    }

    fn compute(&mut self, ctx: &MaskCtx) -> Result<RoundMasks> {
        let by_unit = self.cfg.granularity == Granularity::Unit;
        let indices: Vec<usize> = if by_unit {
            units::require_groups("top-magnitude", ctx.structure)?;
            let mut members: Vec<usize> =
                ctx.structure.groups.iter().flat_map(|g| g.members.iter().map(|m| m.tensor)).collect();
            members.sort_unstable();
            members.dedup();
            members
        } else {
            tensor_indices("top-magnitude", &self.cfg.tensors, ctx.structure)?
        };
        let tensors = ctx.structure.tensors.len();
        let previous = self.previous.as_ref().filter(|(v, _)| *v < ctx.version).map(|(_, p)| p);
        let scores: Vec<Tensor> = (0..tensors)
            .map(|t| {
                let w = &ctx.global.tensors()[t];
                match (indices.contains(&t), self.cfg.importance, previous) {
                    (false, _, _) => Tensor::new(),
                    (true, Importance::GradSq, Some(p)) => (w - &p[t]).square(),
                    (true, _, _) => w.abs(),
                }
            })
            .collect();
        let (l, s) = if by_unit {
            let structure = ctx.structure;
            (
                units::top_units(structure, &scores, self.cfg.l_fraction),
                units::top_units(structure, &scores, self.cfg.s_fraction),
            )
        } else {
            let top = |fraction| scores.iter().map(|s| s.defined().then(|| top_fraction(s, fraction))).collect();
            (top(self.cfg.l_fraction), top(self.cfg.s_fraction))
        };
        if self.cfg.importance == Importance::GradSq {
            let w = ctx.global.tensors();
            let snapshot = (0..tensors).map(|t| if indices.contains(&t) { w[t].copy() } else { Tensor::new() });
            self.previous = Some((ctx.version, snapshot.collect()));
        }
        Ok(RoundMasks { round: ctx.version, l, s })
    }
}

/// The 0/1 mask of the `fraction · numel` largest entries of `score` (rounded).
fn top_fraction(score: &Tensor, fraction: f64) -> Tensor {
    let flat = score.flatten(0, -1);
    let n = flat.numel() as i64;
    let k = ((n as f64) * fraction).round() as i64;
    let (_, idx) = flat.topk(k, 0, true, false);
    flat.zeros_like().index_fill(0, &idx, 1.0).reshape(score.size()).to_kind(Kind::Float)
}

impl MaskPolicy for TopMagnitude {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        let cfg = &self.cfg;
        if cfg.level == Level::Full || (ctx.version == 0 && cfg.first_round == FirstRound::Full) {
            return Ok(Mask::Full);
        }
        let at_l = self.levels.at_l(ctx, &cfg.level_rule());
        if self.masks.as_ref().is_none_or(|m| m.round != ctx.version) {
            self.masks = Some(self.compute(ctx)?);
        }
        let masks = self.masks.as_ref().expect("computed above");
        let chosen = if at_l { &masks.l } else { &masks.s };
        Ok(Mask::Elementwise(chosen.iter().map(|m| m.as_ref().map(Tensor::shallow_clone)).collect()))
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("round", &self.masks.as_ref().map(|m| m.round))?;
        if let Some(m) = &self.masks {
            out.put_tensor_list("l", &m.l)?;
            out.put_tensor_list("s", &m.s)?;
        }
        out.put("levels", &self.levels)?;
        out.put("previous_version", &self.previous.as_ref().map(|(v, _)| *v))?;
        if let Some((_, p)) = &self.previous {
            // Tensors the masks do not cover are undefined placeholders.
            let kept: Vec<Option<Tensor>> = p.iter().map(|t| t.defined().then(|| t.shallow_clone())).collect();
            out.put_tensor_list("previous", &kept)?;
        }
        Ok(())
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.masks = match saved.get::<Option<u64>>("round")? {
            Some(round) => Some(RoundMasks { round, l: saved.tensor_list("l")?, s: saved.tensor_list("s")? }),
            None => None,
        };
        self.levels = saved.get("levels")?;
        self.previous = match saved.get::<Option<u64>>("previous_version")? {
            Some(v) => {
                Some((v, saved.tensor_list("previous")?.into_iter().map(|t| t.unwrap_or_else(Tensor::new)).collect()))
            }
            None => None,
        };
        Ok(())
    }
}

fl_core::register!(MaskPolicy "top-magnitude" => TopMagnitude::new(TopMagnitudeConfig),
    summary: "PruneFL as in KDD'23: each client trains the top 50% (L) / 25% (S) of each maskable tensor by |θ|",
    paper: "Jiang et al., Model Pruning Enables Efficient Federated Learning on Edge Devices, IEEE TNNLS 2022");
