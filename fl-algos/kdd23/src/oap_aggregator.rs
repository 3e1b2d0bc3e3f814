//! `coverage-mean-zero-uncovered`: OAP's aggregation under its own name. It is the baselines'
//! `coverage-mean` with `uncovered = "zero"` fixed (the OAP code's `nan_to_num` of 0/0) and
//! clients weighted uniformly by default, as every KDD'23 method weighs them.

use fl_algo_baselines::{CoverageMean, CoverageMeanConfig, Uncovered, Weighting};
use fl_core::Validate;
use fl_core::registry::{Builder, Component, defaults_of};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZeroUncoveredConfig {
    /// How client contributions are weighted: uniformly (as KDD'23) or by samples.
    #[default(Weighting::Uniform)]
    pub weighting: Weighting,
}

impl Validate for ZeroUncoveredConfig {}

inventory::submit! {
    Component {
        name: "coverage-mean-zero-uncovered",
        summary: "OAP's aggregation: the coverage mean, with coordinates nobody trained set to 0",
        paper: "Zhou et al., arXiv:2201.11803; as configured by Wang et al., KDD 2023",
        defaults: defaults_of::<ZeroUncoveredConfig>,
        build: Builder::Aggregator(|p| {
            let ZeroUncoveredConfig { weighting } = p.parse()?;
            Ok(Box::new(CoverageMean::new(CoverageMeanConfig { weighting, uncovered: Uncovered::Zero })))
        }),
        origin: module_path!(),
    }
}
