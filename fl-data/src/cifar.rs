//! Readers of the *binary version* of CIFAR-10 and CIFAR-100 (Krizhevsky 2009), the layout
//! the official site ships in `cifar-10-binary.tar.gz` and `cifar-100-binary.tar.gz`.
//!
//! A CIFAR-10 file is a sequence of 3,073-byte records: 1 label byte (0..10), then 3,072 pixel
//! bytes: the red plane, the green plane, the blue plane, each 32x32 row-major. CIFAR-100
//! records have 3,074 bytes: a coarse label (0..20), a fine label (0..100), then the same
//! pixels. The planes already are the `[C, H, W]` layout of a tensor, so reading is a copy.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{DataError, Result};
use crate::raw::{RawImages, RawSplits};

/// Pixel bytes per record: 3 planes of 32x32.
pub const PIXELS: usize = 3 * 32 * 32;
/// The CIFAR-10 training files, read in this order.
pub const CIFAR10_TRAIN: [&str; 5] =
    ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"];
pub const CIFAR10_TEST: &str = "test_batch.bin";
/// The directory the official CIFAR-10 archive extracts to.
pub const CIFAR10_SUBDIR: &str = "cifar-10-batches-bin";
pub const CIFAR100_TRAIN: &str = "train.bin";
pub const CIFAR100_TEST: &str = "test.bin";
/// The directory the official CIFAR-100 archive extracts to.
pub const CIFAR100_SUBDIR: &str = "cifar-100-binary";
/// Official download pages and archives (used by the fetcher and in error messages).
pub const CIFAR_PAGE: &str = "https://www.cs.toronto.edu/~kriz/cifar.html";
pub const CIFAR10_URL: &str = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
pub const CIFAR100_URL: &str = "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz";

/// Which CIFAR-100 label to use as the class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cifar100Labels {
    /// The 100 fine classes.
    #[default]
    Fine,
    /// The 20 superclasses.
    Coarse,
}

impl Cifar100Labels {
    pub fn classes(self) -> usize {
        match self {
            Cifar100Labels::Fine => 100,
            Cifar100Labels::Coarse => 20,
        }
    }
}

/// Where a CIFAR dataset's files are: `dir` itself or the archive's subdirectory under it.
/// Returns the candidates in the order they are tried.
pub fn candidates(dir: &Path, subdir: &str) -> [PathBuf; 2] {
    [dir.to_path_buf(), dir.join(subdir)]
}

/// The first candidate directory that holds every one of `files`.
fn locate(dir: &Path, subdir: &str, files: &[&str]) -> Option<PathBuf> {
    candidates(dir, subdir).into_iter().find(|d| files.iter().all(|f| d.join(f).is_file()))
}

fn missing(dataset: &str, dir: &Path, subdir: &str, files: &[&str], archive: &str) -> DataError {
    let looked_in = candidates(dir, subdir).to_vec();
    let absent: Vec<&str> = files.iter().copied().filter(|f| !looked_in.iter().any(|d| d.join(f).is_file())).collect();
    let missing =
        if absent.is_empty() { format!("a directory holding all of {}", files.join(", ")) } else { absent.join(", ") };
    DataError::Missing {
        dataset: dataset.into(),
        missing,
        looked_in,
        hint: format!(
            "download the binary version ({archive}) from {CIFAR_PAGE} and extract it into {}, \
             or run `fl data fetch {dataset}` on a machine with internet access",
            dir.display()
        ),
    }
}

/// Splits a file into records of `bounds.len()` label bytes and `PIXELS` pixel bytes. Label
/// byte `i` must be below `bounds[i]` (names say which label for the error); label byte `keep`
/// becomes the class.
fn read_records(path: &Path, bounds: &[(&str, usize)], keep: usize) -> Result<RawImages> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let label_bytes = bounds.len();
    let record = label_bytes + PIXELS;
    if bytes.len() % record != 0 {
        return Err(DataError::format(
            path,
            format!("a whole number of {record}-byte records ({label_bytes} label byte(s) + {PIXELS} pixel bytes)"),
            format!(
                "{} bytes ({} records and {} bytes left over: truncated?)",
                bytes.len(),
                bytes.len() / record,
                bytes.len() % record
            ),
        ));
    }
    let n = bytes.len() / record;
    let mut labels = Vec::with_capacity(n);
    let mut pixels = Vec::with_capacity(n * PIXELS);
    for (i, r) in bytes.chunks_exact(record).enumerate() {
        for (&(name, classes), &label) in bounds.iter().zip(r) {
            if usize::from(label) >= classes {
                return Err(DataError::format(
                    path,
                    format!("{name} label bytes in 0..{classes}"),
                    format!("{label} in record {i} (is this the right dataset?)"),
                ));
            }
        }
        labels.push(u16::from(r[keep]));
        pixels.extend_from_slice(&r[label_bytes..]);
    }
    Ok(RawImages { pixels, labels, channels: 3, rows: 32, cols: 32 })
}

/// Reads one CIFAR-10 binary file.
pub fn read_cifar10_file(path: &Path) -> Result<RawImages> {
    read_records(path, &[("CIFAR-10", 10)], 0)
}

/// Reads one CIFAR-100 binary file, keeping the fine or the coarse label (both are checked).
pub fn read_cifar100_file(path: &Path, labels: Cifar100Labels) -> Result<RawImages> {
    let keep = match labels {
        Cifar100Labels::Coarse => 0,
        Cifar100Labels::Fine => 1,
    };
    read_records(path, &[("CIFAR-100 coarse", 20), ("CIFAR-100 fine", 100)], keep)
}

/// Reads CIFAR-10's five training files and its test file from `dir` (or
/// `dir/cifar-10-batches-bin`).
pub fn read_cifar10(dir: &Path) -> Result<RawSplits> {
    let mut files: Vec<&str> = CIFAR10_TRAIN.to_vec();
    files.push(CIFAR10_TEST);
    let at = locate(dir, CIFAR10_SUBDIR, &files)
        .ok_or_else(|| missing("cifar10", dir, CIFAR10_SUBDIR, &files, "cifar-10-binary.tar.gz"))?;
    let mut train = read_cifar10_file(&at.join(CIFAR10_TRAIN[0]))?;
    for f in &CIFAR10_TRAIN[1..] {
        let more = read_cifar10_file(&at.join(f))?;
        train.labels.extend_from_slice(&more.labels);
        train.pixels.extend_from_slice(&more.pixels);
    }
    let test = read_cifar10_file(&at.join(CIFAR10_TEST))?;
    Ok(RawSplits { train, test })
}

/// Reads CIFAR-100's `train.bin` and `test.bin` from `dir` (or `dir/cifar-100-binary`).
pub fn read_cifar100(dir: &Path, labels: Cifar100Labels) -> Result<RawSplits> {
    let files = [CIFAR100_TRAIN, CIFAR100_TEST];
    let at = locate(dir, CIFAR100_SUBDIR, &files)
        .ok_or_else(|| missing("cifar100", dir, CIFAR100_SUBDIR, &files, "cifar-100-binary.tar.gz"))?;
    Ok(RawSplits {
        train: read_cifar100_file(&at.join(CIFAR100_TRAIN), labels)?,
        test: read_cifar100_file(&at.join(CIFAR100_TEST), labels)?,
    })
}
