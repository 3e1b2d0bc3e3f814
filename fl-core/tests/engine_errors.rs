//! The engine's contract violations come back as typed errors a caller can match on, and a
//! failed job's cause survives as its `source`: the chain `{:#}` prints (as the `fl` binary
//! does) reads as the message did when it was one string.

use std::sync::Arc;

use fl_core::engine::Setup;
use fl_core::scheduler_testing::RecordingContext;
use fl_core::testing::{KeepGlobal, tiny_setup};
use fl_core::trainer::TrainSession;
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{
    EngineError, Error, JobFailure, LocalTrainer, Result, SchedCtx, Scheduler, SchedulingContext, Simulation, TrainJob,
    TrainerError,
};

/// Dispatches each listed client once at the start and aggregates every arrival.
struct Dispatch(Vec<usize>);

impl Scheduler for Dispatch {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        self.0.iter().try_for_each(|&c| ctx.dispatch(c))
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        ctx.aggregate()
    }
}

/// Refuses every cohort, as a trainer that finds a client without samples would.
struct Refuses;

impl LocalTrainer for Refuses {
    fn start(&self, _: Vec<TrainJob>) -> Result<Box<dyn TrainSession>> {
        Err(TrainerError::NoSamples { trainer: "refuses" }.into())
    }

    fn sample_passes(&self, samples: usize, _batch: Option<usize>) -> f64 {
        samples as f64
    }
}

/// [`tiny_setup`] with `partition`, `dispatch` dispatching at the start, the model kept.
fn setup(dispatch: Vec<usize>, trainer: Arc<dyn LocalTrainer>, partition: Vec<Vec<i64>>) -> Setup {
    Setup { partition, ..tiny_setup(trainer, Box::new(Dispatch(dispatch)), Box::new(KeepGlobal)) }
}

fn three_clients() -> Vec<Vec<i64>> {
    vec![vec![0, 1, 2], vec![3], vec![4, 5]]
}

fn sgd() -> Arc<dyn LocalTrainer> {
    Arc::new(Sgd::new(SgdConfig::default()))
}

fn run(setup: Setup) -> Error {
    Simulation::new(setup).and_then(|mut sim| sim.run(&mut ())).expect_err("the run fails")
}

/// `e` and its sources, as `anyhow` prints them with `{:#}`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out += &format!(": {cause}");
        next = cause.source();
    }
    out
}

#[test]
fn dispatching_to_an_unknown_client_names_the_client_and_the_count() {
    let err = run(setup(vec![0, 5], sgd(), three_clients()));
    assert!(matches!(err, Error::Engine(EngineError::UnknownClient { client: 5, have: 3 })), "{err:?}");
    assert_eq!(err.to_string(), "dispatch: no client 5 (have 3)");
    // The scheduler's test context gives the same error.
    let mut ctx = RecordingContext::new(3, 0);
    let err = ctx.dispatch(5).unwrap_err();
    assert!(matches!(err, Error::Engine(EngineError::UnknownClient { client: 5, have: 3 })), "{err:?}");
}

#[test]
fn a_second_dispatch_to_a_training_client_is_refused() {
    let err = run(setup(vec![1, 1], sgd(), three_clients()));
    assert!(matches!(err, Error::Engine(EngineError::ClientBusy { client: 1 })), "{err:?}");
}

#[test]
fn a_setup_without_clients_or_with_an_empty_client_is_refused() {
    let err = Simulation::new(setup(vec![], sgd(), vec![])).err().unwrap();
    assert!(matches!(err, Error::Engine(EngineError::NoClients)), "{err:?}");
    let err = Simulation::new(setup(vec![], sgd(), vec![vec![0], vec![], vec![1]])).err().unwrap();
    assert!(matches!(err, Error::Engine(EngineError::EmptyClient { client: 1 })), "{err:?}");
}

#[test]
fn a_failed_job_keeps_the_trainers_error_as_its_cause() {
    let err = run(setup(vec![2], Arc::new(Refuses), three_clients()));
    let Error::Engine(EngineError::JobFailed { job: 0, client: 2, source }) = &err else {
        panic!("expected job 0 of client 2 to fail, got {err:?}")
    };
    let JobFailure::Cohort(cause) = &**source else { panic!("expected its cohort to fail, got {source:?}") };
    let JobFailure::Training(trainer_error) = &**cause else { panic!("expected a training error, got {cause:?}") };
    assert!(matches!(**trainer_error, Error::Trainer(TrainerError::NoSamples { trainer: "refuses" })));
    assert_eq!(chain(&err), "job 0 of client 2: its cohort failed: refuses: the client has no samples");
}
