//! Coverage mean: each element is averaged over the clients that trained it,
//! `x_e ← x_e + Σ_i p_i m_ie Δ_ie / Σ_i p_i m_ie`; an element no client covered keeps its
//! value (HeteroFL's and RA-Fed's aggregation for partial models) or, with
//! `uncovered = "zero"`, becomes 0 (the OAP code's `nan_to_num` of 0/0).

use fl_core::tch::{Kind, Tensor};
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, ParamSet, Result, Validate};
use serde::{Deserialize, Serialize};

use super::weighted_mean::{Weighting, normalised_weights};

/// What happens to an element no client trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Uncovered {
    /// It keeps its value.
    #[default]
    Keep,
    /// It becomes 0.
    Zero,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CoverageMeanConfig {
    /// How client contributions are weighted: by samples or uniformly.
    pub weighting: Weighting,
    /// What happens to an element no client trained: kept or set to 0.
    pub uncovered: Uncovered,
}

impl Validate for CoverageMeanConfig {}

pub struct CoverageMean {
    cfg: CoverageMeanConfig,
}

impl CoverageMean {
    pub fn new(cfg: CoverageMeanConfig) -> Self {
        CoverageMean { cfg }
    }
}

impl Aggregator for CoverageMean {
    fn aggregate(&mut self, global: &ParamSet, updates: &[ClientUpdate], ctx: &AggregateCtx) -> Result<ParamSet> {
        let p = normalised_weights(updates, ctx, self.cfg.weighting, false)?;
        let shapes = global.shapes();
        let device = global.tensors()[0].device();
        let zeros = || shapes.iter().map(|s| Tensor::zeros(&s[..], (Kind::Float, device))).collect::<Vec<_>>();
        let (mut num, mut den) = (zeros(), zeros());
        for (u, w) in updates.iter().zip(&p) {
            // Deltas are already zero outside the mask, so only the denominator needs it.
            for ((n, d), (delta, m)) in
                num.iter_mut().zip(den.iter_mut()).zip(u.delta.tensors().iter().zip(u.mask.dense(&shapes, device)))
            {
                *n = &*n + delta * *w;
                *d = &*d + m * *w;
            }
        }
        let mut i = 0;
        Ok(global.map(|x| {
            // Uncovered elements have a zero numerator; dividing them by 1 keeps x unchanged.
            let covered = den[i].gt(0.0);
            let den_safe = den[i].where_self(&covered, &Tensor::ones_like(&den[i]));
            let next = x + &num[i] / den_safe;
            i += 1;
            match self.cfg.uncovered {
                Uncovered::Keep => next,
                Uncovered::Zero => next * covered.to_kind(Kind::Float),
            }
        }))
    }

    fl_core::stateless!();
}

fl_core::register!(Aggregator "coverage-mean" => CoverageMean::new(CoverageMeanConfig),
    summary: "each element averaged over the clients that trained it; uncovered elements keep their value",
    paper: "Diao et al., HeteroFL, ICLR 2021; Wang et al., KDD 2023");
