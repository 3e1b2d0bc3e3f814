//! What `fl data info NAME` prints: where a dataset is looked for, whether it is there, its
//! split sizes, classes and the training split's samples per class. It reads the files with
//! the same readers as the loaders (so "present" means "loads") but builds no tensors.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::agnews::{self, AGNEWS, AGNEWS_CLASSES};
use crate::catalog::{ImageDataset, unknown_dataset};
use crate::error::{DataError, Result};
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
    /// The files load: split sizes and the training split's samples per class.
    Present { train: usize, test: usize, train_per_class: Vec<usize> },
    /// Files are missing; the message says which and how to get them.
    Missing(String),
    /// Files are there but do not read; the message says which and why.
    Unreadable(String),
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
        let state = match agnews::read_agnews(&dir) {
            Ok(splits) => DataState::Present {
                train: splits.train.len(),
                test: splits.test.len(),
                train_per_class: splits.train.class_counts(),
            },
            Err(e @ DataError::Missing { .. }) => DataState::Missing(e.to_string()),
            Err(e) => DataState::Unreadable(e.to_string()),
        };
        let looked_in = agnews::candidates(&dir).to_vec();
        return Ok(DatasetInfo { name: name.into(), looked_in, classes: AGNEWS_CLASSES, state });
    }
    let dataset = ImageDataset::from_name(name).ok_or_else(|| unknown_dataset(name))?;
    let dir = dataset.default_dir(data_dir);
    let classes = dataset.classes();
    let state = match dataset.read(&dir) {
        Ok(splits) => DataState::Present {
            train: splits.train.len(),
            test: splits.test.len(),
            train_per_class: splits.train.class_counts(classes),
        },
        Err(e @ DataError::Missing { .. }) => DataState::Missing(e.to_string()),
        Err(e) => DataState::Unreadable(e.to_string()),
    };
    Ok(DatasetInfo { name: name.into(), looked_in: dataset.looked_in(&dir), classes, state })
}

impl fmt::Display for DatasetInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.name)?;
        for dir in &self.looked_in {
            writeln!(f, "  looks in: {}", dir.display())?;
        }
        writeln!(f, "  classes:  {}", self.classes)?;
        match &self.state {
            DataState::Present { train, test, train_per_class } => {
                writeln!(f, "  status:   present")?;
                writeln!(f, "  train:    {train} samples")?;
                writeln!(f, "  test:     {test} samples")?;
                let per: Vec<String> = train_per_class.iter().enumerate().map(|(c, n)| format!("{c}: {n}")).collect();
                writeln!(f, "  train samples per class: {}", per.join(", "))
            }
            DataState::Missing(msg) => writeln!(f, "  status:   missing\n  {msg}"),
            DataState::Unreadable(msg) => writeln!(f, "  status:   unreadable\n  {msg}"),
            DataState::Generated(msg) => writeln!(f, "  status:   generated, nothing to fetch\n  {msg}"),
        }
    }
}
