//! The masks of the paper's baselines (§6.1.3; how they are masked it does not say): SplitFL
//! trains one shared region pair, IST gives each client its own disjoint tenth, PruneFL trains
//! the largest weights (nested masks, identical within a level) or the largest last updates;
//! `by-capability` levels follow the clients' devices.

mod common;

use common::{
    fc1_share, global, kept_neurons, mask_error, round_masks, round_masks_on, structure, structure_with_neurons,
};
use fl_algo_kdd23::{
    Granularity, Importance, Level, PartitionKind, RegionChoice, RegionPolicy, RegionPolicyConfig, TopMagnitude,
    TopMagnitudeConfig,
};
use fl_core::rng;
use fl_core::tch::{Kind, Tensor};
use fl_core::{Mask, ParamSet, Validate};

/// The `fc1.weight` mask of a masked round.
fn fc1(m: &Mask) -> Tensor {
    match m {
        Mask::Elementwise(ts) => ts[0].as_ref().expect("fc1.weight is maskable").shallow_clone(),
        _ => panic!("expected an elementwise mask, got {m:?}"),
    }
}

#[test]
fn splitfl_gives_every_client_the_same_pair_and_redraws_it() {
    let s = structure();
    let g = global(&s);
    let cfg = RegionPolicyConfig { choice: RegionChoice::Shared, non_cover_every: 0, ..Default::default() };
    cfg.validate().unwrap();
    let mut p = RegionPolicy::new(cfg);
    let mut rng = rng::stream(7, &[0]);
    assert!(round_masks(&mut p, &s, &g, 0, 10, &mut rng).iter().all(|m| matches!(m, Mask::Full)));
    let mut pairs = Vec::new();
    for round in 1..9 {
        let masks = round_masks(&mut p, &s, &g, round, 10, &mut rng);
        let first = fc1(&masks[0]);
        assert!(masks.iter().all(|m| fc1(m).equal(&first)), "round {round}: one structure for all");
        assert_eq!(fc1_share(&masks[0]), 0.5);
        pairs.push(Vec::<f32>::try_from(&first.flatten(0, -1)).unwrap());
    }
    assert!(pairs.windows(2).any(|w| w[0] != w[1]), "the pair is redrawn across rounds");
}

#[test]
fn shared_choice_rejects_mix() {
    let cfg = RegionPolicyConfig { choice: RegionChoice::Shared, level: Level::Mix, ..Default::default() };
    assert_eq!(cfg.validate().unwrap_err().key, "choice");
}

#[test]
fn ist_splits_the_maskable_weights_into_disjoint_tenths_covering_each_once() {
    let s = structure();
    let g = global(&s);
    let cfg = RegionPolicyConfig {
        choice: RegionChoice::Own,
        regions: 10,
        partition: PartitionKind::PerRoundRandom,
        non_cover_every: 0,
        ..Default::default()
    };
    cfg.validate().unwrap();
    let mut p = RegionPolicy::new(cfg);
    let mut rng = rng::stream(8, &[0]);
    round_masks(&mut p, &s, &g, 0, 10, &mut rng);
    let mut previous: Option<Tensor> = None;
    for round in 1..4 {
        let masks = round_masks(&mut p, &s, &g, round, 10, &mut rng);
        let cover = masks.iter().map(fc1).fold(Tensor::zeros([8, 10], fl_core::tch::kind::FLOAT_CPU), |a, m| a + m);
        assert!(cover.eq(1.0).all().int64_value(&[]) == 1, "round {round}: every weight trained by exactly one client");
        for m in &masks {
            assert_eq!(fc1_share(m), 0.1);
        }
        if let Some(prev) = &previous {
            assert!(!prev.equal(&fc1(&masks[0])), "the groups are redrawn every round");
        }
        previous = Some(fc1(&masks[0]));
    }
}

fn prune(level: Level, importance: Importance) -> TopMagnitude {
    let cfg = TopMagnitudeConfig { level, importance, ..Default::default() };
    cfg.validate().unwrap();
    TopMagnitude::new(cfg)
}

/// fc1.weight = 1, 2, …, 80 with alternating signs, so |w| ranks the entries by index.
fn ramp() -> ParamSet {
    let s = structure();
    let signs = Tensor::from_slice(&[1.0f32, -1.0]).repeat([40]);
    let w = (Tensor::arange_start(1, 81, fl_core::tch::kind::FLOAT_CPU) * signs).reshape([8, 10]);
    let mut tensors: Vec<Tensor> = global(&s).tensors().iter().map(Tensor::shallow_clone).collect();
    tensors[0] = w;
    ParamSet::new(s.names(), tensors).unwrap()
}

#[test]
fn prunefl_trains_the_largest_weights_nested_and_identical_within_a_level() {
    let s = structure();
    let g = ramp();
    let mut rng = rng::stream(9, &[0]);
    for (level, kept_from) in [(Level::L, 41.0), (Level::S, 61.0)] {
        let mut p = prune(level, Importance::Magnitude);
        assert!(round_masks(&mut p, &s, &g, 0, 4, &mut rng).iter().all(|m| matches!(m, Mask::Full)));
        let masks = round_masks(&mut p, &s, &g, 1, 4, &mut rng);
        let expected = g.tensors()[0].abs().ge(kept_from).to_kind(Kind::Float);
        for m in &masks {
            assert!(fc1(m).equal(&expected), "{level:?}: the entries with |w| ≥ {kept_from}");
        }
    }
    let mut mix = prune(Level::Mix, Importance::Magnitude);
    let masks = round_masks(&mut mix, &s, &g, 1, 10, &mut rng);
    let shares: Vec<f64> = masks.iter().map(fc1_share).collect();
    assert_eq!(shares.iter().filter(|&&x| x == 0.5).count(), 5, "{shares:?}");
    let s_mask = masks.iter().find(|m| fc1_share(m) == 0.25).map(fc1).unwrap();
    let l_mask = masks.iter().find(|m| fc1_share(m) == 0.5).map(fc1).unwrap();
    let outside: Tensor = s_mask * (1.0 - l_mask);
    assert_eq!(outside.sum(Kind::Float).double_value(&[]), 0.0, "the S mask lies inside the L mask");
}

#[test]
fn prunefl_grad_sq_ranks_by_the_last_update() {
    let s = structure();
    let g0 = ramp();
    let mut p = prune(Level::S, Importance::GradSq);
    let mut rng = rng::stream(10, &[0]);
    // Round 1 has no previous model: magnitude.
    let first = fc1(&round_masks(&mut p, &s, &g0, 1, 2, &mut rng)[0]);
    assert!(first.equal(&g0.tensors()[0].abs().ge(61.0).to_kind(Kind::Float)));
    // Round 2: the update is largest on the first 20 entries.
    let bump = Tensor::arange(80, fl_core::tch::kind::FLOAT_CPU).lt(20).to_kind(Kind::Float).reshape([8, 10]);
    let mut tensors: Vec<Tensor> = g0.tensors().iter().map(Tensor::shallow_clone).collect();
    tensors[0] = &tensors[0] + bump.shallow_clone() * 3.0;
    let g1 = ParamSet::new(s.names(), tensors).unwrap();
    let second = fc1(&round_masks(&mut p, &s, &g1, 2, 2, &mut rng)[0]);
    assert!(second.equal(&bump), "the 20 entries that moved");
}

#[test]
fn by_capability_puts_the_strong_clients_at_l_in_every_round() {
    let s = structure();
    let g = ramp();
    let flops = [1e9, 3e9, 1e9, 3e9, 3e9, 1e9];
    // At least half the fastest (3e9): the 3e9 clients at L (half of fc1), the others at S.
    let expected = [0.25, 0.5, 0.25, 0.5, 0.5, 0.25];
    let region = RegionPolicyConfig { level: Level::ByCapability, ..Default::default() };
    region.validate().unwrap();
    let prune = TopMagnitudeConfig { level: Level::ByCapability, ..Default::default() };
    prune.validate().unwrap();
    let mut policies: Vec<Box<dyn fl_core::MaskPolicy>> =
        vec![Box::new(RegionPolicy::new(region)), Box::new(TopMagnitude::new(prune))];
    let mut rng = rng::stream(11, &[0]);
    for p in &mut policies {
        assert!(round_masks_on(p.as_mut(), &s, &g, 0, &flops, &mut rng).iter().all(|m| matches!(m, Mask::Full)));
        for round in 1..4 {
            let shares: Vec<f64> =
                round_masks_on(p.as_mut(), &s, &g, round, &flops, &mut rng).iter().map(fc1_share).collect();
            assert_eq!(shares, expected, "round {round}");
        }
    }
}

#[test]
fn by_capability_needs_a_share_of_the_fastest() {
    let cfg = TopMagnitudeConfig { level: Level::ByCapability, l_min_of_fastest: 1.5, ..Default::default() };
    assert_eq!(cfg.validate().unwrap_err().key, "l_min_of_fastest");
}

#[test]
fn prunefl_on_units_keeps_the_neurons_with_the_largest_summed_magnitude() {
    // Neuron n's summed |w| over its fc1 row (10 entries), bias and fc2 column (2 entries):
    // rows of n + 1, a bias of 100 for neuron 0 and an fc2 column of 50 for neuron 1.
    let s = structure_with_neurons();
    let rows = Tensor::arange(8, fl_core::tch::kind::FLOAT_CPU).unsqueeze(1).expand([8, 10], false) + 1.0;
    let bias = Tensor::from_slice(&[100f32, 0., 0., 0., 0., 0., 0., 0.]);
    let fc2 = Tensor::from_slice(&[0f32, 50., 0., 0., 0., 0., 0., 0.]).unsqueeze(0).expand([2, 8], false).contiguous();
    let g = ParamSet::new(s.names(), vec![rows.contiguous(), bias, fc2]).unwrap();
    // Sums: 110, 102, 30, 40, 50, 60, 70, 80.
    let cfg = TopMagnitudeConfig { level: Level::S, granularity: Granularity::Unit, ..Default::default() };
    cfg.validate().unwrap();
    let mut p = TopMagnitude::new(cfg);
    let mut rng = rng::stream(11, &[0]);
    let masks = round_masks(&mut p, &s, &g, 1, 3, &mut rng);
    for m in &masks {
        assert_eq!(kept_neurons(m), vec![true, true, false, false, false, false, false, false], "S: the top quarter");
    }
    let bad = TopMagnitudeConfig { granularity: Granularity::Neuron, ..Default::default() };
    assert!(bad.validate().unwrap_err().to_string().contains("granularity"));
    let mut no_groups = TopMagnitude::new(TopMagnitudeConfig { granularity: Granularity::Unit, ..Default::default() });
    let plain = structure();
    let err = mask_error(&mut no_groups, &plain, &global(&plain));
    assert!(err.to_string().contains("unit groups"), "{err}");
}
