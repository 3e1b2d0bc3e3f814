//! The neutral components every experiment can fall back on: the whole model as mask,
//! constant staleness weight, and mini-batch SGD (or the same trainer with Adam's defaults)
//! as local trainer.

use std::sync::Arc;

use crate::error::InvalidKey;
use crate::from_config::Validate;
use crate::mask_policy::FullModel;
use crate::registry::{Builder, Component, Params};
use crate::staleness::Constant;
use crate::trainer::sgd::{Optimizer, Sgd, SgdConfig};

impl Validate for SgdConfig {
    fn validate(&self) -> Result<(), InvalidKey> {
        SgdConfig::validate(self)
    }
}

crate::register!(MaskPolicy "full" => FullModel::default(), summary: "every client trains the whole model", paper: "");
crate::register!(Staleness "constant" => Constant::default(),
    summary: "staleness weight 1 whatever the staleness", paper: "");
crate::register!(Trainer "sgd" => Sgd::new(SgdConfig),
    summary: "mini-batch SGD (momentum, weight decay, FedProx proximal term μ, gradient masking)", paper: "");

// `adam` is the same trainer with other defaults, which one `FromConfig` type cannot declare.
inventory::submit! {
    Component {
        name: "adam",
        summary: "the sgd trainer with Adam (PyTorch's defaults, lr 1e-3): betas, eps, lr decay, delay penalty, epoch restarts, early stopping",
        paper: "Kingma and Ba, ICLR 2015",
        defaults: adam_defaults,
        build: Builder::Trainer(|p| {
            let mut table = adam_defaults();
            table.extend(p.table.clone());
            Ok(Arc::new(Params::new(p.file.clone(), p.section.clone(), table).build::<Sgd>()?))
        }),
        origin: module_path!(),
    }
}

fn adam_defaults() -> toml::Table {
    let cfg = SgdConfig { optimizer: Optimizer::Adam, lr: 1e-3, ..SgdConfig::default() };
    toml::Table::try_from(cfg).expect("the trainer config serialises to a TOML table")
}
