//! A run's output directory.
//!
//! `config.toml` (the resolved experiment), `manifest.json` (revision, libtorch, device,
//! seed), `metrics.csv` (one row per evaluation, a deterministic function of config and
//! seed), `timing.csv` (host wall time per evaluation), `events.jsonl` (diagnostics per
//! evaluation) and `summary.json`. Records are flushed as they come, so a run that fails
//! part-way keeps everything it evaluated.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use fl_core::{EvalRecord, Observer, Summary};
use fl_record::SummaryFile;
use serde_json::json;

use crate::timing::Stopwatch;

pub struct RunDir {
    dir: PathBuf,
    metrics: BufWriter<File>,
    timing: BufWriter<File>,
    events: BufWriter<File>,
    clock: Stopwatch,
}

fn create(path: &Path) -> Result<BufWriter<File>> {
    Ok(BufWriter::new(File::create(path).with_context(|| format!("creating {}", path.display()))?))
}

impl RunDir {
    /// Creates (or reuses) `dir` and writes the resolved config and the manifest.
    pub fn create(dir: &Path, resolved_config: &str, manifest: serde_json::Value) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
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
        Ok(RunDir { dir: dir.to_path_buf(), metrics, timing, events, clock: Stopwatch::start() })
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
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
