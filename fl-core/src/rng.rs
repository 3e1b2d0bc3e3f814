//! Deterministic random streams.
//!
//! Every consumer of randomness (a client job, the scheduler, the mask policy, the
//! partitioner) gets its own stream derived from the run seed and a tag path, so results do
//! not depend on how many workers run or in which order jobs finish. libtorch's global
//! generator is never used: it is shared between threads. Tensor noise (dropout) comes from
//! [`TensorNoise`], a counter-based hash evaluated with tensor ops on the compute device; a
//! cohort of clients draws from each client's own stream at once with [`CohortNoise`].

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

/// The generator type of every host-side stream.
pub type Rng = ChaCha8Rng;

/// SplitMix64's finaliser: a bijective mix of 64 bits.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Derives a seed from a root seed and a path of tags (e.g. `[JOB, client, job_counter]`).
pub fn derive_seed(root: u64, tags: &[u64]) -> u64 {
    tags.iter().fold(mix64(root), |acc, &t| mix64(acc ^ mix64(t)))
}

/// A host stream for `tags` under `root`.
pub fn stream(root: u64, tags: &[u64]) -> Rng {
    Rng::seed_from_u64(derive_seed(root, tags))
}

/// Tags naming the independent streams of a run.
pub mod tag {
    pub const PARTITION: u64 = 1;
    pub const MODEL_INIT: u64 = 2;
    pub const PROFILES: u64 = 3;
    pub const SCHEDULER: u64 = 4;
    pub const MASK: u64 = 5;
    pub const JOB: u64 = 6;
    pub const DATASET: u64 = 7;
}

/// Uniform noise for tensors, computed on the tensor's device from (seed, draw counter,
/// element index) with Chris Wellons' `lowbias32` hash. Stateless apart from the counter, so
/// the same seed always yields the same masks on any device and thread.
#[derive(Debug, Clone)]
pub struct TensorNoise {
    seed: u64,
    draws: u64,
}

impl TensorNoise {
    pub fn new(seed: u64) -> Self {
        TensorNoise { seed, draws: 0 }
    }

    /// The 32-bit key of this stream's draw number `draw`.
    fn key(&self, draw: u64) -> i64 {
        (derive_seed(self.seed, &[self.draws + draw]) & 0xFFFF_FFFF) as i64
    }

    /// Uniform floats in [0, 1) of the given shape on `device`.
    pub fn uniform(&mut self, shape: &[i64], device: Device) -> Tensor {
        let key = Tensor::from_slice(&[self.key(0)]).to_device(device);
        self.draws += 1;
        keyed_uniform(&key, shape.iter().product(), device).reshape(shape)
    }
}

/// The tensor noise of a cohort: client `c`'s slice of each draw is exactly what its own
/// [`TensorNoise`] would draw for that slice's shape, so a client's dropout is the same alone
/// or in a cohort. All clients draw in lockstep; a draw may cover only the leading clients
/// (those still training), whose keys come first.
#[derive(Debug)]
pub struct CohortNoise {
    streams: Vec<TensorNoise>,
    device: Device,
    draws: u64,
    /// Keys of draws `[first, first + KEY_BLOCK)` for every client, `[KEY_BLOCK, C]` on the
    /// device: one host-to-device copy per block of draws, not one per draw.
    block: Option<(u64, Tensor)>,
}

/// Draws whose keys are computed and copied to the device at once.
const KEY_BLOCK: u64 = 256;

impl CohortNoise {
    /// The noise of clients drawing from `streams`, in cohort order, on `device`.
    pub fn new(streams: Vec<TensorNoise>, device: Device) -> Self {
        CohortNoise { streams, device, draws: 0, block: None }
    }

    /// Number of clients in the cohort.
    pub fn clients(&self) -> usize {
        self.streams.len()
    }

    /// Uniform floats in [0, 1) of shape `[k, ...]`: row `c` from client `c`'s stream, for
    /// the first `k = shape[0]` clients.
    pub fn uniform(&mut self, shape: &[i64]) -> Tensor {
        let k = shape[0];
        assert!(
            k >= 1 && k as usize <= self.streams.len(),
            "cohort noise: {k} clients asked for, the cohort has {}",
            self.streams.len()
        );
        let draw = self.draws;
        self.draws += 1;
        let stale = self.block.as_ref().is_none_or(|(first, _)| draw >= first + KEY_BLOCK);
        if stale {
            let keys: Vec<i64> =
                (draw..draw + KEY_BLOCK).flat_map(|d| self.streams.iter().map(move |s| s.key(d))).collect();
            let keys = Tensor::from_slice(&keys).reshape([KEY_BLOCK as i64, self.streams.len() as i64]);
            self.block = Some((draw, keys.to_device(self.device)));
        }
        let (first, keys) = self.block.as_ref().expect("key block drawn above");
        let keys = keys.select(0, (draw - first) as i64).narrow(0, 0, k).unsqueeze(1);
        let per_client: i64 = shape[1..].iter().product();
        keyed_uniform(&keys, per_client, self.device).reshape(shape)
    }

    /// A keep-mask of shape `[k, ...]` with probability `1 - p`, scaled by `1 / (1 - p)`
    /// (inverted dropout).
    pub fn dropout_mask(&mut self, shape: &[i64], p: f64) -> Tensor {
        let keep = self.uniform(shape).ge(p).to_kind(Kind::Float);
        keep * (1.0 / (1.0 - p))
    }
}

/// `n` uniform floats in [0, 1) per key: `keys` is `[k, 1]` (or `[1]`), the result `[k, n]`
/// (or `[n]`); element `i` of a row depends on its key and `i` alone.
fn keyed_uniform(keys: &Tensor, n: i64, device: Device) -> Tensor {
    let x = Tensor::arange(n, (Kind::Int64, device));
    let x = hash32(&hash32(&x.bitwise_xor_tensor(keys)).bitwise_xor_tensor(keys));
    x.to_kind(Kind::Float) * (1.0 / 4_294_967_296.0)
}

const LOW32: i64 = 0xFFFF_FFFF;

/// `x * c mod 2^32` for `x < 2^32` without overflowing int64: split `c` into 16-bit halves.
fn mul32(x: &Tensor, c: i64) -> Tensor {
    let hi = (x * (c >> 16)).bitwise_and(0xFFFF) * 65_536;
    (hi + x * (c & 0xFFFF)).bitwise_and(LOW32)
}

/// `x ^ (x >> s)` for non-negative int64 tensors.
fn xor_shift(x: &Tensor, s: i64) -> Tensor {
    x.bitwise_xor_tensor(&x.bitwise_right_shift_tensor_scalar(s))
}

/// lowbias32 on int64 tensors, applied to the low 32 bits.
fn hash32(x: &Tensor) -> Tensor {
    let x = xor_shift(&x.bitwise_and(LOW32), 16);
    let x = xor_shift(&mul32(&x, 0x7FEB_352D), 15);
    xor_shift(&mul32(&x, 0x846C_A68B), 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowbias32(mut x: u32) -> u32 {
        x ^= x >> 16;
        x = x.wrapping_mul(0x7feb_352d);
        x ^= x >> 15;
        x = x.wrapping_mul(0x846c_a68b);
        x ^ (x >> 16)
    }

    #[test]
    fn tensor_hash_matches_the_scalar_reference() {
        let inputs: Vec<i64> = vec![0, 1, 2, 12345, 0xFFFF_FFFF, 0x8000_0000, 987_654_321];
        let t = hash32(&Tensor::from_slice(&inputs));
        let got: Vec<i64> = Vec::try_from(&t).unwrap();
        let want: Vec<i64> = inputs.iter().map(|&x| i64::from(lowbias32(x as u32))).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn noise_is_reproducible_and_roughly_uniform() {
        let a = TensorNoise::new(7).uniform(&[10_000], Device::Cpu);
        let b = TensorNoise::new(7).uniform(&[10_000], Device::Cpu);
        assert!(a.equal(&b));
        let mean = a.mean(Kind::Double).double_value(&[]);
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        let mut n = TensorNoise::new(7);
        let first = n.uniform(&[100], Device::Cpu);
        let second = n.uniform(&[100], Device::Cpu);
        assert!(!first.equal(&second), "consecutive draws must differ");
    }

    #[test]
    fn a_cohort_draw_is_each_clients_own_draw() {
        // Clients 0 and 2 of a cohort draw rows that equal their lone streams' draws, for
        // the first `k` clients and across the boundary of a key block.
        let lone = |seed, shape: &[i64], skip: u64| {
            let mut n = TensorNoise::new(seed);
            for _ in 0..skip {
                let _ = n.uniform(&[1], Device::Cpu);
            }
            n.uniform(shape, Device::Cpu)
        };
        let mut cohort =
            CohortNoise::new(vec![TensorNoise::new(4), TensorNoise::new(9), TensorNoise::new(5)], Device::Cpu);
        for draw in 0..KEY_BLOCK + 2 {
            let k = if draw % 2 == 0 { 3 } else { 2 };
            let got = cohort.uniform(&[k, 3, 5]);
            if draw == 0 || draw >= KEY_BLOCK - 1 {
                assert!(got.get(0).equal(&lone(4, &[3, 5], draw)), "draw {draw}, client 0");
                assert!(got.get(1).equal(&lone(9, &[3, 5], draw)), "draw {draw}, client 1");
                if k == 3 {
                    assert!(got.get(2).equal(&lone(5, &[3, 5], draw)), "draw {draw}, client 2");
                }
            }
        }
        // A shorter slice of a client's row is the lone draw of that shorter shape.
        let mut cohort = CohortNoise::new(vec![TensorNoise::new(4)], Device::Cpu);
        let row = cohort.uniform(&[1, 6, 5]).get(0).narrow(0, 0, 2);
        assert!(row.equal(&lone(4, &[2, 5], 0)));
    }

    #[test]
    fn derived_seeds_differ_per_tag_path() {
        assert_ne!(derive_seed(1, &[tag::JOB, 0, 1]), derive_seed(1, &[tag::JOB, 1, 0]));
        assert_eq!(derive_seed(1, &[tag::JOB, 3]), derive_seed(1, &[tag::JOB, 3]));
    }
}
