//! The records of finished runs, in one content-addressed store: `records/<sha256>/`, where the
//! hash is that of the run's resolved experiment (`experiment.toml`, seed included). A record
//! holds the small files of a finished run (experiment, resolved config, manifest, summary,
//! per-evaluation metrics, host timings) and its event log compressed (`events.jsonl.gz`).
//!
//! Records are committed, so a grid too large for one session or machine is completed over
//! several: a planned run whose experiment has a record is restored instead of run again, and
//! `--report-only` rebuilds every report anywhere. The same experiment planned by several
//! reports (a scale and a variant that leaves the run unchanged, two papers' identical
//! baselines) has one record.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use super::grid::PlannedRun;

/// The files a record keeps as they are: what the report reads, and what says how the run was
/// made. `summary.json` comes last, so that an interrupted copy never leaves a record that
/// looks finished. Logs and anything else stay in the run directory.
const PLAIN: [&str; 5] = ["experiment.toml", "config.toml", "manifest.json", "metrics.csv", "timing.csv"];
/// The files a record keeps gzip-compressed, as `<name>.gz`: the bulky event logs.
const COMPRESSED: [&str; 1] = ["events.jsonl"];
/// Written last, in the run directory and in the record alike.
const SUMMARY: &str = "summary.json";

/// The store: one directory per recorded experiment.
pub struct Records {
    pub root: PathBuf,
}

impl Records {
    /// Where the record of `run`'s experiment lies.
    fn dir(&self, run: &PlannedRun) -> PathBuf {
        self.root.join(experiment_hash(&run.experiment))
    }

    /// The finished record of `run`'s experiment, if there is one.
    pub(super) fn find(&self, run: &PlannedRun) -> Option<PathBuf> {
        let record = self.dir(run);
        let same = std::fs::read_to_string(record.join("experiment.toml")).is_ok_and(|t| t == run.experiment);
        (same && record.join(SUMMARY).is_file()).then_some(record)
    }

    /// Writes the record of `run` into its run directory when the run is not done there and its
    /// experiment has a record; returns whether it did.
    pub fn restore(&self, run: &PlannedRun) -> Result<bool> {
        if run.is_done() {
            return Ok(false);
        }
        match self.find(run) {
            Some(record) => unpack(&record, &run.dir).map(|()| true),
            None => Ok(false),
        }
    }

    /// Records `run` if it is done and its experiment has no record yet.
    pub fn save(&self, run: &PlannedRun) -> Result<()> {
        if !run.is_done() || self.find(run).is_some() {
            return Ok(());
        }
        pack(&run.dir, &self.dir(run))
    }
}

/// The record directory name of an experiment: the SHA-256 of its text, in hex.
pub fn experiment_hash(experiment: &str) -> String {
    Sha256::digest(experiment.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Copies the record files of the run directory `run` into the record `record`.
fn pack(run: &Path, record: &Path) -> Result<()> {
    std::fs::create_dir_all(record).with_context(|| format!("creating {}", record.display()))?;
    for name in PLAIN {
        copy_if_present(&run.join(name), &record.join(name))?;
    }
    for name in COMPRESSED {
        let source = run.join(name);
        if source.is_file() {
            let target = record.join(format!("{name}.gz"));
            let text = std::fs::read(&source).with_context(|| format!("reading {}", source.display()))?;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(&text)?;
            std::fs::write(&target, gz.finish()?).with_context(|| format!("writing {}", target.display()))?;
        }
    }
    copy_if_present(&run.join(SUMMARY), &record.join(SUMMARY))
}

/// Writes the files of `record` into the run directory `run`, decompressing the logs.
fn unpack(record: &Path, run: &Path) -> Result<()> {
    std::fs::create_dir_all(run).with_context(|| format!("creating {}", run.display()))?;
    for name in PLAIN {
        copy_if_present(&record.join(name), &run.join(name))?;
    }
    for name in COMPRESSED {
        let source = record.join(format!("{name}.gz"));
        if source.is_file() {
            let file = std::fs::File::open(&source).with_context(|| format!("opening {}", source.display()))?;
            let mut text = Vec::new();
            flate2::read::GzDecoder::new(file)
                .read_to_end(&mut text)
                .with_context(|| format!("decompressing {}", source.display()))?;
            std::fs::write(run.join(name), text).with_context(|| format!("writing {}", run.join(name).display()))?;
        }
    }
    copy_if_present(&record.join(SUMMARY), &run.join(SUMMARY))
}

fn copy_if_present(from: &Path, to: &Path) -> Result<()> {
    if from.is_file() {
        std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish(run: &PlannedRun, events: &str) {
        std::fs::create_dir_all(&run.dir).unwrap();
        std::fs::write(run.dir.join("experiment.toml"), &run.experiment).unwrap();
        std::fs::write(run.dir.join("metrics.csv"), "v\n1\n").unwrap();
        std::fs::write(run.dir.join("events.jsonl"), events).unwrap();
        std::fs::write(run.dir.join("log.txt"), "noise").unwrap();
        std::fs::write(run.dir.join("summary.json"), "{}").unwrap();
    }

    #[test]
    fn a_saved_run_is_restored_byte_for_byte_only_for_the_same_experiment() {
        let tmp = tempfile::tempdir().unwrap();
        let records = Records { root: tmp.path().join("records") };
        let first = PlannedRun::example(&tmp.path().join("a"), "seed = 1\n");
        let events = "{\"event\":\"dispatch\"}\n".repeat(100);
        finish(&first, &events);
        records.save(&first).unwrap();
        let record = records.root.join(experiment_hash("seed = 1\n"));
        assert_eq!(std::fs::read_to_string(record.join("metrics.csv")).unwrap(), "v\n1\n");
        assert!(!record.join("log.txt").exists(), "logs are not part of a record");
        assert!(!record.join("events.jsonl").exists(), "the event log is kept compressed");
        assert!(std::fs::metadata(record.join("events.jsonl.gz")).unwrap().len() < events.len() as u64 / 10);

        let elsewhere =
            PlannedRun { key: "other/report".into(), ..PlannedRun::example(&tmp.path().join("b"), "seed = 1\n") };
        assert!(records.restore(&elsewhere).unwrap(), "any report planning the same experiment");
        assert!(elsewhere.is_done());
        assert_eq!(std::fs::read_to_string(elsewhere.dir.join("events.jsonl")).unwrap(), events);
        assert!(!records.restore(&elsewhere).unwrap(), "already done: nothing to restore");

        let changed = PlannedRun::example(&tmp.path().join("c"), "seed = 2\n");
        assert!(!records.restore(&changed).unwrap(), "another experiment: run it");
        assert!(!changed.is_done());
    }

    #[test]
    fn an_experiment_is_recorded_once_and_an_unfinished_run_not_at_all() {
        let tmp = tempfile::tempdir().unwrap();
        let records = Records { root: tmp.path().join("records") };
        let unfinished = PlannedRun::example(&tmp.path().join("a"), "seed = 1\n");
        std::fs::create_dir_all(&unfinished.dir).unwrap();
        std::fs::write(unfinished.dir.join("experiment.toml"), "seed = 1\n").unwrap();
        records.save(&unfinished).unwrap();
        assert!(!records.root.exists());

        let first = PlannedRun::example(&tmp.path().join("b"), "seed = 1\n");
        finish(&first, "first\n");
        records.save(&first).unwrap();
        let again = PlannedRun::example(&tmp.path().join("c"), "seed = 1\n");
        finish(&again, "second\n");
        records.save(&again).unwrap();
        assert_eq!(std::fs::read_dir(&records.root).unwrap().count(), 1);
        let restored = PlannedRun::example(&tmp.path().join("d"), "seed = 1\n");
        records.restore(&restored).unwrap();
        assert_eq!(
            std::fs::read_to_string(restored.dir.join("events.jsonl")).unwrap(),
            "first\n",
            "kept, not replaced"
        );
    }

    #[test]
    fn a_record_whose_experiment_differs_from_its_hash_is_not_restored() {
        let tmp = tempfile::tempdir().unwrap();
        let records = Records { root: tmp.path().join("records") };
        let run = PlannedRun::example(&tmp.path().join("a"), "seed = 1\n");
        let record = records.root.join(experiment_hash("seed = 1\n"));
        std::fs::create_dir_all(&record).unwrap();
        std::fs::write(record.join("experiment.toml"), "seed = 9\n").unwrap();
        std::fs::write(record.join("summary.json"), "{}").unwrap();
        assert!(!records.restore(&run).unwrap());
    }
}
