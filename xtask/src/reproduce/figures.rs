//! The grid's figures: test accuracy and/or test loss against rounds or virtual time, one panel
//! per (dataset, setting) and metric, one curve per run (the first seed). A panel whose setting
//! is not run at this scale shows the scale's first setting of the dataset instead, and says so
//! in its title.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::grid::{Figure, SettingRef, group};
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
