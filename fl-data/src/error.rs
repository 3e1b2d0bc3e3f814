//! The error type of `fl-data`: every message names the file (or command) involved and what
//! was expected of it, so that a user can fix a broken dataset directory without reading code.
//! Component constructors convert it into [`fl_core::Error::Data`], which keeps it whole:
//! `downcast_ref::<DataError>()` recovers it.

use std::path::{Path, PathBuf};

/// Result alias of this crate's readers, fetchers and `info`.
pub type Result<T, E = DataError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file exists but its contents do not follow the format.
    #[error("{}: expected {expected}, found {found}", .path.display())]
    Format { path: PathBuf, expected: String, found: String },
    /// A dataset's files are not where the loader looked.
    #[error("{dataset}: {missing} not found (looked in {}); {hint}", .looked_in.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" and "))]
    Missing { dataset: String, missing: String, looked_in: Vec<PathBuf>, hint: String },
    /// A file could not be read or written.
    /// The cause is part of the message and not a `source()`, so that a printed chain (`{:#}`)
    /// does not say it twice.
    #[error("{}: {cause}", .path.display())]
    Io { path: PathBuf, cause: std::io::Error },
    /// An external command (npm, apt-get, dpkg, curl) failed or could not be started.
    #[error("`{command}` {what}{}", if .stderr.trim().is_empty() { String::new() } else { format!(":\n{}", .stderr.trim_end()) })]
    Command { command: String, what: String, stderr: String },
    /// A downloaded file whose SHA-256 differs from the recorded one.
    #[error("{}: SHA-256 is {actual}, expected {expected}", .path.display())]
    Checksum { path: PathBuf, expected: String, actual: String },
    /// A dataset file whose SHA-256 is not the one its directory's `SHA256SUMS` records.
    #[error(
        "{}: the file was altered: its SHA-256 is {actual}, {} records {expected}; fetch the dataset again, \
         or set `verify = false` in [dataset] to use the files as they are",
        .path.display(),
        .sums.display()
    )]
    Altered { path: PathBuf, expected: String, actual: String, sums: PathBuf },
    /// A dataset name outside the known ones.
    #[error("unknown dataset `{name}`; known datasets: {}", .known.join(", "))]
    UnknownDataset {
        /// The name asked for.
        name: String,
        /// Every dataset name this crate knows ([`crate::DATASET_NAMES`]).
        known: &'static [&'static str],
    },
    /// A CIFAR fetch asked for another dataset.
    #[error("{dataset} is not a CIFAR dataset")]
    NotCifar {
        /// The dataset's name.
        dataset: &'static str,
    },
    /// `apt-get download` failed, and so did the `apt-get update` run before a retry.
    #[error("{download}\nthen refreshing the package lists failed too: {update}")]
    AptUpdateFailed {
        /// The download's failure.
        download: Box<DataError>,
        /// The update's failure.
        update: Box<DataError>,
    },
    /// More files of a split fail to decode than its `max_bad_fraction` allows.
    #[error(
        "{what}: {bad} of {total} files do not decode, more than max_bad_fraction = {max_bad_fraction} allows \
         ({allowed}); the first: {first}"
    )]
    TooManyUndecodable {
        /// The dataset and split, e.g. `imagenet train`.
        what: String,
        /// The failures found (decoding stops once they exceed the allowance).
        bad: usize,
        /// The files of the split.
        total: usize,
        /// `max_bad_fraction`.
        max_bad_fraction: f64,
        /// The failures allowed: `⌊max_bad_fraction × total⌋`.
        allowed: usize,
        /// The failure of the first file in reading order among those found.
        first: Box<DataError>,
    },
    /// More samples asked for than a split holds.
    #[error("{split}: asked for the first {asked} samples, only {have} exist")]
    TooFewSamples {
        /// The split (and its source), e.g. `train`.
        split: String,
        /// The samples asked for.
        asked: usize,
        /// The samples the split holds.
        have: usize,
    },
    /// Labels a partitioner cannot split among the clients as asked.
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// A configuration value the data cannot satisfy (more samples asked for than a split
    /// has): the key within the dataset's section and what is wrong.
    #[error(transparent)]
    Key(#[from] fl_core::InvalidKey),
}

impl DataError {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        DataError::Io { path: path.as_ref().to_path_buf(), cause: source }
    }

    pub fn format(path: impl AsRef<Path>, expected: impl Into<String>, found: impl Into<String>) -> Self {
        DataError::Format { path: path.as_ref().to_path_buf(), expected: expected.into(), found: found.into() }
    }
}

impl From<DataError> for fl_core::Error {
    fn from(e: DataError) -> Self {
        fl_core::Error::data(e)
    }
}

/// Labels a partitioner cannot split among the clients as asked: the partitioner's name and
/// the counts that do not fit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PartitionError {
    /// No clients to split among.
    #[error("{partitioner} partition: needs at least one client")]
    NoClients {
        /// The partitioner, e.g. `iid`.
        partitioner: &'static str,
    },
    /// No classes.
    #[error("{partitioner} partition: needs at least one class, got {classes}")]
    NoClasses {
        /// The partitioner.
        partitioner: &'static str,
        /// The number of classes given.
        classes: i64,
    },
    /// A label outside `0..classes`.
    #[error("{partitioner} partition: label {label} of sample {sample} is outside 0..{classes}")]
    LabelOutOfRange {
        /// The partitioner.
        partitioner: &'static str,
        /// The label.
        label: i64,
        /// The sample's index.
        sample: usize,
        /// The number of classes.
        classes: i64,
    },
    /// More clients than samples (each client needs one).
    #[error("iid partition: {clients} clients but only {samples} samples; each client needs one")]
    MoreClientsThanSamples {
        /// The number of clients.
        clients: usize,
        /// The number of samples.
        samples: usize,
    },
    /// More shards than samples.
    #[error(
        "shards partition: {clients} clients x {per_client} shards_per_client = {} shards, but only {samples} samples",
        .clients * .per_client
    )]
    MoreShardsThanSamples {
        /// The number of clients.
        clients: usize,
        /// `shards_per_client`.
        per_client: usize,
        /// The number of samples.
        samples: usize,
    },
    /// Fewer samples than `min_samples` for every client.
    #[error(
        "dirichlet partition: min_samples = {min_samples} for each of {clients} clients needs {} samples, only \
         {samples} exist",
        .min_samples * .clients
    )]
    TooFewForMinSamples {
        /// `min_samples`.
        min_samples: usize,
        /// The number of clients.
        clients: usize,
        /// The number of samples.
        samples: usize,
    },
    /// A Dirichlet concentration the Gamma distribution rejects.
    #[error("dirichlet partition: alpha = {alpha}: expected a positive number")]
    Alpha {
        /// `alpha`.
        alpha: f64,
    },
    /// No draw met `min_samples` within `max_draws`.
    #[error(
        "dirichlet partition (alpha = {alpha}, {clients} clients, {samples} samples): after {draws} draws the \
         smallest client still held fewer than min_samples = {min_samples} samples (best draw: {best}); raise alpha, \
         lower min_samples or use fewer clients"
    )]
    NoDrawMeetsMinSamples {
        /// `alpha`.
        alpha: f64,
        /// The number of clients.
        clients: usize,
        /// The number of samples.
        samples: usize,
        /// `max_draws`.
        draws: usize,
        /// `min_samples`.
        min_samples: usize,
        /// The smallest client's samples in the best draw.
        best: usize,
    },
    /// Client weights for another number of clients than the experiment's.
    #[error("dirichlet partition: client_weights: {given} weights, the experiment has {clients} clients")]
    WeightsClients {
        /// The weights given.
        given: usize,
        /// The experiment's clients.
        clients: usize,
    },
    /// Recorded counts for another number of clients than the experiment's.
    #[error("dirichlet partition: counts: records {recorded} clients, the experiment has {clients}")]
    CountsClients {
        /// The clients the counts record.
        recorded: usize,
        /// The experiment's clients.
        clients: usize,
    },
    /// A recorded label outside `0..classes`.
    #[error("dirichlet partition: counts: label {label} is outside 0..{classes}")]
    CountsLabel {
        /// The label.
        label: u64,
        /// The number of classes.
        classes: i64,
    },
    /// A label with samples that the recorded counts give to no client.
    #[error("dirichlet partition: counts: no client holds label {label}, which has {samples} samples")]
    CountsUnheld {
        /// The label.
        label: usize,
        /// Its samples in the pool.
        samples: u64,
    },
}

impl From<PartitionError> for fl_core::Error {
    fn from(e: PartitionError) -> Self {
        DataError::Partition(e).into()
    }
}

#[cfg(test)]
mod tests {
    use fl_core::Partitioner;
    use fl_core::rng::Rng;
    use rand::SeedableRng;

    use super::*;
    use crate::partition::Iid;

    /// The `DataError` inside `e`, which must be an [`fl_core::Error::Data`].
    fn data_error(e: &fl_core::Error) -> &DataError {
        match e {
            fl_core::Error::Data(inner) => inner.downcast_ref::<DataError>().expect("a DataError inside"),
            other => panic!("expected fl_core::Error::Data, got {other:?}"),
        }
    }

    #[test]
    fn a_data_error_survives_conversion_into_fl_core_error() {
        let original = crate::catalog::unknown_dataset("imagenet-21k");
        let message = original.to_string();
        let converted = fl_core::Error::from(original);
        assert_eq!(converted.to_string(), message);
        assert!(matches!(data_error(&converted), DataError::UnknownDataset { name, .. } if name == "imagenet-21k"));

        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        let converted = fl_core::Error::from(DataError::io("/data/mnist/train-labels", missing));
        let DataError::Io { path, cause: source } = data_error(&converted) else { panic!("{converted:?}") };
        assert_eq!((path.to_str(), source.kind()), (Some("/data/mnist/train-labels"), std::io::ErrorKind::NotFound));
    }

    #[test]
    fn a_partitioners_error_is_a_data_error_inside_fl_core_error() {
        let labels: Vec<i64> = (0..30).map(|i| i % 3).collect();
        let err = Iid.partition(&labels, 3, 31, &mut Rng::seed_from_u64(0)).unwrap_err();
        assert!(matches!(
            data_error(&err),
            DataError::Partition(PartitionError::MoreClientsThanSamples { clients: 31, samples: 30 })
        ));
        assert_eq!(err.to_string(), "iid partition: 31 clients but only 30 samples; each client needs one");
    }
}
