//! `barrier-rounds`: the paper's Algorithm 1. Each round samples J of the C clients (without
//! replacement by default; with replacement, duplicates trained as separate jobs or merged
//! with their multiplicity), gives each a delay d_c ~ U(0, D) in virtual seconds before it
//! starts and a staleness τ_c, starts it from the global model of τ_c versions ago (kept in a
//! bounded history), waits for all of them (the barrier), aggregates, and optionally stops
//! once ‖θ^(t+1) − θ^(t)‖ ≤ κ.
//!
//! The staleness τ_c is not simulated by the paper. Models (`staleness`): `"none"` (τ = 0, in
//! effect the authors' code), `"uniform"` (τ ~ U{0..min(τ_max, t)}), `"from-delay"` (the later
//! a client starts, the staler its model: τ = min(t, τ_max, ⌊(τ_max + 1)·d/D⌋)).
//!
//! The delay the trainer's learning rate γ₀/(√(e+1)(1 + α·d)) reads (`lr_delay`): the sampled
//! d_c (the paper's text), D (the code's constant `delay_t`), τ_c in versions (Lemma 3), or a
//! fixed value (the code's MNIST SFL baseline uses 0.02).
//!
//! The authors' code differs from the paper (variant V2, `broadcast = false`,
//! `common_init = false`): each client keeps its own model from an independent
//! initialisation, trains it whenever it is drawn, and never receives the aggregate; the
//! server model is computed and evaluated but never sent. SFL (V3) is this scheduler with
//! `max_delay_s = 0`.

use std::collections::VecDeque;

use fl_core::{Error, InvalidKey, JobStart, ParamSet, Result, SchedCtx, Scheduler, StateIn, StateOut, Validate};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::sampling::{self, Sampling};

/// Where a client's staleness τ_c (versions) comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StalenessModel {
    /// τ = 0: every client starts from the current global model.
    #[default]
    None,
    /// τ ~ U{0..min(τ_max, t)}.
    Uniform,
    /// τ = min(t, τ_max, ⌊(τ_max + 1)·d/D⌋): a longer delay, a staler start.
    FromDelay,
}

/// The delay d handed to the trainer's delay-aware learning rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LrDelay {
    /// The client's sampled delay d_c (virtual seconds).
    #[default]
    Sampled,
    /// D, the largest delay (the authors' code).
    Max,
    /// τ_c in versions.
    Versions,
    /// `lr_delay_value`, whatever the client.
    Fixed,
}

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BarrierRoundsConfig {
    /// Rounds to run, at least 1.
    #[default(1000)]
    pub rounds: u64,
    /// J, clients (draws) per round.
    #[default(5)]
    pub clients_per_round: usize,
    /// How the J clients of a round are drawn: with or without replacement.
    #[default(Sampling::WithoutReplacement)]
    pub sampling: Sampling,
    /// With replacement: train a client drawn k times once, weighted k times.
    #[default(false)]
    pub dedup: bool,
    /// D: delays are drawn from U(0, D) virtual seconds (0: no delay, SFL).
    #[default(2.0)]
    pub max_delay_s: f64,
    /// Where a client's staleness τ_c comes from (see the module doc).
    #[default(StalenessModel::None)]
    pub staleness: StalenessModel,
    /// τ_max, the largest staleness in versions.
    #[default(2)]
    pub tau_max: u64,
    /// Global models kept for stale starts (absent: τ_max + 1).
    #[default(None)]
    pub history: Option<usize>,
    /// The delay the trainer's learning rate reads: sampled, D, τ_c or `lr_delay_value`.
    #[default(LrDelay::Sampled)]
    pub lr_delay: LrDelay,
    /// The delay with `lr_delay = "fixed"`.
    #[default(0.0)]
    pub lr_delay_value: f64,
    /// Stop once ‖θ^(t+1) − θ^(t)‖ ≤ κ (absent: run all rounds).
    #[default(None)]
    pub kappa: Option<f64>,
    /// Clients start from the (possibly stale) global model; false: each trains its own.
    #[default(true)]
    pub broadcast: bool,
    /// Without broadcast: own models start from the common θ⁽⁰⁾ (true) or from independent
    /// initialisations (false, the authors' code).
    #[default(true)]
    pub common_init: bool,
}

impl Validate for BarrierRoundsConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.rounds == 0 {
            return Err(InvalidKey::new("rounds", "expected at least 1"));
        }
        if self.clients_per_round == 0 {
            return Err(InvalidKey::new("clients_per_round", "expected at least 1 (J in 1..=C)"));
        }
        if !(self.max_delay_s >= 0.0 && self.max_delay_s.is_finite()) {
            return Err(InvalidKey::new(
                "max_delay_s",
                format!("expected a finite number ≥ 0, got {}", self.max_delay_s),
            ));
        }
        if let Some(k) = self.kappa.filter(|k| !(*k > 0.0)) {
            return Err(InvalidKey::new("kappa", format!("expected a positive threshold, got {k}")));
        }
        if let Some(h) = self.history.filter(|&h| (h as u64) < self.tau_max + 1) {
            return Err(InvalidKey::new(
                "history",
                format!(
                    "{h} global models cannot serve a staleness of τ_max = {} (keep at least τ_max + 1 = {})",
                    self.tau_max,
                    self.tau_max + 1
                ),
            ));
        }
        if self.dedup && self.sampling == Sampling::WithoutReplacement {
            return Err(InvalidKey::new("dedup", "only with sampling = \"with-replacement\""));
        }
        if !(self.lr_delay_value >= 0.0) {
            return Err(InvalidKey::new(
                "lr_delay_value",
                format!("expected a number ≥ 0, got {}", self.lr_delay_value),
            ));
        }
        if !self.broadcast && self.staleness != StalenessModel::None {
            return Err(InvalidKey::new("staleness", "clients without broadcast train their own models; use \"none\""));
        }
        Ok(())
    }
}

impl BarrierRoundsConfig {
    fn history_len(&self) -> usize {
        self.history.unwrap_or(self.tau_max as usize + 1)
    }
}

pub struct BarrierRounds {
    cfg: BarrierRoundsConfig,
    round: u64,
    awaiting: usize,
    /// Recent global models, oldest first, with their versions.
    history: VecDeque<(u64, ParamSet)>,
    /// Without broadcast: each client's own model.
    own: Vec<ParamSet>,
}

impl BarrierRounds {
    pub fn new(cfg: BarrierRoundsConfig) -> Self {
        BarrierRounds { cfg, round: 0, awaiting: 0, history: VecDeque::new(), own: Vec::new() }
    }

    fn staleness(&self, ctx: &mut SchedCtx, delay: f64) -> u64 {
        let cap = self.cfg.tau_max.min(self.round);
        match self.cfg.staleness {
            StalenessModel::None => 0,
            StalenessModel::Uniform => ctx.rng().random_range(0..=cap),
            StalenessModel::FromDelay if self.cfg.max_delay_s > 0.0 => {
                (((self.cfg.tau_max + 1) as f64 * delay / self.cfg.max_delay_s) as u64).min(cap)
            }
            StalenessModel::FromDelay => 0,
        }
    }

    fn start_round(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        let clients = ctx.num_clients();
        let draws = sampling::draw(ctx.rng(), clients, self.cfg.clients_per_round, self.cfg.sampling);
        let jobs: Vec<(usize, u32)> =
            if self.cfg.dedup { sampling::merge_duplicates(&draws) } else { draws.iter().map(|&c| (c, 1)).collect() };
        let (mut delay_sum, mut delay_max) = (0.0, 0.0f64);
        for &(client, multiplicity) in &jobs {
            let delay =
                if self.cfg.max_delay_s > 0.0 { ctx.rng().random_range(0.0..self.cfg.max_delay_s) } else { 0.0 };
            let tau = self.staleness(ctx, delay);
            let from = if self.cfg.broadcast {
                let version = ctx.version() - tau;
                let (_, params) =
                    self.history.iter().find(|(v, _)| *v == version).ok_or_else(|| {
                        Error::component("barrier-rounds", format!("version {version} left the history"))
                    })?;
                (version, params.shallow_clone())
            } else {
                (ctx.version(), self.own[client].shallow_clone())
            };
            let lr_delay = match self.cfg.lr_delay {
                LrDelay::Sampled => delay,
                LrDelay::Max => self.cfg.max_delay_s,
                LrDelay::Versions => tau as f64,
                LrDelay::Fixed => self.cfg.lr_delay_value,
            };
            ctx.dispatch_job(
                client,
                JobStart { from: Some(from), wait_s: delay, delay: lr_delay, multiplicity, concurrent: true },
            )?;
            delay_sum += delay;
            delay_max = delay_max.max(delay);
        }
        ctx.set_diagnostic("mean_delay_s", delay_sum / jobs.len() as f64);
        ctx.set_diagnostic("max_delay_s", delay_max);
        self.awaiting = jobs.len();
        Ok(())
    }

    fn remember_global(&mut self, ctx: &SchedCtx) {
        self.history.push_back((ctx.version(), ctx.global().shallow_clone()));
        while self.history.len() > self.cfg.history_len() {
            self.history.pop_front();
        }
    }
}

impl Scheduler for BarrierRounds {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        let (c, j) = (ctx.num_clients(), self.cfg.clients_per_round);
        if self.cfg.sampling == Sampling::WithoutReplacement && j > c {
            return Err(Error::Key(InvalidKey::new(
                "scheduler.clients_per_round",
                format!("J = {j} exceeds the {c} clients (without replacement J must be in 1..={c})"),
            )));
        }
        self.remember_global(ctx);
        if !self.cfg.broadcast {
            self.own =
                (0..c)
                    .map(|client| {
                        if self.cfg.common_init { ctx.global().shallow_clone() } else { ctx.fresh_model(client as u64) }
                    })
                    .collect();
        }
        self.start_round(ctx)
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        if !self.cfg.broadcast {
            let update = ctx.pending_updates().iter().rev().find(|u| u.client == client);
            self.own[client] = update.expect("the arrival is pending").new_params();
        }
        self.awaiting -= 1;
        if self.awaiting > 0 {
            return Ok(());
        }
        let previous = ctx.global().shallow_clone();
        ctx.aggregate()?;
        self.round += 1;
        self.remember_global(ctx);
        let converged = self.cfg.kappa.is_some_and(|kappa| {
            let change = ctx.global().sub(&previous).norm_sq().double_value(&[]).sqrt();
            change <= kappa
        });
        if converged || self.round >= self.cfg.rounds {
            ctx.stop();
            return Ok(());
        }
        self.start_round(ctx)
    }

    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.rounds)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("round", &self.round)?;
        out.put("awaiting", &self.awaiting)?;
        out.put("history_versions", &self.history.iter().map(|(v, _)| *v).collect::<Vec<_>>())?;
        out.put_params_list("history", &self.history.iter().map(|(_, p)| Some(p)).collect::<Vec<_>>())?;
        out.put_params_list("own", &self.own.iter().map(Some).collect::<Vec<_>>())
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        let missing = || Error::component("barrier-rounds", "a checkpoint without a saved model");
        self.round = saved.get("round")?;
        self.awaiting = saved.get("awaiting")?;
        let versions: Vec<u64> = saved.get("history_versions")?;
        let history = saved.params_list("history")?;
        self.history =
            versions.into_iter().zip(history).map(|(v, p)| Ok((v, p.ok_or_else(missing)?))).collect::<Result<_>>()?;
        self.own = saved.params_list("own")?.into_iter().map(|p| p.ok_or_else(missing)).collect::<Result<_>>()?;
        Ok(())
    }
}

fl_core::register!(Scheduler "barrier-rounds" => BarrierRounds::new(BarrierRoundsConfig),
    summary: "rounds of J sampled clients with delays U(0, D), stale starts θ^(t−τ), a barrier, optional stop at ‖Δθ‖ ≤ κ",
    paper: "Forootani and Iervolino, Asynchronous FL with non-convex client objectives, Algorithm 1");
