//! Deterministic random streams.
//!
//! Every consumer of randomness (a client job, the scheduler, the mask policy, the
//! partitioner) gets its own stream derived from the run seed and a tag path, so results do
//! not depend on how many workers run or in which order jobs finish. libtorch's global
//! generator is never used: it is shared between threads. Tensor noise (dropout) comes from
//! [`TensorNoise`], a counter-based hash evaluated with tensor ops on the compute device (by a
//! plain loop on CPU, giving the same numbers); a cohort of clients draws from each client's
//! own stream at once with [`CohortNoise`].

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

mod cohort_noise;

pub use cohort_noise::CohortNoise;

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

/// A CPU float32 tensor of `shape` with elements drawn from U(−bound, bound) on the host
/// (model initialisation: never libtorch's shared generator).
///
/// # Panics
/// If `bound` is not finite and positive.
pub fn uniform(rng: &mut Rng, shape: &[i64], bound: f64) -> Tensor {
    use rand::distr::{Distribution, Uniform};
    let dist = Uniform::new(-bound as f32, bound as f32)
        .unwrap_or_else(|e| panic!("uniform: bound {bound} is not a valid range: {e}"));
    let n: i64 = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|_| dist.sample(rng)).collect();
    Tensor::from_slice(&values).reshape(shape)
}

/// Tags naming the independent streams of a run.
pub mod tag {
    /// The partitioner's split of the training samples among clients.
    pub const PARTITION: u64 = 1;
    /// The global model's initialisation (`[MODEL_INIT]`) and clients' own fresh models
    /// (`[MODEL_INIT, 1, key]`).
    pub const MODEL_INIT: u64 = 2;
    /// The clients' device profiles.
    pub const PROFILES: u64 = 3;
    /// The scheduler's stream ([`crate::SchedulingContext::rng`]).
    pub const SCHEDULER: u64 = 4;
    /// The mask policy's stream ([`crate::MaskCtx::rng`]).
    pub const MASK: u64 = 5;
    /// A job's streams: `[JOB, client, job]` for its host stream and jitter, with a trailing
    /// `1` for its tensor noise.
    pub const JOB: u64 = 6;
    /// Datasets that are generated (FedProx's Synthetic).
    pub const DATASET: u64 = 7;
    /// Each client's held-out split (`[CLIENT_TEST, client]`, `[eval] client_test_share`).
    pub const CLIENT_TEST: u64 = 8;
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
    /// A stream at its first draw, keyed by `seed` (usually [`derive_seed`] of a tag path).
    pub fn new(seed: u64) -> Self {
        TensorNoise { seed, draws: 0 }
    }

    /// The 32-bit key of this stream's draw number `draw`, as the int32 tensors hold it.
    fn key(&self, draw: u64) -> i32 {
        derive_seed(self.seed, &[self.draws + draw]) as u32 as i32
    }

    /// Uniform floats in [0, 1) of the given shape on `device`.
    pub fn uniform(&mut self, shape: &[i64], device: Device) -> Tensor {
        let key = self.key(0);
        self.draws += 1;
        keyed_noise(&[key], shape.iter().product(), device).reshape(shape)
    }
}

/// `n` uniform floats in [0, 1) per key, `[keys.len(), n]` on `device`: [`keyed_uniform`]'s
/// numbers. On CPU they are computed by a plain loop on the host (the same hash, tested bit for
/// bit against the tensor form): the tensor form's two dozen small ops cost more to dispatch
/// than to run, about an eighth of a small MLP's step on the kdd23 cell.
fn keyed_noise(keys: &[i32], n: i64, device: Device) -> Tensor {
    if device == Device::Cpu {
        return Tensor::from_slice(&host_noise(keys, n, Order::RowMajor, |u| u)).reshape([keys.len() as i64, n]);
    }
    let keys = Tensor::from_slice(keys).reshape([-1, 1]).to_device(device);
    keyed_uniform(&keys, n, device)
}

/// [`keyed_noise`]'s numbers on the host, row after row, each passed through `f`.
#[allow(unsafe_code)] // reason: calling the loop compiled for AVX2, which the CPU was checked for.
fn host_noise(keys: &[i32], n: i64, order: Order, f: impl Fn(f32) -> f32) -> Vec<f32> {
    let width = usize::try_from(n).expect("a draw has a non-negative size");
    let mut values = vec![0f32; keys.len() * width];
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, the only requirement of `fill_noise_avx2`.
        unsafe { fill_noise_avx2(&mut values, width, keys, order, f) };
        return values;
    }
    fill_noise(&mut values, width, keys, order, f);
    values
}

/// The order in which a row of `n` noise values is stored.
#[derive(Clone, Copy)]
enum Order {
    /// Value `i` at position `i`.
    RowMajor,
    /// A row of `rows × cols` values stored column by column: value `r · cols + c` at
    /// position `c · rows + r`.
    Swapped { rows: i64, cols: i64 },
}

/// [`fill_noise`] compiled for AVX2: its 32-bit multiplies and conversions vectorise, about
/// three times faster than the baseline x86-64 build's loop (the kdd23 cell's dropout noise of
/// `[1, 128, 200]`: 0.012 against 0.039 ms).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fill_noise_avx2(values: &mut [f32], width: usize, keys: &[i32], order: Order, f: impl Fn(f32) -> f32) {
    fill_noise(values, width, keys, order, f);
}

/// Fills `values`, `keys.len()` rows of `width`, with each key's hashed noise through `f`, each
/// row stored in `order`.
#[inline(always)]
fn fill_noise(values: &mut [f32], width: usize, keys: &[i32], order: Order, f: impl Fn(f32) -> f32) {
    let noise = |i: u32, key: u32| f(unit_float(lowbias32(lowbias32(i ^ key) ^ key)));
    for (row, &key) in values.chunks_exact_mut(width.max(1)).zip(keys) {
        let key = key as u32;
        match order {
            Order::RowMajor => {
                for (i, v) in row.iter_mut().enumerate() {
                    *v = noise(i as u32, key);
                }
            }
            Order::Swapped { rows, cols } => {
                for (c, column) in row.chunks_exact_mut(rows.max(1) as usize).enumerate() {
                    for (r, v) in column.iter_mut().enumerate() {
                        *v = noise((r * cols as usize + c) as u32, key);
                    }
                }
            }
        }
    }
}

/// Chris Wellons' lowbias32 hash.
fn lowbias32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

/// A 32-bit hash as a float in [0, 1): the unsigned value rounded to the nearest float, over
/// 2^32 (exact), as the tensor form computes it.
fn unit_float(h: u32) -> f32 {
    (h as f32) * (1.0 / 4_294_967_296.0)
}

/// `n` uniform floats in [0, 1) per key: `keys` is int32 `[..., 1]` (or `[1]`), the result `[..., n]`
/// (or `[n]`); element `i` of a row depends on its key and `i` alone. The hash runs on int32
/// tensors (a third of the memory traffic of int64 with 16-bit halves, measured 2.7x faster on
/// an H200 at the kdd23 pack's size); its 32 bits become a float exactly as an unsigned value
/// would, so the noise is the same on every device and matches lowbias32's scalar form (tested).
fn keyed_uniform(keys: &Tensor, n: i64, device: Device) -> Tensor {
    let x = Tensor::arange(n, (Kind::Int, device));
    let x = hash32(&hash32(&x.bitwise_xor_tensor(keys)).bitwise_xor_tensor(keys));
    x.to_kind(Kind::Int64).bitwise_and(0xFFFF_FFFF).to_kind(Kind::Float) * (1.0 / 4_294_967_296.0)
}

/// `x ^ (x >>> s)` on int32 tensors, the shift logical (the arithmetic shift's sign bits masked).
fn xor_shift(x: &Tensor, s: i64) -> Tensor {
    x.bitwise_xor_tensor(&x.bitwise_right_shift_tensor_scalar(s).bitwise_and((1i64 << (32 - s)) - 1))
}

/// `x * c` modulo 2^32 on int32 tensors (two's-complement wrap-around), `c` an unsigned constant.
fn mul32(x: &Tensor, c: u32) -> Tensor {
    x * i64::from(c as i32)
}

/// Chris Wellons' lowbias32 on the 32 bits of int32 tensors.
fn hash32(x: &Tensor) -> Tensor {
    let x = xor_shift(x, 16);
    let x = xor_shift(&mul32(&x, 0x7FEB_352D), 15);
    xor_shift(&mul32(&x, 0x846C_A68B), 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Edge values, then pseudo-random 32-bit values: more than a vector register's worth, so
    /// both the vectorised loop and its scalar tail run.
    fn words() -> Vec<u32> {
        let edges = [0, 1, 2, 12345, 0xFFFF_FFFF, 0x8000_0000, 0x7FFF_FFFF, 987_654_321];
        edges.into_iter().chain((0..1003).map(|i| mix64(i) as u32)).collect()
    }

    #[test]
    fn tensor_hash_matches_the_scalar_reference() {
        let inputs = words();
        let t = hash32(&Tensor::from_slice(&inputs.iter().map(|&x| x as i32).collect::<Vec<_>>()));
        let got: Vec<i32> = Vec::try_from(&t).unwrap();
        let want: Vec<i32> = inputs.iter().map(|&x| lowbias32(x) as i32).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn keyed_noise_is_the_scalar_double_hash_as_a_float() {
        // u = float(lowbias32(lowbias32(i ^ key) ^ key)) / 2^32, rounded to nearest as an
        // unsigned value would be: the same numbers whichever integer width the tensors use.
        for key in words().into_iter().step_by(97) {
            let keys = Tensor::from_slice(&[key as i32]);
            let got: Vec<f32> = Vec::try_from(&keyed_uniform(&keys, 3000, Device::Cpu)).unwrap();
            for (i, &u) in got.iter().enumerate() {
                let h = lowbias32(lowbias32(i as u32 ^ key) ^ key);
                assert_eq!(u.to_bits(), ((h as f32) * (1.0 / 4_294_967_296.0)).to_bits(), "key {key}, i {i}");
            }
        }
    }

    #[test]
    fn host_noise_is_the_tensor_noise_bit_for_bit() {
        // The CPU loop and the tensor ops other devices run give the same floats, rows of keys
        // of every kind included (zero width, one element, rows longer than a vector register).
        let keys: Vec<i32> = words().into_iter().step_by(41).map(|k| k as i32).collect();
        for n in [0, 1, 7, 1000] {
            let host = keyed_noise(&keys, n, Device::Cpu);
            let tensor = keyed_uniform(&Tensor::from_slice(&keys).reshape([-1, 1]), n, Device::Cpu);
            assert_eq!(host.size(), [keys.len() as i64, n]);
            let (host, tensor): (Vec<f32>, Vec<f32>) =
                (Vec::try_from(&host.flatten(0, -1)).unwrap(), Vec::try_from(&tensor.flatten(0, -1)).unwrap());
            assert!(host.iter().zip(&tensor).all(|(a, b)| a.to_bits() == b.to_bits()), "width {n}");
            assert_eq!(host.len(), tensor.len());
        }
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
    fn derived_seeds_differ_per_tag_path() {
        assert_ne!(derive_seed(1, &[tag::JOB, 0, 1]), derive_seed(1, &[tag::JOB, 1, 0]));
        assert_eq!(derive_seed(1, &[tag::JOB, 3]), derive_seed(1, &[tag::JOB, 3]));
    }
}
