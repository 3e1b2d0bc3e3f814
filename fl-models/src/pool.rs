//! 2×2 max pooling with stride 2 (floor), PyTorch's `MaxPool2d(2)`, over the last two
//! dimensions of a tensor in any layout the models use (`[N, ch, H, W]`, or the grouped
//! `[B, C·ch, H, W]` of a cohort).
//!
//! ATen's CPU kernel is slow for it: it records each window's argmax one output at a time,
//! 14 ns an output (`[32, 6, 28, 28]` on one core: 570 µs), and in a profile of the fedasmu
//! LeNet-5 runs it was a quarter of all samples. So on the CPU:
//! - where no gradient will flow (evaluation, frozen layers), the result is the elementwise
//!   maximum of the four strided quarters of each window (58 µs);
//! - where a gradient flows, a branch-free loop finds the element of each window ATen picks
//!   (its first maximum, or its last NaN), and a gather reads the values there (21 µs on that
//!   shape; the loop took 3.4% of a LeNet-5 run's samples where ATen's kernel took 25%). The
//!   gather's gradient puts each output's gradient on that element and zero elsewhere: ATen's
//!   max-pool gradient, to the bit, since the windows do not overlap.
//!
//! Elsewhere (CUDA, other dtypes) ATen's kernel runs.

use tch::{Device, Kind, Tensor};

/// PyTorch's `max_pool2d(x, 2, 2)`: the same values and, where `x` requires a gradient, the
/// same gradient.
pub(crate) fn max_pool2(x: &Tensor) -> Tensor {
    let cpu_float = x.device() == Device::Cpu && x.kind() == Kind::Float;
    if !cpu_float {
        return aten_max_pool2(x);
    }
    let size = x.size();
    let [.., h, w] = size[..] else { panic!("max_pool2: expected [..., H, W], got {size:?}") };
    if !x.requires_grad() {
        let quarter = |row: i64, col: i64| x.slice(-2, row, 2 * (h / 2), 2).slice(-1, col, 2 * (w / 2), 2);
        return quarter(0, 0).maximum(&quarter(0, 1)).maximum(&quarter(1, 0).maximum(&quarter(1, 1)));
    }
    let planes: i64 = size[..size.len() - 2].iter().product();
    let (oh, ow) = (h / 2, w / 2);
    let mut out_size = size[..size.len() - 2].to_vec();
    out_size.extend([oh, ow]);
    if planes * oh * ow == 0 {
        return aten_max_pool2(x);
    }
    let x = x.contiguous().reshape([planes, h * w]);
    let at = tch::no_grad(|| window_maxima(&x, h, w));
    x.gather(1, &at, false).reshape(out_size)
}

/// ATen's `max_pool2d(x, 2, 2)`, the reference the other paths match.
fn aten_max_pool2(x: &Tensor) -> Tensor {
    x.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false)
}

/// For `x` `[planes, h·w]` (contiguous float32 on the CPU), each 2×2 window's position in its
/// plane of the element ATen's max pooling picks: `[planes, (h/2)·(w/2)]` int64.
#[allow(unsafe_code)] // reason: the tensors' memory as slices, for a loop ATen has no fast op for.
fn window_maxima(x: &Tensor, h: i64, w: i64) -> Tensor {
    let planes = x.size()[0];
    let (oh, ow) = (h / 2, w / 2);
    let at = Tensor::empty([planes, oh * ow], (Kind::Int64, Device::Cpu));
    assert!(
        x.is_contiguous() && x.kind() == Kind::Float && x.device() == Device::Cpu && x.numel() as i64 == planes * h * w
    );
    // SAFETY: `x` is a contiguous float32 CPU tensor of planes·h·w elements, and `at` a new,
    // contiguous int64 CPU tensor of planes·oh·ow elements that nothing else refers to. Both
    // outlive the slices, and nothing writes to `x` meanwhile.
    let (values, at_slice) = unsafe {
        (
            std::slice::from_raw_parts(x.data_ptr() as *const f32, (planes * h * w) as usize),
            std::slice::from_raw_parts_mut(at.data_ptr() as *mut i64, (planes * oh * ow) as usize),
        )
    };
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: this machine has AVX2.
        unsafe { maxima_avx2(values, at_slice, h as usize, w as usize) };
        return at;
    }
    maxima(values, at_slice, h as usize, w as usize);
    at
}

/// [`maxima`] compiled with AVX2 enabled, for the machines that have it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn maxima_avx2(values: &[f32], at: &mut [i64], h: usize, w: usize) {
    maxima(values, at, h, w);
}

/// The loop of [`window_maxima`] over `values` `[planes, h·w]` into `at` `[planes, (h/2)·(w/2)]`.
#[inline(always)]
fn maxima(values: &[f32], at: &mut [i64], h: usize, w: usize) {
    let (oh, ow) = (h / 2, w / 2);
    for (plane, at) in values.chunks_exact(h * w).zip(at.chunks_exact_mut(oh * ow)) {
        for (oy, at) in at.chunks_exact_mut(ow).enumerate() {
            let (top, bottom) = (&plane[2 * oy * w..][..2 * ow], &plane[(2 * oy + 1) * w..][..2 * ow]);
            let windows = top.chunks_exact(2).zip(bottom.chunks_exact(2));
            for (ox, (at, (t, b))) in at.iter_mut().zip(windows).enumerate() {
                let first = (2 * oy * w + 2 * ox) as i64;
                // ATen's rule: from −∞ at the first element, take a larger value or any NaN. As
                // selects, not branches: on random activations a branch is a coin toss.
                let (mut best, mut max) = (0, f32::NEG_INFINITY);
                for (v, j) in [(t[0], 0), (t[1], 1), (b[0], w as i64), (b[1], w as i64 + 1)] {
                    let take = (v > max) | v.is_nan();
                    max = if take { v } else { max };
                    best = if take { j } else { best };
                }
                *at = first + best;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gradient of `Σ c ⊙ pool(x)` at `x`, with `c` fixed weights.
    fn gradient(pool: impl Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
        let leaf = x.detach().set_requires_grad(true);
        let out = pool(&leaf);
        let c = Tensor::arange(out.numel() as i64, (Kind::Float, Device::Cpu)).reshape(out.size()) + 1.0;
        Tensor::run_backward(&[(out * c).sum(Kind::Float)], &[&leaf], false, false).remove(0)
    }

    #[test]
    fn max_pooling_is_pytorchs_with_and_without_a_gradient() {
        // Odd and even sizes (floor mode drops the last row or column), ties (ReLU's zeros and
        // a constant corner), NaN (two in one window: ATen's gradient goes to the last) and
        // infinities (a window of −∞ alone): the values of `max_pool2d`, and its gradient.
        let shapes: [&[i64]; 5] = [&[2, 3, 8, 8], &[1, 4, 7, 9], &[3, 1, 2, 3], &[2, 2, 3, 5], &[5, 6, 5]];
        for (i, shape) in shapes.iter().enumerate() {
            let x = Tensor::randn(*shape, (Kind::Float, Device::Cpu)).relu();
            let _ = x.select(-2, 0).fill_(0.5);
            let flat = x.view([-1]);
            let [.., w] = shape[..] else { unreachable!() };
            if flat.size()[0] > 2 * w + 2 {
                let _ = flat.get(1).fill_(f64::NAN);
                let _ = flat.get(w).fill_(f64::NAN);
                for j in [2, 3, w + 2, w + 3] {
                    let _ = flat.get(j).fill_(f64::NEG_INFINITY);
                }
            }
            for x in [x.detach(), x.detach().set_requires_grad(true)] {
                let (got, want) = (max_pool2(&x), aten_max_pool2(&x));
                assert_eq!(got.size(), want.size(), "shape {i}");
                assert!(got.isnan().equal(&want.isnan()), "shape {i}: NaN where max_pool2d has them");
                assert!(got.nan_to_num(0.0, None, None).equal(&want.nan_to_num(0.0, None, None)), "shape {i}");
            }
            assert!(
                gradient(max_pool2, &x).equal(&gradient(aten_max_pool2, &x)),
                "shape {i}: the gradient of max_pool2d"
            );
        }
    }

    #[test]
    fn a_strided_input_pools_as_its_contiguous_copy() {
        let x = Tensor::randn([3, 6, 10], (Kind::Float, Device::Cpu)).transpose(1, 2);
        assert!(!x.is_contiguous());
        assert!(gradient(max_pool2, &x).equal(&gradient(aten_max_pool2, &x)));
        let leaf = x.detach().set_requires_grad(true);
        assert!(max_pool2(&leaf).equal(&aten_max_pool2(&leaf)));
    }
}
