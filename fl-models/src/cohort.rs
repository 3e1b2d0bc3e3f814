//! Layers in cohort form: each takes a cohort's stacked parameters (`[C, ...]`) and inputs, and
//! computes every client's output in one kernel, client `c`'s from its own slice alone.
//!
//! - [`linear`]: `[C, B, in] → [C, B, out]` as one batched matrix product (`baddbmm`), its
//!   weight's gradient row-major; [`linear_rows`] the same with a row-major result.
//! - [`conv2d`]: a convolution of every client at once as a grouped convolution whose groups
//!   are the clients. It works in the *grouped layout* `[B, C·channels, H, W]` (client-major
//!   channels), which pooling and activations keep, so a stack of conv layers converts only at
//!   its ends ([`to_grouped`], [`from_grouped`]).
//! - [`batch_norm`]: 2-D batch normalisation of every client in the grouped layout, each
//!   client's statistics from its own real samples, its running buffers updated in place.
//! - [`global_avg_pool`]: the grouped layout averaged over H×W, back to `[C, B, ch]`.
//! - [`embedding`]: each client's lookup in its own table, as one lookup in the tables laid end
//!   to end, with PyTorch's `padding_idx` semantics (that row gets no gradient).
//! - [`tokens_linear`]: [`linear`] on token sequences `[C, B, T, in] → [C, B, T, out]`.
//! - [`layer_norm`]: normalisation over the last dimension with each client's affine pair.
//! - [`attention`]: multi-head scaled dot-product attention of every client's sequences as one
//!   fused kernel over the `C·B` sequences (the head count follows from the tensors, so a
//!   sub-model with fewer heads runs as is).

use fl_core::Mode;
use tch::{Kind, Tensor};

pub use fl_core::model::{linear, linear_rows};

/// `[C, B, ch, H, W]` → the grouped layout `[B, C·ch, H, W]`.
pub fn to_grouped(x: &Tensor) -> Tensor {
    let [c, b, ch, h, w] = x.size()[..] else { panic!("to_grouped: expected [C, B, ch, H, W], got {:?}", x.size()) };
    x.transpose(0, 1).reshape([b, c * ch, h, w])
}

/// The grouped layout `[B, C·ch, H, W]` of `clients` clients → `[C, B, ch, H, W]`.
pub fn from_grouped(x: &Tensor, clients: i64) -> Tensor {
    let [b, cch, h, w] = x.size()[..] else { panic!("from_grouped: expected [B, C·ch, H, W], got {:?}", x.size()) };
    x.reshape([b, clients, cch / clients, h, w]).transpose(0, 1)
}

/// A 2-D convolution per client in the grouped layout: `x` `[B, C·in, H, W]`, `w`
/// `[C, out, in, kh, kw]`, `b` `[C, out]` → `[B, C·out, H', W']`.
pub fn conv2d(x: &Tensor, w: &Tensor, b: &Tensor, stride: i64, padding: i64) -> Tensor {
    grouped_conv2d(x, w, Some(b), stride, padding)
}

/// [`conv2d`] without a bias (a convolution followed by batch normalisation).
pub fn conv2d_without_bias(x: &Tensor, w: &Tensor, stride: i64, padding: i64) -> Tensor {
    grouped_conv2d(x, w, None, stride, padding)
}

fn grouped_conv2d(x: &Tensor, w: &Tensor, b: Option<&Tensor>, stride: i64, padding: i64) -> Tensor {
    let [c, out, inp, kh, kw] = w.size()[..] else {
        panic!("conv2d: expected [C, out, in, kh, kw], got {:?}", w.size())
    };
    x.conv2d(
        &w.reshape([c * out, inp, kh, kw]),
        b.map(|b| b.reshape([c * out])),
        [stride, stride],
        [padding, padding],
        [1, 1],
        c,
    )
}

/// The mean over H×W of the grouped layout `[B, C·ch, H, W]` of `clients` clients →
/// `[C, B, ch]`, ready for [`linear`].
pub fn global_avg_pool(x: &Tensor, clients: i64) -> Tensor {
    let pooled = x.mean_dim([2i64, 3].as_slice(), false, None::<Kind>);
    pooled.reshape([pooled.size()[0], clients, -1]).transpose(0, 1)
}

/// PyTorch's `BatchNorm2d` defaults: ε added to the variance, and the weight of a new batch
/// statistic in the running average.
const BN_EPS: f64 = 1e-5;
const BN_MOMENTUM: f64 = 0.1;

/// `BatchNorm2d` (ε = 1e-5, momentum 0.1) of every client in the grouped layout: `x`
/// `[B, C·ch, H, W]`, `weight`, `bias`, `running_mean`, `running_var` `[C, ch]` →
/// `[B, C·ch, H, W]`.
///
/// In training mode each client normalises each channel with the mean and biased variance of
/// its batch over (B, H, W), and its running buffers move in place (they are views into the
/// trainer's state): `mean ← 0.9 · mean + 0.1 · batch mean`, `var ← 0.9 · var + 0.1 ·
/// unbiased batch variance`, as PyTorch does. When [`Mode::valid`] marks padding, the
/// statistics (and the `n` of the unbiased correction) cover the client's real samples only,
/// so a client padded in a cohort gets what it gets alone on its unpadded batch. Like PyTorch,
/// training needs more than one value per channel (`n = B·H·W > 1`); with one, the running
/// variance becomes NaN. In evaluation mode the running statistics normalise.
///
/// Without padding this is libtorch's fused kernel on the `C·ch` channels of the grouped
/// layout, which computes per-(client, channel) statistics and updates the running buffers
/// in one call; with padding the masked statistics are computed from plain tensor ops.
pub fn batch_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    mode: &Mode,
) -> Tensor {
    if let Some(valid) = mode.valid() {
        return masked_batch_norm(x, weight, bias, running_mean, running_var, valid);
    }
    // `reshape` of a contiguous buffer is a view, so the kernel's in-place update reaches the
    // caller's tensor; a non-contiguous buffer is copied, and the update copied back below.
    let (mean, var) = (running_mean.reshape([-1]), running_var.reshape([-1]));
    let y = x.batch_norm(
        Some(&weight.reshape([-1])),
        Some(&bias.reshape([-1])),
        Some(&mean),
        Some(&var),
        mode.is_train(),
        BN_MOMENTUM,
        BN_EPS,
        true,
    );
    if mode.is_train() {
        for (buffer, updated) in [(running_mean, &mean), (running_var, &var)] {
            if buffer.data_ptr() != updated.data_ptr() {
                tch::no_grad(|| buffer.shallow_clone().copy_(&updated.view_as(buffer)));
            }
        }
    }
    y
}

/// Training-mode [`batch_norm`] whose statistics leave out the samples that `valid` (`[C, B]`,
/// 0 for padding) marks.
fn masked_batch_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    valid: &Tensor,
) -> Tensor {
    let [b, cch, h, w] = x.size()[..] else { panic!("batch_norm: expected [B, C·ch, H, W], got {:?}", x.size()) };
    let [c, ch] = weight.size()[..] else { panic!("batch_norm: expected a weight [C, ch], got {:?}", weight.size()) };
    // `[B, C, ch, H·W]`, the valid mask broadcast over channels and positions.
    let xs = x.reshape([b, c, ch, h * w]);
    let keep = valid.transpose(0, 1).reshape([b, c, 1, 1]).to_kind(x.kind());
    let n = keep.sum_dim_intlist(0, true, None::<Kind>) * (h * w) as f64;
    let mean = (&xs * &keep).sum_dim_intlist([0i64, 3].as_slice(), true, None::<Kind>) / &n;
    let centred = &xs - &mean;
    let var = (centred.square() * &keep).sum_dim_intlist([0i64, 3].as_slice(), true, None::<Kind>) / &n;
    let scale = (&var + BN_EPS).rsqrt() * weight.reshape([1, c, ch, 1]);
    let y = centred * scale + bias.reshape([1, c, ch, 1]);
    tch::no_grad(|| {
        let unbiased = &var * &n / (&n - 1.0);
        for (buffer, batch) in [(running_mean, &mean), (running_var, &unbiased)] {
            let mut buffer = buffer.shallow_clone();
            buffer *= 1.0 - BN_MOMENTUM;
            buffer += batch.detach().reshape([c, ch]) * BN_MOMENTUM;
        }
    });
    y.reshape([b, cch, h, w])
}

/// Rows of each client's table: `table` `[C, V, dim]`, `ids` `[C, ...]` (int64 in `[0, V)`) →
/// `[C, ..., dim]`. Positions holding `padding_idx` read its row but send it no gradient.
pub fn embedding(table: &Tensor, ids: &Tensor, padding_idx: i64) -> Tensor {
    let [c, v, dim] = table.size()[..] else { panic!("embedding: expected [C, V, dim], got {:?}", table.size()) };
    let mut offset_shape = vec![c];
    offset_shape.resize(ids.dim(), 1);
    let offsets = (Tensor::arange(c, (Kind::Int64, ids.device())) * v).reshape(offset_shape.as_slice());
    let rows = Tensor::embedding(&table.reshape([c * v, dim]), &(ids + offsets), -1, false, false);
    let padding = ids.eq(padding_idx).unsqueeze(-1);
    rows.detach().where_self(&padding, &rows)
}

/// [`linear`] applied to every token: `x` `[C, B, T, in]` (any dimensions between the client
/// and the features), `w` `[C, out, in]`, `b` `[C, out]` → `[C, B, T, out]`, row-major
/// ([`linear_rows`]).
pub fn tokens_linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    let size = x.size();
    let (c, inp) = (size[0], size[size.len() - 1]);
    let mut out_size = size.clone();
    *out_size.last_mut().expect("x has a feature dimension") = w.size()[1];
    linear_rows(&x.reshape([c, -1, inp]), w, b).reshape(out_size.as_slice())
}

/// `nn.LayerNorm(D, eps)` of every client: `x` `[C, ..., D]` normalised over its last
/// dimension, then scaled and shifted by the client's `weight`, `bias` `[C, D]`.
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Tensor {
    let size = x.size();
    let d = size[size.len() - 1];
    let mut affine_shape = vec![size[0]];
    affine_shape.resize(size.len() - 1, 1);
    affine_shape.push(d);
    let normed = x.layer_norm([d], None::<Tensor>, None::<Tensor>, eps, true);
    normed * weight.reshape(affine_shape.as_slice()) + bias.reshape(affine_shape.as_slice())
}

/// Multi-head attention of every client's sequences: `q`, `k`, `v` `[C, B, T, H·head_dim]`
/// (the projections, heads laid out one after another along the last dimension) →
/// `softmax(q kᵀ / √head_dim) v` per head, heads concatenated back, `[C, B, T, H·head_dim]`.
/// The `C·B` sequences go through one `scaled_dot_product_attention` call (a fused kernel
/// where libtorch has one), without dropout.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, head_dim: i64) -> Tensor {
    let [c, b, t, width] = q.size()[..] else {
        panic!("attention: expected [C, B, T, H·head_dim], got {:?}", q.size())
    };
    assert_eq!(width % head_dim, 0, "attention: width {width} is not a multiple of head_dim {head_dim}");
    let heads = width / head_dim;
    let split = |x: &Tensor| x.reshape([c * b, t, heads, head_dim]).transpose(1, 2);
    let out =
        Tensor::scaled_dot_product_attention(&split(q), &split(k), &split(v), None::<Tensor>, 0.0, false, None, false);
    out.transpose(1, 2).reshape([c, b, t, width])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{input, noise};
    use proptest::prelude::*;
    use tch::Device;

    /// Client `c` of a stacked tensor, as a cohort of one.
    fn client(t: &Tensor, c: i64) -> Tensor {
        t.narrow(0, c, 1)
    }

    fn close(a: &Tensor, b: &Tensor) -> bool {
        a.size() == b.size() && a.allclose(b, 1e-5, 1e-5, false)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn linear_of_a_cohort_is_each_clients_own(c in 1i64..5, b in 1i64..7, i in 1i64..9, o in 1i64..6, seed in 0u64..1000) {
            let (x, w, bias) = (input(&[c, b, i], seed), input(&[c, o, i], seed + 1), input(&[c, o], seed + 2));
            let all = linear(&x, &w, &bias);
            prop_assert_eq!(all.size(), vec![c, b, o]);
            for k in 0..c {
                let alone = linear(&client(&x, k), &client(&w, k), &client(&bias, k));
                // And the plain single-model layer.
                let plain = x.get(k).linear(&w.get(k), Some(&bias.get(k)));
                prop_assert!(close(&client(&all, k), &alone));
                prop_assert!(close(&all.get(k), &plain));
            }
        }

        #[test]
        fn conv2d_of_a_cohort_is_each_clients_own(
            c in 1i64..4, b in 1i64..4, i in 1i64..4, o in 1i64..4, k in 1i64..4, pad in 0i64..2, stride in 1i64..3, seed in 0u64..1000,
        ) {
            let hw = 6;
            let (x, w, bias) = (input(&[c, b, i, hw, hw], seed), input(&[c, o, i, k, k], seed + 1), input(&[c, o], seed + 2));
            let all = from_grouped(&conv2d(&to_grouped(&x), &w, &bias, stride, pad), c);
            for j in 0..c {
                let plain = x.get(j).conv2d(&w.get(j), Some(&bias.get(j)), [stride, stride], [pad, pad], [1, 1], 1);
                prop_assert!(close(&all.get(j), &plain));
                let alone = from_grouped(&conv2d(&to_grouped(&client(&x, j)), &client(&w, j), &client(&bias, j), stride, pad), 1);
                prop_assert!(close(&client(&all, j), &alone));
            }
        }

        #[test]
        fn embedding_of_a_cohort_is_each_clients_own(c in 1i64..4, v in 2i64..9, dim in 1i64..5, len in 1i64..6, seed in 0u64..1000) {
            let table = input(&[c, v, dim], seed).set_requires_grad(true);
            let ids = (input(&[c, 3, len], seed + 1).abs() * v as f64).to_kind(Kind::Int64).clamp(0, v - 1);
            let all = embedding(&table, &ids, 0);
            for j in 0..c {
                let plain = Tensor::embedding(&table.get(j), &ids.get(j), 0, false, false);
                prop_assert!(close(&all.get(j), &plain));
            }
            // Gradients: the padding rows get none, the others those of the plain lookup.
            all.sum(Kind::Float).backward();
            let got = table.grad();
            for j in 0..c {
                let t = table.get(j).detach().set_requires_grad(true);
                Tensor::embedding(&t, &ids.get(j), 0, false, false).sum(Kind::Float).backward();
                prop_assert!(close(&got.get(j), &t.grad()));
                prop_assert_eq!(got.get(j).get(0).abs().sum(Kind::Float).double_value(&[]), 0.0);
            }
        }
    }

    /// A float tensor of `shape` from `values`.
    fn tensor(values: &[f32], shape: &[i64]) -> Tensor {
        Tensor::from_slice(values).reshape(shape)
    }

    /// Training-mode BatchNorm of one client alone on its real samples, with PyTorch's own
    /// single-model kernel: `x` `[n, ch, H, W]`, the rest `[ch]` (the buffers move in place).
    fn plain_train_bn(x: &Tensor, w: &Tensor, b: &Tensor, mean: &Tensor, var: &Tensor) -> Tensor {
        x.batch_norm(Some(w), Some(b), Some(mean), Some(var), true, 0.1, 1e-5, false)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Each client's outputs on its real samples, its gradients and its running buffers
        /// equal those of PyTorch's BatchNorm run on that client alone without the padding,
        /// with or without padding in the cohort; in eval mode each client uses its buffers.
        #[test]
        fn batch_norm_of_a_cohort_is_each_clients_own(
            c in 1i64..4, b in 2i64..6, ch in 1i64..4, h in 1i64..4, w in 1i64..4,
            padded in any::<bool>(), seed in 0u64..1000,
        ) {
            let x = input(&[c, b, ch, h, w], seed);
            let weight = (input(&[c, ch], seed + 1) + 1.5).set_requires_grad(true);
            let bias = input(&[c, ch], seed + 2).set_requires_grad(true);
            let mean0 = input(&[c, ch], seed + 3);
            let var0 = input(&[c, ch], seed + 4).abs() + 0.5;
            // Client j keeps its first `real[j]` samples; at least 2 values per channel.
            let real: Vec<i64> = (0..c).map(|j| if padded { (b - j - 1).max(1).max(3 - h * w).min(b) } else { b }).collect();
            let valid = Tensor::stack(
                &real.iter().map(|&n| Tensor::arange(b, (Kind::Int64, Device::Cpu)).lt(n).to_kind(Kind::Float)).collect::<Vec<_>>(),
                0,
            );
            let (mean, var) = (mean0.copy(), var0.copy());
            let mut n = noise(1);
            let mode = Mode::padded(&mut n, padded.then_some(&valid));
            let y = from_grouped(&batch_norm(&to_grouped(&x), &weight, &bias, &mean, &var, &mode), c);
            // A random weighting of the real outputs, so that gradients are checked too.
            let probe = input(&[c, b, ch, h, w], seed + 5) * valid.reshape([c, b, 1, 1, 1]);
            let (gw, gb) = {
                let g = Tensor::run_backward(&[(&y * &probe).sum(Kind::Float)], &[&weight, &bias], false, false);
                (g[0].shallow_clone(), g[1].shallow_clone())
            };
            for j in 0..c {
                let xj = x.get(j).narrow(0, 0, real[j as usize]);
                let wj = weight.get(j).detach().set_requires_grad(true);
                let bj = bias.get(j).detach().set_requires_grad(true);
                let (mj, vj) = (mean0.get(j).copy(), var0.get(j).copy());
                let want = plain_train_bn(&xj, &wj, &bj, &mj, &vj);
                let got = y.get(j).narrow(0, 0, real[j as usize]);
                prop_assert!(close(&got, &want), "client {}: outputs differ", j);
                prop_assert!(close(&mean.get(j), &mj) && close(&var.get(j), &vj), "client {}: buffers differ", j);
                let probe_j = probe.get(j).narrow(0, 0, real[j as usize]);
                let g = Tensor::run_backward(&[(&want * probe_j).sum(Kind::Float)], &[&wj, &bj], false, false);
                prop_assert!(close(&gw.get(j), &g[0]) && close(&gb.get(j), &g[1]), "client {}: gradients differ", j);
            }
            let eval = from_grouped(&batch_norm(&to_grouped(&x), &weight, &bias, &mean, &var, &Mode::Eval), c);
            for j in 0..c {
                let want = x.get(j).batch_norm(Some(weight.get(j)), Some(bias.get(j)), Some(mean.get(j)), Some(var.get(j)), false, 0.1, 1e-5, false);
                prop_assert!(close(&eval.get(j), &want), "client {}: eval outputs differ", j);
            }
        }
    }

    #[test]
    fn batch_norm_golden_values() {
        // One client, B = 2 samples of 2 channels × 1×2 pixels.
        // Channel 0 holds 1, 2 | 3, 6: mean 3, squared deviations 4 + 1 + 0 + 9 = 14, biased
        // variance 14/4 = 3.5, unbiased 14/3. Channel 1 holds 0, 0 | 2, 2: mean 1, variance 1,
        // unbiased 4/3.
        let x = tensor(&[1., 2., 0., 0., 3., 6., 2., 2.], &[2, 2, 1, 2]);
        let (weight, bias) = (tensor(&[2.0, 0.5], &[1, 2]), tensor(&[0.0, 1.0], &[1, 2]));
        let (mean, var) =
            (Tensor::zeros([1, 2], (Kind::Float, Device::Cpu)), Tensor::ones([1, 2], (Kind::Float, Device::Cpu)));
        let y = batch_norm(&x, &weight, &bias, &mean, &var, &Mode::train(&mut noise(1)));
        let (s0, s1) = (2.0 / (3.5f64 + 1e-5).sqrt(), 0.5 / (1.0f64 + 1e-5).sqrt());
        let want: Vec<f32> =
            [(1.0 - 3.0) * s0, (2.0 - 3.0) * s0, -s1 + 1.0, -s1 + 1.0, 0.0, 3.0 * s0, s1 + 1.0, s1 + 1.0]
                .map(|v| v as f32)
                .to_vec();
        assert!(y.allclose(&tensor(&want, &[2, 2, 1, 2]), 1e-6, 1e-6, false), "{y}");
        // mean ← 0.9·0 + 0.1·batch mean; var ← 0.9·1 + 0.1·unbiased variance.
        assert!(mean.allclose(&tensor(&[0.3, 0.1], &[1, 2]), 1e-6, 1e-7, false), "{mean}");
        let want_var = [0.9 + 0.1 * 14.0 / 3.0, 0.9 + 0.1 * 4.0 / 3.0].map(|v: f64| v as f32);
        assert!(var.allclose(&tensor(&want_var, &[1, 2]), 1e-6, 1e-7, false), "{var}");

        // The same two samples after a padding sample of large values, marked invalid: the
        // same statistics, outputs and buffer updates.
        let padded =
            Tensor::cat(&[x.shallow_clone(), Tensor::full([1, 2, 1, 2], 100.0, (Kind::Float, Device::Cpu))], 0);
        let (mean2, var2) = (mean.zeros_like(), var.ones_like());
        let valid = tensor(&[1., 1., 0.], &[1, 3]);
        let mut n = noise(1);
        let mode = Mode::padded(&mut n, Some(&valid));
        let y2 = batch_norm(&padded, &weight, &bias, &mean2, &var2, &mode);
        assert!(y2.narrow(0, 0, 2).allclose(&y, 1e-6, 1e-6, false), "{y2}");
        assert!(mean2.allclose(&mean, 1e-6, 1e-7, false) && var2.allclose(&var, 1e-6, 1e-7, false));

        // Eval mode normalises with the buffers: (x − 0.3) / √(var + ε) · 2 on channel 0.
        let e = batch_norm(&x, &weight, &bias, &mean, &var, &Mode::Eval);
        let first = (1.0 - 0.3) / (f64::from(want_var[0]) + 1e-5).sqrt() * 2.0;
        assert!((e.double_value(&[0, 0, 0, 0]) - first).abs() < 1e-5, "{e}");
        assert!(mean.allclose(&tensor(&[0.3, 0.1], &[1, 2]), 1e-6, 1e-7, false), "eval moved the buffers");
    }

    #[test]
    fn batch_norm_padding_gives_the_padded_client_its_unpadded_result() {
        // Client 0 has B = 5 real samples; client 1 has 3, padded with 2 repeats of its first.
        let (b, ch) = (5, 3);
        let x = input(&[2, b, ch, 4, 4], 7);
        let repeat = x.get(1).narrow(0, 0, 1).repeat([2, 1, 1, 1]);
        x.get(1).narrow(0, 3, 2).copy_(&repeat);
        let valid = tensor(&[1., 1., 1., 1., 1., 1., 1., 1., 0., 0.], &[2, 5]);
        let (weight, bias) = (input(&[2, ch], 8) + 1.0, input(&[2, ch], 9));
        let (mean, var) = (input(&[2, ch], 10), input(&[2, ch], 11).abs() + 0.5);
        let (mean1, var1) = (mean.get(1).copy().unsqueeze(0), var.get(1).copy().unsqueeze(0));
        let mut n = noise(1);
        let mode = Mode::padded(&mut n, Some(&valid));
        let y = from_grouped(&batch_norm(&to_grouped(&x), &weight, &bias, &mean, &var, &mode), 2);
        let alone_x = x.narrow(0, 1, 1).narrow(1, 0, 3);
        let alone = batch_norm(
            &to_grouped(&alone_x),
            &client(&weight, 1),
            &client(&bias, 1),
            &mean1,
            &var1,
            &Mode::train(&mut noise(1)),
        );
        assert!(close(&y.get(1).narrow(0, 0, 3), &from_grouped(&alone, 1).get(0)));
        assert!(close(&mean.get(1), &mean1.get(0)) && close(&var.get(1), &var1.get(0)));
        // The padding did count for the unpadded statistics it would have distorted.
        let unmasked = x.get(1).batch_norm(None::<Tensor>, None, None, None, true, 0.1, 1e-5, false);
        assert!(!close(&unmasked.narrow(0, 0, 3), &alone.reshape([3, ch, 4, 4])));
    }

    #[test]
    fn batch_norm_updates_buffers_that_are_not_contiguous() {
        // Buffers `[C, ch]` stored transposed: the update must still reach them.
        let x = input(&[4, 2 * 3, 2, 2], 12);
        let (weight, bias) = (input(&[2, 3], 13), input(&[2, 3], 14));
        let store = Tensor::zeros([3, 2], (Kind::Float, Device::Cpu));
        let mean = store.tr();
        assert!(!mean.is_contiguous());
        let var = Tensor::ones([2, 3], (Kind::Float, Device::Cpu));
        let want_mean = Tensor::zeros([2, 3], (Kind::Float, Device::Cpu));
        let _ = batch_norm(&x, &weight, &bias, &want_mean, &var.copy(), &Mode::train(&mut noise(1)));
        let _ = batch_norm(&x, &weight, &bias, &mean, &var, &Mode::train(&mut noise(1)));
        assert!(want_mean.abs().sum(Kind::Float).double_value(&[]) > 0.0);
        assert!(close(&store.tr(), &want_mean));
    }

    #[test]
    fn grouped_layout_round_trips() {
        let x = Tensor::arange(2 * 3 * 4 * 2 * 2, (Kind::Float, Device::Cpu)).reshape([2, 3, 4, 2, 2]);
        let g = to_grouped(&x);
        assert_eq!(g.size(), [3, 8, 2, 2]);
        // Sample 1's channels: client 0's four, then client 1's four.
        assert!(g.get(1).narrow(0, 4, 4).equal(&x.get(1).get(1)));
        assert!(from_grouped(&g, 2).equal(&x));
    }
}
