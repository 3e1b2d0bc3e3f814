//! The two pricings of a fragment job on the engine. Under `compute` a job pays for what it
//! computes: a fragment of the output layer's weights (the Fed-RAA code's fragments) still
//! trains the whole hidden layer, so it costs most of a full job. Under `mask-share` (the
//! code's `ratio_j / cmp_i`) it pays a full job's price times its fragment's share.

use std::sync::Arc;

use fl_algo_baselines::{AsyncMix, AsyncMixConfig, Polynomial};
use fl_algo_fedraa::{AsyncFragments, AsyncFragmentsConfig, FragmentMode, NeuronFragments, NeuronFragmentsConfig};
use fl_core::engine::{EvalConfig, RunConfig, Setup};
use fl_core::profile::{DevicesConfig, Pricing, Quantity};
use fl_core::tch::Device;
use fl_core::testing::tiny_dataset;
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{DataSpec, MaskPolicy, Simulation};
use fl_models::{Mlp, MlpConfig};

/// Mean virtual seconds per job over both clients, after 8 merges.
fn seconds_per_job(mask_policy: Box<dyn MaskPolicy>, pricing: Pricing) -> f64 {
    let spec = DataSpec { input_shape: vec![2], classes: 2, vocab_size: None };
    let data = tiny_dataset();
    let setup = Setup {
        // fc1: 10 × 2 weights, fc2: 2 × 10: the output layer holds half the weights.
        model: Arc::new(Mlp::new(MlpConfig { hidden: vec![10], ..Default::default() }, &spec).unwrap()),
        trainer: Arc::new(Sgd::new(SgdConfig { lr: 0.1, batch_size: 2, ..Default::default() })),
        scheduler: Box::new(AsyncFragments::new(AsyncFragmentsConfig { aggregations: 8, ..Default::default() })),
        aggregator: Box::new(AsyncMix::new(AsyncMixConfig::default())),
        mask_policy,
        staleness: Box::new(Polynomial { a: 0.5 }),
        train: data.shallow_clone(),
        test: data,
        partition: vec![vec![0, 1, 2], vec![3, 4, 5]],
        devices: DevicesConfig {
            flops_per_s: Quantity::Constant { value: 1e3 },
            up_bytes_per_s: Quantity::Constant { value: f64::INFINITY },
            down_bytes_per_s: Quantity::Constant { value: f64::INFINITY },
            jitter: 0.0,
            pricing,
            session_s: None,
            memory_bytes: None,
            batch_size: None,
        },
        eval: EvalConfig::default(),
        run: RunConfig::default(),
        seed: 3,
        device: Device::Cpu,
        workers: 1,
    };
    let summary = Simulation::new(setup).unwrap().run(&mut ()).unwrap();
    let (busy, jobs) = summary.clients.iter().fold((0.0, 0), |(b, j), c| (b + c.busy_s, j + c.jobs));
    busy / jobs as f64
}

/// The output layer's weights split elementwise into fragments of `ratios`.
fn fragments(ratios: &[f64]) -> Box<dyn MaskPolicy> {
    let cfg = NeuronFragmentsConfig {
        parts: ratios.len(),
        ratios: ratios.to_vec(),
        mode: FragmentMode::RepoElementwise,
        ..Default::default()
    };
    Box::new(NeuronFragments::new(cfg).unwrap())
}

#[test]
fn a_fragment_job_pays_its_compute_or_its_share_of_a_full_job() {
    // One fragment of the whole layer: a full job.
    let full = seconds_per_job(fragments(&[1.0]), Pricing::Compute);
    assert_eq!(seconds_per_job(fragments(&[1.0]), Pricing::MaskShare), full, "a full job has share 1");
    let by_share = seconds_per_job(fragments(&[0.4, 0.6]), Pricing::MaskShare) / full;
    assert!((0.4 - 1e-9..=0.6 + 1e-9).contains(&by_share), "priced at the fragments' shares 0.4 and 0.6: {by_share}");
    let by_compute = seconds_per_job(fragments(&[0.4, 0.6]), Pricing::Compute) / full;
    assert!(by_compute > 0.6 + 1e-9 && by_compute < 1.0, "the hidden layer is trained whole: {by_compute}");
}
