//! MNIST and Fashion-MNIST as directories of the four official IDX files.
//!
//! Both datasets ship the same four files (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`), each raw or with a `.gz` suffix, of
//! 28x28 grey images with ten classes. This module finds them, reads them with [`crate::idx`]
//! and checks that images and labels agree.

use std::path::Path;

use crate::error::{DataError, Result};
use crate::idx;
use crate::raw::{RawImages, RawSplits};

/// The official file names, in the order train images, train labels, test images, test labels.
pub const IDX_FILES: [&str; 4] =
    ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"];

/// Which of the two IDX datasets (they differ only in name and pixel statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MnistVariant {
    Mnist,
    FashionMnist,
}

impl MnistVariant {
    /// The dataset's name in the registry, the data directory and `fl data fetch`.
    pub fn name(self) -> &'static str {
        match self {
            MnistVariant::Mnist => "mnist",
            MnistVariant::FashionMnist => "fashion-mnist",
        }
    }
}

/// Reads the train and test splits from `dir`.
pub fn read_mnist(dir: &Path, variant: MnistVariant) -> Result<RawSplits> {
    let name = variant.name();
    let absent: Vec<&str> = IDX_FILES.iter().copied().filter(|f| idx::find(dir, f).is_none()).collect();
    if !absent.is_empty() {
        return Err(DataError::Missing {
            dataset: name.into(),
            missing: absent.iter().map(|f| format!("{f}[.gz]")).collect::<Vec<_>>().join(", "),
            looked_in: vec![dir.to_path_buf()],
            hint: format!(
                "run `fl data fetch {name}` to download it into the default data directory, \
                 or point `dir` at a directory holding the four official IDX files"
            ),
        });
    }
    let path = |f: &str| idx::find(dir, f).expect("checked above");
    Ok(RawSplits {
        train: read_split(&path(IDX_FILES[0]), &path(IDX_FILES[1]))?,
        test: read_split(&path(IDX_FILES[2]), &path(IDX_FILES[3]))?,
    })
}

/// Reads one split's image and label files and checks that they belong together.
fn read_split(images: &Path, labels: &Path) -> Result<RawImages> {
    let im = idx::read_images(images)?;
    if (im.rows, im.cols) != (28, 28) {
        return Err(DataError::format(images, "28x28 images", format!("{}x{}", im.rows, im.cols)));
    }
    let labels_v = idx::read_labels(labels)?;
    if labels_v.len() != im.count {
        return Err(DataError::format(
            labels,
            format!("{} labels, one per image of {}", im.count, images.display()),
            labels_v.len().to_string(),
        ));
    }
    if let Some((i, &l)) = labels_v.iter().enumerate().find(|(_, l)| **l >= 10) {
        return Err(DataError::format(labels, "labels in 0..10", format!("{l} at position {i}")));
    }
    let labels = labels_v.into_iter().map(u16::from).collect();
    Ok(RawImages { pixels: im.pixels, labels, channels: 1, rows: 28, cols: 28 })
}
