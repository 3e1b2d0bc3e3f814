//! The error type of `fl-core`: each message names the operation and the offending value.

use crate::component_kind::ComponentKind;

/// Result alias used throughout `fl-core` and by component constructors.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value that is missing, mistyped or out of range.
    #[error("{file}: key `{key}`: {message}")]
    Config { file: String, key: String, message: String },
    /// A component name that nothing registered.
    #[error("{file}: key `{key}`: unknown {kind} `{name}`; registered {kind}s, nearest first: {}", .valid.join(", "))]
    UnknownComponent { file: String, key: String, kind: ComponentKind, name: String, valid: Vec<String> },
    /// Two registrations with the same kind and name.
    #[error("duplicate {kind} `{name}` registered (by {first} and {second})")]
    DuplicateComponent { kind: ComponentKind, name: String, first: &'static str, second: &'static str },
    /// An argument that violates a documented contract (shapes, indices, counts).
    #[error("{0}")]
    Invalid(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(transparent)]
    Torch(#[from] tch::TchError),
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().display().to_string(), source }
    }
}
