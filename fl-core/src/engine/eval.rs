//! Evaluation of models on a device-resident test set: one host read per evaluation. Several
//! models of one architecture (the global models of a pack's runs) evaluate as one cohort,
//! their parameters stacked along the client dimension and each test batch shared. Besides
//! top-1 accuracy and the mean cross-entropy, each evaluation counts top-5 hits and, per class,
//! true positives, predictions and labels, from which macro-F1 follows.

use tch::{Kind, Reduction, Tensor};

use crate::data::Dataset;
use crate::model::{Mode, Model};
use crate::params::ParamSet;

/// What one evaluation measures on the test set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scores {
    /// Top-1 accuracy.
    pub accuracy: f64,
    /// Mean cross-entropy.
    pub loss: f64,
    /// Top-5 accuracy (1 with five classes or fewer).
    pub top5: f64,
    /// Macro-averaged F1 over the classes that occur as a label or a prediction.
    pub macro_f1: f64,
}

impl Scores {
    /// Nothing measured: every score NaN.
    pub const NONE: Scores = Scores { accuracy: f64::NAN, loss: f64::NAN, top5: f64::NAN, macro_f1: f64::NAN };
}

/// The scores of `params` on `test`.
pub fn evaluate(model: &dyn Model, params: &ParamSet, test: &Dataset, batch_size: usize) -> Scores {
    evaluate_cohort(model, &[params], test, batch_size)[0]
}

/// The scores of each parameter set (all of `model`'s shapes) on `test`, computed as one
/// cohort: a model's numbers do not depend on the others beyond the rounding of the batched
/// products.
pub fn evaluate_cohort(model: &dyn Model, params: &[&ParamSet], test: &Dataset, batch_size: usize) -> Vec<Scores> {
    let (models, n) = (params.len() as i64, test.len() as i64);
    if n == 0 {
        return vec![Scores::NONE; params.len()];
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
        let mut top5 = Tensor::zeros([models], (Kind::Int64, device));
        let mut loss_sum = Tensor::zeros([models], (Kind::Double, device));
        // Per model and class: true positives and predictions; per class: labels.
        let mut classes_seen: Option<(Tensor, Tensor, Tensor)> = None;
        let mut begin = 0;
        while begin < n {
            let len = (batch_size as i64).min(n - begin);
            let x = test.x.narrow(0, begin, len);
            let y = test.y.narrow(0, begin, len);
            let mut shape = vec![models];
            shape.extend(x.size());
            let logits = model.forward(&stacked, &x.unsqueeze(0).expand(shape.as_slice(), false), &mut Mode::Eval);
            let classes = *logits.size().last().expect("logits have a class dimension");
            let predicted = logits.argmax(-1, false);
            let hit = predicted.eq_tensor(&y);
            correct += hit.sum_dim_intlist(1, false, Kind::Int64);
            let (_, best) = logits.topk(classes.min(5), -1, true, false);
            top5 += best.eq_tensor(&y.view([1, len, 1])).any_dim(-1, false).sum_dim_intlist(1, false, Kind::Int64);
            let (tp, pred, label) = classes_seen.get_or_insert_with(|| {
                let zeros = || Tensor::zeros([models, classes], (Kind::Int64, device));
                (zeros(), zeros(), Tensor::zeros([classes], (Kind::Int64, device)))
            });
            let targets = y.view([1, len]).expand([models, len], false);
            *tp = tp.scatter_add(1, &targets, &hit.to_kind(Kind::Int64));
            *pred = pred.scatter_add(1, &predicted, &predicted.ones_like());
            *label = label.scatter_add(0, &y, &y.ones_like());
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
        let (tp, pred, label) = classes_seen.expect("at least one batch");
        let (tp, pred, label) = (tp.to_kind(Kind::Double), pred.to_kind(Kind::Double), label.to_kind(Kind::Double));
        // F1 = 2TP / (2TP + FP + FN) = 2TP / (predictions + labels), over the classes present.
        let present = (&pred + &label).gt(0.0);
        let f1 = (&tp * 2.0 / (&pred + &label).clamp_min(1.0)) * present.to_kind(Kind::Double);
        let macro_f1 = f1.sum_dim_intlist(1, false, Kind::Double) / present.sum_dim_intlist(1, false, Kind::Double);
        let stats = Tensor::stack(
            &[correct.to_kind(Kind::Double), loss_sum, top5.to_kind(Kind::Double), macro_f1 * n as f64],
            0,
        )
        .to_device(tch::Device::Cpu);
        let v = Vec::<f64>::try_from(&stats.reshape([-1])).expect("four doubles per model");
        let m = params.len();
        let at = |row: usize, c: usize| v[row * m + c] / n as f64;
        (0..m).map(|c| Scores { accuracy: at(0, c), loss: at(1, c), top5: at(2, c), macro_f1: at(3, c) }).collect()
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
        let scores = evaluate(&TinyLinear::default(), &identity, &test, 4);
        assert_eq!(scores.accuracy, 5.0 / 6.0);
        assert!((scores.loss - loss).abs() < 1e-6, "loss {}, by hand {loss}", scores.loss);
        // Two classes: every label is in the top 5. Labels 0,1,0,1,1,0; predictions
        // 0,1,0,1,0,0: class 0 F1 = 2·3/(4 + 3) = 6/7, class 1 = 2·2/(2 + 3) = 4/5.
        assert_eq!(scores.top5, 1.0);
        assert!((scores.macro_f1 - (6.0 / 7.0 + 0.8) / 2.0).abs() < 1e-12, "macro-F1 {}", scores.macro_f1);
        // Three models as one cohort (batches of 4 and 2) score as each does alone.
        let others = [params([0.5, -1.0, 2.0, 0.0], [0.1, -0.3]), params([-1.0, 0.0, 0.0, -1.0], [0.0, 2.0])];
        let all = [&identity, &others[0], &others[1]];
        let together = evaluate_cohort(&TinyLinear::default(), &all, &test, 4);
        for (p, s) in all.iter().zip(together) {
            let alone = evaluate(&TinyLinear::default(), p, &test, 6);
            assert_eq!((s.accuracy, s.top5, s.macro_f1), (alone.accuracy, alone.top5, alone.macro_f1));
            assert!((s.loss - alone.loss).abs() < 1e-6, "{} vs {}", s.loss, alone.loss);
        }
    }

    use crate::rng::Rng;
    use crate::structure::{Structure, TensorSpec};

    /// Logits = the inputs themselves (an identity classifier over 6 classes).
    struct Identity(Structure);

    impl Model for Identity {
        fn structure(&self) -> &Structure {
            &self.0
        }
        fn init(&self, _: &mut Rng) -> ParamSet {
            let eye = Tensor::eye(6, (Kind::Float, tch::Device::Cpu));
            ParamSet::new(self.0.names(), vec![eye, Tensor::zeros([6], (Kind::Float, tch::Device::Cpu))]).unwrap()
        }
        fn features(&self, _: &[Tensor], x: &Tensor, _: &mut Mode) -> Tensor {
            x.shallow_clone()
        }
        fn flops_per_tensor(&self, _: &[Vec<i64>]) -> Vec<f64> {
            vec![0.0, 0.0]
        }
    }

    #[test]
    fn top5_and_macro_f1_follow_the_hand_count() {
        let model = Identity(Structure {
            tensors: vec![TensorSpec::new("w", [6, 6]), TensorSpec::new("b", [6])],
            groups: vec![],
        });
        let params = model.init(&mut crate::rng::stream(0, &[]));
        // Labels 0, 1, 2, 3; predictions 0, 2, 2, 0. Sample 1's label has the smallest logit (out
        // of its top 5); sample 3's is second.
        let x = Tensor::from_slice(&[
            5.0f32, 1.0, 1.0, 1.0, 1.0, 1.0, //
            3.0, -9.0, 5.0, 1.0, 1.0, 1.0, //
            1.0, 1.0, 5.0, 1.0, 1.0, 1.0, //
            5.0, 1.0, 1.0, 4.0, 1.0, 1.0,
        ])
        .reshape([4, 6]);
        let test = Dataset { x, y: Tensor::from_slice(&[0i64, 1, 2, 3]) };
        // Batches of 3: the counts add up across batches.
        let s = evaluate(&model, &params, &test, 3);
        assert_eq!(s.accuracy, 0.5);
        assert_eq!(s.top5, 0.75);
        // F1 per class: 0: 2·1/(2 + 1) = ⅔; 1: 0; 2: ⅔; 3: 0 → macro ⅓ (classes 4, 5 absent).
        assert!((s.macro_f1 - 1.0 / 3.0).abs() < 1e-12, "macro-F1 {}", s.macro_f1);
        // Two models at once score as each alone.
        let other = params.map(|t| t * 2.0);
        let both = evaluate_cohort(&model, &[&params, &other], &test, 3);
        assert_eq!(both[0], s);
        assert_eq!(both[1], evaluate(&model, &other, &test, 4));
    }
}
