//! Datasets as device-resident tensors, and the `Partitioner` trait.
//!
//! Samples live on the compute device once; a client's data is a tensor of indices into the
//! shared training set, and a batch is an index selection, so no host round-trip happens
//! inside training.

use tch::{Device, Tensor};

use crate::error::Result;
use crate::rng::Rng;

/// Inputs `x` (`[n, ...input_shape]`: float features, or int64 token ids for text) and class
/// labels `y` (`[n]`, int64).
#[derive(Debug)]
pub struct Dataset {
    /// Inputs, `[n, ...input_shape]`.
    pub x: Tensor,
    /// Class labels, `[n]` int64 in `0..classes`.
    pub y: Tensor,
}

impl Dataset {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.y.size()[0] as usize
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The samples on `device`.
    pub fn to_device(&self, device: Device) -> Dataset {
        Dataset { x: self.x.to_device(device), y: self.y.to_device(device) }
    }

    /// A new handle on the same tensors (cheap; the samples are never modified).
    pub fn shallow_clone(&self) -> Dataset {
        Dataset { x: self.x.shallow_clone(), y: self.y.shallow_clone() }
    }

    /// Labels on the host (used once, by partitioners).
    pub fn labels(&self) -> Vec<i64> {
        Vec::<i64>::try_from(&self.y.to_device(Device::Cpu)).expect("labels are int64")
    }
}

/// What a model needs to know about its inputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DataSpec {
    /// Shape of one sample, e.g. `[1, 28, 28]`, or `[seq_len]` for token-id sequences.
    pub input_shape: Vec<i64>,
    /// Number of classes: labels are `0..classes` and logits have this width.
    pub classes: i64,
    /// The number of token ids (ids are `0..vocab_size`) when samples are token-id sequences
    /// (int64 `x`, as the text datasets give); `None` for real-valued inputs.
    pub vocab_size: Option<i64>,
}

/// A dataset as loaded: train and test splits, and the clients' own split where the data is
/// naturally federated (FedProx's Synthetic, LEAF-style data).
#[derive(Debug)]
pub struct FederatedData {
    /// The training samples, which clients share out.
    pub train: Dataset,
    /// The server's test set, on which the global model is evaluated.
    pub test: Dataset,
    /// Input shape, classes and vocabulary, for building the model.
    pub spec: DataSpec,
    /// Each client's sample indices into `train` where the data comes already split among
    /// clients; the experiment's `clients` must then equal its length, and no partitioner
    /// runs. `None`: a partitioner splits `train`.
    pub natural_partition: Option<Vec<Vec<i64>>>,
}

/// Splits training samples among clients.
pub trait Partitioner: Send {
    /// Returns, for each of `clients`, the indices of its samples. Every index in
    /// `0..labels.len()` appears in exactly one client's list, unless the partitioner is
    /// configured to hold samples out (then in at most one).
    fn partition(&self, labels: &[i64], classes: i64, clients: usize, rng: &mut Rng) -> Result<Vec<Vec<i64>>>;
}
