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
//! `--force` (or continued with `--resume`), and a lock (`.fl-lock`, an advisory lock the system releases when the process
//! ends, however it ends) makes a second process on the same directory fail at once. The
//! default directory `runs/<name>` takes the experiment's name only when it is a plain name
//! ([`default_dir`]), so that a config cannot write outside `runs/`.
//!
//! Checkpoints (`checkpoint/`: `state.bin`, the engine's [`Checkpoint`], and `files.json`,
//! the lengths the three record files had then and the wall time so far) are written when the
//! engine asks and `--checkpoint-every` host seconds have passed: records flushed to disk
//! first, the new checkpoint written in `checkpoint.tmp/` and renamed into place, so that a
//! crash at any moment leaves one whole checkpoint (`checkpoint/`, or `checkpoint.old/` during
//! the swap) consistent with the records. A resumed run cuts the records back to those lengths
//! and appends; a finished run removes its checkpoint.

use std::fs::{File, TryLockError};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use fl_core::engine::{Checkpoint, RejectedUpdate};
use fl_core::{EvalRecord, Observer, Summary};
use fl_record::SummaryFile;
use serde_json::json;

use crate::args::Cadence;
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
    /// Wall seconds the run had spent before this process (a resumed run's).
    earlier_wall_s: f64,
    /// How often checkpoints are written (none: never), and where the last one was: host
    /// time, version and virtual time.
    checkpoint_every: Option<Cadence>,
    since_checkpoint: Stopwatch,
    last_checkpoint: (u64, f64),
}

/// `checkpoint/files.json`: what the records held when the checkpoint was written.
#[derive(serde::Serialize, serde::Deserialize)]
struct CheckpointFiles {
    version: u64,
    virtual_time_s: f64,
    metrics_bytes: u64,
    timing_bytes: u64,
    events_bytes: u64,
    wall_time_s: f64,
}

const CHECKPOINT: &str = "checkpoint";
const CHECKPOINT_OLD: &str = "checkpoint.old";
const CHECKPOINT_TMP: &str = "checkpoint.tmp";

fn create(path: &Path) -> Result<BufWriter<File>> {
    Ok(BufWriter::new(File::create(path).with_context(|| format!("creating {}", path.display()))?))
}

impl RunDir {
    /// Creates `dir` if needed and locks it; fails if another process holds it, or, without
    /// `force`, if it holds a finished run or the outputs of an interrupted one.
    pub fn reserve(dir: &Path, force: bool, resume: bool) -> Result<Reserved> {
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
            if dir.join("metrics.csv").is_file() && !resume {
                bail!(
                    "{}: holds the outputs of a run that did not finish (metrics.csv, no summary.json); pass --resume \
                     to go on from its last checkpoint, --force to start it again, or choose another --out",
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
        for old in [CHECKPOINT, CHECKPOINT_OLD, CHECKPOINT_TMP] {
            let _ = std::fs::remove_dir_all(dir.join(old));
        }
        Ok(RunDir {
            dir: dir.to_path_buf(),
            _lock: lock,
            metrics,
            timing,
            events,
            clock: Stopwatch::start(),
            earlier_wall_s: 0.0,
            checkpoint_every: None,
            since_checkpoint: Stopwatch::start(),
            last_checkpoint: (0, 0.0),
        })
    }

    /// Continues the interrupted run in the reserved directory: its records cut back to what
    /// its last checkpoint had seen, and the checkpoint to restore; a run that wrote no
    /// checkpoint starts again from the beginning ([`RunDir::create`], no checkpoint). Fails if
    /// `resolved_config` is not the config the run started with.
    pub fn resume(
        reserved: Reserved,
        resolved_config: &str,
        manifest: serde_json::Value,
    ) -> Result<(Self, Option<Checkpoint>)> {
        let dir = reserved.dir.clone();
        let config = dir.join("config.toml");
        match std::fs::read_to_string(&config) {
            Ok(earlier) if earlier != resolved_config => bail!(
                "{}: differs from the experiment's resolved config: a run resumes only with the config it started \
                 with (pass --force to start it again under the new one)",
                config.display()
            ),
            Ok(_) => {}
            Err(_) => return Ok((Self::create(reserved, resolved_config, manifest)?, None)),
        }
        let Some(saved) = [CHECKPOINT, CHECKPOINT_OLD].into_iter().map(|c| dir.join(c)).find(|c| c.is_dir()) else {
            return Ok((Self::create(reserved, resolved_config, manifest)?, None));
        };
        let read = |name: &str| {
            let path = saved.join(name);
            std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
        };
        let files: CheckpointFiles = serde_json::from_slice(&read("files.json")?)
            .with_context(|| format!("{}: unreadable", saved.join("files.json").display()))?;
        let checkpoint = Checkpoint::from_bytes(read("state.bin")?)
            .with_context(|| format!("{}", saved.join("state.bin").display()))?;
        let reopen = |name: &str, len: u64| -> Result<BufWriter<File>> {
            let path = dir.join(name);
            let file =
                File::options().write(true).open(&path).with_context(|| format!("opening {}", path.display()))?;
            let now = file.metadata()?.len();
            if now < len {
                bail!("{}: {now} bytes, shorter than the {len} its checkpoint saw", path.display());
            }
            file.set_len(len).with_context(|| format!("cutting {} back to its checkpoint", path.display()))?;
            let mut w = BufWriter::new(file);
            std::io::Seek::seek(&mut w, std::io::SeekFrom::End(0))?;
            Ok(w)
        };
        let metrics = reopen("metrics.csv", files.metrics_bytes)?;
        let timing = reopen("timing.csv", files.timing_bytes)?;
        let events = reopen("events.jsonl", files.events_bytes)?;
        let mut manifest_file: serde_json::Value = std::fs::read(dir.join("manifest.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| json!({}));
        let resumed = json!({ "version": checkpoint.version(), "git_revision": manifest["git_revision"] });
        match manifest_file.get_mut("resumed").and_then(|r| r.as_array_mut()) {
            Some(list) => list.push(resumed),
            None => manifest_file["resumed"] = json!([resumed]),
        }
        write_json(&dir.join("manifest.json"), &manifest_file)?;
        let Reserved { dir, lock } = reserved;
        let last_checkpoint = (checkpoint.version(), files.virtual_time_s);
        let run_dir = RunDir {
            dir,
            _lock: lock,
            metrics,
            timing,
            events,
            clock: Stopwatch::start(),
            earlier_wall_s: files.wall_time_s,
            checkpoint_every: None,
            since_checkpoint: Stopwatch::start(),
            last_checkpoint,
        };
        Ok((run_dir, Some(checkpoint)))
    }

    /// Writes a checkpoint when the engine offers one and `every` has passed since the last
    /// (0: at every offer); none: never.
    pub fn checkpoint_every(&mut self, every: Option<Cadence>) {
        self.checkpoint_every = every;
    }

    /// Flushes the records to disk, then writes `checkpoint` with their lengths beside it
    /// and swaps it into place (see the module doc).
    fn write_checkpoint(&mut self, checkpoint: &Checkpoint) -> std::io::Result<()> {
        for w in [&mut self.metrics, &mut self.timing, &mut self.events] {
            w.flush()?;
            w.get_ref().sync_data()?;
        }
        let files = CheckpointFiles {
            version: checkpoint.version(),
            virtual_time_s: self.last_checkpoint.1,
            metrics_bytes: self.metrics.get_ref().metadata()?.len(),
            timing_bytes: self.timing.get_ref().metadata()?.len(),
            events_bytes: self.events.get_ref().metadata()?.len(),
            wall_time_s: self.wall_time_s(),
        };
        let (tmp, current, old) =
            (self.dir.join(CHECKPOINT_TMP), self.dir.join(CHECKPOINT), self.dir.join(CHECKPOINT_OLD));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir(&tmp)?;
        for (name, bytes) in [("state.bin", checkpoint.bytes().to_vec()), ("files.json", serde_json::to_vec(&files)?)] {
            let mut f = File::create(tmp.join(name))?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        if current.exists() {
            if old.exists() {
                std::fs::remove_dir_all(&old)?;
            }
            std::fs::rename(&current, &old)?;
        }
        std::fs::rename(&tmp, &current)?;
        File::open(&self.dir)?.sync_all()?;
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Host seconds the run has taken, over every process that worked on it.
    pub fn wall_time_s(&self) -> f64 {
        self.earlier_wall_s + self.clock.elapsed_s()
    }

    /// Writes `summary.json`: the run summary plus host wall time ([`SummaryFile`]).
    pub fn finish(&mut self, summary: &Summary) -> Result<()> {
        let file = SummaryFile { summary: summary.clone(), wall_time_s: self.wall_time_s() };
        // Through a JSON value, whose keys are sorted: the file's layout stays as it was.
        write_json(&self.dir.join("summary.json"), &serde_json::to_value(file)?)?;
        // A finished run needs no checkpoint.
        for c in [CHECKPOINT, CHECKPOINT_OLD, CHECKPOINT_TMP] {
            let _ = std::fs::remove_dir_all(self.dir.join(c));
        }
        Ok(())
    }

    fn write_record(&mut self, record: &EvalRecord, diagnostics: &[(String, f64)]) -> std::io::Result<()> {
        writeln!(self.metrics, "{}", record.csv_row())?;
        self.metrics.flush()?;
        writeln!(self.timing, "{},{}", record.version, self.wall_time_s())?;
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

    fn wants_checkpoint(&mut self, version: u64, virtual_time_s: f64) -> bool {
        let (last_version, last_time) = self.last_checkpoint;
        let due = match self.checkpoint_every {
            None => false,
            Some(Cadence::HostSeconds(s)) => self.since_checkpoint.elapsed_s() >= s,
            Some(Cadence::Aggregations(n)) => version >= last_version + n,
            Some(Cadence::VirtualSeconds(s)) => virtual_time_s >= last_time + s,
        };
        if due {
            self.last_checkpoint = (version, virtual_time_s);
        }
        due
    }

    fn on_checkpoint(&mut self, checkpoint: &Checkpoint) -> fl_core::Result<()> {
        self.write_checkpoint(checkpoint).map_err(|e| fl_core::Error::io(self.dir.join(CHECKPOINT), e))?;
        self.since_checkpoint = Stopwatch::start();
        Ok(())
    }
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
