//! A scripted asynchronous scenario on the engine: a fast and a slow client (capabilities 10
//! and 1) train fragments of a small MLP under Gre-RAA. The slow client's arrival is mixed
//! into its fragment with the staleness weight of the merges made since its dispatch, and
//! nothing outside its fragment moves.

use std::sync::{Arc, Mutex};

use fl_algo_baselines::{AsyncMix, AsyncMixConfig, Polynomial};
use fl_algo_fedraa::{AsyncFragments, AsyncFragmentsConfig, NeuronFragments, NeuronFragmentsConfig};
use fl_core::engine::{EvalConfig, RunConfig, Setup};
use fl_core::profile::{DevicesConfig, Quantity};
use fl_core::tch::{Device, Tensor};
use fl_core::testing::tiny_dataset;
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, DataSpec, ParamSet, Result, Simulation};
use fl_models::{Mlp, MlpConfig};

/// One merge as the aggregator saw it.
struct Merge {
    client: usize,
    versions: u64,
    weight: f64,
    before: ParamSet,
    new: ParamSet,
    mask: Vec<Tensor>,
    after: ParamSet,
}

struct Recording {
    inner: AsyncMix,
    merges: Arc<Mutex<Vec<Merge>>>,
}

impl Aggregator for Recording {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let after = self.inner.aggregate(global, updates, ctx)?;
        let u = &updates[0];
        assert!(u.choice.is_some(), "an arrival carries the fragment it was dispatched with");
        self.merges.lock().unwrap().push(Merge {
            client: u.client,
            versions: ctx.staleness[0].versions,
            weight: ctx.staleness[0].weight,
            before: global.shallow_clone(),
            new: u.new_params(),
            mask: u.mask.dense(&global.shapes(), Device::Cpu),
            after: after.shallow_clone(),
        });
        Ok(after)
    }
}

const ALPHA: f64 = 0.5;

#[test]
fn a_slow_arrival_is_mixed_with_the_weight_of_the_merges_since_its_dispatch() {
    let merges = Arc::new(Mutex::new(Vec::new()));
    let spec = DataSpec { input_shape: vec![2], classes: 2, vocab_size: None };
    let data = tiny_dataset();
    let setup = Setup {
        model: Arc::new(Mlp::new(MlpConfig { hidden: vec![10], ..Default::default() }, &spec).unwrap()),
        trainer: Arc::new(Sgd::new(SgdConfig { lr: 0.1, batch_size: 2, ..Default::default() })),
        scheduler: Box::new(AsyncFragments::new(AsyncFragmentsConfig { aggregations: 12, ..Default::default() })),
        aggregator: Box::new(Recording {
            inner: AsyncMix::new(AsyncMixConfig { alpha: ALPHA, ..Default::default() }),
            merges: Arc::clone(&merges),
        }),
        mask_policy: Box::new(NeuronFragments::new(NeuronFragmentsConfig { parts: 2, ..Default::default() }).unwrap()),
        staleness: Box::new(Polynomial { a: 0.5 }),
        train: data.shallow_clone(),
        test: data,
        partition: vec![vec![0, 1, 2], vec![3, 4, 5]],
        devices: DevicesConfig {
            flops_per_s: Quantity::Quota { values: vec![1e3, 1e4], shares: vec![0.5, 0.5] },
            up_bytes_per_s: Quantity::Constant { value: f64::INFINITY },
            down_bytes_per_s: Quantity::Constant { value: f64::INFINITY },
            jitter: 0.0,
            ..Default::default()
        },
        eval: EvalConfig::default(),
        run: RunConfig::default(),
        seed: 3,
        device: Device::Cpu,
        workers: 2,
    };
    let summary = Simulation::new(setup).unwrap().run(&mut ()).unwrap();
    assert_eq!(summary.aggregations, 12);
    let merges = merges.lock().unwrap();
    let fast = merges[0].client;
    let (i, slow) = merges.iter().enumerate().find(|(_, m)| m.client != fast).expect("the slow client arrives");
    // Both started at version 0; every merge before the slow arrival was the fast client's.
    assert!(i >= 2, "the slow client should arrive after several fast merges, came {i}th");
    assert_eq!(slow.versions, i as u64);
    assert!((slow.weight - (1.0 + i as f64).powf(-0.5)).abs() < 1e-12);
    let rate = ALPHA * slow.weight;
    for (((before, new), after), mask) in
        slow.before.tensors().iter().zip(slow.new.tensors()).zip(slow.after.tensors()).zip(&slow.mask)
    {
        let inside = mask.eq(1.0);
        let want = before + (new - before) * rate;
        let err = (after - want).abs().masked_select(&inside).max().double_value(&[]);
        assert!(err < 1e-6, "fragment mixed with rate {rate}: error {err}");
        let outside = mask.eq(0.0);
        assert!(after.masked_select(&outside).equal(&before.masked_select(&outside)));
    }
    // The fast client did most of the work, and both clients' time is accounted for.
    assert!(summary.clients[fast].jobs > summary.clients[slow.client].jobs);
    assert!(summary.clients.iter().all(|c| c.busy_s > 0.0));
}
