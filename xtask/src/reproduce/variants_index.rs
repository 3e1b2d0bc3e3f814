//! `reports/<paper>/variants.md`, the index of a paper's variants (alternatives to the paper's
//! choices, `--variant`): per variant its one-line change, the hypothesis it tested and the
//! verdict (from `grid.toml`); per variant report, the seeds it has and the accuracy cells it
//! moved against the scale's own report (both read from their `results.json`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::grid::Grid;

/// Accuracy points an accuracy cell must move by to count as moved.
const MOVED: f64 = 1.0;
/// The share of its value a time cell must move by to count as moved.
const MOVED_TIME: f64 = 0.05;
/// Moved cells listed per report, largest first.
const LISTED: usize = 4;

/// Writes `reports_dir/variants.md` for `grid`; nothing for a grid without variants.
pub fn write(grid: &Grid, reports_dir: &Path) -> Result<()> {
    if grid.variants.is_empty() {
        return Ok(());
    }
    let path = reports_dir.join("variants.md");
    std::fs::write(&path, render(grid, reports_dir)?).with_context(|| format!("writing {}", path.display()))
}

fn render(grid: &Grid, reports_dir: &Path) -> Result<String> {
    let mut md = format!(
        "# {}: variants\n\nEach variant changes one of the paper's choices to test a hypothesis written before its \
         first run (`experiments/{}/grid.toml`); what every measurement showed, cell by cell, is in \
         [findings.md](../../experiments/{}/findings.md).\n\n",
        grid.paper, grid.paper, grid.paper
    );
    md.push_str("| Variant | What it changes | Hypothesis | Verdict |\n|---|---|---|---|\n");
    for (name, v) in &grid.variants {
        let verdict = v.verdict.as_deref().unwrap_or("open: not yet run at two seeds");
        let _ = writeln!(md, "| `{name}` | {} | {} | {verdict} |", v.summary, v.hypothesis);
    }
    md.push_str(
        "\n## Reports\n\nEach report made with variants, against the scale's own report: the seed sets it has, \
         the accuracy cells within the paper's tolerance (scale → variants, over the cells both ran), and the \
         cells that moved by at least 1 point (best accuracy, %: seed 1's, or the mean over the first seed set \
         where a report has no seed-1 report of its own; the scale's at seed 1).\n\n\
         | Report | Seeds | Within tolerance | Moved cells |\n|---|---|---|---|\n",
    );
    let dir = reports_dir.join("variants");
    let mut labels: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    labels.sort();
    for label in labels {
        let Some(scale) = grid.scales.keys().find(|s| label.starts_with(&format!("{s}-"))) else { continue };
        let Some((shown, sets)) = shown_report(&dir.join(&label)) else { continue };
        let base = read_cells(&reports_dir.join(scale).join("results.json"))?;
        let ours = read_cells(&dir.join(&label).join(&shown).join("results.json"))?;
        let _ = writeln!(
            md,
            "| [`{label}`](variants/{label}/{}summary.md) | {} | {} | {} |",
            if shown.is_empty() { String::new() } else { format!("{shown}/") },
            sets.join("; "),
            within(&base, &ours),
            moved(&base, &ours)
        );
    }
    Ok(md)
}

/// A finished cell of a report: ours, whether it is a time (virtual seconds) rather than an
/// accuracy (%), and whether it is within the paper's tolerance (accuracy cells).
#[derive(Debug, Clone, Copy)]
struct Cell {
    value: f64,
    seconds: bool,
    within: Option<bool>,
}

/// A report's cells by (table, method and level, dataset, setting and metric).
type Cells = BTreeMap<(String, String, String), Cell>;

/// The finished cells of `results.json`; none if the file does not exist.
fn read_cells(path: &Path) -> Result<Cells> {
    let mut cells = BTreeMap::new();
    if !path.is_file() {
        return Ok(cells);
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    for (table, table_cells) in json["tables"].as_object().into_iter().flatten() {
        for c in table_cells.as_array().into_iter().flatten() {
            let metric = c["metric"].as_str().unwrap_or("Accuracy");
            let seconds = matches!(metric, "TimeToTarget" | "Budget");
            let Some(value) = c["best"].as_f64().or(c["value"].as_f64()) else { continue };
            let row = format!("{} {}", c["method"].as_str().unwrap_or(""), c["level"].as_str().unwrap_or(""));
            let mut column = format!("{} {}", c["dataset"].as_str().unwrap_or(""), c["setting"].as_str().unwrap_or(""));
            if metric != "Accuracy" {
                let _ = write!(column, " ({})", metric_words(metric));
            }
            let cell = Cell { value, seconds, within: c["within_tolerance"].as_bool() };
            cells.insert((table.clone(), row.trim().to_string(), column), cell);
        }
    }
    Ok(cells)
}

fn metric_words(metric: &str) -> &str {
    match metric {
        "TimeToTarget" => "time to target",
        "Budget" => "budget",
        "AccuracyAtBudget" => "accuracy at budget",
        other => other,
    }
}

/// The report a variant's directory is indexed by, relative to it (`""`: its seed-1 report,
/// else `seeds-…`, its first seed set), and the seed sets it holds (`1`, `1-2`, …); none for a
/// directory without any report.
fn shown_report(dir: &Path) -> Option<(String, Vec<String>)> {
    let seed_one = dir.join("results.json").is_file();
    let sets: Vec<String> = super::paper_index::seed_sets(dir)
        .into_iter()
        .filter(|set| dir.join(format!("seeds-{set}")).join("results.json").is_file())
        .collect();
    let shown = if seed_one { String::new() } else { format!("seeds-{}", sets.first()?) };
    Some((shown, seed_one.then(|| "1".to_string()).into_iter().chain(sets).collect()))
}

/// `scale → variants of both`: cells within tolerance over the cells both reports ran.
fn within(base: &Cells, ours: &Cells) -> String {
    let both: Vec<_> = ours.iter().filter_map(|(k, v)| Some((base.get(k)?.within?, v.within?))).collect();
    let count = |f: fn(&(bool, bool)) -> bool| both.iter().filter(|c| f(c)).count();
    format!("{} → {} of {}", count(|c| c.0), count(|c| c.1), both.len())
}

/// The cells that moved, accuracy by at least `MOVED` points and times by `MOVED_TIME` of their
/// value, largest first (in those units).
fn moved(base: &Cells, ours: &Cells) -> String {
    let mut moves: Vec<(f64, String)> = ours
        .iter()
        .filter_map(|(k, after)| {
            let before = base.get(k)?;
            let (size, unit) = if after.seconds {
                ((after.value - before.value).abs() / before.value.abs().max(1e-9) / MOVED_TIME, " s")
            } else {
                ((after.value - before.value).abs() / MOVED, "")
            };
            let (b, a) = (before.value, after.value);
            (size >= 1.0).then(|| (size, format!("{} {}: {b:.1}{unit} → {a:.1}{unit}", k.1, k.2)))
        })
        .collect();
    if moves.is_empty() {
        return "none".into();
    }
    moves.sort_by(|a, b| b.0.total_cmp(&a.0));
    let n = moves.len();
    let shown: Vec<String> = moves.into_iter().take(LISTED).map(|(_, s)| s).collect();
    let rest = if n > LISTED { format!("; {} more", n - LISTED) } else { String::new() };
    format!("{n}: {}{rest}", shown.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_lists_variants_and_the_cells_their_reports_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let grid: Grid = toml::from_str(
            r#"
            paper = "p"
            title = "t"
            rows = []
            datasets = {}
            scales = { full = {} }
            [variants.v]
            sets = []
            summary = "the code's data"
            what = "the code's data, in full"
            hypothesis = "the offset is the data"
            verdict = "confirmed"
            [variants.w]
            summary = "a faster rate"
            what = "…"
            hypothesis = "the rate"
            sets = []
            "#,
        )
        .unwrap();
        let results = |cells: &[(&str, f64, bool)]| {
            let cells: Vec<serde_json::Value> = cells
                .iter()
                .map(|(setting, best, ok)| {
                    serde_json::json!({"method": "A", "level": "L", "dataset": "m", "setting": setting,
                        "metric": "Accuracy", "best": best, "within_tolerance": ok})
                })
                .collect();
            serde_json::json!({ "tables": { "t2": cells } }).to_string()
        };
        for (dir, cells) in [
            ("full", results(&[("a0.1", 90.0, false), ("a0.5", 95.0, true), ("a0.9", 96.0, true)])),
            ("variants/full-v", results(&[("a0.1", 86.5, true), ("a0.5", 95.4, true)])),
        ] {
            std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
            std::fs::write(tmp.path().join(dir).join("results.json"), cells).unwrap();
        }
        std::fs::create_dir_all(tmp.path().join("variants/full-v/seeds-1-2")).unwrap();
        std::fs::write(tmp.path().join("variants/full-v/seeds-1-2/results.json"), results(&[("a0.1", 87.0, true)]))
            .unwrap();
        // A report made at two seeds only is indexed by its seed set's report.
        std::fs::create_dir_all(tmp.path().join("variants/full-w/seeds-1-2")).unwrap();
        std::fs::write(tmp.path().join("variants/full-w/seeds-1-2/results.json"), results(&[("a0.5", 93.5, true)]))
            .unwrap();
        // A directory without any report is not listed.
        std::fs::create_dir_all(tmp.path().join("variants/full-x/seeds-1-2")).unwrap();
        write(&grid, tmp.path()).unwrap();
        let md = std::fs::read_to_string(tmp.path().join("variants.md")).unwrap();
        assert!(md.contains("| `v` | the code's data | the offset is the data | confirmed |"), "{md}");
        assert!(md.contains("| `w` | a faster rate | the rate | open: not yet run at two seeds |"), "{md}");
        assert!(
            md.contains(
                "| [`full-v`](variants/full-v/summary.md) | 1; 1-2 | 1 → 2 of 2 | 1: A L m a0.1: 90.0 → 86.5 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| [`full-w`](variants/full-w/seeds-1-2/summary.md) | 1-2 | 1 → 1 of 1 | 1: A L m a0.5: 95.0 → 93.5 |"
            ),
            "{md}"
        );
        assert!(!md.contains("full-x"), "{md}");
    }

    #[test]
    fn a_time_cell_moves_by_a_share_of_its_value() {
        let tmp = tempfile::tempdir().unwrap();
        let report = |name: &str, a: f64, b: f64| {
            let cell = |method: &str, value: f64| {
                serde_json::json!({"method": method, "level": "", "dataset": "m", "setting": "s",
                    "metric": "TimeToTarget", "best": null, "value": value})
            };
            let path = tmp.path().join(name);
            std::fs::write(&path, serde_json::json!({"tables": {"t2": [cell("A", a), cell("B", b)]}}).to_string())
                .unwrap();
            read_cells(&path).unwrap()
        };
        let base = report("base.json", 135.0, 135.0);
        // A by 22%, B by 1.5%: only A moved.
        let ours = report("ours.json", 165.0, 137.0);
        assert_eq!(moved(&base, &ours), "1: A m s (time to target): 135.0 s → 165.0 s");
    }
}
