//! The file-based image datasets this crate knows, with what differs between them: name,
//! default directory, reader, shape, classes and normalisation constants; and the list of every
//! dataset name (the text datasets `agnews` and `imdb` live in [`crate::agnews`] and
//! [`crate::imdb`], and `imagenet`, whose shape and classes are parameters, in
//! [`crate::imagenet`]).
//!
//! One table keeps the dataset components, `fl data info` and `fl data fetch` in agreement.

use std::path::{Path, PathBuf};

use crate::cifar::{self, Cifar100Labels};
use crate::error::{DataError, Result};
use crate::mnist::{self, MnistVariant};
use crate::raw::{Normalization, RawSplits};
use crate::tiny_imagenet::{self, TINY_CLASSES, TINY_IMAGENET};

/// Every dataset name `fl data info` and `fl data fetch` accept (the registered dataset
/// components have the same names).
pub const DATASET_NAMES: [&str; 9] =
    ["mnist", "fashion-mnist", "cifar10", "cifar100", "tiny-imagenet", "imagenet", "agnews", "imdb", "synthetic"];

/// The error for a dataset name outside [`DATASET_NAMES`].
pub fn unknown_dataset(name: &str) -> DataError {
    DataError::UnknownDataset { name: name.into(), known: &DATASET_NAMES }
}

/// A dataset read from files in its official format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageDataset {
    Mnist,
    FashionMnist,
    Cifar10,
    Cifar100(Cifar100Labels),
    /// Tiny-ImageNet-200 (its JPEGs are decoded once into a cache, see [`crate::tiny_imagenet`]).
    TinyImageNet,
}

impl ImageDataset {
    pub const ALL: [ImageDataset; 5] = [
        ImageDataset::Mnist,
        ImageDataset::FashionMnist,
        ImageDataset::Cifar10,
        ImageDataset::Cifar100(Cifar100Labels::Fine),
        ImageDataset::TinyImageNet,
    ];

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            ImageDataset::Mnist => "mnist",
            ImageDataset::FashionMnist => "fashion-mnist",
            ImageDataset::Cifar10 => "cifar10",
            ImageDataset::Cifar100(_) => "cifar100",
            ImageDataset::TinyImageNet => TINY_IMAGENET,
        }
    }

    /// `<data_dir>/<name>`: where the dataset lives unless its `dir` parameter says otherwise
    /// (Tiny-ImageNet: `<data_dir>/tiny-imagenet-200` when only that exists).
    pub fn default_dir(self, data_dir: &Path) -> PathBuf {
        match self {
            ImageDataset::TinyImageNet => tiny_imagenet::default_dir(data_dir),
            _ => data_dir.join(self.name()),
        }
    }

    /// The directories the reader tries, in order.
    pub fn looked_in(self, dir: &Path) -> Vec<PathBuf> {
        match self {
            ImageDataset::Mnist | ImageDataset::FashionMnist => vec![dir.to_path_buf()],
            ImageDataset::Cifar10 => cifar::candidates(dir, cifar::CIFAR10_SUBDIR).to_vec(),
            ImageDataset::Cifar100(_) => cifar::candidates(dir, cifar::CIFAR100_SUBDIR).to_vec(),
            ImageDataset::TinyImageNet => tiny_imagenet::candidates(dir).to_vec(),
        }
    }

    pub fn input_shape(self) -> [i64; 3] {
        match self {
            ImageDataset::Mnist | ImageDataset::FashionMnist => [1, 28, 28],
            ImageDataset::Cifar10 | ImageDataset::Cifar100(_) => [3, 32, 32],
            ImageDataset::TinyImageNet => [3, 64, 64],
        }
    }

    pub fn classes(self) -> usize {
        match self {
            ImageDataset::Mnist | ImageDataset::FashionMnist | ImageDataset::Cifar10 => 10,
            ImageDataset::Cifar100(labels) => labels.classes(),
            ImageDataset::TinyImageNet => TINY_CLASSES,
        }
    }

    /// The usual per-channel mean and std of the training images (scaled to [0, 1]).
    /// Tiny-ImageNet's are the statistics of its 100,000 training images as commonly quoted
    /// (they could not be recomputed here without the data).
    pub fn normalization(self) -> Normalization {
        match self {
            ImageDataset::Mnist => Normalization { mean: &[0.1307], std: &[0.3081] },
            ImageDataset::FashionMnist => Normalization { mean: &[0.2860], std: &[0.3530] },
            ImageDataset::Cifar10 => Normalization { mean: &[0.4914, 0.4822, 0.4465], std: &[0.2470, 0.2435, 0.2616] },
            ImageDataset::Cifar100(_) => {
                Normalization { mean: &[0.5071, 0.4865, 0.4409], std: &[0.2673, 0.2564, 0.2762] }
            }
            ImageDataset::TinyImageNet => {
                Normalization { mean: &[0.4802, 0.4481, 0.3975], std: &[0.2302, 0.2265, 0.2262] }
            }
        }
    }

    /// Reads both splits from `dir` (host bytes, no tensors).
    pub fn read(self, dir: &Path) -> Result<RawSplits> {
        match self {
            ImageDataset::Mnist => mnist::read_mnist(dir, MnistVariant::Mnist),
            ImageDataset::FashionMnist => mnist::read_mnist(dir, MnistVariant::FashionMnist),
            ImageDataset::Cifar10 => cifar::read_cifar10(dir),
            ImageDataset::Cifar100(labels) => cifar::read_cifar100(dir, labels),
            ImageDataset::TinyImageNet => tiny_imagenet::read_tiny_imagenet(dir),
        }
    }
}
