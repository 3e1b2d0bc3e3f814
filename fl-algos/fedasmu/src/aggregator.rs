//! FedASMU's server (§4.2, Eqs. 1–5): each accepted upload is merged on arrival,
//! `w ← (1 − α) w + α w_i`, with a weight that depends on the version t, the staleness
//! s = t − o + 1 and three controls learned per device by hyper-gradient descent:
//!
//! `ξ = λ / (√t · s^σ) + ι` (clamped at 0), `α = μ_α ξ / (1 + μ_α ξ)`.
//!
//! Before device i's upload is merged, its controls take one step against the gradient of the
//! loss at w_o (the model the device started from) through the weight of i's previous merge
//! (Algorithm S of the spec, which fixes the printed derivation):
//! - the loss gradient at w_o is estimated from the upload itself, ĝ = (w_o − w_i) / Σ η
//!   (Σ η the sum of the job's learning rates, η·K for a constant rate);
//! - i's previous merge moved the model by α_m Δ_m at version v_m + 1; carried forward to
//!   version o it is scaled by D = Π_{u = v_m+2..o} (1 − α_u), the weights of the merges since;
//! - with c = D ⟨ĝ, Δ_m⟩, k = μ_α / (1 + μ_α ξ_m)² and den = √max(v_m, 1) · s_m^{σ_m}:
//!   λ −= η_λ c k / den, σ −= η_σ c k (−λ_m ln s_m) / den, ι −= η_ι c k.
//!
//! The printed forms are behind switches: `literal_sign` uses (w_i − w_o) (gradient ascent,
//! E1), `printed_sigma_grad` uses μ_α ln(σ) ⟨w_o − w_i, Δ_m⟩ / … without λ (E2), and
//! `use_decay = false` drops D (the paper's assumption that version o came from i's own merge).
//! An upload staler than `tau_max` (s > τ_max) is discarded: α = 0, the model stays (the
//! version still counts, as every aggregation does here). `learn = false` freezes the controls
//! at their initial values (FedASMU-DA).
//!
//! The aggregator keeps, per device, its controls and its last merge (Δ_m, a model-sized copy:
//! 100 devices × the model), and the weight of every merge so far (one number per version).

use std::collections::BTreeMap;

use fl_core::tch::Kind;
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, InvalidKey, ParamSet, Result, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StalenessLearnedConfig {
    /// μ_α of Eq. 2.
    #[default(1.0)]
    pub mu_alpha: f64,
    /// Initial controls λ₀, σ₀, ι₀ (the spec's [rec]: α = 0.51 at t = s = 1).
    #[default(1.0)]
    pub lambda0: f64,
    #[default(0.5)]
    pub sigma0: f64,
    #[default(0.05)]
    pub iota0: f64,
    /// Learning rates of the controls (Table 3: 1e-4 for LeNet/FMNIST).
    #[default(1e-4)]
    pub lr_lambda: f64,
    #[default(1e-4)]
    pub lr_sigma: f64,
    #[default(1e-4)]
    pub lr_iota: f64,
    /// τ_max: uploads with staleness s = t − o + 1 above it are discarded (Table 3: 99).
    #[default(99)]
    pub tau_max: u64,
    /// Learn the controls (false: FedASMU-DA, controls frozen).
    #[default(true)]
    pub learn: bool,
    /// Carry the previous merge forward to version o by Π (1 − α_u).
    #[default(true)]
    pub use_decay: bool,
    /// The printed Eq. 4's sign: ĝ = (w_i − w_o)/Ση, gradient ascent.
    #[default(false)]
    pub literal_sign: bool,
    /// The printed Eq. 5: ln(σ) in place of −λ ln(s).
    #[default(false)]
    pub printed_sigma_grad: bool,
}

impl Validate for StalenessLearnedConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.mu_alpha > 0.0 && self.mu_alpha.is_finite()) {
            return Err(InvalidKey::new("mu_alpha", format!("expected a positive number, got {}", self.mu_alpha)));
        }
        for (key, v) in [
            ("lambda0", self.lambda0),
            ("sigma0", self.sigma0),
            ("iota0", self.iota0),
            ("lr_lambda", self.lr_lambda),
            ("lr_sigma", self.lr_sigma),
            ("lr_iota", self.lr_iota),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(InvalidKey::new(key, format!("expected a finite number ≥ 0, got {v}")));
            }
        }
        if self.tau_max == 0 {
            return Err(InvalidKey::new("tau_max", "expected at least 1 (a fresh upload has staleness 1)"));
        }
        Ok(())
    }
}

/// A device's learned controls.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Controls {
    lambda: f64,
    sigma: f64,
    iota: f64,
}

/// A device's last accepted merge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct LastMerge {
    /// The version it was merged into (the result is v_m + 1).
    version: u64,
    staleness: f64,
    xi: f64,
    lambda: f64,
    sigma: f64,
}

pub struct StalenessLearned {
    cfg: StalenessLearnedConfig,
    controls: BTreeMap<usize, Controls>,
    last: BTreeMap<usize, (LastMerge, ParamSet)>,
    /// α of the merge that produced each version (index v − 1 for version v).
    alphas: Vec<f64>,
}

impl StalenessLearned {
    pub fn new(cfg: StalenessLearnedConfig) -> Self {
        StalenessLearned { cfg, controls: BTreeMap::new(), last: BTreeMap::new(), alphas: Vec::new() }
    }

    /// Device `client`'s controls now.
    pub fn controls(&self, client: usize) -> (f64, f64, f64) {
        let c = self.controls_of(client);
        (c.lambda, c.sigma, c.iota)
    }

    fn controls_of(&self, client: usize) -> Controls {
        self.controls.get(&client).copied().unwrap_or(Controls {
            lambda: self.cfg.lambda0,
            sigma: self.cfg.sigma0,
            iota: self.cfg.iota0,
        })
    }

    /// α of the merge that produced version `v` (1 before any merge of this aggregator).
    fn alpha_at(&self, v: u64) -> f64 {
        v.checked_sub(1).and_then(|i| self.alphas.get(i as usize)).copied().unwrap_or(0.0)
    }

    /// One hyper-gradient step on `u`'s device's controls (Eq. 3 through Algorithm S).
    fn learn(&mut self, u: &ClientUpdate) {
        let Some((m, delta_m)) = self.last.get(&u.client) else { return };
        if m.version + 1 > u.base_version || u.lr_sum <= 0.0 {
            return;
        }
        let cfg = &self.cfg;
        let decay: f64 = if cfg.use_decay {
            (m.version + 2..=u.base_version).map(|v| 1.0 - self.alpha_at(v)).product()
        } else {
            1.0
        };
        // ⟨ĝ, Δ_m⟩ with ĝ = (w_o − w_i)/Ση = −Δ_i/Ση.
        let descent = -dot(&u.delta, delta_m) / u.lr_sum;
        let c = decay * if cfg.literal_sign { -descent } else { descent };
        let k = cfg.mu_alpha / (1.0 + cfg.mu_alpha * m.xi).powi(2);
        let den = (m.version.max(1) as f64).sqrt() * m.staleness.powf(m.sigma);
        let sigma_grad = if cfg.printed_sigma_grad {
            decay * descent * k * m.sigma.ln()
        } else {
            c * k * (-m.lambda * m.staleness.ln())
        };
        let mut ctl = self.controls_of(u.client);
        ctl.lambda -= cfg.lr_lambda * c * k / den;
        ctl.sigma -= cfg.lr_sigma * sigma_grad / den;
        ctl.iota -= cfg.lr_iota * c * k;
        self.controls.insert(u.client, ctl);
    }
}

/// ⟨a, b⟩ over every tensor, in double precision.
fn dot(a: &ParamSet, b: &ParamSet) -> f64 {
    a.tensors().iter().zip(b.tensors()).map(|(x, y)| (x * y).sum(Kind::Double).double_value(&[])).sum()
}

impl Aggregator for StalenessLearned {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let mut w = global.shallow_clone();
        let mut alpha_of_version = 0.0;
        for (u, st) in updates.iter().zip(ctx.staleness) {
            let s = (st.versions + 1) as f64;
            if st.versions + 1 > self.cfg.tau_max {
                continue;
            }
            if self.cfg.learn {
                self.learn(u);
            }
            let ctl = self.controls_of(u.client);
            let t = ctx.version.max(1) as f64;
            let xi = (ctl.lambda / (t.sqrt() * s.powf(ctl.sigma)) + ctl.iota).max(0.0);
            let alpha = self.cfg.mu_alpha * xi / (1.0 + self.cfg.mu_alpha * xi);
            // Δ = w_i − w with w_i = w_o + Δ_i.
            let step = u.base.add(&u.delta).sub(&w);
            w = w.add_scaled(&step, alpha);
            alpha_of_version = alpha;
            let merge = LastMerge { version: ctx.version, staleness: s, xi, lambda: ctl.lambda, sigma: ctl.sigma };
            self.last.insert(u.client, (merge, step));
        }
        self.alphas.push(alpha_of_version);
        Ok(w)
    }

    /// One Δ_m per device.
    fn model_copies(&self, clients: usize) -> u64 {
        clients as u64
    }

    /// α of the latest merge, the devices' mean λ, σ and ι (over the devices that have
    /// uploaded; the initial values before any), and each device's α at its last merge
    /// (`alpha.<device>`): the learned controls' traces, per evaluation.
    fn diagnostics(&self) -> Vec<(String, f64)> {
        let n = self.controls.len().max(1) as f64;
        let mean = |f: fn(&Controls) -> f64, initial: f64| {
            if self.controls.is_empty() { initial } else { self.controls.values().map(f).sum::<f64>() / n }
        };
        vec![
            ("alpha_last".into(), self.alphas.last().copied().unwrap_or(0.0)),
            ("lambda_mean".into(), mean(|c| c.lambda, self.cfg.lambda0)),
            ("sigma_mean".into(), mean(|c| c.sigma, self.cfg.sigma0)),
            ("iota_mean".into(), mean(|c| c.iota, self.cfg.iota0)),
        ]
        .into_iter()
        .chain(self.last.iter().map(|(client, (m, _))| {
            let mu_xi = self.cfg.mu_alpha * m.xi;
            (format!("alpha.{client}"), mu_xi / (1.0 + mu_xi))
        }))
        .collect()
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("controls", &self.controls)?;
        out.put("alphas", &self.alphas)?;
        let clients: Vec<usize> = self.last.keys().copied().collect();
        out.put("last_clients", &clients)?;
        out.put("last", &self.last.values().map(|(m, _)| m).collect::<Vec<_>>())?;
        out.put_params_list("last_steps", &self.last.values().map(|(_, p)| Some(p)).collect::<Vec<_>>())
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.controls = saved.get("controls")?;
        self.alphas = saved.get("alphas")?;
        let clients: Vec<usize> = saved.get("last_clients")?;
        let merges: Vec<LastMerge> = saved.get("last")?;
        let steps = saved.params_list("last_steps")?;
        self.last = clients
            .into_iter()
            .zip(merges.into_iter().zip(steps))
            .filter_map(|(c, (m, p))| p.map(|p| (c, (m, p))))
            .collect();
        Ok(())
    }
}

fl_core::register!(Aggregator "staleness-learned" => StalenessLearned::new(StalenessLearnedConfig),
    summary: "FedASMU's server: per arrival w ← (1−α)w + α w_i, α = μξ/(1+μξ), ξ = λ/(√t s^σ) + ι with λ, σ, ι learned per device by hyper-gradient",
    paper: "Jia, Liu et al., Efficient Federated Learning with Timely Update Dissemination (FedASMU), arXiv:2507.06031, §4.2");
