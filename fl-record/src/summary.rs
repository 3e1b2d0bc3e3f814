//! `Summary`: the end of a run, as `summary.json` keeps it.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::EvalRecord;

/// The end-of-run summary of the engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    /// Test accuracy at the last evaluation (NaN without evaluations).
    #[serde(deserialize_with = "nan_if_null")]
    pub final_accuracy: f64,
    /// Highest test accuracy over the evaluations (NaN if none ran the test set).
    #[serde(deserialize_with = "nan_if_null")]
    pub best_accuracy: f64,
    /// Test loss at the last evaluation (NaN without evaluations).
    #[serde(deserialize_with = "nan_if_null")]
    pub final_loss: f64,
    /// Virtual time at the end of the run, seconds.
    #[serde(deserialize_with = "nan_if_null")]
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
    #[serde(deserialize_with = "keys_from_strings")]
    pub staleness_histogram: BTreeMap<u64, u64>,
    /// Per client, in id order: jobs and virtual seconds spent on them (client fairness).
    pub clients: Vec<ClientStats>,
    /// Co-S²P's resource utilisation (Eq. 17) over every aggregation of the run (see
    /// [`EvalRecord::resource_utilization`]); NaN without aggregations or in older summaries.
    #[serde(deserialize_with = "nan_if_null")]
    pub resource_utilization: f64,
}

impl Default for Summary {
    /// A summary with nothing in it: NaN results, zero counts.
    fn default() -> Self {
        Summary {
            final_accuracy: f64::NAN,
            best_accuracy: f64::NAN,
            final_loss: f64::NAN,
            virtual_time_s: f64::NAN,
            aggregations: 0,
            updates: 0,
            evaluations: 0,
            target_accuracy: None,
            time_to_target_s: None,
            staleness_histogram: BTreeMap::new(),
            clients: Vec::new(),
            resource_utilization: f64::NAN,
        }
    }
}

/// What one client did during a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientStats {
    /// Jobs dispatched to it (the last ones may not have arrived when the run ended).
    pub jobs: u64,
    /// Sum of those jobs' virtual durations, seconds.
    pub busy_s: f64,
    /// The largest memory estimate of its jobs, bytes (parameters, gradients, optimizer states
    /// and activations: `fl_core::job_memory`); 0 in older summaries.
    pub peak_memory_bytes: f64,
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
            resource_utilization: f64::NAN,
        }
    }
}

/// `summary.json`: the engine's summary and the run's host wall time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryFile {
    /// The engine's summary (its keys at the top level of the file).
    #[serde(flatten)]
    pub summary: Summary,
    /// Host seconds from the start of the simulation to its end (NaN where unknown).
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub wall_time_s: f64,
}

fn nan() -> f64 {
    f64::NAN
}

/// JSON keys are strings; inside `SummaryFile`'s flattened keys serde cannot read them as
/// numbers by itself.
fn keys_from_strings<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u64, u64>, D::Error> {
    BTreeMap::<String, u64>::deserialize(d)?
        .into_iter()
        .map(|(k, v)| k.parse().map(|k| (k, v)).map_err(serde::de::Error::custom))
        .collect()
}

/// JSON has no NaN: serde_json writes it as `null`, which reads back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_file_round_trips_with_its_nan_fields() {
        let summary = Summary {
            final_accuracy: 0.5,
            best_accuracy: 0.75,
            final_loss: f64::NAN,
            virtual_time_s: 12.5,
            aggregations: 3,
            updates: 30,
            evaluations: 4,
            target_accuracy: Some(0.7),
            time_to_target_s: Some(10.0),
            staleness_histogram: BTreeMap::from([(0, 20), (1, 10)]),
            clients: vec![ClientStats { jobs: 3, busy_s: 4.5, peak_memory_bytes: 2.5e6 }],
            resource_utilization: 0.875,
        };
        let text = serde_json::to_string(&SummaryFile { summary: summary.clone(), wall_time_s: 2.0 }).unwrap();
        assert!(text.contains("\"final_loss\":null") && text.contains("\"wall_time_s\":2.0"), "{text}");
        let back: SummaryFile = serde_json::from_str(&text).unwrap();
        assert!(back.summary.final_loss.is_nan());
        assert_eq!(Summary { final_loss: 0.0, ..back.summary }, Summary { final_loss: 0.0, ..summary });
        assert_eq!(back.wall_time_s, 2.0);
    }

    #[test]
    fn an_older_summary_reads_with_defaults() {
        let back: SummaryFile = serde_json::from_str(r#"{"best_accuracy": 0.9, "final_accuracy": 0.8}"#).unwrap();
        assert_eq!((back.summary.best_accuracy, back.summary.final_accuracy), (0.9, 0.8));
        assert!(back.summary.final_loss.is_nan() && back.wall_time_s.is_nan());
        assert!(back.summary.clients.is_empty() && back.summary.time_to_target_s.is_none());
    }

    #[test]
    fn the_summary_of_records_takes_the_last_and_the_best() {
        let r = |version: u64, accuracy: f64| EvalRecord {
            virtual_time_s: version as f64 * 10.0,
            version,
            updates: 0,
            accuracy,
            loss: 1.0 / (version as f64 + 1.0),
            top5: f64::NAN,
            macro_f1: f64::NAN,
            resource_utilization: f64::NAN,
            client_accuracy: f64::NAN,
            client_top5: f64::NAN,
            client_macro_f1: f64::NAN,
            train_loss: f64::NAN,
            mean_staleness: f64::NAN,
            max_staleness: 0,
            bytes_up: 0.0,
            bytes_down: 0.0,
            rejected_updates: 0,
        };
        let records = [r(0, 0.1), r(1, 0.8), r(2, 0.7)];
        let s = Summary::from_records(&records, 25.0, 2, 20, &BTreeMap::new(), Some(0.75), Vec::new());
        assert_eq!((s.final_accuracy, s.best_accuracy, s.final_loss), (0.7, 0.8, 1.0 / 3.0));
        assert_eq!((s.evaluations, s.time_to_target_s), (3, Some(10.0)));
        assert!(Summary::from_records(&[], 0.0, 0, 0, &BTreeMap::new(), None, Vec::new()).final_accuracy.is_nan());
    }
}
