//! What a run reports: the `[eval]` and `[run]` sections, the evaluation records and run summary
//! (defined in `fl-record`, shared with the report readers), and the observer that receives
//! records as they are produced (so nothing is lost if a run fails part-way).

use serde::{Deserialize, Serialize};

use crate::error::InvalidKey;
use crate::error::Result;

use super::cohort::Batching;

pub use fl_record::{ClientStats, EvalRecord, Summary};

/// The `[eval]` section: when and how the global model is evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalConfig {
    /// Evaluate after every k-th aggregation (0 or absent: never by count).
    pub every_aggregations: Option<u64>,
    /// Evaluate every Δ virtual seconds.
    pub every_virtual_s: Option<f64>,
    /// Run the test set at every k-th evaluation only (and at the last one); the others log
    /// the training-side fields (training loss, staleness, diagnostics) with accuracy and
    /// test loss NaN. For long runs whose per-round training loss matters (asyncnc's server
    /// loss) but whose test pass costs more than a round.
    pub test_every: u64,
    /// Test samples per forward pass of an evaluation (memory only: results do not depend
    /// on it beyond rounding).
    pub batch_size: usize,
    /// The share of each client's samples held out as its own test split (Co-S²P's 8:2
    /// client splits): the client trains on the rest, and each evaluation also scores every
    /// client's personalised model (its last job's sub-model of the global model, with its
    /// personal tensors) on its split. 0: no splits, no client scores.
    pub client_test_share: f64,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            every_aggregations: Some(1),
            every_virtual_s: None,
            test_every: 1,
            batch_size: 1000,
            client_test_share: 0.0,
        }
    }
}

impl EvalConfig {
    /// Checks that `batch_size` and `test_every` are at least 1 and `every_virtual_s`
    /// positive; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.batch_size == 0 {
            return Err(InvalidKey::new("batch_size", "expected at least 1"));
        }
        if self.test_every == 0 {
            return Err(InvalidKey::new("test_every", "expected at least 1"));
        }
        if self.every_virtual_s.is_some_and(|d| !(d > 0.0 && d.is_finite())) {
            return Err(InvalidKey::new("every_virtual_s", "expected a positive number of seconds"));
        }
        if !(0.0..=0.9).contains(&self.client_test_share) {
            return Err(InvalidKey::new(
                "client_test_share",
                format!("expected a share in [0, 0.9], got {}", self.client_test_share),
            ));
        }
        Ok(())
    }
}

/// The `[run]` section: when a run ends regardless of the scheduler, and how client jobs are
/// batched into cohorts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Stop once the global model reaches this version (this many aggregations).
    pub max_aggregations: Option<u64>,
    /// Stop once this many updates have been aggregated (device sessions): one budget for
    /// methods that merge one upload at a time and those that merge several.
    pub max_updates: Option<u64>,
    /// Stop at this virtual time, in seconds: events after it are not processed.
    pub max_virtual_time_s: Option<f64>,
    /// Stop as soon as an evaluation reaches this accuracy.
    pub stop_at_accuracy: Option<f64>,
    /// Report the virtual time at which this accuracy is first reached.
    pub target_accuracy: Option<f64>,
    /// Whether client jobs train in cohorts (see [`super::cohort`]).
    pub batching: Batching,
    /// Most jobs in one cohort (memory); absent: as many as are ready.
    pub max_cohort: Option<usize>,
    /// The host memory, in GB, a run may plan to use for model copies (see
    /// [`super::memory`]); absent: 80% of the machine's memory.
    pub memory_budget_gb: Option<f64>,
    /// Intra-op threads of each client job and of evaluation on the CPU; absent: 1. For
    /// machines with more cores than clients train at once, where a round waits for its
    /// largest client: `fl run` then defaults `--workers` to the cores over this. Results
    /// depend on it (a matrix product or a sum split over more threads rounds differently:
    /// the kdd23 cell's 128×784·784×200 product on 16 threads is not the bits of 1), never on
    /// `--workers`. Runs of a pack train on one thread: they keep 1.
    pub threads_per_job: Option<usize>,
}

impl RunConfig {
    /// Intra-op threads of each job ([`RunConfig::threads_per_job`], absent: 1).
    pub fn job_threads(&self) -> usize {
        self.threads_per_job.unwrap_or(1)
    }

    /// Checks that `max_virtual_time_s` is positive, `max_aggregations`, `max_updates`,
    /// `max_cohort` and `threads_per_job` at least 1, and the accuracies in (0, 1]; the error
    /// names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.max_virtual_time_s.is_some_and(|t| !(t > 0.0)) {
            return Err(InvalidKey::new("max_virtual_time_s", "expected a positive number of seconds"));
        }
        if self.max_aggregations == Some(0) {
            return Err(InvalidKey::new("max_aggregations", "expected at least 1 (absent: no limit)"));
        }
        if self.max_updates == Some(0) {
            return Err(InvalidKey::new("max_updates", "expected at least 1 (absent: no limit)"));
        }
        for (key, accuracy) in [("target_accuracy", self.target_accuracy), ("stop_at_accuracy", self.stop_at_accuracy)]
        {
            if accuracy.is_some_and(|a| !(a > 0.0 && a <= 1.0)) {
                return Err(InvalidKey::new(
                    key,
                    format!("expected an accuracy in (0, 1], got {}", accuracy.unwrap_or(0.0)),
                ));
            }
        }
        if self.max_cohort == Some(0) {
            return Err(InvalidKey::new("max_cohort", "expected at least 1"));
        }
        if self.threads_per_job == Some(0) {
            return Err(InvalidKey::new("threads_per_job", "expected at least 1 (absent: 1)"));
        }
        if self.memory_budget_gb.is_some_and(|g| !(g > 0.0)) {
            return Err(InvalidKey::new(
                "memory_budget_gb",
                "expected a positive number of GB (absent: 80% of memory)",
            ));
        }
        Ok(())
    }
}

/// Receives evaluation records as they happen.
pub trait Observer {
    /// `diagnostics` are the aggregator's scalar diagnostics at that moment.
    fn on_eval(&mut self, record: &EvalRecord, diagnostics: &[(String, f64)]) -> Result<()>;

    /// A note for the run log (how the run is computed, said once); printed by default.
    fn on_note(&mut self, note: &str) {
        eprintln!("note: {note}");
    }

    /// A client update the server rejected because it held NaN or infinite values (counted in
    /// [`EvalRecord::rejected_updates`] too; a note says so once).
    fn on_rejected(&mut self, _update: &RejectedUpdate) {}

    /// Whether the run should save a checkpoint now, at global version `version` and virtual
    /// time `virtual_time_s`: asked between events, after each aggregation (the engine never
    /// reads the host clock; the observer may). Never by default.
    fn wants_checkpoint(&mut self, _version: u64, _virtual_time_s: f64) -> bool {
        false
    }

    /// A checkpoint to keep: the run resumes from it with [`super::Simulation::restore`]. It
    /// comes after every evaluation it holds was reported to [`Observer::on_eval`].
    fn on_checkpoint(&mut self, _checkpoint: &super::Checkpoint) -> Result<()> {
        Ok(())
    }
}

/// A client update rejected before aggregation for holding NaN or infinite values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RejectedUpdate {
    /// The client that trained it.
    pub client: usize,
    /// Its job number in the run.
    pub job: u64,
    /// The global version it started from.
    pub base_version: u64,
    /// The aggregation it was to join: the global version that aggregation makes.
    pub version: u64,
    /// Virtual time of that aggregation, seconds.
    pub virtual_time_s: f64,
    /// Its mean training loss (often NaN itself).
    pub train_loss: f64,
}

/// Discards records (tests that only need the summary).
impl Observer for () {
    fn on_eval(&mut self, _: &EvalRecord, _: &[(String, f64)]) -> Result<()> {
        Ok(())
    }
}

/// Keeps records in memory.
impl Observer for Vec<EvalRecord> {
    fn on_eval(&mut self, record: &EvalRecord, _: &[(String, f64)]) -> Result<()> {
        self.push(record.clone());
        Ok(())
    }
}
