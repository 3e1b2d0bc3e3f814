//! Writes a report directory: one Markdown file per paper table, `summary.md` (missing
//! datasets, the paper's section, checks, orderings, files, scores), the figures and
//! `results.json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::figure_gaps::{FigureGaps, figure_gaps, gaps_in_words};
use super::grid::Grid;
use super::outcome::Outcome;
use super::report::{self, Expected, Findings, Notes, Results, Score, Verdict};
use super::{Options, figures, report_command, runner, scatter, server_loss, traces};
use crate::util::workspace_root;

/// `experiments/<paper>/findings.md`, linked relative to the report directory `dir`.
fn load_findings(paper: &str, dir: &Path) -> Result<Option<Findings>> {
    let root = workspace_root();
    let depth = dir.strip_prefix(&root).map_or(0, |d| d.components().count());
    let link = format!("{}experiments/{paper}/findings.md", "../".repeat(depth));
    Findings::load(&root.join("experiments").join(paper).join("findings.md"), link)
}

/// The tables as written: their cells for `results.json`, their scores and their scatter figures.
struct Tables<'a> {
    json: serde_json::Map<String, serde_json::Value>,
    scores: Vec<(&'a str, Score)>,
    scatters: Vec<(String, PathBuf)>,
}

/// Writes tables, summary, figures and `results.json`; returns how many checks failed.
pub fn write_report(grid: &Grid, expected: &Expected, results: &Results, o: &Options, dir: &Path) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut heading = format!("# {} — scale `{}`\n\n`{}`\n\n", grid.title, o.scale, report_command(o));
    for v in &o.variants {
        let _ = writeln!(heading, "Variant `{v}`: {}.\n", grid.variant(v)?.what);
    }
    let findings = load_findings(&o.paper, dir)?;
    let notes = Notes { findings: findings.as_ref(), variants: &o.variants };
    let tables = write_tables(grid, expected, results, &notes, &heading, dir)?;
    let mut checks = report::evaluate_checks(grid, results);
    let mut orderings = report::evaluate_orderings(grid, results, findings.as_ref());
    orderings.extend(report::evaluate_trends(grid, results, findings.as_ref()));
    let names: BTreeMap<String, String> = figures::run_names(grid, expected)
        .into_iter()
        .map(|(id, name)| (id.clone(), results.row_name(&id, &name)))
        .collect();
    let mut figures = figures::write_figures(grid, &names, results, dir)?;
    figures.extend(figures::write_sweeps(grid, &names, results, dir)?);
    figures.extend(traces::write_traces(grid, &names, results, dir)?);
    figures.extend(tables.scatters.iter().cloned());
    let section = match expected.section.as_deref() {
        None => None,
        Some("server-loss") => Some(server_loss::write(results, &expected.curves, &expected.participation, dir)?),
        Some(other) => bail!("expected.toml: section = `{other}` is not known; the known section is `server-loss`"),
    };
    if let Some(s) = &section {
        checks.extend(s.checks.iter().cloned());
        figures.extend(s.figures.iter().cloned());
    }
    let mut summary = heading;
    summary.push_str(&missing_markdown(results));
    if let Some(s) = &section {
        summary.push_str(&s.markdown);
    }
    summary.push_str(&report::render_verdicts("Checks", &checks));
    summary.push('\n');
    summary.push_str(&report::render_verdicts("Orderings (the shape of the paper's results)", &orderings));
    summary.push_str(&files_markdown(expected, &figures, &figure_gaps(grid, results)));
    summary.push_str(&scores_markdown(&tables.scores));
    std::fs::write(dir.join("summary.md"), &summary)
        .with_context(|| format!("writing {}", dir.join("summary.md").display()))?;

    let results_json = json!({
        "paper": grid.paper, "title": grid.title, "scale": o.scale, "variants": o.variants,
        "command": report_command(o), "missing_datasets": results.missing, "runs": runs_json(results),
        "tables": tables.json, "checks": checks, "orderings": orderings,
        "scores": tables.scores.iter().map(|(t, s)| (t.to_string(), json!(s))).collect::<serde_json::Map<_, _>>(),
    });
    let path = dir.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results_json)?)
        .with_context(|| format!("writing {}", path.display()))?;
    print_checks(&checks);
    Ok(checks.iter().filter(|v| v.passed == Some(false)).count())
}

/// Writes `<table>.md` and the table's scatter for every paper table.
fn write_tables<'a>(
    grid: &Grid,
    expected: &'a Expected,
    results: &Results,
    notes: &Notes,
    heading: &str,
    dir: &Path,
) -> Result<Tables<'a>> {
    let mut tables = Tables { json: serde_json::Map::new(), scores: Vec::new(), scatters: Vec::new() };
    for table in &expected.tables {
        let rendered = report::render_table(table, results, notes);
        let path = dir.join(format!("{}.md", table.id));
        std::fs::write(&path, format!("{heading}{}", rendered.markdown))
            .with_context(|| format!("writing {}", path.display()))?;
        tables.scatters.extend(scatter::write(grid, table, &rendered.cells, dir)?);
        tables.json.insert(table.id.clone(), json!(rendered.cells));
        tables.scores.push((&table.title, rendered.score));
    }
    Ok(tables)
}

/// How to supply each dataset that is not present.
fn missing_markdown(results: &Results) -> String {
    if results.missing.is_empty() {
        return String::new();
    }
    let mut md = "## Datasets not present\n\n".to_string();
    for (d, m) in &results.missing {
        let _ = writeln!(
            md,
            "- {} (`{d}`): its cells read \"needs {}\". Place the official files in the data directory \
             (`fl data info {d}` says where and in which format), or fetch them with `{}` where there is internet.",
            m.title, m.title, m.fetch
        );
    }
    md.push('\n');
    md
}

/// Links to the tables and the figures, shown inline, each drawn figure with the panels it
/// lacks and why; then the figures with no panel at all, and why.
fn files_markdown(expected: &Expected, figures: &[(String, PathBuf)], gaps: &[FigureGaps]) -> String {
    let mut md = "\n## Files\n\n".to_string();
    for table in &expected.tables {
        let _ = writeln!(md, "- [{}]({}.md)", table.title, table.id);
    }
    for (title, file) in figures {
        let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let _ = writeln!(md, "- {title}\n\n  ![{title}]({name})");
        if let Some(g) = gaps.iter().find(|g| &g.title == title) {
            let _ = writeln!(md, "\n  Panels not drawn: {}.", gaps_in_words(&g.gaps));
        }
    }
    for g in gaps.iter().filter(|g| !figures.iter().any(|(title, _)| title == &g.title)) {
        let _ = writeln!(md, "- {}: not drawn: {}.", g.title, gaps_in_words(&g.gaps));
    }
    md
}

/// One line per table: cells within tolerance / compared / in the paper.
fn scores_markdown(scores: &[(&str, Score)]) -> String {
    if scores.is_empty() {
        return String::new();
    }
    let mut md =
        "\n## Score\n\nAccuracy cells within the paper's tolerance / compared (a finished run) / in the paper:\n\n"
            .to_string();
    for (title, s) in scores {
        let _ = writeln!(md, "- {title}: {} / {} / {}", s.within, s.compared, s.in_paper);
    }
    md
}

/// Every planned run with its status and, when finished, its outcome.
fn runs_json(results: &Results) -> Vec<serde_json::Value> {
    results
        .runs
        .iter()
        .map(|r| {
            let o = runner::is_done(r).then(|| Outcome::read(&r.dir, r.seed).ok()).flatten();
            let status = if results.missing.contains_key(&r.dataset) {
                "missing-data"
            } else if runner::is_done(r) {
                "done"
            } else {
                "not-finished"
            };
            json!({
                "key": r.key, "dataset": r.dataset, "setting": r.setting, "id": r.id, "seed": r.seed,
                "status": status, "dir": r.dir.strip_prefix(workspace_root()).unwrap_or(&r.dir).display().to_string(),
                "best_accuracy": o.as_ref().map(|o| o.best_accuracy),
                "final_accuracy": o.as_ref().map(|o| o.final_accuracy),
                "final_loss": o.as_ref().map(|o| o.final_loss),
                "wall_time_s": o.as_ref().map(|o| o.wall_time_s),
            })
        })
        .collect()
}

fn print_checks(checks: &[Verdict]) {
    for v in checks {
        let mark = match v.passed {
            Some(true) => "ok  ",
            Some(false) => "FAIL",
            None => "skip",
        };
        println!("check {mark} {}: {}", v.what, v.detail);
    }
}
