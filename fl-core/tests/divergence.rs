//! The numerical guard: a client update holding NaN or infinity is rejected before aggregation
//! (counted in the metrics, reported to the observer) while the finite ones aggregate; as many
//! rejections in a row as there are clients stop the run, and so does a global model that an
//! aggregation of finite updates left non-finite, naming the last finite version.

use std::sync::{Arc, Mutex};

use fl_core::engine::{EvalConfig, RejectedUpdate, Setup};
use fl_core::testing::tiny_setup;
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::trainer::{PullInfo, TrainSession};
use fl_core::{
    AggregateCtx, Aggregator, ClientUpdate, EngineError, Error, EvalRecord, LocalTrainer, Observer, ParamSet, Result,
    SchedCtx, Scheduler, Simulation, TrainJob, TrainOutcome,
};

/// Dispatches every client at the start, aggregates every arrival and re-dispatches its
/// client until `jobs` jobs in all: `jobs` aggregations of one arrival each.
struct Loop {
    clients: usize,
    jobs: u64,
    dispatched: u64,
}

impl Scheduler for Loop {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.dispatched = self.clients as u64;
        (0..self.clients).try_for_each(|c| ctx.dispatch(c))
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        ctx.aggregate()?;
        if self.dispatched == self.jobs {
            return Ok(());
        }
        self.dispatched += 1;
        ctx.dispatch(client)
    }
}

/// Averages the updates into the global model, scaled by `scale` (NaN poisons the result),
/// and remembers how many samples each update it saw held.
struct Average {
    scale: f64,
    seen: Arc<Mutex<Vec<usize>>>,
}

impl Aggregator for Average {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], _: &AggregateCtx) -> Result<ParamSet> {
        self.seen.lock().unwrap().extend(updates.iter().map(|u| u.samples));
        let n = updates.len() as f64;
        let tensors = global
            .tensors()
            .iter()
            .enumerate()
            .map(|(i, g)| updates.iter().fold(g.copy(), |acc, u| acc + &u.delta.tensors()[i] * (self.scale / n)))
            .collect();
        ParamSet::new(global.names().to_vec(), tensors)
    }
}

/// SGD whose outcome is NaN for the clients holding `poisoned` samples.
struct Poisoning {
    sgd: Sgd,
    poisoned: Vec<i64>,
}

struct PoisonedSession {
    inner: Box<dyn TrainSession>,
    poison: Vec<bool>,
}

impl TrainSession for PoisonedSession {
    fn run_until(&mut self, share: f64) -> Result<()> {
        self.inner.run_until(share)
    }

    fn merge_pulled(&mut self, pulled: &ParamSet, info: PullInfo) -> Result<()> {
        self.inner.merge_pulled(pulled, info)
    }

    fn finish(self: Box<Self>) -> Result<Vec<TrainOutcome>> {
        let mut outcomes = self.inner.finish()?;
        for (o, &poison) in outcomes.iter_mut().zip(&self.poison) {
            if poison {
                o.params = o.params.map(|t| t * f64::NAN);
            }
        }
        Ok(outcomes)
    }
}

impl LocalTrainer for Poisoning {
    fn start(&self, jobs: Vec<TrainJob>) -> Result<Box<dyn TrainSession>> {
        let poison = jobs.iter().map(|j| self.poisoned.contains(&j.indices.size()[0])).collect();
        Ok(Box::new(PoisonedSession { inner: self.sgd.start(jobs)?, poison }))
    }

    fn sample_passes(&self, samples: usize, batch: Option<usize>) -> f64 {
        self.sgd.sample_passes(samples, batch)
    }
}

/// Keeps the records and the rejections.
#[derive(Default)]
struct Log {
    records: Vec<EvalRecord>,
    rejected: Vec<RejectedUpdate>,
}

impl Observer for Log {
    fn on_eval(&mut self, record: &EvalRecord, _: &[(String, f64)]) -> Result<()> {
        self.records.push(record.clone());
        Ok(())
    }

    fn on_rejected(&mut self, update: &RejectedUpdate) {
        self.rejected.push(*update);
    }
}

/// [`tiny_setup`]'s three clients of 3, 1 and 2 samples, `rounds` aggregations of one arrival
/// each, an evaluation after each.
fn setup(poisoned: Vec<i64>, scale: f64, rounds: u64, seen: Arc<Mutex<Vec<usize>>>) -> Setup {
    let trainer = Arc::new(Poisoning { sgd: Sgd::new(SgdConfig { lr: 0.5, ..SgdConfig::default() }), poisoned });
    let scheduler = Box::new(Loop { clients: 3, jobs: rounds, dispatched: 0 });
    Setup {
        eval: EvalConfig { every_aggregations: Some(1), ..EvalConfig::default() },
        ..tiny_setup(trainer, scheduler, Box::new(Average { scale, seen }))
    }
}

#[test]
fn a_non_finite_update_is_rejected_counted_and_reported_and_the_rest_aggregate() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut sim = Simulation::new(setup(vec![1], 1.0, 9, Arc::clone(&seen))).unwrap();
    let mut log = Log::default();
    sim.run(&mut log).unwrap();
    // Nine arrivals; the single-sample client's (the fastest: 4 of the 9) are rejected.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, [2, 3, 2, 3, 2]);
    assert_eq!(log.rejected.len(), 4);
    assert!(log.rejected.iter().all(|r| r.client == 1 && r.train_loss.is_finite()), "{:?}", log.rejected);
    assert_eq!(log.records.last().unwrap().rejected_updates, 4);
    assert_eq!(log.records.last().unwrap().version, 9, "a rejected arrival still makes its aggregation");
    assert!(ParamSet::all_finite(&[sim.global()])[0]);
    assert!(log.records.iter().all(|r| r.accuracy.is_finite()));
}

#[test]
fn as_many_rejections_in_a_row_as_clients_stop_the_run() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let err = Simulation::new(setup(vec![1, 2, 3], 1.0, 9, seen))
        .and_then(|mut sim| sim.run(&mut ()))
        .expect_err("every update is NaN");
    match err {
        Error::Engine(EngineError::UpdatesRejected { in_a_row, version }) => assert_eq!((in_a_row, version), (3, 2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_non_finite_global_model_stops_the_run_naming_the_last_finite_version() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut log = Log::default();
    let err = Simulation::new(setup(vec![], f64::NAN, 9, seen)).and_then(|mut sim| sim.run(&mut log)).unwrap_err();
    match &err {
        Error::Engine(EngineError::Diverged { version, last_finite, rejected }) => {
            assert_eq!((*version, *last_finite, *rejected), (1, 0, 0))
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("last finite version is 0"), "{err}");
    assert_eq!(log.records.len(), 1, "only the initial evaluation happened");
}
