//! Evaluation of models on a device-resident test set: one host read per evaluation. Several
//! models of one architecture (the global models of a pack's runs) evaluate as one cohort,
//! their parameters stacked along the client dimension and each test batch shared. Besides
//! top-1 accuracy and the mean cross-entropy, each evaluation counts top-5 hits and, per class,
//! true positives, predictions and labels, from which macro-F1 follows. On the CPU, a run's
//! global model shares its test batches with the idle workers of its pool: in synchronous
//! rounds the evaluation between two rounds no longer runs on one core while the others wait.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use tch::{Kind, Reduction, Tensor};

use super::pool::WorkerPool;

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
    if test.is_empty() {
        return vec![Scores::NONE; params.len()];
    }
    tch::no_grad(|| {
        let stacked = stack(params);
        let counts =
            batches(test.len(), batch_size).map(|(begin, len)| batch_counts(model, &stacked, test, begin, len));
        scores(counts, &test.y, params.len())
    })
}

/// The scores of `params` on `test`, its batches shared between the calling thread and the
/// idle workers of `pool`. Each batch is scored alone and the batches' counts add up in their
/// order, so the scores are [`evaluate`]'s to the bit whoever scores which batch. Workers busy
/// with jobs take no batch: the caller never waits for a queued job, only for batches a worker
/// has begun. On CUDA, or with one worker, the caller scores every batch.
pub fn evaluate_shared(
    pool: &WorkerPool,
    model: &Arc<dyn Model>,
    params: &ParamSet,
    test: &Dataset,
    batch_size: usize,
) -> Scores {
    let ranges: Vec<(i64, i64)> = batches(test.len(), batch_size).collect();
    let helpers = pool.workers().saturating_sub(1).min(ranges.len().saturating_sub(1));
    if helpers == 0 || test.y.device().is_cuda() {
        return evaluate(&**model, params, test, batch_size);
    }
    let stacked = tch::no_grad(|| stack(&[params]));
    let shared = Arc::new(SharedBatches::new(ranges));
    for _ in 0..helpers {
        let (shared, model, test) = (Arc::clone(&shared), Arc::clone(model), test.shallow_clone());
        let stacked: Vec<Tensor> = stacked.iter().map(Tensor::shallow_clone).collect();
        // Nobody waits for the handle: a helper that starts after the last batch was taken
        // returns at once.
        let _ = pool.submit(move || shared.score(&*model, &stacked, &test));
    }
    shared.score(&**model, &stacked, test);
    scores(shared.wait().into_iter(), &test.y, 1)[0]
}

/// Each model's parameters stacked along a leading model dimension; a lone model is a view of
/// one, not a copy.
fn stack(params: &[&ParamSet]) -> Vec<Tensor> {
    match params {
        [one] => one.tensors().iter().map(|t| t.unsqueeze(0)).collect(),
        _ => (0..params.first().map_or(0, |p| p.tensors().len()))
            .map(|i| Tensor::stack(&params.iter().map(|p| p.tensors()[i].shallow_clone()).collect::<Vec<_>>(), 0))
            .collect(),
    }
}

/// The `(begin, length)` of each test batch.
fn batches(n: usize, batch_size: usize) -> impl Iterator<Item = (i64, i64)> {
    let (n, size) = (n as i64, batch_size.max(1) as i64);
    (0..n).step_by(size as usize).map(move |begin| (begin, size.min(n - begin)))
}

/// What one test batch tells of each model: its per-sample outcomes, which the counts over the
/// whole test set take at once (a few kernels per evaluation, not per batch: on a GPU a small
/// model's evaluation is bound by its launches), and its loss sum.
struct BatchCounts {
    /// Whether each sample's top-1 prediction is its label, `[models, len]` bool.
    hit: Tensor,
    /// Whether its label is among the top 5, `[models, len]` bool.
    top5: Tensor,
    /// Each sample's top-1 prediction, `[models, len]` int64.
    predicted: Tensor,
    /// The sum of the batch's cross-entropies, `[models]` double.
    loss: Tensor,
    /// Classes the model scores.
    classes: i64,
}

/// The counts of the test samples `begin..begin + len` under the stacked models.
fn batch_counts(model: &dyn Model, stacked: &[Tensor], test: &Dataset, begin: i64, len: i64) -> BatchCounts {
    let models = stacked.first().map_or(1, |t| t.size()[0]);
    let x = test.x.narrow(0, begin, len);
    let y = test.y.narrow(0, begin, len);
    let mut shape = vec![models];
    shape.extend(x.size());
    let logits = model.forward(stacked, &x.unsqueeze(0).expand(shape.as_slice(), false), &mut Mode::Eval);
    let classes = *logits.size().last().expect("logits have a class dimension");
    let predicted = logits.argmax(-1, false);
    let (_, best) = logits.topk(classes.min(5), -1, true, false);
    let targets = if models == 1 { y.shallow_clone() } else { y.repeat([models]) };
    let per_sample =
        logits.reshape([-1, classes]).cross_entropy_loss::<Tensor>(&targets, None, Reduction::None, -100, 0.0);
    BatchCounts {
        hit: predicted.eq_tensor(&y),
        top5: best.eq_tensor(&y.view([1, len, 1])).any_dim(-1, false),
        predicted,
        loss: per_sample.reshape([models, len]).sum_dim_intlist(1, false, Kind::Double),
        classes,
    }
}

/// The scores of `models` models from every batch's outcomes on the test labels `y`, in batch
/// order: the loss sums add up in that order (floating point: the order fixes their
/// rounding); the counts are integers.
fn scores(counts: impl Iterator<Item = BatchCounts>, y: &Tensor, models: usize) -> Vec<Scores> {
    let n = y.size()[0];
    let (mut hit, mut top5, mut predicted) = (Vec::new(), Vec::new(), Vec::new());
    let mut loss: Option<Tensor> = None;
    let mut classes = 0;
    for batch in counts {
        hit.push(batch.hit);
        top5.push(batch.top5);
        predicted.push(batch.predicted);
        loss = Some(match loss {
            Some(sum) => sum + batch.loss,
            None => batch.loss,
        });
        classes = batch.classes;
    }
    let loss = loss.expect("at least one batch");
    let [hit, top5, predicted] = [hit, top5, predicted].map(|parts| Tensor::cat(&parts, 1));
    let hit = hit.to_kind(Kind::Int64);
    let per_class = || Tensor::zeros([models as i64, classes], (Kind::Int64, y.device()));
    let labels_of = y.view([1, n]).expand([models as i64, n], false);
    let true_positives = per_class().scatter_add(1, &labels_of, &hit);
    let predictions = per_class().scatter_add(1, &predicted, &predicted.ones_like());
    let labels = Tensor::zeros([classes], (Kind::Int64, y.device())).scatter_add(0, y, &y.ones_like());
    let correct = hit.sum_dim_intlist(1, false, Kind::Int64);
    let top5 = top5.sum_dim_intlist(1, false, Kind::Int64);
    let n = n as usize;
    let [tp, pred, label] = [true_positives, predictions, labels].map(|t| t.to_kind(Kind::Double));
    // F1 = 2TP / (2TP + FP + FN) = 2TP / (predictions + labels), over the classes present.
    let present = (&pred + &label).gt(0.0);
    let f1 = (&tp * 2.0 / (&pred + &label).clamp_min(1.0)) * present.to_kind(Kind::Double);
    let macro_f1 = f1.sum_dim_intlist(1, false, Kind::Double) / present.sum_dim_intlist(1, false, Kind::Double);
    let stats =
        Tensor::stack(&[correct.to_kind(Kind::Double), loss, top5.to_kind(Kind::Double), macro_f1 * n as f64], 0)
            .to_device(tch::Device::Cpu);
    let v = Vec::<f64>::try_from(&stats.reshape([-1])).expect("four doubles per model");
    let at = |row: usize, c: usize| v[row * models + c] / n as f64;
    (0..models).map(|c| Scores { accuracy: at(0, c), loss: at(1, c), top5: at(2, c), macro_f1: at(3, c) }).collect()
}

/// Test batches handed out to whichever thread asks next, their counts kept in batch order.
struct SharedBatches {
    ranges: Vec<(i64, i64)>,
    next: AtomicUsize,
    done: Mutex<Vec<Option<std::thread::Result<BatchCounts>>>>,
    finished: Condvar,
}

impl SharedBatches {
    fn new(ranges: Vec<(i64, i64)>) -> Self {
        let done = Mutex::new(ranges.iter().map(|_| None).collect());
        SharedBatches { ranges, next: AtomicUsize::new(0), done, finished: Condvar::new() }
    }

    /// Scores batches until none is left to take.
    fn score(&self, model: &dyn Model, stacked: &[Tensor], test: &Dataset) {
        tch::no_grad(|| {
            loop {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                let Some(&(begin, len)) = self.ranges.get(i) else { return };
                let counts = catch_unwind(AssertUnwindSafe(|| batch_counts(model, stacked, test, begin, len)));
                self.done.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(counts);
                self.finished.notify_all();
            }
        })
    }

    /// Every batch's counts in order, once all are scored; a batch's panic goes on here.
    fn wait(&self) -> Vec<BatchCounts> {
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        while done.iter().any(Option::is_none) {
            done = self.finished.wait(done).unwrap_or_else(PoisonError::into_inner);
        }
        done.drain(..)
            .map(|c| match c.expect("every batch is scored") {
                Ok(counts) => counts,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use tch::Tensor;

    use super::*;
    use crate::engine::pool::panic_message;
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

    /// 50 samples in 13 batches of at most 4, and the parameters that score them.
    fn fifty() -> (Dataset, ParamSet) {
        let x = Tensor::arange(100, (Kind::Float, tch::Device::Cpu)).sin().reshape([50, 2]);
        let y = Tensor::arange(50, (Kind::Int64, tch::Device::Cpu)).remainder(2);
        // Large weights spread the losses over many orders of magnitude: their sum depends on its order.
        (Dataset { x, y }, params([37.3, -12.9, 8.1, 25.7], [0.1, -0.2]))
    }

    #[test]
    fn shared_batches_score_to_the_bit_as_one_thread_does() {
        let model: Arc<dyn Model> = Arc::new(TinyLinear::default());
        let (test, p) = fifty();
        let alone = evaluate(&*model, &p, &test, 4);
        for workers in [1, 2, 3, 8] {
            let pool = WorkerPool::new(workers);
            for _ in 0..10 {
                assert_eq!(evaluate_shared(&pool, &model, &p, &test, 4), alone, "{workers} workers");
            }
        }
        // A batch larger than the test set, and no test set at all.
        let pool = WorkerPool::new(2);
        assert_eq!(evaluate_shared(&pool, &model, &p, &test, 64), evaluate(&*model, &p, &test, 64));
        let empty = Dataset { x: test.x.narrow(0, 0, 0), y: test.y.narrow(0, 0, 0) };
        assert!(evaluate_shared(&pool, &model, &p, &empty, 4).accuracy.is_nan());
    }

    #[test]
    fn busy_workers_do_not_hold_the_evaluation_up() {
        let pool = WorkerPool::new(2);
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let open = |gate: &(Mutex<bool>, Condvar)| {
            *gate.0.lock().unwrap() = true;
            gate.1.notify_all();
        };
        for _ in 0..2 {
            let gate = Arc::clone(&gate);
            let _ = pool.submit(move || {
                let mut opened = gate.0.lock().unwrap();
                while !*opened {
                    opened = gate.1.wait(opened).unwrap();
                }
            });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let model: Arc<dyn Model> = Arc::new(TinyLinear::default());
                let (test, p) = fifty();
                let _ = tx.send(evaluate_shared(&pool, &model, &p, &test, 4) == evaluate(&*model, &p, &test, 4));
            });
            let scored = rx.recv_timeout(std::time::Duration::from_secs(60));
            open(&gate);
            assert_eq!(scored, Ok(true), "the caller scores every batch while both workers are busy");
        });
    }

    /// [`TinyLinear`] that panics on a batch holding the value 99.
    #[derive(Default)]
    struct PanicsOn99(TinyLinear);

    impl Model for PanicsOn99 {
        fn structure(&self) -> &Structure {
            self.0.structure()
        }
        fn init(&self, rng: &mut Rng) -> ParamSet {
            self.0.init(rng)
        }
        fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
            assert!(x.eq(99.0).any().int64_value(&[]) == 0, "sample 99");
            self.0.features(body, x, mode)
        }
        fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
            self.0.flops_per_tensor(shapes)
        }
    }

    #[test]
    fn a_batch_that_panics_on_a_worker_panics_in_the_caller() {
        let model: Arc<dyn Model> = Arc::new(PanicsOn99::default());
        let (test, p) = fifty();
        let _ = test.x.get(37).get(0).fill_(99.0); // in the tenth batch
        let pool = WorkerPool::new(3);
        for _ in 0..5 {
            let panic = catch_unwind(AssertUnwindSafe(|| evaluate_shared(&pool, &model, &p, &test, 4)))
                .expect_err("the tenth batch panics");
            assert!(panic_message(&panic).contains("sample 99"), "{}", panic_message(&panic));
        }
        // The workers survive: a clean test set scores as before.
        let (clean, _) = fifty();
        assert_eq!(evaluate_shared(&pool, &model, &p, &clean, 4), evaluate(&*model, &p, &clean, 4));
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
