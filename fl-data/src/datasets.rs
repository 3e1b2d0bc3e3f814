//! The file-based dataset components `mnist`, `fashion-mnist`, `cifar10`, `cifar100` and
//! `tiny-imagenet`: their
//! parameters, and the load from official files into normalised device tensors.
//!
//! Parameters (all optional):
//! - `dir`: the directory holding the files; default `<data_dir>/<name>`. A relative path is
//!   taken relative to the working directory.
//! - `train_samples`, `test_samples`: keep only the first n samples of a split (fast tests);
//!   n above the split's size is an error.
//! - `normalization`: `"dataset-stats"` (default: the split's usual per-channel mean and std)
//!   or `"half"` (mean 0.5, std 0.5: pixels in [−1, 1], as the KDD'23 CIFAR code does).
//! - `test_normalization`: the test split's, when it differs (default: `normalization`).
//! - `train_includes_test`: the test samples are also training samples, appended after the
//!   train split (normalised as it is) and partitioned with it; evaluation still uses the test
//!   split. The KDD'23 code's data (spec kdd23 §5.1): merged splits, `normalization = "half"`
//!   for training and the usual statistics for the test set. Default false.
//! - `labels` (`cifar100` only): `"fine"` (100 classes, default) or `"coarse"` (20).
//! - `verify`: check the files against their recorded SHA-256 sums before reading them
//!   (default true; see [`crate::integrity`]). `false` trusts them as they are.

use std::path::{Path, PathBuf};

use fl_core::registry::{Builder, Component, DataContext, Params, defaults_of};
use fl_core::{DataSpec, FederatedData, InvalidKey, Result};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::catalog::ImageDataset;
use crate::cifar::Cifar100Labels;
use crate::integrity;
use crate::raw::{Normalization, RawSplits};

/// Parameters of `mnist`, `fashion-mnist`, `cifar10` and `tiny-imagenet`.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImageDatasetConfig {
    pub dir: Option<PathBuf>,
    pub train_samples: Option<usize>,
    pub test_samples: Option<usize>,
    pub normalization: NormalizationChoice,
    pub test_normalization: Option<NormalizationChoice>,
    pub train_includes_test: bool,
    #[default(true)]
    pub verify: bool,
}

/// How pixels are normalised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormalizationChoice {
    /// The dataset's usual per-channel mean and std.
    #[default]
    DatasetStats,
    /// Mean 0.5 and std 0.5 per channel.
    Half,
}

const HALVES: [f64; 3] = [0.5; 3];

/// Parameters of `cifar100`.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cifar100Config {
    pub dir: Option<PathBuf>,
    pub train_samples: Option<usize>,
    pub test_samples: Option<usize>,
    pub normalization: NormalizationChoice,
    pub test_normalization: Option<NormalizationChoice>,
    pub train_includes_test: bool,
    pub labels: Cifar100Labels,
    #[default(true)]
    pub verify: bool,
}

/// Keeps the first `train_samples` and `test_samples` of `splits` (read from `dir`), when set;
/// asking for more than a split has is an error naming the key.
pub(crate) fn keep_first_samples(
    splits: &mut RawSplits,
    train_samples: Option<usize>,
    test_samples: Option<usize>,
    params: &Params,
    dir: &Path,
) -> Result<()> {
    let limits = [
        ("train_samples", "train", train_samples, &mut splits.train),
        ("test_samples", "test", test_samples, &mut splits.test),
    ];
    for (key, which, keep, split) in limits {
        if let Some(n) = keep {
            let available = split.len();
            split.keep_first(n, which).map_err(|_| {
                params.invalid_key(InvalidKey::new(
                    key,
                    format!(
                        "asked for the first {n} samples, but the {which} split in {} has {available}",
                        dir.display()
                    ),
                ))
            })?;
        }
    }
    Ok(())
}

/// Reads `dataset` from `dir` (default `<ctx.data_dir>/<name>`), keeps the first samples as
/// asked, and puts both splits on `ctx.device`.
pub fn load_image_dataset(
    dataset: ImageDataset,
    cfg: &ImageDatasetConfig,
    params: &Params,
    ctx: &DataContext,
) -> Result<FederatedData> {
    let dir = cfg.dir.clone().unwrap_or_else(|| dataset.default_dir(&ctx.data_dir));
    if cfg.verify {
        integrity::check(&dir)?;
    }
    let mut raw = dataset.read(&dir)?;
    keep_first_samples(&mut raw, cfg.train_samples, cfg.test_samples, params, &dir)?;
    let norm = |choice: NormalizationChoice| match choice {
        NormalizationChoice::DatasetStats => dataset.normalization(),
        NormalizationChoice::Half => {
            let channels = dataset.input_shape()[0] as usize;
            Normalization { mean: &HALVES[..channels], std: &HALVES[..channels] }
        }
    };
    let test = raw.test.to_dataset(norm(cfg.test_normalization.unwrap_or(cfg.normalization)), ctx.device);
    if cfg.train_includes_test {
        raw.train.append(&raw.test);
    }
    Ok(FederatedData {
        train: raw.train.to_dataset(norm(cfg.normalization), ctx.device),
        test,
        spec: DataSpec {
            input_shape: dataset.input_shape().to_vec(),
            classes: dataset.classes() as i64,
            vocab_size: None,
        },
        natural_partition: None,
    })
}

fn build_simple(dataset: ImageDataset, params: &Params, ctx: &DataContext) -> Result<FederatedData> {
    let cfg: ImageDatasetConfig = params.parse()?;
    load_image_dataset(dataset, &cfg, params, ctx)
}

inventory::submit! {
    Component {
        name: "mnist",
        summary: "MNIST digits, 60k/10k 28x28 (IDX files in <data_dir>/mnist; params dir, train_samples, test_samples)",
        paper: "LeCun et al., Gradient-based learning applied to document recognition, Proc. IEEE 1998",
        defaults: defaults_of::<ImageDatasetConfig>,
        build: Builder::Dataset(|p, ctx| build_simple(ImageDataset::Mnist, p, ctx)),
        origin: module_path!(),
    }
}

inventory::submit! {
    Component {
        name: "fashion-mnist",
        summary: "Fashion-MNIST, 60k/10k 28x28 (IDX files in <data_dir>/fashion-mnist; params dir, train_samples, test_samples)",
        paper: "Xiao et al., Fashion-MNIST: a novel image dataset for benchmarking machine learning algorithms, arXiv:1708.07747",
        defaults: defaults_of::<ImageDatasetConfig>,
        build: Builder::Dataset(|p, ctx| build_simple(ImageDataset::FashionMnist, p, ctx)),
        origin: module_path!(),
    }
}

inventory::submit! {
    Component {
        name: "cifar10",
        summary: "CIFAR-10, 50k/10k 32x32 RGB (binary version in <data_dir>/cifar10; params dir, train_samples, test_samples)",
        paper: "Krizhevsky, Learning multiple layers of features from tiny images, 2009",
        defaults: defaults_of::<ImageDatasetConfig>,
        build: Builder::Dataset(|p, ctx| build_simple(ImageDataset::Cifar10, p, ctx)),
        origin: module_path!(),
    }
}

inventory::submit! {
    Component {
        name: "tiny-imagenet",
        summary: "Tiny-ImageNet-200, 100k/10k 64x64 RGB in 200 classes, the val split as test (tiny-imagenet-200.zip \
                  unzipped in <data_dir>/tiny-imagenet, JPEGs decoded once into cache-*.bin; params dir, train_samples, \
                  test_samples)",
        paper: "Le and Yang, Tiny ImageNet Visual Recognition Challenge, CS231N 2015",
        defaults: defaults_of::<ImageDatasetConfig>,
        build: Builder::Dataset(|p, ctx| build_simple(ImageDataset::TinyImageNet, p, ctx)),
        origin: module_path!(),
    }
}

inventory::submit! {
    Component {
        name: "cifar100",
        summary: "CIFAR-100, 50k/10k 32x32 RGB (binary version in <data_dir>/cifar100; params dir, train_samples, test_samples, labels)",
        paper: "Krizhevsky, Learning multiple layers of features from tiny images, 2009",
        defaults: defaults_of::<Cifar100Config>,
        build: Builder::Dataset(|p, ctx| {
            let cfg: Cifar100Config = p.parse()?;
            let simple = ImageDatasetConfig {
                dir: cfg.dir,
                train_samples: cfg.train_samples,
                test_samples: cfg.test_samples,
                normalization: cfg.normalization,
                test_normalization: cfg.test_normalization,
                train_includes_test: cfg.train_includes_test,
                verify: cfg.verify,
            };
            load_image_dataset(ImageDataset::Cifar100(cfg.labels), &simple, p, ctx)
        }),
        origin: module_path!(),
    }
}
