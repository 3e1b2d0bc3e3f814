//! The grid's figures, one PNG per paper figure with its panels side by side: test accuracy
//! and/or test loss against rounds or virtual time, one panel per (dataset, setting) and metric,
//! one curve per run named as the paper names it (the mean over seeds with a ± one standard
//! deviation band when several seeds finished). An accuracy panel whose curves end close together
//! gets a second panel zoomed on the last half of the run, and a figure against virtual time a bar
//! panel of each run's time to target (where the runs have a target accuracy). A panel whose
//! setting is not run at this scale shows the scale's first setting of the dataset instead, and
//! says so in its title. Sweep figures plot one row's time to target or best accuracy against a
//! setting coordinate (β, M), one line per value of another.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::grid::{DatasetEntry, Figure, Grid, PanelSpec, SWEEP_METRICS, group};
use super::outcome::Outcome;
use super::report::{ColumnMetric, Expected, Results};
use crate::plot::{Panel, Series, SeriesStyle, write_png};

/// A zoom panel is added when the curves' last halves span less than this share of the panel.
const ZOOM_BELOW: f64 = 0.25;

/// The legend name of every row and extra run: its `label`, else its row's "Method Level" in the
/// paper's tables, else its id.
pub fn run_names(grid: &Grid, expected: &Expected) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for table in &expected.tables {
        for row in &table.rows {
            if let Some(run) = &row.run {
                names.entry(run.clone()).or_insert_with(|| row.name());
            }
        }
    }
    let labels = grid.rows.iter().map(|r| (&r.id, &r.label)).chain(grid.extra.iter().map(|e| (&e.id, &e.label)));
    for (id, label) in labels {
        match label {
            Some(l) => {
                names.insert(id.clone(), l.clone());
            }
            None => {
                names.entry(id.clone()).or_insert_with(|| id.clone());
            }
        }
    }
    names
}

/// Writes every figure with at least one curve into `dir`; returns their titles and files.
pub fn write_figures(
    grid: &Grid,
    names: &BTreeMap<String, String>,
    results: &Results,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>> {
    let mut written = Vec::new();
    for figure in &grid.figures {
        let panels: Vec<Panel> =
            figure.panels.iter().flat_map(|spec| panels_of(grid, figure, spec, names, results)).collect();
        written.extend(write_figure(dir, &figure.file, &figure.title, &panels)?);
    }
    Ok(written)
}

/// Writes `panels` as `dir/file` unless there are none; returns the title and file written.
pub(super) fn write_figure(dir: &Path, file: &str, title: &str, panels: &[Panel]) -> Result<Option<(String, PathBuf)>> {
    if panels.is_empty() {
        return Ok(None);
    }
    let path = dir.join(file);
    write_png(&path, panels)?;
    Ok(Some((title.to_string(), path)))
}

/// The panels of one (dataset, setting) of a figure: per metric a curve panel, a zoom where the
/// curves end close together, and the time-to-target bars of a figure against virtual time.
fn panels_of(
    grid: &Grid,
    figure: &Figure,
    spec: &PanelSpec,
    names: &BTreeMap<String, String>,
    results: &Results,
) -> Vec<Panel> {
    let wanted = spec.setting.id();
    let Some(setting) = resolve_setting(results, &spec.dataset, &wanted, &spec.runs) else { return Vec::new() };
    let group = group(&spec.dataset, &setting);
    let words = |id: &str| grid.setting_words(&spec.dataset, id);
    let dataset = grid.panel_name(&spec.dataset);
    let note = if setting == wanted { String::new() } else { format!(" (the paper's: {})", words(&wanted)) };
    let place = format!("{dataset}, {}{note}", words(&setting));
    let by_time = figure.x == "time";
    let runs: Vec<(&String, &[Outcome])> = spec
        .runs
        .iter()
        .filter_map(|id| Some((id, results.outcomes.get(&format!("{group}/{id}"))?.as_slice())))
        .filter(|(_, o)| !o.is_empty())
        .collect();
    if runs.is_empty() {
        return Vec::new();
    }
    let name = |id: &String| names.get(id).cloned().unwrap_or_else(|| id.clone());
    let mut panels = Vec::new();
    for metric in &figure.metrics {
        let loss = metric == "loss";
        let series: Vec<Series> = runs
            .iter()
            .map(|(id, outcomes)| {
                let value = |p: &super::outcome::Point| if loss { p.loss } else { p.accuracy * 100.0 };
                let x = |p: &super::outcome::Point| if by_time { p.time_s } else { p.version };
                seeds_series(name(id), outcomes, x, value)
            })
            .collect();
        let (what, y_label) = if loss { ("test loss", "cross-entropy") } else { ("test accuracy", "accuracy (%)") };
        let panel = Panel {
            title: format!("{place}: {what}"),
            x_label: if by_time { "virtual time (s)".into() } else { "round".into() },
            y_label: y_label.into(),
            series,
            ..Panel::default()
        };
        let zoom = (!loss).then(|| zoom_range(&panel.series)).flatten();
        let zoomed = zoom.map(|(x_range, y_range)| Panel {
            title: format!("{place}: {what}, each run's last half (zoom)"),
            x_range: Some(x_range),
            y_range: Some(y_range),
            series: panel.series.clone(),
            x_label: panel.x_label.clone(),
            y_label: panel.y_label.clone(),
            ..Panel::default()
        });
        panels.push(panel);
        panels.extend(zoomed);
    }
    // Runs without a target accuracy (the paper names none) get no time-to-target panel.
    let target = runs.iter().find_map(|(_, o)| o.first()?.target_accuracy);
    if let (true, Some(target)) = (by_time, target) {
        let bars = runs
            .iter()
            .map(|(id, o)| {
                let times: Option<Vec<f64>> = o.iter().map(|o| o.time_to_target_s).collect();
                let mean = times.map_or(f64::NAN, |t| t.iter().sum::<f64>() / t.len() as f64);
                let label = if mean.is_nan() { format!("{} (not reached)", name(id)) } else { name(id) };
                (label, mean)
            })
            .collect();
        panels.push(Panel {
            title: format!("{place}: time to {}% test accuracy", target * 100.0),
            x_label: String::new(),
            y_label: "virtual seconds".into(),
            bars: Some(bars),
            ..Panel::default()
        });
    }
    panels
}

/// A run's curve: its one seed, or the mean over its seeds with a ± one standard deviation band
/// when every seed has the same evaluation points.
fn seeds_series(
    label: String,
    outcomes: &[Outcome],
    x: impl Fn(&super::outcome::Point) -> f64,
    value: impl Fn(&super::outcome::Point) -> f64,
) -> Series {
    let first = &outcomes[0];
    let aligned = outcomes
        .iter()
        .all(|o| o.curve.len() == first.curve.len() && o.curve.iter().zip(&first.curve).all(|(a, b)| x(a) == x(b)));
    if outcomes.len() < 2 || !aligned {
        return Series { label, points: first.curve.iter().map(|p| (x(p), value(p))).collect(), ..Series::default() };
    }
    let n = outcomes.len() as f64;
    let (mut points, mut band) = (Vec::new(), Vec::new());
    for (i, p) in first.curve.iter().enumerate() {
        let values: Vec<f64> = outcomes.iter().map(|o| value(&o.curve[i])).collect();
        let mean = values.iter().sum::<f64>() / n;
        let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        points.push((x(p), mean));
        band.push((x(p), mean - std, mean + std));
    }
    Series { label: format!("{label} (mean of {} seeds ± std)", outcomes.len()), points, band, ..Series::default() }
}

/// The x range of the curves' last half and their y range there, padded, when that is narrower
/// than `ZOOM_BELOW` of the whole curves' range: where the runs differ by little, a zoom shows
/// by how much.
fn zoom_range(series: &[Series]) -> Option<((f64, f64), (f64, f64))> {
    let finite = |s: &Series| -> Vec<(f64, f64)> {
        s.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect()
    };
    let x_span = |points: &[(f64, f64)]| {
        points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)))
    };
    let span = |ys: &mut dyn Iterator<Item = f64>| {
        ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| (lo.min(y), hi.max(y)))
    };
    let all: Vec<(f64, f64)> = series.iter().flat_map(finite).collect();
    let (all_lo, all_hi) = span(&mut all.iter().map(|p| p.1));
    // Each run's own last half: runs of different lengths (asynchronous ones end sooner in
    // virtual time) all show theirs.
    let (mut from, mut tail_lo, mut tail_hi) = (f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for points in series.iter().map(finite).filter(|p| !p.is_empty()) {
        let (lo, hi) = x_span(&points);
        let mid = (lo + hi) / 2.0;
        from = from.min(mid);
        let (a, b) = span(&mut points.iter().filter(|p| p.0 >= mid).map(|p| p.1));
        (tail_lo, tail_hi) = (tail_lo.min(a), tail_hi.max(b));
    }
    let x_hi = x_span(&all).1;
    let (whole, tail) = (all_hi - all_lo, tail_hi - tail_lo);
    if !(whole > 0.0 && tail.is_finite() && tail < ZOOM_BELOW * whole) {
        return None;
    }
    let pad = (tail * 0.1).max(0.1);
    Some(((from, x_hi), (tail_lo - pad, tail_hi + pad)))
}

/// `setting` if any of `runs` is planned there, else the first planned setting of the dataset
/// that has one of them; None when the dataset has none (missing or not selected).
pub(super) fn resolve_setting(results: &Results, dataset: &str, setting: &str, runs: &[String]) -> Option<String> {
    let planned =
        |s: &str| runs.iter().any(|id| results.runs.iter().any(|r| r.key == format!("{}/{id}", group(dataset, s))));
    if planned(setting) {
        return Some(setting.to_string());
    }
    results.runs.iter().filter(|r| r.dataset == dataset).map(|r| r.setting.clone()).find(|s| planned(s))
}

/// Writes every sweep figure with at least one point into `dir`; returns their titles and files.
pub fn write_sweeps(
    grid: &Grid,
    names: &BTreeMap<String, String>,
    results: &Results,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>> {
    let mut written = Vec::new();
    for sweep in &grid.sweeps {
        let panels: Vec<Panel> = grid
            .datasets
            .iter()
            .flat_map(|(dataset, entry)| sweep.metrics.iter().map(move |m| (dataset, entry, m)))
            .filter_map(|(dataset, entry, metric)| {
                let lines = sweep_points(&sweep.run, &sweep.x, &sweep.series, dataset, entry, metric, results);
                if lines.is_empty() {
                    return None;
                }
                let series: Vec<Series> = lines
                    .into_iter()
                    .map(|(label, points)| Series {
                        label,
                        points,
                        style: SeriesStyle::LineMarkers,
                        ..Series::default()
                    })
                    .collect();
                // A grid that did not come through `Grid::load` may name another metric: it plots
                // as accuracy (`sweep_points`).
                let &(_, name, y_label) =
                    SWEEP_METRICS.iter().find(|(key, ..)| key == metric).unwrap_or(&SWEEP_METRICS[1]);
                let dataset = entry.panel_name(dataset);
                let run = names.get(&sweep.run).unwrap_or(&sweep.run);
                let y_range = sweep_y_range(metric, &series);
                Some(Panel {
                    title: format!("{dataset}, {run}: {name}"),
                    x_label: sweep.x.clone(),
                    y_label: y_label.into(),
                    series,
                    y_range: Some(y_range),
                    ..Panel::default()
                })
            })
            .collect();
        written.extend(write_figure(dir, &sweep.file, &sweep.title, &panels)?);
    }
    Ok(written)
}

/// A sweep panel's y axis: times from 0, so that bars of the same height read the same;
/// accuracies over at least [`MIN_ACCURACY_SPAN`] points, so that a spread of a tenth of a point
/// does not fill the panel as if it were large.
fn sweep_y_range(metric: &str, series: &[Series]) -> (f64, f64) {
    let ys = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (lo, hi) = (ys().fold(f64::INFINITY, f64::min), ys().fold(f64::NEG_INFINITY, f64::max));
    if metric == "time_to_target" {
        return (0.0, hi * 1.1);
    }
    let top = (hi + 0.5).ceil().min(100.0);
    ((top - MIN_ACCURACY_SPAN).min((lo - 0.5).floor()), top)
}

/// The least span, in accuracy points, of a sweep's accuracy axis.
const MIN_ACCURACY_SPAN: f64 = 5.0;

/// The lines of a sweep panel (and a trend's curves): per value of the `series` coordinate,
/// (`x`, metric) of the finished runs of row `run` (seed 1), in x order; accuracy in points.
/// Runs that never reached the target have no time point.
pub fn sweep_points(
    run: &str,
    x: &str,
    series: &str,
    dataset: &str,
    entry: &DatasetEntry,
    metric: &str,
    results: &Results,
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for setting in entry.all_settings() {
        let (Some(&x), Some(&line)) = (setting.coords.get(x), setting.coords.get(series)) else {
            continue;
        };
        let key = format!("{}/{}", group(dataset, &setting.id), run);
        let Some(o) = results.outcomes.get(&key).and_then(|o| o.first()) else { continue };
        let y = match metric {
            "time_to_target" => o.time_to_target_s,
            "resource_utilization" => Some(o.resource_utilization * 100.0),
            // Over every client.
            "job_time" | "peak_memory" => {
                let metric = if metric == "job_time" { ColumnMetric::JobTime } else { ColumnMetric::PeakMemory };
                Some(o.client_figure(metric, &(0..o.job_time_s.len()).collect::<Vec<_>>()))
            }
            _ => Some(o.best_accuracy * 100.0),
        };
        if let Some(y) = y {
            lines.entry(format!("{series} = {line}")).or_default().push((x, y));
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
    fn sweep_axes_start_times_at_zero_and_give_accuracies_five_points_at_least() {
        let series = |ys: &[f64]| {
            vec![Series {
                label: "M = 2".into(),
                points: ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
                ..Series::default()
            }]
        };
        assert_eq!(sweep_y_range("best_accuracy", &series(&[96.54, 97.21])), (93.0, 98.0));
        assert_eq!(sweep_y_range("best_accuracy", &series(&[80.2, 99.8])), (79.0, 100.0));
        let (lo, hi) = sweep_y_range("time_to_target", &series(&[125.0, 325.0]));
        assert_eq!(lo, 0.0);
        assert!((hi - 357.5).abs() < 1e-9);
    }

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
            resource_utilization: f64::NAN,
            target_accuracy: Some(0.7),
            time_to_target_s: t,
            curve: vec![],
            server_loss: vec![],
            participation: vec![],
            job_time_s: vec![],
            peak_memory_bytes: vec![],
            diagnostics: BTreeMap::new(),
            traces: vec![],
        };
        let outcomes = BTreeMap::from([
            ("d-b0.9-m2/ours".to_string(), vec![outcome(Some(300.0))]),
            ("d-b0.1-m2/ours".to_string(), vec![outcome(Some(100.0))]),
            ("d-b0.1-m4/ours".to_string(), vec![outcome(None)]),
            ("d-other/ours".to_string(), vec![outcome(Some(1.0))]),
        ]);
        let results = Results { scale: "s", runs: &[], outcomes, missing: BTreeMap::new() };
        let sw = &grid.sweeps[0];
        let lines = sweep_points(&sw.run, &sw.x, &sw.series, "d", &grid.datasets["d"], "time_to_target", &results);
        assert_eq!(lines, BTreeMap::from([("M = 2".to_string(), vec![(0.1, 100.0), (0.9, 300.0)])]));
        let acc = sweep_points(&sw.run, &sw.x, &sw.series, "d", &grid.datasets["d"], "best_accuracy", &results);
        assert_eq!(acc["M = 4"], vec![(0.1, 90.0)]);
    }

    fn rising(label: &str, end: f64) -> Series {
        let points = (0..=100).map(|r| (f64::from(r), end * (1.0 - (-f64::from(r) / 10.0).exp()))).collect();
        Series { label: label.into(), points, ..Series::default() }
    }

    #[test]
    fn a_zoom_shows_the_last_half_where_the_curves_end_close_together() {
        let ((x_lo, x_hi), (lo, hi)) = zoom_range(&[rising("a", 90.0), rising("b", 91.0)]).unwrap();
        assert_eq!((x_lo, x_hi), (50.0, 100.0), "the last half of rounds 0–100");
        // Both curves are above 89 over rounds 50–100 (90 (1 − e⁻⁵) ≈ 89.39) and end below 91.
        assert!((88.0..89.4).contains(&lo) && (91.0..92.0).contains(&hi), "{lo}..{hi}");
        assert_eq!(zoom_range(&[rising("a", 90.0), rising("b", 30.0)]), None, "they end far apart: no zoom");
    }

    #[test]
    fn a_zoom_shows_every_runs_own_last_half_when_they_end_at_different_times() {
        // An asynchronous run ends at t = 50, a synchronous one at t = 100: the zoom starts at
        // the shorter run's midpoint, and its y range covers both last halves.
        let short = Series {
            points: rising("a", 90.0).points.into_iter().filter(|p| p.0 <= 50.0).collect(),
            ..rising("a", 90.0)
        };
        let ((x_lo, x_hi), (lo, hi)) = zoom_range(&[short, rising("b", 91.0)]).unwrap();
        assert_eq!((x_lo, x_hi), (25.0, 100.0));
        // The short run's last half rises from 90 (1 − e^−2.5) ≈ 82.6.
        assert!((81.0..82.7).contains(&lo) && (91.0..92.0).contains(&hi), "{lo}..{hi}");
    }

    #[test]
    fn several_seeds_give_their_mean_with_a_one_std_band() {
        use crate::reproduce::outcome::Point;
        let seed = |seed: u64, accuracies: &[f64]| Outcome {
            seed,
            curve: accuracies.iter().enumerate().map(|(i, &a)| Point::at(i as f64, 0.0, a, 1.0)).collect(),
            ..crate::reproduce::report::fixtures::outcome(0.9, 0.9)
        };
        let value = |p: &crate::reproduce::outcome::Point| p.accuracy * 100.0;
        let version = |p: &crate::reproduce::outcome::Point| p.version;
        let s = seeds_series("A".into(), &[seed(1, &[0.5, 0.8]), seed(2, &[0.7, 0.8])], version, value);
        assert_eq!(s.label, "A (mean of 2 seeds ± std)");
        assert_eq!(s.points, vec![(0.0, 60.0), (1.0, 80.0)]);
        let std = 200f64.sqrt(); // of 50 and 70
        assert!((s.band[0].1 - (60.0 - std)).abs() < 1e-9 && (s.band[0].2 - (60.0 + std)).abs() < 1e-9, "{:?}", s.band);
        let one = seeds_series("A".into(), &[seed(1, &[0.5, 0.8])], version, value);
        assert!(one.band.is_empty() && one.label == "A", "one seed: its curve alone");
    }
}
