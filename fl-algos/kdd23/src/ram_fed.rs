//! RAM-Fed's server step (Algorithm 2): every client's latest update is kept in memory and
//! stands in for it in rounds where it does not train a region.
//!
//! Per coordinate, in weight units (U_n is the stored update of client n):
//! `Γ = Σ m_n`, `S_U = Σ_{all n} U_n`, `Cr = Σ m_n ⊙ (d_n − U_n)` over this round's updates,
//! `θ ← θ + S_U / N + Cr ⊘ max(Γ, 1)` (the paper, `correction = "gamma"`) or
//! `θ ← θ + S_U / N + Cr / N` (the code's MIFA-style rule, `correction = "n"`), then
//! `U_n ← m_n ⊙ d_n + (1 − m_n) ⊙ U_n`. Memories start at 0, so a first full round is FedAvg.
//!
//! `memory = "code-shared"` reproduces the aliasing bug of the released `RAM-Fed.py`: every
//! client's slot is the same list, so there is one memory `M`, refreshed client after client in
//! id order (`M ← m_n ⊙ d_n + (1 − m_n) ⊙ M`), and client n contributes `θ + M` as it stands
//! after its own refresh; `θ ← θ + mean_n M_after_n`. A coordinate nobody trains then moves by
//! the whole of its latest update, every round until somebody trains it again.

use fl_core::tch::{Kind, Tensor};
use fl_core::{
    AggregateCtx, Aggregator, ClientUpdate, Error, InvalidKey, ParamSet, Result, StateIn, StateOut, Validate,
};
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

/// Where the stored updates live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Memory {
    /// One memory per client (the paper, eq. 4).
    #[default]
    PerClient,
    /// One memory every client shares, as the aliased list of the released `RAM-Fed.py` makes
    /// it. It is the code's rule, a mean over the clients, so it goes with
    /// `correction = "n"`.
    CodeShared,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RamFedConfig {
    /// How the fresh-minus-stored correction is weighted: 1/Γ per coordinate or 1/N.
    pub correction: Correction,
    /// Where the stored updates live: one memory per client, or the code's shared one.
    pub memory: Memory,
}

impl Validate for RamFedConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.memory == Memory::CodeShared && self.correction != Correction::N {
            return Err(InvalidKey::new(
                "correction",
                "memory = \"code-shared\" is the code's rule, a mean over the clients; set correction = \"n\"",
            ));
        }
        Ok(())
    }
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

    /// Client `n`'s stored update (`None`: still zero); the one shared memory under `code-shared`.
    pub fn memory(&self, n: usize) -> Option<&ParamSet> {
        self.memory.get(self.slot(n)).and_then(Option::as_ref)
    }

    /// Sets a client's stored update (tests and warm starts); under `code-shared`, every client's.
    pub fn set_memory(&mut self, n: usize, u: ParamSet) {
        let n = self.slot(n);
        self.ensure_clients(n + 1);
        let old = self.memory[n].replace(u.shallow_clone());
        if self.cfg.memory == Memory::CodeShared {
            return;
        }
        // The per-client rule needs Σ_n U_n every round; keep it current instead of re-summing.
        let sum = self.memory_sum.take().unwrap_or_else(|| u.zeros_like());
        let sum = match old {
            Some(old) => sum.add(&u).sub(&old),
            None => sum.add(&u),
        };
        self.memory_sum = Some(sum);
    }

    fn slot(&self, n: usize) -> usize {
        match self.cfg.memory {
            Memory::PerClient => n,
            Memory::CodeShared => 0,
        }
    }

    fn ensure_clients(&mut self, n: usize) {
        if self.memory.len() < n {
            self.memory.resize_with(n, || None);
        }
    }

    /// The code's step with one shared memory: clients refresh it in id order, whatever order
    /// their updates came in, and each contributes the memory as it stands after its refresh.
    fn aggregate_shared(&mut self, global: &ParamSet, updates: &[ClientUpdate]) -> Result<ParamSet> {
        if updates.is_empty() {
            return Err(Error::component("ram-fed", "memory = \"code-shared\" has no update to average"));
        }
        let shapes = global.shapes();
        let device = global.tensors()[0].device();
        let mut in_order: Vec<&ClientUpdate> = updates.iter().collect();
        in_order.sort_by_key(|u| u.client);
        let mut shared = self.memory(0).map_or_else(|| global.zeros_like(), ParamSet::shallow_clone);
        let mut contributions = global.zeros_like();
        for u in in_order {
            let m = u.mask.dense(&shapes, device);
            shared = refreshed(&u.delta, &shared, &m);
            contributions = contributions.add(&shared);
        }
        self.set_memory(0, shared);
        Ok(global.add(&contributions.scale(1.0 / updates.len() as f64)))
    }
}

/// A memory after a client's update: `m ⊙ d + (1 − m) ⊙ U`; `d` is zero outside the mask already.
fn refreshed(delta: &ParamSet, stored: &ParamSet, mask: &[Tensor]) -> ParamSet {
    let mut i = 0;
    delta.zip_map(stored, |d, s| {
        let out = d + s * (1.0 - &mask[i]);
        i += 1;
        out
    })
}

impl Aggregator for RamFed {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let n = ctx.num_clients;
        self.ensure_clients(n);
        if let Some(u) = updates.iter().find(|u| u.client >= n) {
            return Err(Error::component("ram-fed", format!("update from client {} of {n}", u.client)));
        }
        if self.cfg.memory == Memory::CodeShared {
            return self.aggregate_shared(global, updates);
        }
        let shapes = global.shapes();
        let device = global.tensors()[0].device();
        let zeros = || global.zeros_like();
        let mut gamma: Vec<Tensor> = shapes.iter().map(|s| Tensor::zeros(&s[..], (Kind::Float, device))).collect();
        let mut correction = zeros();
        let mut refreshed_memories = Vec::with_capacity(updates.len());
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
            refreshed_memories.push((u.client, refreshed(&u.delta, &stored, &m)));
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
        for (client, u) in refreshed_memories {
            self.set_memory(client, u);
        }
        Ok(next)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put_params_list("memory", &self.memory.iter().map(Option::as_ref).collect::<Vec<_>>())?;
        out.put_params_opt("memory_sum", self.memory_sum.as_ref());
        Ok(())
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.memory = saved.params_list("memory")?;
        self.memory_sum = saved.params_opt("memory_sum")?;
        Ok(())
    }
}

fl_core::register!(Aggregator "ram-fed" => RamFed::new(RamFedConfig),
    summary: "RAM-Fed: coverage-weighted fresh updates plus every client's stored update (memory)",
    paper: "Wang et al., KDD 2023");
