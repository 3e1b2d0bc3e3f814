//! The grid's figures: test accuracy and/or test loss against rounds or virtual time, one panel
//! per (dataset, setting) and metric, one curve per run (the first seed). A panel whose setting
//! is not run at this scale shows the scale's first setting of the dataset instead, and says so
//! in its title. Sweep figures plot one row's time to target or best accuracy against a setting
//! coordinate (β, M), one line per value of another.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::grid::{DatasetEntry, Figure, Grid, SettingRef, Sweep, group};
use super::report::Results;
use crate::plot::{Panel, Series, write_png};

/// Writes every figure with at least one curve into `dir`; returns their titles and files.
pub fn write_figures(figures: &[Figure], results: &Results, dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut written = Vec::new();
    for figure in figures {
        let mut panels = Vec::new();
        for spec in &figure.panels {
            let wanted = spec.setting.id();
            let Some(setting) = resolve_setting(results, &spec.dataset, &wanted, &spec.runs) else { continue };
            let group = group(&spec.dataset, &setting);
            let shown = |id: &str| match &spec.setting {
                SettingRef::Alpha(_) => format!("α = {}", id.trim_start_matches('a')),
                SettingRef::Id(_) => id.to_string(),
            };
            let note = if setting == wanted { String::new() } else { format!(" (paper: {})", shown(&wanted)) };
            let by_time = figure.x == "time";
            for metric in &figure.metrics {
                let series = spec
                    .runs
                    .iter()
                    .filter_map(|id| {
                        let outcome = results.outcomes.get(&format!("{group}/{id}"))?.first()?;
                        let points = outcome
                            .curve
                            .iter()
                            .map(|p| {
                                let x = if by_time { p.time_s } else { p.version };
                                (x, if metric == "loss" { p.loss } else { p.accuracy * 100.0 })
                            })
                            .collect();
                        Some(Series { label: id.clone(), points })
                    })
                    .collect::<Vec<_>>();
                if series.is_empty() {
                    continue;
                }
                let (name, y_label) =
                    if metric == "loss" { ("test loss", "cross-entropy") } else { ("test accuracy", "accuracy (%)") };
                panels.push(Panel {
                    title: format!("{} {}{note}: {name}", spec.dataset, shown(&setting)),
                    x_label: if by_time { "virtual time (s)".into() } else { "round".into() },
                    y_label: y_label.into(),
                    series,
                    ..Panel::default()
                });
            }
        }
        if panels.is_empty() {
            continue;
        }
        let path = dir.join(&figure.file);
        write_png(&path, &panels)?;
        written.push((figure.title.clone(), path));
    }
    Ok(written)
}

/// `setting` if any of `runs` is planned there, else the first planned setting of the dataset
/// that has one of them; None when the dataset has none (missing or not selected).
fn resolve_setting(results: &Results, dataset: &str, setting: &str, runs: &[String]) -> Option<String> {
    let planned =
        |s: &str| runs.iter().any(|id| results.runs.iter().any(|r| r.key == format!("{}/{id}", group(dataset, s))));
    if planned(setting) {
        return Some(setting.to_string());
    }
    results.runs.iter().filter(|r| r.dataset == dataset).map(|r| r.setting.clone()).find(|s| planned(s))
}

/// Writes every sweep figure with at least one point into `dir`; returns their titles and files.
pub fn write_sweeps(grid: &Grid, results: &Results, dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut written = Vec::new();
    for sweep in &grid.sweeps {
        let panels: Vec<Panel> = grid
            .datasets
            .iter()
            .flat_map(|(dataset, entry)| sweep.metrics.iter().map(move |m| (dataset, entry, m)))
            .filter_map(|(dataset, entry, metric)| {
                let lines = sweep_lines(sweep, dataset, entry, metric, results);
                if lines.is_empty() {
                    return None;
                }
                let series = lines.into_iter().map(|(label, points)| Series { label, points }).collect();
                let (name, y_label) = match metric.as_str() {
                    "time_to_target" => ("time to target", "virtual seconds"),
                    _ => ("best test accuracy", "accuracy (%)"),
                };
                Some(Panel {
                    title: format!("{dataset}, {}: {name}", sweep.run),
                    x_label: sweep.x.clone(),
                    y_label: y_label.into(),
                    series,
                    ..Panel::default()
                })
            })
            .collect();
        if panels.is_empty() {
            continue;
        }
        let path = dir.join(&sweep.file);
        write_png(&path, &panels)?;
        written.push((sweep.title.clone(), path));
    }
    Ok(written)
}

/// The lines of a sweep panel: per value of the series coordinate, (x, metric) of the finished
/// runs of the sweep's row, in x order. Runs that never reached the target have no time point.
fn sweep_lines(
    sweep: &Sweep,
    dataset: &str,
    entry: &DatasetEntry,
    metric: &str,
    results: &Results,
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for setting in entry.all_settings() {
        let (Some(&x), Some(&line)) = (setting.coords.get(&sweep.x), setting.coords.get(&sweep.series)) else {
            continue;
        };
        let key = format!("{}/{}", group(dataset, &setting.id), sweep.run);
        let Some(o) = results.outcomes.get(&key).and_then(|o| o.first()) else { continue };
        let y = match metric {
            "time_to_target" => o.time_to_target_s,
            _ => Some(o.best_accuracy * 100.0),
        };
        if let Some(y) = y {
            lines.entry(format!("{} = {line}", sweep.series)).or_default().push((x, y));
        }
    }
    for points in lines.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::outcome::Outcome;

    #[test]
    fn sweep_lines_group_runs_by_the_series_coordinate() {
        let grid: Grid = toml::from_str(
            r#"
            paper = "p"
            title = "t"
            rows = []
            scales = {}
            [datasets.d]
            base = "b.toml"
            settings = [
                { id = "b0.9-m2", coords = { beta = 0.9, M = 2 } },
                { id = "b0.1-m2", coords = { beta = 0.1, M = 2 } },
                { id = "b0.1-m4", coords = { beta = 0.1, M = 4 } },
                { id = "other" },
            ]
            [[sweeps]]
            file = "f.png"
            title = "F"
            run = "ours"
            x = "beta"
            series = "M"
            metrics = ["time_to_target"]
            "#,
        )
        .unwrap();
        let outcome = |t: Option<f64>| Outcome {
            seed: 1,
            best_accuracy: 0.9,
            final_accuracy: 0.9,
            final_loss: 0.1,
            wall_time_s: 1.0,
            time_to_target_s: t,
            curve: vec![],
            server_loss: vec![],
            participation: vec![],
            diagnostics: BTreeMap::new(),
        };
        let outcomes = BTreeMap::from([
            ("d-b0.9-m2/ours".to_string(), vec![outcome(Some(300.0))]),
            ("d-b0.1-m2/ours".to_string(), vec![outcome(Some(100.0))]),
            ("d-b0.1-m4/ours".to_string(), vec![outcome(None)]),
            ("d-other/ours".to_string(), vec![outcome(Some(1.0))]),
        ]);
        let results = Results { scale: "s", runs: &[], outcomes, missing: BTreeMap::new() };
        let lines = sweep_lines(&grid.sweeps[0], "d", &grid.datasets["d"], "time_to_target", &results);
        assert_eq!(lines, BTreeMap::from([("M = 2".to_string(), vec![(0.1, 100.0), (0.9, 300.0)])]));
        let acc = sweep_lines(&grid.sweeps[0], "d", &grid.datasets["d"], "best_accuracy", &results);
        assert_eq!(acc["M = 4"], vec![(0.1, 90.0)]);
    }
}
