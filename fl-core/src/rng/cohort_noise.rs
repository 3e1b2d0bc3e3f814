//! The tensor noise of a cohort ([`CohortNoise`]): each client's dropout drawn from its own
//! [`TensorNoise`] stream while the cohort draws as one tensor, the noise of many draws hashed
//! at once, and the draws of steps replayed from CUDA graphs read at a counter kept on the
//! device.

use tch::{Device, Kind, Tensor};

use super::{Order, TensorNoise, host_noise, keyed_noise, keyed_uniform};

/// The tensor noise of a cohort: client `c`'s slice of each draw is exactly what its own
/// [`TensorNoise`] would draw for that slice's shape, so a client's dropout is the same alone
/// or in a cohort. All clients draw in lockstep; a draw may cover only the leading clients
/// (those still training), whose keys come first.
///
/// Element `i` of a draw depends on the client's key for that draw and on `i` alone, so the
/// noise of many draws is computed at once, for the widest draw seen so far, and each draw
/// takes its slice: the hash costs a few dozen tensor ops, which dominate a small model's
/// step when paid at every draw.
#[derive(Debug)]
pub struct CohortNoise {
    streams: Vec<TensorNoise>,
    device: Device,
    draws: u64,
    /// Elements per client of the widest draw so far.
    widest: i64,
    /// Noise of draws `[first, first + len)`, `[len, C, width]` on the device.
    block: Option<NoiseBlock>,
    /// Draws read at a counter on the device ([`CohortNoise::count_on_device`]).
    on_device: Option<DeviceDraws>,
    /// The kinds of the draws since [`CohortNoise::record_step`], until `count_on_device`.
    recorded: Option<Vec<Draw>>,
}

/// What a draw yields.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Draw {
    /// Uniform floats in [0, 1).
    Uniform,
    /// An inverted-dropout mask with drop probability `p`: `(u >= p) / (1 - p)` in float32.
    Mask(f64),
}

/// Steps whose draws are read at a counter kept on the device, so that a step captured as a
/// CUDA graph draws fresh noise at every replay. Their noise is hashed a block of whole steps
/// at a time, between steps, into one buffer that the steps read at the counter, dropout
/// masks already made masks: a step replays a row lookup per draw, not the hash's few dozen
/// kernels and the mask's three.
#[derive(Debug)]
struct DeviceDraws {
    /// The keys of every draw counted on the device, `[draws, C, 1]` int32.
    keys: Tensor,
    /// Draws each step makes, of the kinds the first step's draws were.
    per_step: i64,
    kinds: Vec<Draw>,
    /// Draws the host has asked for since the step started: `per_step`, or twice that for a
    /// step run eagerly and then captured.
    in_step: i64,
    /// Steps announced, and steps started so far.
    steps: i64,
    started: i64,
    /// The host's count of draws after the announced steps.
    end: u64,
    /// Steps a block holds: the first step of each block hashes its noise.
    block_steps: i64,
    /// The block's noise, `[block_steps · per_step, C, width]`, rewritten in place.
    values: Tensor,
    /// The next draw's row in `values`, int64 `[1]`.
    next: Tensor,
}

#[derive(Debug)]
struct NoiseBlock {
    first: u64,
    len: u64,
    width: i64,
    values: Tensor,
}

/// Most draws computed at once.
const BLOCK_DRAWS: i64 = 64;

/// Most elements of a block: on CPU a block should stay in cache (measured on the kdd23 MNIST
/// cell, 2 cores, when the hash ran as tensor ops: 2^15 elements a few percent faster than one
/// draw at a time, 2^24 about 35% slower); on CUDA what counts is the number of launches.
fn block_elements(device: Device) -> i64 {
    if device.is_cuda() { 1 << 24 } else { 1 << 15 }
}

impl CohortNoise {
    /// The noise of clients drawing from `streams`, in cohort order, on `device`.
    pub fn new(streams: Vec<TensorNoise>, device: Device) -> Self {
        CohortNoise { streams, device, draws: 0, widest: 0, block: None, on_device: None, recorded: None }
    }

    /// Draws made so far, as the host counts them: exact until [`CohortNoise::count_on_device`].
    pub fn draws(&self) -> u64 {
        self.draws
    }

    /// Notes the kind of each draw from now until [`CohortNoise::count_on_device`]: those of
    /// the step that the steps read on the device repeat.
    pub fn record_step(&mut self) {
        self.recorded = Some(Vec::new());
    }

    /// Reads the draws of the next `steps` steps at a counter kept on the device and advanced
    /// there, so that a step captured as a CUDA graph draws fresh noise at every replay. Each
    /// step makes the draws the step recorded since [`CohortNoise::record_step`] made, of
    /// their kinds and none wider than a draw made so far. The host must call
    /// [`CohortNoise::start_step`] before each of these steps, outside any capture: it hashes
    /// the next block of steps' noise when the last is used up. The keys of all these draws go
    /// to the device now; the host count of draws no longer follows replays.
    ///
    /// # Panics
    /// Without a step recorded.
    pub fn count_on_device(&mut self, steps: u64) {
        let kinds = self.recorded.take().expect("cohort noise: count_on_device needs a step recorded (record_step)");
        let (clients, width) = (self.streams.len() as i64, self.widest);
        let per_step = kinds.len() as i64;
        let steps = i64::try_from(steps).expect("steps fit an i64");
        self.block = None;
        let first = self.draws;
        let draws = (per_step * steps) as u64;
        let keys: Vec<i32> = (first..first + draws).flat_map(|d| self.streams.iter().map(move |s| s.key(d))).collect();
        let keys = Tensor::from_slice(&keys).reshape([per_step * steps, clients, 1]).to_device(self.device);
        let per_step_or_1 = per_step.max(1);
        let block_steps = (block_elements(self.device) / (clients * width.max(1) * per_step_or_1))
            .clamp(1, (BLOCK_DRAWS / per_step_or_1).max(1))
            .min(steps)
            .max(1);
        // Steps whose first made no draw get an empty buffer: a draw in one of them panics
        // instead of baking the host's noise into a graph.
        let values = Tensor::zeros([block_steps * per_step, clients, width], (Kind::Float, self.device));
        let next = Tensor::zeros([1], (Kind::Int64, self.device));
        let end = first + draws;
        self.on_device =
            Some(DeviceDraws { keys, per_step, kinds, in_step: 0, steps, started: 0, end, block_steps, values, next });
    }

    /// Ends the steps counted on the device ([`CohortNoise::count_on_device`]), once all have
    /// run: the host counts draws again, from the draw after theirs. Another phase of steps
    /// can then be recorded and counted on the device (a mask round's score steps, then its
    /// weight steps).
    ///
    /// # Panics
    /// Before all the announced steps have started, or after the last made other draws than
    /// the recorded step.
    pub fn count_on_host(&mut self) {
        let d = self.on_device.take().expect("cohort noise: count_on_host after count_on_device");
        assert_eq!(d.started, d.steps, "cohort noise: count_on_host after {} of {} steps", d.started, d.steps);
        // The last step made the recorded step's draws, twice if it ran eagerly and then captured.
        let made = d.in_step;
        let whole = if d.per_step == 0 { made == 0 } else { made > 0 && made % d.per_step == 0 };
        assert!(
            d.steps == 0 || whole,
            "cohort noise: the last step read on the device made {made} draws, the recorded step {}",
            d.per_step
        );
        self.draws = d.end;
    }

    /// Before each step whose draws are read on the device ([`CohortNoise::count_on_device`]):
    /// hashes the next block of steps' noise into the buffer those steps read, and rewinds the
    /// counter, when the block is used up. Nothing without such steps.
    ///
    /// # Panics
    /// After as many steps as `count_on_device` announced, and after a step that made other
    /// draws than the recorded step.
    pub fn start_step(&mut self) {
        let device = self.device;
        let Some(d) = &mut self.on_device else { return };
        assert!(d.started < d.steps, "cohort noise: a step past the {} counted on the device", d.steps);
        let made = d.in_step;
        assert!(
            made == 0 || (d.per_step > 0 && made % d.per_step == 0),
            "cohort noise: a step read on the device made {made} draws, the recorded step {}",
            d.per_step
        );
        d.in_step = 0;
        if d.per_step > 0 && d.started % d.block_steps == 0 {
            let first = d.started * d.per_step;
            let rows = (d.steps * d.per_step - first).min(d.block_steps * d.per_step);
            let width = d.values.size()[2];
            let noise = keyed_uniform(&d.keys.narrow(0, first, rows), width, device);
            tch::no_grad(|| {
                let by_step = noise.view([rows / d.per_step, d.per_step, -1, width]);
                for (j, kind) in d.kinds.iter().enumerate() {
                    if let Draw::Mask(p) = *kind {
                        let mut draws = by_step.select(1, j as i64);
                        draws.copy_(&keep_mask(&draws, p));
                    }
                }
                d.values.narrow(0, 0, rows).copy_(&noise);
                let _ = d.next.zero_();
            });
        }
        d.started += 1;
    }

    /// The buffer and the counter that draws read on the device ([`CohortNoise::count_on_device`])
    /// read, which a kept cohort's graphs read where they are; none before.
    pub(crate) fn device_tensors_mut(&mut self) -> Vec<&mut Tensor> {
        self.on_device.iter_mut().flat_map(|d| [&mut d.values, &mut d.next]).collect()
    }

    /// Uniform floats in [0, 1) of shape `[k, ...]`: row `c` from client `c`'s stream, for
    /// the first `k = shape[0]` clients.
    pub fn uniform(&mut self, shape: &[i64]) -> Tensor {
        self.draw(shape, Draw::Uniform)
    }

    /// The next draw, of `kind` and `shape` `[k, ...]`: read at the device counter where the
    /// draws are counted there, else from the block of draws hashed ahead.
    fn draw(&mut self, shape: &[i64], kind: Draw) -> Tensor {
        let (k, n, draw) = self.next_draw(shape, kind);
        if let Some(d) = &mut self.on_device {
            assert!(d.per_step > 0, "cohort noise: a draw in a step read on the device whose first step made none");
            let width = d.values.size()[2];
            assert!(n <= width, "cohort noise: a draw of {n} elements per client, wider than the {width} of step 0's");
            let j = d.in_step % d.per_step;
            let recorded = d.kinds[j as usize];
            assert!(
                kind == recorded,
                "cohort noise: draw {j} of a step read on the device is {kind:?}, the recorded step's was {recorded:?}"
            );
            d.in_step += 1;
            let row = d.values.narrow(1, 0, k).narrow(2, 0, n).index_select(0, &d.next);
            let _ = d.next.g_add_scalar_(1);
            return row.reshape(shape);
        }
        let covered = self.block.as_ref().is_some_and(|b| draw >= b.first && draw < b.first + b.len && n <= b.width);
        if !covered {
            self.block = Some(self.noise_block(draw));
        }
        let b = self.block.as_ref().expect("noise block drawn above");
        let u = b.values.select(0, (draw - b.first) as i64).narrow(0, 0, k).narrow(1, 0, n).reshape(shape);
        match kind {
            Draw::Uniform => u,
            Draw::Mask(p) => keep_mask(&u, p),
        }
    }

    /// The noise of draws from `first` on, as wide as the widest draw so far.
    fn noise_block(&self, first: u64) -> NoiseBlock {
        let (clients, width) = (self.streams.len() as i64, self.widest);
        let len = (block_elements(self.device) / (clients * width)).clamp(1, BLOCK_DRAWS) as u64;
        let keys: Vec<i32> = (first..first + len).flat_map(|d| self.streams.iter().map(move |s| s.key(d))).collect();
        let values = keyed_noise(&keys, width, self.device).reshape([len as i64, clients, width]);
        NoiseBlock { first, len, width, values }
    }

    /// A keep-mask of shape `[k, ...]` with probability `1 - p`, scaled by `1 / (1 - p)`
    /// (inverted dropout).
    pub fn dropout_mask(&mut self, shape: &[i64], p: f64) -> Tensor {
        self.mask(shape, p, Order::RowMajor)
    }

    /// [`CohortNoise::dropout_mask`] of `x`'s shape, laid out in memory as `x` where `x` is
    /// `[k, B, F]` stored as `[k, F, B]` (a [`crate::model::linear`] output), so that `x * mask`
    /// reads both in one order; row-major otherwise. The mask's values are the same either way.
    pub fn dropout_mask_for(&mut self, x: &Tensor, p: f64) -> Tensor {
        let shape = x.size();
        let swapped = shape.len() == 3 && !x.is_contiguous() && x.transpose(1, 2).is_contiguous();
        let order = if swapped { Order::Swapped { rows: shape[1], cols: shape[2] } } else { Order::RowMajor };
        self.mask(&shape, p, order)
    }

    fn mask(&mut self, shape: &[i64], p: f64, order: Order) -> Tensor {
        if self.device == Device::Cpu && self.on_device.is_none() {
            // One host pass from hash to scaled mask instead of five small tensor ops: the
            // same floats, since the tensor form compares and scales in float32 too.
            let (k, n, draw) = self.next_draw(shape, Draw::Mask(p));
            let keys: Vec<i32> = self.streams[..k as usize].iter().map(|s| s.key(draw)).collect();
            let (p, scale) = (p as f32, (1.0 / (1.0 - p)) as f32);
            let mask = Tensor::from_slice(&host_noise(&keys, n, order, |u| if u >= p { scale } else { 0.0 }));
            return match order {
                Order::RowMajor => mask.reshape(shape),
                Order::Swapped { rows, cols } => mask.reshape([k, cols, rows]).transpose(1, 2),
            };
        }
        self.draw(shape, Draw::Mask(p))
    }

    /// Counts a draw of `shape` `[k, ...]` and `kind` (noted while a step is recorded): its
    /// `k` (checked against the cohort), its elements per client and its number.
    fn next_draw(&mut self, shape: &[i64], kind: Draw) -> (i64, i64, u64) {
        let k = shape[0];
        assert!(
            k >= 1 && k as usize <= self.streams.len(),
            "cohort noise: {k} clients asked for, the cohort has {}",
            self.streams.len()
        );
        let n = shape[1..].iter().product();
        self.widest = self.widest.max(n);
        self.draws += 1;
        if let Some(kinds) = &mut self.recorded {
            kinds.push(kind);
        }
        (k, n, self.draws - 1)
    }
}

/// The inverted-dropout mask of uniform draws `u`: `(u >= p) · 1/(1 − p)`, in float32.
fn keep_mask(u: &Tensor, p: f64) -> Tensor {
    u.ge(p).to_kind(Kind::Float) * (1.0 / (1.0 - p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cohort_draw_is_each_clients_own_draw() {
        // Each row of a cohort draw equals the client's lone draw, for the first `k` clients,
        // draws of two alternating widths (two dropout layers) and a shorter one, across the
        // boundaries of the blocks computed ahead.
        let lone = |seed, shape: &[i64], skip: u64| {
            let mut n = TensorNoise::new(seed);
            for _ in 0..skip {
                let _ = n.uniform(&[1], Device::Cpu);
            }
            n.uniform(shape, Device::Cpu)
        };
        let seeds = [4, 9, 5];
        let mut cohort = CohortNoise::new(seeds.iter().map(|&s| TensorNoise::new(s)).collect(), Device::Cpu);
        for draw in 0..2 * BLOCK_DRAWS as u64 + 3 {
            let k = if draw % 3 == 0 { 2 } else { 3 };
            let shape = match draw % 4 {
                0 => [k, 3, 5],
                1 => [k, 3, 7],
                2 => [k, 2, 5],
                _ => [k, 3, 5],
            };
            let got = cohort.uniform(&shape);
            assert_eq!(got.size(), shape);
            for (c, &seed) in seeds.iter().enumerate().take(k as usize) {
                assert!(got.get(c as i64).equal(&lone(seed, &shape[1..], draw)), "draw {draw}, client {c}");
            }
        }
    }

    #[test]
    fn draws_read_at_the_device_counter_are_the_host_draws() {
        // Steps of two draws (a dropout mask and a narrower uniform draw), clients leaving,
        // the first step on the host, then 70 steps at the device counter: two blocks of 27
        // steps (as many as fit 2^15 elements) and a partial one, their masks made in the
        // block. Every draw is the host-counted draw (the CPU's one-pass mask), bit for bit.
        let streams = || [7, 1, 4].iter().map(|&s| TensorNoise::new(s)).collect::<Vec<_>>();
        let (mut host, mut device) =
            (CohortNoise::new(streams(), Device::Cpu), CohortNoise::new(streams(), Device::Cpu));
        let step = |noise: &mut CohortNoise, t: i64| {
            let k = if t < 40 { 3 } else { 2 };
            let b = if t % 5 == 4 { 3 } else { 4 };
            (noise.dropout_mask(&[k, b, 50], 0.3), noise.uniform(&[k, b, 9]))
        };
        device.record_step();
        let mut first = Some(step(&mut device, 0));
        device.count_on_device(70);
        let on_device = device.on_device.as_ref().expect("draws counted on the device");
        assert_eq!((on_device.block_steps, on_device.values.size()), (27, vec![54, 3, 200]));
        for t in 0..71 {
            let want = step(&mut host, t);
            let got = first.take().unwrap_or_else(|| {
                device.start_step();
                step(&mut device, t)
            });
            assert!(got.0.equal(&want.0) && got.1.equal(&want.1), "step {t}");
        }
        let d = device.on_device.as_ref().expect("still on the device");
        assert_eq!((d.started, i64::try_from(&d.next).unwrap()), (70, 32), "the third block, 16 steps into it");
        let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| device.start_step()));
        assert!(past.is_err(), "a step past the announced ones panics");
    }

    #[test]
    fn after_steps_counted_on_the_device_the_host_draws_on_and_a_second_phase_too() {
        // Phase one: 5 steps of one uniform draw (1 on the host, 4 at the device counter), then
        // the host draws a mask, then phase two: 4 steps of a mask (1 + 3). Every draw is the
        // draw of a cohort that counted them all on the host.
        let streams = || [3, 8].iter().map(|&s| TensorNoise::new(s)).collect::<Vec<_>>();
        let (mut host, mut device) =
            (CohortNoise::new(streams(), Device::Cpu), CohortNoise::new(streams(), Device::Cpu));
        let phase =
            |noise: &mut CohortNoise, on_device: bool, steps: u64, draw: &dyn Fn(&mut CohortNoise) -> Tensor| {
                let mut out = Vec::new();
                if on_device {
                    noise.record_step();
                }
                out.push(draw(noise));
                if on_device {
                    noise.count_on_device(steps - 1);
                }
                for _ in 1..steps {
                    noise.start_step();
                    out.push(draw(noise));
                }
                if on_device {
                    noise.count_on_host();
                }
                out
            };
        let uniform = |n: &mut CohortNoise| n.uniform(&[2, 6]);
        let mask = |n: &mut CohortNoise| n.dropout_mask(&[2, 4], 0.5);
        let mut want = phase(&mut host, false, 5, &uniform);
        want.push(mask(&mut host));
        want.extend(phase(&mut host, false, 4, &mask));
        let mut got = phase(&mut device, true, 5, &uniform);
        got.push(mask(&mut device));
        got.extend(phase(&mut device, true, 4, &mask));
        assert_eq!(got.len(), 10);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.equal(w), "draw {i}");
        }
        assert_eq!(device.draws(), 10);
        // Ending a phase early panics.
        device.record_step();
        let _ = uniform(&mut device);
        device.count_on_device(2);
        device.start_step();
        let early = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| device.count_on_host()));
        assert!(early.is_err(), "count_on_host before the announced steps ran panics");
    }

    #[test]
    #[should_panic(expected = "whose first step made none")]
    fn a_draw_at_the_device_counter_after_a_first_step_without_draws_panics() {
        let mut noise = CohortNoise::new(vec![TensorNoise::new(2)], Device::Cpu);
        noise.record_step();
        noise.count_on_device(3);
        for _ in 0..3 {
            noise.start_step();
        }
        let _ = noise.dropout_mask(&[1, 2, 4], 0.5);
    }

    #[test]
    #[should_panic(expected = "wider than the 8 of step 0's")]
    fn a_draw_wider_than_step_0s_at_the_device_counter_panics() {
        let mut noise = CohortNoise::new(vec![TensorNoise::new(2)], Device::Cpu);
        noise.record_step();
        let _ = noise.uniform(&[1, 2, 4]);
        noise.count_on_device(3);
        noise.start_step();
        let _ = noise.uniform(&[1, 3, 4]);
    }

    #[test]
    #[should_panic(expected = "is Uniform, the recorded step's was Mask(0.5)")]
    fn a_draw_of_another_kind_than_the_recorded_steps_at_the_device_counter_panics() {
        let mut noise = CohortNoise::new(vec![TensorNoise::new(2)], Device::Cpu);
        noise.record_step();
        let _ = noise.dropout_mask(&[1, 2, 4], 0.5);
        noise.count_on_device(3);
        noise.start_step();
        let _ = noise.uniform(&[1, 2, 4]);
    }

    #[test]
    fn a_step_at_the_device_counter_makes_the_recorded_steps_draws() {
        // Once (run eagerly) or twice (run eagerly, then captured) per step; another count
        // would move the counter off the next steps' rows.
        let made = |draws: usize| {
            let mut noise = CohortNoise::new(vec![TensorNoise::new(2)], Device::Cpu);
            noise.record_step();
            let _ = noise.dropout_mask(&[1, 4], 0.5);
            let _ = noise.uniform(&[1, 3]);
            noise.count_on_device(3);
            noise.start_step();
            for d in 0..draws {
                let _ = if d % 2 == 0 { noise.dropout_mask(&[1, 4], 0.5) } else { noise.uniform(&[1, 3]) };
            }
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| noise.start_step())).is_ok()
        };
        assert_eq!([0, 1, 2, 3, 4].map(made), [true, false, true, false, true]);
    }

    #[test]
    fn a_host_dropout_mask_is_the_tensor_formulas_mask() {
        // The CPU mask (one host pass) against the tensor form, `(u >= p) * 1/(1 - p)` in
        // float32 on the same clients' draws: bit for bit, for rates whose float32 rounding
        // matters (1/3, 0.1) and for draws mixed with plain uniform draws and fewer clients.
        let streams = || [3, 8, 6].iter().map(|&s| TensorNoise::new(s)).collect::<Vec<_>>();
        for p in [0.5, 0.1, 1.0 / 3.0, 0.9] {
            let (mut host, mut tensor) =
                (CohortNoise::new(streams(), Device::Cpu), CohortNoise::new(streams(), Device::Cpu));
            for draw in 0..7 {
                let shape = if draw % 2 == 0 { [3, 4, 300] } else { [2, 1, 9] };
                if draw == 3 {
                    assert!(host.uniform(&shape).equal(&tensor.uniform(&shape)));
                    continue;
                }
                let got = host.dropout_mask(&shape, p);
                let want = tensor.uniform(&shape).ge(p).to_kind(Kind::Float) * (1.0 / (1.0 - p));
                assert_eq!(got.size(), shape);
                let (got, want): (Vec<f32>, Vec<f32>) =
                    (Vec::try_from(&got.flatten(0, -1)).unwrap(), Vec::try_from(&want.flatten(0, -1)).unwrap());
                assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "p {p}, draw {draw}");
                let kept = got.iter().filter(|&&v| v > 0.0).count() as f64 / got.len() as f64;
                assert!(got.len() < 100 || (kept - (1.0 - p)).abs() < 0.06, "p {p}: kept {kept}");
            }
        }
    }

    #[test]
    fn a_mask_for_a_swapped_layout_is_the_row_major_mask_stored_so() {
        // A `[k, B, F]` input stored as `[k, F, B]` gets the mask `dropout_mask` gives, in its
        // own layout; a row-major input, and one transposed otherwise, get the row-major mask.
        let streams = || [5, 2].iter().map(|&s| TensorNoise::new(s)).collect::<Vec<_>>();
        let (mut laid, mut plain) =
            (CohortNoise::new(streams(), Device::Cpu), CohortNoise::new(streams(), Device::Cpu));
        let swapped = Tensor::zeros([2, 7, 3], (Kind::Float, Device::Cpu)).transpose(1, 2);
        let rows = Tensor::zeros([2, 3, 7], (Kind::Float, Device::Cpu));
        let clients_swapped = Tensor::zeros([3, 2, 7], (Kind::Float, Device::Cpu)).transpose(0, 1);
        for (x, in_its_layout) in
            [(&swapped, true), (&rows, false), (&swapped.narrow(0, 0, 1), true), (&clients_swapped, false)]
        {
            let got = laid.dropout_mask_for(x, 0.3);
            let want = plain.dropout_mask(&x.size(), 0.3);
            assert!(got.equal(&want), "{:?} {:?}", x.size(), x.stride());
            assert_eq!(got.stride(), if in_its_layout { x.stride() } else { want.stride() });
        }
    }
}
