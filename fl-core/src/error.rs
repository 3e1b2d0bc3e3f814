//! The error type of `fl-core`: each message names the operation and the offending value.

use crate::component_kind::ComponentKind;

/// Result alias used throughout `fl-core` and by component constructors.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `fl-core`: configuration, registration, contract
/// violations, files and libtorch.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value that is missing, mistyped or out of range.
    #[error("{file}: key `{key}`: {message}")]
    Config {
        /// The experiment file (or "method `…`" for a value from a method's preset).
        file: String,
        /// The key's path in the file, e.g. `scheduler.rounds`.
        key: String,
        /// What is wrong with the value.
        message: String,
    },
    /// A component name that nothing registered.
    #[error("{file}: key `{key}`: unknown {kind} `{name}`; registered {kind}s, nearest first: {}", .valid.join(", "))]
    UnknownComponent {
        /// The experiment file.
        file: String,
        /// The key that names the component, e.g. `aggregator.name`.
        key: String,
        /// The kind of component looked up.
        kind: ComponentKind,
        /// The unknown name.
        name: String,
        /// The registered names of that kind, nearest to `name` first.
        valid: Vec<String>,
    },
    /// Two registrations with the same kind and name.
    #[error("duplicate {kind} `{name}` registered (by {first} and {second})")]
    DuplicateComponent {
        /// The kind both registrations have.
        kind: ComponentKind,
        /// The name both registrations have.
        name: String,
        /// `module_path!()` of one registration.
        first: &'static str,
        /// `module_path!()` of the other.
        second: &'static str,
    },
    /// An argument that violates a documented contract (shapes, indices, counts).
    #[error("{0}")]
    Invalid(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An error libtorch reported.
    #[error(transparent)]
    Torch(#[from] tch::TchError),
}

impl Error {
    /// An [`Error::Invalid`] with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    /// An [`Error::Io`] on `path`.
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().display().to_string(), source }
    }
}

/// A configuration key whose value is out of range: the key within the component's section
/// and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct InvalidKey {
    /// The key's path within the section, e.g. `lr` or `split.cut`.
    pub key: String,
    /// What is wrong with the value, e.g. "expected a positive number, got 0".
    pub message: String,
}

impl InvalidKey {
    /// The error for `key`, saying `message`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        InvalidKey { key: key.into(), message: message.into() }
    }
}
