//! What a run writes and what reports read back, in one place: the evaluation record (one row
//! of `metrics.csv`) and the run summary (`summary.json`). The engine (`fl-core`) produces them;
//! `cargo xtask reproduce`, which builds before libtorch exists, reads them with this crate,
//! which therefore depends on serde alone.
//!
//! Readers are tolerant of records written by older versions: a column or key that is absent
//! reads as NaN (numbers), 0 (counts) or empty, so committed run records stay readable.

mod eval_record;
mod summary;

pub use eval_record::EvalRecord;
pub use summary::{ClientStats, Summary, SummaryFile};
