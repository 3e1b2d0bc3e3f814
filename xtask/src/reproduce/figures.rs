//! The grid's figures: test accuracy and/or test loss against rounds, one panel per (dataset,
//! α) and metric, one curve per run (the first seed). A panel whose α is not run at this scale
//! shows the scale's first α of the dataset instead, and says so in its title.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::grid::{Figure, setting};
use super::report::Results;
use crate::plot::{Panel, Series, write_png};

/// Writes every figure with at least one curve into `dir`; returns their titles and files.
pub fn write_figures(figures: &[Figure], results: &Results, dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut written = Vec::new();
    for figure in figures {
        let mut panels = Vec::new();
        for spec in &figure.panels {
            let Some(alpha) = resolve_alpha(results, &spec.dataset, spec.alpha, &spec.runs) else { continue };
            let group = setting(&spec.dataset, alpha);
            let note = if alpha == spec.alpha { String::new() } else { format!(" (paper: α = {})", spec.alpha) };
            for metric in &figure.metrics {
                let series = spec
                    .runs
                    .iter()
                    .filter_map(|id| {
                        let outcome = results.outcomes.get(&format!("{group}/{id}"))?.first()?;
                        let points = outcome
                            .curve
                            .iter()
                            .map(|&(round, acc, loss)| (round, if metric == "loss" { loss } else { acc * 100.0 }))
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
                    title: format!("{} α = {alpha}{note}: {name}", spec.dataset),
                    x_label: "round".into(),
                    y_label: y_label.into(),
                    series,
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

/// `alpha` if any of `runs` is planned there, else the first planned α of the dataset that has
/// one of them; None when the dataset has none (missing or not selected).
fn resolve_alpha(results: &Results, dataset: &str, alpha: f64, runs: &[String]) -> Option<f64> {
    let planned =
        |a: f64| runs.iter().any(|id| results.runs.iter().any(|r| r.key == format!("{}/{id}", setting(dataset, a))));
    if planned(alpha) {
        return Some(alpha);
    }
    results.runs.iter().filter(|r| r.dataset == dataset).map(|r| r.alpha).find(|&a| planned(a))
}
