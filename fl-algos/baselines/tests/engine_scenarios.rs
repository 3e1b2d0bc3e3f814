//! Scripted scenarios of the virtual-clock engine with three clients of known durations.
//!
//! A 2→2 linear model costs 8 forward FLOPs per sample (4 multiply-adds), so one epoch over n
//! samples is 3·8·n = 24n training FLOPs; at 24 FLOP/s and near-infinite bandwidth a job lasts
//! exactly n virtual seconds. Clients hold 3, 1 and 2 samples: durations 3 s, 1 s and 2 s.

use std::sync::{Arc, Mutex};

use fl_algo_baselines::{
    AsyncConfig, AsyncMix, AsyncMixConfig, AsyncUpdates, Polynomial, WeightedMean, WeightedMeanConfig,
};
use fl_core::engine::{EvalConfig, RunLimits, Setup};
use fl_core::mask_policy::FullModel;
use fl_core::profile::{DevicesConfig, Quantity};
use fl_core::rng::Rng;
use fl_core::staleness::Constant;
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{
    AggregateCtx, Aggregator, ClientUpdate, Dataset, Mode, Model, ParamSet, Result, SchedCtx, Scheduler, Simulation,
    Structure, TensorSpec,
};

struct TinyLinear {
    structure: Structure,
}

impl TinyLinear {
    fn new() -> Self {
        let t = |name: &str, shape: Vec<i64>| TensorSpec { name: name.into(), shape };
        TinyLinear { structure: Structure { tensors: vec![t("w", vec![2, 2]), t("b", vec![2])], groups: vec![] } }
    }
}

impl Model for TinyLinear {
    fn structure(&self) -> &Structure {
        &self.structure
    }
    fn init(&self, _: &mut Rng) -> ParamSet {
        ParamSet::new(
            self.structure.names(),
            vec![Tensor::zeros([2, 2], (Kind::Float, Device::Cpu)), Tensor::zeros([2], (Kind::Float, Device::Cpu))],
        )
        .unwrap()
    }
    fn forward(&self, p: &[Tensor], x: &Tensor, _: &mut Mode) -> Tensor {
        x.linear(&p[0], Some(&p[1]))
    }
    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        vec![2.0 * (shapes[0][0] * shapes[0][1]) as f64, 0.0]
    }
}

fn setup(
    scheduler: Box<dyn Scheduler>,
    aggregator: Box<dyn Aggregator>,
    staleness: Box<dyn fl_core::StalenessFn>,
) -> Setup {
    let x = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 0.0, 0.0, -1.0, 2.0, 1.0]).reshape([6, 2]);
    let y = Tensor::from_slice(&[0i64, 1, 0, 1, 0, 1]);
    let fast = Quantity::Constant { value: 1e15 };
    Setup {
        model: Arc::new(TinyLinear::new()),
        trainer: Arc::new(Sgd::new(SgdConfig { batch_size: 8, ..Default::default() })),
        scheduler,
        aggregator,
        mask_policy: Box::new(FullModel),
        staleness,
        train: Dataset { x: x.shallow_clone(), y: y.shallow_clone() },
        test: Dataset { x, y },
        partition: vec![vec![0, 1, 2], vec![3], vec![4, 5]],
        devices: DevicesConfig {
            flops_per_s: Quantity::Constant { value: 24.0 },
            up_bytes_per_s: fast.clone(),
            down_bytes_per_s: fast,
            jitter: 0.0,
        },
        eval: EvalConfig::default(),
        limits: RunLimits::default(),
        seed: 7,
        device: Device::Cpu,
        workers: 2,
    }
}

/// Dispatches every client once and records arrivals.
struct Recorder {
    arrivals: Arc<Mutex<Vec<(usize, u64)>>>,
}

impl Scheduler for Recorder {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        for c in 0..ctx.num_clients() {
            ctx.dispatch(c)?;
        }
        Ok(())
    }
    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        self.arrivals.lock().unwrap().push((client, ctx.now()));
        if ctx.in_flight() == 0 {
            ctx.aggregate()?;
        }
        Ok(())
    }
}

#[test]
fn arrivals_are_processed_in_virtual_time_order() {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let scheduler = Box::new(Recorder { arrivals: Arc::clone(&arrivals) });
    let mut sim = Simulation::new(setup(
        scheduler,
        Box::new(WeightedMean::new(WeightedMeanConfig::default())),
        Box::new(Constant),
    ))
    .unwrap();
    let summary = sim.run(&mut ()).unwrap();
    assert_eq!(*arrivals.lock().unwrap(), vec![(1, 1_000_000), (2, 2_000_000), (0, 3_000_000)]);
    assert_eq!(summary.aggregations, 1);
    assert_eq!(summary.updates, 3);
    assert_eq!(summary.virtual_time_s, 3.0);
}

/// Wraps an aggregator and records (client, staleness in versions, virtual time) per update.
struct StalenessLog {
    inner: AsyncMix,
    log: Arc<Mutex<Vec<(usize, u64, u64)>>>,
}

impl Aggregator for StalenessLog {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        for (u, s) in updates.iter().zip(ctx.staleness) {
            self.log.lock().unwrap().push((u.client, s.versions, ctx.now / 1_000_000));
        }
        self.inner.aggregate(global, updates, ctx)
    }
}

#[test]
fn fedasync_staleness_counts_merges_since_dispatch() {
    // Every client trains in a loop (concurrency 3 of 3, so the only idle client after an
    // arrival is the one that arrived). Worked by hand, with arrivals at equal times taken in
    // the order they were scheduled:
    //   t=1 c1 (v0→) s0 | t=2 c2 s1, c1 s1 | t=3 c0 s3, c1 s1 | t=4 c2 s3, c1 s1 | t=5 c1 s0
    //   t=6 c0 (dispatched at v4, now v8) s4, c2 (v6, now v9) s3, c1 (v8, now v10) s2.
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduler = Box::new(AsyncUpdates::new(AsyncConfig { buffer: 1, concurrency: None, aggregations: 11 }));
    let aggregator = Box::new(StalenessLog { inner: AsyncMix::new(AsyncMixConfig::default()), log: Arc::clone(&log) });
    let mut sim = Simulation::new(setup(scheduler, aggregator, Box::new(Polynomial::default()))).unwrap();
    let summary = sim.run(&mut ()).unwrap();
    let want = vec![
        (1, 0, 1),
        (2, 1, 2),
        (1, 1, 2),
        (0, 3, 3),
        (1, 1, 3),
        (2, 3, 4),
        (1, 1, 4),
        (1, 0, 5),
        (0, 4, 6),
        (2, 3, 6),
        (1, 2, 6),
    ];
    assert_eq!(*log.lock().unwrap(), want);
    assert_eq!(summary.aggregations, 11);
    let histogram: Vec<(u64, u64)> = summary.staleness_histogram.into_iter().collect();
    assert_eq!(histogram, vec![(0, 2), (1, 4), (2, 1), (3, 3), (4, 1)]);
}
