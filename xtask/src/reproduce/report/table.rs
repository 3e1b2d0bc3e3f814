//! A paper table rendered as Markdown with ours beside the paper's numbers, and its cells for
//! `results.json`.

use std::fmt::Write as _;

use serde_json::json;

use crate::reproduce::outcome::Outcome;

use super::expected::{Column, ColumnMetric, Findings, PaperCell, PaperRow, PaperTable};
use super::results::{Ours, Results, mean, ours_time, std_dev};

/// How a report annotates the rows out of tolerance.
#[derive(Default)]
pub struct Notes<'a> {
    /// The paper's findings (`experiments/<paper>/findings.md`), linked from each row that has a
    /// section there.
    pub findings: Option<&'a Findings>,
    /// The report's variants: a row's `known` describes the paper's protocol, which variants
    /// change, so a variant report points to the findings instead of quoting it.
    pub variants: &'a [String],
}

/// A table's score: accuracy cells within tolerance, of those compared (a paper value and a
/// finished run), of those with a value in the paper.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Score {
    pub within: usize,
    pub compared: usize,
    pub in_paper: usize,
}

/// A rendered table: its Markdown, its cells for `results.json` and its score.
pub struct RenderedTable {
    pub markdown: String,
    pub cells: Vec<serde_json::Value>,
    pub score: Score,
}

/// Renders a paper table as Markdown beside its cells for `results.json` and its score.
pub fn render_table(table: &PaperTable, results: &Results, notes: &Notes) -> RenderedTable {
    let title = match &table.substitution {
        Some(what) => format!("{} (substitution: {what})", table.title),
        None => table.title.clone(),
    };
    let mut md = format!("## {title}\n\n{}\n", legend(table));
    let with_level = table.rows.iter().any(|r| !r.level.is_empty());
    let header: Vec<String> = table.columns.iter().map(Column::header).collect();
    let level_head = if with_level { format!(" {} |", table.level_header) } else { String::new() };
    let _ = writeln!(md, "| Method |{level_head} {} |", header.join(" | "));
    let _ = writeln!(md, "|---|{}{}", if with_level { "---|" } else { "" }, "---|".repeat(table.columns.len()));
    let fastest = fastest_references(table, results);
    let mut cells = Vec::new();
    let mut score = Score::default();
    let mut out_of_tolerance = Vec::new();
    for row in &table.rows {
        let method = row.run.as_deref().map_or_else(|| row.method.clone(), |id| results.row_name(id, &row.method));
        let mut line = format!("| {method} |");
        if with_level {
            let _ = write!(line, " {} |", row.level);
        }
        let mut row_off = false;
        for ((c, col), paper) in table.columns.iter().enumerate().zip(&row.paper) {
            let cell = render_cell(table, results, row, col, *paper, fastest[c]);
            if let Some(within) = cell.within {
                score.compared += 1;
                score.within += usize::from(within);
                row_off |= !within;
            }
            if paper.value().is_some() && col.metric.is_accuracy() && row.run.is_some() {
                score.in_paper += 1;
            }
            cells.push(cell.json);
            let _ = write!(line, " {} |", cell.text);
        }
        let _ = writeln!(md, "{line}");
        if row_off {
            out_of_tolerance.push(row);
        }
    }
    if score.compared > 0 {
        let _ = writeln!(
            md,
            "\n{} of {} compared accuracy cells within tolerance ({}); the paper has {}.",
            score.within,
            score.compared,
            table.tolerance.iter().map(|(d, t)| format!("{d} ±{t}")).collect::<Vec<_>>().join(", "),
            score.in_paper
        );
    }
    let explained = explain(table, &out_of_tolerance, notes);
    if !explained.is_empty() {
        let _ =
            writeln!(md, "\nWhat is known of the rows with cells out of tolerance (✗):\n\n{}", explained.join("\n"));
    }
    let _ = writeln!(
        md,
        "\n`not run` = the dataset is here but this report did not run the cell (its scale or `--only`); \
         `needs <dataset>` = the dataset is not on this machine (summary.md says how to supply it)."
    );
    RenderedTable { markdown: md, cells, score }
}

/// What the cells of the table's columns read.
fn legend(table: &PaperTable) -> String {
    let mut md = String::new();
    if table.columns.iter().any(|c| c.metric == ColumnMetric::Accuracy) {
        md += "Accuracy cells: paper / ours (best) / ours (final) / Δ = best − paper, in points.\n";
    }
    if table.columns.iter().any(|c| c.metric == ColumnMetric::AccuracyAtBudget) {
        let _ = writeln!(
            md,
            "Accuracy-at-budget cells: paper / ours (best within {}× the run's own time to target) / Δ, in points.",
            table.budget_factor
        );
    }
    if table.columns.iter().any(|c| c.metric == ColumnMetric::ConvergedAccuracy) {
        md += "Convergence-accuracy cells: paper / ours (mean of the last 3 evaluations) / ours (best) / Δ = last-3 mean − paper, in points.\n";
    }
    if table.columns.iter().any(|c| c.metric.is_final_score()) {
        md += "Top-5, macro-F1 and RU cells: paper / ours (final evaluation; RU over the run), in %.\n";
    }
    if table.columns.iter().any(|c| matches!(c.metric, ColumnMetric::JobTime | ColumnMetric::PeakMemory)) {
        md += "Job time and memory cells: paper / ours (mean job time of the column's clients, virtual s; their largest job memory estimate, MB).\n";
    }
    if table.substitution.is_some() {
        md += "The runs substitute for the paper's setting: its numbers stand beside ours for context, none is judged against them.\n";
    }
    if table.columns.iter().any(|c| c.metric.is_time()) {
        let _ = writeln!(
            md,
            "Time cells: paper s (ratio to the fastest of {}) / ours virtual s (same ratio).",
            table.ratio_to.join(", ")
        );
    }
    md
}

/// The fastest reference row per column, the paper's and ours, for the time ratios.
fn fastest_references(table: &PaperTable, results: &Results) -> Vec<(Option<f64>, Option<f64>)> {
    table
        .columns
        .iter()
        .enumerate()
        .map(|(c, col)| {
            let refs = table.rows.iter().filter(|r| r.run.as_ref().is_some_and(|id| table.ratio_to.contains(id)));
            let min = |v: Vec<f64>| v.into_iter().reduce(f64::min);
            let paper = min(refs.clone().filter_map(|r| r.paper[c].value()).collect());
            let ours = min(refs
                .filter_map(|r| match results.ours(&col.dataset, &col.setting.id(), r.run.as_deref()?) {
                    Ours::Done(o) => ours_time(col.metric, table.budget_factor, o),
                    _ => None,
                })
                .collect());
            (paper, ours)
        })
        .collect()
}

/// One rendered cell: its text, its `results.json` entry, and whether it is within tolerance
/// (None where nothing was compared).
struct Cell {
    text: String,
    json: serde_json::Value,
    within: Option<bool>,
}

fn render_cell(
    table: &PaperTable,
    results: &Results,
    row: &PaperRow,
    col: &Column,
    paper: PaperCell,
    fastest: (Option<f64>, Option<f64>),
) -> Cell {
    let paper_text = match paper.value() {
        None => "-".to_string(),
        Some(v) if col.metric.is_time() => format!("{v:.2} s{}", ratio(v, fastest.0)),
        Some(v) => format!("{v:.1}"),
    };
    let judged = table.substitution.is_none();
    let tolerance = table.tolerance.get(&col.dataset).copied().unwrap_or(f64::INFINITY);
    let ours = row.run.as_deref().map(|r| results.ours(&col.dataset, &col.setting.id(), r));
    let (mut best, mut best_std, mut last, mut value, mut within) = (None, None, None, None, None);
    // Judges a compared cell and returns its mark: " ✗" beyond the tolerance.
    let mut judge = |delta: f64| {
        if !judged {
            return "";
        }
        let ok = delta.abs() <= tolerance;
        within = Some(ok);
        if ok { "" } else { " ✗" }
    };
    let text = match &ours {
        None => "-".to_string(),
        Some(Ours::Done(o)) => match col.metric {
            ColumnMetric::Accuracy => {
                let (b, l) = (mean(o, |o| o.best_accuracy), mean(o, |o| o.final_accuracy));
                (best, last) = (Some(b), Some(l));
                best_std = std_dev(o, |o| o.best_accuracy);
                let spread = best_std.map_or(String::new(), |s| format!(" ± {:.1}", s * 100.0));
                let planned = results.planned_seeds(&col.dataset, &col.setting.id(), row.run.as_deref().unwrap_or(""));
                let seeds =
                    if o.len() < planned { format!(" ({} of {planned} seeds)", o.len()) } else { String::new() };
                match paper.value() {
                    Some(p) => {
                        let delta = b * 100.0 - p;
                        let mark = judge(delta);
                        format!("{paper_text} / {:.1}{spread} / {:.1} / {delta:+.1}{mark}{seeds}", b * 100.0, l * 100.0)
                    }
                    None => {
                        let fails = row.fails_below.map(|t| b * 100.0 < t || b.is_nan());
                        let verdict = match fails {
                            Some(true) => " (fails, as in the paper)",
                            Some(false) => " (works; the paper says it fails)",
                            None => "",
                        };
                        format!("- / {:.1}{spread} / {:.1}{verdict}{seeds}", b * 100.0, l * 100.0)
                    }
                }
            }
            ColumnMetric::AccuracyAtBudget => {
                let reached = o.iter().all(|o| o.time_to_target_s.is_some());
                let v = mean(o, |o| match o.time_to_target_s {
                    Some(t) => o.best_within(table.budget_factor * t),
                    None => o.best_accuracy,
                });
                value = Some(v * 100.0);
                let note = if reached { "" } else { " (target not reached: best of the run)" };
                match paper.value() {
                    Some(p) => {
                        let delta = v * 100.0 - p;
                        let mark = judge(delta);
                        format!("{paper_text} / {:.2} / {delta:+.2}{mark}{note}", v * 100.0)
                    }
                    None => format!("- / {:.2}{note}", v * 100.0),
                }
            }
            ColumnMetric::ConvergedAccuracy => {
                let (v, b) = (mean(o, |o| o.last_mean(3)), mean(o, |o| o.best_accuracy));
                value = Some(v * 100.0);
                match paper.value() {
                    Some(p) => {
                        let delta = v * 100.0 - p;
                        let mark = judge(delta);
                        format!("{paper_text} / {:.1} / {:.1} / {delta:+.1}{mark}", v * 100.0, b * 100.0)
                    }
                    None => format!("- / {:.1} / {:.1}", v * 100.0, b * 100.0),
                }
            }
            ColumnMetric::Top5
            | ColumnMetric::MacroF1
            | ColumnMetric::ClientTop1
            | ColumnMetric::ClientTop5
            | ColumnMetric::ClientMacroF1
            | ColumnMetric::ResourceUtilization => {
                let v = mean(o, |o| o.final_score(col.metric)) * 100.0;
                value = Some(v);
                match paper.value() {
                    Some(p) if judged && col.metric.is_accuracy() => {
                        let delta = v - p;
                        let mark = judge(delta);
                        format!("{paper_text} / {v:.1} / {delta:+.1}{mark}")
                    }
                    _ => format!("{paper_text} / {v:.1}"),
                }
            }
            ColumnMetric::JobTime | ColumnMetric::PeakMemory => {
                let v = mean(o, |o| o.client_figure(col.metric, &col.clients));
                value = Some(v);
                format!("{paper_text} / {v:.1}")
            }
            ColumnMetric::TimeToTarget | ColumnMetric::Budget => match ours_time(col.metric, table.budget_factor, o) {
                Some(t) => {
                    value = Some(t);
                    format!("{paper_text} / {t:.1} s{}", ratio(t, fastest.1))
                }
                None => format!("{paper_text} / target not reached in {:.0} s", mean(o, Outcome::duration_s)),
            },
        },
        Some(Ours::NotRunAtScale) => format!("{paper_text} / not run"),
        Some(Ours::MissingData(title)) => format!("{paper_text} / needs {title}"),
        Some(Ours::NotFinished) => format!("{paper_text} / not finished"),
    };
    let json = json!({
        "method": row.method, "level": row.level, "run": row.run,
        "dataset": col.dataset, "setting": col.setting.id(), "metric": format!("{:?}", col.metric),
        "paper": paper.value(), "best": best.map(|b| b * 100.0), "final": last.map(|l| l * 100.0),
        "best_std": best_std.map(|s| s * 100.0),
        "seeds": match &ours { Some(Ours::Done(o)) => o.len(), _ => 0 },
        "value": value,
        "delta": best.map(|b| b * 100.0).or(value.filter(|_| !col.metric.is_time())).zip(paper.value()).map(|(b, p)| b - p),
        "within_tolerance": within,
    });
    Cell { text, json, within }
}

/// The notes under the table for the rows out of tolerance, in table order.
fn explain(table: &PaperTable, rows: &[&PaperRow], notes: &Notes) -> Vec<String> {
    let link = |row: &PaperRow| -> Option<String> {
        let findings = notes.findings?;
        let id = row.run.as_deref()?;
        findings.has(id).then(|| format!("[findings]({}#{id})", findings.link))
    };
    // The row whose findings speak for `row`: itself, or the row its `known_as` names.
    fn source<'t>(table: &'t PaperTable, row: &'t PaperRow) -> Option<&'t PaperRow> {
        match &row.known_as {
            Some(other) => table.rows.iter().find(|r| r.name() == *other),
            None => Some(row),
        }
    }
    if !notes.variants.is_empty() {
        return rows
            .iter()
            .map(|row| {
                let see =
                    source(table, row).and_then(link).map_or(String::new(), |l| format!("; see the {l} on this row"));
                format!(
                    "- {}: its note in the scale's report describes the paper's protocol, which this report's \
                     variants change{see}.",
                    row.name()
                )
            })
            .collect();
    }
    let listed = |name: &str| rows.iter().any(|r| r.name() == name && r.known.is_some());
    // A text borrowed from a row that is not listed is written out once, under the first row that
    // borrows it; the others point there.
    let mut written_under: Vec<(&str, String)> = Vec::new();
    rows.iter()
        .filter_map(|row| {
            let (text, source) = match (&row.known, &row.known_as) {
                (Some(known), _) => (known.clone(), Some(*row)),
                (None, Some(other)) if listed(other) => (format!("as {}.", other.trim_end_matches('.')), None),
                (None, Some(other)) => match written_under.iter().find(|(o, _)| o == other) {
                    Some((_, first)) => (format!("as {}.", first.trim_end_matches('.')), None),
                    None => {
                        let source = table.rows.iter().find(|r| r.name() == *other)?;
                        written_under.push((other.as_str(), row.name()));
                        (source.known.clone()?, Some(source))
                    }
                },
                (None, None) => ("not explained: expected.toml gives this row no `known`.".to_string(), None),
            };
            let more = source.and_then(link).map_or(String::new(), |l| format!(" ({l})"));
            Some(format!("- {}: {text}{more}", row.name()))
        })
        .collect()
}

/// ` (r×)`: `v` relative to `fastest`, when known.
fn ratio(v: f64, fastest: Option<f64>) -> String {
    fastest.filter(|f| *f > 0.0).map_or(String::new(), |f| format!(" ({:.2}×)", v / f))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::reproduce::grid::PlannedRun;
    use crate::reproduce::outcome::Point;
    use crate::reproduce::report::expected::{Expected, Findings};
    use crate::reproduce::report::results::MissingData;
    use crate::reproduce::report::results::fixtures::{outcome, run};

    const EXPECTED: &str = r#"
        [[tables]]
        id = "t"
        title = "T"
        columns = [{ dataset = "m", alpha = 0.1 }, { dataset = "m", alpha = 0.5 }, { dataset = "c", alpha = 0.1 }]
        tolerance = { m = 3.0 }
        rows = [
            { method = "A", level = "L", run = "a", paper = [94.2, 90.0, 60.0] },
            { method = "B", level = "Arb.", paper = ["-", "-", "-"] },
            { method = "C", level = "S", run = "c", paper = [80.0, "-", 50.0], fails_below = 30.0, known = "C is slow" },
            { method = "D", level = "L", run = "a", paper = [96.0, 90.0, 60.0], known = "D is different" },
        ]
    "#;

    #[test]
    fn cells_show_paper_best_final_and_delta_or_why_not() {
        let expected: Expected = toml::from_str(EXPECTED).unwrap();
        let seed2 = |r: PlannedRun| PlannedRun { seed: 2, ..r };
        let runs = vec![
            run("m", 0.1, "a"),
            seed2(run("m", 0.1, "a")),
            run("m", 0.1, "c"),
            seed2(run("m", 0.1, "c")),
            run("m", 0.5, "c"),
            run("c", 0.1, "a"),
        ];
        let mut outcomes = BTreeMap::new();
        outcomes.insert("m-a0.1/a".to_string(), vec![outcome(0.95, 0.94), outcome(0.97, 0.96)]);
        outcomes.insert("m-a0.1/c".to_string(), vec![outcome(0.70, 0.70)]);
        outcomes.insert("m-a0.5/c".to_string(), vec![outcome(0.25, 0.2)]);
        let missing =
            BTreeMap::from([("c".to_string(), MissingData { title: "C-10".into(), fetch: "fetch c".into() })]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing };
        let rendered = render_table(&expected.tables[0], &results, &Notes::default());
        let md = rendered.markdown;
        let cells = rendered.cells;
        // Row A: the mean over two seeds (best 96.0 ± √2, final 95.0), Δ = +1.8; α = 0.5 not run;
        // c missing.
        assert!(
            md.contains("| A | L | 94.2 / 96.0 ± 1.4 / 95.0 / +1.8 | 90.0 / not run | 60.0 / needs C-10 |"),
            "{md}"
        );
        assert!(md.contains("| B | Arb. | - | - | - |"), "{md}");
        // Row C: Δ = −10 is beyond ±3, with one of its two seeds; the paper's "-" cell fails as the
        // paper says.
        assert!(
            md.contains(
                "| C | S | 80.0 / 70.0 / 70.0 / -10.0 ✗ (1 of 2 seeds) | - / 25.0 / 20.0 (fails, as in the paper) |"
            ),
            "{md}"
        );
        assert!(md.contains("2 of 3 compared accuracy cells within tolerance (m ±3); the paper has 8."), "{md}");
        assert_eq!(rendered.score, Score { within: 2, compared: 3, in_paper: 8 });
        assert!(md.contains("out of tolerance (✗):\n\n- C S: C is slow\n"), "{md}");
        assert!(!md.contains("D is different"), "row D is within tolerance: {md}");
        assert_eq!(cells.len(), 12);
        assert_eq!(cells[0]["delta"].as_f64().map(|d| (d * 10.0).round() / 10.0), Some(1.8));
        let std = cells[0]["best_std"].as_f64().unwrap();
        assert!((std - 2f64.sqrt()).abs() < 1e-9, "sample std of 95 and 97: {std}");
        assert_eq!(cells[0]["seeds"], 2);
    }

    #[test]
    fn a_convergence_accuracy_cell_compares_the_mean_of_the_last_three_evaluations() {
        let expected: Expected = toml::from_str(
            r#"
            [[tables]]
            id = "t"
            title = "T"
            columns = [{ dataset = "m", alpha = 0.1, metric = "converged_accuracy" }]
            tolerance = { m = 1.0 }
            rows = [{ method = "A", run = "a", paper = [85.8] }, { method = "B", run = "b", paper = [80.0] }]
            "#,
        )
        .unwrap();
        let point = |accuracy: f64| Point::at(0.0, 0.0, accuracy, 1.0);
        let curve = |accs: &[f64]| Outcome { curve: accs.iter().map(|&a| point(a)).collect(), ..outcome(0.9, 0.84) };
        let runs = vec![run("m", 0.1, "a"), run("m", 0.1, "b")];
        let outcomes = BTreeMap::from([
            // The last three, 0.88, 0.85 and 0.84, average 0.8567: Δ = −0.1 against 85.8.
            ("m-a0.1/a".to_string(), vec![curve(&[0.5, 0.9, 0.88, 0.85, 0.84])]),
            ("m-a0.1/b".to_string(), vec![curve(&[0.7, 0.76])]),
        ]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let rendered = render_table(&expected.tables[0], &results, &Notes::default());
        let md = rendered.markdown;
        assert!(md.contains("| A | 85.8 / 85.7 / 90.0 / -0.1 |"), "{md}");
        assert!(md.contains("| B | 80.0 / 73.0 / 90.0 / -7.0 ✗ |"), "fewer than three evaluations: their mean: {md}");
        assert!(md.contains("Convergence-accuracy cells: paper / ours (mean of the last 3 evaluations)"), "{md}");
        assert_eq!(rendered.score, Score { within: 1, compared: 2, in_paper: 2 });
        let delta = rendered.cells[0]["delta"].as_f64().unwrap();
        assert!((delta - (85.666_666 - 85.8)).abs() < 1e-3, "{delta}");
    }

    #[test]
    fn a_substitution_shows_top5_f1_and_ru_beside_the_paper_and_judges_nothing() {
        let expected: Expected = toml::from_str(
            r#"
            [[tables]]
            id = "t"
            title = "T"
            substitution = "Fashion-MNIST, a small ViT"
            columns = [
                { dataset = "m", alpha = 0.1 },
                { dataset = "m", alpha = 0.1, metric = "top5" },
                { dataset = "m", alpha = 0.1, metric = "macro_f1" },
                { dataset = "m", alpha = 0.1, metric = "resource_utilization" },
            ]
            tolerance = { m = 1.0 }
            rows = [{ method = "A", run = "a", paper = [33.1, 59.2, 31.9, 87.9] }]
            "#,
        )
        .unwrap();
        let last = Point { top5: 0.975, macro_f1: 0.8125, client_accuracy: 0.5, ..Point::at(1.0, 1.0, 0.84, 1.0) };
        let a = Outcome { curve: vec![last], resource_utilization: 0.75, ..outcome(0.9, 0.84) };
        let runs = vec![run("m", 0.1, "a")];
        let outcomes = BTreeMap::from([("m-a0.1/a".to_string(), vec![a])]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let rendered = render_table(&expected.tables[0], &results, &Notes::default());
        let md = rendered.markdown;
        assert!(md.contains("## T (substitution: Fashion-MNIST, a small ViT)"), "{md}");
        assert!(md.contains("| A | 33.1 / 90.0 / 84.0 / +56.9 | 59.2 / 97.5 | 31.9 / 81.2 | 87.9 / 75.0 |"), "{md}");
        assert_eq!(rendered.score, Score { within: 0, compared: 0, in_paper: 3 });
        assert_eq!(rendered.cells[3]["value"].as_f64(), Some(75.0));
    }

    #[test]
    fn a_row_known_as_another_points_to_it_when_listed_and_quotes_it_when_not() {
        let expected = |rows: &str| -> Expected {
            toml::from_str(&format!(
                r#"
                [[tables]]
                id = "t"
                title = "T"
                columns = [{{ dataset = "m", alpha = 0.1 }}]
                tolerance = {{ m = 3.0 }}
                rows = [{rows}]
                "#
            ))
            .unwrap()
        };
        let runs = vec![run("m", 0.1, "a"), run("m", 0.1, "b"), run("m", 0.1, "c")];
        let outcomes = BTreeMap::from([
            ("m-a0.1/a".to_string(), vec![outcome(0.90, 0.90)]),
            ("m-a0.1/b".to_string(), vec![outcome(0.90, 0.90)]),
            ("m-a0.1/c".to_string(), vec![outcome(0.90, 0.90)]),
        ]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        // A is off by 10 (listed), B by 20: B points to A.
        let both = expected(
            r#"{ method = "A", level = "L.", run = "a", paper = [80.0], known = "why A" },
               { method = "B", level = "S", run = "b", paper = [70.0], known_as = "A L." }"#,
        );
        let rendered = render_table(&both.tables[0], &results, &Notes::default());
        let md = rendered.markdown;
        assert!(md.contains("- A L.: why A\n- B S: as A L.\n"), "{md}");
        // A within tolerance, B and C off: B quotes A's text, C points to B.
        let b_and_c = expected(
            r#"{ method = "A", level = "L", run = "a", paper = [90.0], known = "why A" },
               { method = "B", level = "S", run = "b", paper = [70.0], known_as = "A L" },
               { method = "C", level = "S", run = "c", paper = [70.0], known_as = "A L" }"#,
        );
        let rendered = render_table(&b_and_c.tables[0], &results, &Notes::default());
        let md = rendered.markdown;
        assert!(md.contains("out of tolerance (✗):\n\n- B S: why A\n- C S: as B S.\n"), "{md}");
        // B off with nothing said of it: listed as not explained, never left out.
        let silent = expected(r#"{ method = "B", level = "S", run = "b", paper = [70.0] }"#);
        let rendered = render_table(&silent.tables[0], &results, &Notes::default());
        let md = rendered.markdown;
        assert!(md.contains("- B S: not explained: expected.toml gives this row no `known`.\n"), "{md}");
    }

    #[test]
    fn known_as_naming_no_explained_row_is_an_error_naming_the_file_and_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("expected.toml");
        std::fs::write(
            &path,
            r#"
            [[tables]]
            id = "t"
            title = "T"
            columns = [{ dataset = "m", alpha = 0.1 }]
            rows = [{ method = "B", level = "S", run = "b", paper = [70.0], known_as = "A L" }]
            "#,
        )
        .unwrap();
        let err = format!("{:#}", Expected::load(&path).unwrap_err());
        assert!(err.contains("expected.toml: table t row B S: known_as = \"A L\""), "{err}");
    }

    /// A run that reaches 0.5 accuracy at `ttt` virtual seconds and 0.9 at `3 ttt + 1`.
    fn timed(ttt: f64) -> Outcome {
        let point = |time_s: f64, accuracy: f64| Point::at(0.0, time_s, accuracy, 1.0);
        Outcome {
            time_to_target_s: Some(ttt),
            curve: vec![point(0.0, 0.1), point(ttt, 0.5), point(3.0 * ttt, 0.6), point(3.0 * ttt + 1.0, 0.9)],
            ..outcome(0.9, 0.9)
        }
    }

    #[test]
    fn time_cells_show_ratios_to_the_fastest_reference_and_budget_accuracy() {
        let expected: Expected = toml::from_str(
            r#"
            [[tables]]
            id = "t"
            title = "T"
            ratio_to = ["avg", "async"]
            tolerance = { m = 1.0 }
            columns = [
                { dataset = "m", setting = "main", metric = "time_to_target" },
                { dataset = "m", setting = "main", metric = "accuracy_at_budget", label = "m acc" },
                { dataset = "m", setting = "main", metric = "budget" },
            ]
            rows = [
                { method = "FedAvg", run = "avg", paper = [400.0, 96.0, 1200.0] },
                { method = "FedAsync", run = "async", paper = [200.0, 96.5, 600.0] },
                { method = "Ours", run = "ours", paper = [50.0, 60.0, 150.0] },
            ]
            "#,
        )
        .unwrap();
        let planned =
            |id: &str| PlannedRun { key: format!("m-main/{id}"), setting: "main".into(), ..run("m", 0.1, id) };
        let runs = vec![planned("avg"), planned("async"), planned("ours")];
        let outcomes = BTreeMap::from([
            ("m-main/avg".to_string(), vec![timed(100.0)]),
            ("m-main/async".to_string(), vec![timed(40.0)]),
            ("m-main/ours".to_string(), vec![Outcome { time_to_target_s: None, ..timed(10.0) }]),
        ]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let rendered = render_table(&expected.tables[0], &results, &Notes::default());
        let md = rendered.markdown;
        assert!(md.contains("| Method | m main | m acc | m main |"), "{md}");
        // Fastest reference: paper 200 s, ours 40 s. Within 3× its time to target FedAvg's best is
        // 60%; 36 points under the paper.
        assert!(md.contains("| FedAvg | 400.00 s (2.00×) / 100.0 s (2.50×) | 96.0 / 60.00 / -36.00 ✗ | 1200.00 s (2.00×) / 300.0 s (2.50×) |"), "{md}");
        assert!(md.contains("| Ours | 50.00 s (0.25×) / target not reached in 31 s | 60.0 / 90.00 / +30.00 ✗ (target not reached: best of the run) |"), "{md}");
    }

    #[test]
    fn notes_link_the_findings_and_a_variant_report_points_there_instead_of_quoting() {
        let expected: Expected = toml::from_str(EXPECTED).unwrap();
        let runs = vec![run("m", 0.1, "c")];
        let outcomes = BTreeMap::from([("m-a0.1/c".to_string(), vec![outcome(0.70, 0.70)])]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let findings = Findings::parse("# F\n\n## c\n\nC is slow because...\n", "../f.md".into());
        let notes = Notes { findings: Some(&findings), variants: &[] };
        let md = render_table(&expected.tables[0], &results, &notes).markdown;
        assert!(md.contains("- C S: C is slow ([findings](../f.md#c))\n"), "{md}");
        assert!(md.contains("| C | S |"), "{md}");
        let variants = ["code-data".to_string()];
        let varied = vec![PlannedRun { varied_by: variants.to_vec(), ..run("m", 0.1, "c") }];
        let results = Results { runs: &varied, ..results };
        let md = render_table(&expected.tables[0], &results, &Notes { findings: Some(&findings), variants: &variants })
            .markdown;
        assert!(md.contains("| C [code-data] | S |"), "the row its variant changed says so: {md}");
        assert!(!md.contains("C is slow"), "a variant changes what the note describes: {md}");
        assert!(md.contains("- C S: its note in the scale's report describes the paper's protocol, which this report's variants change; see the [findings](../f.md#c) on this row.\n"), "{md}");
    }
}
