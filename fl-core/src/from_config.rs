//! Declarative registration: a component is a type built from its section of the experiment
//! file ([`FromConfig`]), registered in one [`register!`](crate::register) declaration.
//!
//! The section's keys are a config struct with each default beside its field
//! (`#[derive(SmartDefault)]`, `#[default(…)]`) and the checks serde cannot make in
//! [`Validate`]. A component built by a constructor taking its config needs nothing more: the
//! `=> Type::new(Config)` form of `register!` implements [`FromConfig`] (validate, then construct).
//!
//! ```
//! # use fl_core::{AggregateCtx, Aggregator, ClientUpdate, InvalidKey, ParamSet, Validate};
//! # use serde::{Deserialize, Serialize};
//! # use smart_default::SmartDefault;
//! #[derive(SmartDefault, Serialize, Deserialize)]
//! #[serde(deny_unknown_fields, default)]
//! pub struct ClippedMeanConfig {
//!     /// Largest L2 norm of one client's delta, positive.
//!     #[default(1.0)]
//!     pub max_norm: f64,
//! }
//!
//! impl Validate for ClippedMeanConfig {
//!     fn validate(&self) -> Result<(), InvalidKey> {
//!         if !(self.max_norm > 0.0) { return Err(InvalidKey::new("max_norm", "must be positive")); }
//!         Ok(())
//!     }
//! }
//!
//! pub struct ClippedMean { max_norm: f64 }
//!
//! impl ClippedMean {
//!     pub fn new(c: ClippedMeanConfig) -> Self { ClippedMean { max_norm: c.max_norm } }
//! }
//! # impl Aggregator for ClippedMean {
//! #     fn aggregate(&mut self, g: &ParamSet, _: &[ClientUpdate], _: &AggregateCtx) -> fl_core::Result<ParamSet> {
//! #         Ok(g.shallow_clone())
//! #     }
//! # }
//!
//! fl_core::register!(Aggregator "clipped-mean" => ClippedMean::new(ClippedMeanConfig),
//!     summary: "weighted mean of deltas clipped to max_norm", paper: "");
//! # use fl_core::{ComponentKind, FromConfig, Params, Registry};
//! # let registry = Registry::get().unwrap();
//! # let c = registry.component(ComponentKind::Aggregator, "clipped-mean", "", "").unwrap();
//! # assert_eq!((c.defaults)()["max_norm"].as_float(), Some(1.0));
//! # assert_eq!(ClippedMean::from_config(ClippedMeanConfig { max_norm: 0.0 }).err().unwrap().key, "max_norm");
//! # let mut table = fl_core::toml::Table::new();
//! # table.insert("max_norm".into(), 0.5.into());
//! # assert_eq!(Params::new("e.toml", "aggregator", table).build::<ClippedMean>().unwrap().max_norm, 0.5);
//! ```
//!
//! A component whose construction can fail in ways of its own implements [`FromConfig`] by
//! hand and registers with `=> Type`. The registry parses the section strictly into `Config`
//! (unknown keys and wrong types are errors naming the key), fills absent keys from
//! `Config::default()` (which `fl list` also prints), and turns an [`InvalidKey`] into an error
//! naming the file and the key.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::data::DataSpec;
use crate::error::InvalidKey;
use crate::model::Model;

/// A component built from its section of the experiment file.
pub trait FromConfig: Sized {
    /// The section's keys with their defaults (`#[serde(deny_unknown_fields, default)]`).
    type Config: Default + Serialize + DeserializeOwned + Validate;

    /// Checks the values ([`Validate`]) and builds the component.
    fn from_config(config: Self::Config) -> Result<Self, InvalidKey>;
}

/// The checks of a config that its types cannot express: ranges, and keys that must agree.
///
/// # Design
///
/// It sees the section alone. What depends on the data or the model (a tensor's name, the
/// number of clients) is checked where the component meets them, and fails as an error of the
/// run rather than of a key.
pub trait Validate {
    /// Checks every value; the error names the key and says what is wrong
    /// (`InvalidKey::new("alpha", "expected a value in (0, 1], got 2")`). Accepts everything by
    /// default, for configs whose types say it all.
    fn validate(&self) -> Result<(), InvalidKey> {
        Ok(())
    }
}

/// A model built from its section and the shape of the data it will see.
pub trait ModelFromConfig: Model + Sized + 'static {
    /// The section's keys with their defaults (`#[serde(deny_unknown_fields, default)]`).
    type Config: Default + Serialize + DeserializeOwned;

    /// Checks the section's values.
    fn validate(_config: &Self::Config) -> Result<(), InvalidKey> {
        Ok(())
    }

    /// Builds the model for data of `spec`; fails where the data does not suit the model.
    fn from_config(config: Self::Config, spec: &DataSpec) -> crate::Result<Self>;
}

/// The config of a component without parameters: any key in its section is an error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

impl Validate for NoParams {}
