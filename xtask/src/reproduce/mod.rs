//! `cargo xtask reproduce <paper> [--scale S] [--variant V,…] [--only D,…] [--device D] [--jobs N]
//! [--workers N] [--seeds 1,2,3]`: runs the grid of `experiments/<paper>/grid.toml` at a scale (with some of
//! its variants, alternatives to the paper's choices), resuming finished runs, and writes
//! `reports/<paper>/<scale>[-<variant>+…]/`: one Markdown file per paper table (paper / ours / Δ),
//! `summary.md` (missing datasets, checks, orderings), PNG figures and `results.json`. Seed 1
//! alone is the papers' protocol (one run per cell); another set of seeds reports its means in
//! `seeds-<a>-<b>…/` beneath, so that it never replaces the seed-1 report.
//!
//! A dataset that is not present is reported with the command that fetches it; its cells read
//! "no data". The command fails if a run fails or a check of the grid does not hold.
//! `--report-only` writes the report from the runs finished so far and runs nothing; `--runs`
//! runs a slice of the grid. Finished runs are also kept as records in the report's `runs/`
//! (see `records`), from which a later reproduction, on any machine, resumes.

mod figures;
mod grid;
mod outcome;
mod records;
mod report;
mod runner;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::util::{cargo, run as run_cmd, workspace_root};
use grid::{Grid, PlannedRun};
use outcome::Outcome;
use records::Records;
use report::{Expected, Results};
use runner::Runner;

const USAGE: &str = "usage: cargo xtask reproduce <paper> [--scale smoke|reduced|full] [--variant NAME,…] [--only DATASET,…] \
                     [--device auto|cpu|cuda] [--jobs N] [--workers N] [--seeds 1,2,3] [--out DIR] [--runs KEY,…] [--report-only]";

struct Options {
    paper: String,
    scale: String,
    variants: Vec<String>,
    only: Option<Vec<String>>,
    device: String,
    jobs: usize,
    /// Client jobs trained at once inside each run; default: the cores shared among the jobs.
    workers: Option<usize>,
    seeds: Vec<u64>,
    out: Option<PathBuf>,
    /// Run only these runs (keys `DATASET-aALPHA/ID`); the report still covers the grid.
    runs: Option<Vec<String>>,
    report_only: bool,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut it = args.iter();
    let Some(paper) = it.next().filter(|p| !p.starts_with('-')) else { bail!("{USAGE}") };
    let mut o = Options {
        paper: paper.clone(),
        scale: "full".into(),
        variants: Vec::new(),
        only: None,
        device: "auto".into(),
        jobs: 1,
        workers: None,
        seeds: vec![1],
        out: None,
        runs: None,
        report_only: false,
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag}: expected a value\n{USAGE}"));
        match flag.as_str() {
            "--scale" => o.scale = value()?.clone(),
            "--variant" => o.variants = value()?.split(',').map(str::to_string).collect(),
            "--only" => o.only = Some(value()?.split(',').map(str::to_string).collect()),
            "--device" => o.device = value()?.clone(),
            "--jobs" => {
                o.jobs = value()?.parse().ok().filter(|&j| j > 0).context("--jobs: expected a positive integer")?
            }
            "--workers" => {
                o.workers =
                    Some(value()?.parse().ok().filter(|&w| w > 0).context("--workers: expected a positive integer")?)
            }
            "--seeds" => {
                o.seeds = value()?
                    .split(',')
                    .map(|s| s.parse().with_context(|| format!("--seeds: `{s}` is not an integer")))
                    .collect::<Result<_>>()?
            }
            "--out" => o.out = Some(PathBuf::from(value()?)),
            "--runs" => o.runs = Some(value()?.split(',').map(str::to_string).collect()),
            "--report-only" => o.report_only = true,
            other => bail!("unknown option `{other}`\n{USAGE}"),
        }
    }
    Ok(o)
}

pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let root = workspace_root();
    let grid_dir = root.join("experiments").join(&o.paper);
    if !grid_dir.join("grid.toml").is_file() {
        bail!("no reproduction for `{}`: {} does not exist", o.paper, grid_dir.join("grid.toml").display());
    }
    let grid = Grid::load(&grid_dir.join("grid.toml"))?;
    let expected = Expected::load(&grid_dir.join("expected.toml"))?;
    grid.scale(&o.scale)?;
    for v in &o.variants {
        grid.variant(v)?;
    }
    let datasets: Vec<String> = match &o.only {
        None => grid.datasets.keys().cloned().collect(),
        Some(only) => {
            if let Some(bad) = only.iter().find(|d| !grid.datasets.contains_key(*d)) {
                bail!(
                    "--only: `{bad}` is not a dataset of this grid; it has: {}",
                    grid.datasets.keys().cloned().collect::<Vec<_>>().join(", ")
                );
            }
            only.clone()
        }
    };

    crate::commands::setup::run()?;
    run_cmd(cargo().args(["build", "--release", "--quiet", "-p", "fl-cli"]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let fl = target.join("release").join("fl");

    let missing = missing_datasets(&fl, &datasets)?;
    for (d, fetch) in &missing {
        println!(
            "dataset {d} is not present: its runs are not run and its cells read \"no data\"; fetch it with `{fetch}`"
        );
    }
    let out = o.out.clone().unwrap_or_else(|| root.join("runs").join("reproduce").join(&o.paper));
    let runs = grid.plan(&o.scale, &o.variants, &datasets, &o.seeds, &grid_dir, &out)?;
    if let Some(keys) = &o.runs {
        if let Some(bad) = keys.iter().find(|k| !runs.iter().any(|r| &r.key == *k)) {
            let known: Vec<&str> = runs.iter().map(|r| r.key.as_str()).collect();
            bail!("--runs: `{bad}` is not a run of this grid at scale {}; it has: {}", o.scale, known.join(", "));
        }
    }
    let reports = root.join("reports").join(&o.paper);
    let label_dir = reports.join(Grid::label(&o.scale, &o.variants));
    let report_dir = seeds_report_dir(&label_dir, &o.seeds);
    let records =
        Records { root: label_dir.join("runs"), shared: records::shared_roots(&reports, &o.scale, &o.variants) };
    let mut restored = 0;
    for r in &runs {
        restored += usize::from(records.restore(r)?);
    }
    if restored > 0 {
        let from: Vec<String> = records.dirs().map(|r| r.display().to_string()).collect();
        println!("{restored} finished run(s) restored from the records in {}", from.join(", "));
    }
    let selected = |r: &PlannedRun| o.runs.as_ref().is_none_or(|keys| keys.contains(&r.key));
    let runnable: Vec<_> = runs.iter().filter(|r| !missing.contains_key(&r.dataset) && selected(r)).cloned().collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = o.workers.unwrap_or((cores / o.jobs).max(1));
    let runner = Runner { fl, device: o.device.clone(), jobs: o.jobs, workers, records };
    let failed = if o.report_only { Vec::new() } else { runner.run_all(&runnable) };
    for r in &runs {
        runner.records.save(r)?;
    }

    let mut outcomes: BTreeMap<String, Vec<Outcome>> = BTreeMap::new();
    for r in runs.iter().filter(|r| runner::is_done(r)) {
        outcomes.entry(r.key.clone()).or_default().push(Outcome::read(&r.dir, r.seed)?);
    }
    let results = Results { scale: &o.scale, runs: &runs, outcomes, missing };
    let checks_failed = write_report(&grid, &expected, &results, &o, &report_dir)?;
    println!("report: {}", report_dir.display());
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|(k, d)| format!("{k} ({})", d.display())).collect();
        bail!("{} run(s) failed: {}", failed.len(), list.join(", "));
    }
    if checks_failed > 0 {
        bail!("{checks_failed} check(s) failed; see {}", report_dir.join("summary.md").display());
    }
    Ok(())
}

/// The report of `seeds` under a scale's (and variants') directory: that directory for seed 1
/// alone, `seeds-<a>-<b>…/` in it otherwise.
fn seeds_report_dir(label_dir: &std::path::Path, seeds: &[u64]) -> PathBuf {
    match seeds {
        [1] => label_dir.to_path_buf(),
        _ => label_dir.join(format!("seeds-{}", seeds.iter().map(u64::to_string).collect::<Vec<_>>().join("-"))),
    }
}

/// The datasets `fl data info` does not report present, with the command that fetches each.
fn missing_datasets(fl: &std::path::Path, datasets: &[String]) -> Result<BTreeMap<String, String>> {
    let mut missing = BTreeMap::new();
    for d in datasets {
        let out =
            Command::new(fl).args(["data", "info", d]).output().with_context(|| format!("running {}", fl.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let present = text.lines().any(|l| l.trim_start().starts_with("status:") && l.trim_end().ends_with("present"));
        if !out.status.success() || !present {
            missing.insert(d.clone(), format!("cargo run --release -p fl-cli -- data fetch {d}"));
        }
    }
    Ok(missing)
}

/// Writes tables, summary, figures and `results.json`; returns how many checks failed.
fn write_report(
    grid: &Grid,
    expected: &Expected,
    results: &Results,
    o: &Options,
    dir: &std::path::Path,
) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let command = format!(
        "cargo xtask reproduce {} --scale {}{}{} --seeds {}",
        o.paper,
        o.scale,
        if o.variants.is_empty() { String::new() } else { format!(" --variant {}", o.variants.join(",")) },
        o.only.as_ref().map_or(String::new(), |d| format!(" --only {}", d.join(","))),
        o.seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    );
    let mut heading = format!("# {} — scale `{}`\n\n`{command}`\n\n", grid.title, o.scale);
    for v in &o.variants {
        let _ = writeln!(heading, "Variant `{v}`: {}.\n", grid.variant(v)?.what);
    }
    let mut tables_json = serde_json::Map::new();
    for table in &expected.tables {
        let (md, cells) = report::render_table(table, results);
        let path = dir.join(format!("{}.md", table.id));
        let text = format!("{heading}{md}");
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        tables_json.insert(table.id.clone(), json!(cells));
    }
    let checks = report::evaluate_checks(grid, results);
    let orderings = report::evaluate_orderings(grid, results);
    let mut figures = figures::write_figures(&grid.figures, results, dir)?;
    figures.extend(figures::write_sweeps(grid, results, dir)?);

    let mut summary = heading;
    if !results.missing.is_empty() {
        summary.push_str("## Datasets not present\n\n");
        for (d, fetch) in &results.missing {
            let _ = writeln!(
                summary,
                "- {d}: not run; fetch with `{fetch}` (or place the official files in the data directory)"
            );
        }
        summary.push('\n');
    }
    summary.push_str(&report::render_verdicts("Checks", &checks));
    summary.push('\n');
    summary.push_str(&report::render_verdicts("Orderings (the shape of the paper's results)", &orderings));
    summary.push_str("\n## Files\n\n");
    for table in &expected.tables {
        let _ = writeln!(summary, "- [{}]({}.md)", table.title, table.id);
    }
    for (title, file) in &figures {
        let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let _ = writeln!(summary, "- {title}\n\n  ![{title}]({name})");
    }
    std::fs::write(dir.join("summary.md"), &summary)
        .with_context(|| format!("writing {}", dir.join("summary.md").display()))?;

    let runs_json: Vec<serde_json::Value> = results
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
        .collect();
    let results_json = json!({
        "paper": grid.paper, "title": grid.title, "scale": o.scale, "variants": o.variants, "command": command,
        "missing_datasets": results.missing, "runs": runs_json, "tables": tables_json,
        "checks": checks, "orderings": orderings,
    });
    let path = dir.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results_json)?)
        .with_context(|| format!("writing {}", path.display()))?;
    for v in &checks {
        let mark = match v.passed {
            Some(true) => "ok  ",
            Some(false) => "FAIL",
            None => "skip",
        };
        println!("check {mark} {}: {}", v.what, v.detail);
    }
    Ok(checks.iter().filter(|v| v.passed == Some(false)).count())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::seeds_report_dir;

    #[test]
    fn seed_one_reports_in_the_scale_directory_and_other_seeds_beneath_it() {
        let full = Path::new("reports/kdd23/full");
        assert_eq!(seeds_report_dir(full, &[1]), full);
        assert_eq!(seeds_report_dir(full, &[1, 2, 3]), full.join("seeds-1-2-3"));
        assert_eq!(seeds_report_dir(full, &[2]), full.join("seeds-2"));
    }
}
