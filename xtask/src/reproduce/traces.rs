//! Figures of per-device diagnostics against virtual time (`[[traces]]` of a grid): the
//! learned controls of a run, such as FedASMU's α and β of each device and its request slot.
//! Each panel shows, per run, the devices' mean at every evaluation with the band between the
//! 10th and 90th percentiles of the devices' values (seed 1).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::figures::{resolve_setting, write_figure};
use super::grid::{Grid, group};
use super::outcome::Outcome;
use super::report::Results;
use crate::plot::{Panel, Series};

/// Writes every trace figure with at least one traced run into `dir`; returns their titles and files.
pub fn write_traces(
    grid: &Grid,
    names: &BTreeMap<String, String>,
    results: &Results,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>> {
    let mut written = Vec::new();
    for figure in &grid.traces {
        let mut panels = Vec::new();
        for spec in &figure.panels {
            let Some(setting) = resolve_setting(results, &spec.dataset, &spec.setting.id(), &spec.runs) else {
                continue;
            };
            let dataset = grid.panel_name(&spec.dataset);
            let words = grid.setting_words(&spec.dataset, &setting);
            let runs: Vec<(&String, &Outcome)> = spec
                .runs
                .iter()
                .filter_map(|id| {
                    Some((id, results.outcomes.get(&format!("{}/{id}", group(&spec.dataset, &setting)))?.first()?))
                })
                .collect();
            for prefix in &figure.diagnostics {
                let series: Vec<Series> = runs
                    .iter()
                    .map(|(id, o)| device_series(names.get(*id).cloned().unwrap_or_else(|| id.to_string()), o, prefix))
                    .filter(|s| !s.points.is_empty())
                    .collect();
                if series.is_empty() {
                    continue;
                }
                panels.push(Panel {
                    title: format!("{dataset}, {words}: {prefix} of each device (mean, 10th–90th percentile)"),
                    x_label: "virtual time (s)".into(),
                    y_label: prefix.clone(),
                    series,
                    ..Panel::default()
                });
            }
        }
        written.extend(write_figure(dir, &figure.file, &figure.title, &panels)?);
    }
    Ok(written)
}

/// The devices' mean of `<prefix>.<device>` at each traced evaluation, with its 10th–90th
/// percentile band.
fn device_series(label: String, outcome: &Outcome, prefix: &str) -> Series {
    let dotted = format!("{prefix}.");
    let (mut points, mut band) = (Vec::new(), Vec::new());
    for (time, values) in &outcome.traces {
        let mut v: Vec<f64> =
            values.iter().filter(|(k, _)| k.starts_with(&dotted)).map(|(_, v)| *v).filter(|v| v.is_finite()).collect();
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        points.push((*time, mean));
        band.push((*time, percentile(&v, 0.1), percentile(&v, 0.9)));
    }
    Series { label, points, band, ..Series::default() }
}

/// The `q` quantile of sorted `v` by linear interpolation.
fn percentile(v: &[f64], q: f64) -> f64 {
    let at = q * (v.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::report::fixtures::outcome;

    #[test]
    fn a_trace_is_the_devices_mean_with_their_decile_band_at_each_evaluation() {
        let at = |t: f64, values: &[(&str, f64)]| (t, values.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        let o = Outcome {
            traces: vec![
                at(10.0, &[("alpha.0", 0.1), ("alpha.1", 0.3), ("beta.0", 0.9)]),
                at(20.0, &[("beta.1", 0.5)]),
                at(30.0, &[("alpha.0", 0.2), ("alpha.1", 0.4), ("alpha.2", 0.6), ("alphas", 9.0)]),
            ],
            ..outcome(0.9, 0.9)
        };
        let s = device_series("FedASMU".into(), &o, "alpha");
        assert_eq!(s.points.len(), 2, "evaluations without the prefix are skipped");
        assert!((s.points[0].1 - 0.2).abs() < 1e-12 && (s.points[1].1 - 0.4).abs() < 1e-12, "{:?}", s.points);
        // Deciles of (0.1, 0.3): 0.1 + 0.1·0.2 and 0.1 + 0.9·0.2; of (0.2, 0.4, 0.6): 0.24 and 0.56.
        let (lo, hi) = (s.band[0].1, s.band[0].2);
        assert!((lo - 0.12).abs() < 1e-12 && (hi - 0.28).abs() < 1e-12, "{:?}", s.band);
        assert!((s.band[1].1 - 0.24).abs() < 1e-12 && (s.band[1].2 - 0.56).abs() < 1e-12, "{:?}", s.band);
    }
}
