//! The memory a run plans for, checked before anything is allocated: a model too large, or
//! too many jobs in flight, fails at once with the numbers instead of aborting in an
//! allocation minutes later.
//!
//! The estimate counts model copies, 4 bytes per element: the global model and the
//! aggregator's working copy, and for each job the scheduler may keep in flight the version it
//! started from plus, while it trains, its parameters, gradients, optimizer state and update
//! (4 more), and the per-client state the trainer keeps between a client's jobs (FedDyn's
//! gradient estimate: one copy per client). Datasets are already loaded when the check runs, and activations are left out
//! (they scale with the batch, not the model), so the estimate is a floor, not a bound.

use crate::error::{EngineError, Result};

/// Model copies a run holds besides its jobs' (global model, aggregator's copy).
const SERVER_COPIES: u64 = 2;
/// Model copies one job in flight holds at most (start version, parameters, gradients,
/// optimizer state, update).
const JOB_COPIES: u64 = 5;
/// The share of the machine's memory a run may plan for when `[run] memory_budget_gb` is absent.
const DEFAULT_SHARE: f64 = 0.8;

/// Checks that `elements` per model copy (`None`: more than 64 bits count) with `in_flight`
/// jobs and `client_copies` copies of per-client state fit `budget_gb` (absent: 80% of the
/// machine's memory, where it can be read).
pub fn check(elements: Option<u64>, in_flight: usize, client_copies: u64, budget_gb: Option<f64>) -> Result<()> {
    let copies = SERVER_COPIES + JOB_COPIES * in_flight as u64 + client_copies;
    let bytes = elements.and_then(|n| n.checked_mul(4)).and_then(|b| b.checked_mul(copies));
    // Where the machine's memory cannot be read, only a count that overflows fails.
    let budget = budget_gb
        .map(|g| g * 1e9)
        .or_else(|| machine_memory().map(|m| m as f64 * DEFAULT_SHARE))
        .unwrap_or(f64::INFINITY);
    match bytes {
        Some(b) if (b as f64) <= budget => Ok(()),
        _ => Err(too_large(elements, in_flight, copies, budget, budget_gb.is_some())),
    }
}

fn too_large(elements: Option<u64>, in_flight: usize, copies: u64, budget: f64, set: bool) -> crate::Error {
    EngineError::MemoryBudget {
        elements: elements.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
        in_flight,
        needed_gb: elements.map_or(f64::INFINITY, |n| n as f64 * 4.0 * copies as f64 / 1e9),
        budget_gb: budget / 1e9,
        budget_source: if set {
            "[run] memory_budget_gb"
        } else {
            "80% of this machine's memory; [run] memory_budget_gb sets another"
        },
    }
    .into()
}

/// The machine's total memory in bytes (Linux `/proc/meminfo`), if it can be read.
fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn the_estimate_counts_server_and_job_copies_against_the_budget() {
        // 1e6 elements = 4 MB a copy; 2 + 5·10 copies = 208 MB.
        assert!(check(Some(1_000_000), 10, 0, Some(0.209)).is_ok());
        match check(Some(1_000_000), 10, 0, Some(0.207)) {
            Err(Error::Engine(EngineError::MemoryBudget { needed_gb, in_flight, .. })) => {
                assert!((needed_gb - 0.208).abs() < 1e-9 && in_flight == 10)
            }
            other => panic!("{other:?}"),
        }
        // 100 clients' state (FedDyn: one copy each) adds 400 MB.
        assert!(check(Some(1_000_000), 10, 100, Some(0.607)).is_err());
        assert!(check(Some(1_000_000), 10, 100, Some(0.609)).is_ok());
        // Overflowing counts fail whatever the budget.
        let err = check(None, 1, 0, None).unwrap_err().to_string();
        assert!(err.contains("more than 2^64"), "{err}");
        assert!(check(Some(u64::MAX / 2), 1, 0, Some(1e12)).is_err());
    }
}
