//! The panels of the paper's figures (and sweeps) that a report cannot draw, and why: their
//! dataset is not on the machine, this report does not run their setting (its scale or
//! `--only`), or none of their runs has finished.
//! The report names each of them instead of leaving the panel, or the whole figure, out.

use std::fmt::Write as _;

use super::figures::{resolve_setting, sweep_points};
use super::grid::{Grid, PanelSpec, Sweep, group};
use super::report::Results;

/// A panel's dataset and setting, in words (`CIFAR-10`, `lenet`).
pub type Place = (String, String);

/// One figure's panels without a curve, grouped by reason.
#[derive(Debug, PartialEq)]
pub struct FigureGaps {
    pub title: String,
    /// Each reason (`needs CIFAR-10`) with the places it leaves blank, (dataset, setting) in
    /// words, in the figure's order, each place once.
    pub gaps: Vec<(String, Vec<Place>)>,
}

/// The gaps of every figure, trace figure and sweep of `grid` that has any.
pub fn figure_gaps(grid: &Grid, results: &Results) -> Vec<FigureGaps> {
    let figures =
        grid.figures.iter().map(|f| (&f.title, f.panels.iter().filter_map(|p| panel_gap(grid, results, p)).collect()));
    let traces =
        grid.traces.iter().map(|f| (&f.title, f.panels.iter().filter_map(|p| panel_gap(grid, results, p)).collect()));
    let sweeps = grid.sweeps.iter().map(|s| (&s.title, sweep_gaps(grid, results, s)));
    figures
        .chain(traces)
        .chain(sweeps)
        .map(|(title, blanks): (&String, Vec<(String, Place)>)| {
            let mut gaps: Vec<(String, Vec<Place>)> = Vec::new();
            for (reason, place) in blanks {
                match gaps.iter_mut().find(|(r, _)| *r == reason) {
                    Some((_, places)) if places.contains(&place) => {}
                    Some((_, places)) => places.push(place),
                    None => gaps.push((reason, vec![place])),
                }
            }
            FigureGaps { title: title.clone(), gaps }
        })
        .filter(|f| !f.gaps.is_empty())
        .collect()
}

/// The datasets where the grid sweeps `sweep.run` (settings with both coordinates that the row
/// runs at) but the report has no point to draw for some metric, each with its reason; the
/// place's setting is the sweep's `x` (`mu sweep`), with the blank metrics where others are drawn.
fn sweep_gaps(grid: &Grid, results: &Results, sweep: &Sweep) -> Vec<(String, Place)> {
    let Some(row) = grid.rows.iter().find(|r| r.id == sweep.run) else { return Vec::new() };
    let row_runs_on = |d: &String| row.datasets.as_ref().is_none_or(|ds| ds.contains(d));
    let mut gaps = Vec::new();
    for (dataset, entry) in grid.datasets.iter().filter(|(d, _)| row_runs_on(d)) {
        let swept: Vec<String> = entry
            .all_settings()
            .into_iter()
            .filter(|s| s.coords.contains_key(&sweep.x) && s.coords.contains_key(&sweep.series))
            .filter(|s| row.settings.as_ref().is_none_or(|ids| ids.contains(&s.id)))
            .map(|s| s.id)
            .collect();
        let blank: Vec<&String> = sweep
            .metrics
            .iter()
            .filter(|metric| {
                sweep_points(&sweep.run, &sweep.x, &sweep.series, dataset, entry, metric, results).is_empty()
            })
            .collect();
        if swept.is_empty() || blank.is_empty() {
            continue;
        }
        // One place for the whole sweep, or the metrics left blank beside drawn ones.
        let what = if blank.len() == sweep.metrics.len() {
            format!("{} sweep", sweep.x)
        } else {
            format!("{} sweep, {}", sweep.x, blank.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", "))
        };
        let place = (grid.panel_name(dataset), what);
        let key = |id: &String| format!("{}/{}", group(dataset, id), sweep.run);
        let reason = if let Some(needs) = needs(results, dataset) {
            needs
        } else if !swept.iter().any(|id| results.runs.iter().any(|r| r.key == key(id))) {
            not_run(results)
        } else if swept.iter().any(|id| results.outcomes.get(&key(id)).is_some_and(|o| !o.is_empty())) {
            "no run reached its target".to_string()
        } else {
            "no run finished yet".to_string()
        };
        gaps.push((reason, place));
    }
    gaps
}

/// `needs CIFAR-10` when `dataset` is not on the machine.
fn needs(results: &Results, dataset: &str) -> Option<String> {
    results.missing.get(dataset).map(|m| format!("needs {}", m.title))
}

/// The reason of a blank whose runs this report does not plan.
fn not_run(results: &Results) -> String {
    format!("not run by this report (its scale `{}` or `--only`)", results.scale)
}

/// Why `spec`'s panel has no curve, and the panel's place in words; `None` when it has one.
fn panel_gap(grid: &Grid, results: &Results, spec: &PanelSpec) -> Option<(String, Place)> {
    let wanted = spec.setting.id();
    let place = (grid.panel_name(&spec.dataset), grid.setting_words(&spec.dataset, &wanted));
    if let Some(needs) = needs(results, &spec.dataset) {
        return Some((needs, place));
    }
    let Some(setting) = resolve_setting(results, &spec.dataset, &wanted, &spec.runs) else {
        return Some((not_run(results), place));
    };
    let finished = |id: &String| results.outcomes.get(&format!("{}/{id}", group(&spec.dataset, &setting)));
    if spec.runs.iter().any(|id| finished(id).is_some_and(|o| !o.is_empty())) {
        return None;
    }
    Some(("no run finished yet".to_string(), place))
}

/// `needs CIFAR-10 (CIFAR-10: lenet, cnn); needs IMDb (IMDb: textcnn)` for a report's file
/// list: each reason with its places, the settings of one dataset together.
pub fn gaps_in_words(gaps: &[(String, Vec<Place>)]) -> String {
    let mut words = String::new();
    for (i, (reason, places)) in gaps.iter().enumerate() {
        let mut datasets: Vec<(&str, Vec<&str>)> = Vec::new();
        for (dataset, setting) in places {
            match datasets.iter_mut().find(|(d, _)| d == dataset) {
                Some((_, settings)) => settings.push(setting),
                None => datasets.push((dataset, vec![setting])),
            }
        }
        let places: Vec<String> = datasets.iter().map(|(d, s)| format!("{d}: {}", s.join(", "))).collect();
        let _ = write!(words, "{}{reason} ({})", if i == 0 { "" } else { "; " }, places.join("; "));
    }
    words
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::reproduce::grid::PlannedRun;
    use crate::reproduce::report::MissingData;
    use crate::reproduce::report::fixtures::{outcome, run};

    fn grid() -> Grid {
        toml::from_str(
            r#"
            paper = "p"
            title = "P"
            [datasets.mnist]
            title = "MNIST"
            base = "b.toml"
            settings = [{ id = "mlp", set = {} }, { id = "wide", set = {} }]
            [datasets.cifar10]
            title = "CIFAR-10"
            base = "c.toml"
            settings = [{ id = "cnn", set = {} }]
            [[rows]]
            id = "a"
            method = "fedavg"
            [[rows]]
            id = "b"
            method = "fedavg"
            [[figures]]
            file = "f.png"
            title = "Fig. 1"
            metrics = ["accuracy"]
            panels = [
                { dataset = "mnist", setting = "mlp", runs = ["a", "b"] },
                { dataset = "cifar10", setting = "cnn", runs = ["a"] },
                { dataset = "cifar10", setting = "cnn", runs = ["b"] },
            ]
            [[figures]]
            file = "g.png"
            title = "Fig. 2"
            metrics = ["accuracy"]
            panels = [{ dataset = "mnist", setting = "mlp", runs = ["a"] }]
            [scales.full]
            "#,
        )
        .expect("test grid parses")
    }

    fn cifar10_missing() -> BTreeMap<String, MissingData> {
        BTreeMap::from([(
            "cifar10".to_string(),
            MissingData { title: "CIFAR-10".into(), fetch: "fl data fetch cifar10".into() },
        )])
    }

    fn planned(dataset: &str, setting: &str, id: &str) -> PlannedRun {
        PlannedRun {
            key: format!("{}/{id}", group(dataset, setting)),
            setting: setting.into(),
            ..run(dataset, 0.1, id)
        }
    }

    #[test]
    fn every_blank_panel_is_named_with_its_reason_and_drawn_figures_are_not_listed() {
        let place = |d: &str, s: &str| (d.to_string(), s.to_string());
        let grid = grid();
        let runs = vec![planned("mnist", "mlp", "a"), planned("mnist", "mlp", "b"), planned("cifar10", "cnn", "a")];
        let missing = cifar10_missing();
        let mut results = Results { scale: "full", runs: &runs, outcomes: BTreeMap::new(), missing };
        // Nothing finished: MNIST's panel waits for its runs, CIFAR-10's two panels (one place)
        // need the data.
        let gaps = figure_gaps(&grid, &results);
        assert_eq!(gaps.len(), 2);
        assert_eq!(
            gaps[0].gaps,
            vec![
                ("no run finished yet".to_string(), vec![place("MNIST", "mlp")]),
                ("needs CIFAR-10".to_string(), vec![place("CIFAR-10", "cnn")]),
            ]
        );
        assert_eq!(gaps_in_words(&gaps[0].gaps), "no run finished yet (MNIST: mlp); needs CIFAR-10 (CIFAR-10: cnn)");
        // One of MNIST's runs finished: its panels are drawn, Fig. 2 has no gap left.
        results.outcomes.insert("mnist-mlp/a".into(), vec![outcome(0.9, 0.9)]);
        let gaps = figure_gaps(&grid, &results);
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        assert_eq!(gaps[0].title, "Fig. 1");
        let two = [("needs X".to_string(), vec![place("X", "a"), place("Y", "b"), place("X", "c")])];
        assert_eq!(gaps_in_words(&two), "needs X (X: a, c; Y: b)");
        assert_eq!(gaps[0].gaps, vec![("needs CIFAR-10".to_string(), vec![place("CIFAR-10", "cnn")])]);
        // A scale that runs no CIFAR-10 and whose data is present: not run at this scale.
        results.missing.clear();
        let mnist_only = &runs[..2];
        let results =
            Results { scale: "smoke", runs: mnist_only, outcomes: results.outcomes, missing: results.missing };
        let gaps = figure_gaps(&grid, &results);
        let not_run = "not run by this report (its scale `smoke` or `--only`)".to_string();
        assert_eq!(gaps[0].gaps, vec![(not_run, vec![place("CIFAR-10", "cnn")])]);
    }

    #[test]
    fn a_sweep_without_points_is_named_per_dataset_with_its_reason() {
        let grid: Grid = toml::from_str(
            r#"
            paper = "p"
            title = "P"
            [datasets.mnist]
            title = "MNIST"
            base = "b.toml"
            settings = [
                { id = "s1", coords = { x = 1, y = 1 }, set = {} },
                { id = "s2", coords = { x = 2, y = 1 }, set = {} },
                { id = "only-x", coords = { x = 3 }, set = {} },
            ]
            [datasets.cifar10]
            title = "CIFAR-10"
            base = "c.toml"
            settings = [{ id = "c1", coords = { x = 1, y = 1 }, set = {} }]
            [datasets.svhn]
            title = "SVHN"
            base = "s.toml"
            settings = [{ id = "v1", coords = { x = 1, y = 1 }, set = {} }]
            [[rows]]
            id = "a"
            method = "fedavg"
            settings = ["s1", "s2", "only-x", "c1"]
            [[sweeps]]
            file = "acc.png"
            title = "Accuracy against x"
            run = "a"
            x = "x"
            series = "y"
            metrics = ["best_accuracy"]
            [[sweeps]]
            file = "time.png"
            title = "Time against x"
            run = "a"
            x = "x"
            series = "y"
            metrics = ["time_to_target"]
            [[sweeps]]
            file = "both.png"
            title = "Both against x"
            run = "a"
            x = "x"
            series = "y"
            metrics = ["best_accuracy", "time_to_target"]
            [scales.full]
            "#,
        )
        .expect("test grid parses");
        let place = |d: &str| (d.to_string(), "x sweep".to_string());
        let runs = vec![planned("mnist", "s1", "a"), planned("mnist", "s2", "a"), planned("cifar10", "c1", "a")];
        let missing = cifar10_missing();
        let mut results = Results { scale: "full", runs: &runs, outcomes: BTreeMap::new(), missing };
        // In the datasets' key order; SVHN's setting is swept by no row: no gap there.
        let waiting = vec![
            ("needs CIFAR-10".to_string(), vec![place("CIFAR-10")]),
            ("no run finished yet".to_string(), vec![place("MNIST")]),
        ];
        let gaps = figure_gaps(&grid, &results);
        let titles = ["Accuracy against x", "Time against x", "Both against x"];
        assert_eq!(gaps.iter().map(|g| g.title.as_str()).collect::<Vec<_>>(), titles);
        assert!(gaps.iter().all(|g| g.gaps == waiting), "{gaps:?}");
        // One MNIST run finished without reaching its target: the accuracy sweep has its point,
        // the time sweep none.
        results.outcomes.insert("mnist-s1/a".into(), vec![outcome(0.9, 0.9)]);
        let gaps = figure_gaps(&grid, &results);
        let needs_cifar = ("needs CIFAR-10".to_string(), vec![place("CIFAR-10")]);
        assert_eq!(gaps[0].gaps, vec![needs_cifar.clone()]);
        let no_target = "no run reached its target".to_string();
        assert_eq!(gaps[1].gaps, vec![needs_cifar.clone(), (no_target.clone(), vec![place("MNIST")])]);
        // The sweep of both metrics draws its accuracy and names its blank time panel.
        let time_blank = ("MNIST".to_string(), "x sweep, time_to_target".to_string());
        assert_eq!(gaps[2].gaps, vec![needs_cifar, (no_target, vec![time_blank])]);
        // A report that plans no MNIST run of the sweep.
        let results = Results { scale: "smoke", runs: &runs[2..], outcomes: BTreeMap::new(), missing: BTreeMap::new() };
        let not_run = "not run by this report (its scale `smoke` or `--only`)".to_string();
        assert_eq!(
            figure_gaps(&grid, &results)[0].gaps,
            vec![("no run finished yet".to_string(), vec![place("CIFAR-10")]), (not_run, vec![place("MNIST")])]
        );
    }
}
