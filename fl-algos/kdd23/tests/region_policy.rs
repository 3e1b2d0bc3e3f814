//! The `region-partition` mask policy: coverage shares per level, the round schedule (full
//! round 0, forced non-cover rounds, MIX split, typep tables), the diagnostics of Figs. 3–4,
//! and masked local training that keeps masked weights at exactly 0.

mod common;

use std::sync::Arc;

use common::{fc1_share, global, kept_neurons, mask_error, round_masks, structure, structure_with_neurons};
use fl_algo_kdd23::{Granularity, Level, MixDraw, PartitionKind, RegionPolicy, RegionPolicyConfig};
use fl_core::rng::{self, TensorNoise};
use fl_core::tch::Tensor;
use fl_core::testing::{TinyLinear, tiny_dataset};
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{LocalTrainer, Mask, MaskPolicy, Model, ParamSet, TrainJob, Validate};

fn policy(cfg: RegionPolicyConfig) -> RegionPolicy {
    cfg.validate().unwrap();
    RegionPolicy::new(cfg)
}

#[test]
fn levels_cover_the_stated_shares_and_round_0_is_full() {
    let s = structure();
    let g = global(&s);
    for granularity in [Granularity::Element, Granularity::Neuron] {
        for (level, share) in [(Level::L, 0.5), (Level::S, 0.25), (Level::Full, 1.0)] {
            let mut p = policy(RegionPolicyConfig { level, granularity, ..Default::default() });
            let mut rng = rng::stream(1, &[0]);
            assert!(round_masks(&mut p, &s, &g, 0, 10, &mut rng).iter().all(|m| matches!(m, Mask::Full)));
            for m in round_masks(&mut p, &s, &g, 3, 10, &mut rng) {
                assert_eq!(fc1_share(&m), share, "{level:?} / {granularity:?}");
            }
        }
    }
}

#[test]
fn every_tenth_round_leaves_the_first_regions_uncovered() {
    let s = structure();
    let g = global(&s);
    let mut rng = rng::stream(1, &[0]);
    for (level, uncovered) in [(Level::L, 2.0), (Level::S, 3.0)] {
        let mut p = policy(RegionPolicyConfig { level, ..Default::default() });
        round_masks(&mut p, &s, &g, 1, 10, &mut rng);
        let masks = round_masks(&mut p, &s, &g, 10, 10, &mut rng);
        let first = match &masks[0] {
            Mask::Elementwise(ts) => ts[0].as_ref().unwrap().shallow_clone(),
            _ => panic!("masked round"),
        };
        for m in &masks {
            let Mask::Elementwise(ts) = m else { panic!("masked round") };
            assert!(ts[0].as_ref().unwrap().equal(&first), "{level:?}: every client trains the same regions");
        }
        let diag: Vec<(String, f64)> = p.diagnostics();
        let gamma: Vec<f64> = diag.iter().filter(|(k, _)| k.starts_with("gamma_region")).map(|(_, v)| *v).collect();
        let zeros = gamma.iter().filter(|&&x| x == 0.0).count() as f64;
        assert_eq!(zeros, uncovered, "{level:?}: Γ = {gamma:?}");
        assert_eq!(gamma.last(), Some(&10.0), "region 4 is always trained in a non-cover round");
    }
}

#[test]
fn mix_puts_half_the_clients_at_each_level() {
    let s = structure();
    let g = global(&s);
    let mut p = policy(RegionPolicyConfig { level: Level::Mix, ..Default::default() });
    let mut rng = rng::stream(2, &[0]);
    for round in 1..6 {
        let shares: Vec<f64> = round_masks(&mut p, &s, &g, round, 10, &mut rng).iter().map(fc1_share).collect();
        assert_eq!(shares.iter().filter(|&&x| x == 0.5).count(), 5, "round {round}: {shares:?}");
        assert_eq!(shares.iter().filter(|&&x| x == 0.25).count(), 5, "round {round}: {shares:?}");
    }
}

#[test]
fn code_coinflip_puts_half_at_l_with_the_codes_runs() {
    // Both draws put exactly 5 of 10 clients at L. Under the code's coin flips clients 0–4 are
    // all at L with probability 1/2⁵ = 1/32; under a uniform 5-subset with 1/C(10,5) = 1/252.
    let s = structure();
    let g = global(&s);
    let first_five_at_l = |mix_draw: MixDraw| {
        let mut p = policy(RegionPolicyConfig { level: Level::Mix, mix_draw, ..Default::default() });
        let mut rng = rng::stream(3, &[0]);
        let mut count = 0;
        for round in 1..=2000 {
            let shares: Vec<f64> = round_masks(&mut p, &s, &g, round, 10, &mut rng).iter().map(fc1_share).collect();
            assert_eq!(shares.iter().filter(|&&x| x == 0.5).count(), 5, "{mix_draw:?} round {round}: {shares:?}");
            count += usize::from(shares[..5].iter().all(|&x| x == 0.5));
        }
        count
    };
    let coinflip = first_five_at_l(MixDraw::CodeCoinflip);
    let subset = first_five_at_l(MixDraw::Subset);
    assert!((35..=95).contains(&coinflip), "expected about 2000/32 = 62, got {coinflip}");
    assert!(subset <= 20, "expected about 2000/252 = 8, got {subset}");
}

#[test]
fn the_fig3_table_trains_region_1_only() {
    // Fig. 3, Γ* = 10, S* = 1: every client has typep 12 = region 1.
    let s = structure();
    let g = global(&s);
    let mut p = policy(RegionPolicyConfig { level: Level::S, assignments: vec![vec![12; 10]], ..Default::default() });
    let mut rng = rng::stream(3, &[0]);
    round_masks(&mut p, &s, &g, 0, 10, &mut rng);
    round_masks(&mut p, &s, &g, 1, 10, &mut rng);
    let diag: std::collections::BTreeMap<String, f64> = p.diagnostics().into_iter().collect();
    let gamma: Vec<f64> = (1..=4).map(|i| diag[&format!("gamma_region{i}")]).collect();
    assert_eq!(gamma, vec![10.0, 0.0, 0.0, 0.0]);
    assert_eq!(diag["covered_regions"], 1.0);
    // Regions 2–4 were last trained in round 0: τ = 1 in round 1.
    assert_eq!(diag["tau"], 1.0);
    round_masks(&mut p, &s, &g, 2, 10, &mut rng);
    let diag: std::collections::BTreeMap<String, f64> = p.diagnostics().into_iter().collect();
    assert_eq!((diag["gamma_star"], diag["s_star"], diag["tau"]), (10.0, 1.0, 2.0));
}

#[test]
fn static_partitions_stay_and_per_round_partitions_move() {
    let s = structure();
    let g = global(&s);
    // One table: every client trains region 1 in every round, so masks differ only if the
    // partition does.
    let table = vec![vec![12; 2]];
    for (partition, same) in [(PartitionKind::StaticRandom, true), (PartitionKind::PerRoundRandom, false)] {
        let mut p = policy(RegionPolicyConfig { partition, assignments: table.clone(), ..Default::default() });
        let mut rng = rng::stream(4, &[0]);
        let a = round_masks(&mut p, &s, &g, 1, 2, &mut rng);
        let b = round_masks(&mut p, &s, &g, 2, 2, &mut rng);
        let (Mask::Elementwise(a), Mask::Elementwise(b)) = (&a[0], &b[0]) else { panic!("masked rounds") };
        assert_eq!(a[0].as_ref().unwrap().equal(b[0].as_ref().unwrap()), same, "{partition:?}");
    }
}

#[test]
fn an_unknown_tensor_is_an_error_listing_the_model_tensors() {
    let s = structure();
    let g = global(&s);
    let mut p = policy(RegionPolicyConfig { tensors: vec!["layer_input.weight".into()], ..Default::default() });
    let err = mask_error(&mut p, &s, &g);
    assert!(err.contains("`layer_input.weight`") && err.contains("fc1.weight, fc1.bias, fc2.weight"), "{err}");
}

#[test]
fn masked_local_training_keeps_masked_weights_at_zero() {
    let model: Arc<dyn Model> = Arc::new(TinyLinear::default());
    let s = model.structure().clone();
    let g = ParamSet::new(
        s.names(),
        vec![Tensor::from_slice(&[0.5f32, -0.4, 0.3, 0.2]).reshape([2, 2]), Tensor::from_slice(&[0.1f32, -0.1])],
    )
    .unwrap();
    let mut p = policy(RegionPolicyConfig { tensors: vec!["w".into()], level: Level::S, ..Default::default() });
    let mut rng = rng::stream(5, &[0]);
    let mask = round_masks(&mut p, &s, &g, 1, 1, &mut rng).remove(0);
    let Mask::Elementwise(ms) = &mask else { panic!("masked round") };
    let keep: Vec<f32> = Vec::try_from(&ms[0].as_ref().unwrap().flatten(0, -1)).unwrap();
    assert_eq!(keep.iter().sum::<f32>(), 1.0, "S keeps one of four elements");
    let start = mask.extract(&g);
    let data = tiny_dataset();
    let out = Sgd::new(SgdConfig { batch_size: 2, epochs: 3, momentum: 0.5, ..Default::default() })
        .train(TrainJob {
            model,
            params: start,
            grad_mask: Some(ms.iter().map(|m| m.as_ref().map(Tensor::shallow_clone)).collect()),
            frozen: Vec::new(),
            indices: Tensor::arange(6, fl_core::tch::kind::INT64_CPU),
            data,
            rng: rng::stream(5, &[1]),
            noise: TensorNoise::new(5),
            version: 0,
            delay: 0.0,
            width: None,
            state: None,
            batch_size: None,
        })
        .unwrap();
    let w: Vec<f32> = Vec::try_from(&out.params.tensors()[0].flatten(0, -1)).unwrap();
    for (wi, ki) in w.iter().zip(&keep) {
        if *ki == 0.0 {
            assert_eq!(*wi, 0.0, "a masked-out weight left 0: {w:?}");
        }
    }
    assert!(w.iter().zip(&keep).any(|(wi, ki)| *ki == 1.0 && *wi != 0.0), "the kept weight trained");
}

#[test]
fn ram_fed_regions_on_units_mask_whole_neurons_at_the_levels_share() {
    let s = structure_with_neurons();
    let g = global(&s);
    for (level, kept) in [(Level::L, 4), (Level::S, 2)] {
        let cfg =
            RegionPolicyConfig { level, granularity: Granularity::Unit, non_cover_every: 0, ..Default::default() };
        cfg.validate().unwrap();
        let mut p = RegionPolicy::new(cfg);
        let mut rng = rng::stream(12, &[0]);
        let masks = round_masks(&mut p, &s, &g, 1, 6, &mut rng);
        let kept_sets: Vec<Vec<bool>> = masks.iter().map(kept_neurons).collect();
        assert!(kept_sets.iter().all(|k| k.iter().filter(|&&x| x).count() == kept), "{level:?}: {kept_sets:?}");
        assert!(kept_sets.iter().any(|k| k != &kept_sets[0]), "clients draw their own regions");
    }
    let too_many = RegionPolicyConfig { regions: 9, granularity: Granularity::Unit, ..Default::default() };
    let err = mask_error(&mut RegionPolicy::new(too_many), &s, &g);
    assert!(err.to_string().contains("9 regions cannot split the units of `fc1`: it has 8"), "{err}");
}
