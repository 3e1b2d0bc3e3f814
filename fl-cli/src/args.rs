//! Command-line arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "fl",
    version,
    about = "Federated learning under resource heterogeneity and asynchrony: simulate, list, fetch data"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an experiment file.
    Run(RunArgs),
    /// Run several prepared run directories in one process, training their compatible
    /// cohorts together (one GPU kept busy by a whole grid column).
    Pack(PackArgs),
    /// List every registered component by kind, with parameters and defaults.
    List {
        /// Only this kind (dataset, partition, model, trainer, mask, scheduler, aggregator, staleness, method).
        kind: Option<String>,
    },
    /// Datasets: fetch into the data cache, or show what is there.
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The experiment TOML file.
    pub file: PathBuf,
    /// Output directory (default: runs/<experiment name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Compute device: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Client jobs trained concurrently (default: the number of CPU cores over the experiment's
    /// `[run] threads_per_job`).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Override the experiment's seed (at most 2^63 − 1, the largest a TOML file can record).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    pub seed: Option<u64>,
    /// Replace a finished run (or the outputs of an interrupted one) in the output directory.
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// Go on with the interrupted run in the output directory from its last checkpoint (or
    /// from the start if it wrote none); the config must be the one it started with.
    #[arg(long)]
    pub resume: bool,
    /// How often to write a checkpoint: `300` or `300s` host seconds, `20agg` aggregations,
    /// `500vs` virtual seconds (0: after every aggregation), or `never`.
    #[arg(long, default_value = "300s", value_parser = parse_checkpoint_every)]
    pub checkpoint_every: CheckpointEvery,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// `--checkpoint-every`: the cadence of checkpoints, or none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckpointEvery(pub Option<Cadence>);

/// When a run writes a checkpoint (the engine offers one after each aggregation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cadence {
    /// Host seconds since the last checkpoint: bounds the work a crash loses.
    HostSeconds(f64),
    /// Aggregations since the last: checkpoints at the same versions in every run.
    Aggregations(u64),
    /// Virtual seconds since the last: at the same virtual times in every run.
    VirtualSeconds(f64),
}

fn parse_checkpoint_every(s: &str) -> Result<CheckpointEvery, String> {
    if s == "never" {
        return Ok(CheckpointEvery(None));
    }
    let bad = || {
        format!(
            "expected 300 or 300s (host seconds), 20agg (aggregations), 500vs (virtual seconds) or never, got `{s}`"
        )
    };
    let seconds = |x: &str| x.parse::<f64>().ok().filter(|x| *x >= 0.0 && x.is_finite());
    let cadence = if let Some(n) = s.strip_suffix("agg") {
        Cadence::Aggregations(n.parse().map_err(|_| bad())?)
    } else if let Some(x) = s.strip_suffix("vs") {
        Cadence::VirtualSeconds(seconds(x).ok_or_else(bad)?)
    } else {
        Cadence::HostSeconds(seconds(s.strip_suffix('s').unwrap_or(s)).ok_or_else(bad)?)
    };
    Ok(CheckpointEvery(Some(cadence)))
}

#[derive(Debug, clap::Args)]
pub struct PackArgs {
    /// Run directories, each holding an `experiment.toml`; the run's outputs go there.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Compute device: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Worker threads of each run for jobs that do not join the pack's cohorts (default:
    /// the number of CPU cores).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Replace finished runs (or the outputs of interrupted ones) in the directories.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Download a dataset into the data cache (FL_DATA_DIR overrides its location).
    Fetch { name: String },
    /// Where a dataset is looked for, whether it is there, and its sizes.
    Info {
        name: String,
        /// As JSON (`{"name", "looked_in", "classes", "state": {"status", "detail"}}`), for scripts.
        #[arg(long)]
        json: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_cadences_parse_by_unit_and_refuse_the_rest() {
        let p = |s: &str| parse_checkpoint_every(s).map(|c| c.0);
        assert_eq!(p("300"), Ok(Some(Cadence::HostSeconds(300.0))));
        assert_eq!(p("0.5s"), Ok(Some(Cadence::HostSeconds(0.5))));
        assert_eq!(p("20agg"), Ok(Some(Cadence::Aggregations(20))));
        assert_eq!(p("500vs"), Ok(Some(Cadence::VirtualSeconds(500.0))));
        assert_eq!(p("never"), Ok(None));
        for bad in ["", "-1", "nan", "inf", "1.5agg", "-2agg", "10x", "s", "vs"] {
            assert!(p(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
