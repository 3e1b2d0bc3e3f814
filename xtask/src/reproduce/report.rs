//! The report of a reproduction: the paper's tables with ours beside them (`<table>.md`), the
//! checks and orderings of the grid, and everything machine-readable in `results.json`.
//!
//! A cell reads `paper / ours best / ours final / Δ` in accuracy points, Δ = best − paper, the
//! comparison the paper's tables support (spec A-12); ✗ marks a Δ beyond the table's tolerance.
//! With several seeds, ours is the mean over seeds.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::json;

use super::grid::{Grid, PlannedRun, setting};
use super::outcome::Outcome;

/// `experiments/<paper>/expected.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    pub tables: Vec<PaperTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperTable {
    pub id: String,
    pub title: String,
    pub columns: Vec<Column>,
    /// Allowed |Δ| in points, per dataset.
    pub tolerance: BTreeMap<String, f64>,
    pub rows: Vec<PaperRow>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    pub dataset: String,
    pub alpha: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperRow {
    pub method: String,
    pub level: String,
    /// The grid row that reproduces it; none for rows the paper marks not applicable.
    pub run: Option<String>,
    pub paper: Vec<PaperCell>,
    /// Where the paper prints "-" for "doesn't work": ours counts as failing below this.
    pub fails_below: Option<f64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum PaperCell {
    Value(f64),
    /// "-".
    Dash(Dash),
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub enum Dash {
    #[serde(rename = "-")]
    Dash,
}

impl PaperCell {
    fn value(self) -> Option<f64> {
        match self {
            PaperCell::Value(v) => Some(v),
            PaperCell::Dash(_) => None,
        }
    }
}

impl Expected {
    pub fn load(path: &Path) -> Result<Expected> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let expected: Expected = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        for t in &expected.tables {
            if let Some(r) = t.rows.iter().find(|r| r.paper.len() != t.columns.len()) {
                anyhow::bail!(
                    "{}: table {} row {} {}: {} values for {} columns",
                    path.display(),
                    t.id,
                    r.method,
                    r.level,
                    r.paper.len(),
                    t.columns.len()
                );
            }
        }
        Ok(expected)
    }
}

/// What is known about every planned run.
pub struct Results<'a> {
    pub scale: &'a str,
    pub runs: &'a [PlannedRun],
    /// Finished outcomes by run key, one per finished seed.
    pub outcomes: BTreeMap<String, Vec<Outcome>>,
    /// Datasets that are not present, with the command that fetches them.
    pub missing: BTreeMap<String, String>,
}

/// Ours for a table cell.
enum Ours {
    /// Mean best and final accuracy (0–1) over the finished seeds.
    Done {
        best: f64,
        last: f64,
    },
    NotRunAtScale,
    MissingData,
    NotFinished,
}

impl Results<'_> {
    fn ours(&self, dataset: &str, alpha: f64, row: &str) -> Ours {
        if self.missing.contains_key(dataset) {
            return Ours::MissingData;
        }
        let key = format!("{}/{row}", setting(dataset, alpha));
        if !self.runs.iter().any(|r| r.key == key) {
            return Ours::NotRunAtScale;
        }
        match self.outcomes.get(&key) {
            Some(o) if !o.is_empty() => {
                let mean = |f: fn(&Outcome) -> f64| o.iter().map(f).sum::<f64>() / o.len() as f64;
                Ours::Done { best: mean(|o| o.best_accuracy), last: mean(|o| o.final_accuracy) }
            }
            _ => Ours::NotFinished,
        }
    }

    /// Best accuracy of a row at a (dataset, α), if finished.
    fn best(&self, dataset: &str, alpha: f64, row: &str) -> Option<f64> {
        match self.ours(dataset, alpha, row) {
            Ours::Done { best, .. } => Some(best),
            _ => None,
        }
    }
}

/// One evaluated check or ordering, for the report and `results.json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    pub what: String,
    pub passed: Option<bool>,
    pub detail: String,
}

/// Renders a paper table as Markdown; also returns its cells for `results.json`.
pub fn render_table(table: &PaperTable, results: &Results) -> (String, Vec<serde_json::Value>) {
    let mut md = format!(
        "## {}\n\nEach cell: paper / ours (best) / ours (final) / Δ = best − paper, in points.\n\n",
        table.title
    );
    let header: Vec<String> = table.columns.iter().map(|c| format!("{} α={}", c.dataset, c.alpha)).collect();
    let _ = writeln!(md, "| Method | Mask level | {} |", header.join(" | "));
    let _ = writeln!(md, "|---|---|{}", "---|".repeat(table.columns.len()));
    let mut cells = Vec::new();
    let (mut within, mut compared) = (0, 0);
    for row in &table.rows {
        let mut line = format!("| {} | {} |", row.method, row.level);
        for (col, paper) in table.columns.iter().zip(&row.paper) {
            let paper_text = paper.value().map_or("-".to_string(), |v| format!("{v:.1}"));
            let tolerance = table.tolerance.get(&col.dataset).copied().unwrap_or(f64::INFINITY);
            let ours = row.run.as_deref().map(|r| results.ours(&col.dataset, col.alpha, r));
            let text = match (&ours, paper.value()) {
                (None, _) => "-".to_string(),
                (Some(Ours::Done { best, last }), Some(p)) => {
                    let delta = best * 100.0 - p;
                    compared += 1;
                    let ok = delta.abs() <= tolerance;
                    within += usize::from(ok);
                    let mark = if ok { "" } else { " ✗" };
                    format!("{paper_text} / {:.1} / {:.1} / {delta:+.1}{mark}", best * 100.0, last * 100.0)
                }
                (Some(Ours::Done { best, last }), None) => {
                    let fails = row.fails_below.map(|t| best * 100.0 < t || best.is_nan());
                    let verdict = match fails {
                        Some(true) => " (fails, as in the paper)",
                        Some(false) => " (works; the paper says it fails)",
                        None => "",
                    };
                    format!("- / {:.1} / {:.1}{verdict}", best * 100.0, last * 100.0)
                }
                (Some(Ours::NotRunAtScale), _) => format!("{paper_text} / ·"),
                (Some(Ours::MissingData), _) => format!("{paper_text} / no data"),
                (Some(Ours::NotFinished), _) => format!("{paper_text} / not finished"),
            };
            let (best, last) = match ours {
                Some(Ours::Done { best, last }) => (Some(best), Some(last)),
                _ => (None, None),
            };
            cells.push(json!({
                "method": row.method, "level": row.level, "run": row.run,
                "dataset": col.dataset, "alpha": col.alpha,
                "paper": paper.value(), "best": best.map(|b| b * 100.0), "final": last.map(|l| l * 100.0),
                "delta": best.zip(paper.value()).map(|(b, p)| b * 100.0 - p),
            }));
            let _ = write!(line, " {text} |");
        }
        let _ = writeln!(md, "{line}");
    }
    let _ = writeln!(
        md,
        "\n{within} of {compared} compared cells within tolerance ({}). `·` = not run at this scale; `no data` = dataset not present.",
        table.tolerance.iter().map(|(d, t)| format!("{d} ±{t}")).collect::<Vec<_>>().join(", ")
    );
    (md, cells)
}

/// The grid's pass/fail checks that apply at this scale.
pub fn evaluate_checks(grid: &Grid, results: &Results) -> Vec<Verdict> {
    let mut out = Vec::new();
    for check in grid.checks.iter().filter(|c| c.scales.as_ref().is_none_or(|s| s.iter().any(|s| s == results.scale))) {
        let Some(run) = results.runs.iter().find(|r| r.key == check.run) else { continue };
        let verdict = |passed, detail: String| Verdict { what: check.what.clone(), passed, detail };
        if let Some(fetch) = results.missing.get(&run.dataset) {
            out.push(verdict(None, format!("not checked: {} is not present ({fetch})", run.dataset)));
            continue;
        }
        let Some(outcomes) = results.outcomes.get(&check.run).filter(|o| !o.is_empty()) else {
            out.push(verdict(Some(false), format!("{} did not finish", check.run)));
            continue;
        };
        let mut failures = Vec::new();
        let mut seen = Vec::new();
        for o in outcomes {
            if let Some(min) = check.above {
                let v = match check.metric.as_str() {
                    "final_accuracy" => o.final_accuracy,
                    "best_accuracy" => o.best_accuracy,
                    other => {
                        failures.push(format!("unknown metric `{other}`"));
                        continue;
                    }
                };
                seen.push(format!("{} = {v:.4}", check.metric));
                if !(v > min) {
                    failures.push(format!("{} = {v:.4} ≤ {min}", check.metric));
                }
            }
            let diag = |k: &String| o.diagnostics.get(k).copied().unwrap_or(f64::NAN);
            for (k, want) in &check.equals {
                seen.push(format!("{k} = {}", diag(k)));
                if diag(k) != *want {
                    failures.push(format!("{k} = {}, expected {want}", diag(k)));
                }
            }
            for (k, max) in &check.at_most {
                seen.push(format!("{k} = {}", diag(k)));
                if !(diag(k) <= *max) {
                    failures.push(format!("{k} = {}, expected ≤ {max}", diag(k)));
                }
            }
        }
        let passed = failures.is_empty();
        out.push(verdict(Some(passed), if passed { seen.join(", ") } else { failures.join("; ") }));
    }
    // No NaN outside the runs allowed to diverge (spec §9.4).
    let diverged: Vec<&str> = results
        .runs
        .iter()
        .filter(|r| !r.may_diverge)
        .filter(|r| results.outcomes.get(&r.key).is_some_and(|o| o.iter().any(Outcome::diverged)))
        .map(|r| r.key.as_str())
        .collect();
    out.push(Verdict {
        what: "no NaN loss outside the runs allowed to diverge".into(),
        passed: Some(diverged.is_empty()),
        detail: if diverged.is_empty() { "none".into() } else { diverged.join(", ") },
    });
    out
}

/// The grid's orderings over every (dataset, α) of the tables at this scale.
pub fn evaluate_orderings(grid: &Grid, results: &Results) -> Vec<Verdict> {
    let settings: Vec<(String, f64)> = {
        let mut s: Vec<(String, f64)> = results.runs.iter().map(|r| (r.dataset.clone(), r.alpha)).collect();
        s.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        s.dedup();
        s
    };
    grid.orderings
        .iter()
        .map(|ordering| {
            let (mut holds, mut total, mut broken) = (0, 0, Vec::new());
            for chain in &ordering.chains {
                for (dataset, alpha) in &settings {
                    let Some(best) =
                        chain.iter().map(|row| results.best(dataset, *alpha, row)).collect::<Option<Vec<f64>>>()
                    else {
                        continue;
                    };
                    total += 1;
                    if best.windows(2).all(|w| w[0] + ordering.tolerance >= w[1]) {
                        holds += 1;
                    } else {
                        let values: Vec<String> =
                            chain.iter().zip(&best).map(|(r, b)| format!("{r} {:.1}", b * 100.0)).collect();
                        broken.push(format!("{} ({})", setting(dataset, *alpha), values.join(", ")));
                    }
                }
            }
            let mut detail = format!("holds in {holds} of {total}");
            if !broken.is_empty() {
                let _ = write!(detail, "; not in: {}", broken.join("; "));
            }
            Verdict { what: ordering.what.clone(), passed: (total > 0).then_some(holds == total), detail }
        })
        .collect()
}

/// The Markdown list of verdicts.
pub fn render_verdicts(title: &str, verdicts: &[Verdict]) -> String {
    let mut md = format!("## {title}\n\n");
    for v in verdicts {
        let mark = match v.passed {
            Some(true) => "✓",
            Some(false) => "✗",
            None => "–",
        };
        let _ = writeln!(md, "- {mark} {}: {}", v.what, v.detail);
    }
    md
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn run(dataset: &str, alpha: f64, id: &str) -> PlannedRun {
        PlannedRun {
            key: format!("{}/{id}", setting(dataset, alpha)),
            dataset: dataset.into(),
            alpha,
            id: id.into(),
            seed: 1,
            may_diverge: false,
            experiment: String::new(),
            dir: PathBuf::new(),
        }
    }

    fn outcome(best: f64, last: f64) -> Outcome {
        Outcome {
            best_accuracy: best,
            final_accuracy: last,
            final_loss: 0.1,
            wall_time_s: 1.0,
            curve: vec![],
            diagnostics: BTreeMap::new(),
        }
    }

    const EXPECTED: &str = r#"
        [[tables]]
        id = "t"
        title = "T"
        columns = [{ dataset = "m", alpha = 0.1 }, { dataset = "m", alpha = 0.5 }, { dataset = "c", alpha = 0.1 }]
        tolerance = { m = 3.0 }
        rows = [
            { method = "A", level = "L", run = "a", paper = [94.2, 90.0, 60.0] },
            { method = "B", level = "Arb.", paper = ["-", "-", "-"] },
            { method = "C", level = "S", run = "c", paper = [80.0, "-", 50.0], fails_below = 30.0 },
        ]
    "#;

    #[test]
    fn cells_show_paper_best_final_and_delta_or_why_not() {
        let expected: Expected = toml::from_str(EXPECTED).unwrap();
        let runs = vec![run("m", 0.1, "a"), run("m", 0.1, "c"), run("m", 0.5, "c"), run("c", 0.1, "a")];
        let mut outcomes = BTreeMap::new();
        outcomes.insert("m-a0.1/a".to_string(), vec![outcome(0.95, 0.94), outcome(0.97, 0.96)]);
        outcomes.insert("m-a0.1/c".to_string(), vec![outcome(0.70, 0.70)]);
        outcomes.insert("m-a0.5/c".to_string(), vec![outcome(0.25, 0.2)]);
        let missing = BTreeMap::from([("c".to_string(), "fetch c".to_string())]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing };
        let (md, cells) = render_table(&expected.tables[0], &results);
        // Row A: the mean over two seeds (best 96.0, final 95.0), Δ = +1.8; α = 0.5 not run; c missing.
        assert!(md.contains("| A | L | 94.2 / 96.0 / 95.0 / +1.8 | 90.0 / · | 60.0 / no data |"), "{md}");
        assert!(md.contains("| B | Arb. | - | - | - |"), "{md}");
        // Row C: Δ = −10 is beyond ±3; the paper's "-" cell fails as the paper says.
        assert!(
            md.contains("| C | S | 80.0 / 70.0 / 70.0 / -10.0 ✗ | - / 25.0 / 20.0 (fails, as in the paper) |"),
            "{md}"
        );
        assert!(md.contains("1 of 2 compared cells within tolerance"), "{md}");
        assert_eq!(cells.len(), 9);
        assert_eq!(cells[0]["delta"].as_f64().map(|d| (d * 10.0).round() / 10.0), Some(1.8));
    }

    #[test]
    fn orderings_count_the_settings_where_the_chain_holds() {
        let grid: Grid = toml::from_str(
            r#"
            paper = "p"
            title = "t"
            rows = []
            scales = {}
            datasets = {}
            [[orderings]]
            what = "a ≥ b"
            chains = [["a", "b"]]
            tolerance = 0.01
            "#,
        )
        .unwrap();
        let runs = vec![run("m", 0.1, "a"), run("m", 0.1, "b"), run("m", 0.5, "a"), run("m", 0.5, "b")];
        let mut outcomes = BTreeMap::new();
        outcomes.insert("m-a0.1/a".to_string(), vec![outcome(0.895, 0.9)]);
        outcomes.insert("m-a0.1/b".to_string(), vec![outcome(0.90, 0.9)]);
        outcomes.insert("m-a0.5/a".to_string(), vec![outcome(0.80, 0.8)]);
        outcomes.insert("m-a0.5/b".to_string(), vec![outcome(0.90, 0.9)]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let v = evaluate_orderings(&grid, &results);
        assert_eq!(v[0].passed, Some(false));
        assert!(v[0].detail.starts_with("holds in 1 of 2; not in: m-a0.5 (a 80.0, b 90.0)"), "{}", v[0].detail);
    }
}
