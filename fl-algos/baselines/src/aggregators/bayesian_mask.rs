//! `bayesian-mask`: FedPM's server. The global model holds the scores `s` of a
//! `probability-mask` network (keep-probabilities `θ = sigmoid(s)`); each client's update is
//! its trained scores, from which the server draws the binary mask the client would upload,
//! `m_k ~ Bernoulli(sigmoid(s_k))`, and counts it into a Beta posterior per weight:
//! `α ← α + Σ_k m_k`, `β ← β + Σ_k (1 − m_k)`; the new probability is the posterior mode
//! `θ = (α − 1)/(α + β − 2)`, kept inside `[clamp, 1 − clamp]` so that its score
//! `logit(θ)` stays finite and trainable. The posterior restarts from the prior `Beta(λ₀, λ₀)`
//! every `reset_every` aggregations (FedPM's periodic reset; with λ₀ = 1 and a reset at every
//! aggregation θ is the share of the round's masks that keep the weight).
//!
//! Isik, Pase, Gunduz, Weissman and Zorzi, "Sparse Random Networks for Communication-Efficient
//! Federated Learning", ICLR 2023 (arXiv:2209.15328), Algorithm 2. The masks are drawn
//! server-side from the client's final scores (the same distribution as the client's own draw)
//! from a stream of (`seed`, version, update); tensors whose names end in one of `buffers`
//! (BatchNorm statistics) are not scores and take the sample-weighted mean of the clients'.

use fl_core::rng::{TensorNoise, derive_seed};
use fl_core::tch::{Kind, Tensor};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, InvalidKey, ParamSet, Result, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BayesianMaskConfig {
    /// λ₀ of the prior Beta(λ₀, λ₀), at least 1.
    #[default(1.0)]
    pub prior: f64,
    /// Aggregations between restarts of the posterior from the prior (1: every aggregation).
    #[default(1)]
    pub reset_every: u64,
    /// The probabilities are kept in `[clamp, 1 − clamp]`.
    #[default(1e-3)]
    pub clamp: f64,
    /// Seed of the stream the clients' masks are drawn from.
    #[default(0)]
    pub seed: u64,
    /// Name endings of tensors that are buffers, not scores.
    #[default(vec!["running_mean".into(), "running_var".into()])]
    pub buffers: Vec<String>,
}

impl Validate for BayesianMaskConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.prior >= 1.0 && self.prior.is_finite()) {
            return Err(InvalidKey::new("prior", format!("λ₀ must be at least 1 (a mode exists), got {}", self.prior)));
        }
        if self.reset_every == 0 {
            return Err(InvalidKey::new("reset_every", "must be at least 1"));
        }
        if !(self.clamp > 0.0 && self.clamp < 0.5) {
            return Err(InvalidKey::new("clamp", format!("must be in (0, 0.5), got {}", self.clamp)));
        }
        Ok(())
    }
}

pub struct BayesianMask {
    cfg: BayesianMaskConfig,
    /// The posterior's α and β per tensor (undefined for buffers), once started.
    posterior: Option<(Vec<Tensor>, Vec<Tensor>)>,
    aggregations: u64,
}

impl BayesianMask {
    pub fn new(cfg: BayesianMaskConfig) -> Self {
        BayesianMask { cfg, posterior: None, aggregations: 0 }
    }

    fn is_buffer(&self, name: &str) -> bool {
        self.cfg.buffers.iter().any(|b| name.ends_with(b.as_str()))
    }
}

impl Aggregator for BayesianMask {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let buffer: Vec<bool> = global.names().iter().map(|n| self.is_buffer(n)).collect();
        if self.posterior.is_none() || self.aggregations.is_multiple_of(self.cfg.reset_every) {
            let prior = |t: &Tensor| t.full_like(self.cfg.prior);
            self.posterior =
                Some((global.tensors().iter().map(prior).collect(), global.tensors().iter().map(prior).collect()));
        }
        self.aggregations += 1;
        let (alpha, beta) = self.posterior.as_mut().expect("started above");
        let shapes = global.shapes();
        let samples: f64 = updates.iter().map(|u| u.samples as f64).sum::<f64>().max(1.0);
        let mut buffers: Vec<Tensor> = global.tensors().iter().map(Tensor::zeros_like).collect();
        for (k, u) in updates.iter().enumerate() {
            let mut noise = TensorNoise::new(derive_seed(self.cfg.seed, &[ctx.version, k as u64]));
            let covered = u.mask.dense(&shapes, global.tensors()[0].device());
            for (i, ((g, d), c)) in global.tensors().iter().zip(u.delta.tensors()).zip(&covered).enumerate() {
                if buffer[i] {
                    buffers[i] = &buffers[i] + (g + d) * (u.samples as f64 / samples);
                    continue;
                }
                let theta = (g + d).sigmoid();
                let kept = noise.uniform(&theta.size(), theta.device()).lt_tensor(&theta).to_kind(Kind::Float);
                alpha[i] = &alpha[i] + &kept * c;
                beta[i] = &beta[i] + (1.0 - kept) * c;
            }
        }
        let eps = self.cfg.clamp;
        let tensors = (0..shapes.len())
            .map(|i| {
                if buffer[i] {
                    return buffers[i].shallow_clone();
                }
                let theta = ((&alpha[i] - 1.0) / (&alpha[i] + &beta[i] - 2.0)).clamp(eps, 1.0 - eps);
                // Where no mask was counted since the reset (no client trained the weight), the
                // score stays as it was.
                let counted = (&alpha[i] + &beta[i]).gt(2.0 * self.cfg.prior + 0.5);
                let odds: Tensor = &theta / (theta.ones_like() - &theta);
                let score = odds.log();
                score.where_self(&counted, &global.tensors()[i])
            })
            .collect();
        ParamSet::new(global.names().to_vec(), tensors)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("aggregations", &self.aggregations)?;
        let (alpha, beta) = match &self.posterior {
            Some((a, b)) => (
                a.iter().map(|t| Some(t.shallow_clone())).collect(),
                b.iter().map(|t| Some(t.shallow_clone())).collect(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        out.put_tensor_list("alpha", &alpha)?;
        out.put_tensor_list("beta", &beta)
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.aggregations = saved.get("aggregations")?;
        let alpha: Vec<Tensor> = saved.tensor_list("alpha")?.into_iter().flatten().collect();
        let beta: Vec<Tensor> = saved.tensor_list("beta")?.into_iter().flatten().collect();
        self.posterior = (!alpha.is_empty()).then_some((alpha, beta));
        Ok(())
    }
}

fl_core::register!(Aggregator "bayesian-mask" => BayesianMask::new(BayesianMaskConfig),
    summary: "FedPM's server: clients' Bernoulli masks counted into a Beta posterior per weight, the posterior mode as the next keep-probability, reset periodically",
    paper: "Isik, Pase, Gunduz, Weissman and Zorzi, Sparse Random Networks for Communication-Efficient Federated Learning, ICLR 2023");
