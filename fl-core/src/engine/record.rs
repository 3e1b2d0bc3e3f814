//! What a run reports: evaluation records, the run summary, and the observer that receives
//! records as they are produced (so nothing is lost if a run fails part-way).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::from_config::InvalidKey;

use super::cohort::Batching;

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
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig { every_aggregations: Some(1), every_virtual_s: None, test_every: 1, batch_size: 1000 }
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
        if self.every_virtual_s.is_some_and(|d| !(d > 0.0)) {
            return Err(InvalidKey::new("every_virtual_s", "expected a positive number of seconds"));
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
}

impl RunConfig {
    /// Checks that `max_virtual_time_s` is positive and `max_cohort` at least 1; the error
    /// names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.max_virtual_time_s.is_some_and(|t| !(t > 0.0)) {
            return Err(InvalidKey::new("max_virtual_time_s", "expected a positive number of seconds"));
        }
        if self.max_cohort == Some(0) {
            return Err(InvalidKey::new("max_cohort", "expected at least 1"));
        }
        Ok(())
    }
}

/// One evaluation of the global model. Every field is a deterministic function of the
/// configuration and seed (host timings are reported separately).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalRecord {
    /// Virtual time of the evaluation, seconds.
    pub virtual_time_s: f64,
    /// Global model version evaluated (the number of aggregations so far).
    pub version: u64,
    /// Client updates aggregated so far.
    pub updates: u64,
    /// Top-1 accuracy on the test set, in [0, 1] (NaN when this evaluation skipped the test
    /// set, see [`EvalConfig::test_every`]).
    pub accuracy: f64,
    /// Mean cross-entropy on the test set (NaN when the test set was skipped).
    pub loss: f64,
    /// Mean local training loss of the updates aggregated since the previous evaluation (NaN
    /// if there were none).
    pub train_loss: f64,
    /// Mean staleness, in versions, of those updates (NaN if there were none).
    pub mean_staleness: f64,
    /// Largest staleness, in versions, of those updates (0 if there were none).
    pub max_staleness: u64,
    /// Bytes uploaded by clients so far (updates of arrived jobs, and split-learning relay).
    pub bytes_up: f64,
    /// Bytes downloaded by clients so far (models of dispatched jobs, mid-training pulls, and
    /// split-learning relay).
    pub bytes_down: f64,
}

impl EvalRecord {
    /// The header line of the metrics CSV, the fields in declaration order.
    pub const CSV_HEADER: &'static str =
        "virtual_time_s,version,updates,accuracy,loss,train_loss,mean_staleness,max_staleness,bytes_up,bytes_down";

    /// The record as one CSV line (no newline), in [`EvalRecord::CSV_HEADER`]'s order.
    pub fn csv_row(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{}",
            self.virtual_time_s,
            self.version,
            self.updates,
            self.accuracy,
            self.loss,
            self.train_loss,
            self.mean_staleness,
            self.max_staleness,
            self.bytes_up,
            self.bytes_down
        )
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

/// The end-of-run summary (`summary.json` adds host timings to it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Test accuracy at the last evaluation (NaN without evaluations).
    pub final_accuracy: f64,
    /// Highest test accuracy over the evaluations (NaN if none ran the test set).
    pub best_accuracy: f64,
    /// Test loss at the last evaluation (NaN without evaluations).
    pub final_loss: f64,
    /// Virtual time at the end of the run, seconds.
    pub virtual_time_s: f64,
    /// Aggregations made: the final global version.
    pub aggregations: u64,
    /// Client updates aggregated.
    pub updates: u64,
    /// Evaluation records produced.
    pub evaluations: usize,
    /// The `[run] target_accuracy` the run was asked to time, if any.
    pub target_accuracy: Option<f64>,
    /// Virtual seconds until `target_accuracy` was first reached.
    pub time_to_target_s: Option<f64>,
    /// Aggregated updates by staleness (versions).
    pub staleness_histogram: BTreeMap<u64, u64>,
    /// Per client, in id order: jobs and virtual seconds spent on them (client fairness).
    pub clients: Vec<ClientStats>,
}

/// What one client did during a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClientStats {
    /// Jobs dispatched to it (the last ones may not have arrived when the run ended).
    pub jobs: u64,
    /// Sum of those jobs' virtual durations, seconds.
    pub busy_s: f64,
}

impl Summary {
    /// The summary of a run from its evaluation records and end-of-run counters.
    pub fn from_records(
        records: &[EvalRecord],
        virtual_time_s: f64,
        aggregations: u64,
        updates: u64,
        staleness_histogram: &BTreeMap<u64, u64>,
        target_accuracy: Option<f64>,
        clients: Vec<ClientStats>,
    ) -> Self {
        let last = records.last();
        Summary {
            final_accuracy: last.map_or(f64::NAN, |r| r.accuracy),
            best_accuracy: records.iter().map(|r| r.accuracy).fold(f64::NAN, f64::max),
            final_loss: last.map_or(f64::NAN, |r| r.loss),
            virtual_time_s,
            aggregations,
            updates,
            evaluations: records.len(),
            target_accuracy,
            time_to_target_s: target_accuracy
                .and_then(|t| records.iter().find(|r| r.accuracy >= t).map(|r| r.virtual_time_s)),
            staleness_histogram: staleness_histogram.clone(),
            clients,
        }
    }
}
