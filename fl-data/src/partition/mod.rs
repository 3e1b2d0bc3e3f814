//! Partitioners: how a centralised training set is split among clients (fl-core's
//! [`fl_core::Partitioner`]). Every partitioner gives each sample to at most one client (exactly
//! one unless configured to hold samples out), draws all randomness from the `rng` it is
//! handed, and returns each client's indices sorted, except `dirichlet` with
//! `remainder = "drop"`, which returns them shuffled as the asyncnc authors' code does.
//!
//! - [`Iid`] (`iid`): shuffle, then split as evenly as possible;
//! - [`Dirichlet`] (`dirichlet`): per-class Dirichlet(α) proportions over clients (Hsu et al.
//!   2019), in the PFNM / NIID-Bench / PFLlib form the papers used;
//! - [`Shards`] (`shards`): McMahan et al. 2017's sort-by-label shards.

mod dirichlet;
mod iid;
mod shards;

pub use dirichlet::{Cap, Dirichlet, DirichletConfig, Remainder};
pub use iid::{Iid, IidConfig};
pub use shards::{Shards, ShardsConfig};

use fl_core::Result;

use crate::error::PartitionError;

/// Checks the arguments every partitioner shares: at least one client and one class, labels
/// in `0..classes`.
fn check_args(partitioner: &'static str, labels: &[i64], classes: i64, clients: usize) -> Result<()> {
    if clients == 0 {
        return Err(PartitionError::NoClients { partitioner }.into());
    }
    if classes < 1 {
        return Err(PartitionError::NoClasses { partitioner, classes }.into());
    }
    if let Some((sample, &label)) = labels.iter().enumerate().find(|(_, l)| !(0..classes).contains(*l)) {
        return Err(PartitionError::LabelOutOfRange { partitioner, label, sample, classes }.into());
    }
    Ok(())
}

/// Sorts each client's list, the order the `Partitioner` contract promises.
fn sorted(mut parts: Vec<Vec<i64>>) -> Vec<Vec<i64>> {
    for p in &mut parts {
        p.sort_unstable();
    }
    parts
}
