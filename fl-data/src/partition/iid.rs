//! The `iid` partitioner: a uniform random permutation of the samples, cut into `clients`
//! contiguous pieces whose sizes differ by at most one.

use fl_core::rng::Rng;
use fl_core::{NoParams, Partitioner, Result};
use rand::seq::SliceRandom;

use super::{check_args, sorted};
use crate::error::PartitionError;

/// Shuffle and split evenly: client c gets positions `⌊cN/C⌋ .. ⌊(c+1)N/C⌋` of the permutation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Iid;

/// Parameters of `iid`: none, so any key is an error.
pub type IidConfig = NoParams;

impl Partitioner for Iid {
    fn partition(&self, labels: &[i64], classes: i64, clients: usize, rng: &mut Rng) -> Result<Vec<Vec<i64>>> {
        check_args("iid", labels, classes, clients)?;
        let n = labels.len();
        if clients > n {
            return Err(PartitionError::MoreClientsThanSamples { clients, samples: n }.into());
        }
        let mut order: Vec<i64> = (0..n as i64).collect();
        order.shuffle(rng);
        let bound = |c: usize| c * n / clients;
        Ok(sorted((0..clients).map(|c| order[bound(c)..bound(c + 1)].to_vec()).collect()))
    }
}

fl_core::register!(Partitioner "iid" => Iid::default(),
    summary: "uniform random split, client sizes differing by at most one", paper: "");
