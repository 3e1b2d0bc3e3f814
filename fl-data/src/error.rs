//! The error type of `fl-data`: every message names the file (or command) involved and what
//! was expected of it, so that a user can fix a broken dataset directory without reading code.
//! Component constructors convert it into [`fl_core::Error`].

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
    #[error("{}: {source}", .path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// An external command (npm, apt-get, dpkg, curl) failed or could not be started.
    #[error("`{command}` {what}{}", if .stderr.trim().is_empty() { String::new() } else { format!(":\n{}", .stderr.trim_end()) })]
    Command { command: String, what: String, stderr: String },
    /// A downloaded file whose SHA-256 differs from the recorded one.
    #[error("{}: SHA-256 is {actual}, expected {expected}", .path.display())]
    Checksum { path: PathBuf, expected: String, actual: String },
    /// A request that cannot be served (unknown dataset, a fetch that cannot proceed, ...).
    #[error("{0}")]
    Invalid(String),
    /// A configuration value the data cannot satisfy (more samples asked for than a split
    /// has): the key within the dataset's section and what is wrong.
    #[error(transparent)]
    Key(#[from] fl_core::InvalidKey),
}

impl DataError {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        DataError::Io { path: path.as_ref().to_path_buf(), source }
    }

    pub fn format(path: impl AsRef<Path>, expected: impl Into<String>, found: impl Into<String>) -> Self {
        DataError::Format { path: path.as_ref().to_path_buf(), expected: expected.into(), found: found.into() }
    }
}

impl From<DataError> for fl_core::Error {
    fn from(e: DataError) -> Self {
        match e {
            DataError::Io { path, source } => fl_core::Error::io(path, source),
            other => fl_core::Error::invalid(other.to_string()),
        }
    }
}
