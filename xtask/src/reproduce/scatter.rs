//! The paper-against-ours scatter of a table: one panel per dataset, x = the paper's accuracy,
//! y = ours (best accuracy, or accuracy at the budget), one marker per cell coloured by method,
//! with the diagonal and the table's tolerance band drawn as guides: the one picture that shows
//! how well a paper's table reproduces.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::grid::Grid;
use super::report::PaperTable;
use crate::plot::{Panel, Series, SeriesStyle, write_png};

/// Writes `<table>-paper-vs-ours.png` into `dir` when some accuracy cell of the table has both
/// the paper's value and ours; returns its title and file.
pub fn write(
    grid: &Grid,
    table: &PaperTable,
    cells: &[serde_json::Value],
    dir: &Path,
) -> Result<Option<(String, PathBuf)>> {
    let panels = panels(grid, table, cells);
    if panels.is_empty() {
        return Ok(None);
    }
    let path = dir.join(format!("{}-paper-vs-ours.png", table.id));
    write_png(&path, &panels)?;
    Ok(Some((format!("{}: the paper's accuracy against ours", table.title), path)))
}

/// Per dataset, per method (all its levels), the (paper, ours) points of the table's accuracy
/// cells.
fn points(cells: &[serde_json::Value]) -> BTreeMap<String, BTreeMap<String, Vec<(f64, f64)>>> {
    let mut by_dataset: BTreeMap<String, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
    for c in cells {
        if !matches!(c["metric"].as_str(), Some("Accuracy" | "AccuracyAtBudget")) {
            continue;
        }
        let (Some(paper), Some(ours)) = (c["paper"].as_f64(), c["best"].as_f64().or(c["value"].as_f64())) else {
            continue;
        };
        let method = c["method"].as_str().unwrap_or("").to_string();
        let dataset = c["dataset"].as_str().unwrap_or("").to_string();
        by_dataset.entry(dataset).or_default().entry(method).or_default().push((paper, ours));
    }
    by_dataset
}

fn panels(grid: &Grid, table: &PaperTable, cells: &[serde_json::Value]) -> Vec<Panel> {
    points(cells)
        .into_iter()
        .map(|(dataset, methods)| {
            let all = methods.values().flatten();
            let (lo, hi) =
                all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(p, o)| (lo.min(p).min(o), hi.max(p).max(o)));
            let tolerance = table.tolerance.get(&dataset).copied();
            let pad = tolerance.unwrap_or(1.0).max((hi - lo) * 0.05);
            let (lo, hi) = (lo - pad, hi + pad);
            // y = x + shift, clipped to the square [lo, hi]².
            let guide = |label: String, shift: f64| Series {
                label,
                points: vec![(lo.max(lo - shift), (lo + shift).max(lo)), (hi.min(hi - shift), (hi + shift).min(hi))],
                style: SeriesStyle::Guide,
                ..Series::default()
            };
            let mut series = vec![guide("ours = paper".into(), 0.0)];
            if let Some(t) = tolerance {
                series.push(guide(format!("± {t} points (tolerance)"), t));
                series.push(guide(String::new(), -t));
            }
            series.extend(methods.into_iter().map(|(method, points)| Series {
                label: method,
                points,
                style: SeriesStyle::Markers,
                ..Series::default()
            }));
            let title = match &table.substitution {
                Some(what) => format!("substitution: {what}"),
                None => grid.panel_name(&dataset),
            };
            Panel {
                title: format!("{title}: ours against the paper"),
                x_label: "the paper's accuracy (%)".into(),
                y_label: "our accuracy (%)".into(),
                series,
                x_range: Some((lo, hi)),
                y_range: Some((lo, hi)),
                ..Panel::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_with_both_values_become_points_per_dataset_and_method() {
        let cells = serde_json::json!([
            { "metric": "Accuracy", "method": "A", "level": "L", "dataset": "m", "paper": 90.0, "best": 91.5 },
            { "metric": "Accuracy", "method": "A", "level": "L", "dataset": "m", "paper": 80.0, "best": null },
            { "metric": "Accuracy", "method": "B", "level": "", "dataset": "m", "paper": null, "best": 70.0 },
            { "metric": "AccuracyAtBudget", "method": "B", "level": "", "dataset": "c", "paper": 50.0, "value": 48.0 },
            { "metric": "TimeToTarget", "method": "B", "level": "", "dataset": "c", "paper": 100.0, "value": 90.0 },
        ]);
        let got = points(cells.as_array().unwrap());
        assert_eq!(got.len(), 2);
        assert_eq!(got["m"]["A"], vec![(90.0, 91.5)], "coloured by method, whatever its level");
        assert!(!got["m"].contains_key("B"), "no paper value");
        assert_eq!(got["c"]["B"], vec![(50.0, 48.0)], "accuracy at budget, not time");
    }
}
