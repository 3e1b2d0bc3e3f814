//! `cargo xtask reproduce <paper> [--scale S] [--variant V,…] [--only D,…] [--device D] [--jobs N]
//! [--pack N] [--workers N] [--seeds 1,2,3] [--emit slurm DIR]`: runs the grid of
//! `experiments/<paper>/grid.toml` at a scale (with some of its variants, alternatives to the
//! paper's choices), resuming finished runs, and writes
//! `reports/<paper>/<scale>/` (`reports/<paper>/variants/<scale>-<variant>+…/` with variants):
//! one Markdown file per paper table (paper / ours / Δ),
//! `summary.md` (missing datasets, checks, orderings), PNG figures and `results.json`. Seed 1
//! alone is the papers' protocol (one run per cell); another set of seeds reports its means in
//! `seeds-<a>-<b>…/` beneath, so that it never replaces the seed-1 report.
//!
//! A dataset that is not present is reported with the command that fetches it; its cells read
//! "needs \<dataset\>". The command fails if a run fails or a check of the grid does not hold.
//! `--report-only` writes the report from the runs finished so far and runs nothing; `--runs`
//! runs a slice of the grid. Finished runs are also kept in the content-addressed store
//! `records/` (see `records`), from which a later reproduction, on any machine, resumes.
//!
//! `--pack N` runs up to N runs in one `fl pack` process (consecutive runs of the plan: one
//! dataset's column), whose compatible cohorts train as one computation: on a GPU, a whole
//! column keeps the device busy where one run leaves it idle between tiny kernels.
//!
//! `--emit slurm DIR` runs nothing either: it writes the runs that are still to run as a Slurm
//! job array into DIR (see `slurm`), to submit with `sbatch DIR/job.sbatch`; the same command
//! with `--report-only` then collects the runs finished on the cluster, recording them too.

mod figure_gaps;
mod figures;
mod grid;
mod outcome;
mod paper_index;
mod records;
mod report;
mod report_files;
mod runner;
mod scatter;
mod server_loss;
mod slurm;
mod traces;
mod variants_index;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{cargo, run as run_cmd, workspace_root};
use grid::{Grid, PlannedRun};
use outcome::Outcome;
use records::Records;
use report::{Expected, MissingData, Results};
use runner::Runner;
use slurm::SlurmArray;

/// The scale `cargo xtask test` runs: its reports and records are CI output, not committed.
pub const CI_SCALE: &str = "smoke";

/// The options of `cargo xtask reproduce`.
#[derive(Debug, clap::Args)]
pub struct ReproduceArgs {
    /// The paper: a folder of `experiments/` holding a `grid.toml` (kdd23, fedraa, asyncnc).
    #[arg(required_unless_present = "list")]
    paper: Option<String>,
    /// Print every paper's scales, variants and datasets (and whether each is here), then stop.
    #[arg(long, exclusive = true)]
    list: bool,
    /// smoke, reduced or full (the grid's scales).
    #[arg(long, default_value = "full")]
    scale: String,
    /// Variants of the grid (alternatives to the paper's choices), comma-separated.
    #[arg(long = "variant", value_delimiter = ',')]
    variants: Vec<String>,
    /// Only these datasets, comma-separated.
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// auto, cpu or cuda.
    #[arg(long, default_value = "auto")]
    device: String,
    /// `fl` processes at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    jobs: u16,
    /// Runs per `fl` process, their cohorts trained together (`fl pack`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pack: u16,
    /// Client jobs trained at once inside each run (default: the cores shared among the jobs).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    workers: Option<u16>,
    /// Seeds, comma-separated; other than `1` alone, the report gives means over seeds.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    seeds: Vec<u64>,
    /// Run directories' root (default: runs/reproduce/PAPER).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only these runs (keys `DATASET-aALPHA/ID`), comma-separated; the report covers the grid.
    #[arg(long, value_delimiter = ',')]
    runs: Option<Vec<String>>,
    /// Run nothing: write the report from the runs finished so far.
    #[arg(long)]
    report_only: bool,
    /// `--emit slurm DIR`: write the pending runs as a Slurm job array into DIR instead.
    #[arg(long, num_args = 2, value_names = ["KIND", "DIR"])]
    emit: Option<Vec<String>>,
}

/// What `cargo xtask reproduce` does.
#[derive(Debug)]
pub enum Request {
    List,
    Reproduce(Box<Options>),
}

#[derive(Debug)]
pub struct Options {
    paper: String,
    scale: String,
    variants: Vec<String>,
    only: Option<Vec<String>>,
    device: String,
    jobs: usize,
    /// Runs per `fl` process, their cohorts trained together (1: each run alone).
    pack: usize,
    /// Client jobs trained at once inside each run; default: the cores shared among the jobs.
    workers: Option<usize>,
    seeds: Vec<u64>,
    out: Option<PathBuf>,
    /// Run only these runs (keys `DATASET-aALPHA/ID`); the report still covers the grid.
    runs: Option<Vec<String>>,
    report_only: bool,
    /// Write the pending runs as a Slurm job array into this directory instead of running them.
    emit_slurm: Option<PathBuf>,
}

impl ReproduceArgs {
    /// The request, checked beyond what each flag's parser checks.
    pub fn into_request(self) -> Result<Request> {
        match self.paper.clone() {
            _ if self.list => Ok(Request::List),
            Some(paper) => self.into_options(paper).map(|o| Request::Reproduce(Box::new(o))),
            None => bail!("name a paper (a folder of experiments/), or --list"),
        }
    }

    fn into_options(self, paper: String) -> Result<Options> {
        let emit_slurm = match self.emit.as_deref() {
            None => None,
            Some([kind, dir]) if kind == "slurm" => Some(PathBuf::from(dir)),
            Some([kind, _]) => {
                bail!("--emit: unknown kind `{kind}`; the accepted value is `slurm` (`--emit slurm DIR`)")
            }
            Some(other) => bail!("--emit: expected a kind and a directory (`--emit slurm DIR`), got {other:?}"),
        };
        if self.pack > 1 && emit_slurm.is_some() {
            bail!("--pack applies to the local runner; a Slurm job array runs one run per array task");
        }
        if self.report_only && emit_slurm.is_some() {
            bail!("--emit and --report-only exclude each other: emit the job array, then collect with --report-only");
        }
        Ok(Options {
            paper,
            scale: self.scale,
            variants: self.variants,
            only: self.only,
            device: self.device,
            jobs: usize::from(self.jobs),
            pack: usize::from(self.pack),
            workers: self.workers.map(usize::from),
            seeds: self.seeds,
            out: self.out,
            runs: self.runs,
            report_only: self.report_only,
            emit_slurm,
        })
    }
}

/// `cargo xtask reproduce` with `args` (after the word `reproduce`), as other xtasks call it.
pub fn run_args(args: &[&str]) -> Result<()> {
    match parse_request(args)? {
        Request::List => list(),
        Request::Reproduce(o) => run(*o),
    }
}

#[cfg(test)]
fn parse(args: &[&str]) -> Result<Options> {
    match parse_request(args)? {
        Request::Reproduce(o) => Ok(*o),
        Request::List => bail!("--list reproduces nothing"),
    }
}

fn parse_request(args: &[&str]) -> Result<Request> {
    #[derive(clap::Parser)]
    #[command(name = "cargo xtask reproduce")]
    struct Line {
        #[command(flatten)]
        args: ReproduceArgs,
    }
    let line = <Line as clap::Parser>::try_parse_from(std::iter::once("reproduce").chain(args.iter().copied()))?;
    line.args.into_request()
}

/// Builds the `fl` binary the runs use (after provisioning libtorch and MNIST) and returns its path.
fn build_fl() -> Result<PathBuf> {
    crate::setup::run()?;
    run_cmd(cargo().args(["build", "--release", "--quiet", "-p", "fl-cli"]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from);
    Ok(target.join("release").join("fl"))
}

/// `--list`: every paper's scales, variants and datasets, and which datasets are here.
pub fn list() -> Result<()> {
    let fl = build_fl()?;
    let experiments = workspace_root().join("experiments");
    let mut papers: Vec<PathBuf> = std::fs::read_dir(&experiments)
        .with_context(|| format!("reading {}", experiments.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("grid.toml").is_file())
        .collect();
    papers.sort();
    for dir in papers {
        let grid = Grid::load(&dir.join("grid.toml"))?;
        let missing = missing_datasets(&fl, &grid)?;
        println!("{}: {}", grid.paper, grid.title);
        println!("  scales: {}", grid.scales.keys().cloned().collect::<Vec<_>>().join(", "));
        println!("  datasets:");
        for (d, entry) in &grid.datasets {
            let title = entry.title.as_deref().unwrap_or(d);
            match missing.get(d) {
                None => println!("    {d} ({title}): present"),
                Some(m) => println!(
                    "    {d} ({title}): not here; `fl data info {d}` says where its files go, or `{}`",
                    m.fetch
                ),
            }
        }
        if !grid.variants.is_empty() {
            println!("  variants (reports/{}/variants.md):", grid.paper);
            for (name, v) in &grid.variants {
                println!("    {name}: {}", v.summary);
            }
        }
    }
    Ok(())
}

pub fn run(o: Options) -> Result<()> {
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

    let fl = build_fl()?;

    // Every dataset of the grid, selected or not, so that a cell says whether its data is here.
    let missing = missing_datasets(&fl, &grid)?;
    for (d, m) in missing.iter().filter(|(d, _)| datasets.contains(d)) {
        println!(
            "dataset {d} is not present: its runs are not run and its cells read \"needs {}\"; fetch it with `{}`",
            m.title, m.fetch
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
    let label_dir = label_dir(&reports, &o.scale, &o.variants);
    let report_dir = seeds_report_dir(&label_dir, &o.seeds);
    // Smoke reports are CI output, left untracked: so are their records.
    let store = if o.scale == CI_SCALE { root.join("runs").join("records") } else { root.join("records") };
    let records = Records { root: store };
    let mut restored = 0;
    for r in &runs {
        restored += usize::from(records.restore(r)?);
    }
    if restored > 0 {
        println!("{restored} finished run(s) restored from the records in {}", records.root.display());
    }
    let selected = |r: &PlannedRun| o.runs.as_ref().is_none_or(|keys| keys.contains(&r.key));
    let runnable: Vec<_> = runs.iter().filter(|r| !missing.contains_key(&r.dataset) && selected(r)).cloned().collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = o.workers.unwrap_or((cores / o.jobs).max(1));
    if let Some(dir) = &o.emit_slurm {
        return emit_slurm(&o, dir, &fl, &runnable);
    }
    let runner = Runner { fl, device: o.device.clone(), jobs: o.jobs, pack: o.pack, workers, records };
    let failed = if o.report_only { Vec::new() } else { runner.run_all(&runnable) };
    let outcomes = collect(&runs, &runner.records)?;
    let results = Results { scale: &o.scale, runs: &runs, outcomes, missing };
    let checks_failed = report_files::write_report(&grid, &expected, &results, &o, &report_dir)?;
    variants_index::write(&grid, &reports)?;
    paper_index::write(&grid, &reports)?;
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

/// Writes the runs of `runnable` that are not done as a Slurm job array into `dir` and says how
/// to submit it and collect the runs.
fn emit_slurm(o: &Options, dir: &std::path::Path, fl: &std::path::Path, runnable: &[PlannedRun]) -> Result<()> {
    let out = o.out.as_ref().map_or(String::new(), |d| format!(" --out {}", d.display()));
    let collect_command = format!("{}{out} --report-only", report_command(o));
    let array = SlurmArray {
        dir: dir.to_path_buf(),
        fl: fl.to_path_buf(),
        device: o.device.clone(),
        workers: o.workers,
        job_name: format!("fl-{}-{}", o.paper, Grid::label(&o.scale, &o.variants)),
        collect: collect_command.clone(),
    };
    let pending = array.write(runnable)?;
    if pending == 0 {
        println!(
            "{} runs planned, all done: no job array to submit (nothing written in {}); collect with `{collect_command}`",
            runnable.len(),
            dir.display()
        );
        return Ok(());
    }
    println!(
        "{} runs planned, {} already done, {pending} in a Slurm job array: {} (manifest {})",
        runnable.len(),
        runnable.len() - pending,
        dir.join("job.sbatch").display(),
        dir.join("manifest.tsv").display()
    );
    println!("submit it (the nodes must see {}, the run directories and {}):", dir.display(), fl.display());
    println!("  sbatch {}", dir.join("job.sbatch").display());
    println!("then, when its tasks have finished, collect the runs and write the report:");
    println!("  {collect_command}");
    Ok(())
}

/// Keeps the record of every finished run of `runs`, wherever it ran (here, or on a cluster
/// whose tasks only leave run directories), and reads the outcomes, by run key.
fn collect(runs: &[PlannedRun], records: &Records) -> Result<BTreeMap<String, Vec<Outcome>>> {
    for r in runs {
        records.save(r)?;
    }
    let mut outcomes: BTreeMap<String, Vec<Outcome>> = BTreeMap::new();
    for r in runs.iter().filter(|r| runner::is_done(r)) {
        outcomes.entry(r.key.clone()).or_default().push(Outcome::read(&r.dir, r.seed)?);
    }
    Ok(outcomes)
}

/// The command that reproduces the report of `o`, as its heading shows it.
fn report_command(o: &Options) -> String {
    format!(
        "cargo xtask reproduce {} --scale {}{}{} --seeds {}",
        o.paper,
        o.scale,
        if o.variants.is_empty() { String::new() } else { format!(" --variant {}", o.variants.join(",")) },
        o.only.as_ref().map_or(String::new(), |d| format!(" --only {}", d.join(","))),
        o.seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    )
}

/// The report directory of a scale (`reports/<paper>/<scale>/`) or of a set of variants at
/// that scale (`reports/<paper>/variants/<scale>-<v1>+<v2>…/`).
fn label_dir(reports: &std::path::Path, scale: &str, variants: &[String]) -> PathBuf {
    match variants {
        [] => reports.join(scale),
        _ => reports.join("variants").join(Grid::label(scale, variants)),
    }
}

/// The report of `seeds` under a scale's (and variants') directory: that directory for seed 1
/// alone, `seeds-<a>-<b>…/` in it otherwise.
fn seeds_report_dir(label_dir: &std::path::Path, seeds: &[u64]) -> PathBuf {
    match seeds {
        [1] => label_dir.to_path_buf(),
        _ => label_dir.join(format!("seeds-{}", seeds.iter().map(u64::to_string).collect::<Vec<_>>().join("-"))),
    }
}

/// The datasets of `grid` that `fl data info` does not report present, with the command that
/// fetches each.
fn missing_datasets(fl: &std::path::Path, grid: &Grid) -> Result<BTreeMap<String, MissingData>> {
    let mut missing = BTreeMap::new();
    for (d, entry) in &grid.datasets {
        let out = Command::new(fl)
            .args(["data", "info", d, "--json"])
            .output()
            .with_context(|| format!("running {}", fl.display()))?;
        let usable = out.status.success() && dataset_usable(&out.stdout);
        if !usable {
            let title = entry.title.clone().unwrap_or_else(|| d.clone());
            missing.insert(
                d.clone(),
                MissingData { title, fetch: format!("cargo run --release -p fl-cli -- data fetch {d}") },
            );
        }
    }
    Ok(missing)
}

/// Whether `fl data info NAME --json` printed a dataset that runs can use (present or generated).
fn dataset_usable(json: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Info {
        state: State,
    }
    #[derive(serde::Deserialize)]
    struct State {
        status: String,
    }
    serde_json::from_slice::<Info>(json).is_ok_and(|i| matches!(i.state.status.as_str(), "present" | "generated"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn args(line: &str) -> Vec<&str> {
        line.split_whitespace().collect()
    }

    #[test]
    fn a_dataset_is_usable_when_fl_reports_it_present_or_generated() {
        let info = |status: &str| {
            format!(
                r#"{{"name": "x", "looked_in": [], "classes": 10, "state": {{"status": "{status}", "detail": "…"}}}}"#
            )
        };
        assert!(dataset_usable(info("present").as_bytes()));
        assert!(dataset_usable(info("generated").as_bytes()));
        assert!(!dataset_usable(info("missing").as_bytes()));
        assert!(!dataset_usable(info("unreadable").as_bytes()));
        assert!(!dataset_usable(b"mnist\n  status:   present\n"), "text is not read");
    }

    #[test]
    fn emit_takes_the_kind_slurm_and_a_directory() {
        let o = parse(&args("kdd23 --scale smoke --emit slurm /tmp/job")).unwrap();
        assert_eq!(o.emit_slurm.as_deref(), Some(Path::new("/tmp/job")));
        assert!(!o.report_only);
        assert_eq!(parse(&args("kdd23")).unwrap().emit_slurm, None);
        let err = parse(&args("kdd23 --emit pbs /tmp/job")).unwrap_err().to_string();
        assert!(err.contains("--emit: unknown kind `pbs`; the accepted value is `slurm`"), "{err}");
        let err = parse(&args("kdd23 --emit slurm")).unwrap_err().to_string();
        assert!(err.contains("--emit <KIND> <DIR>"), "{err}");
        let err = parse(&args("kdd23 --jobs 0")).unwrap_err().to_string();
        assert!(err.contains("--jobs"), "{err}");
        let err = parse(&args("kdd23 --emit slurm /tmp/job --report-only")).unwrap_err().to_string();
        assert!(err.contains("--emit and --report-only exclude each other"), "{err}");
    }

    #[test]
    fn collecting_records_the_runs_finished_elsewhere() {
        let tmp = tempfile::tempdir().unwrap();
        let records = Records { root: tmp.path().join("records") };
        let finished = PlannedRun::example(&tmp.path().join("runs/a"), "seed = 1\n");
        let unfinished =
            PlannedRun { key: "d-a0.1/y".into(), ..PlannedRun::example(&tmp.path().join("runs/b"), "seed = 1\n") };
        // What a cluster task leaves: the run directory only, no record.
        std::fs::create_dir_all(&finished.dir).unwrap();
        for (name, text) in [
            ("experiment.toml", "seed = 1\n"),
            ("metrics.csv", "virtual_time_s,version,accuracy,loss\n1,1,0.75,0.5\n"),
            ("events.jsonl", ""),
            ("summary.json", r#"{"best_accuracy":0.75,"final_accuracy":0.75,"final_loss":0.5,"wall_time_s":2}"#),
        ] {
            std::fs::write(finished.dir.join(name), text).unwrap();
        }
        std::fs::create_dir_all(&unfinished.dir).unwrap();
        std::fs::write(unfinished.dir.join("experiment.toml"), "seed = 1\n").unwrap();

        let outcomes = collect(&[finished.clone(), unfinished], &records).unwrap();
        assert_eq!(outcomes.keys().collect::<Vec<_>>(), ["d-a0.1/x"]);
        assert_eq!(outcomes["d-a0.1/x"][0].best_accuracy, 0.75);
        let record = records.root.join(records::experiment_hash("seed = 1\n"));
        assert_eq!(std::fs::read_to_string(record.join("metrics.csv")).unwrap().lines().count(), 2);
        assert!(record.join("summary.json").is_file());
        assert_eq!(std::fs::read_dir(&records.root).unwrap().count(), 1, "an unfinished run leaves no record");
        let elsewhere = PlannedRun::example(&tmp.path().join("runs/c"), "seed = 1\n");
        assert!(records.restore(&elsewhere).unwrap(), "a later reproduction restores it");
    }

    #[test]
    fn list_stands_alone_and_a_paper_is_needed_without_it() {
        assert!(matches!(parse_request(&args("--list")).unwrap(), Request::List));
        let err = parse_request(&args("--list kdd23")).unwrap_err().to_string();
        assert!(err.contains("cannot be used with"), "{err}");
        let err = parse_request(&args("--scale smoke")).unwrap_err().to_string();
        assert!(err.contains("<PAPER>"), "{err}");
    }

    #[test]
    fn seed_one_reports_in_the_scale_directory_and_other_seeds_beneath_it() {
        let full = Path::new("reports/kdd23/full");
        assert_eq!(seeds_report_dir(full, &[1]), full);
        assert_eq!(seeds_report_dir(full, &[1, 2, 3]), full.join("seeds-1-2-3"));
        assert_eq!(seeds_report_dir(full, &[2]), full.join("seeds-2"));
    }
}
