//! Layers in cohort form: each takes a cohort's stacked parameters (`[C, ...]`) and inputs, and
//! computes every client's output in one kernel, client `c`'s from its own slice alone.
//!
//! - [`linear`]: `[C, B, in] → [C, B, out]` as one batched matrix product (`baddbmm`).
//! - [`conv2d`]: a convolution of every client at once as a grouped convolution whose groups
//!   are the clients. It works in the *grouped layout* `[B, C·channels, H, W]` (client-major
//!   channels), which pooling and activations keep, so a stack of conv layers converts only at
//!   its ends ([`to_grouped`], [`from_grouped`]).
//! - [`embedding`]: each client's lookup in its own table, as one lookup in the tables laid end
//!   to end, with PyTorch's `padding_idx` semantics (that row gets no gradient).

use tch::{Kind, Tensor};

/// `x Wᵀ + b` per client: `x` `[C, B, in]`, `w` `[C, out, in]`, `b` `[C, out]` → `[C, B, out]`.
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    b.unsqueeze(1).baddbmm(x, &w.transpose(1, 2), 1, 1)
}

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
    let [c, out, inp, kh, kw] = w.size()[..] else {
        panic!("conv2d: expected [C, out, in, kh, kw], got {:?}", w.size())
    };
    x.conv2d(
        &w.reshape([c * out, inp, kh, kw]),
        Some(&b.reshape([c * out])),
        [stride, stride],
        [padding, padding],
        [1, 1],
        c,
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::input;
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
