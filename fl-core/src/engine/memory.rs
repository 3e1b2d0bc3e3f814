//! The memory a run plans for, checked before anything is allocated: a model too large, or
//! too many jobs in flight, fails at once with the numbers instead of aborting in an
//! allocation minutes later.
//!
//! The estimate counts model copies, 4 bytes per element: the global model and the
//! aggregator's working copy; for each job the scheduler may keep in flight the version it
//! started from and its result (trained model, then update); for each job training at the same
//! moment (the workers' cohorts) its parameters, gradients and optimizer state; and the
//! per-client state the trainer keeps between a client's jobs (FedDyn's gradient estimate,
//! MOON's previous model: one copy per client; ASO-Fed's two), and the aggregator's (FedASMU's
//! last merge of every device). Datasets are already loaded when
//! the check runs, and activations are left out (they scale with the batch, not the model), so
//! the estimate is a floor for what it counts, not a bound. Jobs of one synchronous round
//! share their start version, so there it errs high: measured (release build, CPU, one worker;
//! VGG-11 of 9.2 M elements, 37 MB a copy; 100 clients in a round), FedAvg peaks at 4.6 GB
//! resident against an estimate of 7.6 GB (2 + 2·100 + 3 copies), FedDyn and MOON at 10.7 GB
//! against 11.3 GB (100 more copies of client state; see `engine::allocator`).

use crate::error::{EngineError, Result};

/// Model copies a run holds besides its jobs' (global model, aggregator's copy).
const SERVER_COPIES: u64 = 2;
/// Model copies one job in flight holds (the version it started from, its result).
const JOB_COPIES: u64 = 2;
/// Model copies a job holds while it trains (parameters, gradients, optimizer state).
const TRAINING_COPIES: u64 = 3;
/// The share of the machine's memory a run may plan for when `[run] memory_budget_gb` is absent.
const DEFAULT_SHARE: f64 = 0.8;

/// What a run keeps in memory, in jobs and model copies.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Jobs the scheduler may keep in flight.
    pub in_flight: usize,
    /// Jobs that may train at the same moment (at most `in_flight`).
    pub training: usize,
    /// Model-sized copies of per-client state, all clients together.
    pub client_copies: u64,
    /// Model-sized copies the aggregator keeps.
    pub aggregator_copies: u64,
}

impl Plan {
    /// Model copies the plan holds.
    fn copies(&self) -> u64 {
        SERVER_COPIES
            + JOB_COPIES * self.in_flight as u64
            + TRAINING_COPIES * self.training.min(self.in_flight) as u64
            + self.client_copies
            + self.aggregator_copies
    }

    /// The plan in words for the run log: the copies it counts, what each is and the total.
    pub fn describe(&self, elements: Option<u64>) -> String {
        let training = self.training.min(self.in_flight) as u64;
        let copy_mb = elements.map_or(f64::INFINITY, |n| n as f64 * 4.0 / 1e6);
        format!(
            "memory plan: {} model copies of {copy_mb:.2} MB, {:.3} GB (server {SERVER_COPIES}, jobs in flight \
             {JOB_COPIES}×{}, training {TRAINING_COPIES}×{training}, client state {}, aggregator {})",
            self.copies(),
            copy_mb * self.copies() as f64 / 1e3,
            self.in_flight,
            self.client_copies,
            self.aggregator_copies
        )
    }
}

/// Checks that `elements` per model copy (`None`: more than 64 bits count) held as `plan`
/// says fit `budget_gb` (absent: 80% of the machine's memory, where it can be read).
pub fn check(elements: Option<u64>, plan: Plan, budget_gb: Option<f64>) -> Result<()> {
    let copies = plan.copies();
    let bytes = elements.and_then(|n| n.checked_mul(4)).and_then(|b| b.checked_mul(copies));
    // Where the machine's memory cannot be read, only a count that overflows fails.
    let budget = budget_gb
        .map(|g| g * 1e9)
        .or_else(|| machine_memory().map(|m| m as f64 * DEFAULT_SHARE))
        .unwrap_or(f64::INFINITY);
    match bytes {
        Some(b) if (b as f64) <= budget => Ok(()),
        _ => Err(too_large(elements, plan, budget, budget_gb.is_some())),
    }
}

fn too_large(elements: Option<u64>, plan: Plan, budget: f64, set: bool) -> crate::Error {
    let copies = plan.copies();
    EngineError::MemoryBudget {
        elements: elements.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
        in_flight: plan.in_flight,
        training: plan.training.min(plan.in_flight),
        client_copies: plan.client_copies,
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

    fn plan(in_flight: usize, training: usize, client_copies: u64) -> Plan {
        Plan { in_flight, training, client_copies, aggregator_copies: 0 }
    }

    #[test]
    fn the_estimate_counts_server_and_job_copies_against_the_budget() {
        // 1e6 elements = 4 MB a copy; 10 jobs in flight, 2 training: 2 + 2·10 + 3·2 = 28
        // copies, 112 MB.
        assert!(check(Some(1_000_000), plan(10, 2, 0), Some(0.1121)).is_ok());
        match check(Some(1_000_000), plan(10, 2, 0), Some(0.1119)) {
            Err(Error::Engine(EngineError::MemoryBudget { needed_gb, in_flight, training, .. })) => {
                assert!((needed_gb - 0.112).abs() < 1e-9 && in_flight == 10 && training == 2)
            }
            other => panic!("{other:?}"),
        }
        // No more jobs train than are in flight: 2 + 2·10 + 3·10 = 52 copies.
        assert!(check(Some(1_000_000), plan(10, 64, 0), Some(0.2079)).is_err());
        assert!(check(Some(1_000_000), plan(10, 64, 0), Some(0.2081)).is_ok());
        // 100 clients' state (FedDyn: one copy each) adds 400 MB.
        assert!(check(Some(1_000_000), plan(10, 2, 100), Some(0.5119)).is_err());
        assert!(check(Some(1_000_000), plan(10, 2, 100), Some(0.5121)).is_ok());
        // Overflowing counts fail whatever the budget.
        let err = check(None, plan(1, 1, 0), None).unwrap_err().to_string();
        assert!(err.contains("more than 2^64"), "{err}");
        assert!(check(Some(u64::MAX / 2), plan(1, 1, 0), Some(1e12)).is_err());
        // An aggregator's 100 copies (FedASMU's Δ per device) count as the clients' do.
        let fedasmu = Plan { aggregator_copies: 100, ..plan(10, 2, 0) };
        assert!(check(Some(1_000_000), fedasmu, Some(0.5119)).is_err());
        assert_eq!(
            fedasmu.describe(Some(1_000_000)),
            "memory plan: 128 model copies of 4.00 MB, 0.512 GB (server 2, jobs in flight 2×10, training 3×2, \
             client state 0, aggregator 100)"
        );
    }
}
