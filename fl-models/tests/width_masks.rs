//! Learned width masks in training (`[trainer] width_masks`, Co-S²P §2.3–2.4) on a small ViT:
//! a job that applies its client's finalised mask trains exactly what the physically cut
//! sub-model trains and hands the dropped units back unchanged; a mask round trains the scores
//! within the budget and keeps them as the client's state; and the scores learn which units
//! matter: units that cannot change the output are the first to go.

use std::sync::Arc;

use fl_core::learned_width::{kept_units, score_name};
use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::rng::{self, TensorNoise};
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::trainer::sgd::{Optimizer, Sgd, SgdConfig};
use fl_core::trainer::width_masks::WidthMaskConfig;
use fl_core::{DataSpec, Dataset, LocalTrainer, Mask, Model, ParamSet, TrainJob, WidthBudget};

use fl_models as _;

fn vit() -> Arc<dyn Model> {
    let registry = Registry::get().unwrap();
    let Builder::Model(build) = registry.component(ComponentKind::Model, "vit", "test", "model").unwrap().build else {
        unreachable!("registry keys builders by kind")
    };
    let params = "depth = 2\nhidden = 16\nmlp = 16\nheads = 4\npatch = 4";
    let spec = DataSpec { input_shape: vec![1, 8, 8], classes: 2, vocab_size: None };
    build(&Params::new("test", "model", params.parse().unwrap()), &spec).unwrap()
}

/// Two classes told apart by the images' mean.
fn data(n: i64) -> Dataset {
    let y = Tensor::arange(n, (Kind::Int64, Device::Cpu)).remainder(2);
    let shift = (y.to_kind(Kind::Float) - 0.5).reshape([n, 1, 1, 1]);
    let x = (TensorNoise::new(5).uniform(&[n, 1, 8, 8], Device::Cpu) - 0.5) + shift;
    Dataset { x, y }
}

fn job(model: &Arc<dyn Model>, params: ParamSet, width: Option<WidthBudget>, state: Option<ParamSet>) -> TrainJob {
    TrainJob {
        model: Arc::clone(model),
        params,
        grad_mask: None,
        frozen: Vec::new(),
        data: data(64),
        indices: Tensor::arange(64, (Kind::Int64, Device::Cpu)),
        rng: rng::stream(7, &[0]),
        noise: TensorNoise::new(11),
        version: 0,
        delay: 0.0,
        width,
        state,
        batch_size: None,
    }
}

fn trainer(masks: WidthMaskConfig) -> Sgd {
    Sgd::new(SgdConfig {
        optimizer: Optimizer::Adan,
        lr: 0.01,
        weight_decay: 0.02,
        batch_size: 16,
        epochs: 2,
        width_masks: Some(masks),
        ..SgdConfig::default()
    })
}

/// Every group of the model: heads learned, MLP neurons random.
fn budget(model: &dyn Model, ratio: f64, learn: bool) -> WidthBudget {
    let groups = &model.structure().groups;
    let (learned, random) = (0..groups.len()).partition(|&g| groups[g].name.ends_with("heads"));
    WidthBudget::new(ratio, learned, random, learn)
}

fn scores(model: &dyn Model, seed: u64) -> ParamSet {
    let groups = &model.structure().groups;
    let names = groups.iter().map(|g| score_name(&g.name)).collect();
    let tensors = groups
        .iter()
        .enumerate()
        .map(|(i, g)| TensorNoise::new(seed + i as u64).uniform(&[g.units], Device::Cpu))
        .collect();
    ParamSet::new(names, tensors).unwrap()
}

fn max_abs(t: &Tensor) -> f64 {
    t.abs().max().double_value(&[])
}

#[test]
fn applying_a_finalised_mask_trains_what_the_cut_sub_model_trains() {
    let model = vit();
    let structure = model.structure();
    let full = model.init(&mut rng::stream(3, &[0]));
    let budget = budget(model.as_ref(), 0.5, false);
    let state = scores(model.as_ref(), 40);
    let kept = kept_units(structure, &budget, Some(&state)).unwrap();
    let cut = structure.mask_from_units(&kept).unwrap();
    // SGD: an adaptive step would magnify the rounding of zeroed against cut matrix products.
    let sgd = Sgd::new(SgdConfig {
        momentum: 0.9,
        optimizer: Optimizer::Sgd,
        lr: 0.05,
        ..trainer(WidthMaskConfig::default()).config().clone()
    });
    let whole = sgd.train(job(&model, full.shallow_clone(), Some(budget), Some(state.deep_clone()))).unwrap();
    let Mask::Structured(_) = &cut else { panic!("a structured mask") };
    let alone = Sgd::new(SgdConfig { width_masks: None, ..sgd.config().clone() })
        .train(job(&model, cut.extract(&full), None, None))
        .unwrap();
    // The kept units moved as the cut sub-model's did; the dropped ones did not move at all.
    let mut moved = 0.0f64;
    for (got, want) in cut.extract(&whole.params).tensors().iter().zip(alone.params.tensors()) {
        assert!(max_abs(&(got - want)) < 1e-5, "kept units differ by {}", max_abs(&(got - want)));
    }
    let dense = cut.dense(&structure.shapes(), Device::Cpu);
    for ((after, before), keep) in whole.params.tensors().iter().zip(full.tensors()).zip(&dense) {
        let delta = after - before;
        assert_eq!(max_abs(&(&delta * (1.0 - keep))), 0.0, "a dropped unit moved");
        moved = moved.max(max_abs(&delta));
    }
    assert!(moved > 1e-3, "nothing trained");
    // Without a mask round the scores pass through as they came.
    let next = whole.state.expect("the scores are the client's state");
    for (a, b) in next.tensors().iter().zip(state.tensors()) {
        assert_eq!(max_abs(&(a - b)), 0.0);
    }
}

#[test]
fn a_mask_round_trains_the_scores_within_the_budget_and_keeps_them() {
    let model = vit();
    let structure = model.structure();
    let full = model.init(&mut rng::stream(3, &[0]));
    let sgd = trainer(WidthMaskConfig { epochs: 2, lr: 0.05, lambda: 1.0 });
    assert_eq!(sgd.width_mask_passes(64), 128.0);
    let budget = budget(model.as_ref(), 0.5, true);
    let out = sgd.train(job(&model, full.shallow_clone(), Some(budget.clone()), None)).unwrap();
    let state = out.state.expect("the scores are the client's state");
    let names: Vec<String> = structure.groups.iter().map(|g| score_name(&g.name)).collect();
    // Heads' scores start at logit(0.5) = 0 and train; the MLP's random ones stay as drawn.
    let mut trained = 0.0f64;
    for (name, t) in state.names().iter().zip(state.tensors()) {
        assert!(names.contains(name), "{name}");
        if name.ends_with("heads") {
            trained = trained.max(max_abs(t));
        }
    }
    assert!(trained > 1e-3, "the heads' scores did not move");
    // The mask the client trained under is the one its scores finalise to: outside it, zero delta.
    let kept = kept_units(structure, &WidthBudget { learn: false, ..budget }, Some(&state)).unwrap();
    let cut = structure.mask_from_units(&kept).unwrap();
    let dense = cut.dense(&structure.shapes(), Device::Cpu);
    let (mut kept_heads, mut all_heads) = (0, 0);
    for (g, units) in structure.groups.iter().zip(&kept) {
        if g.name.ends_with("heads") {
            kept_heads += units.as_ref().unwrap().len();
            all_heads += g.units as usize;
        }
    }
    assert!(kept_heads * 2 <= all_heads && kept_heads >= 2, "kept {kept_heads} of {all_heads} heads");
    for ((after, before), keep) in out.params.tensors().iter().zip(full.tensors()).zip(&dense) {
        assert_eq!(max_abs(&((after - before) * (1.0 - keep))), 0.0, "a dropped unit moved");
    }
}

#[test]
fn the_scores_drop_units_that_cannot_change_the_output_first() {
    let model = vit();
    let structure = model.structure();
    // A model that has learned the task, then loses half of each block's MLP neurons: their
    // weights in and out are zero, so gating them changes nothing.
    let plain = Sgd::new(SgdConfig {
        optimizer: Optimizer::Adam,
        lr: 0.01,
        batch_size: 16,
        epochs: 20,
        ..SgdConfig::default()
    });
    let trained = plain.train(job(&model, model.init(&mut rng::stream(3, &[0])), None, None)).unwrap().params;
    let dead: Vec<i64> = (0..8).map(|u| 2 * u + 1).collect();
    let mut tensors: Vec<Tensor> = trained.tensors().iter().map(Tensor::copy).collect();
    let mlp: Vec<usize> = (0..structure.groups.len()).filter(|&g| structure.groups[g].name.ends_with("mlp")).collect();
    for &g in &mlp {
        for m in &structure.groups[g].members {
            let _ = tensors[m.tensor].index_fill_(m.dim as i64, &Tensor::from_slice(&dead), 0.0);
        }
    }
    let wounded = ParamSet::new(trained.names().to_vec(), tensors).unwrap();
    let budget = WidthBudget::new(0.25, mlp.clone(), Vec::new(), true);
    let sgd = trainer(WidthMaskConfig { epochs: 5, lr: 0.05, lambda: 1.0 });
    let out = sgd.train(job(&model, wounded, Some(budget.clone()), None)).unwrap();
    let kept = kept_units(structure, &WidthBudget { learn: false, ..budget }, out.state.as_ref()).unwrap();
    let kept: Vec<i64> = mlp.iter().flat_map(|&g| kept[g].clone().unwrap()).collect();
    assert_eq!(kept.len(), 8, "a quarter of 32 neurons: {kept:?}");
    let dead_kept = kept.iter().filter(|u| *u % 2 == 1).count();
    assert!(dead_kept <= 1, "kept {dead_kept} dead neurons: {kept:?}");
}

#[test]
fn a_job_that_chooses_its_width_needs_the_trainers_width_masks() {
    let model = vit();
    let full = model.init(&mut rng::stream(3, &[0]));
    let plain = Sgd::new(SgdConfig { batch_size: 16, ..SgdConfig::default() });
    let budget = budget(model.as_ref(), 0.5, true);
    let err = plain.train(job(&model, full, Some(budget), None)).err().expect("refused").to_string();
    assert!(err.contains("[trainer] width_masks"), "{err}");
    // And the settings that cannot go with it name the key.
    let with_steps =
        SgdConfig { steps: Some(10), width_masks: Some(WidthMaskConfig::default()), ..SgdConfig::default() };
    assert_eq!(with_steps.validate().unwrap_err().key, "width_masks");
    let with_dyn = SgdConfig { dyn_alpha: 0.1, width_masks: Some(WidthMaskConfig::default()), ..SgdConfig::default() };
    assert_eq!(with_dyn.validate().unwrap_err().key, "width_masks");
}
