//! RAM-Fed's server step (Algorithm 2): every client's latest update is kept in memory and
//! stands in for it in rounds where it does not train a region.
//!
//! Per coordinate, in weight units (U_n is the stored update of client n):
//! `Γ = Σ m_n`, `S_U = Σ_{all n} U_n`, `Cr = Σ m_n ⊙ (d_n − U_n)` over this round's updates,
//! `θ ← θ + S_U / N + Cr ⊘ max(Γ, 1)` (the paper, `correction = "gamma"`) or
//! `θ ← θ + S_U / N + Cr / N` (the code's MIFA-style rule, `correction = "n"`), then
//! `U_n ← m_n ⊙ d_n + (1 − m_n) ⊙ U_n`. Memories start at 0, so a first full round is FedAvg.

use fl_core::registry::{Builder, Component, defaults_of};
use fl_core::tch::{Kind, Tensor};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Error, ParamSet, Result};
use serde::{Deserialize, Serialize};

/// How the fresh-minus-stored correction is weighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Correction {
    /// 1/Γ per coordinate (the paper, after FedVARP).
    #[default]
    Gamma,
    /// 1/N (the released code, MIFA-style).
    N,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RamFedConfig {
    pub correction: Correction,
}

/// Per-client memory and its running sum.
pub struct RamFed {
    cfg: RamFedConfig,
    memory: Vec<Option<ParamSet>>,
    memory_sum: Option<ParamSet>,
}

impl RamFed {
    pub fn new(cfg: RamFedConfig) -> Self {
        RamFed { cfg, memory: Vec::new(), memory_sum: None }
    }

    /// Client `n`'s stored update (`None`: still zero).
    pub fn memory(&self, n: usize) -> Option<&ParamSet> {
        self.memory.get(n).and_then(Option::as_ref)
    }

    /// Sets a client's stored update (tests and warm starts).
    pub fn set_memory(&mut self, n: usize, u: ParamSet) {
        self.ensure_clients(n + 1);
        let old = self.memory[n].replace(u.shallow_clone());
        let sum = self.memory_sum.take().unwrap_or_else(|| u.zeros_like());
        let sum = match old {
            Some(old) => sum.add(&u).sub(&old),
            None => sum.add(&u),
        };
        self.memory_sum = Some(sum);
    }

    fn ensure_clients(&mut self, n: usize) {
        if self.memory.len() < n {
            self.memory.resize_with(n, || None);
        }
    }
}

impl Aggregator for RamFed {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let n = ctx.num_clients;
        self.ensure_clients(n);
        if let Some(u) = updates.iter().find(|u| u.client >= n) {
            return Err(Error::invalid(format!("ram-fed: update from client {} of {n}", u.client)));
        }
        let shapes = global.shapes();
        let device = global.tensors()[0].device();
        let zeros = || global.zeros_like();
        let mut gamma: Vec<Tensor> = shapes.iter().map(|s| Tensor::zeros(&s[..], (Kind::Float, device))).collect();
        let mut correction = zeros();
        let mut refreshed = Vec::with_capacity(updates.len());
        for u in updates {
            let m = u.mask.dense(&shapes, device);
            for (g, mi) in gamma.iter_mut().zip(&m) {
                *g = &*g + mi;
            }
            // d_n is zero outside the mask already; only the stored part needs masking.
            let stored = self.memory[u.client].as_ref().map_or_else(zeros, ParamSet::shallow_clone);
            let mut i = 0;
            let fresh_minus_stored = u.delta.zip_map(&stored, |d, s| {
                let out = d - s * &m[i];
                i += 1;
                out
            });
            correction = correction.add(&fresh_minus_stored);
            let mut i = 0;
            let new_memory = u.delta.zip_map(&stored, |d, s| {
                let out = d + s * (1.0 - &m[i]);
                i += 1;
                out
            });
            refreshed.push((u.client, new_memory));
        }
        let stale_mean = self.memory_sum.as_ref().map_or_else(zeros, |s| s.scale(1.0 / n as f64));
        let mut i = 0;
        let correction = correction.map(|c| {
            let out = match self.cfg.correction {
                Correction::Gamma => c / gamma[i].clamp_min(1.0),
                Correction::N => c / n as f64,
            };
            i += 1;
            out
        });
        let next = global.add(&stale_mean).add(&correction);
        for (client, u) in refreshed {
            self.set_memory(client, u);
        }
        Ok(next)
    }
}

inventory::submit! {
    Component {
        name: "ram-fed",
        summary: "RAM-Fed: coverage-weighted fresh updates plus every client's stored update (memory)",
        paper: "Wang et al., KDD 2023",
        defaults: defaults_of::<RamFedConfig>,
        build: Builder::Aggregator(|p| Ok(Box::new(RamFed::new(p.parse()?)))),
        origin: module_path!(),
    }
}
