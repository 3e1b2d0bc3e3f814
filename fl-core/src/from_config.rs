//! Declarative registration: a component is a type built from its section of the experiment
//! file ([`FromConfig`]), registered in one [`register!`](crate::register) line.
//!
//! ```
//! # use fl_core::{AggregateCtx, Aggregator, ClientUpdate, FromConfig, InvalidKey, ParamSet};
//! # use serde::{Deserialize, Serialize};
//! #[derive(Default, Serialize, Deserialize)]
//! #[serde(deny_unknown_fields, default)]
//! pub struct ClippedMeanConfig { pub max_norm: f64 }
//! # pub struct ClippedMean { max_norm: f64 }
//! # impl Aggregator for ClippedMean {
//! #     fn aggregate(&mut self, g: &ParamSet, _: &[ClientUpdate], _: &AggregateCtx) -> fl_core::Result<ParamSet> {
//! #         Ok(g.shallow_clone())
//! #     }
//! # }
//!
//! impl FromConfig for ClippedMean {
//!     type Config = ClippedMeanConfig;
//!     fn from_config(c: ClippedMeanConfig) -> Result<Self, InvalidKey> {
//!         if c.max_norm <= 0.0 { return Err(InvalidKey::new("max_norm", "must be positive")); }
//!         Ok(ClippedMean { max_norm: c.max_norm })
//!     }
//! }
//!
//! fl_core::register!(Aggregator "clipped-mean" => ClippedMean,
//!     summary: "weighted mean of deltas clipped to max_norm", paper: "");
//! # let registry = fl_core::Registry::get().unwrap();
//! # assert!(registry.component(fl_core::ComponentKind::Aggregator, "clipped-mean", "", "").is_ok());
//! ```
//!
//! The registry parses the section strictly into `Config` (unknown keys and wrong types are
//! errors naming the key), fills absent keys from `Config::default()` (which `fl list` also
//! prints), and turns an [`InvalidKey`] into an error naming the file and the key.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::data::DataSpec;
use crate::error::InvalidKey;
use crate::model::Model;

/// A component built from its section of the experiment file.
pub trait FromConfig: Sized {
    /// The section's keys with their defaults (`#[serde(deny_unknown_fields, default)]`).
    type Config: Default + Serialize + DeserializeOwned;

    /// Checks the values and builds the component.
    fn from_config(config: Self::Config) -> Result<Self, InvalidKey>;
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
