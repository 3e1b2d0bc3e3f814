//! The records of finished runs kept beside a report, in
//! `reports/<paper>/<scale>/runs/<dataset>-<setting>/<id>-s<seed>/`: the small files of each
//! finished run (experiment, summary, per-evaluation metrics, events). They are committed with
//! the report, so a grid too large for one session or machine is completed over several: a
//! planned run with a record of the same experiment is restored instead of run again, and
//! `--report-only` rebuilds the report anywhere.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::grid::PlannedRun;
use super::runner::is_done;

/// The files of a run directory a record keeps: what the report reads, and what says how the
/// run was made. Logs and anything else stay in the run directory. `summary.json` comes last,
/// so that an interrupted copy never leaves a directory that looks finished.
const FILES: [&str; 7] =
    ["experiment.toml", "config.toml", "manifest.json", "metrics.csv", "events.jsonl", "timing.csv", "summary.json"];

pub struct Records {
    pub root: PathBuf,
}

impl Records {
    fn dir(&self, run: &PlannedRun) -> PathBuf {
        self.root.join(format!("{}-s{}", run.key, run.seed))
    }

    /// Copies the record of `run` into its run directory when the run is not done there and the
    /// record is of the same experiment; returns whether it did.
    pub fn restore(&self, run: &PlannedRun) -> Result<bool> {
        let record = self.dir(run);
        let same = std::fs::read_to_string(record.join("experiment.toml")).is_ok_and(|t| t == run.experiment);
        if is_done(run) || !same || !record.join("summary.json").is_file() {
            return Ok(false);
        }
        copy_files(&record, &run.dir)?;
        Ok(true)
    }

    /// Keeps the record of `run` if it is done (replacing an older record).
    pub fn save(&self, run: &PlannedRun) -> Result<()> {
        if is_done(run) { copy_files(&run.dir, &self.dir(run)) } else { Ok(()) }
    }
}

/// Copies the record files present in `from` into `to`, in the order of `FILES`.
fn copy_files(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for name in FILES {
        let source = from.join(name);
        if source.is_file() {
            std::fs::copy(&source, to.join(name))
                .with_context(|| format!("copying {} to {}", source.display(), to.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_run_is_restored_into_an_empty_run_directory_only_for_the_same_experiment() {
        let tmp = tempfile::tempdir().unwrap();
        let records = Records { root: tmp.path().join("records") };
        let first = PlannedRun::example(&tmp.path().join("a"), "seed = 1\n");
        std::fs::create_dir_all(&first.dir).unwrap();
        for (name, text) in [("experiment.toml", "seed = 1\n"), ("summary.json", "{}"), ("metrics.csv", "v\n1\n")] {
            std::fs::write(first.dir.join(name), text).unwrap();
        }
        std::fs::write(first.dir.join("log.txt"), "noise").unwrap();
        records.save(&first).unwrap();
        let record = tmp.path().join("records/d-a0.1/x-s1");
        assert_eq!(std::fs::read_to_string(record.join("metrics.csv")).unwrap(), "v\n1\n");
        assert!(!record.join("log.txt").exists(), "logs are not part of a record");

        let elsewhere = PlannedRun::example(&tmp.path().join("b"), "seed = 1\n");
        assert!(records.restore(&elsewhere).unwrap());
        assert!(is_done(&elsewhere));
        assert!(!records.restore(&elsewhere).unwrap(), "already done: nothing to restore");

        let changed = PlannedRun::example(&tmp.path().join("c"), "seed = 2\n");
        assert!(!records.restore(&changed).unwrap(), "another experiment: run it");
        assert!(!is_done(&changed));
    }

    #[test]
    fn an_unfinished_run_leaves_no_record() {
        let tmp = tempfile::tempdir().unwrap();
        let records = Records { root: tmp.path().join("records") };
        let run = PlannedRun::example(&tmp.path().join("a"), "seed = 1\n");
        std::fs::create_dir_all(&run.dir).unwrap();
        std::fs::write(run.dir.join("experiment.toml"), "seed = 1\n").unwrap();
        records.save(&run).unwrap();
        assert!(!tmp.path().join("records").exists());
    }
}
