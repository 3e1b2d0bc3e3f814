//! `fl run FILE`: parse, build, simulate, write the run directory.

use std::path::Path;

use anyhow::{Context, Result, bail};
use fl_core::tch::{Cuda, Device};
use fl_core::trainer::cuda_graph;
use fl_core::{Experiment, RunOptions, Simulation};
use serde_json::json;

use crate::args::RunArgs;
use crate::progress::Progress;
use crate::run_dir::{Reserved, RunDir, default_dir};

pub fn run(args: &RunArgs) -> Result<()> {
    let mut experiment = Experiment::from_file(&args.file)?;
    if let Some(seed) = args.seed {
        experiment.seed = seed;
    }
    let device = parse_device(&args.device)?;
    let workers = parse_workers(args.workers, experiment.run.job_threads())?;
    let out = match &args.out {
        Some(out) => out.clone(),
        None => default_dir(&experiment.name, &args.file)?,
    };
    // Before any work: a directory another process writes, or a run it would overwrite, fails now.
    let reserved = RunDir::reserve(&out, args.force, args.resume)?;
    let opts = RunOptions { device, workers, data_dir: fl_build::data_dir() };
    let sim = experiment.build(&opts)?;
    let checkpoints = Checkpoints { resume: args.resume, every: args.checkpoint_every.0 };
    let line = simulate(&experiment, &args.file, sim, &opts, reserved, checkpoints, args.quiet)?;
    crate::output::say(&format!("{line}\n"))?;
    Ok(())
}

/// Whether a run resumes from its directory's checkpoint, and how often it writes one.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Checkpoints {
    pub(super) resume: bool,
    /// How often to write one; none: never.
    pub(super) every: Option<crate::args::Cadence>,
}

/// Runs `sim` (built from `experiment`, read from `file`) into the reserved run directory;
/// returns the line that reports its result.
pub(super) fn simulate(
    experiment: &Experiment,
    file: &Path,
    mut sim: Simulation,
    opts: &RunOptions,
    out: Reserved,
    checkpoints: Checkpoints,
    quiet: bool,
) -> Result<String> {
    let manifest = json!({
        "experiment": experiment.name,
        "file": file.display().to_string(),
        "seed": experiment.seed,
        "device": format!("{:?}", opts.device),
        "workers": opts.workers,
        "git_revision": git_revision(),
        "libtorch": "2.11.0",
        "tch": "0.24.0",
        "cuda_available": Cuda::is_available(),
        "fl_version": env!("CARGO_PKG_VERSION"),
    });
    let config = experiment.resolved_toml()?;
    let mut run_dir = if checkpoints.resume {
        let (run_dir, checkpoint) = RunDir::resume(out, &config, manifest)?;
        match checkpoint {
            Some(checkpoint) => {
                let at = run_dir.path().join("checkpoint");
                sim.restore(&checkpoint).with_context(|| format!("resuming from {}", at.display()))?;
                eprintln!("resuming {} at version {}", run_dir.path().display(), checkpoint.version());
            }
            None => eprintln!("{}: no checkpoint, starting from the beginning", run_dir.path().display()),
        }
        run_dir
    } else {
        RunDir::create(out, &config, manifest)?
    };
    run_dir.checkpoint_every(checkpoints.every);
    let summary = {
        let mut progress = Progress::new(sim.planned_aggregations(), quiet, &mut run_dir);
        let summary = sim.run(&mut progress).with_context(|| format!("running {}", file.display()))?;
        progress.finish();
        summary
    };
    run_dir.finish(&summary)?;
    let graphs = match cuda_graph::counts() {
        (0, _) => String::new(),
        (captured, replays) => format!(", CUDA graphs: {captured} captured, {replays} replays"),
    };
    Ok(format!(
        "final accuracy {:.4} (best {:.4}) after {} aggregations, {:.1} virtual s, {:.1} wall s{graphs}\nresults: {}",
        summary.final_accuracy,
        summary.best_accuracy,
        summary.aggregations,
        summary.virtual_time_s,
        run_dir.wall_time_s(),
        run_dir.path().display()
    ))
}

/// `--workers`, by default the number of CPU cores over the threads each job uses.
pub(super) fn parse_workers(workers: Option<usize>, threads_per_job: usize) -> Result<usize> {
    let cores = || std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = workers.unwrap_or_else(|| (cores() / threads_per_job.max(1)).max(1));
    if workers == 0 {
        bail!("--workers: expected at least 1");
    }
    Ok(workers)
}

pub(super) fn parse_device(s: &str) -> Result<Device> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(Device::cuda_if_available()),
        "cuda" => cuda(0),
        other => match other.strip_prefix("cuda:").and_then(|i| i.parse().ok()) {
            Some(i) => cuda(i),
            None => bail!("--device: expected cpu, cuda, cuda:N or auto, got `{other}`"),
        },
    }
}

fn cuda(index: usize) -> Result<Device> {
    let count = Cuda::device_count() as usize;
    if index >= count {
        bail!("--device cuda:{index}: {count} CUDA device(s) available");
    }
    Ok(Device::Cuda(index))
}

fn git_revision() -> Option<String> {
    let out = std::process::Command::new("git").args(["rev-parse", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
