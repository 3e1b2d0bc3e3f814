//! A run's output directory.
//!
//! `config.toml` (the resolved experiment), `manifest.json` (revision, libtorch, device,
//! seed), `metrics.csv` (one row per evaluation, a deterministic function of config and
//! seed), `timing.csv` (host wall time per evaluation), `events.jsonl` (diagnostics per
//! evaluation) and `summary.json`. Records are flushed as they come, so a run that fails
//! part-way keeps everything it evaluated.
//!
//! A directory is reserved before any work starts ([`RunDir::reserve`]): a finished run
//! (`summary.json`) or the outputs of an interrupted one are never overwritten without
//! `--force`, and a lock (`.fl-lock`, an advisory lock the system releases when the process
//! ends, however it ends) makes a second process on the same directory fail at once. The
//! default directory `runs/<name>` takes the experiment's name only when it is a plain name
//! ([`default_dir`]), so that a config cannot write outside `runs/`.

use std::fs::{File, TryLockError};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use fl_core::engine::RejectedUpdate;
use fl_core::{EvalRecord, Observer, Summary};
use fl_record::SummaryFile;
use serde_json::json;

use crate::timing::Stopwatch;

/// The lock file of a run directory, held for the life of the process that writes it.
const LOCK_FILE: &str = ".fl-lock";

/// `runs/<name>`, for an experiment name made of letters, digits, `.`, `_` and `-` that does
/// not start with `.`: never a path, a parent or a hidden directory.
pub fn default_dir(name: &str, file: &Path) -> Result<PathBuf> {
    let plain = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if name.is_empty() || name.len() > 200 || name.starts_with('.') || !plain {
        bail!(
            "{}: key `name`: {name:?} cannot name a directory under runs/: use at most 200 letters, digits, \
             '.', '_' and '-', not starting with '.' (or choose the directory with --out)",
            file.display()
        );
    }
    Ok(PathBuf::from("runs").join(name))
}

/// A run directory reserved for this process: created, checked for an earlier run, locked.
pub struct Reserved {
    dir: PathBuf,
    lock: File,
}

pub struct RunDir {
    dir: PathBuf,
    /// Held until the run directory is dropped.
    _lock: File,
    metrics: BufWriter<File>,
    timing: BufWriter<File>,
    events: BufWriter<File>,
    clock: Stopwatch,
}

fn create(path: &Path) -> Result<BufWriter<File>> {
    Ok(BufWriter::new(File::create(path).with_context(|| format!("creating {}", path.display()))?))
}

impl RunDir {
    /// Creates `dir` if needed and locks it; fails if another process holds it, or, without
    /// `force`, if it holds a finished run or the outputs of an interrupted one.
    pub fn reserve(dir: &Path, force: bool) -> Result<Reserved> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("opening {}", lock_path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => bail!(
                "{}: another fl process is writing this run directory; wait for it to end or choose another --out",
                dir.display()
            ),
            Err(TryLockError::Error(e)) => return Err(e).with_context(|| format!("locking {}", lock_path.display())),
        }
        if !force {
            if dir.join("summary.json").is_file() {
                bail!(
                    "{}: holds a finished run (summary.json); pass --force to replace it, or choose another --out",
                    dir.display()
                );
            }
            if dir.join("metrics.csv").is_file() {
                bail!(
                    "{}: holds the outputs of a run that did not finish (metrics.csv, no summary.json); pass --force \
                     to start it again, or choose another --out",
                    dir.display()
                );
            }
        }
        Ok(Reserved { dir: dir.to_path_buf(), lock })
    }

    /// Writes the resolved config and the manifest into the reserved directory and starts its
    /// records.
    pub fn create(reserved: Reserved, resolved_config: &str, manifest: serde_json::Value) -> Result<Self> {
        let Reserved { dir, lock } = reserved;
        let dir = dir.as_path();
        std::fs::write(dir.join("config.toml"), resolved_config)
            .with_context(|| format!("writing {}", dir.join("config.toml").display()))?;
        write_json(&dir.join("manifest.json"), &manifest)?;
        // A summary from an earlier run in the same directory must not outlive this one.
        let _ = std::fs::remove_file(dir.join("summary.json"));
        let mut metrics = create(&dir.join("metrics.csv"))?;
        writeln!(metrics, "{}", EvalRecord::CSV_HEADER)?;
        let mut timing = create(&dir.join("timing.csv"))?;
        writeln!(timing, "version,wall_time_s")?;
        let events = create(&dir.join("events.jsonl"))?;
        Ok(RunDir { dir: dir.to_path_buf(), _lock: lock, metrics, timing, events, clock: Stopwatch::start() })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn wall_time_s(&self) -> f64 {
        self.clock.elapsed_s()
    }

    /// Writes `summary.json`: the run summary plus host wall time ([`SummaryFile`]).
    pub fn finish(&mut self, summary: &Summary) -> Result<()> {
        let file = SummaryFile { summary: summary.clone(), wall_time_s: self.wall_time_s() };
        // Through a JSON value, whose keys are sorted: the file's layout stays as it was.
        write_json(&self.dir.join("summary.json"), &serde_json::to_value(file)?)
    }

    fn write_record(&mut self, record: &EvalRecord, diagnostics: &[(String, f64)]) -> std::io::Result<()> {
        writeln!(self.metrics, "{}", record.csv_row())?;
        self.metrics.flush()?;
        writeln!(self.timing, "{},{}", record.version, self.clock.elapsed_s())?;
        self.timing.flush()?;
        let diag: serde_json::Map<String, serde_json::Value> =
            diagnostics.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        writeln!(
            self.events,
            "{}",
            json!({ "event": "eval", "version": record.version, "virtual_time_s": record.virtual_time_s, "diagnostics": diag })
        )?;
        self.events.flush()
    }
}

impl Observer for RunDir {
    fn on_eval(&mut self, record: &EvalRecord, diagnostics: &[(String, f64)]) -> fl_core::Result<()> {
        self.write_record(record, diagnostics).map_err(|e| fl_core::Error::io(self.dir.join("metrics.csv"), e))
    }

    fn on_rejected(&mut self, u: &RejectedUpdate) {
        let line = json!({
            "event": "rejected_update", "client": u.client, "job": u.job, "base_version": u.base_version,
            "version": u.version, "virtual_time_s": u.virtual_time_s, "train_loss": u.train_loss,
        });
        // The count is in metrics.csv too; an event lost to a full disk fails the next row.
        let _ = writeln!(self.events, "{line}").and_then(|()| self.events.flush());
    }
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
