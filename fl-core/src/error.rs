//! The error types of `fl-core`: [`Error`], which every fallible function returns, and the
//! typed errors of each area it wraps (registration, the engine, trainers, models, shapes).
//! Each message names the operation and the offending value.
//!
//! A variant that wraps a *cause* (a failed job's, the TOML serialiser's) returns it from
//! `source()` and does not repeat its message; print an error with `{:#}` (as the `fl` binary
//! does, through `anyhow`) to read the whole chain, e.g. "job 3 of client 1: its cohort
//! failed: sgd: the client has no samples".

use std::sync::Arc;

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
    /// Two registrations under one name: the registry refuses to build.
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    /// A configuration value out of range where no file names it (a component or a setup
    /// built in code): the key, under its section, and what is wrong.
    #[error(transparent)]
    Key(InvalidKey),
    /// A scheduler, an aggregator, the setup or a job broke the engine's contract.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A cohort a trainer cannot train.
    #[error(transparent)]
    Trainer(#[from] TrainerError),
    /// A model that cannot be built for the data (or the configuration) it is given.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Parameters, a mask or unit groups that do not fit a model's structure.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// An error of a dataset or a partitioner, kept whole: `fl-data`'s are
    /// `fl_data::DataError`s, recovered with `downcast_ref`.
    #[error(transparent)]
    Data(Box<dyn std::error::Error + Send + Sync>),
    /// A component's own error that no variant above describes (a plugin's scheduler,
    /// aggregator or mask policy that cannot go on): the component and what went wrong.
    #[error("{component}: {message}")]
    Component {
        /// The component's registered name, e.g. `ram-fed`.
        component: String,
        /// What went wrong, e.g. "update from client 7 of 5".
        message: String,
    },
    /// A component that cannot save its state for a checkpoint (see [`crate::state`]).
    #[error("{component}: keeps state it cannot save in a checkpoint")]
    NotResumable {
        /// The kind of component: scheduler, aggregator or mask policy.
        component: String,
    },
    /// The resolved configuration could not be written as TOML.
    #[error("serialising the resolved config")]
    SerializeConfig(#[source] toml::ser::Error),
    /// A file could not be read or written.
    // The cause is part of the message and not a `source()`, so that a printed chain
    // (`{:#}`) does not say it twice.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's error.
        cause: std::io::Error,
    },
    /// An error libtorch reported.
    #[error(transparent)]
    Torch(#[from] tch::TchError),
}

impl Error {
    /// An [`Error::Io`] on `path`.
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().display().to_string(), cause: source }
    }

    /// An [`Error::Data`] holding `e`.
    pub fn data(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Data(Box::new(e))
    }

    /// An [`Error::Component`] of `component`, saying `message`.
    pub fn component(component: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Component { component: component.into(), message: message.into() }
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

    /// `Ok` when `value` lies in (0, 1] (a share, a fraction, a rate), else the error for `key`.
    pub fn in_unit_interval(key: &str, value: f64) -> Result<(), Self> {
        if value > 0.0 && value <= 1.0 {
            return Ok(());
        }
        Err(InvalidKey::new(key, format!("expected a value in (0, 1], got {value}")))
    }

    /// The same error with its key under `section`: `lr` under `trainer` is `trainer.lr`.
    pub fn under(self, section: &str) -> Self {
        InvalidKey { key: format!("{section}.{}", self.key), message: self.message }
    }
}

/// Two registrations under one name. The registry is built once per process and keeps this
/// error to return it to every caller, hence `Clone`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// Two components of one kind with the same name.
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
    /// Two methods with the same name.
    #[error("duplicate method `{name}` registered (by {first} and {second})")]
    DuplicateMethod {
        /// The name both registrations have.
        name: String,
        /// `module_path!()` of one registration.
        first: &'static str,
        /// `module_path!()` of the other.
        second: &'static str,
    },
}

/// A violation of the engine's contract: by the setup, by a scheduler dispatching or an
/// aggregator aggregating, or a job that gave no outcome.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A setup whose partition has no clients.
    #[error("simulation: no clients")]
    NoClients,
    /// A client whose partition holds no training sample.
    #[error("simulation: client {client} has no training samples")]
    EmptyClient {
        /// The client's index.
        client: usize,
    },
    /// The model's initial parameters do not have the shapes of its structure.
    #[error("model init: parameter shapes differ from the model's structure")]
    InitShapes,
    /// A dispatch to a client index the run does not have.
    #[error("dispatch: no client {client} (have {have})")]
    UnknownClient {
        /// The index dispatched to.
        client: usize,
        /// The number of clients.
        have: usize,
    },
    /// A dispatch to a client still training, without [`crate::JobStart`]'s `concurrent`.
    #[error("dispatch: client {client} is already training")]
    ClientBusy {
        /// The client's index.
        client: usize,
    },
    /// A mask choice the mask policy does not offer.
    #[error("dispatch: mask choice {choice} out of range (the mask policy offers {choices})")]
    MaskChoice {
        /// The choice asked for.
        choice: usize,
        /// The number of choices the policy offers.
        choices: usize,
    },
    /// A [`crate::JobStart`] whose `wait_s` is negative, infinite or NaN.
    #[error("dispatch: wait_s must be finite and ≥ 0, got {wait_s}")]
    WaitSeconds {
        /// The wait asked for.
        wait_s: f64,
    },
    /// A job to start from a global version the server has not made yet.
    #[error("dispatch: start version {version} is newer than the global model's {current}")]
    StartVersionAhead {
        /// The version the job was to start from.
        version: u64,
        /// The global model's version.
        current: u64,
    },
    /// A job to start from parameters whose shapes are not the model's.
    #[error("dispatch: the start model's shapes differ from the model's")]
    StartShapes,
    /// A job longer than a thousandth of the virtual clock's range (1.8·10¹⁰ of its 1.8·10¹³
    /// s): a device too slow for its work, which would pile every later event at the end.
    #[error(
        "client {client}'s job would take {seconds:e} virtual s, beyond the virtual clock's {limit:e} s: \
         check devices.flops_per_s, up_bytes_per_s and down_bytes_per_s"
    )]
    JobDuration {
        /// The client.
        client: usize,
        /// The job's duration, virtual seconds.
        seconds: f64,
        /// The longest job the clock can hold.
        limit: f64,
    },
    /// A mid-training pull at a share of the work outside (0, 1).
    #[error("dispatch_with_pull: share must be in (0, 1), got {share}")]
    PullShare {
        /// The share asked for.
        share: f64,
    },
    /// The global model holds NaN or infinite values after an aggregation of finite updates.
    #[error(
        "the global model diverged: version {version} holds NaN or infinite values (the last finite \
         version is {last_finite}; {rejected} client update(s) rejected as non-finite before). \
         Lower the learning rate or the server's step, or check the aggregator's weights"
    )]
    Diverged {
        /// The version that is not finite.
        version: u64,
        /// The version before it.
        last_finite: u64,
        /// Client updates rejected so far.
        rejected: u64,
    },
    /// As many client updates in a row as the run has clients held NaN or infinite values:
    /// training diverges on the clients.
    #[error(
        "training diverged on the clients: the last {in_a_row} client updates all held NaN or infinite \
         values and were rejected (the global model stays at version {version}, which is finite). \
         Lower the learning rate"
    )]
    UpdatesRejected {
        /// Updates rejected since the last finite one.
        in_a_row: u64,
        /// The global version when the run stopped.
        version: u64,
    },
    /// The run's model copies would not fit its memory budget (see `engine::memory`).
    #[error(
        "the run would hold {} of model copies (a model of {elements} elements, 4 bytes \
         each, for the server, {in_flight} job(s) in flight of which {training} train at once, and \
         {client_copies} copies of per-client state), over the memory budget of {} \
         ({budget_source}): shrink the model, lower the scheduler's concurrency or clients per round, or \
         raise the budget",
        if .needed_gb.is_finite() { format!("about {}", gigabytes(*.needed_gb)) } else { "more than 2^64 bytes".to_string() },
        gigabytes(*.budget_gb)
    )]
    MemoryBudget {
        /// Elements of one model copy, in words.
        elements: String,
        /// Jobs the scheduler may keep in flight.
        in_flight: usize,
        /// Jobs that may train at the same moment.
        training: usize,
        /// Copies of per-client state.
        client_copies: u64,
        /// The estimate, GB.
        needed_gb: f64,
        /// The budget, GB.
        budget_gb: f64,
        /// Where the budget comes from.
        budget_source: &'static str,
    },
    /// A job's memory estimate exceeds its device's memory (`[devices] memory_bytes`).
    #[error(
        "client {client}'s job needs {needed} and its device has {available_gb:.3} GB ([devices] memory_bytes): \
         give it a smaller sub-model (a mask policy that fits jobs to memory), a smaller batch, or more memory"
    )]
    JobMemory {
        /// The client.
        client: usize,
        /// The estimate in words (total and parts).
        needed: String,
        /// The device's memory, GB.
        available_gb: f64,
    },
    /// An aggregator returned parameters whose shapes are not the model's.
    #[error("aggregator returned parameters of the wrong shapes")]
    AggregatedShapes,
    /// A client job that gave no outcome; the cause is its `source`.
    #[error("job {job} of client {client}")]
    JobFailed {
        /// The job's number in the run (in dispatch order).
        job: u64,
        /// The client it trained for.
        client: usize,
        /// Why it gave no outcome.
        source: Box<JobFailure>,
    },
    /// The pack could not evaluate the run's global model; the cause is its `source`.
    #[error("evaluating the global model in the run's pack")]
    Evaluation {
        /// Why it gave no scores.
        source: JobFailure,
    },
    /// A run of a pack panicked while holding one of the pack's locks.
    #[error("run pack: a run panicked while holding the pack's lock")]
    PackPoisoned,
}

/// Why a client job gave no outcome: the cause of [`EngineError::JobFailed`]. Every job of a
/// failed cohort fails with the same cause, hence `Clone` (and the trainer's error in an
/// `Arc`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum JobFailure {
    /// The cohort the job trained in failed; the cause is its `source`.
    #[error("its cohort failed")]
    Cohort(#[source] Box<JobFailure>),
    /// The trainer returned an error.
    #[error(transparent)]
    Training(Arc<Error>),
    /// Training panicked, with this message.
    #[error("{0}")]
    Panicked(String),
    /// Training a cohort merged from several runs of a pack panicked.
    #[error("training a merged cohort panicked")]
    MergedCohortPanicked,
    /// Evaluating the global models of a pack's runs as one cohort panicked.
    #[error("evaluating the global models of a pack's runs panicked")]
    EvaluationPanicked,
    /// The worker thread ended without sending the result.
    #[error("worker thread ended without a result")]
    WorkerLost,
    /// A panic poisoned the lock on the cohort's result.
    #[error("a cohort's result lock is poisoned")]
    ResultPoisoned,
    /// A panic poisoned the lock of the run pack the cohort waited in.
    #[error("the run pack's lock is poisoned")]
    PackPoisoned,
    /// The run pack dropped the cohort without training it.
    #[error("the run pack dropped the cohort")]
    PackDropped,
    /// The cohort waited in a run pack that had nothing to train for it.
    #[error("the run pack has nothing to train for this cohort")]
    PackIdle,
    /// Training ended without an outcome for the job.
    #[error("cohort job {index} has no outcome")]
    NoOutcome {
        /// The job's position in its cohort.
        index: usize,
    },
}

/// A cohort a trainer cannot train, or a failure while training it: the trainer's name and
/// what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum TrainerError {
    /// A cohort without jobs.
    #[error("{trainer}: a cohort needs at least one job")]
    EmptyCohort {
        /// The trainer, e.g. `sgd`.
        trainer: &'static str,
    },
    /// Several jobs for a trainer that trains one at a time.
    #[error("{trainer}: trains cohorts of one job, got {jobs}")]
    OneJobOnly {
        /// The trainer.
        trainer: &'static str,
        /// The number of jobs it was given.
        jobs: usize,
    },
    /// A job whose client has no samples.
    #[error("{trainer}: the client has no samples")]
    NoSamples {
        /// The trainer.
        trainer: &'static str,
    },
    /// A job of a cohort whose model or training set is not the first job's.
    #[error("{trainer}: job {job} of the cohort has another model or training set")]
    MixedCohort {
        /// The trainer.
        trainer: &'static str,
        /// The job's position in the cohort.
        job: usize,
    },
    /// A job of a cohort whose (sub-)model shapes are not the first job's.
    #[error("{trainer}: job {job} of the cohort has (sub-)model shapes {found:?}, the first job {first:?}")]
    CohortShapes {
        /// The trainer.
        trainer: &'static str,
        /// The job's position in the cohort.
        job: usize,
        /// The job's shapes.
        found: Vec<Vec<i64>>,
        /// The first job's shapes.
        first: Vec<Vec<i64>>,
    },
    /// Part of the work of a cohort of several jobs (which train whole jobs only).
    #[error("{trainer}: a cohort of several jobs trains whole jobs only (share 1), got share {share}")]
    PartialCohort {
        /// The trainer.
        trainer: &'static str,
        /// The share of the work asked for.
        share: f64,
    },
    /// A pulled model for a cohort of several jobs (only a cohort of one merges one).
    #[error("{trainer}: only a cohort of one job merges a pulled model, this one has {jobs}")]
    PullIntoCohort {
        /// The trainer.
        trainer: &'static str,
        /// The number of jobs in the cohort.
        jobs: usize,
    },
    /// A pulled model whose shapes are not the job's (sub-)model's.
    #[error("{trainer}: the pulled model's shapes differ from the job's (sub-)model")]
    PulledShapes {
        /// The trainer.
        trainer: &'static str,
    },
    /// The losses could not be read back from the compute device.
    #[error("{trainer}: reading the losses")]
    ReadLosses {
        /// The trainer.
        trainer: &'static str,
        /// libtorch's error.
        source: tch::TchError,
    },
    /// A cohort of one job that gave no outcome.
    #[error("trainer: a cohort of one gave no outcome")]
    NoOutcome,
}

/// A model that cannot be built for the data it is given, or with the configuration it is
/// given: the model's name, what it expected and what it found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Samples of a shape the model's layers cannot take.
    #[error("{model}: unsupported input shape {found:?}; expected {expected}")]
    InputShape {
        /// The model, e.g. `lenet5`.
        model: &'static str,
        /// The shapes it takes, e.g. "[channels, H, W]".
        expected: &'static str,
        /// The data's sample shape.
        found: Vec<i64>,
    },
    /// Data without classes.
    #[error("{model}: need at least one class, got {classes}")]
    NoClasses {
        /// The model.
        model: &'static str,
        /// The data's number of classes.
        classes: i64,
    },
    /// Token ids given to a model of real-valued inputs.
    #[error("{model}: needs real-valued inputs, but the dataset gives token ids (use a text model such as fasttext)")]
    NeedsRealValues {
        /// The model.
        model: &'static str,
    },
    /// Real-valued inputs given to a model of token ids.
    #[error(
        "{model} needs token-id inputs (a text dataset such as agnews); the dataset gives real-valued inputs of shape \
         {found:?}"
    )]
    NeedsTokenIds {
        /// The model.
        model: &'static str,
        /// The data's sample shape.
        found: Vec<i64>,
    },
    /// Token ids over an empty vocabulary.
    #[error("{model}: the vocabulary is empty (vocab_size {vocab_size})")]
    EmptyVocabulary {
        /// The model.
        model: &'static str,
        /// The data's vocabulary size.
        vocab_size: i64,
    },
    /// A configuration value out of range (for a model built in code; a file's values are
    /// checked as the file is read).
    #[error("{model}: {key}")]
    Config {
        /// The model.
        model: &'static str,
        /// The key within the `[model]` section and what is wrong with it.
        key: InvalidKey,
    },
}

/// Parameters, a mask or unit groups that do not fit a model's structure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A parameter set given names and tensors in different numbers.
    #[error("ParamSet::new: {names} names for {tensors} tensors")]
    NameCount {
        /// The number of names.
        names: usize,
        /// The number of tensors.
        tensors: usize,
    },
    /// A structured mask with another number of tensors than the model.
    #[error("structured mask covers {mask} tensors, model has {model}")]
    MaskTensors {
        /// The tensors the mask covers.
        mask: usize,
        /// The model's tensors.
        model: usize,
    },
    /// A structured mask with another number of dimensions than its tensor.
    #[error("structured mask for tensor {tensor}: {mask} dims, tensor has {dims}")]
    MaskRank {
        /// The tensor's position in the structure.
        tensor: usize,
        /// The dimensions the mask gives.
        mask: usize,
        /// The tensor's dimensions.
        dims: usize,
    },
    /// Kept indices that repeat or fall outside their dimension.
    #[error("structured mask for tensor {tensor}, dim {dim}: indices must be unique and in 0..{size}")]
    MaskIndices {
        /// The tensor's position in the structure.
        tensor: usize,
        /// The dimension.
        dim: usize,
        /// The dimension's size.
        size: i64,
    },
    /// A depth window outside the model's blocks, or ending where it has no exit.
    #[error(
        "depth window {start}..{end} with inner exits {inner:?}: the model has {blocks} blocks and early exits after {exits:?}; a window must be non-empty, within 0..{blocks}, end at an exit or at the top, and its inner exits must exist inside it"
    )]
    DepthWindow {
        /// First block of the window.
        start: usize,
        /// One past its last block.
        end: usize,
        /// The early exits asked for inside it.
        inner: Vec<usize>,
        /// Blocks in the model.
        blocks: usize,
        /// Depths with an early exit.
        exits: Vec<usize>,
    },
    /// A mask that drops a classifier tensor and leaves fewer than two tensors.
    #[error("structured mask: the sub-model must keep at least two tensors (it ends in a classifier)")]
    MaskDropsAll,
    /// Kept units for another number of unit groups than the structure has.
    #[error("mask_from_units: {entries} entries for {groups} unit groups")]
    UnitEntries {
        /// The entries given.
        entries: usize,
        /// The structure's unit groups.
        groups: usize,
    },
    /// A width share outside (0, 1].
    #[error("width ratio {ratio}: expected a share of the units in (0, 1]")]
    WidthRatio {
        /// The ratio asked for, as written.
        ratio: String,
    },
    /// A unit outside its group.
    #[error("unit group `{group}`: unit {unit} out of range 0..{units}")]
    UnitOutOfRange {
        /// The group's name.
        group: String,
        /// The unit asked for.
        unit: i64,
        /// The group's number of units.
        units: i64,
    },
    /// Two unit groups indexing one dimension of a tensor.
    #[error("unit group `{group}`: dimension {dim} of `{tensor}` is already indexed by another group")]
    OverlappingGroups {
        /// The second group's name.
        group: String,
        /// The dimension.
        dim: usize,
        /// The tensor's name.
        tensor: String,
    },
}

/// `gb` gigabytes as the message of [`EngineError::MemoryBudget`] prints them: in MB below 1 GB.
fn gigabytes(gb: f64) -> String {
    if gb < 1.0 { format!("{:.1} MB", gb * 1e3) } else { format!("{gb:.1} GB") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_outside_zero_to_one_is_refused_by_its_key() {
        for ok in [1.0, 0.5, f64::MIN_POSITIVE] {
            assert_eq!(InvalidKey::in_unit_interval("mu", ok), Ok(()), "{ok}");
        }
        for bad in [0.0, -0.5, 1.0 + f64::EPSILON, f64::NAN, f64::INFINITY] {
            let err = InvalidKey::in_unit_interval("mu", bad).unwrap_err();
            assert_eq!(err.key, "mu");
            assert_eq!(err.message, format!("expected a value in (0, 1], got {bad}"));
        }
    }
}
