//! Evaluation of models on a device-resident test set: one host read per evaluation. Several
//! models of one architecture (the global models of a pack's runs) evaluate as one cohort,
//! their parameters stacked along the client dimension and each test batch shared.

use tch::{Kind, Reduction, Tensor};

use crate::data::Dataset;
use crate::model::{Mode, Model};
use crate::params::ParamSet;

/// Test accuracy and mean cross-entropy of `params` on `test`.
pub fn evaluate(model: &dyn Model, params: &ParamSet, test: &Dataset, batch_size: usize) -> (f64, f64) {
    evaluate_cohort(model, &[params], test, batch_size)[0]
}

/// Test accuracy and mean cross-entropy of each parameter set (all of `model`'s shapes) on
/// `test`, computed as one cohort: a model's numbers do not depend on the others beyond the
/// rounding of the batched products.
pub fn evaluate_cohort(model: &dyn Model, params: &[&ParamSet], test: &Dataset, batch_size: usize) -> Vec<(f64, f64)> {
    let (models, n) = (params.len() as i64, test.len() as i64);
    if n == 0 {
        return vec![(f64::NAN, f64::NAN); params.len()];
    }
    let device = test.y.device();
    tch::no_grad(|| {
        // A lone model is a view of one, not a copy.
        let stacked: Vec<Tensor> = match params {
            [one] => one.tensors().iter().map(|t| t.unsqueeze(0)).collect(),
            _ => (0..params.first().map_or(0, |p| p.tensors().len()))
                .map(|i| Tensor::stack(&params.iter().map(|p| p.tensors()[i].shallow_clone()).collect::<Vec<_>>(), 0))
                .collect(),
        };
        let mut correct = Tensor::zeros([models], (Kind::Int64, device));
        let mut loss_sum = Tensor::zeros([models], (Kind::Double, device));
        let mut begin = 0;
        while begin < n {
            let len = (batch_size as i64).min(n - begin);
            let x = test.x.narrow(0, begin, len);
            let y = test.y.narrow(0, begin, len);
            let mut shape = vec![models];
            shape.extend(x.size());
            let logits = model.forward(&stacked, &x.unsqueeze(0).expand(shape.as_slice(), false), &mut Mode::Eval);
            let classes = *logits.size().last().expect("logits have a class dimension");
            correct += logits.argmax(-1, false).eq_tensor(&y).sum_dim_intlist(1, false, Kind::Int64);
            let per_sample = logits.reshape([-1, classes]).cross_entropy_loss::<Tensor>(
                &y.repeat([models]),
                None,
                Reduction::None,
                -100,
                0.0,
            );
            loss_sum += per_sample.reshape([models, len]).sum_dim_intlist(1, false, Kind::Double);
            begin += len;
        }
        let stats = Tensor::stack(&[correct.to_kind(Kind::Double), loss_sum], 0).to_device(tch::Device::Cpu);
        let v = Vec::<f64>::try_from(&stats.reshape([-1])).expect("two doubles per model");
        let m = params.len();
        (0..m).map(|c| (v[c] / n as f64, v[m + c] / n as f64)).collect()
    })
}

#[cfg(test)]
mod tests {
    use tch::Tensor;

    use super::*;
    use crate::testing::{TinyLinear, tiny_dataset};

    fn params(w: [f32; 4], b: [f32; 2]) -> ParamSet {
        let names = vec!["w".to_string(), "b".to_string()];
        ParamSet::new(names, vec![Tensor::from_slice(&w).reshape([2, 2]), Tensor::from_slice(&b)]).unwrap()
    }

    #[test]
    fn scores_are_worked_out_by_hand_and_the_same_in_a_cohort() {
        // W = I, b = 0: the logits are the samples. Predictions (first maximum on ties):
        // (1,0)→0 ✓, (0,1)→1 ✓, (1,1)→0 ✓, (−1,0)→1 ✓, (0,−1)→0 ✗, (2,1)→0 ✓: 5 of 6.
        let identity = params([1.0, 0.0, 0.0, 1.0], [0.0, 0.0]);
        let ce = |l: [f64; 2], y: usize| (l[0].exp() + l[1].exp()).ln() - l[y];
        let samples =
            [([1.0, 0.0], 0), ([0.0, 1.0], 1), ([1.0, 1.0], 0), ([-1.0, 0.0], 1), ([0.0, -1.0], 1), ([2.0, 1.0], 0)];
        let loss = samples.iter().map(|&(l, y)| ce(l, y)).sum::<f64>() / 6.0;
        let test = tiny_dataset();
        let (accuracy, got) = evaluate(&TinyLinear::default(), &identity, &test, 4);
        assert_eq!(accuracy, 5.0 / 6.0);
        assert!((got - loss).abs() < 1e-6, "loss {got}, by hand {loss}");
        // Three models as one cohort (batches of 4 and 2) score as each does alone.
        let others = [params([0.5, -1.0, 2.0, 0.0], [0.1, -0.3]), params([-1.0, 0.0, 0.0, -1.0], [0.0, 2.0])];
        let all = [&identity, &others[0], &others[1]];
        let together = evaluate_cohort(&TinyLinear::default(), &all, &test, 4);
        for (p, (a, l)) in all.iter().zip(together) {
            let (alone_a, alone_l) = evaluate(&TinyLinear::default(), p, &test, 6);
            assert_eq!(a, alone_a);
            assert!((l - alone_l).abs() < 1e-6, "{l} vs {alone_l}");
        }
    }
}
