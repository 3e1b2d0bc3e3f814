//! The `dirichlet` partitioner: label skew from per-class Dirichlet(α) proportions over
//! clients (Hsu, Qi and Brown, "Measuring the Effects of Non-Identical Data Distribution for
//! Federated Visual Classification", 2019), in the form the papers' code used: PFNM's
//! `partition_data`, NIID-Bench (Li et al. 2021, "Federated Learning on Non-IID Data Silos")
//! and PFLlib's `separate_data(partition='dir')`.
//!
//! For each class k, with n_k samples:
//! 1. shuffle the class's indices;
//! 2. draw p ~ Dir(α·1_C) over the C clients (as normalised Gamma(α, 1) draws);
//! 3. with `cap = "even-share"`, set p_j = 0 for every client that already holds at least N/C
//!    samples, and renormalise;
//! 4. with `remainder = "assign"` (the default), cut the shuffled indices at
//!    ⌊n_k · (p_1 + … + p_j)⌋, j = 1..C−1, and give piece j to client j. Every sample is
//!    assigned; the last client with a positive share takes the rest.
//!    With `remainder = "drop"`, client j takes the next ⌊p_j · n_k⌋ of the shuffled indices
//!    (client 1 first), and the n_k − Σ_j ⌊p_j · n_k⌋ left over (fewer than C) belong to no
//!    client.
//!
//! The whole draw is repeated until the smallest client holds at least `min_samples`, at most
//! `max_draws` times; then it is an error. Defaults follow the kdd23 spec's recommendation
//! the N/C cap, least_samples = 10, up to 1,000 draws), which is also NIID-Bench's
//! `min_require_size = 10` used by fedasmu. cos2p does not state its procedure.
//!
//! asyncnc's code (Forootani and Iervolino) has neither cap nor minimum and floors each
//! proportion, dropping the leftover, then shuffles each client's list: use `cap = "none"`,
//! `min_samples = 0` and `remainder = "drop"`. The `Partitioner` contract allows samples that
//! belong to no client when the partitioner is configured to hold some out, as `drop` and
//! `local_train_share` < 1 do. With `drop` each client's list comes back in that shuffled order
//! rather than sorted; the trainers draw their own batch order, so only the realisation of a
//! seed depends on it. Without a minimum a client can end up with no sample at all (likelier
//! with `drop` and a small α); the simulation refuses such a partition ("client N has no
//! training samples"), so set `min_samples = 1` to redraw instead.
//!
//! `local_train_share` < 1 reproduces PFLlib's per-client train/test split, whose test part
//! the KDD'23 code never uses: after the draw each client keeps ⌊share · n_j⌋ of its samples,
//! chosen at random (0.84 there), and the rest belong to no client. The minimum applies to the
//! whole draw, before the split, as in PFLlib.
//!
//! `counts` replays a draw made elsewhere instead of drawing: per client, the `[label, count]`
//! pairs a published partition records (PFLlib's `config.json`, "Size of samples for labels in
//! clients"), so a run can train on the authors' client mixes when their files cannot be had.
//! Each class's shuffled indices are cut in those counts; on a pool of another size (the same
//! mixes over a different split) each class is cut in proportion to them, the remainders going
//! to the largest fractional parts, so every sample still goes to exactly one client (with
//! `remainder = "drop"` the proportional counts are floored and the leftover dropped, as in a
//! draw). `alpha` then only records the α of the draw, and `min_samples` is checked against the
//! counts; `local_train_share` applies as after a draw.
//!
//! Edge case: for tiny α every Gamma draw of the eligible clients can underflow to 0 in f64.
//! The Dirichlet then tends to a one-hot vector at a uniformly random coordinate, and that is
//! what we use (numpy would produce NaN proportions).

use fl_core::rng::Rng;
use fl_core::{InvalidKey, Partitioner, Result, Validate};
use rand::Rng as _;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use super::{check_args, sorted};
use crate::error::PartitionError;

/// Whether clients that already hold their even share stop receiving samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cap {
    /// A client holding at least N/clients samples gets no share of the later classes (PFNM).
    #[default]
    EvenShare,
    /// Plain per-class Dirichlet proportions (Hsu et al.).
    None,
}

/// What happens to the samples of a class that the floored per-client proportions leave over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Remainder {
    /// Every sample is assigned: the cuts are floored cumulative shares and the last client with
    /// a positive share takes the rest (PFNM, NIID-Bench, PFLlib). Each client's list is sorted.
    #[default]
    Assign,
    /// Client j takes ⌊p_j · n_k⌋ samples of class k; the rest of the class belongs to no client.
    /// Each client's list comes back shuffled (asyncnc's code).
    Drop,
}

/// Parameters of `dirichlet`.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DirichletConfig {
    /// Concentration α > 0: small α gives few classes per client, large α nearly the global mix.
    #[default(0.5)]
    pub alpha: f64,
    /// Redraw the whole partition until every client holds at least this many samples (0: off).
    #[default(10)]
    pub min_samples: usize,
    /// Whether clients that already hold their even share N/C stop receiving samples.
    #[default(Cap::EvenShare)]
    pub cap: Cap,
    /// Whether the samples the floored proportions leave over are assigned or dropped.
    #[default(Remainder::Assign)]
    pub remainder: Remainder,
    /// How many whole-partition draws to try before giving up on `min_samples`.
    #[default(1000)]
    pub max_draws: usize,
    /// The share of each client's samples it keeps, in (0, 1] (1: all of them).
    #[default(1.0)]
    pub local_train_share: f64,
    /// A recorded draw to replay instead of drawing: per client, `[label, count]` pairs.
    #[default(None)]
    pub counts: Option<Vec<Vec<[u64; 2]>>>,
    /// Each client's expected share of the data, relative, in client order (empty: equal):
    /// the client's Dirichlet draws are scaled by it, and with `cap = "even-share"` its cap is
    /// its share of N (Co-S²P's Table 7: device types with different data sizes).
    pub client_weights: Vec<f64>,
}

impl Validate for DirichletConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.alpha > 0.0 && self.alpha.is_finite()) {
            return Err(InvalidKey::new("alpha", format!("must be a finite number > 0, got {}", self.alpha)));
        }
        if self.max_draws == 0 {
            return Err(InvalidKey::new("max_draws", "must be at least 1"));
        }
        if let Some(w) = self.client_weights.iter().find(|w| !(**w > 0.0 && w.is_finite())) {
            return Err(InvalidKey::new("client_weights", format!("expected positive finite weights, got {w}")));
        }
        InvalidKey::in_unit_interval("local_train_share", self.local_train_share)?;
        if let Some(counts) = &self.counts {
            for (j, client) in counts.iter().enumerate() {
                let total: u64 = client.iter().map(|[_, c]| c).sum();
                if total < self.min_samples as u64 {
                    return Err(InvalidKey::new(
                        format!("counts[{j}]"),
                        format!("client {j} holds {total} samples, fewer than min_samples = {}", self.min_samples),
                    ));
                }
                let mut labels: Vec<u64> = client.iter().map(|[l, _]| *l).collect();
                labels.sort_unstable();
                if let Some(w) = labels.windows(2).find(|w| w[0] == w[1]) {
                    return Err(InvalidKey::new(format!("counts[{j}]"), format!("label {} is listed twice", w[0])));
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct Dirichlet {
    pub cfg: DirichletConfig,
}

impl Dirichlet {
    /// The partitioner for `cfg`.
    pub fn new(cfg: DirichletConfig) -> Self {
        Dirichlet { cfg }
    }

    /// One whole draw: every class split among the clients.
    fn draw(
        &self,
        by_class: &[Vec<i64>],
        n: usize,
        clients: usize,
        gamma: &Gamma<f64>,
        rng: &mut Rng,
    ) -> Vec<Vec<i64>> {
        // Each client's share of the data: equal, or its weight's part of their sum.
        let weights = &self.cfg.client_weights;
        let total_weight: f64 = weights.iter().sum();
        let share = |j: usize| weights[j] / total_weight;
        let cap = |j: usize| if weights.is_empty() { n as f64 / clients as f64 } else { n as f64 * share(j) };
        let mut parts: Vec<Vec<i64>> = vec![Vec::new(); clients];
        let mut p = vec![0.0f64; clients];
        for class in by_class.iter().filter(|c| !c.is_empty()) {
            let mut idx = class.clone();
            idx.shuffle(rng);
            for (j, g) in p.iter_mut().enumerate() {
                *g = gamma.sample(rng);
                if !weights.is_empty() {
                    *g *= share(j);
                }
            }
            let eligible = |j: usize| self.cfg.cap == Cap::None || (parts[j].len() as f64) < cap(j);
            for (j, g) in p.iter_mut().enumerate() {
                if !eligible(j) {
                    *g = 0.0;
                }
            }
            let mut total: f64 = p.iter().sum();
            if total <= 0.0 {
                // Every eligible draw underflowed: the α → 0 limit is one-hot at a uniform
                // eligible client. Some client is eligible: while samples remain unassigned,
                // not every client can hold N/C of them.
                let open: Vec<usize> = (0..clients).filter(|&j| eligible(j)).collect();
                p[open[rng.random_range(0..open.len())]] = 1.0;
                total = 1.0;
            }
            let nk = idx.len();
            match self.cfg.remainder {
                Remainder::Assign => {
                    // The last client with a positive share takes the rest, and a zero share
                    // takes nothing, so rounding in the cumulative sum can never hand a capped
                    // client a sample (numpy's `split` at the last boundary can).
                    let last = (0..clients).rev().find(|&j| p[j] > 0.0).expect("some share is positive");
                    let mut cum = 0.0;
                    let mut start = 0;
                    for (j, part) in parts.iter_mut().enumerate() {
                        cum += p[j] / total;
                        let end = if p[j] == 0.0 {
                            start
                        } else if j == last {
                            nk
                        } else {
                            ((cum * nk as f64).floor() as usize).clamp(start, nk)
                        };
                        part.extend_from_slice(&idx[start..end]);
                        start = end;
                    }
                }
                Remainder::Drop => {
                    // asyncnc's `(p * n_k).astype(int)`: each share floored on its own, so
                    // fewer than one sample per client is left over. The shares sum to one up
                    // to rounding; the `min` only guards the slice.
                    let mut start = 0;
                    for (j, part) in parts.iter_mut().enumerate() {
                        let take = ((p[j] / total * nk as f64).floor() as usize).min(nk - start);
                        part.extend_from_slice(&idx[start..start + take]);
                        start += take;
                    }
                }
            }
        }
        parts
    }

    /// The recorded draw `counts` over this pool: each class's shuffled indices cut in the
    /// recorded counts, or in proportion to them when the class holds another number of samples
    /// (the floored proportions' leftover assigned or dropped as `remainder` says).
    fn replay(&self, counts: &[Vec<[u64; 2]>], by_class: &[Vec<i64>], rng: &mut Rng) -> Result<Vec<Vec<i64>>> {
        let mut parts: Vec<Vec<i64>> = vec![Vec::new(); counts.len()];
        for (k, class) in by_class.iter().enumerate() {
            let wanted: Vec<u64> =
                counts.iter().map(|c| c.iter().find(|[l, _]| *l == k as u64).map_or(0, |[_, n]| *n)).collect();
            let total: u64 = wanted.iter().sum();
            let nk = class.len() as u64;
            if total == 0 {
                if nk > 0 {
                    return Err(PartitionError::CountsUnheld { label: k, samples: nk }.into());
                }
                continue;
            }
            // Proportional shares, floored; the remainders to the largest fractional parts,
            // unless they are dropped.
            let mut share: Vec<u64> = wanted.iter().map(|&w| w * nk / total).collect();
            if self.cfg.remainder == Remainder::Assign {
                let mut order: Vec<usize> = (0..wanted.len()).collect();
                order.sort_by_key(|&j| std::cmp::Reverse(wanted[j] * nk % total));
                let left = nk - share.iter().sum::<u64>();
                for &j in order.iter().take(left as usize) {
                    share[j] += 1;
                }
            }
            let mut idx = class.clone();
            idx.shuffle(rng);
            let mut start = 0;
            for (part, n) in parts.iter_mut().zip(share) {
                part.extend_from_slice(&idx[start..start + n as usize]);
                start += n as usize;
            }
        }
        Ok(parts)
    }

    /// Each client's random `local_train_share` of its samples.
    fn keep_local_train(&self, mut parts: Vec<Vec<i64>>, rng: &mut Rng) -> Vec<Vec<i64>> {
        let share = self.cfg.local_train_share;
        if share < 1.0 {
            for part in &mut parts {
                part.shuffle(rng);
                part.truncate((share * part.len() as f64).floor() as usize);
            }
        }
        parts
    }

    /// The lists in the order `remainder` promises: sorted, or shuffled as asyncnc's code
    /// leaves them.
    fn finish(&self, mut parts: Vec<Vec<i64>>, rng: &mut Rng) -> Vec<Vec<i64>> {
        match self.cfg.remainder {
            Remainder::Assign => sorted(parts),
            Remainder::Drop => {
                for part in &mut parts {
                    part.shuffle(rng);
                }
                parts
            }
        }
    }
}

impl Partitioner for Dirichlet {
    fn partition(&self, labels: &[i64], classes: i64, clients: usize, rng: &mut Rng) -> Result<Vec<Vec<i64>>> {
        check_args("dirichlet", labels, classes, clients)?;
        let (n, min) = (labels.len(), self.cfg.min_samples);
        if min * clients > n {
            return Err(PartitionError::TooFewForMinSamples { min_samples: min, clients, samples: n }.into());
        }
        let mut by_class: Vec<Vec<i64>> = vec![Vec::new(); classes as usize];
        for (i, &l) in labels.iter().enumerate() {
            by_class[l as usize].push(i as i64);
        }
        let weights = self.cfg.client_weights.len();
        if weights > 0 && weights != clients {
            return Err(PartitionError::WeightsClients { given: weights, clients }.into());
        }
        if let Some(counts) = &self.cfg.counts {
            if counts.len() != clients {
                return Err(PartitionError::CountsClients { recorded: counts.len(), clients }.into());
            }
            if let Some([l, _]) = counts.iter().flatten().find(|[l, _]| *l >= classes as u64) {
                return Err(PartitionError::CountsLabel { label: *l, classes }.into());
            }
            let parts = self.replay(counts, &by_class, rng)?;
            let kept = self.keep_local_train(parts, rng);
            return Ok(self.finish(kept, rng));
        }
        let gamma = Gamma::new(self.cfg.alpha, 1.0).map_err(|_| PartitionError::Alpha { alpha: self.cfg.alpha })?;
        let mut best = 0;
        for _ in 0..self.cfg.max_draws {
            let parts = self.draw(&by_class, n, clients, &gamma, rng);
            let smallest = parts.iter().map(Vec::len).min().unwrap_or(0);
            if smallest >= min {
                let kept = self.keep_local_train(parts, rng);
                return Ok(self.finish(kept, rng));
            }
            best = best.max(smallest);
        }
        Err(PartitionError::NoDrawMeetsMinSamples {
            alpha: self.cfg.alpha,
            clients,
            samples: n,
            draws: self.cfg.max_draws,
            min_samples: min,
            best,
        }
        .into())
    }
}

fl_core::register!(Partitioner "dirichlet" => Dirichlet::new(DirichletConfig),
    summary: "label skew: per-class Dirichlet(alpha) proportions over clients, PFNM cap, min_samples redraws, leftover assigned or dropped; or a recorded draw's per-client label counts",
    paper: "Hsu, Qi and Brown, Measuring the Effects of Non-Identical Data Distribution for Federated Visual Classification, 2019");
