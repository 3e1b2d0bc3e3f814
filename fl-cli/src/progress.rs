//! A progress bar over aggregations that forwards records to the run directory.

use fl_core::engine::RejectedUpdate;
use fl_core::{EvalRecord, Observer};
use indicatif::{ProgressBar, ProgressStyle};

/// Shows progress and passes every record on to `inner`.
pub struct Progress<'a> {
    bar: ProgressBar,
    inner: &'a mut dyn Observer,
}

impl<'a> Progress<'a> {
    pub fn new(total: Option<u64>, quiet: bool, inner: &'a mut dyn Observer) -> Self {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            let bar = total.map_or_else(ProgressBar::no_length, ProgressBar::new);
            bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} aggregations  {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar
        };
        Progress { bar, inner }
    }

    pub fn finish(&self) {
        self.bar.finish();
    }
}

impl Observer for Progress<'_> {
    fn on_eval(&mut self, record: &EvalRecord, diagnostics: &[(String, f64)]) -> fl_core::Result<()> {
        self.bar.set_position(record.version);
        self.bar.set_message(format!("accuracy {:.4}  virtual time {:.0} s", record.accuracy, record.virtual_time_s));
        self.inner.on_eval(record, diagnostics)
    }

    fn on_note(&mut self, note: &str) {
        self.bar.suspend(|| self.inner.on_note(note));
    }

    fn on_rejected(&mut self, update: &RejectedUpdate) {
        self.inner.on_rejected(update);
    }

    fn wants_checkpoint(&mut self, version: u64, virtual_time_s: f64) -> bool {
        self.inner.wants_checkpoint(version, virtual_time_s)
    }

    fn on_checkpoint(&mut self, checkpoint: &fl_core::engine::Checkpoint) -> fl_core::Result<()> {
        self.inner.on_checkpoint(checkpoint)
    }
}
