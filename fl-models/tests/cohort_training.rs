//! Cohort training equals training each client alone: the `sgd` trainer run on a cohort of jobs
//! gives every job the parameters, loss and step count that the per-client reference loop
//! ([`ReferenceSgd`], the loop that preceded cohorts) gives it alone, to 1e-5, for every model
//! of the zoo, with dropout, momentum, weight decay, a proximal term, elementwise gradient
//! masks, structured sub-models and clients of different sizes. Models with BatchNorm buffers
//! (which the reference loop does not handle) are checked against the same trainer run on
//! cohorts of one: each client ends with the same parameters and buffers alone and in a cohort.
//! Training also learns: the new convolutional models reduce the loss of a learnable task. And
//! the MLP's plain cross-entropy steps take its hand-derived gradients, not autograd's. The
//! steps a GPU replays from CUDA graphs, run eagerly on the CPU, train every replayable model
//! exactly as the cohort's steps do.

use std::sync::Arc;

use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::rng::{self, TensorNoise};
use fl_core::tch::{Device, Kind as TKind, Tensor};
use fl_core::trainer::reference::ReferenceSgd;
use fl_core::trainer::sgd::{Masking, Sgd, SgdConfig};
use fl_core::{DataSpec, Dataset, Error, LocalTrainer, Model, TrainJob, TrainOutcome, TrainerError};
use proptest::prelude::*;
use rand::SeedableRng;

use fl_models as _;

fn model(name: &str, params: &str, spec: &DataSpec) -> Arc<dyn Model> {
    let registry = Registry::get().unwrap();
    let Builder::Model(build) = registry.component(ComponentKind::Model, name, "test", "model").unwrap().build else {
        unreachable!("registry keys builders by kind")
    };
    build(&Params::new("test", "model", params.parse().unwrap()), spec).unwrap()
}

/// A dataset of `n` samples for `spec`: real-valued inputs, or token ids (with padding 0).
fn dataset(spec: &DataSpec, n: i64, seed: u64) -> Dataset {
    let mut shape = vec![n];
    shape.extend(&spec.input_shape);
    let u = TensorNoise::new(seed).uniform(&shape, Device::Cpu);
    let x = match spec.vocab_size {
        Some(v) => (u * v as f64).to_kind(TKind::Int64),
        None => u * 2.0 - 1.0,
    };
    let y = (TensorNoise::new(seed + 1).uniform(&[n], Device::Cpu) * spec.classes as f64).to_kind(TKind::Int64);
    Dataset { x, y }
}

struct Case {
    model: Arc<dyn Model>,
    data: Dataset,
    /// Each client's sample indices.
    clients: Vec<Vec<i64>>,
    /// Which clients mask their gradients (random 0/1 masks of the full shapes).
    masked: Vec<bool>,
    /// Width of a structured prefix sub-model every client trains, if any.
    width: Option<f64>,
    /// A depth window every client trains (blocks below frozen, above dropped), if any.
    window: Option<std::ops::Range<usize>>,
    /// Early exits the window reads out at besides its top.
    exits: Vec<usize>,
}

impl Case {
    fn jobs(&self) -> Vec<TrainJob> {
        let full = self.model.init(&mut rng::stream(3, &[0]));
        let structure = self.model.structure();
        let mask = match (&self.window, self.width) {
            (Some(window), width) => {
                let kept: Vec<Option<Vec<i64>>> = structure
                    .groups
                    .iter()
                    .map(|g| width.map(|w| (0..((g.units as f64 * w).round() as i64).max(1)).collect()))
                    .collect();
                Some(structure.submodel_with_exits(window.clone(), &self.exits, &kept).unwrap())
            }
            (None, Some(w)) => Some(structure.width_prefix_mask(w).unwrap()),
            (None, None) => None,
        };
        let params = mask.as_ref().map_or_else(|| full.shallow_clone(), |m| m.extract(&full));
        let frozen = mask.as_ref().map_or_else(Vec::new, |m| m.frozen(structure.tensors.len()));
        self.clients
            .iter()
            .enumerate()
            .map(|(c, idx)| {
                let grad_mask = self.masked[c].then(|| {
                    params
                        .tensors()
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            let u = TensorNoise::new(100 + c as u64 * 10 + i as u64).uniform(&t.size(), Device::Cpu);
                            (i % 2 == 0).then(|| u.ge(0.3).to_kind(TKind::Float))
                        })
                        .collect()
                });
                TrainJob {
                    model: Arc::clone(&self.model),
                    params: params.map(|t| t + 0.01 * c as f64),
                    grad_mask,
                    frozen: frozen.clone(),
                    data: self.data.shallow_clone(),
                    indices: Tensor::from_slice(idx),
                    rng: rng::stream(7, &[c as u64]),
                    noise: TensorNoise::new(rng::derive_seed(7, &[c as u64, 1])),
                    version: 0,
                    delay: 0.0,
                    width: None,
                    state: None,
                    batch_size: None,
                }
            })
            .collect()
    }

    /// Trains the clients as one cohort and each alone with the reference loop; returns the
    /// largest parameter difference and checks losses and steps.
    fn max_difference(&self, cfg: &SgdConfig) -> f64 {
        let cohort = Sgd::new(cfg.clone()).train_cohort(self.jobs()).unwrap();
        let reference = ReferenceSgd::new(cfg.clone());
        let mut worst = 0f64;
        for (job, got) in self.jobs().into_iter().zip(&cohort) {
            let want = reference.train(job).unwrap();
            assert_eq!(got.steps, want.steps);
            assert!(
                (got.mean_loss - want.mean_loss).abs() <= 1e-5 * want.mean_loss.abs().max(1.0),
                "loss {} vs {}",
                got.mean_loss,
                want.mean_loss
            );
            for (a, b) in got.params.tensors().iter().zip(want.params.tensors()) {
                assert_eq!(a.size(), b.size());
                worst = worst.max((a - b).abs().max().double_value(&[]));
            }
        }
        worst
    }
}

impl Case {
    /// Trains the clients as one cohort and each as a cohort of one with the same trainer;
    /// returns the largest difference of the final tensors (parameters and buffers) and checks
    /// losses and steps. Also checks that training moved every tensor of the model. Differences
    /// are relative where a value exceeds 1: running variances grow to ~50, where float32
    /// rounding alone is ~1e-5.
    fn max_difference_to_alone(&self, cfg: &SgdConfig) -> f64 {
        let sgd = Sgd::new(cfg.clone());
        let cohort = sgd.train_cohort(self.jobs()).unwrap();
        let mut worst = 0f64;
        for (job, got) in self.jobs().into_iter().zip(&cohort) {
            let start = job.params.deep_clone();
            let want = sgd.train(job).unwrap();
            assert_eq!(got.steps, want.steps);
            assert!(
                (got.mean_loss - want.mean_loss).abs() <= 1e-5 * want.mean_loss.abs().max(1.0),
                "loss {} vs {}",
                got.mean_loss,
                want.mean_loss
            );
            for ((name, a), (b, s)) in got.params.iter().zip(want.params.tensors().iter().zip(start.tensors())) {
                assert_eq!(a.size(), b.size());
                assert!(!a.equal(s), "`{name}` did not move");
                worst = worst.max(((a - b).abs() / b.abs().clamp_min(1.0)).max().double_value(&[]));
            }
        }
        worst
    }
}

fn cfg(momentum: f64, prox_mu: f64) -> SgdConfig {
    SgdConfig { lr: 0.05, batch_size: 4, epochs: 2, momentum, weight_decay: 0.01, prox_mu, ..SgdConfig::default() }
}

fn clients(sizes: &[i64]) -> Vec<Vec<i64>> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&n| {
            let idx = (start..start + n).collect();
            start += n;
            idx
        })
        .collect()
}

fn case(name: &str, params: &str, spec: DataSpec, sizes: &[i64], width: Option<f64>) -> Case {
    let data = dataset(&spec, sizes.iter().sum(), 11);
    let masked = (0..sizes.len()).map(|c| c % 2 == 1).collect();
    Case {
        model: model(name, params, &spec),
        data,
        clients: clients(sizes),
        masked,
        width,
        window: None,
        exits: vec![],
    }
}

fn image(c: i64, side: i64) -> DataSpec {
    DataSpec { input_shape: vec![c, side, side], classes: 10, vocab_size: None }
}

/// The cohort takes the MLP's hand-derived gradients, the reference loop autograd's: this also
/// checks the one against the other through whole jobs (padded batches, masks, FedProx).
#[test]
fn mlp_with_dropout_momentum_and_prox_trains_the_same_in_a_cohort() {
    let c = case("mlp", "hidden = [16, 8]\ndropout = 0.5", image(1, 6), &[9, 4, 13, 1], None);
    for (momentum, prox) in [(0.0, 0.0), (0.9, 0.0), (0.5, 0.3)] {
        let d = c.max_difference(&cfg(momentum, prox));
        assert!(d <= 1e-5, "momentum {momentum}, prox {prox}: max difference {d}");
    }
}

/// A model that counts the calls of its inner model's `loss_gradients`.
struct CountingHandGradients {
    inner: Arc<dyn Model>,
    calls: std::sync::atomic::AtomicUsize,
}

impl Model for CountingHandGradients {
    fn structure(&self) -> &fl_core::Structure {
        self.inner.structure()
    }
    fn init(&self, rng: &mut rng::Rng) -> fl_core::ParamSet {
        self.inner.init(rng)
    }
    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut fl_core::Mode) -> Tensor {
        self.inner.features(body, x, mode)
    }
    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        self.inner.flops_per_tensor(shapes)
    }
    fn loss_gradients(
        &self,
        params: &[Tensor],
        x: &Tensor,
        y: &Tensor,
        weights: &Tensor,
        mode: &mut fl_core::Mode,
    ) -> Option<fl_core::LossGradients> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.loss_gradients(params, x, y, weights, mode)
    }
}

/// Every step of plain cross-entropy training takes the MLP's hand-derived gradients (a change
/// that lost them would still train the same, only slower); a loss with another term (MOON's)
/// takes autograd's.
#[test]
fn plain_cross_entropy_steps_take_the_hand_derived_gradients() {
    let mut c = case("mlp", "hidden = [16]\ndropout = 0.5", image(1, 6), &[9, 4, 13], None);
    let counting = Arc::new(CountingHandGradients { inner: Arc::clone(&c.model), calls: 0.into() });
    c.model = counting.clone();
    let calls = || counting.calls.load(std::sync::atomic::Ordering::Relaxed);
    let out = Sgd::new(cfg(0.5, 0.3)).train_cohort(c.jobs()).unwrap();
    // Lockstep steps: the largest client's, 2 epochs of ⌈13 / 4⌉ batches.
    assert_eq!(out.iter().map(|o| o.steps).max(), Some(8));
    assert_eq!(calls(), 8);
    let moon = SgdConfig { moon_mu: 1.0, ..cfg(0.5, 0.0) };
    Sgd::new(moon).train_cohort(c.jobs()).unwrap();
    assert_eq!(calls(), 8, "MOON's steps run autograd");
}

#[test]
fn lenet5_trains_the_same_in_a_cohort_full_and_as_sub_models() {
    for width in [None, Some(0.5)] {
        let c = case("lenet5", "", image(1, 28), &[6, 11, 3], width);
        let d = c.max_difference(&cfg(0.5, 0.1));
        assert!(d <= 1e-5, "width {width:?}: max difference {d}");
    }
}

#[test]
fn cnn3_trains_the_same_in_a_cohort_full_and_as_sub_models() {
    // Batches of 4 over 9, 6 and 4 samples: the second step pads the 2-sample client.
    for width in [None, Some(0.5)] {
        let c = case("cnn3", "", image(1, 28), &[9, 6, 4], width);
        let cfg = SgdConfig { epochs: 1, ..cfg(0.5, 0.1) };
        let d = c.max_difference(&cfg);
        assert!(d <= 1e-5, "width {width:?}: max difference to the reference {d}");
        let d = c.max_difference_to_alone(&cfg);
        assert!(d <= 1e-5, "width {width:?}: max difference to cohorts of one {d}");
    }
}

#[test]
fn resnet20_trains_the_same_in_a_cohort_with_its_batchnorm_buffers() {
    // Batches of 3 over 3, 6 and 5 samples: the second step pads the third client's batch of
    // 2, whose BatchNorm statistics must leave the padding out. (Not 7 samples first: that
    // client's training amplifies rounding, a relative 1e-7 change of its start moving its
    // result by 1e-2, so the test would compare libtorch's kernel choices, not the cohort.)
    for width in [None, Some(0.5)] {
        let c = case("resnet20", "", image(3, 32), &[3, 6, 5], width);
        let d = c.max_difference_to_alone(&SgdConfig { batch_size: 3, epochs: 1, ..cfg(0.5, 0.1) });
        assert!(d <= 1e-5, "width {width:?}: max difference {d}");
    }
}

/// Mean training loss of each of `rounds` epochs of `model` on a two-class task a global pool
/// can solve: images of 8×8 noise shifted up for class 1 and down for class 0.
fn epoch_losses(name: &str, channels: i64, rounds: usize) -> Vec<f64> {
    let spec = DataSpec { input_shape: vec![channels, 8, 8], classes: 2, vocab_size: None };
    let model = model(name, "", &spec);
    let n = 48;
    let y = Tensor::arange(n, (TKind::Int64, Device::Cpu)).remainder(2);
    let shift = (y.to_kind(TKind::Float) - 0.5).reshape([n, 1, 1, 1]);
    let x = (TensorNoise::new(5).uniform(&[n, channels, 8, 8], Device::Cpu) - 0.5) + shift;
    let data = Dataset { x, y };
    let sgd = Sgd::new(SgdConfig { lr: 0.05, batch_size: 8, momentum: 0.9, ..SgdConfig::default() });
    let mut params = model.init(&mut rng::stream(1, &[0]));
    (0..rounds as u64)
        .map(|round| {
            let out = sgd
                .train(TrainJob {
                    model: Arc::clone(&model),
                    params: params.shallow_clone(),
                    grad_mask: None,
                    frozen: Vec::new(),
                    data: data.shallow_clone(),
                    indices: Tensor::arange(n, (TKind::Int64, Device::Cpu)),
                    rng: rng::stream(2, &[round]),
                    noise: TensorNoise::new(round),
                    version: 0,
                    delay: 0.0,
                    width: None,
                    state: None,
                    batch_size: None,
                })
                .unwrap();
            params = out.params;
            out.mean_loss
        })
        .collect()
}

#[test]
fn vit_trains_the_same_in_a_cohort_full_narrowed_and_in_a_depth_window() {
    let vit = "depth = 3\nhidden = 8\nmlp = 12\nheads = 2\npatch = 2\ndropout = 0.1\nexits = [1, 2]";
    for (width, window) in [(None, None), (Some(0.5), None), (Some(0.5), Some(1..2)), (None, Some(0..3))] {
        let mut c = case("vit", vit, image(3, 4), &[6, 3, 5], width);
        c.window = window.clone();
        let d = c.max_difference(&cfg(0.5, 0.1));
        assert!(d <= 1e-5, "width {width:?}, window {window:?}: max difference {d}");
    }
    // With AdaViT's decisions (sampled from each client's stream), whole and of half the heads.
    let decided = format!("{vit}\ndecisions = {{ initial_keep = 0.7 }}");
    for width in [None, Some(0.5)] {
        let d = case("vit", &decided, image(3, 4), &[6, 3, 5], width).max_difference(&cfg(0.5, 0.1));
        assert!(d <= 1e-5, "decisions, width {width:?}: max difference {d}");
    }
}

#[test]
fn self_distillation_across_exits_trains_the_same_in_a_cohort_and_reaches_every_read_out() {
    use fl_core::trainer::distill::DistillConfig;
    let vit = "depth = 3\nhidden = 8\nmlp = 12\nheads = 2\npatch = 2\nexits = [1, 2]";
    let mut c = case("vit", vit, image(3, 4), &[6, 3, 5], Some(0.5));
    c.window = Some(0..3);
    c.exits = vec![1, 2];
    // Alone, the 5-sample client's last batch holds one sample; the read-outs' backward pass
    // then hands the class token and the position embedding views of one gradient buffer,
    // which the update must still change apart (it did not, before `unaliased`).
    let distill = SgdConfig { distill: Some(DistillConfig::default()), ..cfg(0.5, 0.0) };
    let d = c.max_difference_to_alone(&distill);
    assert!(d <= 1e-5, "max difference {d}");
    // Without distillation the early exits get no gradient and keep their values.
    let jobs = c.jobs();
    let names = jobs[0].params.names().to_vec();
    let start: Vec<Tensor> = jobs[0].params.tensors().iter().map(Tensor::copy).collect();
    let plain = Sgd::new(cfg(0.5, 0.0)).train_cohort(jobs).unwrap();
    for (i, name) in names.iter().enumerate().filter(|(_, n)| n.starts_with("exits.")) {
        assert!(plain[0].params.tensors()[i].equal(&start[i]), "`{name}` moved without distillation");
    }
}

#[test]
fn augmented_batches_train_the_same_in_a_cohort_as_alone() {
    use fl_core::trainer::augment::AugmentConfig;
    let augment =
        AugmentConfig { crop_scale: Some([0.3, 1.0]), crop_ratio: Some([0.75, 1.333]), translate: 0, flip: true };
    let c = case("lenet5", "", image(1, 28), &[6, 11, 3], None);
    let with_augment = SgdConfig { augment: Some(augment), ..cfg(0.5, 0.0) };
    let d = c.max_difference_to_alone(&with_augment);
    assert!(d <= 1e-5, "max difference {d}");
    // Augmentation changes what the clients train on.
    let plain = Sgd::new(cfg(0.5, 0.0)).train_cohort(c.jobs()).unwrap();
    let augmented = Sgd::new(with_augment.clone()).train_cohort(c.jobs()).unwrap();
    assert!(!plain[0].params.tensors()[0].allclose(&augmented[0].params.tensors()[0], 1e-6, 1e-6, false));
    // Token ids cannot be augmented: the trainer says so.
    let spec = DataSpec { input_shape: vec![7], classes: 4, vocab_size: Some(30) };
    let text = case("fasttext", "dim = 8\nhidden = 6", spec, &[5, 4], None);
    let err = Sgd::new(with_augment).train_cohort(text.jobs()).err().expect("text is no image");
    assert!(err.to_string().contains("augment: needs images"), "{err}");
}

#[test]
fn a_depth_window_trains_only_its_blocks_and_exit() {
    let vit = "depth = 3\nhidden = 8\nmlp = 12\nheads = 2\npatch = 2\nexits = [2]";
    let mut c = case("vit", vit, image(3, 4), &[6, 5], None);
    c.window = Some(1..2);
    let jobs = c.jobs();
    let names = jobs[0].params.names().to_vec();
    // The window 1..2 holds the stem and block 0 (frozen) and block 1 (trained), and reads out
    // through the exit after two blocks, `exits.2`; block 2 and the final head are dropped.
    assert!(names.iter().any(|n| n.starts_with("blocks.0.")) && names.iter().any(|n| n.starts_with("blocks.1.")));
    assert!(!names.iter().any(|n| n.starts_with("blocks.2.") || n.starts_with("norm.") || n.starts_with("head.")));
    assert_eq!(&names[names.len() - 2..], ["exits.2.head.weight", "exits.2.head.bias"]);
    let frozen = jobs[0].frozen.clone();
    let before: Vec<Vec<Tensor>> = jobs.iter().map(|j| j.params.tensors().iter().map(Tensor::copy).collect()).collect();
    let out = Sgd::new(SgdConfig { optimizer: fl_core::trainer::sgd::Optimizer::Adan, ..cfg(0.0, 0.0) })
        .train_cohort(jobs)
        .unwrap();
    for (o, start) in out.iter().zip(&before) {
        for (i, (name, t)) in o.params.iter().enumerate() {
            let moved = !t.equal(&start[i]);
            assert_eq!(moved, !frozen[i], "`{name}`: frozen {}, moved {moved}", frozen[i]);
        }
    }
    // Mixing jobs with other frozen tensors in one cohort is refused.
    let mut mixed = c.jobs();
    mixed[1].frozen = vec![false; mixed[1].frozen.len()];
    let err = Sgd::new(cfg(0.0, 0.0)).train_cohort(mixed).err().expect("frozen tensors differ");
    assert!(err.to_string().contains("freezes other tensors"), "{err}");
}

#[test]
fn training_reduces_the_loss_of_the_convolutional_models() {
    for (name, channels) in [("cnn3", 1), ("resnet20", 3)] {
        let losses = epoch_losses(name, channels, 6);
        let (first, last) = (losses[0], losses[losses.len() - 1]);
        assert!(last < 0.5 * first, "{name}: epoch losses {losses:?}");
    }
}

#[test]
fn fasttext_trains_the_same_in_a_cohort() {
    let spec = DataSpec { input_shape: vec![7], classes: 4, vocab_size: Some(30) };
    let c = case("fasttext", "dim = 8\nhidden = 6", spec, &[5, 12, 8], None);
    let d = c.max_difference(&cfg(0.9, 0.1));
    assert!(d <= 1e-5, "max difference {d}");
}

#[test]
fn zero_init_only_masking_ignores_the_masks_in_a_cohort_too() {
    let c = case("mlp", "hidden = [12]", image(1, 5), &[7, 3], None);
    let d = c.max_difference(&SgdConfig { masking: Masking::ZeroInitOnly, ..cfg(0.9, 0.0) });
    assert!(d <= 1e-5, "max difference {d}");
}

#[test]
fn a_cohort_rejects_jobs_of_different_shapes() {
    let c = case("mlp", "hidden = [12]", image(1, 5), &[7, 3], None);
    let mut jobs = c.jobs();
    let half = c.model.structure().width_prefix_mask(0.5).unwrap();
    jobs[1].params = half.extract(&jobs[1].params);
    let err = Sgd::new(cfg(0.0, 0.0)).train_cohort(jobs).err().expect("shapes differ");
    assert!(err.to_string().contains("job 1 of the cohort has (sub-)model shapes"), "{err}");
    let Error::Trainer(TrainerError::CohortShapes { trainer: "sgd", job: 1, found, first }) = err else {
        panic!("expected the trainer's cohort-shapes error, got {err:?}")
    };
    assert_eq!((found[0].clone(), first[0].clone()), (vec![6, 25], vec![12, 25]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn any_cohort_trains_as_its_clients_alone(
        sizes in prop::collection::vec(1i64..14, 1..5),
        batch in 1usize..6,
        epochs in 1usize..3,
        momentum in prop::sample::select(vec![0.0, 0.9]),
        seed in 0u64..1000,
    ) {
        let spec = image(1, 4);
        let data = dataset(&spec, sizes.iter().sum(), seed);
        let mut r = rand::rngs::StdRng::seed_from_u64(seed);
        let masked = sizes.iter().map(|_| rand::Rng::random_bool(&mut r, 0.5)).collect();
        let c = Case { model: model("mlp", "hidden = [6]\ndropout = 0.25", &spec), data, clients: clients(&sizes), masked, width: None, window: None, exits: vec![] };
        let d = c.max_difference(&SgdConfig { batch_size: batch, epochs, ..cfg(momentum, 0.05) });
        prop_assert!(d <= 1e-5, "max difference {}", d);
    }
}

/// The steps a GPU replays from CUDA graphs (table rows and noise read at counters kept on the
/// device, results written in place) train on the CPU exactly what the cohort's steps train,
/// for every model of the zoo whose steps replay: dropout (each layer's masks made ahead in the
/// noise block), BatchNorm's statistics over padded batches, gradient masks, sub-models, and
/// each optimiser whose steps are captured. Five epochs, so that most steps of a shape are
/// replays, which off CUDA run with the index of the step their shape was captured at. A step
/// that would read a wrong row or draw there (a counter off, a draw of another kind, a kept
/// tensor not refilled, a row or value taken by the host's step index) fails here, without a
/// GPU; what only a capture shows (a host read) is `gpu_checks.sh`'s.
#[test]
fn replayed_steps_train_what_the_cohort_trains_for_every_model() {
    use fl_core::trainer::distill::DistillConfig;
    use fl_core::trainer::sgd::Optimizer;
    let text = DataSpec { input_shape: vec![7], classes: 4, vocab_size: Some(30) };
    let vit = "depth = 2\nhidden = 8\nmlp = 12\nheads = 2\npatch = 2\ndropout = 0.1\nexits = [1]";
    let mut vit_window = case("vit", vit, image(3, 4), &[6, 3, 5], Some(0.5));
    vit_window.window = Some(0..2);
    vit_window.exits = vec![1];
    let cases = [
        ("mlp", case("mlp", "hidden = [12]\ndropout = 0.5", image(1, 5), &[7, 3, 5], None)),
        ("lenet5 at half width", case("lenet5", "", image(1, 28), &[6, 11, 3], Some(0.5))),
        ("cnn2", case("cnn2", "", image(1, 8), &[5, 9, 2], None)),
        ("cnn3", case("cnn3", "", image(1, 28), &[9, 6, 4], None)),
        ("resnet20", case("resnet20", "", image(3, 32), &[3, 6, 5], None)),
        ("vgg11 at a quarter width", case("vgg11", "", image(3, 32), &[3, 5, 2], Some(0.25))),
        ("alexnet at a quarter width", case("alexnet", "", image(3, 32), &[3, 5, 2], Some(0.25))),
        ("textcnn", case("textcnn", "dim = 8\nfilters = 4", text.clone(), &[5, 9, 6], None)),
        ("fasttext", case("fasttext", "dim = 8\nhidden = 6", text, &[5, 12, 8], None)),
        ("vit", case("vit", vit, image(3, 4), &[6, 3, 5], None)),
        ("vit in a depth window, distilled", vit_window),
    ];
    let sgd = SgdConfig { epochs: 5, ..cfg(0.5, 0.1) };
    let adam = SgdConfig { optimizer: Optimizer::Adam, lr: 0.01, momentum: 0.0, epochs: 5, ..cfg(0.0, 0.1) };
    let adan = SgdConfig { optimizer: Optimizer::Adan, lr: 0.01, momentum: 0.0, epochs: 5, ..cfg(0.0, 0.0) };
    for (name, c) in &cases {
        let configs = match *name {
            "vit in a depth window, distilled" => {
                vec![SgdConfig { distill: Some(DistillConfig::default()), ..adan.clone() }]
            }
            "mlp" | "resnet20" | "vit" => vec![sgd.clone(), adam.clone(), adan.clone()],
            _ => vec![sgd.clone()],
        };
        for cfg in configs {
            let opt = cfg.optimizer;
            replays_train_what_the_cohort_trains(&format!("{name}, {opt:?}"), cfg, &|| c.jobs());
        }
    }
    // A model whose forward pass reads the host is not replayed: nothing to train so.
    let base = "base = { name = \"mlp\", hidden = [6] }";
    let pm = case("probability-mask", base, image(1, 5), &[4, 3], None);
    let err = Sgd::new(sgd).train_cohort_at_device_counters(pm.jobs()).err().expect("not replayed");
    assert!(err.to_string().contains("not replayed"), "{err}");
}

/// [`replayed_steps_train_what_the_cohort_trains_for_every_model`] for the options that carry
/// a client's state from job to job (FedDyn's gradient, MOON's previous model, ASO-Fed's h and
/// previous gradient) and for augmentation (its draws from the noise block): each on the MLP
/// (hand-derived gradients where the loss is plain) and on cnn2 (autograd), in a second job of
/// every client, which starts from the state its first left; FedASMU's job that pulls and
/// merges the global model mid-training. And on a ViT, clients of three
/// budgets: AdaViT's decisions (drawn from the noise block) with the usage loss, with Adam;
/// Q-ViT's fake quantisation; PLATON's pruning; Co-S²P's learned width masks, with Adan.
#[test]
fn replayed_steps_train_what_the_cohort_trains_with_every_replayed_option() {
    use fl_core::trainer::augment::AugmentConfig;
    let models = [
        ("mlp", case("mlp", "hidden = [12]\ndropout = 0.5", image(1, 5), &[7, 3, 5], None)),
        ("cnn2", case("cnn2", "", image(1, 8), &[5, 9, 2], None)),
    ];
    let base = SgdConfig { epochs: 5, ..cfg(0.5, 0.0) };
    let augment = AugmentConfig { crop_scale: Some([0.5, 1.0]), translate: 1, flip: true, ..AugmentConfig::default() };
    let options = [
        ("FedDyn", SgdConfig { dyn_alpha: 0.1, ..base.clone() }),
        ("MOON", SgdConfig { moon_mu: 1.0, ..base.clone() }),
        ("ASO-Fed", SgdConfig { aso_beta: Some(0.5), prox_mu: 0.1, ..base.clone() }),
        ("augmentation", SgdConfig { augment: Some(augment), ..base.clone() }),
    ];
    for (option, cfg) in options {
        for (name, c) in &models {
            let first = Sgd::new(cfg.clone()).train_cohort(c.jobs()).unwrap();
            let second = || {
                let mut jobs = c.jobs();
                for (job, done) in jobs.iter_mut().zip(&first) {
                    job.state = done.state.as_ref().map(fl_core::ParamSet::shallow_clone);
                }
                jobs
            };
            replays_train_what_the_cohort_trains(&format!("{name}, {option}"), cfg.clone(), &second);
        }
    }
    // FedASMU: a job that pulls the global model mid-training, in a session of one whose two
    // segments (each on graphs of its own) surround the learned merge.
    let pull =
        SgdConfig { learned_pull: Some(fl_core::trainer::learned_pull::LearnedPullConfig::default()), ..base.clone() };
    for (name, c) in &models {
        let trainer = Sgd::new(pull.clone());
        let pulled = c.jobs()[0].params.map(|t| t * 0.5);
        let info = fl_core::trainer::PullInfo { base_version: 2, pulled_version: 5 };
        let run = |mut session: Box<dyn fl_core::trainer::TrainSession>| {
            session.run_until(0.4).unwrap();
            session.merge_pulled(&pulled, info).unwrap();
            session.run_until(1.0).unwrap();
            session.finish().unwrap()
        };
        let want = run(trainer.start(vec![c.jobs().remove(0)]).unwrap());
        assert!(want[0].pull_merge.is_some(), "{name}: the merge is learned");
        let got = run(trainer.start_at_device_counters(vec![c.jobs().remove(0)]).unwrap());
        assert_same_outcomes(&format!("{name}, learned pull"), &got, &want);
    }
    let vit = "depth = 2\nhidden = 8\nmlp = 12\nheads = 2\npatch = 2\ndecisions = { initial_keep = 0.8 }";
    let adavit = case("vit", vit, image(3, 4), &[6, 3, 5], None);
    let groups = adavit.model.structure().groups.len();
    let budgets = || {
        let mut jobs = adavit.jobs();
        for (job, ratio) in jobs.iter_mut().zip([0.125, 0.5, 1.0]) {
            job.width = Some(fl_core::WidthBudget::new(ratio, (0..groups).collect(), vec![], true));
        }
        jobs
    };
    let usage = SgdConfig {
        optimizer: fl_core::trainer::sgd::Optimizer::Adam,
        lr: 0.01,
        momentum: 0.0,
        usage: Some(fl_core::trainer::usage::UsageConfig { weight: 1.0 }),
        ..base
    };
    replays_train_what_the_cohort_trains("vit with decisions, usage loss", usage, &budgets);
    // Co-S²P: learned width masks (the mask epochs before step 0, then the weight steps),
    // clients of three budgets, in a mask round and in a weight round after it.
    let vit = "depth = 2\nhidden = 8\nmlp = 12\nheads = 2\npatch = 2";
    let cos2p = case("vit", vit, image(3, 4), &[6, 3, 5], None);
    let groups = cos2p.model.structure().groups.len();
    let widths = SgdConfig {
        optimizer: fl_core::trainer::sgd::Optimizer::Adan,
        lr: 0.01,
        momentum: 0.0,
        epochs: 5,
        width_masks: Some(fl_core::trainer::width_masks::WidthMaskConfig { epochs: 5, ..Default::default() }),
        ..cfg(0.0, 0.0)
    };
    let learned = |learn: bool, state: Option<&[TrainOutcome]>| {
        let mut jobs = cos2p.jobs();
        for (c, (job, ratio)) in jobs.iter_mut().zip([0.25, 0.5, 1.0]).enumerate() {
            job.width = Some(fl_core::WidthBudget::new(ratio, (1..groups).collect(), vec![0], learn));
            job.state = state.and_then(|s| s[c].state.as_ref().map(fl_core::ParamSet::shallow_clone));
        }
        jobs
    };
    // Q-ViT: fake quantisation with learned step sizes and bit-widths (Adam on both).
    let qvit = SgdConfig {
        width_masks: None,
        quantize: Some(fl_core::trainer::quantize::QuantizeConfig::default()),
        ..widths.clone()
    };
    replays_train_what_the_cohort_trains("vit, Q-ViT", qvit, &|| learned(true, None));
    // PLATON: pruning to the budget on its cubic schedule after a warm-up without pruning, each
    // long enough to replay steps of the same clients and batch length.
    let platon = SgdConfig {
        width_masks: None,
        epochs: 10,
        platon: Some(fl_core::trainer::platon::PlatonConfig { warmup: 0.6, final_share: 0.1, ..Default::default() }),
        ..widths.clone()
    };
    replays_train_what_the_cohort_trains("vit, PLATON", platon, &|| learned(true, None));
    let mask_round = Sgd::new(widths.clone()).train_cohort(learned(true, None)).unwrap();
    replays_train_what_the_cohort_trains("vit, learned widths, mask round", widths.clone(), &|| learned(true, None));
    replays_train_what_the_cohort_trains("vit, learned widths, weight round", widths, &|| {
        learned(false, Some(&mask_round))
    });
}

/// [`replayed_steps_train_what_the_cohort_trains_for_every_model`] for the learning-rate
/// schedules (every table row a replayed step reads by the device's index): decay by epoch with
/// the optimizer restarted each epoch, decay by step, the delay penalty of jobs of different
/// delays, Adam's bias corrections restarted each epoch, fixed step counts cycling over
/// reshuffled epochs, the jobs' own batch size, and early stopping (clients leaving at their
/// epochs' ends).
#[test]
fn replayed_steps_train_what_the_cohort_trains_for_every_schedule() {
    use fl_core::trainer::rates::LrDecay;
    use fl_core::trainer::sgd::Optimizer;
    let c = case("mlp", "hidden = [12]\ndropout = 0.5", image(1, 5), &[7, 3, 5], None);
    let base = SgdConfig { epochs: 5, ..cfg(0.5, 0.1) };
    let schedules = [
        (
            "decay by epoch, restarts",
            SgdConfig { lr_decay: LrDecay::InvSqrtEpoch, reset_each_epoch: true, ..base.clone() },
        ),
        ("decay by step", SgdConfig { lr_decay: LrDecay::InvSqrtStep, ..base.clone() }),
        ("delay penalty", SgdConfig { delay_alpha: 0.5, ..base.clone() }),
        (
            "Adam, restarts",
            SgdConfig { optimizer: Optimizer::Adam, lr: 0.01, momentum: 0.0, reset_each_epoch: true, ..base.clone() },
        ),
        ("fixed steps", SgdConfig { steps: Some(9), epochs: 1, ..base.clone() }),
    ];
    let jobs = || {
        let mut jobs = c.jobs();
        for (job, delay) in jobs.iter_mut().zip([0.0, 3.0, 1.5]) {
            job.delay = delay;
        }
        jobs
    };
    for (name, cfg) in schedules {
        replays_train_what_the_cohort_trains(name, cfg, &jobs);
    }
    let own_batch = || {
        let mut jobs = c.jobs();
        for job in &mut jobs {
            job.batch_size = Some(3);
        }
        jobs
    };
    replays_train_what_the_cohort_trains("the jobs' batch size", base.clone(), &own_batch);
    // Early stopping: batches of 2 over 8, 6 and 8 samples end the clients' epochs on
    // different steps, none on the first replayed one, and some client stops early.
    let stopping = case("mlp", "hidden = [12]\ndropout = 0.5", image(1, 5), &[8, 6, 8], None);
    let patient = SgdConfig { patience: Some(1), batch_size: 2, ..base };
    let steps: Vec<usize> =
        Sgd::new(patient.clone()).train_cohort(stopping.jobs()).unwrap().iter().map(|o| o.steps).collect();
    assert!(steps[0] < 20 || steps[1] < 15 || steps[2] < 20, "no client stopped early: {steps:?}");
    replays_train_what_the_cohort_trains("early stopping", patient, &|| stopping.jobs());
}

/// Trains `jobs()` with `cfg` as one cohort, and again three times at device counters: alone,
/// then twice with kept graphs, the second cohort in the tensors the first kept (where the
/// options keep them). Every run must give each client the cohort's steps, loss and tensors to
/// the bit.
fn replays_train_what_the_cohort_trains(name: &str, cfg: SgdConfig, jobs: &dyn Fn() -> Vec<TrainJob>) {
    let trainer = Sgd::new(cfg.clone());
    let want = trainer.train_cohort(jobs()).unwrap();
    let keeping = Sgd::new(SgdConfig { keep_graphs: true, ..cfg });
    let runs = [
        ("", trainer.train_cohort_at_device_counters(jobs()).unwrap()),
        (" (kept graphs)", keeping.train_cohort_at_device_counters(jobs()).unwrap()),
        (" (kept graphs, again)", keeping.train_cohort_at_device_counters(jobs()).unwrap()),
    ];
    for (how, got) in &runs {
        assert_same_outcomes(&format!("{name}{how}"), got, &want);
    }
}

/// Each client's steps, loss, tensors, state and pull merge in `got` are `want`'s to the bit.
fn assert_same_outcomes(name: &str, got: &[TrainOutcome], want: &[TrainOutcome]) {
    for (client, (g, w)) in got.iter().zip(want).enumerate() {
        let at = format!("{name}, client {client}");
        assert_eq!((g.steps, g.mean_loss), (w.steps, w.mean_loss), "{at}");
        for ((tensor, a), b) in g.params.iter().zip(w.params.tensors()) {
            assert!(a.equal(b), "{at}: `{tensor}` differs");
        }
        let states = (g.state.as_ref(), w.state.as_ref());
        assert_eq!(states.0.is_some(), states.1.is_some(), "{at}: state");
        if let (Some(gs), Some(ws)) = states {
            for ((tensor, a), b) in gs.iter().zip(ws.tensors()) {
                assert!(a.equal(b), "{at}: state `{tensor}` differs");
            }
        }
        let merges = |o: &TrainOutcome| o.pull_merge.map(|m| (m.weight, m.reward));
        assert_eq!(merges(g), merges(w), "{at}: pull merge");
    }
}
