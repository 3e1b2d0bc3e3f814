//! The `shards` partitioner of McMahan et al., "Communication-Efficient Learning of Deep
//! Networks from Decentralized Data" (AISTATS 2017, §3): sort the samples by label, cut them
//! into `clients × shards_per_client` shards of (nearly) equal size, and give every client
//! `shards_per_client` shards drawn at random without replacement. With MNIST, 100 clients and
//! 2 shards each (200 shards of 300), most clients see two digits.
//!
//! When the number of samples is not a multiple of the number of shards, shard s covers the
//! sorted positions `⌊sN/S⌋ .. ⌊(s+1)N/S⌋`, so sizes differ by at most one and nothing is dropped.
//! Samples of equal label keep their index order (a stable sort).

use fl_core::rng::Rng;
use fl_core::{InvalidKey, Partitioner, Result, Validate};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use super::{check_args, sorted};
use crate::error::PartitionError;

/// Parameters of `shards`.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShardsConfig {
    /// Shards dealt to each client, at least 1.
    #[default(2)]
    pub shards_per_client: usize,
}

impl Validate for ShardsConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.shards_per_client == 0 {
            return Err(InvalidKey::new("shards_per_client", "must be at least 1"));
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct Shards {
    pub cfg: ShardsConfig,
}

impl Shards {
    /// The partitioner for `cfg`.
    pub fn new(cfg: ShardsConfig) -> Self {
        Shards { cfg }
    }
}

impl Partitioner for Shards {
    fn partition(&self, labels: &[i64], classes: i64, clients: usize, rng: &mut Rng) -> Result<Vec<Vec<i64>>> {
        check_args("shards", labels, classes, clients)?;
        let n = labels.len();
        let per = self.cfg.shards_per_client;
        let shards = clients * per;
        if shards > n {
            return Err(PartitionError::MoreShardsThanSamples { clients, per_client: per, samples: n }.into());
        }
        let mut by_label: Vec<i64> = (0..n as i64).collect();
        by_label.sort_by_key(|&i| labels[i as usize]);
        let mut ids: Vec<usize> = (0..shards).collect();
        ids.shuffle(rng);
        let bound = |s: usize| s * n / shards;
        let parts = ids
            .chunks(per)
            .map(|mine| mine.iter().flat_map(|&s| by_label[bound(s)..bound(s + 1)].iter().copied()).collect());
        Ok(sorted(parts.collect()))
    }
}

fl_core::register!(Partitioner "shards" => Shards::new(ShardsConfig),
    summary: "sort by label, cut into clients x shards_per_client shards, deal shards_per_client random shards to each client",
    paper: "McMahan et al., Communication-Efficient Learning of Deep Networks from Decentralized Data, AISTATS 2017");
