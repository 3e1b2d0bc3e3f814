//! `fedrolex`: FedRolex's rolling sub-model extraction. In round j a client of width share r
//! trains, in every narrowed unit group of U units, the `n = round(r · U)` units
//! `j mod U, (j + 1) mod U, …, (j + n − 1) mod U`: the window rolls by one unit per round, so
//! over U rounds every unit is trained equally often by clients of every width (HeteroFL's
//! prefixes leave the last units to the widest clients alone).
//!
//! Alam, Liu, Yan and Zhang, "FedRolex: Model-Heterogeneous Federated Learning with Rolling
//! Sub-Model Extraction", NeurIPS 2022 (arXiv:2212.01548). The round is the global model
//! version the job starts from (one per synchronous round). The server averages each element
//! over the clients that trained it (aggregator `coverage-mean`, as the `fedrolex` method
//! sets). Levels and their assignment are [`super::width_levels`]'s.

use fl_core::{Mask, MaskCtx, MaskPolicy, Result};

use super::width_levels::WidthConfig;

/// The `n` of `units` units that round `round`'s window covers, `round mod units` onwards,
/// wrapping, in ascending order.
pub fn rolling_units(units: i64, n: i64, round: u64) -> Vec<i64> {
    let start = (round % units as u64) as i64;
    let mut kept: Vec<i64> = (0..n).map(|j| (start + j) % units).collect();
    kept.sort_unstable();
    kept
}

pub struct FedRolex {
    cfg: WidthConfig,
}

impl FedRolex {
    pub fn new(cfg: WidthConfig) -> Self {
        FedRolex { cfg }
    }
}

impl MaskPolicy for FedRolex {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        let ratio = self.cfg.ratio(ctx.client, ctx.profiles);
        let counts = self.cfg.kept_counts("fedrolex", ctx.structure, ratio)?;
        let kept: Vec<Option<Vec<i64>>> = counts
            .into_iter()
            .zip(&ctx.structure.groups)
            .map(|(n, group)| n.map(|n| rolling_units(group.units, n, ctx.version)))
            .collect();
        ctx.structure.mask_from_units(&kept)
    }

    fl_core::stateless!();
}

fl_core::register!(MaskPolicy "fedrolex" => FedRolex::new(WidthConfig),
    summary: "FedRolex: each client trains a window of every unit group that rolls by one unit per round, its share from its speed or fixed shares",
    paper: "Alam, Liu, Yan and Zhang, FedRolex, NeurIPS 2022");

#[cfg(test)]
mod tests {
    use super::super::testing::{kept_units, mlp_structure, with_ctx};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_window_rolls_by_one_unit_per_round_and_wraps() {
        let structure = mlp_structure(&[10]);
        let mut policy = FedRolex::new(WidthConfig { levels: vec![1.0, 0.3], ..WidthConfig::default() });
        // The second client runs at 0.3 of the fastest: 3 of 10 units.
        let speeds = [10.0, 3.0];
        let mut kept =
            |version| kept_units(&with_ctx(&structure, &speeds, 1, version, |ctx| policy.mask(ctx)), &structure);
        assert_eq!(kept(0), [vec![0, 1, 2]]);
        assert_eq!(kept(4), [vec![4, 5, 6]]);
        assert_eq!(kept(8), [vec![0, 8, 9]]);
        assert_eq!(kept(13), [vec![3, 4, 5]]);
        // The full-width client keeps every unit in every round.
        let full = kept_units(&with_ctx(&structure, &speeds, 0, 7, |ctx| policy.mask(ctx)), &structure);
        assert_eq!(full, [(0..10).collect::<Vec<_>>()]);
    }

    proptest! {
        /// Over any U consecutive rounds, a client of width n trains every one of the U units
        /// exactly n times.
        #[test]
        fn over_u_rounds_every_unit_is_trained_equally_often(units in 1i64..30, speed in 0.01f64..1.0, first in 0u64..1000) {
            let structure = mlp_structure(&[units]);
            let mut policy = FedRolex::new(WidthConfig::default());
            let speeds = [1.0, speed];
            let mut counts = vec![0; units as usize];
            let mut width = None;
            for version in first..first + units as u64 {
                let kept = kept_units(&with_ctx(&structure, &speeds, 1, version, |ctx| policy.mask(ctx)), &structure).remove(0);
                prop_assert!(width.is_none_or(|w| w == kept.len()), "the width stays");
                width = Some(kept.len());
                for u in kept {
                    counts[u as usize] += 1;
                }
            }
            let n = width.unwrap();
            prop_assert!(counts.iter().all(|&c| c == n), "counts {:?} for width {}", counts, n);
        }
    }
}
