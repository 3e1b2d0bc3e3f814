//! Layers whose gradients are derived by hand, for [`fl_core::Model::loss_gradients`]: the
//! steps of small models, where autograd's bookkeeping (a graph node, saved tensors and a
//! dispatch per op) is a fifth of the step. The MLP 784-200-10's forward and backward on one
//! CPU core took 292-298 µs at batch 32 through autograd and 238-241 µs through these (904-911
//! and 833-834 µs at batch 128), the same gradients to 1e-8 (`fl-bench/examples/step_cost.rs`).
//!
//! Activations are *feature-major*, `[C, F, B]` (each client's features outermost, samples
//! innermost): the layout [`fl_core::model::linear`] stores its output in, so that the same
//! batched products run in the same memory order as under autograd and each weight's gradient
//! comes out in the weight's row-major layout.

use tch::{Kind, Tensor};

/// `W x + b` per client on feature-major inputs: `x` `[C, in, B]`, `w` `[C, out, in]`, `b`
/// `[C, out]` → `[C, out, B]` (the memory of [`fl_core::model::linear`]'s result, whose
/// transpose it is).
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    b.unsqueeze(2).baddbmm(w, x, 1, 1)
}

/// The gradients of [`linear`] from its output's, `dz` `[C, out, B]`: the weight's `dz xᵀ`
/// `[C, out, in]`, the bias's (`dz` summed over the batch) and, where `input`, the input's
/// `Wᵀ dz` `[C, in, B]`.
pub fn linear_backward(dz: &Tensor, x: &Tensor, w: &Tensor, input: bool) -> (Tensor, Tensor, Option<Tensor>) {
    let dw = dz.bmm(&x.transpose(1, 2));
    let db = dz.sum_dim_intlist(2, false, Kind::Float);
    let dx = input.then(|| w.transpose(1, 2).bmm(dz));
    (dw, db, dx)
}

/// Each client's weighted cross-entropy of feature-major logits `z` `[C, classes, B]` against
/// labels `y` `[C·B]` with weights `[C, B]` (`Σ_b w · −log softmax(z)[y]`, `[C]`), and its
/// gradient with respect to `z`: `w · (softmax(z) − onehot(y))`.
pub fn cross_entropy(z: &Tensor, y: &Tensor, weights: &Tensor) -> (Tensor, Tensor) {
    let [c, _, b] = z.size()[..] else { panic!("cross_entropy: logits [C, classes, B], got {:?}", z.size()) };
    let log_p = z.log_softmax(1, Kind::Float);
    let (y, w) = (y.view([c, 1, b]), weights.view([c, 1, b]));
    let minus_w = -&w;
    let per_client = (log_p.gather(1, &y, false) * &minus_w).sum_dim_intlist([1i64, 2].as_slice(), false, Kind::Float);
    let mut dz = log_p.exp() * &w;
    let _ = dz.scatter_add_(1, &y, &minus_w);
    (per_client, dz)
}

/// The gradient of `a = relu(z · m)` (or `relu(z) · m`: the same where `m ≥ 0`) with respect
/// to `z`, from `a` and its gradient `da`; `mask` `m` is a dropout mask, or none.
pub fn relu_backward(da: &Tensor, a: &Tensor, mask: Option<&Tensor>) -> Tensor {
    match mask {
        Some(m) => a.threshold_backward(&(da * m), 0.0),
        None => a.threshold_backward(da, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{input, labels};
    use fl_core::trainer::sgd;
    use proptest::prelude::*;

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        assert_eq!(a.size(), b.size());
        (a - b).abs().max().double_value(&[])
    }

    #[test]
    fn cross_entropy_of_uniform_logits_is_log_classes_and_its_gradient_by_hand() {
        // Two clients, two samples, three classes, all logits 0: softmax 1/3 everywhere.
        let z = Tensor::zeros([2, 3, 2], (Kind::Float, tch::Device::Cpu));
        let y = Tensor::from_slice(&[0i64, 2, 1, 1]);
        let w = Tensor::from_slice(&[0.5f32, 0.5, 1.0, 0.0]).view([2, 2]);
        let (loss, dz) = cross_entropy(&z, &y, &w);
        let ln3 = 3f64.ln();
        assert!(max_diff(&loss, &Tensor::from_slice(&[ln3 as f32, ln3 as f32])) < 1e-6);
        // Client 0, sample 0 (label 0, weight 0.5): 0.5 · (1/3 − 1) at class 0, 0.5/3 elsewhere.
        let third = 1.0 / 3.0;
        let want = Tensor::from_slice(&[
            0.5 * (third - 1.0),
            0.5 * third,
            0.5 * third,
            0.5 * third,
            0.5 * third,
            0.5 * (third - 1.0),
            third,
            0.0,
            third - 1.0,
            0.0,
            third,
            0.0,
        ])
        .to_kind(Kind::Float)
        .view([2, 3, 2]);
        assert!(max_diff(&dz, &want) < 1e-6, "{dz}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// A linear layer, a ReLU under a dropout mask, a linear classifier and the weighted
        /// cross-entropy, by hand against autograd on the trainer's layout.
        #[test]
        fn two_layers_by_hand_equal_autograd(
            c in 1i64..4, b in 1i64..9, inp in 1i64..12, hidden in 1i64..9, classes in 2i64..6, seed in 0u64..1000,
            dropout in any::<bool>(),
        ) {
            let w1 = input(&[c, hidden, inp], seed).set_requires_grad(true);
            let b1 = input(&[c, hidden], seed + 1).set_requires_grad(true);
            let w2 = input(&[c, classes, hidden], seed + 2).set_requires_grad(true);
            let b2 = input(&[c, classes], seed + 3).set_requires_grad(true);
            let x = input(&[c, b, inp], seed + 4);
            let y = labels(c * b, classes);
            // Some weights 0, as for padded samples.
            let weights = input(&[c, b], seed + 5).clamp_min(0.0);
            let mask = dropout.then(|| input(&[c, hidden, b], seed + 6).ge(0.0).to_kind(Kind::Float) * 2.0);

            let h = fl_core::model::linear(&x, &w1, &b1);
            let h = match &mask { Some(m) => (h * m.transpose(1, 2)).relu(), None => h.relu() };
            let want = sgd::cross_entropy(&fl_core::model::linear(&h, &w2, &b2), &y, &weights);
            let grads = Tensor::run_backward(&[want.sum(Kind::Float)], &[&w1, &b1, &w2, &b2], false, false);

            let (w1, b1, w2, b2) = (w1.detach(), b1.detach(), w2.detach(), b2.detach());
            let x_t = x.transpose(1, 2);
            let z1 = linear(&x_t, &w1, &b1);
            let a1 = match &mask { Some(m) => (&z1 * m).relu(), None => z1.relu() };
            let (loss, dz2) = cross_entropy(&linear(&a1, &w2, &b2), &y, &weights);
            let (dw2, db2, da1) = linear_backward(&dz2, &a1, &w2, true);
            let dz1 = relu_backward(&da1.unwrap(), &a1, mask.as_ref());
            let (dw1, db1, dx) = linear_backward(&dz1, &x_t, &w1, false);
            prop_assert!(dx.is_none());
            prop_assert!(max_diff(&loss, &want.detach()) < 1e-5);
            for (hand, auto) in [dw1, db1, dw2, db2].iter().zip(&grads) {
                prop_assert!(max_diff(hand, auto) < 1e-5, "by hand {hand} autograd {auto}");
            }
        }
    }
}
