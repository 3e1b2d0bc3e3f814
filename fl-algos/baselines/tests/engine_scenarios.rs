//! Scripted scenarios of the virtual-clock engine with clients of known durations.
//!
//! `TinyLinear` costs 24n training FLOPs for one epoch over n samples; at 24 FLOP/s and
//! near-infinite bandwidth a job lasts exactly n virtual seconds. Clients hold 3, 1 and 2
//! samples: durations 3 s, 1 s and 2 s. The baseline schedulers (`sync-rounds`, `async` with a
//! buffer) are run through such scenarios and their every step checked against a timeline
//! worked by hand.

use std::sync::{Arc, Mutex};

use fl_algo_baselines::{
    AsyncConfig, AsyncMix, AsyncMixConfig, AsyncUpdates, BufferedMean, BufferedMeanConfig, InverseSqrt, Polynomial,
    SyncRounds, SyncRoundsConfig, WeightedMean, WeightedMeanConfig,
};
use fl_core::engine::{EvalConfig, EvalRecord, RunConfig, Setup};
use fl_core::profile::{DevicesConfig, Quantity};
use fl_core::split::SplitConfig;
use fl_core::staleness::Constant;
use fl_core::testing::tiny_setup;
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, ParamSet, Result, SchedCtx, Scheduler, Simulation, Summary};

fn setup(
    scheduler: Box<dyn Scheduler>,
    aggregator: Box<dyn Aggregator>,
    staleness: Box<dyn fl_core::StalenessFn>,
) -> Setup {
    with_clients(scheduler, aggregator, staleness, vec![vec![0, 1, 2], vec![3], vec![4, 5]], 1e15)
}

/// `partition` fixes each client's compute time (one second per sample); the 24-byte model
/// downloads in 24 / `down_bytes_per_s` seconds.
fn with_clients(
    scheduler: Box<dyn Scheduler>,
    aggregator: Box<dyn Aggregator>,
    staleness: Box<dyn fl_core::StalenessFn>,
    partition: Vec<Vec<i64>>,
    down_bytes_per_s: f64,
) -> Setup {
    let trainer = Arc::new(Sgd::new(SgdConfig { batch_size: 8, ..Default::default() }));
    let base = tiny_setup(trainer, scheduler, aggregator);
    Setup {
        staleness,
        partition,
        devices: DevicesConfig {
            down_bytes_per_s: Quantity::Constant { value: down_bytes_per_s },
            ..base.devices.clone()
        },
        workers: 2,
        ..base
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
    let scheduler = Box::new(AsyncUpdates::new(AsyncConfig {
        buffer: 1,
        concurrency: None,
        aggregations: 11,
        ..AsyncConfig::default()
    }));
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

/// Client 0 pulls halfway through its work; client 1 only trains. Every arrival is merged.
struct PullScenario;

impl Scheduler for PullScenario {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        ctx.dispatch_with_pull(0, 0.5)?;
        ctx.dispatch(1)
    }
    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        ctx.aggregate()
    }
}

/// (client, pulled version, arrival second) of one update.
type PullEntry = (usize, Option<u64>, f64);

/// Records a [`PullEntry`] per update.
struct PullLog {
    inner: WeightedMean,
    log: Arc<Mutex<Vec<PullEntry>>>,
}

impl Aggregator for PullLog {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        for u in updates {
            self.log.lock().unwrap().push((u.client, u.pulled_version, u.arrived_at as f64 / 1e6));
        }
        self.inner.aggregate(global, updates, ctx)
    }
}

fn pull_run(partition: Vec<Vec<i64>>) -> (Vec<PullEntry>, Vec<EvalRecord>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let aggregator =
        Box::new(PullLog { inner: WeightedMean::new(WeightedMeanConfig::default()), log: Arc::clone(&log) });
    // 24 bytes at 48 B/s: every download takes 0.5 s.
    let mut sim =
        Simulation::new(with_clients(Box::new(PullScenario), aggregator, Box::new(Constant), partition, 48.0)).unwrap();
    let mut records: Vec<EvalRecord> = Vec::new();
    sim.run(&mut records).unwrap();
    let log = log.lock().unwrap().clone();
    (log, records)
}

#[test]
fn a_pull_receives_the_version_current_at_request_time_and_pays_a_download() {
    // Client 1 (1 s of work) arrives at 0.5 + 1 = 1.5 s and makes version 1. Client 0 (3 s)
    // asks at 0.5 + 1.5 = 2.0 s, gets version 1 after a 0.5 s download, resumes at 2.5 s and
    // arrives at 2.5 + 1.5 = 4.0 s. Three downloads of 24 bytes in all.
    let (log, records) = pull_run(vec![vec![0, 1, 2], vec![3]]);
    assert_eq!(log, vec![(1, None, 1.5), (0, Some(1), 4.0)]);
    assert_eq!(records.last().unwrap().bytes_down, 72.0);
}

#[test]
fn a_pull_with_nothing_newer_costs_nothing() {
    // Client 1 now needs 2 s and arrives at 2.5 s; at client 0's request (2.0 s) the global
    // model is still its own version 0, so it goes on at once and arrives at 3.5 s.
    let (log, records) = pull_run(vec![vec![0, 1, 2], vec![3, 4]]);
    assert_eq!(log, vec![(1, None, 2.5), (0, None, 3.5)]);
    assert_eq!(records.last().unwrap().bytes_down, 48.0);
}

/// Waits for a timer at 2.5 s, then dispatches client 1 (1 s of work) and merges it.
struct TimerScenario {
    fired: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Scheduler for TimerScenario {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        ctx.set_timer(2_500_000, 7);
        Ok(())
    }
    fn on_timer(&mut self, ctx: &mut SchedCtx, tag: u64) -> Result<()> {
        self.fired.lock().unwrap().push((tag, ctx.now()));
        ctx.dispatch(1)
    }
    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        ctx.aggregate()?;
        ctx.stop();
        Ok(())
    }
}

#[test]
fn timers_fire_at_their_virtual_time_and_evaluations_follow_the_virtual_cadence() {
    let fired = Arc::new(Mutex::new(Vec::new()));
    let scheduler = Box::new(TimerScenario { fired: Arc::clone(&fired) });
    let mut s = setup(scheduler, Box::new(WeightedMean::new(WeightedMeanConfig::default())), Box::new(Constant));
    s.eval = EvalConfig { every_aggregations: None, every_virtual_s: Some(1.0), batch_size: 4, ..Default::default() };
    let mut records: Vec<EvalRecord> = Vec::new();
    let summary = Simulation::new(s).unwrap().run(&mut records).unwrap();
    assert_eq!(*fired.lock().unwrap(), vec![(7, 2_500_000)]);
    // Evaluations at 0 (start), 1, 2, 3 s, then the final one at the arrival (3.5 s, version 1).
    let at: Vec<(f64, u64)> = records.iter().map(|r| (r.virtual_time_s, r.version)).collect();
    assert_eq!(at, vec![(0.0, 0), (1.0, 0), (2.0, 0), (3.0, 0), (3.5, 1)]);
    assert_eq!(summary.virtual_time_s, 3.5);
}

#[test]
fn the_virtual_time_limit_ends_a_run_at_the_limit() {
    let scheduler = Box::new(AsyncUpdates::new(AsyncConfig {
        buffer: 1,
        concurrency: None,
        aggregations: 1000,
        ..AsyncConfig::default()
    }));
    let mut s = setup(scheduler, Box::new(AsyncMix::new(AsyncMixConfig::default())), Box::new(Constant));
    s.run = RunConfig { max_virtual_time_s: Some(2.5), ..Default::default() };
    let summary = Simulation::new(s).unwrap().run(&mut ()).unwrap();
    // Arrivals before 2.5 s: c1 at 1 s, c2 and c1 at 2 s (see the staleness scenario).
    assert_eq!(summary.aggregations, 3);
    assert_eq!(summary.virtual_time_s, 2.5);
}

/// Dispatches everyone once, merges, and never calls `stop`.
struct NeverStops;

impl Scheduler for NeverStops {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        (0..ctx.num_clients()).try_for_each(|c| ctx.dispatch(c))
    }
    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        ctx.aggregate()
    }
}

#[test]
fn a_run_ends_when_only_evaluations_remain() {
    let mut s =
        setup(Box::new(NeverStops), Box::new(WeightedMean::new(WeightedMeanConfig::default())), Box::new(Constant));
    s.eval = EvalConfig { every_aggregations: None, every_virtual_s: Some(0.5), batch_size: 4, ..Default::default() };
    let mut records: Vec<EvalRecord> = Vec::new();
    let summary = Simulation::new(s).unwrap().run(&mut records).unwrap();
    assert_eq!(summary.aggregations, 3);
    assert_eq!(summary.virtual_time_s, 3.0);
    // 0 (start), 0.5 … 3.0 by cadence; the last arrival is at 3.0 and the 3.0 evaluation follows it.
    assert_eq!(records.len(), 7);
}

/// Clients of 3 and 1 samples at 8 B/s download: the runs of `split_cost_*`.
fn split_run(split: Option<SplitConfig>) -> (Vec<(usize, u64)>, Summary, ParamSet) {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let scheduler = Box::new(Recorder { arrivals: Arc::clone(&arrivals) });
    let aggregator = Box::new(WeightedMean::new(WeightedMeanConfig::default()));
    let mut s = with_clients(scheduler, aggregator, Box::new(Constant), vec![vec![0, 1, 2], vec![3]], 8.0);
    s.trainer = Arc::new(Sgd::new(SgdConfig { batch_size: 8, split, ..Default::default() }));
    let mut sim = Simulation::new(s).unwrap();
    let summary = sim.run(&mut ()).unwrap();
    let arrivals = arrivals.lock().unwrap().clone();
    (arrivals, summary, sim.global().deep_clone())
}

#[test]
fn split_cost_downloads_the_client_part_and_relays_the_cut_every_sample() {
    // Whole model: 6 parameters = 24 bytes, 3 s to download; client 0 computes 3 s: 6 s.
    let (whole, whole_summary, whole_model) = split_run(None);
    assert_eq!(whole, vec![(1, 4_000_000), (0, 6_000_000)]);
    assert_eq!(whole_summary.virtual_time_s, 6.0);
    // Cut after `w`: the client downloads w alone (16 bytes, 2 s), computes as before and,
    // per sample, uploads 2 activations and downloads 2 gradients (8 bytes each way, 1 s down):
    // client 0 takes 2 + 3 + 3 = 8 s, client 1 2 + 1 + 1 = 4 s; `b` costs the server nothing.
    let split = SplitConfig { cut: "w".into(), server_flops_per_s: 1.0, activation_floats: None, round_trip_s: 0.0 };
    let (split_arrivals, split_summary, split_model) = split_run(Some(split.clone()));
    assert_eq!(split_arrivals, vec![(1, 4_000_000), (0, 8_000_000)]);
    assert_eq!(split_summary.virtual_time_s, 8.0);
    // One batch of 8 per job: a 0.5 s round trip adds 0.5 s to each.
    let (slow, _, _) = split_run(Some(SplitConfig { round_trip_s: 0.5, ..split }));
    assert_eq!(slow, vec![(1, 4_500_000), (0, 8_500_000)]);
    // SplitFed V1 trains the whole model as FedAvg does.
    for (a, b) in whole_model.tensors().iter().zip(split_model.tensors()) {
        assert!(a.equal(b));
    }
}

#[test]
fn a_split_at_an_unknown_tensor_lists_the_model_tensors() {
    let mut s =
        setup(Box::new(NeverStops), Box::new(WeightedMean::new(WeightedMeanConfig::default())), Box::new(Constant));
    let split =
        SplitConfig { cut: "fc1.bias".into(), server_flops_per_s: 1.0, activation_floats: None, round_trip_s: 0.0 };
    s.trainer = Arc::new(Sgd::new(SgdConfig { split: Some(split), ..Default::default() }));
    let err = Simulation::new(s).err().expect("an unknown cut is an error").to_string();
    assert!(err.contains("trainer.split.cut") && err.contains("w, b"), "{err}");
}

/// What a scheduler did at one event, seen from outside it.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    /// Virtual second of the event.
    at_s: f64,
    /// The client whose update arrived (`None` for the start).
    arrived: Option<usize>,
    /// Clients the scheduler dispatched, in id order.
    dispatched: Vec<usize>,
    /// Pending updates, global version and jobs in flight once the scheduler has acted.
    pending: usize,
    version: u64,
    in_flight: usize,
}

/// Runs a real scheduler and records a [`Step`] per event it handles.
struct Probe<S> {
    inner: S,
    steps: Arc<Mutex<Vec<Step>>>,
}

impl<S> Probe<S> {
    /// `idle_before`: the idle clients before the scheduler acted, so that the newly busy ones
    /// are those it dispatched (the arrived client is already idle when `on_arrival` runs).
    fn record(&self, ctx: &SchedCtx, arrived: Option<usize>, idle_before: Vec<usize>) {
        self.steps.lock().unwrap().push(Step {
            at_s: ctx.now_s(),
            arrived,
            dispatched: idle_before.into_iter().filter(|&c| ctx.is_busy(c)).collect(),
            pending: ctx.pending_len(),
            version: ctx.version(),
            in_flight: ctx.in_flight(),
        });
    }
}

impl<S: Scheduler> Scheduler for Probe<S> {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        let idle = ctx.idle_clients();
        self.inner.on_start(ctx)?;
        self.record(ctx, None, idle);
        Ok(())
    }
    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        let idle = ctx.idle_clients();
        self.inner.on_arrival(ctx, client)?;
        self.record(ctx, Some(client), idle);
        Ok(())
    }
    fn planned_aggregations(&self) -> Option<u64> {
        self.inner.planned_aggregations()
    }
}

/// (virtual second, [(client, base version, staleness in versions)]) of one aggregation.
type Merge = (f64, Vec<(usize, u64, u64)>);

/// Wraps an aggregator and records a [`Merge`] per call.
struct MergeLog<A> {
    inner: A,
    log: Arc<Mutex<Vec<Merge>>>,
}

impl<A: Aggregator> Aggregator for MergeLog<A> {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let merged = updates.iter().zip(ctx.staleness).map(|(u, s)| (u.client, u.base_version, s.versions)).collect();
        self.log.lock().unwrap().push((ctx.now as f64 / 1e6, merged));
        self.inner.aggregate(global, updates, ctx)
    }
}

/// Runs `scheduler` with `FedBuff`'s aggregator over `partition` (one second per sample);
/// returns its steps, the aggregations and the summary.
fn probe_run<S: Scheduler + 'static>(scheduler: S, partition: Vec<Vec<i64>>) -> (Vec<Step>, Vec<Merge>, Summary) {
    let (steps, log) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let probe = Box::new(Probe { inner: scheduler, steps: Arc::clone(&steps) });
    let aggregator =
        Box::new(MergeLog { inner: BufferedMean::new(BufferedMeanConfig::default()), log: Arc::clone(&log) });
    let s = with_clients(probe, aggregator, Box::new(InverseSqrt {}), partition, 1e15);
    let summary = Simulation::new(s).unwrap().run(&mut ()).unwrap();
    let (steps, log) = (steps.lock().unwrap().clone(), log.lock().unwrap().clone());
    (steps, log, summary)
}

/// A [`Step`] in one line: (second, arrived, dispatched, pending, version, in flight).
fn step(
    at_s: f64,
    arrived: Option<usize>,
    dispatched: &[usize],
    pending: usize,
    version: u64,
    in_flight: usize,
) -> Step {
    Step { at_s, arrived, dispatched: dispatched.to_vec(), pending, version, in_flight }
}

#[test]
fn sync_rounds_wait_for_the_slowest_client_of_each_round() {
    // Every client each round (fraction 1): round r starts at 3r s; c1 (1 s) arrives at
    // 3r + 1, c2 (2 s) at 3r + 2, c0 (3 s) at 3r + 3, and only then is the round aggregated and
    // all three dispatched again on the new version. Three rounds end at 9 s.
    let scheduler = SyncRounds::new(SyncRoundsConfig { rounds: 3, ..Default::default() });
    let (steps, merges, summary) = probe_run(scheduler, vec![vec![0, 1, 2], vec![3], vec![4, 5]]);
    let mut want = vec![step(0.0, None, &[0, 1, 2], 0, 0, 3)];
    for r in 0..3u64 {
        let t = 3.0 * r as f64;
        let next: &[usize] = if r < 2 { &[0, 1, 2] } else { &[] };
        want.push(step(t + 1.0, Some(1), &[], 1, r, 2));
        want.push(step(t + 2.0, Some(2), &[], 2, r, 1));
        want.push(step(t + 3.0, Some(0), next, 0, r + 1, next.len()));
    }
    assert_eq!(steps, want);
    // Each round's updates in arrival order, all dispatched on the round's version: staleness 0.
    let round = |r: u64| (3.0 * (r + 1) as f64, vec![(1, r, 0), (2, r, 0), (0, r, 0)]);
    assert_eq!(merges, vec![round(0), round(1), round(2)]);
    assert_eq!((summary.aggregations, summary.updates, summary.virtual_time_s), (3, 9, 9.0));
}

#[test]
fn sync_rounds_dispatch_the_configured_number_of_clients() {
    // Four clients of one sample (1 s each); two per round, set directly or as half of four.
    // Which two is the scheduler's draw, but every round lasts 1 s: both arrive at r + 1, the
    // first leaves one pending, the second completes the round and two more are dispatched.
    for cfg in [
        SyncRoundsConfig { rounds: 3, clients_per_round: Some(2), ..Default::default() },
        SyncRoundsConfig { rounds: 3, fraction: 0.5, ..Default::default() },
    ] {
        let (steps, merges, summary) =
            probe_run(SyncRounds::new(cfg.clone()), vec![vec![0], vec![1], vec![2], vec![3]]);
        assert_eq!(steps.len(), 7, "{cfg:?}: the start and 2 arrivals in each of 3 rounds");
        assert_eq!((steps[0].dispatched.len(), steps[0].in_flight), (2, 2), "{cfg:?}");
        for r in 0..3u64 {
            let (first, second) = (&steps[2 * r as usize + 1], &steps[2 * r as usize + 2]);
            let round_clients = &steps[2 * r as usize].dispatched;
            let at = (r + 1) as f64;
            assert_eq!((first.at_s, first.dispatched.len(), first.pending, first.version), (at, 0, 1, r), "{cfg:?}");
            let next = if r < 2 { 2 } else { 0 };
            assert_eq!((second.at_s, second.dispatched.len(), second.pending, second.version), (at, next, 0, r + 1));
            assert_eq!(second.in_flight, next, "{cfg:?}");
            // The round's aggregation holds exactly the clients dispatched for it, at staleness 0.
            let mut merged: Vec<usize> = merges[r as usize].1.iter().map(|m| m.0).collect();
            merged.sort();
            assert_eq!(&merged, round_clients, "{cfg:?}, round {r}");
            assert!(merges[r as usize].1.iter().all(|&(_, base, s)| base == r && s == 0), "{cfg:?}: {merges:?}");
            assert_eq!(merges[r as usize].0, at);
        }
        assert_eq!((summary.aggregations, summary.updates, summary.virtual_time_s), (3, 6, 3.0), "{cfg:?}");
    }
}

#[test]
fn fedbuff_aggregates_every_third_arrival_and_redispatches_on_the_newest_model() {
    // K = 3, all three clients training at once, so after an arrival the only idle client is
    // the one that arrived and it goes straight back, on the model current after the arrival
    // (after the aggregation, if there was one). Arrivals (ties in the order scheduled) with
    // the buffer after each; `v` is the version the update was dispatched on:
    //   t=1 c1 v0 [1] | t=2 c2 v0 [2], c1 v0 [3] → merge at version 0, staleness 0, 0, 0 → v1
    //   t=3 c0 v0 [1], c1 v1 [2] | t=4 c2 v0 [3] → merge at v1: staleness 1, 0, 1 → v2
    //   t=4 c1 v1 [1] | t=5 c1 v2 [2] | t=6 c0 v1 [3] → merge at v2: staleness 1, 0, 1 → v3
    //   t=6 c2 v2 [1], c1 v2 [2] | t=7 c1 v3 [3] → merge at v3: staleness 1, 1, 0 → v4, stop.
    // (c1's job from t=2 starts after that arrival's merge, hence v1; c2's from t=2 before it.)
    let scheduler =
        AsyncUpdates::new(AsyncConfig { buffer: 3, concurrency: None, aggregations: 4, ..AsyncConfig::default() });
    let (steps, merges, summary) = probe_run(scheduler, vec![vec![0, 1, 2], vec![3], vec![4, 5]]);
    let want = vec![
        step(0.0, None, &[0, 1, 2], 0, 0, 3),
        step(1.0, Some(1), &[1], 1, 0, 3),
        step(2.0, Some(2), &[2], 2, 0, 3),
        step(2.0, Some(1), &[1], 0, 1, 3),
        step(3.0, Some(0), &[0], 1, 1, 3),
        step(3.0, Some(1), &[1], 2, 1, 3),
        step(4.0, Some(2), &[2], 0, 2, 3),
        step(4.0, Some(1), &[1], 1, 2, 3),
        step(5.0, Some(1), &[1], 2, 2, 3),
        step(6.0, Some(0), &[0], 0, 3, 3),
        step(6.0, Some(2), &[2], 1, 3, 3),
        step(6.0, Some(1), &[1], 2, 3, 3),
        // The last aggregation stops the run: nobody is dispatched.
        step(7.0, Some(1), &[], 0, 4, 2),
    ];
    assert_eq!(steps, want);
    let want_merges: Vec<Merge> = vec![
        (2.0, vec![(1, 0, 0), (2, 0, 0), (1, 0, 0)]),
        (4.0, vec![(0, 0, 1), (1, 1, 0), (2, 0, 1)]),
        (6.0, vec![(1, 1, 1), (1, 2, 0), (0, 1, 1)]),
        (7.0, vec![(2, 2, 1), (1, 2, 1), (1, 3, 0)]),
    ];
    assert_eq!(merges, want_merges);
    assert_eq!((summary.aggregations, summary.updates, summary.virtual_time_s), (4, 12, 7.0));
    let histogram: Vec<(u64, u64)> = summary.staleness_histogram.into_iter().collect();
    assert_eq!(histogram, vec![(0, 6), (1, 6)]);
}

#[test]
fn fedbuff_keeps_its_concurrency_with_clients_drawn_from_the_idle_ones() {
    // K = 3 with two of three clients training: which client goes next is the scheduler's
    // draw, but every arrival but the last hands out exactly one job to a client that was idle
    // (so two stay in flight), and the buffer fills 1, 2, 3 → merge, four times.
    let scheduler =
        AsyncUpdates::new(AsyncConfig { buffer: 3, concurrency: Some(2), aggregations: 4, ..AsyncConfig::default() });
    let (steps, merges, summary) = probe_run(scheduler, vec![vec![0, 1, 2], vec![3], vec![4, 5]]);
    assert_eq!((steps[0].dispatched.len(), steps[0].in_flight), (2, 2));
    assert_eq!(steps.len(), 13, "the start and 4 × 3 arrivals");
    for (i, s) in steps[1..].iter().enumerate() {
        let last = i == 11;
        assert_eq!(s.pending, (i + 1) % 3, "arrival {}: {s:?}", i + 1);
        assert_eq!(s.version, (i as u64 + 1) / 3, "arrival {}: {s:?}", i + 1);
        assert_eq!(s.dispatched.len(), usize::from(!last), "arrival {}: {s:?}", i + 1);
        assert_eq!(s.in_flight, if last { 1 } else { 2 }, "arrival {}: {s:?}", i + 1);
    }
    assert!(merges.iter().all(|m| m.1.len() == 3), "{merges:?}");
    assert_eq!((summary.aggregations, summary.updates), (4, 12));
}

/// Every client trains in a loop, each job pulling the newest model halfway; every arrival is
/// merged; 12 aggregations.
struct LoopingPulls;

impl Scheduler for LoopingPulls {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        (0..ctx.num_clients()).try_for_each(|c| ctx.dispatch_with_pull(c, 0.5))
    }
    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        ctx.aggregate()?;
        if ctx.version() >= 12 {
            ctx.stop();
            return Ok(());
        }
        ctx.dispatch_with_pull(client, 0.5)
    }
    fl_core::stateless!();
}

/// Keeps the records and a checkpoint after every aggregation.
#[derive(Default)]
struct Checkpoints {
    records: Vec<EvalRecord>,
    saved: Vec<fl_core::engine::Checkpoint>,
    take: bool,
}

impl fl_core::Observer for Checkpoints {
    fn on_eval(&mut self, record: &EvalRecord, _: &[(String, f64)]) -> Result<()> {
        self.records.push(record.clone());
        Ok(())
    }
    fn wants_checkpoint(&mut self, _: u64, _: f64) -> bool {
        self.take
    }
    fn on_checkpoint(&mut self, c: &fl_core::engine::Checkpoint) -> Result<()> {
        self.saved.push(fl_core::engine::Checkpoint::from_bytes(c.bytes().to_vec())?);
        Ok(())
    }
}

#[test]
fn jobs_that_pull_resume_before_and_after_their_pull() {
    let build = || {
        let agg = Box::new(WeightedMean::new(WeightedMeanConfig::default()));
        let mut s = with_clients(
            Box::new(LoopingPulls),
            agg,
            Box::new(Constant),
            vec![vec![0, 1, 2], vec![3], vec![4, 5]],
            48.0,
        );
        s.eval = EvalConfig { every_aggregations: Some(1), ..EvalConfig::default() };
        Simulation::new(s).unwrap()
    };
    let csv = |r: &[EvalRecord]| r.iter().map(EvalRecord::csv_row).collect::<Vec<_>>();
    let mut straight = Checkpoints::default();
    build().run(&mut straight).unwrap();
    let mut saving = Checkpoints { take: true, ..Default::default() };
    build().run(&mut saving).unwrap();
    assert_eq!(csv(&saving.records), csv(&straight.records));
    assert!(saving.saved.len() >= 10);
    // Every checkpoint: some hold jobs before their pull, some after it (pulled models saved).
    for cp in &saving.saved {
        let mut sim = build();
        sim.restore(cp).unwrap();
        let mut resumed = Checkpoints::default();
        sim.run(&mut resumed).unwrap();
        let before = cp.evaluations().unwrap().len();
        assert_eq!(csv(&resumed.records), csv(&straight.records[before..]), "resumed at version {}", cp.version());
        assert!(sim.global().equal(&{
            let mut s = build();
            s.run(&mut ()).unwrap();
            s.global().shallow_clone()
        }));
    }
}

/// The global model after every client trained once (one epoch) under a trainer of batch
/// `trainer_batch` on devices of batch sizes `device_batch`.
fn batch_run(trainer_batch: usize, device_batch: Option<Quantity>) -> ParamSet {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let scheduler = Box::new(Recorder { arrivals });
    let aggregator = Box::new(WeightedMean::new(WeightedMeanConfig::default()));
    let mut s = setup(scheduler, aggregator, Box::new(Constant));
    s.trainer = Arc::new(Sgd::new(SgdConfig { batch_size: trainer_batch, lr: 0.5, ..Default::default() }));
    s.devices.batch_size = device_batch;
    let mut sim = Simulation::new(s).unwrap();
    sim.run(&mut ()).unwrap();
    sim.global().deep_clone()
}

#[test]
fn a_devices_batch_size_reaches_its_clients_jobs() {
    let flat = |p: &ParamSet| {
        p.tensors().iter().flat_map(|t| Vec::<f32>::try_from(t.reshape([-1])).unwrap()).collect::<Vec<_>>()
    };
    // Devices of batch 1 under a trainer of batch 8 train as a trainer of batch 1 (one step a
    // sample, not one an epoch); per-client sizes mix the two, client by client.
    let by_device = flat(&batch_run(8, Some(Quantity::Constant { value: 1.0 })));
    assert_eq!(by_device, flat(&batch_run(1, None)));
    assert_ne!(by_device, flat(&batch_run(8, None)));
    let mixed = flat(&batch_run(8, Some(Quantity::PerClient { values: vec![1.0, 8.0, 8.0] })));
    assert!(mixed != by_device && mixed != flat(&batch_run(8, None)));
}
