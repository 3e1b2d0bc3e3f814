//! The neutral components every experiment can fall back on: the whole model as mask,
//! constant staleness weight, and mini-batch SGD (or the same trainer with Adam's defaults)
//! as local trainer.

use std::sync::Arc;

use crate::mask_policy::FullModel;
use crate::registry::{Builder, Component, Params, defaults_of};
use crate::staleness::Constant;
use crate::trainer::sgd::{Optimizer, Sgd, SgdConfig};

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

inventory::submit! {
    Component {
        name: "adam",
        summary: "the sgd trainer with Adam (PyTorch's defaults, lr 1e-3): betas, eps, lr decay, delay penalty, epoch restarts, early stopping",
        paper: "Kingma and Ba, ICLR 2015",
        defaults: adam_defaults,
        build: Builder::Trainer(|p| {
            let mut table = adam_defaults();
            table.extend(p.table.clone());
            let p = Params::new(p.file.clone(), p.section.clone(), table);
            Ok(Arc::new(Sgd::new(p.parse_valid(SgdConfig::validate)?)))
        }),
        origin: module_path!(),
    }
}

fn adam_defaults() -> toml::Table {
    let cfg = SgdConfig { optimizer: Optimizer::Adam, lr: 1e-3, ..SgdConfig::default() };
    toml::Table::try_from(cfg).expect("the trainer config serialises to a TOML table")
}

/// A parameterless component's table: any key is an error.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}
