//! `fl pack DIR…`: several prepared run directories in one process, their cohorts trained
//! together (see `fl_core::engine::pack`). Each DIR holds an `experiment.toml` and receives
//! that run's outputs as `fl run` writes them, plus `log.txt` with its result line or error.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use fl_core::engine::pack::RunPack;
use fl_core::{Experiment, RunOptions, Simulation};

use super::run::{Checkpoints, parse_device, parse_workers, simulate};
use crate::args::PackArgs;
use crate::output::say;
use crate::run_dir::{Reserved, RunDir};

/// The experiment file a packed run directory holds.
const EXPERIMENT_FILE: &str = "experiment.toml";
/// Where a packed run's result line or error goes, in its directory.
const LOG_FILE: &str = "log.txt";

/// A run of the pack, ready to start: its experiment, its simulation (joined to the pack) and
/// its reserved directory.
type Member = (Experiment, Simulation, Reserved);

pub fn pack(args: &PackArgs) -> Result<()> {
    let device = parse_device(&args.device)?;
    let opts = RunOptions { device, workers: parse_workers(args.workers, 1)?, data_dir: fl_build::data_dir() };
    let pack = RunPack::new();
    // Every run joins the pack before any starts: the pack waits for all its members.
    let mut runs: Vec<(PathBuf, Result<Member>)> = Vec::new();
    for dir in &args.dirs {
        let built = RunDir::reserve(dir, args.force, false).and_then(|reserved| {
            let experiment = Experiment::from_file(&dir.join(EXPERIMENT_FILE))?;
            let sim = experiment.build_in(&opts, &pack)?;
            Ok((experiment, sim, reserved))
        });
        runs.push((dir.clone(), built));
    }
    let results: Vec<(PathBuf, Result<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .into_iter()
            .map(|(dir, built)| {
                let opts = &opts;
                let run = s.spawn({
                    let dir = dir.clone();
                    move || {
                        let (experiment, sim, reserved) = built?;
                        simulate(
                            &experiment,
                            &dir.join(EXPERIMENT_FILE),
                            sim,
                            opts,
                            reserved,
                            Checkpoints::default(),
                            true,
                        )
                    }
                });
                (dir, run)
            })
            .collect();
        handles
            .into_iter()
            .map(|(dir, run)| (dir, run.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the run panicked")))))
            .collect()
    });
    let stats = pack.stats();
    say(&format!(
        "pack: {} cohort(s) of {} client job(s) trained as {} computation(s); {:.1} s computing cohorts\n",
        stats.cohorts,
        stats.jobs,
        stats.computations,
        pack.training_time().as_secs_f64()
    ))?;
    let mut failed = 0;
    for (dir, result) in &results {
        let line = match result {
            Ok(line) => line.clone(),
            Err(e) => {
                failed += 1;
                format!("error: {e:#}")
            }
        };
        say(&format!("{}: {line}\n", dir.display()))?;
        log(dir, &line);
    }
    if failed > 0 {
        bail!("{failed} of {} packed run(s) failed; see their {LOG_FILE}", results.len());
    }
    Ok(())
}

fn log(dir: &Path, line: &str) {
    if let Err(e) = std::fs::write(dir.join(LOG_FILE), format!("{line}\n")) {
        eprintln!("writing {}: {e}", dir.join(LOG_FILE).display());
    }
}
