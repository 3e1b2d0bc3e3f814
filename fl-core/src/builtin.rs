//! The neutral components every experiment can fall back on: the whole model as mask,
//! constant staleness weight, and mini-batch SGD as local trainer.

use std::sync::Arc;

use crate::mask_policy::FullModel;
use crate::registry::{Builder, Component, defaults_of};
use crate::staleness::Constant;
use crate::trainer::sgd::{Sgd, SgdConfig};

fn no_params() -> toml::Table {
    toml::Table::new()
}

inventory::submit! {
    Component {
        name: "full",
        summary: "every client trains the whole model",
        paper: "",
        defaults: no_params,
        build: Builder::MaskPolicy(|p| {
            p.parse::<Empty>()?;
            Ok(Box::new(FullModel))
        }),
        origin: module_path!(),
    }
}

inventory::submit! {
    Component {
        name: "constant",
        summary: "staleness weight 1 whatever the staleness",
        paper: "",
        defaults: no_params,
        build: Builder::Staleness(|p| {
            p.parse::<Empty>()?;
            Ok(Box::new(Constant))
        }),
        origin: module_path!(),
    }
}

inventory::submit! {
    Component {
        name: "sgd",
        summary: "mini-batch SGD (momentum, weight decay, FedProx proximal term μ, gradient masking)",
        paper: "",
        defaults: defaults_of::<SgdConfig>,
        build: Builder::Trainer(|p| Ok(Arc::new(Sgd::new(p.parse_valid(SgdConfig::validate)?)))),
        origin: module_path!(),
    }
}

/// A parameterless component's table: any key is an error.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}
