//! Fragments of the paper's MLP: disjoint, covering the partitioned tensors exactly once, shared
//! tensors in every fragment; training one fragment and merging it leaves every other
//! parameter bit-identical.

use fl_algo_baselines::{AsyncMix, AsyncMixConfig};
use fl_algo_fedraa::{FragmentMode, NeuronFragments, NeuronFragmentsConfig};
use fl_core::engine::BYTES_PER_PARAM;
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{AggregateCtx, Aggregator, DataSpec, Model, ParamSet, UpdateStaleness, rng};
use fl_models::{Mlp, MlpConfig};

fn mnist_mlp() -> Mlp {
    let spec = DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None };
    Mlp::new(MlpConfig { hidden: vec![200], ..Default::default() }, &spec).unwrap()
}

fn built(cfg: NeuronFragmentsConfig, model: &Mlp, global: &ParamSet) -> NeuronFragments {
    let mut f = NeuronFragments::new(cfg).unwrap();
    f.build(model.structure(), global).unwrap();
    f
}

/// Per tensor, how many fragments cover each element.
fn coverage(f: &NeuronFragments, shapes: &[Vec<i64>]) -> Vec<Tensor> {
    let mut sum: Vec<Tensor> = shapes.iter().map(|s| Tensor::zeros(&s[..], (Kind::Float, Device::Cpu))).collect();
    for m in f.fragments().unwrap() {
        for (s, d) in sum.iter_mut().zip(m.dense(shapes, Device::Cpu)) {
            *s = &*s + d;
        }
    }
    sum
}

fn all_equal(t: &Tensor, v: f64) -> bool {
    t.eq(v).all().int64_value(&[]) == 1
}

#[test]
fn neuron_fragments_partition_the_hidden_layer_and_share_the_rest() {
    let model = mnist_mlp();
    let global = model.init(&mut rng::stream(1, &[0]));
    let shapes = model.structure().shapes();
    for parts in 2..=5 {
        let f = built(NeuronFragmentsConfig { parts, ..Default::default() }, &model, &global);
        assert_eq!(f.shared_tensors().unwrap(), ["fc2.bias"]);
        let cover = coverage(&f, &shapes);
        // fc1.weight, fc1.bias, fc2.weight: exactly one fragment per element; fc2.bias: all.
        for (t, c) in cover[..3].iter().enumerate() {
            assert!(all_equal(c, 1.0), "M = {parts}, tensor {t}");
        }
        assert!(all_equal(&cover[3], parts as f64), "M = {parts}: fc2.bias");
        // MNIST H = 200, M = 4 → 15,900 / 31,800 / 47,700 / 63,600 parameters plus b2.
        if parts == 4 {
            let sizes: Vec<i64> = f.fragments().unwrap().iter().map(|m| m.kept_params(&shapes) - 10).collect();
            assert_eq!(sizes, [15_900, 31_800, 47_700, 63_600]);
            assert_eq!(f.fragments().unwrap()[0].kept_params(&shapes) as f64 * BYTES_PER_PARAM, 15_910.0 * 4.0);
        }
    }
}

#[test]
fn elementwise_fragments_split_the_output_layer_only() {
    let model = mnist_mlp();
    let global = model.init(&mut rng::stream(1, &[0]));
    let shapes = model.structure().shapes();
    let cfg = NeuronFragmentsConfig { mode: FragmentMode::RepoElementwise, ..Default::default() };
    let f = built(cfg, &model, &global);
    assert_eq!(f.shared_tensors().unwrap(), ["fc1.weight", "fc1.bias", "fc2.bias"]);
    let cover = coverage(&f, &shapes);
    assert!(all_equal(&cover[2], 1.0));
    for t in [0, 1, 3] {
        assert!(all_equal(&cover[t], 4.0));
    }
    // 2000 elements in 10/20/30/40%.
    let kept: Vec<i64> = f.fragments().unwrap().iter().map(|m| m.kept_per_tensor(&shapes)[2]).collect();
    assert_eq!(kept, [200, 400, 600, 800]);
}

#[test]
fn merging_a_trained_fragment_leaves_every_other_parameter_bit_identical() {
    let model = mnist_mlp();
    let global = model.init(&mut rng::stream(1, &[0]));
    let shapes = model.structure().shapes();
    let f = built(NeuronFragmentsConfig::default(), &model, &global);
    let mask = f.fragments().unwrap()[2].shallow_clone();
    // "Train" the sliced-out sub-network: a physically smaller model, moved everywhere.
    let sub = mask.extract(&global);
    assert_eq!(sub.shapes(), vec![vec![60, 784], vec![60], vec![10, 60], vec![10]]);
    let trained = sub.map(|t| t + 0.25);
    let delta = mask.scatter(&trained.sub(&sub), &shapes);
    let update = fl_core::testing::client_update(global.shallow_clone(), delta, mask, 6000);
    let staleness = [UpdateStaleness { versions: 0, seconds: 0.0, weight: 1.0 }];
    let ctx =
        AggregateCtx { version: 0, num_clients: 10, total_samples: 0, now: 0, staleness: &staleness, structure: None };
    let mut mix = AsyncMix::new(AsyncMixConfig { alpha: 0.5, ..Default::default() });
    let next = mix.aggregate(&global, &[update], &ctx).unwrap();
    let dense = f.fragments().unwrap()[2].dense(&shapes, Device::Cpu);
    for ((old, new), m) in global.tensors().iter().zip(next.tensors()).zip(&dense) {
        let outside = m.eq(0.0);
        assert!(old.masked_select(&outside).equal(&new.masked_select(&outside)), "an untrained parameter moved");
        let moved = (new - old).masked_select(&m.eq(1.0));
        assert!(all_equal(&(moved - 0.125).abs().gt(1e-6), 0.0), "the fragment moves by α · 0.25");
    }
}
