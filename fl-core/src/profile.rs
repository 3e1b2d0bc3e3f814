//! Device profiles and the cost model: how long a client job takes in virtual time.
//!
//! A job's duration is download(bytes of the sub-model) + local compute (training FLOPs /
//! throughput) + upload(bytes of the update). Under split learning the compute phase also
//! waits for the server's part and for the activations and gradients relayed across the cut. Training FLOPs are 3x the forward FLOPs (forward,
//! backward to activations, backward to weights) per sample and epoch. Profiles are drawn once
//! per client from declared distributions.

use rand::Rng as _;
use rand::seq::SliceRandom;
use rand_distr::{Distribution as _, LogNormal};
use serde::{Deserialize, Serialize};

use crate::error::InvalidKey;
use crate::error::{Error, Result};
use crate::rng::Rng;

/// Resources of one client.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceProfile {
    /// Sustained training throughput, FLOP/s.
    pub flops_per_s: f64,
    /// Upload bandwidth, bytes/s.
    pub up_bytes_per_s: f64,
    /// Download bandwidth, bytes/s.
    pub down_bytes_per_s: f64,
    /// Memory a job may use, bytes ([`crate::job_memory()`]); infinite: no limit.
    #[serde(skip_serializing_if = "is_unlimited")]
    pub memory_bytes: f64,
    /// The device's mini-batch size (Co-S²P's Table 7: 8 on a Jetson NX, 128 on an AGX 64GB);
    /// None: the trainer's `batch_size`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<usize>,
}

fn is_unlimited(bytes: &f64) -> bool {
    bytes.is_infinite()
}

/// The size and work of one job, as the cost model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct JobCost {
    /// Bytes the client downloads before training: its (sub-)model, or under a split its part
    /// of it.
    pub down_bytes: f64,
    /// FLOPs of the client's local training ([`train_flops`]; under a split, its part).
    pub train_flops: f64,
    /// Bytes the client uploads after training: its update, as large as its download.
    pub up_bytes: f64,
    /// Split learning: bytes relayed each way during training (activations up, gradients down).
    pub relay_bytes: f64,
    /// Split learning: seconds the client waits on the server (its part of the training and
    /// the per-batch round trips).
    pub server_s: f64,
}

/// A job's virtual duration, phase by phase (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phases {
    /// Downloading the (sub-)model.
    pub down_s: f64,
    /// Local training (under a split, also the wait for the server and the relay).
    pub compute_s: f64,
    /// Uploading the update.
    pub up_s: f64,
}

impl Phases {
    /// The job's whole duration: download, compute and upload, in virtual seconds.
    pub fn total_s(&self) -> f64 {
        self.down_s + self.compute_s + self.up_s
    }

    /// Every phase stretched by `factor` (per-job jitter).
    pub fn scaled(&self, factor: f64) -> Phases {
        Phases { down_s: self.down_s * factor, compute_s: self.compute_s * factor, up_s: self.up_s * factor }
    }
}

impl DeviceProfile {
    /// Seconds per phase for a job on this device, without jitter.
    pub fn phases(&self, cost: &JobCost) -> Phases {
        Phases {
            down_s: cost.down_bytes / self.down_bytes_per_s,
            compute_s: cost.train_flops / self.flops_per_s
                + cost.server_s
                + cost.relay_bytes / self.up_bytes_per_s
                + cost.relay_bytes / self.down_bytes_per_s,
            up_s: cost.up_bytes / self.up_bytes_per_s,
        }
    }

    /// Seconds for a job on this device, without jitter: the cost schedulers reason with.
    pub fn duration_s(&self, cost: &JobCost) -> f64 {
        self.phases(cost).total_s()
    }
}

/// Training FLOPs of `samples` sample-passes given per-sample forward FLOPs.
pub fn train_flops(forward_flops_per_sample: f64, sample_passes: f64) -> f64 {
    3.0 * forward_flops_per_sample * sample_passes
}

/// A distribution of a positive quantity, declared in the experiment file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Quantity {
    /// The same value for every client.
    Constant {
        /// The value (> 0), in the resource's unit (FLOP/s or bytes/s).
        value: f64,
    },
    /// Discrete classes: `values[i]` with probability proportional to `shares[i]`
    /// (Fed-RAA's capability classes 1 and 3 with share β).
    Classes {
        /// The class values (each > 0).
        values: Vec<f64>,
        /// One relative weight per value (≥ 0, not all zero; they need not sum to 1).
        shares: Vec<f64>,
    },
    /// Exact class sizes: ⌊share·N⌋ of the N clients get `values[i]`, the last class takes
    /// the rest, in a random order (Fed-RAA's share β of capability-1 clients, exactly).
    Quota {
        /// The class values (each > 0).
        values: Vec<f64>,
        /// One relative weight per value (≥ 0, not all zero); the last class takes the
        /// clients the others leave after rounding down.
        shares: Vec<f64>,
    },
    /// Uniform on `[low, high]`.
    Uniform {
        /// Lower bound (> 0).
        low: f64,
        /// Upper bound (≥ `low`).
        high: f64,
    },
    /// One value per client, in client order (Co-S²P's device mix: each client's device type
    /// fixed with its data); there must be as many values as clients.
    PerClient {
        /// The values (each > 0).
        values: Vec<f64>,
    },
    /// Log-normal with the given median and log-space standard deviation.
    LogNormal {
        /// The median (> 0), `exp` of the log-space mean.
        median: f64,
        /// Standard deviation of the logarithm (≥ 0; 0 gives the median to every client).
        sigma: f64,
    },
}

impl Quantity {
    /// Checks the parameters: values positive (a constant or class value may be infinite: a
    /// bandwidth that costs nothing), one share per class value, shares finite, non-negative
    /// and not all zero, `low ≤ high` both finite, the median finite and `sigma` finite ≥ 0.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let ok = match self {
            Quantity::Constant { value } => *value > 0.0,
            Quantity::Classes { values, shares } | Quantity::Quota { values, shares } => {
                !values.is_empty()
                    && values.len() == shares.len()
                    && values.iter().all(|v| *v > 0.0)
                    && shares.iter().all(|s| *s >= 0.0 && s.is_finite())
                    && shares.iter().sum::<f64>() > 0.0
            }
            Quantity::Uniform { low, high } => *low > 0.0 && high >= low && high.is_finite(),
            Quantity::PerClient { values } => !values.is_empty() && values.iter().all(|v| *v > 0.0),
            Quantity::LogNormal { median, sigma } => {
                *median > 0.0 && median.is_finite() && *sigma >= 0.0 && sigma.is_finite()
            }
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "invalid distribution {self:?}: values must be positive (finite except a constant or class value), \
                 classes need one finite share per value"
            ))
        }
    }

    /// One draw. A `quota` drawn alone is a `classes` draw; [`DevicesConfig::draw`] draws it
    /// for all clients at once with [`Quantity::draw_quota`].
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        match self {
            Quantity::Constant { value } => *value,
            Quantity::Classes { values, shares } | Quantity::Quota { values, shares } => {
                let total: f64 = shares.iter().sum();
                let mut u = rng.random::<f64>() * total;
                for (v, s) in values.iter().zip(shares) {
                    if u < *s {
                        return *v;
                    }
                    u -= s;
                }
                *values.last().expect("validated non-empty")
            }
            Quantity::Uniform { low, high } => low + (high - low) * rng.random::<f64>(),
            // Drawn alone (no client index): the first client's value.
            Quantity::PerClient { values } => values[0],
            Quantity::LogNormal { median, sigma } => {
                LogNormal::new(median.ln(), *sigma).expect("validated sigma").sample(rng)
            }
        }
    }
}

impl Quantity {
    /// The values of a `quota` for `n` clients in client order; `None` for other
    /// distributions, which are drawn client by client.
    pub fn draw_quota(&self, n: usize, rng: &mut Rng) -> Option<Vec<f64>> {
        if let Quantity::PerClient { values } = self {
            assert_eq!(values.len(), n, "per-client values are checked against the clients in DevicesConfig::draw");
            return Some(values.clone());
        }
        let Quantity::Quota { values, shares } = self else { return None };
        let total: f64 = shares.iter().sum();
        let mut out = Vec::with_capacity(n);
        for (v, s) in values.iter().zip(shares).take(values.len() - 1) {
            let count = ((s / total * n as f64) + 1e-9).floor() as usize;
            out.extend(std::iter::repeat_n(*v, count.min(n - out.len())));
        }
        out.resize(n, *values.last().expect("validated non-empty"));
        out.shuffle(rng);
        Some(out)
    }
}

/// How a job's training is priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pricing {
    /// The FLOPs the job computes: a masked job pays for the submodel it trains.
    #[default]
    Compute,
    /// A masked job pays a full job's FLOPs times the share of the masked tensors' elements it
    /// keeps, whatever it computes: the Fed-RAA code's `ratio_j / cmp_i`, where a fragment of
    /// the output layer is priced at its share although the whole network trains.
    MaskShare,
}

/// The largest `jitter`: beyond it a job's time would reach the clock's limit.
const MAX_JITTER: f64 = 3.0;

/// The `[devices]` section: one distribution per resource, plus per-job jitter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DevicesConfig {
    /// Training throughput, FLOP/s (default: log-normal, median 1e9, σ 0.5).
    pub flops_per_s: Quantity,
    /// Upload bandwidth, bytes/s (default: 1.25e6, i.e. 10 Mbit/s).
    pub up_bytes_per_s: Quantity,
    /// Download bandwidth, bytes/s (default: 5e6, i.e. 40 Mbit/s).
    pub down_bytes_per_s: Quantity,
    /// Log-space standard deviation of a per-job multiplicative noise on duration (0: none).
    pub jitter: f64,
    /// How a job's training is priced (`compute` or `mask-share`).
    pub pricing: Pricing,
    /// Seconds of compute a device's full job (the whole model, all its samples) takes, drawn
    /// once per device: its throughput is set from it, whatever the model or its data size
    /// (FedASMU's device model: "each device's training time randomly sampled" in a 1:5
    /// range). Excludes `flops_per_s`.
    pub session_s: Option<Quantity>,
    /// Memory a job may use on the device, bytes, drawn once per device (absent: no limit). A
    /// job whose estimate ([`crate::job_memory()`]) exceeds it is refused with an error.
    pub memory_bytes: Option<Quantity>,
    /// The device's mini-batch size, drawn once per device (whole numbers ≥ 1; absent: the
    /// trainer's `batch_size` for every device). Clients of different batch sizes train in
    /// separate cohorts.
    pub batch_size: Option<Quantity>,
}

impl Default for DevicesConfig {
    fn default() -> Self {
        DevicesConfig {
            flops_per_s: Quantity::LogNormal { median: 1e9, sigma: 0.5 },
            up_bytes_per_s: Quantity::Constant { value: 1.25e6 },
            down_bytes_per_s: Quantity::Constant { value: 5e6 },
            jitter: 0.0,
            pricing: Pricing::Compute,
            session_s: None,
            memory_bytes: None,
            batch_size: None,
        }
    }
}

impl DevicesConfig {
    /// Checks every distribution and that `jitter` is in [0, 3]; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        self.flops_per_s.validate().map_err(|e| InvalidKey::new("flops_per_s", e))?;
        self.up_bytes_per_s.validate().map_err(|e| InvalidKey::new("up_bytes_per_s", e))?;
        self.down_bytes_per_s.validate().map_err(|e| InvalidKey::new("down_bytes_per_s", e))?;
        if let Some(session) = &self.session_s {
            session.validate().map_err(|e| InvalidKey::new("session_s", e))?;
            let infinite = match session {
                Quantity::Constant { value } => value.is_infinite(),
                Quantity::Classes { values, .. } | Quantity::Quota { values, .. } => {
                    values.iter().any(|v| v.is_infinite())
                }
                Quantity::PerClient { values } => values.iter().any(|v| v.is_infinite()),
                Quantity::Uniform { .. } | Quantity::LogNormal { .. } => false,
            };
            if infinite {
                return Err(InvalidKey::new("session_s", "expected finite seconds"));
            }
            if self.flops_per_s != DevicesConfig::default().flops_per_s {
                return Err(InvalidKey::new(
                    "session_s",
                    "a device's session time sets its throughput: give session_s or flops_per_s, not both",
                ));
            }
        }
        if let Some(memory) = &self.memory_bytes {
            memory.validate().map_err(|e| InvalidKey::new("memory_bytes", e))?;
        }
        if let Some(batch) = &self.batch_size {
            batch.validate().map_err(|e| InvalidKey::new("batch_size", e))?;
            let whole = match batch {
                Quantity::Constant { value } => vec![*value],
                Quantity::Classes { values, .. } | Quantity::Quota { values, .. } | Quantity::PerClient { values } => {
                    values.clone()
                }
                Quantity::Uniform { .. } | Quantity::LogNormal { .. } => {
                    return Err(InvalidKey::new(
                        "batch_size",
                        "expected whole numbers: constant, classes, quota or per-client values",
                    ));
                }
            };
            if let Some(bad) = whole.iter().find(|v| !(**v >= 1.0 && v.fract() == 0.0 && v.is_finite())) {
                return Err(InvalidKey::new("batch_size", format!("expected whole numbers ≥ 1, got {bad}")));
            }
        }
        if !(0.0..=MAX_JITTER).contains(&self.jitter) {
            return Err(InvalidKey::new(
                "jitter",
                format!(
                    "expected a lognormal σ in [0, {MAX_JITTER}] (3 spreads job times over e^±9), got {}",
                    self.jitter
                ),
            ));
        }
        Ok(())
    }

    /// One profile per client, drawn in client order from `rng`.
    pub fn draw(&self, clients: usize, rng: &mut Rng) -> Result<Vec<DeviceProfile>> {
        self.validate().map_err(|e| Error::Key(e.under("devices")))?;
        let quantities = [
            ("flops_per_s", Some(&self.flops_per_s)),
            ("up_bytes_per_s", Some(&self.up_bytes_per_s)),
            ("down_bytes_per_s", Some(&self.down_bytes_per_s)),
            ("memory_bytes", self.memory_bytes.as_ref()),
            ("session_s", self.session_s.as_ref()),
            ("batch_size", self.batch_size.as_ref()),
        ];
        for (key, q) in quantities {
            if let Some(Quantity::PerClient { values }) = q
                && values.len() != clients
            {
                let message = format!("per-client: {} values for {clients} clients", values.len());
                return Err(Error::Key(InvalidKey::new(key, message).under("devices")));
            }
        }
        let flops = self.flops_per_s.draw_quota(clients, rng);
        let up = self.up_bytes_per_s.draw_quota(clients, rng);
        let down = self.down_bytes_per_s.draw_quota(clients, rng);
        let pick = |quota: &Option<Vec<f64>>, q: &Quantity, c: usize, rng: &mut Rng| match quota {
            Some(values) => values[c],
            None => q.sample(rng),
        };
        let mut profiles: Vec<DeviceProfile> = (0..clients)
            .map(|c| DeviceProfile {
                flops_per_s: pick(&flops, &self.flops_per_s, c, rng),
                up_bytes_per_s: pick(&up, &self.up_bytes_per_s, c, rng),
                down_bytes_per_s: pick(&down, &self.down_bytes_per_s, c, rng),
                memory_bytes: f64::INFINITY,
                batch_size: None,
            })
            .collect();
        // Drawn after the rest, so that the other draws are those of a run without it.
        if let Some(memory) = &self.memory_bytes {
            let quota = memory.draw_quota(clients, rng);
            for (c, p) in profiles.iter_mut().enumerate() {
                p.memory_bytes = pick(&quota, memory, c, rng);
            }
        }
        if let Some(batch) = &self.batch_size {
            let quota = batch.draw_quota(clients, rng);
            for (c, p) in profiles.iter_mut().enumerate() {
                p.batch_size = Some(pick(&quota, batch, c, rng) as usize);
            }
        }
        Ok(profiles)
    }

    /// Each client's full-job seconds of `session_s`, drawn after [`DevicesConfig::draw`] from
    /// the same stream (so the other draws are those of a run without it); none without it.
    pub fn draw_sessions(&self, clients: usize, rng: &mut Rng) -> Option<Vec<f64>> {
        let session = self.session_s.as_ref()?;
        let quota = session.draw_quota(clients, rng);
        Some((0..clients).map(|c| quota.as_ref().map_or_else(|| session.sample(rng), |q| q[c])).collect())
    }

    /// The multiplicative jitter of one job (1 when `jitter` is 0).
    pub fn jitter_factor(&self, rng: &mut Rng) -> f64 {
        if self.jitter == 0.0 { 1.0 } else { LogNormal::new(0.0, self.jitter).expect("validated jitter").sample(rng) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory_is_drawn_after_the_rest_and_unlimited_without_it() {
        let plain = DevicesConfig::default();
        let with_memory = DevicesConfig {
            memory_bytes: Some(Quantity::Quota { values: vec![4e9, 8e9], shares: vec![1.0, 1.0] }),
            ..DevicesConfig::default()
        };
        let a = plain.draw(6, &mut crate::rng::stream(5, &[0])).unwrap();
        let b = with_memory.draw(6, &mut crate::rng::stream(5, &[0])).unwrap();
        assert!(a.iter().all(|p| p.memory_bytes.is_infinite()));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(
                (x.flops_per_s, x.up_bytes_per_s, x.down_bytes_per_s),
                (y.flops_per_s, y.up_bytes_per_s, y.down_bytes_per_s)
            );
        }
        let mut memory: Vec<f64> = b.iter().map(|p| p.memory_bytes).collect();
        memory.sort_by(f64::total_cmp);
        assert_eq!(memory, [4e9, 4e9, 4e9, 8e9, 8e9, 8e9]);
        let bad = DevicesConfig { memory_bytes: Some(Quantity::Constant { value: -1.0 }), ..DevicesConfig::default() };
        assert_eq!(bad.validate().unwrap_err().key, "memory_bytes");
    }

    #[test]
    fn device_batch_sizes_are_drawn_last_and_must_be_whole() {
        let plain = DevicesConfig { memory_bytes: Some(Quantity::Constant { value: 8e9 }), ..DevicesConfig::default() };
        let batched = DevicesConfig {
            batch_size: Some(Quantity::PerClient { values: vec![8.0, 64.0, 64.0, 128.0] }),
            ..plain.clone()
        };
        let a = plain.draw(4, &mut crate::rng::stream(2, &[0])).unwrap();
        let b = batched.draw(4, &mut crate::rng::stream(2, &[0])).unwrap();
        assert!(a.iter().all(|p| p.batch_size.is_none()));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(DeviceProfile { batch_size: None, ..y.clone() }, *x, "the other draws are unchanged");
        }
        assert_eq!(b.iter().map(|p| p.batch_size).collect::<Vec<_>>(), [Some(8), Some(64), Some(64), Some(128)]);
        let bad =
            |q: Quantity| DevicesConfig { batch_size: Some(q), ..DevicesConfig::default() }.validate().unwrap_err();
        for q in [
            Quantity::Constant { value: 0.5 },
            Quantity::PerClient { values: vec![8.0, 12.5] },
            Quantity::Uniform { low: 8.0, high: 64.0 },
        ] {
            assert_eq!(bad(q).key, "batch_size");
        }
        let short =
            DevicesConfig { batch_size: Some(Quantity::PerClient { values: vec![8.0] }), ..DevicesConfig::default() };
        assert!(short.draw(2, &mut crate::rng::stream(2, &[0])).is_err());
    }

    /// 1 GFLOP/s, 1 MB/s up, 2 MB/s down.
    fn profile() -> DeviceProfile {
        DeviceProfile {
            flops_per_s: 1e9,
            up_bytes_per_s: 1e6,
            down_bytes_per_s: 2e6,
            memory_bytes: f64::INFINITY,
            batch_size: None,
        }
    }

    #[test]
    fn duration_adds_transfer_and_compute() {
        let p = profile();
        let c = JobCost { down_bytes: 4e6, train_flops: 3e9, up_bytes: 1e6, ..Default::default() };
        assert_eq!(p.duration_s(&c), 2.0 + 3.0 + 1.0);
    }

    #[test]
    fn a_split_job_waits_for_the_server_and_the_relay() {
        let p = profile();
        let c = JobCost { down_bytes: 4e6, train_flops: 3e9, up_bytes: 1e6, relay_bytes: 2e6, server_s: 0.5 };
        let phases = p.phases(&c);
        assert_eq!(phases.compute_s, 3.0 + 0.5 + 2.0 + 1.0);
        assert_eq!(phases.total_s(), 2.0 + 6.5 + 1.0);
    }

    #[test]
    fn quotas_give_exact_class_sizes() {
        // β = 0.3 of 10 clients at capability 1; 0.25 of 10 is 2 (floor), the rest go last.
        let mut rng = crate::rng::stream(1, &[0]);
        for (shares, weak) in [([0.3, 0.7], 3), ([0.25, 0.75], 2), ([0.9, 0.1], 9)] {
            let q = Quantity::Quota { values: vec![1.0, 3.0], shares: shares.to_vec() };
            let values = q.draw_quota(10, &mut rng).unwrap();
            assert_eq!(values.len(), 10);
            assert_eq!(values.iter().filter(|v| **v == 1.0).count(), weak, "{shares:?}");
        }
    }

    #[test]
    fn per_client_values_go_to_the_clients_in_order() {
        let devices = DevicesConfig {
            flops_per_s: Quantity::PerClient { values: vec![2.1e9, 2e10, 2.75e10] },
            memory_bytes: Some(Quantity::PerClient { values: vec![8e9, 32e9, 64e9] }),
            ..DevicesConfig::default()
        };
        let profiles = devices.draw(3, &mut crate::rng::stream(1, &[0])).unwrap();
        let got: Vec<(f64, f64)> = profiles.iter().map(|p| (p.flops_per_s, p.memory_bytes)).collect();
        assert_eq!(got, [(2.1e9, 8e9), (2e10, 32e9), (2.75e10, 64e9)]);
        let err = devices.draw(4, &mut crate::rng::stream(1, &[0])).unwrap_err().to_string();
        assert!(err.contains("devices.flops_per_s") && err.contains("3 values for 4 clients"), "{err}");
    }

    #[test]
    fn classes_follow_their_shares() {
        let q = Quantity::Classes { values: vec![1.0, 3.0], shares: vec![0.25, 0.75] };
        let mut rng = crate::rng::stream(1, &[0]);
        let n = 20_000;
        let weak = (0..n).filter(|_| q.sample(&mut rng) == 1.0).count();
        let share = weak as f64 / n as f64;
        assert!((share - 0.25).abs() < 0.015, "share of class 1: {share}");
    }

    #[test]
    fn infinities_pass_only_where_they_mean_free_and_never_reach_a_sampler() {
        // Found by the config fuzzer: `jitter = inf` passed validation and panicked in LogNormal.
        let devices = |jitter: f64| DevicesConfig { jitter, ..DevicesConfig::default() };
        assert!(devices(f64::INFINITY).validate().is_err());
        assert!(devices(0.3).validate().is_ok());
        assert!(Quantity::Constant { value: f64::INFINITY }.validate().is_ok(), "a bandwidth that costs nothing");
        for q in [
            Quantity::LogNormal { median: 1e9, sigma: f64::INFINITY },
            Quantity::LogNormal { median: f64::INFINITY, sigma: 0.5 },
            Quantity::Uniform { low: 1.0, high: f64::INFINITY },
            Quantity::Classes { values: vec![1.0, 2.0], shares: vec![f64::INFINITY, 1.0] },
        ] {
            assert!(q.validate().is_err(), "{q:?}");
        }
    }
}
