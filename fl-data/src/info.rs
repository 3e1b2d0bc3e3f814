//! What `fl data info NAME` prints: where a dataset is looked for, whether it is there, its
//! split sizes, classes, the training split's samples per class and whether the files match
//! their recorded SHA-256 sums. It reads the files with the same readers and checks as the
//! loaders (so "present" means "loads") but builds no tensors. Tiny-ImageNet and IMDb go through
//! their caches (IMDb's of the default `max_vocab` and `seq_len`): the first `info` builds them.
//! ImageNet is the exception: decoding its 1.3 million JPEGs at some resolution just to count
//! them would take hours and more memory than a machine has, so its `info` lists the files of
//! every class in both splits, checking the layout, and counts them without decoding.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::agnews::{self, AGNEWS, AGNEWS_CLASSES};
use crate::catalog::{ImageDataset, unknown_dataset};
use crate::error::{DataError, Result};
use crate::imagenet::{self, IMAGENET};
use crate::imdb::{self, IMDB, IMDB_CLASSES, ImdbConfig};
use crate::integrity::{self, Integrity};
use crate::synthetic::SyntheticConfig;

/// A dataset's state in a data directory (`fl data info NAME [--json]`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DatasetInfo {
    pub name: String,
    /// Directories the loader tries, in order (empty for generated data).
    pub looked_in: Vec<PathBuf>,
    pub classes: usize,
    pub state: DataState,
}

/// Whether a dataset can be used; as JSON `{"status": "present", "detail": {…}}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", content = "detail", rename_all = "lowercase")]
pub enum DataState {
    /// The files load: split sizes, the training split's samples per class, and how many files
    /// matched their recorded sums (none when no sums are recorded: files placed by hand).
    Present { train: usize, test: usize, train_per_class: Vec<usize>, verified_files: Option<usize> },
    /// Files are missing; the message says which and how to get them.
    Missing(String),
    /// Files are there but do not read; the message says which and why.
    Unreadable(String),
    /// A file is not the one recorded at fetch (its SHA-256 differs); the message says which.
    Altered(String),
    /// Data generated from the run seed; the text describes it.
    Generated(String),
}

/// Describes dataset `name` as found under `data_dir` (its default directory
/// `<data_dir>/<name>`).
pub fn info(name: &str, data_dir: &Path) -> Result<DatasetInfo> {
    if name == "synthetic" {
        let d = SyntheticConfig::default();
        return Ok(DatasetInfo {
            name: name.into(),
            looked_in: Vec::new(),
            classes: d.classes,
            state: DataState::Generated(format!(
                "FedProx Synthetic(alpha, beta), generated from the run seed (defaults: {} devices, dim {}, \
                 lognormal(4, 2) + 50 samples per device, last {}% of each device held out for test)",
                d.devices,
                d.dim,
                d.test_fraction * 100.0
            )),
        });
    }
    if name == AGNEWS {
        let dir = data_dir.join(AGNEWS);
        let state = match integrity::check(&dir).and_then(|i| Ok((agnews::read_agnews(&dir)?, i))) {
            Ok((splits, integrity)) => DataState::Present {
                train: splits.train.len(),
                test: splits.test.len(),
                train_per_class: splits.train.class_counts(),
                verified_files: verified(integrity),
            },
            Err(e) => failed(e),
        };
        let looked_in = agnews::candidates(&dir).to_vec();
        return Ok(DatasetInfo { name: name.into(), looked_in, classes: AGNEWS_CLASSES, state });
    }
    if name == IMAGENET {
        let dir = imagenet::default_dir(data_dir);
        let listed = integrity::check(&dir).and_then(|i| {
            let root = imagenet::locate(&dir)?;
            Ok((imagenet::list(&root, &imagenet::class_dirs(&root)?)?, i))
        });
        let (classes, state) = match listed {
            Ok((listing, integrity)) => (
                listing.wnids.len(),
                DataState::Present {
                    train: listing.train.len(),
                    test: listing.val.len(),
                    train_per_class: listing.train_per_class(),
                    verified_files: verified(integrity),
                },
            ),
            Err(e) => (imagenet::IMAGENET_CLASSES, failed(e)),
        };
        let looked_in = imagenet::candidates(&dir).to_vec();
        return Ok(DatasetInfo { name: name.into(), looked_in, classes, state });
    }
    if name == IMDB {
        let dir = imdb::default_dir(data_dir);
        let defaults = ImdbConfig::default();
        let read = || imdb::load_imdb_ids(&dir, defaults.max_vocab, defaults.seq_len);
        let state = match integrity::check(&dir).and_then(|i| Ok((read()?, i))) {
            Ok((encoded, integrity)) => {
                let mut per_class = vec![0; IMDB_CLASSES];
                for &l in &encoded.train.labels {
                    per_class[l as usize] += 1;
                }
                DataState::Present {
                    train: encoded.train.len(),
                    test: encoded.test.len(),
                    train_per_class: per_class,
                    verified_files: verified(integrity),
                }
            }
            Err(e) => failed(e),
        };
        let looked_in = imdb::candidates(&dir).to_vec();
        return Ok(DatasetInfo { name: name.into(), looked_in, classes: IMDB_CLASSES, state });
    }
    let dataset = ImageDataset::from_name(name).ok_or_else(|| unknown_dataset(name))?;
    let dir = dataset.default_dir(data_dir);
    let classes = dataset.classes();
    let state = match integrity::check(&dir).and_then(|i| Ok((dataset.read(&dir)?, i))) {
        Ok((splits, integrity)) => DataState::Present {
            train: splits.train.len(),
            test: splits.test.len(),
            train_per_class: splits.train.class_counts(classes),
            verified_files: verified(integrity),
        },
        Err(e) => failed(e),
    };
    Ok(DatasetInfo { name: name.into(), looked_in: dataset.looked_in(&dir), classes, state })
}

fn verified(integrity: Integrity) -> Option<usize> {
    match integrity {
        Integrity::Verified { files } => Some(files),
        Integrity::Unrecorded => None,
    }
}

fn failed(e: DataError) -> DataState {
    match e {
        DataError::Missing { .. } => DataState::Missing(e.to_string()),
        DataError::Altered { .. } => DataState::Altered(e.to_string()),
        _ => DataState::Unreadable(e.to_string()),
    }
}

impl fmt::Display for DatasetInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.name)?;
        for dir in &self.looked_in {
            writeln!(f, "  looks in: {}", dir.display())?;
        }
        writeln!(f, "  classes:  {}", self.classes)?;
        match &self.state {
            DataState::Present { train, test, train_per_class, verified_files } => {
                writeln!(f, "  status:   present")?;
                writeln!(f, "  train:    {train} samples")?;
                writeln!(f, "  test:     {test} samples")?;
                match verified_files {
                    Some(n) => writeln!(f, "  checksums: {n} file(s) match their recorded SHA-256")?,
                    None => writeln!(f, "  checksums: none recorded (files placed by hand), not verified")?,
                }
                let per: Vec<String> = train_per_class.iter().enumerate().map(|(c, n)| format!("{c}: {n}")).collect();
                writeln!(f, "  train samples per class: {}", per.join(", "))
            }
            DataState::Missing(msg) => writeln!(f, "  status:   missing\n  {msg}"),
            DataState::Unreadable(msg) => writeln!(f, "  status:   unreadable\n  {msg}"),
            DataState::Altered(msg) => writeln!(f, "  status:   altered\n  {msg}"),
            DataState::Generated(msg) => writeln!(f, "  status:   generated, nothing to fetch\n  {msg}"),
        }
    }
}
