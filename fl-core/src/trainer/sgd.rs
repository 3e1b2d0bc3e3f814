//! Mini-batch SGD (with momentum) or Adam, weight decay, an optional proximal term (FedProx),
//! gradient masking, learning-rate decay with a per-job delay penalty and early stopping,
//! written directly on tensors so that every random draw comes from the job's own streams. A
//! cohort trains as one computation: parameters, optimizer state, masks and starting points
//! stacked along the client dimension, one backward pass and one update of the stack per step.
//! A model pulled mid-training is mixed in with weight `pull_weight`. FedProx's proximal term,
//! FedDyn's linear and quadratic terms, MOON's model-contrastive term
//! ([`crate::trainer::contrastive`]) and ASO-Fed's decay-coefficient gradient
//! ([`crate::trainer::decay_gradient`]) are options of the same trainer. FedProx's and
//! FedDyn's terms enter as their gradients, added to the loss gradient in place. Where the loss
//! is plain cross-entropy (no MOON, distillation, usage or quantisation term) and the model has
//! hand-derived gradients ([`Model::loss_gradients`], the MLP), a step takes them instead of
//! running autograd.
//!
//! The learning rate of a client at a step is `lr · decay · scaling(d)`, `d` the job's delay
//! and `scaling` by default `1 / (1 + delay_alpha · d)` (see [`crate::trainer::rates`]); asyncnc's clients use Adam re-created every
//! epoch (`reset_each_epoch`) with `lr_decay = "inv-sqrt-epoch"`. Early stopping (`patience`)
//! ends a client's training when its epoch-mean loss has not improved for `patience` epochs:
//! the client stays in the computation but its parameters and buffers stop changing, so
//! nothing is read back to the host before the end. The cost model still charges the full job.
//!
//! Under an elementwise mask the client starts from the masked model (masked-out weights 0).
//! `masking = "gradient"` multiplies gradients by the mask so those weights stay 0 (the
//! KDD'23 paper); `"zero-init-only"` trains every weight and relies on the engine discarding
//! the masked-out part of the update afterwards (the KDD'23 code).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Reduction, Tensor};

use crate::data::Dataset;
use crate::error::{Error, InvalidKey, Result, TrainerError};
use crate::model::{Mode, Model};
use crate::model::{linear, split_classifier};
use crate::params::ParamSet;
use crate::rng::CohortNoise;
use crate::split::SplitConfig;
use crate::trainer::adan::AdanMoments;
use crate::trainer::augment::AugmentConfig;
use crate::trainer::captured_steps::{CapturedSteps, StepShape};
use crate::trainer::contrastive::Contrast;
use crate::trainer::cuda_graph;
use crate::trainer::decay_gradient::DecayGradient;
use crate::trainer::distill::DistillConfig;
use crate::trainer::fused_sgd::{self, SgdTerms};
use crate::trainer::kept_steps::{self, KeptSteps, StepKey};
use crate::trainer::learned_pull::{LearnedPullConfig, PullControls};
use crate::trainer::platon::{Platon, PlatonConfig};
use crate::trainer::quantize::{QuantizeConfig, Quantizer};
use crate::trainer::rates::{ClientRates, DelayScaling, LrDecay, Moments, RateConfig, RateTable};
use crate::trainer::schedule::{BatchSchedule, StepAt};
use crate::trainer::usage::{UsageConfig, UsageLoss};
use crate::trainer::width_masks::{CohortInputs, WidthMaskConfig, WidthMasks};
use crate::trainer::{BudgetUse, LocalTrainer, PullInfo, PullMerge, TrainJob, TrainOutcome, TrainSession};

/// The trainer's registered name, which its errors begin with.
const NAME: &str = "sgd";

/// How an elementwise mask acts during local training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Masking {
    /// Gradients are multiplied by the mask: masked-out weights never move.
    #[default]
    Gradient,
    /// Masked-out weights start at 0 but train; their change is dropped from the update.
    ZeroInitOnly,
}

/// The update rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// SGD with optional (heavy-ball, PyTorch-style) momentum.
    #[default]
    Sgd,
    /// Adam (Kingma and Ba) with `betas` and `eps`, PyTorch's form; weight decay as L2.
    Adam,
    /// Adan (Xie et al., 2022) with `adan_betas` and `eps`, the authors' form; weight decay
    /// decoupled (fl-core's `trainer::adan` module).
    Adan,
}

/// The `[trainer]` section of the `sgd` and `adam` trainers (`adam` changes the defaults of
/// `optimizer` and `lr`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SgdConfig {
    /// The update rule (default SGD).
    pub optimizer: Optimizer,
    /// Learning rate (before decay and delay penalty; default 0.05).
    pub lr: f64,
    /// How the learning rate decays over the job (default: constant).
    pub lr_decay: LrDecay,
    /// How the job's delay d scales the learning rate (default: the penalty
    /// lr / (1 + α·d) with α = `delay_alpha`).
    pub delay_scaling: DelayScaling,
    /// α of the delay penalty lr / (1 + α·d), d the job's delay (0: no penalty).
    pub delay_alpha: f64,
    /// Samples per mini-batch (default 32); an epoch's last batch may be shorter.
    pub batch_size: usize,
    /// Local epochs over the client's samples.
    pub epochs: usize,
    /// If set, exactly this many mini-batch steps instead of `epochs` (batches cycle over
    /// reshuffled epochs).
    pub steps: Option<usize>,
    /// Heavy-ball momentum of SGD, in [0, 1) (default 0: none; must be 0 with Adam).
    pub momentum: f64,
    /// Adam's β₁ and β₂.
    pub betas: [f64; 2],
    /// Adam's ε.
    pub eps: f64,
    /// Adan's β₁, β₂, β₃ (the authors' defaults 0.98, 0.92, 0.99).
    pub adan_betas: [f64; 3],
    /// Restart the optimizer state (momentum, Adam's moments and step count) at every local
    /// epoch, as code that re-creates its optimizer per epoch does.
    pub reset_each_epoch: bool,
    /// Stop a client whose epoch-mean training loss has not improved for this many epochs.
    pub patience: Option<usize>,
    /// Weight decay λ (default 0): λ·w is added to the gradient (L2), or with Adan decoupled,
    /// w ← w / (1 + lr·λ) after each step.
    pub weight_decay: f64,
    /// FedProx's μ: adds μ/2 ‖w − w_start‖² to the loss.
    pub prox_mu: f64,
    /// FedDyn's α (Acar et al., ICLR 2021; 0: off): adds α/2 ‖w − w_start‖² − ⟨g_k, w⟩ to the
    /// loss, with g_k the client's state (zero at its first job), and hands on
    /// g_k − α (w_end − w_start) as its next state.
    pub dyn_alpha: f64,
    /// MOON's μ (Li, He and Song, CVPR 2021; 0: off): adds μ·ℓ_con, the model-contrastive
    /// loss between the features of the model in training, of the job's start model and of
    /// the client's model at the end of its previous job, which it keeps as its state.
    pub moon_mu: f64,
    /// MOON's temperature τ of the contrastive loss (default 0.5, the authors').
    pub moon_temperature: f64,
    /// ASO-Fed's decay coefficient β (absent: off): each step's gradient g_t becomes
    /// g_t − g_{t−1} + h_{t−1} with h_t = β h_{t−1} + (1 − β) g_{t−1}, h and g_{t−1} kept per
    /// client across its jobs.
    pub aso_beta: Option<f64>,
    /// Weight β of a model pulled mid-training: w ← (1 − β) w + β w_pulled.
    pub pull_weight: f64,
    /// FedASMU's learned weight of a pulled model instead of `pull_weight` (absent: off; see
    /// [`crate::trainer::learned_pull`]), its controls kept per client.
    pub learned_pull: Option<LearnedPullConfig>,
    /// How an elementwise mask acts during training (default: on the gradients).
    pub masking: Masking,
    /// Split learning (SplitFed): the client trains up to `split.cut` and the server the rest.
    /// The updates are those of the whole model; only the job's cost changes.
    pub split: Option<SplitConfig>,
    /// Image augmentation of the training batches on the device ([`crate::trainer::augment`]);
    /// absent: none.
    pub augment: Option<AugmentConfig>,
    /// Self-distillation across the sub-model's read-outs, early exits learning from the
    /// deepest (Co-S²P Eq. 3, [`crate::trainer::distill`]); absent: the deepest read-out's
    /// cross-entropy alone.
    pub distill: Option<DistillConfig>,
    /// How a client whose job lets it choose its width learns its mask before its weights
    /// (Co-S²P, [`crate::trainer::width_masks`]); absent: such jobs are refused unless
    /// `platon`, `quantize` or `usage` is set.
    pub width_masks: Option<WidthMaskConfig>,
    /// Instead of `width_masks`: such a client trains its whole held sub-model and prunes it
    /// to its budget on the way, by PLATON's importance ([`crate::trainer::platon`]).
    pub platon: Option<PlatonConfig>,
    /// Instead of `width_masks`: such a client trains its whole held sub-model on fake-quantised
    /// weights whose learned bit-widths fit its budget as a memory ratio, after Q-ViT
    /// ([`crate::trainer::quantize`]).
    pub quantize: Option<QuantizeConfig>,
    /// Instead of `width_masks`: such a client trains its whole held model, whose input-dependent
    /// decisions (a `vit` with `decisions`) drop patches, heads and sub-layers, and AdaViT's usage
    /// loss pulls their kept shares to its budget ([`crate::trainer::usage`]).
    pub usage: Option<UsageConfig>,
    /// On CUDA, capture each step shape of a cohort once as a CUDA graph and replay it (one
    /// launch a step instead of a hundred; [`crate::trainer::cuda_graph`]), where the build
    /// has CUDA graphs and the cohort allows (at most 128 clients, a [`Model::replayable`]
    /// model); default on.
    /// No effect on CPU. Left out of the resolved config while on: it changes no result (the
    /// kdd23 cell's metrics are byte-identical either way), and runs resume across it.
    #[serde(skip_serializing_if = "is_true")]
    pub cuda_graphs: bool,
    /// With `cuda_graphs`: a finished cohort leaves its graphs, and the tensors its steps read,
    /// to its worker thread, and the thread's next cohort of the same kind (options, model,
    /// data and every such tensor's shape: a synchronous round's next cohort of the same
    /// clients) copies its values into those tensors and replays the graphs instead of
    /// capturing its steps again ([`crate::trainer::kept_steps`]). SGD and Adam steps without
    /// distillation. Off by default until checked on a GPU (`fl-bench/scripts/gpu_checks.sh`
    /// compares its metrics with eager steps'); left out of the resolved config while off.
    #[serde(skip_serializing_if = "is_false")]
    pub keep_graphs: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            optimizer: Optimizer::Sgd,
            lr: 0.05,
            lr_decay: LrDecay::Constant,
            delay_scaling: DelayScaling::Penalty,
            delay_alpha: 0.0,
            batch_size: 32,
            epochs: 1,
            steps: None,
            momentum: 0.0,
            betas: [0.9, 0.999],
            eps: 1e-8,
            adan_betas: [0.98, 0.92, 0.99],
            reset_each_epoch: false,
            patience: None,
            weight_decay: 0.0,
            prox_mu: 0.0,
            dyn_alpha: 0.0,
            moon_mu: 0.0,
            moon_temperature: 0.5,
            aso_beta: None,
            pull_weight: 0.5,
            learned_pull: None,
            masking: Masking::Gradient,
            split: None,
            augment: None,
            distill: None,
            width_masks: None,
            platon: None,
            quantize: None,
            usage: None,
            cuda_graphs: true,
            keep_graphs: false,
        }
    }
}

impl SgdConfig {
    /// Checks every value's range; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.lr > 0.0) {
            return Err(InvalidKey::new("lr", format!("expected a positive number, got {}", self.lr)));
        }
        if let Some(augment) = &self.augment {
            augment.validate()?;
        }
        if self.keep_graphs && !self.cuda_graphs {
            return Err(InvalidKey::new("keep_graphs", "keeps CUDA graphs: needs cuda_graphs = true"));
        }
        if let Some(distill) = &self.distill {
            distill.validate()?;
            if self.moon_mu > 0.0 {
                return Err(InvalidKey::new(
                    "distill",
                    "MOON's contrastive term reads one read-out: drop distill or moon_mu",
                ));
            }
        }
        if let Some(masks) = &self.width_masks {
            masks.validate()?;
            if self.steps.is_some() {
                return Err(InvalidKey::new("width_masks", "the scores train for epochs: set epochs instead of steps"));
            }
            if self.dyn_alpha > 0.0 || self.moon_mu > 0.0 || self.aso_beta.is_some() || self.learned_pull.is_some() {
                return Err(InvalidKey::new(
                    "width_masks",
                    "the client's scores are its state: drop dyn_alpha, moon_mu, aso_beta and learned_pull",
                ));
            }
        }
        if let Some(platon) = &self.platon {
            platon.validate()?;
        }
        if let Some(quantize) = &self.quantize {
            quantize.validate()?;
        }
        if let Some(usage) = &self.usage {
            usage.validate()?;
        }
        let ways = [
            ("width_masks", self.width_masks.is_some()),
            ("platon", self.platon.is_some()),
            ("quantize", self.quantize.is_some()),
            ("usage", self.usage.is_some()),
        ];
        if let [_, (second, _), ..] = ways.iter().filter(|(_, on)| *on).collect::<Vec<_>>()[..] {
            return Err(InvalidKey::new(
                *second,
                "a client uses its width budget one way: learned masks (width_masks), pruning while training (platon), quantisation (quantize) or input-dependent decisions (usage), not two",
            ));
        }
        if self.batch_size == 0 {
            return Err(InvalidKey::new("batch_size", "expected at least 1"));
        }
        if self.epochs == 0 && self.steps.is_none() {
            return Err(InvalidKey::new("epochs", "expected at least 1 (or set steps)"));
        }
        if self.steps == Some(0) {
            return Err(InvalidKey::new("steps", "expected at least 1"));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(InvalidKey::new("momentum", format!("expected a value in [0, 1), got {}", self.momentum)));
        }
        if self.optimizer == Optimizer::Adam && self.momentum != 0.0 {
            return Err(InvalidKey::new("momentum", "Adam has no momentum (set betas instead)"));
        }
        if self.optimizer == Optimizer::Adan && self.momentum != 0.0 {
            return Err(InvalidKey::new("momentum", "Adan has no momentum (set adan_betas instead)"));
        }
        if let Some(b) = self.betas.iter().find(|b| !(0.0..1.0).contains(*b)) {
            return Err(InvalidKey::new("betas", format!("expected two values in [0, 1), got {b}")));
        }
        if let Some(b) = self.adan_betas.iter().find(|b| !(0.0..1.0).contains(*b)) {
            return Err(InvalidKey::new("adan_betas", format!("expected three values in [0, 1), got {b}")));
        }
        if !(self.eps > 0.0) {
            return Err(InvalidKey::new("eps", format!("expected a positive number, got {}", self.eps)));
        }
        if !(self.delay_alpha >= 0.0) {
            return Err(InvalidKey::new(
                "delay_alpha",
                format!("expected a non-negative number, got {}", self.delay_alpha),
            ));
        }
        if self.patience == Some(0) {
            return Err(InvalidKey::new("patience", "expected at least 1 epoch"));
        }
        if !(self.weight_decay >= 0.0) {
            return Err(InvalidKey::new(
                "weight_decay",
                format!("expected a non-negative number, got {}", self.weight_decay),
            ));
        }
        if !(self.dyn_alpha >= 0.0 && self.dyn_alpha.is_finite()) {
            return Err(InvalidKey::new("dyn_alpha", format!("expected a finite number ≥ 0, got {}", self.dyn_alpha)));
        }
        if !(self.moon_mu >= 0.0 && self.moon_mu.is_finite()) {
            return Err(InvalidKey::new("moon_mu", format!("expected a finite number ≥ 0, got {}", self.moon_mu)));
        }
        if let Some(beta) = self.aso_beta.filter(|b| !(0.0..1.0).contains(b)) {
            return Err(InvalidKey::new("aso_beta", format!("expected a value in [0, 1), got {beta}")));
        }
        if let Some(pull) = &self.learned_pull {
            pull.validate()?;
        }
        let stateful = [self.dyn_alpha > 0.0, self.moon_mu > 0.0, self.aso_beta.is_some(), self.learned_pull.is_some()];
        if stateful.iter().filter(|&&on| on).count() > 1 {
            return Err(InvalidKey::new(
                "moon_mu",
                "FedDyn (dyn_alpha), MOON (moon_mu), ASO-Fed (aso_beta) and FedASMU (learned_pull) each keep a per-client state: use one",
            ));
        }
        if !(self.moon_temperature > 0.0 && self.moon_temperature.is_finite()) {
            return Err(InvalidKey::new(
                "moon_temperature",
                format!("expected a positive number, got {}", self.moon_temperature),
            ));
        }
        if !(self.prox_mu >= 0.0) {
            return Err(InvalidKey::new("prox_mu", format!("expected a non-negative number, got {}", self.prox_mu)));
        }
        if !(0.0..=1.0).contains(&self.pull_weight) {
            return Err(InvalidKey::new(
                "pull_weight",
                format!("expected a value in [0, 1], got {}", self.pull_weight),
            ));
        }
        self.split.as_ref().map_or(Ok(()), SplitConfig::validate)
    }
}

/// The built-in local trainer (`sgd`, and `adam` with Adam's defaults): trains cohorts as one
/// computation ([`LocalTrainer::batches`] is true).
#[derive(Debug, Clone)]
pub struct Sgd {
    cfg: SgdConfig,
}

impl Sgd {
    /// A trainer with `cfg` (not validated here: see [`SgdConfig::validate`]).
    pub fn new(cfg: SgdConfig) -> Self {
        Sgd { cfg }
    }

    /// The trainer's configuration.
    pub fn config(&self) -> &SgdConfig {
        &self.cfg
    }

    /// Model-sized tensors of the state a client's job hands to its next: FedDyn's gradient,
    /// MOON's previous model, or ASO-Fed's h and previous gradient (0: none).
    fn state_copies(&self) -> usize {
        if self.cfg.aso_beta.is_some() { 2 } else { usize::from(self.cfg.dyn_alpha > 0.0 || self.cfg.moon_mu > 0.0) }
    }

    /// Optimisation steps of a job over `samples` samples in mini-batches of `batch` (None:
    /// `batch_size`).
    pub fn total_steps(&self, samples: usize, batch: Option<usize>) -> usize {
        self.cfg.steps.unwrap_or_else(|| self.cfg.epochs * samples.div_ceil(batch.unwrap_or(self.cfg.batch_size)))
    }

    /// Starts `jobs` as one cohort whose steps run the way steps replayed from CUDA graphs run,
    /// on any device ([`Sgd::train_cohort_at_device_counters`]): a session, for jobs that pull
    /// mid-training. Refused for a model or options whose steps are not replayed.
    pub fn start_at_device_counters(&self, jobs: Vec<TrainJob>) -> Result<Box<dyn TrainSession>> {
        let mut cohort = SgdCohort::new(self, jobs)?;
        if !cohort.replayable() {
            return Err(Error::component(
                NAME,
                "these steps are not replayed from CUDA graphs (see [trainer] cuda_graphs): nothing to train at device counters",
            ));
        }
        cohort.at_device_counters = true;
        Ok(Box::new(cohort))
    }

    /// Trains `jobs` as one cohort the way steps replayed from CUDA graphs run: step 0 first,
    /// then every step reading its table rows and noise at counters kept on the device and
    /// writing its results in place, eagerly off CUDA. On CPU this trains, bit for bit, what
    /// [`LocalTrainer::train_cohort`] trains: so each model's replayed steps are tested without
    /// a GPU. A step of a shape a GPU would replay runs with the index of the step its graph
    /// would have been captured at, so a step that takes a row or a value by the host's step
    /// index trains other numbers; only a host read shows under capture alone. Refused for a
    /// model or options whose steps are not replayed.
    pub fn train_cohort_at_device_counters(&self, jobs: Vec<TrainJob>) -> Result<Vec<TrainOutcome>> {
        let mut session = self.start_at_device_counters(jobs)?;
        session.run_until(1.0)?;
        session.finish()
    }
}

impl LocalTrainer for Sgd {
    fn batches(&self) -> bool {
        true
    }

    /// Forward + backward passes; MOON's two extra forward passes per sample (global and
    /// previous model) count as 2/3 of a pass each, a backward costing two forwards.
    fn sample_passes(&self, samples: usize, batch: Option<usize>) -> f64 {
        let samples_seen = match self.cfg.steps {
            Some(steps) => (steps * batch.unwrap_or(self.cfg.batch_size).min(samples)) as f64,
            None => (self.cfg.epochs * samples) as f64,
        };
        if self.cfg.moon_mu > 0.0 { samples_seen * (1.0 + 2.0 / 3.0) } else { samples_seen }
    }

    fn steps(&self, samples: usize, batch: Option<usize>) -> f64 {
        self.total_steps(samples, batch) as f64
    }

    fn width_mask_passes(&self, samples: usize) -> f64 {
        self.cfg.width_masks.as_ref().map_or(0.0, |w| (w.epochs * samples) as f64)
    }

    fn budget_use(&self) -> BudgetUse {
        let cfg = &self.cfg;
        match (&cfg.platon, &cfg.quantize, &cfg.usage) {
            (Some(_), _, _) => BudgetUse::Pruning,
            (None, Some(_), _) => BudgetUse::Quantisation,
            (None, None, Some(_)) => BudgetUse::Decisions,
            (None, None, None) => BudgetUse::LearnedMask,
        }
    }

    fn split(&self) -> Option<&SplitConfig> {
        self.cfg.split.as_ref()
    }

    fn start(&self, jobs: Vec<TrainJob>) -> Result<Box<dyn TrainSession>> {
        Ok(Box::new(SgdCohort::new(self, jobs)?))
    }

    fn client_state_copies(&self) -> u64 {
        self.state_copies() as u64
    }

    fn optimizer_states(&self) -> u32 {
        match self.cfg.optimizer {
            Optimizer::Sgd => u32::from(self.cfg.momentum > 0.0),
            Optimizer::Adam => 2,
            // m, v, n and the previous gradient.
            Optimizer::Adan => 4,
        }
    }

    fn batch_size(&self) -> Option<usize> {
        Some(self.cfg.batch_size)
    }
}

/// A cohort in training. Tensors are stacked `[C, ...]` in cohort order (longest job first);
/// `order[i]` is the caller's index of cohort slot `i`.
struct SgdCohort {
    cfg: SgdConfig,
    model: Arc<dyn Model>,
    data: Dataset,
    names: Vec<String>,
    /// Per tensor: false for buffers, which the forward pass updates and no step touches, and
    /// for frozen tensors, which only run forward.
    trainable: Vec<bool>,
    /// The depth of each read-out the jobs' sub-model holds, deepest last.
    readouts: Vec<usize>,
    order: Vec<usize>,
    params: Vec<Tensor>,
    start: Vec<Tensor>,
    /// Momentum buffers (SGD with momentum) or Adam's first moments, zero at the start.
    velocity: Vec<Tensor>,
    /// Adam's second moments.
    second: Vec<Tensor>,
    /// Adan's moments.
    adan: Option<AdanMoments>,
    rates: RateTable,
    /// Early stopping state, with `patience`.
    stopping: Option<EarlyStopping>,
    /// Stacked 0/1 gradient masks per tensor (ones for clients that do not mask it).
    grad_mask: Vec<Option<Tensor>>,
    /// FedDyn: each client's state g_k per tensor, stacked (zeros for a first job).
    dyn_state: Option<Vec<Tensor>>,
    /// MOON: the contrastive term and the clients' previous models.
    contrast: Option<Contrast>,
    /// ASO-Fed: the decay-coefficient gradient's state.
    decay: Option<DecayGradient>,
    /// FedASMU: the learned pull weight's settings and each client's controls.
    pull: Option<(LearnedPullConfig, Vec<PullControls>)>,
    /// Co-S²P: the clients' learned width masks, when the jobs choose their widths.
    width: Option<WidthMasks>,
    /// PLATON: the clients' pruning while training, when the jobs choose their widths so.
    platon: Option<Platon>,
    /// Q-ViT: the clients' fake quantisation, when the jobs spend their budgets so.
    quantizer: Option<Quantizer>,
    /// AdaViT: the usage loss of the clients' decisions, when the jobs spend their budgets so.
    usage: Option<UsageLoss>,
    /// FedASMU's learned merge, its weight and reward (a cohort of one).
    pull_merge: Option<PullMerge>,
    schedule: BatchSchedule,
    noise: CohortNoise,
    step: usize,
    /// The step index on the device, int64 `[1]`, where steps are replayed from CUDA graphs:
    /// steps read their rows of the per-step tables there and advance it.
    device_step: Option<Tensor>,
    /// Whether steps run as replayed ones do on any device ([`Sgd::start_at_device_counters`]).
    at_device_counters: bool,
    /// Each client's summed batch losses, `[C]`, read once at the end.
    loss_sum: Tensor,
    /// Whether the model's training pass reads the padding mask ([`Mode::reads_padding`]):
    /// true until a step shows otherwise. A model that does not computes a padded step as it
    /// computes a full one of its shape, and one graph serves both.
    reads_padding: bool,
    /// Weight decay, momentum, 1 − β₁, 1 − β₂ and ε as 0-d tensors on the device, copied there once.
    factors: [Tensor; 5],
}

/// One step's batch as the gradient passes read it: the clients still training `k`, their
/// inputs `[k, b, ...]`, labels `[k·b]` and loss weights `[k, b]`, and, where some samples are
/// padding, the mask of the real ones `[k, b]`.
struct StepBatch {
    k: i64,
    x: Tensor,
    y: Tensor,
    weights: Tensor,
    valid: Option<Tensor>,
}

fn is_true(on: &bool) -> bool {
    *on
}

fn is_false(on: &bool) -> bool {
    !*on
}

/// Largest cohort whose steps are replayed from CUDA graphs. Measured on an H200 (kdd23 MNIST
/// cells, MLP 784-200-10, batch 128): 10 clients 2.7x faster than eager steps, 80 clients 1.6x,
/// 670 clients 0.8x (their steps are bound by arithmetic, and the many shapes of clients
/// dropping out each cost a capture).
const MAX_GRAPH_CLIENTS: usize = 128;

/// The gradients with any two that share memory made separate: autograd may hand two leaves
/// views of one buffer (a ViT's position embedding and class token when the batch holds one
/// sample: the class token's gradient is the first row of the embedding's), and the update
/// works on each gradient in place.
fn unaliased(grads: Vec<Tensor>) -> Vec<Tensor> {
    let span = |g: &Tensor| {
        let start = g.data_ptr() as usize;
        (start, start + g.numel() * g.kind().elt_size_in_bytes())
    };
    let spans: Vec<Option<(usize, usize)>> = grads.iter().map(|g| g.defined().then(|| span(g))).collect();
    let overlaps = |i: usize| {
        let Some((a, b)) = spans[i] else { return false };
        spans.iter().enumerate().any(|(j, s)| j != i && s.is_some_and(|(c, d)| a < d && c < b))
    };
    let shared: Vec<bool> = (0..grads.len()).map(overlaps).collect();
    grads.into_iter().zip(shared).map(|(g, shared)| if shared { g.copy() } else { g }).collect()
}

/// Each client's weighted cross-entropy `[k]`: `logits` `[k, b, classes]`, `y` `[k·b]`,
/// `weights` `[k, b]`; the loss a step differentiates (and [`Model::loss_gradients`] computes).
pub fn cross_entropy(logits: &Tensor, y: &Tensor, weights: &Tensor) -> Tensor {
    let [k, b, classes] = logits.size()[..] else { panic!("logits [k, b, classes], got {:?}", logits.size()) };
    let per_sample = logits.reshape([-1, classes]).cross_entropy_loss::<Tensor>(y, None, Reduction::None, -100, 0.0);
    (per_sample.reshape([k, b]) * weights).sum_dim_intlist(1, false, Kind::Float)
}

/// Per-client early stopping on the device: losses of the current epoch, the best epoch mean,
/// epochs without improvement and whether the client still trains.
struct EarlyStopping {
    patience: f64,
    epoch_loss: Tensor,
    best: Tensor,
    bad_epochs: Tensor,
    /// 1 while the client trains, 0 once stopped, `[C]`.
    active: Tensor,
    /// Steps each client made while active, `[C]`.
    steps_run: Tensor,
    /// `[T, C]`: 1/batches of the epoch at a client's last step of an epoch, else 0.
    epoch_end: Tensor,
    /// Steps at which some client ends an epoch.
    ends: Vec<bool>,
}

impl SgdCohort {
    fn new(sgd: &Sgd, mut jobs: Vec<TrainJob>) -> Result<SgdCohort> {
        let first = jobs.first().ok_or(TrainerError::EmptyCohort { trainer: NAME })?;
        let (model, data) = (Arc::clone(&first.model), first.data.shallow_clone());
        let names = first.params.names().to_vec();
        let shapes = first.params.shapes();
        let device = first.indices.device();
        let trainable = first.trainable();
        let readouts = first.model.structure().readouts(first.params.names());
        let frozen = first.signature().frozen;
        for (j, job) in jobs.iter().enumerate() {
            if !Arc::ptr_eq(&job.model, &model) || job.data.x.data_ptr() != data.x.data_ptr() {
                return Err(TrainerError::MixedCohort { trainer: NAME, job: j }.into());
            }
            if job.params.shapes() != shapes {
                return Err(TrainerError::CohortShapes {
                    trainer: NAME,
                    job: j,
                    found: job.params.shapes(),
                    first: shapes,
                }
                .into());
            }
            if job.signature().frozen != frozen {
                return Err(Error::component(
                    NAME,
                    format!(
                        "job {j} of a cohort freezes other tensors than its first job (cohorts share their frozen tensors)"
                    ),
                ));
            }
            if job.indices.size()[0] == 0 {
                return Err(TrainerError::NoSamples { trainer: NAME }.into());
            }
            if job.batch_size != first.batch_size {
                return Err(Error::component(
                    NAME,
                    format!(
                        "job {j} of a cohort has batch size {:?}, its first job {:?} (cohorts share their batch size)",
                        job.batch_size, first.batch_size
                    ),
                ));
            }
        }
        if sgd.cfg.augment.is_some() && (data.x.dim() != 4 || !data.x.is_floating_point()) {
            return Err(Error::component(
                NAME,
                format!(
                    "augment: needs images, float inputs [n, ch, H, W]; the data's are {:?} {:?}",
                    data.x.kind(),
                    data.x.size()
                ),
            ));
        }
        // The cohort's jobs share their batch size (their signatures are equal).
        let batch_size = first.batch_size.unwrap_or(sgd.cfg.batch_size);
        if batch_size == 0 {
            return Err(Error::component(NAME, "a job's batch size is 0"));
        }
        let steps: Vec<usize> =
            jobs.iter().map(|j| sgd.total_steps(j.indices.size()[0] as usize, Some(batch_size))).collect();
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&j| std::cmp::Reverse(steps[j]));
        let stack =
            |f: &dyn Fn(&TrainJob) -> Tensor| Tensor::stack(&order.iter().map(|&j| f(&jobs[j])).collect::<Vec<_>>(), 0);
        let start: Vec<Tensor> =
            (0..names.len()).map(|i| stack(&|job| job.params.tensors()[i].shallow_clone())).collect();
        let params = start.iter().map(Tensor::copy).collect();
        let adam = sgd.cfg.optimizer == Optimizer::Adam;
        // Optimizer state exists for trained tensors only (undefined for buffers and frozen ones).
        let templates: Vec<Tensor> =
            start.iter().zip(&trainable).map(|(t, &on)| if on { t.shallow_clone() } else { Tensor::new() }).collect();
        let zeros = |on: bool| {
            if on {
                templates.iter().map(|t| if t.defined() { t.zeros_like() } else { Tensor::new() }).collect()
            } else {
                Vec::new()
            }
        };
        let velocity = zeros(sgd.cfg.momentum > 0.0 || adam);
        let second = zeros(adam);
        let adan =
            (sgd.cfg.optimizer == Optimizer::Adan).then(|| AdanMoments::new(&templates, sgd.cfg.adan_betas, device));
        let masked = sgd.cfg.masking == Masking::Gradient;
        let grad_mask = (0..names.len())
            .map(|i| {
                let mask_of =
                    |job: &TrainJob| job.grad_mask.as_ref().and_then(|ms| ms[i].as_ref().map(Tensor::shallow_clone));
                (masked && jobs.iter().any(|j| mask_of(j).is_some()))
                    .then(|| stack(&|job| mask_of(job).unwrap_or_else(|| job.params.tensors()[i].ones_like())))
            })
            .collect();
        // A client's state is `copies` model-sized parts, each with the model's shapes, or
        // FedASMU's two controls.
        let copies = sgd.state_copies();
        let state_shapes: Vec<Vec<i64>> = match sgd.cfg.learned_pull {
            Some(_) => PullControls::state_shapes(),
            None => (0..copies).flat_map(|_| shapes.iter().cloned()).collect(),
        };
        let model_state = copies > 0 || sgd.cfg.learned_pull.is_some();
        if let Some(j) =
            jobs.iter().position(|j| model_state && j.state.as_ref().is_some_and(|s| s.shapes() != state_shapes))
        {
            return Err(Error::component(
                NAME,
                format!(
                    "job {j}: the client's state (FedDyn's gradient, MOON's previous model, ASO-Fed's h) has the full model's shapes, the job trains a sub-model (dyn_alpha, moon_mu and aso_beta need unmasked jobs)"
                ),
            ));
        }
        // Part `part` of each job's state stacked per tensor, `fill` standing in for a job
        // without one.
        let stack_state = |part: usize, fill: &dyn Fn(&Tensor) -> Tensor| -> Vec<Tensor> {
            (0..names.len())
                .map(|i| {
                    stack(&|job| {
                        let start = &job.params.tensors()[i];
                        let at = part * names.len() + i;
                        job.state.as_ref().map_or_else(|| fill(start), |s| s.tensors()[at].shallow_clone())
                    })
                })
                .collect()
        };
        let dyn_state = (sgd.cfg.dyn_alpha > 0.0).then(|| stack_state(0, &Tensor::zeros_like));
        let contrast = (sgd.cfg.moon_mu > 0.0).then(|| {
            let has: Vec<f32> = order.iter().map(|&j| if jobs[j].state.is_some() { 1.0 } else { 0.0 }).collect();
            Contrast::new(
                sgd.cfg.moon_mu,
                sgd.cfg.moon_temperature,
                stack_state(0, &Tensor::shallow_clone),
                Tensor::from_slice(&has).to_device(device),
            )
        });
        let pull = sgd.cfg.learned_pull.clone().map(|cfg| {
            let controls = order.iter().map(|&j| PullControls::from_state(jobs[j].state.as_ref(), &cfg)).collect();
            (cfg, controls)
        });
        // Copies: the decay state moves in place.
        let decay = sgd.cfg.aso_beta.map(|beta| {
            let copied = |part| stack_state(part, &Tensor::zeros_like).iter().map(Tensor::copy).collect();
            DecayGradient::new(beta, copied(0), copied(1))
        });
        let noise = CohortNoise::new(order.iter().map(|&j| jobs[j].noise.clone()).collect(), device);
        let schedule = BatchSchedule::draw_for_jobs(&mut jobs, &order, &steps, batch_size, device);
        let (mut width, mut platon, mut quantizer) = (None, None, None);
        // A job without a budget may use its whole held model: ratio 1.
        let ratios: Vec<f64> = order.iter().map(|&j| jobs[j].width.as_ref().map_or(1.0, |w| w.ratio)).collect();
        if let Some(budget) = jobs[order[0]].width.clone() {
            if let Some(r) = ratios.iter().find(|r| !(**r > 0.0 && **r <= 1.0)) {
                return Err(Error::component(NAME, format!("a width budget's ratio must be in (0, 1], got {r}")));
            }
            let structure = model.structure();
            let c = &sgd.cfg;
            match (&c.width_masks, &c.platon, &c.quantize, &c.usage) {
                (Some(cfg), _, _, _) => {
                    width = Some(WidthMasks::new(cfg, structure, &mut jobs, &order, &ratios, batch_size)?);
                }
                (None, Some(cfg), _, _) => {
                    let slot_steps: Vec<usize> = order.iter().map(|&j| steps[j]).collect();
                    platon = Some(Platon::new(cfg, structure, &budget, &names, &start, &slot_steps, &ratios)?);
                }
                (None, None, Some(cfg), _) => {
                    let most = steps.iter().copied().max().unwrap_or(0);
                    quantizer = Some(Quantizer::new(cfg, structure, &budget, &names, &start, &ratios, most)?);
                }
                (None, None, None, Some(_)) => {} // The usage loss, below.
                (None, None, None, None) => {
                    return Err(Error::component(
                        NAME,
                        "the jobs let their clients choose their widths (the mask policy sets a width budget): set [trainer] width_masks, platon, quantize or usage",
                    ));
                }
            }
        }
        let usage = match &sgd.cfg.usage {
            Some(_) if !model.records_usage() => {
                return Err(Error::component(
                    NAME,
                    "[trainer] usage needs a model with input-dependent decisions (a vit with decisions = {})",
                ));
            }
            Some(cfg) => Some(UsageLoss::new(cfg, &ratios, device)),
            None => None,
        };
        let cfg = &sgd.cfg;
        let rate_config = RateConfig {
            lr: cfg.lr,
            decay: cfg.lr_decay,
            delay_scaling: cfg.delay_scaling,
            delay_alpha: cfg.delay_alpha,
            moments: match cfg.optimizer {
                Optimizer::Sgd => Moments::None,
                Optimizer::Adam => Moments::Adam(cfg.betas[0], cfg.betas[1]),
                Optimizer::Adan => Moments::Adan(cfg.adan_betas[0], cfg.adan_betas[1], cfg.adan_betas[2]),
            },
            decoupled_decay: if cfg.optimizer == Optimizer::Adan { cfg.weight_decay } else { 0.0 },
            reset_each_epoch: cfg.reset_each_epoch,
        };
        let clients: Vec<ClientRates> = order
            .iter()
            .zip(schedule.epochs())
            .map(|(&j, epochs)| ClientRates { epochs, delay: jobs[j].delay, version: jobs[j].version })
            .collect();
        let rates = RateTable::new(&rate_config, &clients, device);
        let stopping = cfg.patience.map(|p| EarlyStopping::new(p, schedule.epochs(), device));
        Ok(SgdCohort {
            cfg: sgd.cfg.clone(),
            loss_sum: Tensor::zeros([jobs.len() as i64], (Kind::Float, device)),
            factors: [cfg.weight_decay, cfg.momentum, 1.0 - cfg.betas[0], 1.0 - cfg.betas[1], cfg.eps]
                .map(|v| Tensor::from(v as f32).to_device(device)),
            velocity,
            second,
            adan,
            rates,
            stopping,
            trainable,
            readouts,
            model,
            data,
            names,
            order,
            params,
            start,
            grad_mask,
            dyn_state,
            contrast,
            decay,
            pull,
            width,
            platon,
            quantizer,
            usage,
            pull_merge: None,
            schedule,
            noise,
            step: 0,
            device_step: None,
            at_device_counters: false,
            reads_padding: true,
        })
    }

    fn clients(&self) -> usize {
        self.order.len()
    }

    /// Learns the clients' width masks if the jobs choose their widths (the score steps
    /// `replayed` as the weight steps will be), then starts the weights from the kept units
    /// only and masks the dropped units' gradients.
    fn apply_width_masks(&mut self, replayed: bool) -> Result<()> {
        let Some(width) = &mut self.width else { return Ok(()) };
        let cohort = CohortInputs {
            model: self.model.as_ref(),
            names: &self.names,
            params: &self.params,
            data: &self.data,
            augment: self.cfg.augment.as_ref(),
        };
        let factors = width.factors(&cohort, &mut self.noise, replayed)?;
        for (i, factor) in factors.iter().enumerate() {
            let Some(f) = factor else { continue };
            self.params[i] = &self.params[i] * f;
            self.grad_mask[i] = Some(match self.grad_mask[i].take() {
                Some(m) => m * f,
                None => f.expand_as(&self.params[i]).contiguous(),
            });
        }
        Ok(())
    }

    /// Step `t` as the per-step tables are read (at the device index where steps are replayed).
    fn at(&self, t: usize) -> StepAt<'_> {
        StepAt { t, device: self.device_step.as_ref() }
    }

    /// Step `t`'s batch: the clients still training `k`, the batch length `b`, the inputs
    /// `[k, b, ...]`, the labels `[k·b]` and the loss weights `[k, b]`.
    fn batch(&self, t: usize) -> (i64, i64, Tensor, Tensor, Tensor) {
        self.schedule.inputs(&self.data, self.at(t))
    }

    /// Step `t`'s shape, which a CUDA graph is captured for: padding counts only for a model
    /// that reads the padding mask; the host's branches (PLATON's pruning, early stopping's
    /// epoch ends) only with those options.
    fn shape(&self, t: usize) -> StepShape {
        let (clients, batch) = self.schedule.shape(t);
        StepShape {
            clients,
            batch,
            padded: self.schedule.padded(t) && self.reads_padding,
            prunes: self.platon.as_ref().is_some_and(|p| p.prunes(t, clients)),
            epoch_ends: self.stopping.as_ref().is_some_and(|s| s.ends[t]),
        }
    }

    /// Whether this cohort's steps can be replayed from CUDA graphs: with `cuda_graphs`, on
    /// CUDA, in a build with them, and [`SgdCohort::replayable`].
    fn graphable(&self) -> bool {
        self.cfg.cuda_graphs && self.data.x.device().is_cuda() && cuda_graph::available() && self.replayable()
    }

    /// Whether this cohort's steps could be replayed: at most [`MAX_GRAPH_CLIENTS`] clients and
    /// a model whose forward pass reads nothing from the host ([`Model::replayable`]). No
    /// option keeps host state that changes from step to step: Adan (its first-step difference
    /// is step 0's, which runs eagerly), distillation, FedDyn, MOON and ASO-Fed (tensor
    /// arithmetic on state stacked on the device), augmentation and AdaViT's decisions (their
    /// draws in the noise block) and its usage loss read nothing from the host; Q-ViT's Adam
    /// step sizes, PLATON's kept ratios and early stopping's epoch ends are tables read at the
    /// device's step, and whether a step prunes or ends an epoch is part of its shape; learned
    /// width masks train their scores in replayed steps of their own before step 0; a pulled
    /// model's merge, between two `run_until`s, writes the weights in place. The CPU tests
    /// check each at device counters, replays run with their capture's step index;
    /// `fl-bench/scripts/gpu_checks.sh` under capture.
    fn replayable(&self) -> bool {
        self.clients() <= MAX_GRAPH_CLIENTS && self.model.replayable()
    }

    /// Whether a step's loss is plain cross-entropy (no MOON, distillation, usage or
    /// quantisation term), so that it may take the model's hand-derived gradients.
    fn plain_cross_entropy(&self) -> bool {
        self.contrast.is_none() && self.cfg.distill.is_none() && self.usage.is_none() && self.quantizer.is_none()
    }

    /// Runs steps up to `until`, replayed from CUDA graphs if `replayed` ([`Self::run_captured`]),
    /// after learning the width masks if the cohort has not started.
    fn run_steps(&mut self, until: usize, replayed: bool) -> Result<()> {
        if self.step == 0 && until > 0 {
            self.apply_width_masks(replayed)?;
        }
        if until > self.step && replayed {
            return self.run_captured(until);
        }
        while self.step < until {
            self.sgd_step(self.step);
            self.step += 1;
        }
        Ok(())
    }

    /// Runs steps up to `until` replayed from CUDA graphs: step 0 eagerly, which tells which
    /// noise draws a step makes and whether the model reads the padding mask, then every draw
    /// and table row read at device counters.
    fn run_captured(&mut self, until: usize) -> Result<()> {
        let mut kept_replays = BTreeMap::new();
        if self.step == 0 {
            self.device_step = Some(Tensor::zeros([1], (Kind::Int64, self.data.x.device())));
            self.noise.record_step();
            self.sgd_step(0);
            self.step = 1;
            self.noise.count_on_device(self.schedule.total_steps() as u64 - 1);
            if self.keeps_graphs() {
                if let Some(kept) = kept_steps::take(&self.step_key()) {
                    self.adopt(kept.inputs);
                    kept_replays = kept.replays;
                }
            }
        }
        let total = self.schedule.total_steps();
        let shapes = (self.step..total).map(|t| self.shape(t));
        let mut steps = CapturedSteps::new(shapes, self.data.x.device().is_cuda(), kept_replays);
        while self.step < until {
            let t = self.step;
            self.noise.start_step();
            steps.run(self.shape(t), t, |i| self.sgd_step(i))?;
            self.step += 1;
        }
        if self.keeps_graphs() && self.step == total {
            let key = self.step_key();
            let inputs = self.release();
            kept_steps::keep(KeptSteps { key, inputs, replays: steps.into_replays() });
        }
        Ok(())
    }

    /// Whether this cohort keeps its graphs for the next of its kind ([`SgdConfig::keep_graphs`]).
    fn keeps_graphs(&self) -> bool {
        self.cfg.keep_graphs && self.adan.is_none() && self.cfg.distill.is_none()
    }

    /// Every tensor of the cohort's own that a captured step reads, in a fixed order: the
    /// tensors a kept cohort's graphs read where they are.
    fn step_inputs_mut(&mut self) -> Vec<&mut Tensor> {
        let mut inputs: Vec<&mut Tensor> = Vec::new();
        inputs.extend(self.params.iter_mut());
        inputs.extend(self.start.iter_mut());
        inputs.extend(self.velocity.iter_mut());
        inputs.extend(self.second.iter_mut());
        inputs.extend(self.grad_mask.iter_mut().flatten());
        inputs.extend(self.dyn_state.iter_mut().flatten());
        inputs.extend(self.contrast.iter_mut().flat_map(Contrast::tensors_mut));
        inputs.extend(self.decay.iter_mut().flat_map(DecayGradient::tensors_mut));
        inputs.extend(self.usage.as_mut().map(UsageLoss::targets_mut));
        inputs.extend(self.quantizer.iter_mut().flat_map(Quantizer::tensors_mut));
        inputs.extend(self.platon.iter_mut().flat_map(Platon::tensors_mut));
        inputs.extend(self.stopping.iter_mut().flat_map(EarlyStopping::tensors_mut));
        inputs.extend(self.schedule.tables_mut());
        inputs.extend(self.rates.tables_mut());
        inputs.extend(self.noise.device_tensors_mut());
        inputs.push(&mut self.loss_sum);
        inputs.extend(self.device_step.as_mut());
        inputs.extend(self.factors.iter_mut());
        inputs.retain(|t| t.defined());
        inputs
    }

    /// What this cohort's captured steps depend on besides its values.
    fn step_key(&mut self) -> StepKey {
        StepKey {
            config: self.cfg.clone(),
            model: Arc::clone(&self.model),
            data: self.data.shallow_clone(),
            trainable: self.trainable.clone(),
            masked: self.grad_mask.iter().map(Option::is_some).collect(),
            reads_padding: self.reads_padding,
            inputs: self.step_inputs_mut().iter().map(|t| (t.size(), t.kind(), t.device())).collect(),
        }
    }

    /// Moves this cohort's step inputs into `kept`'s tensors (of the same shapes, in the same
    /// order), which the kept graphs read.
    fn adopt(&mut self, kept: Vec<Tensor>) {
        tch::no_grad(|| {
            for (mine, mut theirs) in self.step_inputs_mut().into_iter().zip(kept) {
                theirs.copy_(mine);
                *mine = theirs;
            }
        });
    }

    /// Gives the step inputs away for a later cohort, keeping copies: what the cohort still
    /// reads (its trained parameters and losses) must not change when that cohort trains.
    fn release(&mut self) -> Vec<Tensor> {
        self.step_inputs_mut().into_iter().map(|t| std::mem::replace(t, t.copy())).collect()
    }

    /// One lockstep step `t` of the clients still training.
    fn sgd_step(&mut self, t: usize) {
        let (k, _, x, y, weights) = self.batch(t);
        let x = match &self.cfg.augment {
            Some(augment) => augment.apply(&x, &mut self.noise),
            None => x,
        };
        let valid = self.schedule.padded(t).then(|| weights.gt(0.0).to_kind(Kind::Float));
        let batch = StepBatch { k, x, y, weights, valid };
        // A stopped client's buffers must not move either: keep a copy to restore.
        let frozen: Vec<(usize, Tensor)> = match &self.stopping {
            Some(_) => (0..self.params.len())
                .filter(|&i| !self.trainable[i])
                .map(|i| (i, self.params[i].narrow(0, 0, k).copy()))
                .collect(),
            None => Vec::new(),
        };
        let by_hand = if self.plain_cross_entropy() { self.hand_gradients(&batch) } else { None };
        let (batch_loss, mut grads) = match by_hand {
            Some(found) => found,
            None => self.autograd_gradients(t, &batch),
        };
        let mut seen = self.loss_sum.narrow(0, 0, k);
        match &self.stopping {
            Some(stop) => {
                let active = stop.active.narrow(0, 0, k);
                seen += &batch_loss * &active;
                for (i, old) in frozen {
                    let mut buffer = self.params[i].narrow(0, 0, k);
                    let restored = buffer.where_self(&per_client_view(&active.gt(0.0), buffer.dim()), &old);
                    tch::no_grad(|| buffer.copy_(&restored));
                }
            }
            None => seen += &batch_loss,
        }
        // FedProx's μ/2 ‖w − w_start‖² and FedDyn's α/2 ‖w − w_start‖² − ⟨g, w⟩ enter as their
        // gradients, μ (w − w_start) and α (w − w_start) − g, added in place: no graph of
        // model-sized terms at every step. They reach every trained tensor, also one the
        // cross-entropy does not reach (a block outside a depth window).
        tch::no_grad(|| {
            for (i, grad) in grads.iter_mut().enumerate().filter(|(i, _)| self.trainable[*i]) {
                let drift = || &self.params[i].narrow(0, 0, k) - self.start[i].narrow(0, 0, k);
                let mut add = |term: Tensor| {
                    if grad.defined() {
                        *grad += term;
                    } else {
                        *grad = term;
                    }
                };
                if self.cfg.prox_mu > 0.0 {
                    add(drift() * self.cfg.prox_mu);
                }
                if let Some(g) = &self.dyn_state {
                    add(drift() * self.cfg.dyn_alpha - g[i].narrow(0, 0, k));
                }
            }
        });
        if let Some(decay) = &mut self.decay {
            decay.apply(&mut grads, k);
        }
        if let Some(platon) = &mut self.platon {
            platon.observe(&self.params, &grads, k);
        }
        tch::no_grad(|| self.update(t, k, grads));
        let ratios = self.platon.as_ref().filter(|p| p.prunes(t, k)).map(|p| self.at(t).row(p.ratio_table()));
        if let (Some(platon), Some(ratios)) = (&mut self.platon, ratios) {
            platon
                .prune(k, &ratios, self.model.structure(), &self.names, &mut self.params)
                .expect("the budget's tensors were found when the cohort started");
        }
        let epoch_end = self.stopping.as_ref().filter(|s| s.ends[t]).map(|s| self.at(t).row(&s.epoch_end));
        if let Some(stop) = &mut self.stopping {
            stop.after_step(k, &batch_loss, epoch_end.as_ref());
        }
        if let Some(index) = &mut self.device_step {
            let _ = index.g_add_scalar_(1);
        }
    }

    /// The first `k` clients' batch losses `[k]` and every tensor's gradient (undefined for
    /// tensors that do not train) from the model's hand-derived gradients
    /// ([`Model::loss_gradients`]), if it has them.
    fn hand_gradients(&mut self, batch: &StepBatch) -> Option<(Tensor, Vec<Tensor>)> {
        let StepBatch { k, x, y, weights, valid } = batch;
        let inputs: Vec<Tensor> = self.params.iter().map(|p| p.narrow(0, 0, *k)).collect();
        let mut mode = Mode::padded(&mut self.noise, valid.as_ref());
        let found = tch::no_grad(|| self.model.loss_gradients(&inputs, x, y, weights, &mut mode))?;
        self.reads_padding = mode.reads_padding();
        let grads =
            found.grads.into_iter().zip(&self.trainable).map(|(g, &t)| if t { g } else { Tensor::new() }).collect();
        Some((found.per_client, grads))
    }

    /// The first `k` clients' batch losses `[k]` (detached) and every tensor's gradient
    /// (undefined for tensors that do not train) by autograd, through the options that add to
    /// the loss (MOON, distillation, AdaViT's usage, Q-ViT's quantisation).
    fn autograd_gradients(&mut self, t: usize, batch: &StepBatch) -> (Tensor, Vec<Tensor>) {
        let StepBatch { k, x, y, weights, valid } = batch;
        let k = *k;
        // Buffers (BatchNorm statistics) go in as views the forward pass updates in place.
        let inputs: Vec<Tensor> = self
            .params
            .iter()
            .zip(&self.trainable)
            .map(|(p, &t)| if t { p.narrow(0, 0, k).detach().set_requires_grad(true) } else { p.narrow(0, 0, k) })
            .collect();
        // Q-ViT: the forward pass runs on fake-quantised copies of the weights.
        let quantised = self.quantizer.as_ref().map(|q| q.leaves(k));
        let forward_inputs = match (&self.quantizer, &quantised) {
            (Some(q), Some(leaves)) => q.forward_inputs(&inputs, leaves),
            _ => inputs.iter().map(Tensor::shallow_clone).collect(),
        };
        let mut mode = Mode::padded(&mut self.noise, valid.as_ref());
        // MOON reads the features the classifier reads, from the same pass.
        let (per_client, batch_loss, features) = match (&self.contrast, &self.cfg.distill) {
            (Some(_), _) => {
                let (body, head) = split_classifier(&forward_inputs);
                let z = self.model.features(body, x, &mut mode);
                let per_client = cross_entropy(&linear(&z, &head[0], &head[1]), y, weights);
                let reported = per_client.detach();
                (per_client, reported, Some(z))
            }
            (None, Some(distill)) => {
                let logits = self.model.forward_exits(&forward_inputs, x, &mut mode, &self.readouts);
                let (per_client, deepest) = distill.loss(&logits, y, weights);
                (per_client, deepest.detach(), None)
            }
            (None, None) => {
                let per_client = cross_entropy(&self.model.forward(&forward_inputs, x, &mut mode), y, weights);
                let reported = per_client.detach();
                (per_client, reported, None)
            }
        };
        self.reads_padding = mode.reads_padding();
        // AdaViT: the decisions' kept shares pulled to each client's budget.
        let per_client = match &self.usage {
            Some(usage) => per_client + usage.loss(mode.take_usage(), k),
            None => per_client,
        };
        let mut loss = per_client.sum(Kind::Float);
        if let (Some(contrast), Some(z)) = (&self.contrast, &features) {
            loss = loss + contrast.loss(&self.model, z, &self.start, x, weights);
        }
        let mut leaves: Vec<&Tensor> =
            inputs.iter().zip(&self.trainable).filter(|(_, t)| **t).map(|(p, _)| p).collect();
        if let (Some(q), Some(quantised)) = (&self.quantizer, &quantised) {
            loss = loss + q.penalty(quantised, k).sum(Kind::Float);
            leaves.extend(quantised);
        }
        let mut leaf_grads = Tensor::run_backward(&[loss], &leaves, false, false).into_iter();
        let grads: Vec<Tensor> = self
            .trainable
            .iter()
            .map(|&t| if t { leaf_grads.next().expect("one gradient per leaf") } else { Tensor::new() })
            .collect();
        let scale = self.quantizer.as_ref().map(|q| self.at(t).row(q.scales()));
        if let (Some(q), Some(scale)) = (&mut self.quantizer, scale) {
            q.step(leaf_grads.collect(), k, &scale);
        }
        (batch_loss, grads)
    }

    /// The loss and the loss gradient of every trainable tensor at the current parameters on
    /// step `t`'s batch, in evaluation mode (no dropout draw, no buffer update): a probe that
    /// leaves the job's streams and state as they are. Undefined tensors for buffers; no
    /// gradients at all unless `with_grad`.
    fn probe(&self, t: usize, with_grad: bool) -> (f64, Vec<Tensor>) {
        let (k, b, x, y, weights) = self.batch(t);
        let inputs: Vec<Tensor> = self
            .params
            .iter()
            .zip(&self.trainable)
            .map(|(p, &t)| {
                let p = p.narrow(0, 0, k).detach();
                if t && with_grad { p.set_requires_grad(true) } else { p }
            })
            .collect();
        let logits = self.model.forward(&inputs, &x, &mut Mode::Eval);
        let classes = *logits.size().last().expect("logits have a class dimension");
        let per_sample =
            logits.reshape([-1, classes]).cross_entropy_loss::<Tensor>(&y, None, Reduction::None, -100, 0.0);
        let loss = (per_sample.reshape([k, b]) * &weights).sum(Kind::Float);
        let value = loss.double_value(&[]);
        if !with_grad {
            return (value, Vec::new());
        }
        let leaves: Vec<&Tensor> = inputs.iter().zip(&self.trainable).filter(|(_, t)| **t).map(|(p, _)| p).collect();
        let mut grads = Tensor::run_backward(&[loss], &leaves, false, false).into_iter();
        let grads = self
            .trainable
            .iter()
            .map(|&t| if t { grads.next().expect("one gradient per leaf") } else { Tensor::new() })
            .collect();
        (value, grads)
    }

    /// One update of the first `k` clients at step `t`. Each tensor is touched in as few
    /// passes as the options allow (the update runs out of memory bandwidth before compute):
    /// the fresh gradient absorbs weight decay and mask in place, and `g + β v` is written over
    /// the momentum buffer in the same pass that computes it. Plain SGD on the CPU makes one
    /// pass per tensor instead ([`fused_sgd`], the same numbers).
    fn update(&mut self, t: usize, k: i64, grads: Vec<Tensor>) {
        let [decay, momentum, one_minus_b1, one_minus_b2, eps] = &self.factors;
        let at = self.at(t);
        let row = |table: &Tensor| at.row(table).narrow(0, 0, k);
        let mut step = row(&self.rates.step);
        if let Some(stop) = &self.stopping {
            step = step * stop.active.narrow(0, 0, k);
        }
        let keep = self.rates.keep.as_ref().map(row);
        let inv_sqrt_bias2 = self.rates.inv_sqrt_bias2.as_ref().map(row);
        let diff_weight = self.rates.diff_weight.as_ref().map(row);
        let shrink = self.rates.shrink.as_ref().map(row);
        // Plain SGD on the CPU updates each tensor in one pass (`fused_sgd`), where it can.
        let fused = (self.cfg.optimizer == Optimizer::Sgd
            && shrink.is_none()
            && step.device() == Device::Cpu
            && fused_sgd::available())
        .then(|| self.fused_factors(&step, keep.as_ref()));
        for (i, g) in unaliased(grads).into_iter().enumerate() {
            if !g.defined() {
                continue; // A tensor the loss does not reach does not move.
            }
            let mut p = self.params[i].narrow(0, 0, k);
            if let Some((step, momentum)) = &fused {
                let velocity = momentum.as_ref().map(|_| self.velocity[i].narrow(0, 0, k));
                let terms = SgdTerms {
                    decay: (self.cfg.weight_decay > 0.0).then_some(self.cfg.weight_decay as f32),
                    momentum: momentum.as_deref().zip(velocity.as_ref()),
                    step,
                };
                let mask = self.grad_mask[i].as_ref().map(|m| m.narrow(0, 0, k));
                if fused_sgd::apply(&p, &g, mask.as_ref(), &terms) {
                    continue;
                }
            }
            let mut g = if g.is_contiguous() { g } else { g.contiguous() };
            let dims = p.dim();
            if self.cfg.weight_decay > 0.0 && self.adan.is_none() {
                let _ = g.addcmul_(&p, decay);
            }
            if let Some(m) = &self.grad_mask[i] {
                g *= m.narrow(0, 0, k);
            }
            let direction = match self.cfg.optimizer {
                Optimizer::Sgd if self.cfg.momentum > 0.0 => {
                    // v ← g + β v in one pass, written over v: a replayed step keeps writing into
                    // the same velocity tensors, and no copy follows.
                    let v = self.velocity[i].narrow(0, 0, k);
                    let _ = match &keep {
                        Some(keep) => g.addcmul_out(&v, &v, &(per_client_view(keep, dims) * momentum)),
                        None => g.addcmul_out(&v, &v, momentum),
                    };
                    v
                }
                Optimizer::Sgd => g,
                Optimizer::Adam => {
                    let (mut m, mut v) = (self.velocity[i].narrow(0, 0, k), self.second[i].narrow(0, 0, k));
                    if let Some(keep) = &keep {
                        m *= per_client_view(keep, dims);
                        v *= per_client_view(keep, dims);
                    }
                    // m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g², as m + (1−β₁)(g − m).
                    let _ = m.addcmul_(&(&g - &m), one_minus_b1);
                    let _ = v.addcmul_(&(g.square() - &v), one_minus_b2);
                    let scale = inv_sqrt_bias2.as_ref().expect("Adam has its bias corrections");
                    let denominator = v.sqrt() * per_client_view(scale, dims) + eps;
                    m / denominator
                }
                Optimizer::Adan => {
                    let adan = self.adan.as_mut().expect("Adan keeps its moments");
                    let view = |t: &Tensor| per_client_view(t, dims);
                    let scale = inv_sqrt_bias2.as_ref().expect("Adan has its bias corrections");
                    let diff_weight = diff_weight.as_ref().expect("Adan weighs its difference moment");
                    adan.direction(
                        i,
                        k,
                        &g,
                        t == 0,
                        keep.as_ref().map(view).as_ref(),
                        &view(diff_weight),
                        &view(scale),
                        eps,
                    )
                }
            };
            let _ = p.addcmul_(&direction, &per_client_view(&step, dims));
            if let Some(shrink) = &shrink {
                p *= per_client_view(shrink, dims);
            }
        }
    }

    /// The fused update's per-client factors on the host: each client's step, and with
    /// momentum each client's β (times its `keep`, 0 where its momentum restarts), computed in
    /// float32 as the tensor form computes them.
    fn fused_factors(&self, step: &Tensor, keep: Option<&Tensor>) -> (Vec<f32>, Option<Vec<f32>>) {
        let host = |t: &Tensor| Vec::<f32>::try_from(t).expect("per-client factors are float32");
        let step = host(step);
        let beta = self.cfg.momentum as f32;
        let momentum = (self.cfg.momentum > 0.0).then(|| match keep {
            Some(keep) => host(keep).into_iter().map(|keep| keep * beta).collect(),
            None => vec![beta; step.len()],
        });
        (step, momentum)
    }
}

/// A `[k]` per-client factor viewed as `[k, 1, …]` to broadcast over `dims`-dimensional stacks.
fn per_client_view(factor: &Tensor, dims: usize) -> Tensor {
    let mut shape = vec![1i64; dims];
    shape[0] = factor.size()[0];
    factor.view(shape.as_slice())
}

impl EarlyStopping {
    fn new(patience: usize, epochs: &[Vec<usize>], device: Device) -> Self {
        let clients = epochs.len();
        let total = epochs.iter().map(Vec::len).max().unwrap_or(0);
        let mut epoch_end = vec![0f32; total * clients];
        let mut ends = vec![false; total];
        for (c, epochs) in epochs.iter().enumerate() {
            let mut first = 0;
            for s in 0..epochs.len() {
                if s + 1 == epochs.len() || epochs[s + 1] != epochs[s] {
                    epoch_end[s * clients + c] = 1.0 / (s + 1 - first) as f32;
                    ends[s] = true;
                    first = s + 1;
                }
            }
        }
        let zeros = || Tensor::zeros([clients as i64], (Kind::Float, device));
        EarlyStopping {
            patience: patience as f64,
            epoch_loss: zeros(),
            best: zeros() + f64::INFINITY,
            bad_epochs: zeros(),
            active: zeros() + 1.0,
            steps_run: zeros(),
            epoch_end: Tensor::from_slice(&epoch_end).reshape([total as i64, clients as i64]).to_device(device),
            ends,
        }
    }

    /// The tensors a step reads or moves: the epoch losses, the best means, the epochs without
    /// improvement, the active flags, the steps run and the epoch ends.
    fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        [
            &mut self.epoch_loss,
            &mut self.best,
            &mut self.bad_epochs,
            &mut self.active,
            &mut self.steps_run,
            &mut self.epoch_end,
        ]
        .into_iter()
    }

    /// Counts a step's batch losses of the first `k` clients and, at a step where some
    /// client's epoch ends (`epoch_end`, the step's row of the epoch ends), compares its mean
    /// with the best so far; a client that has not improved for `patience` epochs stops.
    fn after_step(&mut self, k: i64, batch_loss: &Tensor, epoch_end: Option<&Tensor>) {
        let active = self.active.narrow(0, 0, k);
        let mut steps_run = self.steps_run.narrow(0, 0, k);
        steps_run += &active;
        let mut epoch_loss = self.epoch_loss.narrow(0, 0, k);
        epoch_loss += batch_loss;
        let Some(epoch_end) = epoch_end else { return };
        let inv_batches = epoch_end.narrow(0, 0, k);
        let ends = inv_batches.gt(0.0);
        let mean = &epoch_loss * &inv_batches;
        let mut best = self.best.narrow(0, 0, k);
        let improved = mean.lt_tensor(&best).logical_and(&ends);
        let worse = ends.logical_and(&improved.logical_not());
        best.copy_(&mean.where_self(&improved, &best));
        let mut bad = self.bad_epochs.narrow(0, 0, k);
        let counted = (&bad + 1.0).where_self(&worse, &(&bad * improved.logical_not().to_kind(Kind::Float)));
        bad.copy_(&counted);
        let mut active = self.active.narrow(0, 0, k);
        active *= bad.lt(self.patience).to_kind(Kind::Float);
        epoch_loss *= ends.logical_not().to_kind(Kind::Float);
    }
}

impl TrainSession for SgdCohort {
    fn run_until(&mut self, share: f64) -> Result<()> {
        let until = if self.clients() == 1 {
            let total = self.schedule.total_steps();
            ((share.clamp(0.0, 1.0) * total as f64).round() as usize).min(total)
        } else if share >= 1.0 {
            self.schedule.total_steps()
        } else {
            return Err(TrainerError::PartialCohort { trainer: NAME, share }.into());
        };
        self.run_steps(until, self.at_device_counters || self.graphable())
    }

    fn merge_pulled(&mut self, pulled: &ParamSet, info: PullInfo) -> Result<()> {
        if self.clients() != 1 {
            return Err(TrainerError::PullIntoCohort { trainer: NAME, jobs: self.clients() }.into());
        }
        let shapes: Vec<Vec<i64>> = self.start.iter().map(|s| s.size()[1..].to_vec()).collect();
        if pulled.shapes() != shapes {
            return Err(TrainerError::PulledShapes { trainer: NAME }.into());
        }
        let (g, o) = (info.pulled_version, info.base_version);
        let beta = match &self.pull {
            Some((cfg, controls)) => controls[0].weight(cfg, g, o).1,
            None => self.cfg.pull_weight,
        };
        // The learned weight's step and the reward need w_g − w_pre and the loss before the
        // merge, on the batch the job trains on next.
        let probing = self.pull.is_some() && self.step < self.schedule.total_steps();
        let moved: Vec<Tensor> = match probing {
            true => self.params.iter().zip(pulled.tensors()).map(|(p, q)| q.unsqueeze(0) - p).collect(),
            false => Vec::new(),
        };
        let loss_before = probing.then(|| self.probe(self.step, false).0);
        tch::no_grad(|| {
            for (p, q) in self.params.iter_mut().zip(pulled.tensors()) {
                let merged = &*p * (1.0 - beta) + q.unsqueeze(0) * beta;
                p.copy_(&merged);
            }
        });
        if let Some(loss_before) = loss_before {
            let (loss_after, grads) = self.probe(self.step, true);
            let c: f64 = grads
                .iter()
                .zip(&moved)
                .filter(|(g, _)| g.defined())
                .map(|(g, m)| (g * m).sum(Kind::Double).double_value(&[]))
                .sum();
            if let Some((cfg, controls)) = &mut self.pull {
                controls[0].learn(cfg, g, o, c);
            }
            self.pull_merge = Some(PullMerge { weight: beta, reward: loss_before - loss_after });
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Vec<TrainOutcome>> {
        let read = |t: &Tensor| {
            Vec::<f32>::try_from(t.to_device(Device::Cpu))
                .map_err(|source| TrainerError::ReadLosses { trainer: NAME, source })
        };
        let losses = read(&self.loss_sum)?;
        let steps_run = self.stopping.as_ref().map(|s| read(&s.steps_run)).transpose()?;
        let mut outcomes: Vec<Option<TrainOutcome>> = (0..self.clients()).map(|_| None).collect();
        for (slot, &job) in self.order.iter().enumerate() {
            let done = match &steps_run {
                Some(run) => run[slot] as usize,
                None => self.step.min(self.schedule.steps()[slot]),
            };
            let factors = self.width.as_ref().and_then(|w| w.factors_if_final());
            // Units a learned width mask dropped go back as they came: a zero delta.
            let tensors = self
                .params
                .iter()
                .enumerate()
                .map(|(i, p)| match factors.and_then(|f| f[i].as_ref()) {
                    Some(f) => {
                        p.get(slot as i64).where_self(&f.get(slot as i64).gt(0.5), &self.start[i].get(slot as i64))
                    }
                    None => p.get(slot as i64),
                })
                .collect();
            // FedDyn: g_k − α (w_end − w_start) on the trained tensors; MOON: the trained model.
            let state = match &self.dyn_state {
                Some(g) => {
                    let next = (0..self.names.len())
                        .map(|i| {
                            let g = g[i].get(slot as i64);
                            if self.trainable[i] {
                                let moved = self.params[i].get(slot as i64) - self.start[i].get(slot as i64);
                                g - moved * self.cfg.dyn_alpha
                            } else {
                                g.copy()
                            }
                        })
                        .collect();
                    Some(ParamSet::new(self.names.clone(), next)?)
                }
                None if self.pull.is_some() => Some(self.pull.as_ref().expect("checked").1[slot].to_state()?),
                None if self.decay.is_some() => {
                    Some(self.decay.as_ref().expect("checked").state_of(slot as i64, &self.names)?)
                }
                None if self.contrast.is_some() => Some(ParamSet::new(
                    self.names.clone(),
                    self.params.iter().map(|p| p.get(slot as i64).copy()).collect(),
                )?),
                None if self.width.is_some() => {
                    Some(self.width.as_ref().expect("checked").state_of(slot, self.model.structure())?)
                }
                None => None,
            };
            outcomes[job] = Some(TrainOutcome {
                params: ParamSet::new(self.names.clone(), tensors)?,
                mean_loss: f64::from(losses[slot]) / done.max(1) as f64,
                steps: done,
                lr_sum: self.rates.step_sum(slot, done),
                pull_merge: self.pull_merge,
                state,
                kept_units: self.platon.as_ref().map(|p| p.kept_units(slot, self.model.structure())),
            });
        }
        Ok(outcomes.into_iter().map(|o| o.expect("every slot filled")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Mode;
    use crate::rng::{self, Rng, TensorNoise};
    use crate::structure::{Structure, TensorSpec};
    use crate::testing::tiny_dataset;

    /// `logits = dropout(x) Wᵀ + b`: a model that draws noise at every step, and zeroes its
    /// padding samples' inputs if `reads_padding`.
    struct DropoutLinear {
        structure: Structure,
        reads_padding: bool,
    }

    impl Model for DropoutLinear {
        fn structure(&self) -> &Structure {
            &self.structure
        }

        fn init(&self, _: &mut Rng) -> ParamSet {
            unreachable!("the jobs bring their parameters")
        }

        fn features(&self, _body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
            let valid = if self.reads_padding { mode.valid() } else { None };
            let x = match valid {
                Some(valid) => x * valid.unsqueeze(-1),
                None => x.shallow_clone(),
            };
            mode.dropout(&x, 0.5)
        }

        fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
            vec![0.0; shapes.len()]
        }
    }

    /// Three clients of 3, 1 and 2 samples (steps of different counts and padded batches),
    /// each with its own streams, a mask on `w` for the second.
    fn jobs() -> Vec<TrainJob> {
        jobs_of(false)
    }

    /// [`jobs`] of a model that reads the padding mask if `reads_padding`.
    fn jobs_of(reads_padding: bool) -> Vec<TrainJob> {
        let data = tiny_dataset();
        let t = |name: &str, shape: Vec<i64>| TensorSpec::new(name, shape);
        let model: Arc<dyn Model> = Arc::new(DropoutLinear {
            structure: Structure { tensors: vec![t("w", vec![2, 2]), t("b", vec![2])], groups: vec![] },
            reads_padding,
        });
        let samples: [&[i64]; 3] = [&[0, 1, 2], &[3], &[4, 5]];
        samples
            .iter()
            .enumerate()
            .map(|(c, idx)| {
                let w = Tensor::from_slice(&[0.5f32, -0.25, 0.1, 0.3]).reshape([2, 2]) * (c as f64 + 1.0);
                let params =
                    ParamSet::new(vec!["w".into(), "b".into()], vec![w, Tensor::from_slice(&[0.0f32, 0.1])]).unwrap();
                let mask = Tensor::from_slice(&[1.0f32, 0.0, 1.0, 1.0]).reshape([2, 2]);
                TrainJob {
                    model: Arc::clone(&model),
                    params,
                    grad_mask: (c == 1).then(|| vec![Some(mask), None]),
                    frozen: Vec::new(),
                    indices: Tensor::from_slice(idx),
                    data: data.shallow_clone(),
                    rng: rng::stream(3, &[c as u64]),
                    noise: TensorNoise::new(rng::derive_seed(3, &[c as u64, 1])),
                    version: 0,
                    delay: c as f64,
                    width: None,
                    state: None,
                    batch_size: None,
                }
            })
            .collect()
    }

    /// The steps a CUDA graph replays read their step's rows and noise at device counters
    /// and update in place: run that way (eagerly, here on CPU), a cohort trains exactly what
    /// it trains with host indices.
    #[test]
    fn device_indexed_steps_train_what_host_indexed_steps_train() {
        let configs = [
            SgdConfig { momentum: 0.9, weight_decay: 0.01, prox_mu: 0.1, ..SgdConfig::default() },
            SgdConfig { optimizer: Optimizer::Adam, lr: 0.01, momentum: 0.0, ..SgdConfig::default() },
            SgdConfig {
                momentum: 0.5,
                reset_each_epoch: true,
                lr_decay: LrDecay::InvSqrtEpoch,
                delay_alpha: 0.5,
                ..SgdConfig::default()
            },
            // Adan's bias corrections, difference weight and decoupled decay are table rows;
            // its restarts zero the moments and the difference.
            SgdConfig {
                optimizer: Optimizer::Adan,
                lr: 0.01,
                momentum: 0.0,
                weight_decay: 0.02,
                reset_each_epoch: true,
                distill: Some(DistillConfig::default()),
                ..SgdConfig::default()
            },
        ];
        for cfg in configs {
            let sgd = Sgd::new(SgdConfig { batch_size: 2, epochs: 3, ..cfg });
            let mut host = SgdCohort::new(&sgd, jobs()).unwrap();
            host.run_until(1.0).unwrap();
            let mut device = SgdCohort::new(&sgd, jobs()).unwrap();
            let total = device.schedule.total_steps();
            assert_eq!(total, 6, "3 epochs of 2 batches for the longest job");
            device.run_captured(total).unwrap();
            assert!(device.device_step.is_some(), "the device-indexed path ran");
            assert_eq!(i64::try_from(device.device_step.as_ref().unwrap()).unwrap(), total as i64);
            let (a, b) = (Box::new(host).finish().unwrap(), Box::new(device).finish().unwrap());
            for (x, y) in a.iter().zip(&b) {
                assert!(x.params.equal(&y.params), "{:?}: {:?} against {:?}", sgd.cfg.optimizer, x.params, y.params);
                assert_eq!(x.mean_loss, y.mean_loss);
                assert_eq!(x.steps, y.steps);
            }
            assert!(!a[0].params.equal(&jobs().remove(0).params), "training moved the model");
        }
    }

    /// A padded step and a full one of the same size share a graph unless the model reads the
    /// padding mask, which step 0 tells.
    #[test]
    fn padding_makes_its_own_step_shape_only_for_a_model_that_reads_it() {
        let sgd = Sgd::new(SgdConfig { batch_size: 2, epochs: 3, ..SgdConfig::default() });
        let padded_shapes = |reads_padding: bool| {
            let mut cohort = SgdCohort::new(&sgd, jobs_of(reads_padding)).unwrap();
            assert!(cohort.reads_padding, "a cohort assumes padding matters until a step shows it does not");
            cohort.run_captured(1).unwrap();
            assert_eq!(cohort.reads_padding, reads_padding);
            let total = cohort.schedule.total_steps();
            let padded = (1..total).filter(|&t| cohort.schedule.padded(t)).count();
            assert!(padded > 0, "the jobs' schedule has padded steps after step 0");
            (1..total).filter(|&t| cohort.shape(t).padded).count()
        };
        assert_eq!(padded_shapes(false), 0);
        assert!(padded_shapes(true) > 0);
    }

    /// A cohort that takes the steps a finished cohort of its kind kept (their tensors; on
    /// CUDA their graphs) trains in those tensors exactly what it trains on its own, and the
    /// finished cohort's outcome stays what it was.
    #[test]
    fn a_cohort_on_kept_steps_trains_what_it_trains_alone() {
        let sgd = SgdConfig { batch_size: 2, epochs: 3, momentum: 0.9, prox_mu: 0.1, ..SgdConfig::default() };
        let adam = SgdConfig { optimizer: Optimizer::Adam, lr: 0.01, momentum: 0.0, ..sgd.clone() };
        for cfg in [sgd, adam] {
            trains_on_kept_steps_what_it_trains_alone(cfg);
        }
    }

    fn trains_on_kept_steps_what_it_trains_alone(cfg: SgdConfig) {
        let (keeping, alone) = (Sgd::new(SgdConfig { keep_graphs: true, ..cfg.clone() }), Sgd::new(cfg));
        let first_jobs = jobs();
        // The second cohort: the same model and data, other weights and streams.
        let second_jobs = || -> Vec<TrainJob> {
            jobs()
                .into_iter()
                .enumerate()
                .map(|(c, job)| TrainJob {
                    model: Arc::clone(&first_jobs[0].model),
                    data: first_jobs[0].data.shallow_clone(),
                    params: job.params.map(|t| t * -0.5 + 0.25),
                    rng: rng::stream(8, &[c as u64]),
                    noise: TensorNoise::new(rng::derive_seed(8, &[c as u64, 1])),
                    ..job
                })
                .collect()
        };
        let same_jobs = || -> Vec<TrainJob> {
            jobs()
                .into_iter()
                .map(|job| TrainJob {
                    model: Arc::clone(&first_jobs[0].model),
                    data: first_jobs[0].data.shallow_clone(),
                    ..job
                })
                .collect()
        };
        let run = |sgd: &Sgd, jobs: Vec<TrainJob>| {
            let mut cohort = SgdCohort::new(sgd, jobs).unwrap();
            let total = cohort.schedule.total_steps();
            cohort.run_captured(total).unwrap();
            Box::new(cohort).finish().unwrap()
        };
        let mut first = SgdCohort::new(&keeping, same_jobs()).unwrap();
        let total = first.schedule.total_steps();
        first.run_captured(total - 1).unwrap();
        let kept_at = first.params[0].data_ptr();
        first.run_captured(total).unwrap();
        assert_ne!(first.params[0].data_ptr(), kept_at, "the finished cohort keeps a copy of what it gave away");

        let mut second = SgdCohort::new(&keeping, second_jobs()).unwrap();
        second.run_captured(total - 1).unwrap();
        assert_eq!(second.params[0].data_ptr(), kept_at, "the second cohort trains in the kept tensors");
        second.run_captured(total).unwrap();
        let (first, second) = (Box::new(first).finish().unwrap(), Box::new(second).finish().unwrap());
        for (got, want) in [(first, run(&alone, same_jobs())), (second, run(&alone, second_jobs()))] {
            for (x, y) in got.iter().zip(&want) {
                assert!(x.params.equal(&y.params), "{:?} against {:?}", x.params, y.params);
                assert_eq!((x.mean_loss, x.steps), (y.mean_loss, y.steps));
            }
        }
        // A cohort of another kind (another batch size: other shapes) does not take them, and
        // the steps it keeps in turn do not push them out.
        let other = Sgd::new(SgdConfig { batch_size: 3, keep_graphs: true, ..keeping.config().clone() });
        let mut third = SgdCohort::new(&other, second_jobs()).unwrap();
        third.run_captured(1).unwrap();
        assert_ne!(third.params[0].data_ptr(), kept_at);
        third.run_captured(third.schedule.total_steps()).unwrap();
        let mut fourth = SgdCohort::new(&keeping, same_jobs()).unwrap();
        fourth.run_captured(1).unwrap();
        assert_eq!(fourth.params[0].data_ptr(), kept_at, "the first kind's steps are still kept");
    }
}
