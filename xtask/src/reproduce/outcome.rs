//! What a run left in its directory, read back for reports: `summary.json`, the per-round
//! curve of `metrics.csv` (both through `fl-record`, the types the engine writes) and the last
//! diagnostics of `events.jsonl`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use fl_record::{EvalRecord, SummaryFile};

/// One evaluation of the global model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub version: f64,
    pub time_s: f64,
    pub accuracy: f64,
    pub loss: f64,
    pub top5: f64,
    pub macro_f1: f64,
    /// The clients' personalised models on their own splits (NaN without splits).
    pub client_accuracy: f64,
    pub client_top5: f64,
    pub client_macro_f1: f64,
}

#[cfg(test)]
impl Point {
    /// A point of `accuracy` and `loss` at `version` and `time_s`, its other scores NaN.
    pub fn at(version: f64, time_s: f64, accuracy: f64, loss: f64) -> Point {
        Point {
            version,
            time_s,
            accuracy,
            loss,
            top5: f64::NAN,
            macro_f1: f64::NAN,
            client_accuracy: f64::NAN,
            client_top5: f64::NAN,
            client_macro_f1: f64::NAN,
        }
    }
}

/// A finished run's results.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed of the planned run it came from.
    pub seed: u64,
    pub best_accuracy: f64,
    pub final_accuracy: f64,
    pub final_loss: f64,
    pub wall_time_s: f64,
    /// Resource utilisation over the run (Co-S²P's Eq. 17; NaN in older records).
    pub resource_utilization: f64,
    /// The experiment's target accuracy, if it had one.
    pub target_accuracy: Option<f64>,
    /// Virtual seconds until the experiment's target accuracy was first reached.
    pub time_to_target_s: Option<f64>,
    /// Every evaluation that ran the test set.
    pub curve: Vec<Point>,
    /// The mean training loss of the updates of aggregation 1, 2, … (index r − 1), as far as
    /// every aggregation was logged (asyncnc's "server loss").
    pub server_loss: Vec<f64>,
    /// Jobs each client was given, in client order.
    pub participation: Vec<u64>,
    /// Each client's mean job time (virtual seconds from dispatch to arrival), in client order.
    pub job_time_s: Vec<f64>,
    /// Each client's largest job memory estimate, bytes, in client order (0: not recorded).
    pub peak_memory_bytes: Vec<f64>,
    /// The diagnostics of the last evaluation.
    pub diagnostics: BTreeMap<String, f64>,
    /// The diagnostics whose names hold a `.` (per-device traces such as `alpha.3`) at each
    /// evaluation, with its virtual time.
    pub traces: Vec<(f64, BTreeMap<String, f64>)>,
}

impl Outcome {
    /// Reads `dir`, the run of `seed`; a run without `summary.json` has not finished.
    pub fn read(dir: &Path, seed: u64) -> Result<Outcome> {
        let summary_path = dir.join("summary.json");
        let text =
            std::fs::read_to_string(&summary_path).with_context(|| format!("reading {}", summary_path.display()))?;
        let file: SummaryFile =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", summary_path.display()))?;
        let (curve, server_loss) = read_metrics(&dir.join("metrics.csv"))?;
        let summary = file.summary;
        let events_path = dir.join("events.jsonl");
        let events =
            std::fs::read_to_string(&events_path).with_context(|| format!("reading {}", events_path.display()))?;
        let (diagnostics, traces) = (last_diagnostics(&events, &events_path)?, traces(&events, &events_path)?);
        Ok(Outcome {
            seed,
            best_accuracy: summary.best_accuracy,
            final_accuracy: summary.final_accuracy,
            final_loss: summary.final_loss,
            wall_time_s: file.wall_time_s,
            resource_utilization: summary.resource_utilization,
            target_accuracy: summary.target_accuracy,
            time_to_target_s: summary.time_to_target_s,
            participation: summary.clients.iter().map(|c| c.jobs).collect(),
            job_time_s: summary.clients.iter().map(|c| c.busy_s / c.jobs.max(1) as f64).collect(),
            peak_memory_bytes: summary.clients.iter().map(|c| c.peak_memory_bytes).collect(),
            curve,
            server_loss,
            diagnostics,
            traces,
        })
    }

    /// Whether a loss went NaN or infinite anywhere.
    pub fn diverged(&self) -> bool {
        !self.final_loss.is_finite() || self.curve.iter().any(|p| !p.loss.is_finite())
    }

    /// The best accuracy evaluated within `budget_s` virtual seconds.
    pub fn best_within(&self, budget_s: f64) -> f64 {
        self.curve.iter().filter(|p| p.time_s <= budget_s).map(|p| p.accuracy).fold(f64::NAN, f64::max)
    }

    /// The mean accuracy of the last `n` evaluations (fewer if it has fewer).
    pub fn last_mean(&self, n: usize) -> f64 {
        let tail = &self.curve[self.curve.len().saturating_sub(n)..];
        tail.iter().map(|p| p.accuracy).sum::<f64>() / tail.len() as f64
    }

    /// A score of the final evaluation (top-5, macro-F1) or of the run (RU), in [0, 1].
    pub fn final_score(&self, metric: crate::reproduce::report::ColumnMetric) -> f64 {
        use crate::reproduce::report::ColumnMetric;
        let last = self.curve.last();
        match metric {
            ColumnMetric::Top5 => last.map_or(f64::NAN, |p| p.top5),
            ColumnMetric::MacroF1 => last.map_or(f64::NAN, |p| p.macro_f1),
            ColumnMetric::ClientTop1 => last.map_or(f64::NAN, |p| p.client_accuracy),
            ColumnMetric::ClientTop5 => last.map_or(f64::NAN, |p| p.client_top5),
            ColumnMetric::ClientMacroF1 => last.map_or(f64::NAN, |p| p.client_macro_f1),
            ColumnMetric::ResourceUtilization => self.resource_utilization,
            _ => f64::NAN,
        }
    }

    /// A per-client figure over `clients` (ids): the mean job time in seconds or the largest
    /// peak memory in MB; NaN when none of them is recorded.
    pub fn client_figure(&self, metric: crate::reproduce::report::ColumnMetric, clients: &[usize]) -> f64 {
        use crate::reproduce::report::ColumnMetric;
        match metric {
            ColumnMetric::JobTime => {
                let times: Vec<f64> = clients.iter().filter_map(|&c| self.job_time_s.get(c).copied()).collect();
                if times.is_empty() { f64::NAN } else { times.iter().sum::<f64>() / times.len() as f64 }
            }
            ColumnMetric::PeakMemory => {
                let peak = clients.iter().filter_map(|&c| self.peak_memory_bytes.get(c).copied()).fold(0.0, f64::max);
                if peak > 0.0 { peak / 1e6 } else { f64::NAN }
            }
            _ => f64::NAN,
        }
    }

    /// Virtual seconds the run lasted.
    pub fn duration_s(&self) -> f64 {
        self.curve.last().map_or(0.0, |p| p.time_s)
    }
}

/// The tested evaluations, and the training loss of each aggregation while every one is logged.
fn read_metrics(path: &Path) -> Result<(Vec<Point>, Vec<f64>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let records = EvalRecord::read_csv(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut server_loss = Vec::new();
    for r in &records {
        if r.version >= 1 && r.train_loss.is_finite() && server_loss.len() + 1 == r.version as usize {
            server_loss.push(r.train_loss);
        }
    }
    // A record whose evaluation did not run the test set (`[eval] test_every`) has no point.
    let curve = records
        .iter()
        .filter(|r| r.tested())
        .map(|r| Point {
            version: r.version as f64,
            time_s: r.virtual_time_s,
            accuracy: r.accuracy,
            loss: r.loss,
            top5: r.top5,
            macro_f1: r.macro_f1,
            client_accuracy: r.client_accuracy,
            client_top5: r.client_top5,
            client_macro_f1: r.client_macro_f1,
        })
        .collect();
    Ok((curve, server_loss))
}

/// The diagnostics of the last event of `text`, the event log at `path`.
fn last_diagnostics(text: &str, path: &Path) -> Result<BTreeMap<String, f64>> {
    let Some(last) = text.lines().rev().find(|l| !l.trim().is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let event: serde_json::Value =
        serde_json::from_str(last).with_context(|| format!("{}: the last line is not JSON", path.display()))?;
    let Some(diagnostics) = event["diagnostics"].as_object() else {
        bail!("{}: the last event has no `diagnostics` object", path.display());
    };
    Ok(diagnostics.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
}

/// The dotted diagnostics of every evaluation event of `text`, the event log at `path`, with
/// its virtual time.
fn traces(text: &str, path: &Path) -> Result<Vec<(f64, BTreeMap<String, f64>)>> {
    let mut traces = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| l.contains("\"eval\"") && l.contains('.')) {
        let event: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: line {} is not JSON", path.display(), i + 1))?;
        let (Some(time), Some(diagnostics)) = (event["virtual_time_s"].as_f64(), event["diagnostics"].as_object())
        else {
            continue;
        };
        let dotted: BTreeMap<String, f64> = diagnostics
            .iter()
            .filter(|(k, _)| k.contains('.'))
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
            .collect();
        if !dotted.is_empty() {
            traces.push((time, dotted));
        }
    }
    Ok(traces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::report::ColumnMetric;

    #[test]
    fn reads_summary_curve_and_last_diagnostics() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(
            p.join("summary.json"),
            r#"{"best_accuracy":0.9,"final_accuracy":0.8,"final_loss":null,"wall_time_s":3.5,"time_to_target_s":2.0}"#,
        )
        .unwrap();
        std::fs::write(
            p.join("metrics.csv"),
            "virtual_time_s,version,accuracy,loss,top5,macro_f1,client_accuracy,client_top5,client_macro_f1\n\
             1,0,0.1,2.3,0.5,0.05,0.125,0.5,0.25\n1.5,1,NaN,NaN,NaN,NaN,NaN,NaN,NaN\n2,1,0.9,NaN,1,0.875,0.75,1,0.625\n",
        )
        .unwrap();
        std::fs::write(
            p.join("events.jsonl"),
            "{\"diagnostics\":{\"tau\":1,\"alpha.3\":0.5},\"event\":\"eval\",\"virtual_time_s\":1.0}\n\
             {\"diagnostics\":{\"tau\":2,\"gamma_star\":10},\"event\":\"eval\"}\n",
        )
        .unwrap();
        let o = Outcome::read(p, 7).unwrap();
        assert_eq!((o.seed, o.best_accuracy, o.final_accuracy, o.wall_time_s), (7, 0.9, 0.8, 3.5));
        assert!(o.final_loss.is_nan() && o.diverged());
        assert_eq!(
            o.curve[0],
            Point {
                top5: 0.5,
                macro_f1: 0.05,
                client_accuracy: 0.125,
                client_top5: 0.5,
                client_macro_f1: 0.25,
                ..Point::at(0.0, 1.0, 0.1, 2.3)
            }
        );
        assert_eq!(o.curve.len(), 2, "a record without a test pass has no point");
        assert!(o.server_loss.is_empty() && o.participation.is_empty(), "no train_loss column, no clients");
        assert_eq!(o.time_to_target_s, Some(2.0));
        // The final evaluation's top-5 and macro-F1; RU absent from this older summary.
        assert_eq!((o.final_score(ColumnMetric::Top5), o.final_score(ColumnMetric::MacroF1)), (1.0, 0.875));
        let client = [ColumnMetric::ClientTop1, ColumnMetric::ClientTop5, ColumnMetric::ClientMacroF1];
        assert_eq!(client.map(|m| o.final_score(m)), [0.75, 1.0, 0.625], "the last tested evaluation's client scores");
        assert!(o.final_score(ColumnMetric::ResourceUtilization).is_nan());
        assert_eq!((o.best_within(1.5), o.best_within(2.0), o.duration_s()), (0.1, 0.9, 2.0));
        assert_eq!(o.diagnostics["tau"], 2.0);
        assert_eq!(o.diagnostics["gamma_star"], 10.0);
        assert_eq!(
            o.traces,
            [(1.0, BTreeMap::from([("alpha.3".to_string(), 0.5)]))],
            "the dotted ones, with their time"
        );
    }

    #[test]
    fn reads_the_server_loss_per_round_and_the_participation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(
            p.join("metrics.csv"),
            "virtual_time_s,version,updates,accuracy,loss,train_loss\n0,0,0,0.1,2.3,NaN\n1,1,5,NaN,NaN,1.5\n2,2,10,0.8,0.6,0.9\n",
        )
        .unwrap();
        std::fs::write(p.join("summary.json"), r#"{"wall_time_s": 4.0, "clients": [{"jobs": 2}, {"jobs": 0}]}"#)
            .unwrap();
        std::fs::write(p.join("events.jsonl"), "{\"diagnostics\":{}}\n").unwrap();
        let o = Outcome::read(p, 1).unwrap();
        assert_eq!(o.server_loss, vec![1.5, 0.9]);
        assert_eq!(o.curve.iter().map(|q| (q.version, q.accuracy)).collect::<Vec<_>>(), vec![(0.0, 0.1), (2.0, 0.8)]);
        assert_eq!(o.participation, vec![2, 0]);
    }

    #[test]
    fn an_unfinished_run_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = format!("{:#}", Outcome::read(dir.path(), 1).unwrap_err());
        assert!(err.contains("summary.json"), "{err}");
    }
}
