//! The component registry: every plugin registers its components with `inventory`.
//!
//! A component has a kind, a name, a one-line summary, the paper it comes from, its
//! parameters with defaults (as a TOML table), and a constructor from its TOML table. A
//! [`Method`] is a preset naming a component of each kind. Names are unique per kind; an
//! unknown name is an error listing the registered names, nearest first.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tch::Device;

use crate::aggregator::Aggregator;
pub use crate::component_kind::ComponentKind;
use crate::data::{DataSpec, FederatedData, Partitioner};
use crate::error::{Error, InvalidKey, RegistrationError, Result};
use crate::from_config::FromConfig;
use crate::mask_policy::MaskPolicy;
use crate::model::Model;
use crate::scheduler::Scheduler;
use crate::staleness::StalenessFn;
use crate::trainer::LocalTrainer;

/// What a dataset constructor gets besides its parameters.
#[derive(Debug, Clone)]
pub struct DataContext {
    /// Where datasets are stored on disk (the run option `data_dir`).
    pub data_dir: PathBuf,
    /// The compute device the samples are to be placed on.
    pub device: Device,
    /// The experiment's seed, for datasets that are generated (FedProx's Synthetic).
    pub seed: u64,
}

/// A component's constructor; the variant fixes its kind.
#[derive(Clone, Copy)]
pub enum Builder {
    /// Loads a dataset from its section and the run's data directory, device and seed.
    Dataset(fn(&Params, &DataContext) -> Result<FederatedData>),
    /// Builds a partitioner from its section.
    Partitioner(fn(&Params) -> Result<Box<dyn Partitioner>>),
    /// Builds a model from its section and the dataset's input shape and classes.
    Model(fn(&Params, &DataSpec) -> Result<Arc<dyn Model>>),
    /// Builds a local trainer from its section.
    Trainer(fn(&Params) -> Result<Arc<dyn LocalTrainer>>),
    /// Builds a mask policy from its section.
    MaskPolicy(fn(&Params) -> Result<Box<dyn MaskPolicy>>),
    /// Builds a scheduler from its section.
    Scheduler(fn(&Params) -> Result<Box<dyn Scheduler>>),
    /// Builds an aggregator from its section.
    Aggregator(fn(&Params) -> Result<Box<dyn Aggregator>>),
    /// Builds a staleness function from its section.
    Staleness(fn(&Params) -> Result<Box<dyn StalenessFn>>),
}

impl Builder {
    /// The kind of component this constructor builds.
    pub fn kind(&self) -> ComponentKind {
        match self {
            Builder::Dataset(_) => ComponentKind::Dataset,
            Builder::Partitioner(_) => ComponentKind::Partitioner,
            Builder::Model(_) => ComponentKind::Model,
            Builder::Trainer(_) => ComponentKind::Trainer,
            Builder::MaskPolicy(_) => ComponentKind::MaskPolicy,
            Builder::Scheduler(_) => ComponentKind::Scheduler,
            Builder::Aggregator(_) => ComponentKind::Aggregator,
            Builder::Staleness(_) => ComponentKind::Staleness,
        }
    }
}

/// One registered component. Submit with `inventory::submit! { Component { .. } }`.
pub struct Component {
    /// The name an experiment file selects it by (`name = "…"` in its section), unique per kind.
    pub name: &'static str,
    /// One line saying what it does, as `fl list` prints it.
    pub summary: &'static str,
    /// Citation of the paper that defines it ("" for generic building blocks).
    pub paper: &'static str,
    /// The parameters and their defaults (usually [`defaults_of`] of the config struct).
    pub defaults: fn() -> toml::Table,
    /// The constructor; its variant is the component's kind.
    pub build: Builder,
    /// `module_path!()` of the registration, to name both sides of a duplicate.
    pub origin: &'static str,
}

inventory::collect!(Component);

/// A preset: an experiment-file fragment naming a component (and parameters) for some kinds.
/// The experiment file can still override any of them.
pub struct Method {
    /// The name an experiment file selects it by (`method = "…"`), unique among methods.
    pub name: &'static str,
    /// One line saying what it is, as `fl list` prints it.
    pub summary: &'static str,
    /// Citation of the paper that defines it ("" for none).
    pub paper: &'static str,
    /// TOML with sections such as `[scheduler]`, `[aggregator]`, each with `name = ...`.
    pub preset: &'static str,
    /// `module_path!()` of the registration, to name both sides of a duplicate.
    pub origin: &'static str,
}

inventory::collect!(Method);

/// The defaults of a config struct, as the TOML table `fl list` prints.
pub fn defaults_of<C: Default + Serialize>() -> toml::Table {
    toml::Table::try_from(C::default()).expect("component config serialises to a TOML table")
}

/// A component's parameter table, with where it came from for error messages.
#[derive(Debug, Clone)]
pub struct Params {
    /// The experiment file the parameters come from, for error messages.
    pub file: String,
    /// The section they were read from (`"scheduler"`, `"eval"`), the prefix of every key in
    /// error messages.
    pub section: String,
    /// The section's keys and values (for a component: merged with the method's preset,
    /// without `name`).
    pub table: toml::Table,
}

impl Params {
    /// Parameters `table` read from `section` of `file`.
    pub fn new(file: impl Into<String>, section: impl Into<String>, table: toml::Table) -> Self {
        Params { file: file.into(), section: section.into(), table }
    }

    /// Deserialises the table strictly (`deny_unknown_fields` on `C`); errors name the key path.
    pub fn parse<C: DeserializeOwned>(&self) -> Result<C> {
        let de = toml::Value::Table(self.table.clone());
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let key =
                if path == "." || path.is_empty() { self.section.clone() } else { format!("{}.{path}", self.section) };
            Error::Config { file: self.file.clone(), key, message: readable(&e.into_inner().to_string()) }
        })
    }

    /// Deserialises and validates; an [`InvalidKey`] becomes an error naming the file and the
    /// key under this section.
    pub fn parse_valid<C: DeserializeOwned>(
        &self,
        validate: impl FnOnce(&C) -> std::result::Result<(), InvalidKey>,
    ) -> Result<C> {
        let c = self.parse()?;
        validate(&c).map_err(|e| self.invalid_key(e))?;
        Ok(c)
    }

    /// Parses the section as `T`'s config and builds `T` ([`FromConfig`]); an [`InvalidKey`]
    /// becomes an error naming the file and the key under this section.
    pub fn build<T: FromConfig>(&self) -> Result<T> {
        T::from_config(self.parse()?).map_err(|e| self.invalid_key(e))
    }

    /// `e` as a configuration error of this file, its key under this section.
    pub fn invalid_key(&self, e: InvalidKey) -> Error {
        Error::Config { file: self.file.clone(), key: format!("{}.{}", self.section, e.key), message: e.message }
    }
}

/// The registry, built once: components by kind and name, methods by name.
pub struct Registry {
    components: BTreeMap<ComponentKind, BTreeMap<&'static str, &'static Component>>,
    methods: BTreeMap<&'static str, &'static Method>,
}

static REGISTRY: OnceLock<std::result::Result<Registry, RegistrationError>> = OnceLock::new();

impl Registry {
    /// The process-wide registry; fails if two registrations share a kind and name.
    pub fn get() -> Result<&'static Registry> {
        REGISTRY.get_or_init(Registry::collect).as_ref().map_err(|e| Error::Registration(e.clone()))
    }

    fn collect() -> std::result::Result<Registry, RegistrationError> {
        let mut components: BTreeMap<ComponentKind, BTreeMap<&'static str, &'static Component>> = BTreeMap::new();
        for c in inventory::iter::<Component> {
            let by_name = components.entry(c.build.kind()).or_default();
            if let Some(prev) = by_name.insert(c.name, c) {
                return Err(RegistrationError::DuplicateComponent {
                    kind: c.build.kind(),
                    name: c.name.into(),
                    first: prev.origin,
                    second: c.origin,
                });
            }
        }
        let mut methods = BTreeMap::new();
        for m in inventory::iter::<Method> {
            if let Some(prev) = methods.insert(m.name, m) {
                return Err(RegistrationError::DuplicateMethod {
                    name: m.name.into(),
                    first: prev.origin,
                    second: m.origin,
                });
            }
        }
        Ok(Registry { components, methods })
    }

    /// Components of one kind, sorted by name.
    pub fn components(&self, kind: ComponentKind) -> impl Iterator<Item = &'static Component> + '_ {
        self.components.get(&kind).into_iter().flat_map(|m| m.values().copied())
    }

    /// Registered methods, sorted by name.
    pub fn methods(&self) -> impl Iterator<Item = &'static Method> + '_ {
        self.methods.values().copied()
    }

    /// Looks a component up; `file` and `key` locate the reference for the error message.
    pub fn component(&self, kind: ComponentKind, name: &str, file: &str, key: &str) -> Result<&'static Component> {
        self.components.get(&kind).and_then(|m| m.get(name)).copied().ok_or_else(|| Error::UnknownComponent {
            file: file.into(),
            key: key.into(),
            kind,
            name: name.into(),
            valid: nearest(name, self.components(kind).map(|c| c.name)),
        })
    }

    /// Looks a method up; an unknown name is a configuration error of `file`'s `method` key
    /// listing the registered methods, nearest first.
    pub fn method(&self, name: &str, file: &str) -> Result<&'static Method> {
        self.methods.get(name).copied().ok_or_else(|| Error::Config {
            file: file.into(),
            key: "method".into(),
            message: format!(
                "unknown method `{name}`; registered methods, nearest first: {}",
                nearest(name, self.methods().map(|m| m.name)).join(", ")
            ),
        })
    }
}

/// The first line of a deserialisation error, with serde's "expected one of" list of fields
/// reordered nearest first.
fn readable(message: &str) -> String {
    let first = message.lines().next().unwrap_or_default();
    let parsed = first.strip_prefix("unknown field `").and_then(|rest| rest.split_once("`, expected one of "));
    match parsed {
        Some((field, list)) => {
            let names = list.split(", ").map(|n| n.trim_matches('`'));
            format!("unknown key `{field}`; valid keys, nearest first: {}", nearest(field, names).join(", "))
        }
        None => first.to_string(),
    }
}

/// Names ordered by edit distance to `name` (ties alphabetically).
pub fn nearest<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut scored: Vec<(usize, &str)> = names.map(|n| (strsim::levenshtein(name, n), n)).collect();
    scored.sort();
    scored.into_iter().map(|(_, n)| n.to_string()).collect()
}

/// Registers a component of a kind whose constructor reads only its section (partitioner,
/// trainer, mask policy, scheduler, aggregator, staleness function) or a model:
/// `register!(Kind "name" => …, summary: "…", paper: "…");` with one of
///
/// - `=> AsyncMix::new(AsyncMixConfig)`: a constructor taking the config. The macro
///   implements [`FromConfig`] for `AsyncMix`: the config is checked by its
///   [`Validate`](crate::Validate), then handed to the constructor.
/// - `=> NeuronFragments::new(NeuronFragmentsConfig)?`: the same with a constructor that
///   returns `Result<Self, InvalidKey>`.
/// - `=> FullModel::default()`: a component without parameters (config
///   [`NoParams`](crate::NoParams)).
/// - `=> Type`: a `Type` that implements [`FromConfig`] by hand (construction that can fail in
///   ways of its own), or for `Model` a [`ModelFromConfig`](crate::ModelFromConfig).
///
/// A component that is its own config takes the first form with `From`'s identity:
/// `=> Hinge::from(Hinge)`.
#[macro_export]
macro_rules! register {
    (Model $name:literal => $ty:ty, summary: $summary:expr, paper: $paper:expr $(,)?) => {
        $crate::inventory::submit! {
            $crate::registry::Component {
                name: $name,
                summary: $summary,
                paper: $paper,
                defaults: $crate::projection_head::defaults_with_key::<<$ty as $crate::from_config::ModelFromConfig>::Config>,
                build: $crate::registry::Builder::Model(|p, spec| {
                    let (p, head) = $crate::projection_head::split_params(p)?;
                    let config = p.parse_valid(<$ty as $crate::from_config::ModelFromConfig>::validate)?;
                    let model = <$ty as $crate::from_config::ModelFromConfig>::from_config(config, spec)?;
                    Ok($crate::projection_head::wrap(::std::sync::Arc::new(model), head))
                }),
                origin: module_path!(),
            }
        }
    };
    ($kind:ident $name:literal => $ty:ident :: $new:ident (), summary: $summary:expr, paper: $paper:expr $(,)?) => {
        impl $crate::from_config::FromConfig for $ty {
            type Config = $crate::from_config::NoParams;

            fn from_config(
                _: $crate::from_config::NoParams,
            ) -> ::std::result::Result<Self, $crate::error::InvalidKey> {
                ::std::result::Result::Ok($ty::$new())
            }
        }
        $crate::register!($kind $name => $ty, summary: $summary, paper: $paper);
    };
    ($kind:ident $name:literal => $ty:ident :: $new:ident ($config:ty)?, summary: $summary:expr, paper: $paper:expr $(,)?) => {
        impl $crate::from_config::FromConfig for $ty {
            type Config = $config;

            fn from_config(config: $config) -> ::std::result::Result<Self, $crate::error::InvalidKey> {
                $crate::from_config::Validate::validate(&config)?;
                $ty::$new(config)
            }
        }
        $crate::register!($kind $name => $ty, summary: $summary, paper: $paper);
    };
    ($kind:ident $name:literal => $ty:ident :: $new:ident ($config:ty), summary: $summary:expr, paper: $paper:expr $(,)?) => {
        impl $crate::from_config::FromConfig for $ty {
            type Config = $config;

            fn from_config(config: $config) -> ::std::result::Result<Self, $crate::error::InvalidKey> {
                $crate::from_config::Validate::validate(&config)?;
                ::std::result::Result::Ok($ty::$new(config))
            }
        }
        $crate::register!($kind $name => $ty, summary: $summary, paper: $paper);
    };
    ($kind:ident $name:literal => $ty:ty, summary: $summary:expr, paper: $paper:expr $(,)?) => {
        $crate::inventory::submit! {
            $crate::registry::Component {
                name: $name,
                summary: $summary,
                paper: $paper,
                defaults: $crate::registry::defaults_of::<<$ty as $crate::from_config::FromConfig>::Config>,
                build: $crate::registry::Builder::$kind(|p| Ok($crate::register!(@wrap $kind p.build::<$ty>()?))),
                origin: module_path!(),
            }
        }
    };
    (@wrap Trainer $built:expr) => {
        ::std::sync::Arc::new($built)
    };
    (@wrap $kind:ident $built:expr) => {
        ::std::boxed::Box::new($built)
    };
}
