//! What is known of every planned run of a report: finished outcomes by run key, missing
//! datasets, and the per-cell and per-chain values the tables and orderings read.

use std::collections::BTreeMap;

use crate::reproduce::grid::{OrderMetric, PlannedRun, group};
use crate::reproduce::outcome::Outcome;

use super::expected::ColumnMetric;

/// What is known about every planned run.
pub struct Results<'a> {
    pub scale: &'a str,
    pub runs: &'a [PlannedRun],
    /// Finished outcomes by run key, one per finished seed.
    pub outcomes: BTreeMap<String, Vec<Outcome>>,
    /// The grid's datasets that are not present, by key.
    pub missing: BTreeMap<String, MissingData>,
}

/// A dataset the machine does not have.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MissingData {
    /// Its name in words (`CIFAR-10`).
    pub title: String,
    /// The command that fetches it where there is internet.
    pub fetch: String,
}

/// Ours for a table cell.
pub(super) enum Ours<'a> {
    /// The finished seeds.
    Done(&'a [Outcome]),
    NotRunAtScale,
    /// The dataset, by title, is not present.
    MissingData(&'a str),
    NotFinished,
}

pub(super) fn mean(o: &[Outcome], f: impl Fn(&Outcome) -> f64) -> f64 {
    o.iter().map(f).sum::<f64>() / o.len() as f64
}

/// The sample standard deviation over seeds; None for a single seed.
pub(super) fn std_dev(o: &[Outcome], f: impl Fn(&Outcome) -> f64) -> Option<f64> {
    let m = mean(o, &f);
    (o.len() > 1).then(|| (o.iter().map(|x| (f(x) - m).powi(2)).sum::<f64>() / (o.len() - 1) as f64).sqrt())
}

/// Mean time to target over seeds; None if a seed never reached it.
pub(super) fn time_to_target(o: &[Outcome]) -> Option<f64> {
    let times = o.iter().map(|o| o.time_to_target_s).collect::<Option<Vec<f64>>>()?;
    Some(times.iter().sum::<f64>() / times.len() as f64)
}

impl Results<'_> {
    pub(super) fn ours(&self, dataset: &str, setting: &str, row: &str) -> Ours<'_> {
        if let Some(m) = self.missing.get(dataset) {
            return Ours::MissingData(&m.title);
        }
        let key = format!("{}/{row}", group(dataset, setting));
        if !self.runs.iter().any(|r| r.key == key) {
            return Ours::NotRunAtScale;
        }
        match self.outcomes.get(&key) {
            Some(o) if !o.is_empty() => Ours::Done(o),
            _ => Ours::NotFinished,
        }
    }

    /// The variants that changed some run of `row`, in order: a report names the row with them.
    pub fn varied_by(&self, row: &str) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.runs.iter().filter(|r| r.id == row).flat_map(|r| &r.varied_by) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }

    /// The name a report gives a row of its grid: `name`, followed by `[variant, …]` where the
    /// report's variants changed its runs (the scale's own report has the unchanged row).
    pub fn row_name(&self, row: &str, name: &str) -> String {
        match self.varied_by(row)[..] {
            [] => name.to_string(),
            ref variants => format!("{name} [{}]", variants.join(", ")),
        }
    }

    /// How many seeds of a row's run at (dataset, setting) were planned.
    pub(super) fn planned_seeds(&self, dataset: &str, setting: &str, row: &str) -> usize {
        let key = format!("{}/{row}", group(dataset, setting));
        self.runs.iter().filter(|r| r.key == key).count()
    }

    /// A chain's values for an ordering at a (dataset, setting), each the mean over the seeds
    /// every row of the chain finished (and, for times, reached the target on), so that rows are
    /// compared on the same partition draws; also those seeds. None if some row has none.
    pub(super) fn chain_values(
        &self,
        metric: OrderMetric,
        clients: &[usize],
        dataset: &str,
        setting: &str,
        chain: &[String],
    ) -> Option<(Vec<f64>, Vec<u64>)> {
        let rows: Vec<&[Outcome]> = chain
            .iter()
            .map(|row| match self.ours(dataset, setting, row) {
                Ours::Done(o) => Some(o),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let mut shared: Vec<u64> = rows[0].iter().map(|o| o.seed).collect();
        shared.retain(|s| rows.iter().all(|o| o.iter().any(|o| o.seed == *s)));
        shared.sort_unstable();
        if shared.is_empty() {
            return None;
        }
        let values = rows
            .iter()
            .map(|o| {
                let on_shared: Vec<Outcome> = o.iter().filter(|o| shared.contains(&o.seed)).cloned().collect();
                match metric {
                    OrderMetric::BestAccuracy => Some(mean(&on_shared, |o| o.best_accuracy)),
                    OrderMetric::TimeToTarget => time_to_target(&on_shared),
                    OrderMetric::ResourceUtilization => Some(mean(&on_shared, |o| o.resource_utilization)),
                    OrderMetric::JobTime => Some(mean(&on_shared, |o| o.client_figure(ColumnMetric::JobTime, clients))),
                    OrderMetric::PeakMemory => {
                        Some(mean(&on_shared, |o| o.client_figure(ColumnMetric::PeakMemory, clients)))
                    }
                }
            })
            .collect::<Option<_>>()?;
        Some((values, shared))
    }
}

/// A time column's value for one row: ours (mean over seeds), if it reached the target.
pub(super) fn ours_time(metric: ColumnMetric, factor: f64, o: &[Outcome]) -> Option<f64> {
    let t = time_to_target(o)?;
    Some(if metric == ColumnMetric::Budget { factor * t } else { t })
}

#[cfg(test)]
pub mod fixtures {
    //! Planned runs and outcomes for the report's tests.

    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use crate::reproduce::grid::{PlannedRun, group};
    use crate::reproduce::outcome::Outcome;

    pub fn run(dataset: &str, alpha: f64, id: &str) -> PlannedRun {
        PlannedRun {
            key: format!("{}/{id}", group(dataset, &format!("a{alpha}"))),
            dataset: dataset.into(),
            setting: format!("a{alpha}"),
            id: id.into(),
            seed: 1,
            may_diverge: false,
            varied_by: Vec::new(),
            experiment: String::new(),
            dir: PathBuf::new(),
        }
    }

    pub fn outcome(best: f64, last: f64) -> Outcome {
        Outcome {
            seed: 1,
            best_accuracy: best,
            final_accuracy: last,
            final_loss: 0.1,
            wall_time_s: 1.0,
            resource_utilization: f64::NAN,
            target_accuracy: None,
            time_to_target_s: None,
            curve: vec![],
            server_loss: vec![],
            participation: vec![],
            job_time_s: vec![],
            peak_memory_bytes: vec![],
            diagnostics: BTreeMap::new(),
            traces: vec![],
        }
    }
}
