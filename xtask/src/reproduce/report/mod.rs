//! The report of a reproduction: the paper's tables with ours beside them (`<table>.md`), the
//! checks and orderings of the grid, and everything machine-readable in `results.json`.
//!
//! An accuracy cell reads `paper / ours best / ours final / Δ` in accuracy points, Δ = best −
//! paper, the comparison the paper's tables support (KDD'23 spec A-12); ✗ marks a Δ beyond the
//! table's tolerance. Time columns (virtual seconds to the target accuracy, or the budget of a
//! multiple of it) are comparable with the paper's wall-clock seconds only in shape, so each
//! also shows its ratio to the fastest of the table's reference rows. With several seeds, ours
//! is the mean over the finished seeds, the best accuracy with its sample standard deviation
//! (`96.0 ± 1.4`), and a cell missing some of its seeds says how many it has. An ordering
//! compares a chain's rows over the seeds all of them finished, so on the same partition draws.

mod checks;
mod expected;
mod results;
mod table;

pub use checks::{Verdict, evaluate_checks, evaluate_orderings, evaluate_trends, render_verdicts};
pub use expected::{ColumnMetric, Expected, Findings, PaperTable};
#[cfg(test)]
pub use results::fixtures;
pub use results::{MissingData, Results};
pub use table::{Notes, Score, render_table};
