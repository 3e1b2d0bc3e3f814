//! The asyncnc schedulers in the engine, with the 2→2 linear model whose jobs last one virtual
//! second per sample (clients of 3, 1 and 2 samples): V1 with J = C, no delay, τ ≡ 0 and
//! s ≡ 1 is FedAvg with size weights; stale starts stay within τ_max and the history; the
//! code-faithful variant keeps each client's own model; delays postpone arrivals; the stop
//! rule and the event-driven variant; bad settings are errors naming the key.

use std::sync::{Arc, Mutex};

use fl_algo_asyncnc::{
    BarrierRounds, BarrierRoundsConfig, DelayedAsync, DelayedAsyncConfig, ModelMean, ModelMeanConfig, Sampling,
    StalenessModel,
};
use fl_algo_baselines::{SyncRounds, SyncRoundsConfig, WeightedMean, WeightedMeanConfig};
use fl_core::engine::{EvalRecord, Setup};
use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::testing::tiny_setup;
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Observer, ParamSet, Result, Scheduler, Simulation};

fn setup(scheduler: Box<dyn Scheduler>, aggregator: Box<dyn Aggregator>) -> Setup {
    let trainer = Arc::new(Sgd::new(SgdConfig { batch_size: 2, lr: 0.5, momentum: 0.5, ..Default::default() }));
    Setup { seed: 5, workers: 2, ..tiny_setup(trainer, scheduler, aggregator) }
}

fn barrier(cfg: BarrierRoundsConfig) -> Box<dyn Scheduler> {
    Box::new(BarrierRounds::new(cfg))
}

fn model_mean() -> Box<dyn Aggregator> {
    Box::new(ModelMean::new(ModelMeanConfig::default()))
}

/// Per aggregation: the global model it starts from, and each update's client, base, new
/// model and staleness.
type Round = (ParamSet, Vec<(usize, ParamSet, ParamSet, u64)>);
type Seen = Arc<Mutex<Vec<Round>>>;

/// Records every aggregation, then aggregates.
struct Log {
    inner: Box<dyn Aggregator>,
    seen: Seen,
}

impl Aggregator for Log {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let round =
            updates.iter().zip(ctx.staleness).map(|(u, s)| (u.client, u.base.deep_clone(), u.new_params(), s.versions));
        self.seen.lock().unwrap().push((global.deep_clone(), round.collect()));
        self.inner.aggregate(global, updates, ctx)
    }
}

fn logged(inner: Box<dyn Aggregator>) -> (Box<dyn Aggregator>, Seen) {
    let seen: Seen = Arc::default();
    (Box::new(Log { inner, seen: Arc::clone(&seen) }), seen)
}

fn max_difference(a: &ParamSet, b: &ParamSet) -> f64 {
    a.tensors().iter().zip(b.tensors()).map(|(x, y)| (x - y).abs().max().double_value(&[])).fold(0.0, f64::max)
}

#[test]
fn all_clients_without_delay_or_staleness_is_fedavg() {
    let cfg = BarrierRoundsConfig { rounds: 6, clients_per_round: 3, max_delay_s: 0.0, ..Default::default() };
    let mut ours = Simulation::new(setup(barrier(cfg), model_mean())).unwrap();
    ours.run(&mut ()).unwrap();
    let fedavg = SyncRounds::new(SyncRoundsConfig { rounds: 6, fraction: 1.0, clients_per_round: None });
    let mut theirs =
        Simulation::new(setup(Box::new(fedavg), Box::new(WeightedMean::new(WeightedMeanConfig::default())))).unwrap();
    theirs.run(&mut ()).unwrap();
    assert_eq!(ours.version(), 6);
    let d = max_difference(ours.global(), theirs.global());
    assert!(d <= 1e-6, "barrier rounds vs FedAvg: {d:e}");
    let start = Simulation::new(setup(barrier(BarrierRoundsConfig::default()), model_mean())).unwrap();
    assert!(max_difference(ours.global(), start.global()) > 1e-2, "training moved the model");
}

#[test]
fn stale_starts_come_from_the_history_within_tau_max() {
    let cfg = BarrierRoundsConfig {
        rounds: 30,
        clients_per_round: 2,
        staleness: StalenessModel::Uniform,
        tau_max: 2,
        ..Default::default()
    };
    let (aggregator, seen) = logged(model_mean());
    let mut sim = Simulation::new(setup(barrier(cfg), aggregator)).unwrap();
    let summary = sim.run(&mut ()).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 30);
    for (t, (_, round)) in seen.iter().enumerate() {
        for (client, base, _, tau) in round {
            assert!(*tau <= 2.min(t as u64), "round {t}: client {client} has τ = {tau}");
            // Its start is the global model of version t − τ, which aggregation t − τ began from.
            let want = &seen[t - *tau as usize].0;
            assert!(max_difference(base, want) == 0.0, "round {t}: the start is not θ^(t−τ)");
        }
    }
    assert!(summary.staleness_histogram.keys().any(|&s| s > 0), "{:?}", summary.staleness_histogram);
}

#[test]
fn without_broadcast_each_client_keeps_training_its_own_model() {
    let cfg = BarrierRoundsConfig {
        rounds: 12,
        clients_per_round: 2,
        broadcast: false,
        common_init: false,
        ..Default::default()
    };
    let (aggregator, seen) = logged(model_mean());
    let sim = Simulation::new(setup(barrier(cfg.clone()), aggregator)).unwrap();
    let initial = sim.global().deep_clone();
    let mut sim = sim;
    sim.run(&mut ()).unwrap();
    let mut own: Vec<Option<ParamSet>> = (0..3).map(|_| None).collect();
    let mut starts_fresh = 0;
    for (_, round) in seen.lock().unwrap().iter() {
        for (client, base, new, tau) in round {
            assert_eq!(*tau, 0);
            match &own[*client] {
                Some(previous) => assert!(max_difference(base, previous) == 0.0, "client {client} lost its model"),
                None => {
                    // A first draw starts from the client's own initialisation, not θ⁽⁰⁾.
                    assert!(max_difference(base, &initial) > 0.0 || base.norm_sq().double_value(&[]) == 0.0);
                    starts_fresh += 1;
                }
            }
            own[*client] = Some(new.shallow_clone());
        }
    }
    assert_eq!(starts_fresh, 3, "each client's first draw starts from its own init");
}

#[test]
fn delays_postpone_arrivals_and_are_logged() {
    // Without delays a round lasts as long as its slowest client (≤ 3 s, one second per
    // sample); with delays U(0, 2) each arrival is later by the client's delay.
    let run = |max_delay_s| {
        let cfg = BarrierRoundsConfig { rounds: 20, clients_per_round: 3, max_delay_s, ..Default::default() };
        let mut sim = Simulation::new(setup(barrier(cfg), model_mean())).unwrap();
        let mut diagnostics = Diagnostics::default();
        let summary = sim.run(&mut diagnostics).unwrap();
        (summary.virtual_time_s, diagnostics.0)
    };
    let (plain, none) = run(0.0);
    assert!((plain - 60.0).abs() < 1e-6, "20 rounds of 3 s: {plain}");
    assert!(none.iter().all(|(mean, max)| *mean == 0.0 && *max == 0.0));
    let (delayed, logged) = run(2.0);
    assert!(delayed > plain && delayed < plain + 40.0, "{delayed}");
    assert_eq!(logged.len(), 21, "one record per aggregation and the start");
    for (mean, max) in &logged[1..] {
        assert!(*mean >= 0.0 && mean <= max && *max < 2.0, "delays {mean}, {max}");
    }
}

/// The scheduler's delay diagnostics at each evaluation.
#[derive(Default)]
struct Diagnostics(Vec<(f64, f64)>);

impl Observer for Diagnostics {
    fn on_eval(&mut self, _: &EvalRecord, diagnostics: &[(String, f64)]) -> Result<()> {
        let get = |name: &str| diagnostics.iter().find(|(n, _)| n == name).map_or(0.0, |(_, v)| *v);
        self.0.push((get("mean_delay_s"), get("max_delay_s")));
        Ok(())
    }
}

#[test]
fn with_replacement_draws_train_separately_or_merged() {
    for dedup in [false, true] {
        let cfg = BarrierRoundsConfig {
            rounds: 10,
            clients_per_round: 5,
            sampling: Sampling::WithReplacement,
            dedup,
            ..Default::default()
        };
        let (aggregator, seen) = logged(model_mean());
        let mut sim = Simulation::new(setup(barrier(cfg), aggregator)).unwrap();
        let summary = sim.run(&mut ()).unwrap();
        let sizes: Vec<usize> = seen.lock().unwrap().iter().map(|(_, r)| r.len()).collect();
        if dedup {
            assert!(sizes.iter().all(|&n| n <= 3), "{sizes:?}");
        } else {
            assert!(sizes.iter().all(|&n| n == 5), "J = 5 draws of 3 clients: {sizes:?}");
        }
        assert_eq!(summary.aggregations, 10);
    }
}

#[test]
fn kappa_stops_once_the_model_barely_moves() {
    let cfg = BarrierRoundsConfig { rounds: 50, clients_per_round: 3, kappa: Some(1e9), ..Default::default() };
    let mut sim = Simulation::new(setup(barrier(cfg), model_mean())).unwrap();
    assert_eq!(sim.run(&mut ()).unwrap().aggregations, 1, "any change is below κ = 1e9");
    let cfg = BarrierRoundsConfig { rounds: 50, clients_per_round: 3, kappa: Some(1e-12), ..Default::default() };
    let mut sim = Simulation::new(setup(barrier(cfg), model_mean())).unwrap();
    assert_eq!(sim.run(&mut ()).unwrap().aggregations, 50);
}

#[test]
fn the_event_driven_variant_commits_every_buffer_with_genuine_staleness() {
    let cfg = DelayedAsyncConfig { aggregations: 12, buffer: 2, ..Default::default() };
    let (aggregator, seen) = logged(model_mean());
    let mut sim = Simulation::new(setup(Box::new(DelayedAsync::new(cfg)), aggregator)).unwrap();
    let summary = sim.run(&mut ()).unwrap();
    assert_eq!(summary.aggregations, 12);
    assert!(seen.lock().unwrap().iter().all(|(_, r)| r.len() == 2));
    assert!(summary.staleness_histogram.keys().any(|&s| s > 0), "{:?}", summary.staleness_histogram);
}

#[test]
fn bad_settings_are_errors_naming_the_key() {
    let component = Registry::get()
        .unwrap()
        .component(ComponentKind::Scheduler, "barrier-rounds", "exp.toml", "scheduler")
        .unwrap();
    let Builder::Scheduler(build_scheduler) = component.build else { panic!("a scheduler") };
    let build = |table: &str| {
        let table: fl_core::toml::Table = fl_core::toml::from_str(table).unwrap();
        build_scheduler(&Params::new("exp.toml", "scheduler", table)).map(|_| ())
    };
    for (table, key) in [
        ("clients_per_round = 0", "scheduler.clients_per_round"),
        ("max_delay_s = -1.0", "scheduler.max_delay_s"),
        ("kappa = 0.0", "scheduler.kappa"),
        ("kappa = -2.0", "scheduler.kappa"),
        ("tau_max = 4\nhistory = 3", "scheduler.history"),
        ("lr_delay = \"wall-clock\"", "scheduler.lr_delay"),
        ("staleness = \"gaussian\"", "scheduler.staleness"),
    ] {
        let err = build(table).err().unwrap_or_else(|| panic!("{table} was accepted")).to_string();
        assert!(err.contains(key), "{table}: {err}");
    }
    // J > C is known only with the clients: an error at the start naming the key.
    let cfg = BarrierRoundsConfig { clients_per_round: 4, ..Default::default() };
    let err = Simulation::new(setup(barrier(cfg), model_mean())).unwrap().run(&mut ()).unwrap_err().to_string();
    assert!(err.contains("clients_per_round") && err.contains("3 clients"), "{err}");
}

#[test]
fn the_event_driven_scheduler_reads_the_barrier_rounds_keys() {
    // An experiment written for `barrier-rounds` (`rounds`, `clients_per_round`) switches to
    // `delayed-async` unchanged; giving a key under both names is an error.
    let component =
        Registry::get().unwrap().component(ComponentKind::Scheduler, "delayed-async", "exp.toml", "scheduler").unwrap();
    let parse = |table: &str| {
        let table: fl_core::toml::Table = fl_core::toml::from_str(table).unwrap();
        Params::new("exp.toml", "scheduler", table).parse::<DelayedAsyncConfig>()
    };
    let cfg = parse("rounds = 7\nclients_per_round = 3").unwrap();
    assert_eq!((cfg.aggregations, cfg.buffer), (7, 3));
    assert!(parse("rounds = 7\naggregations = 8").is_err());
    assert!(matches!(component.build, Builder::Scheduler(_)));
}
