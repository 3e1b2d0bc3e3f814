//! `heterofl`: HeteroFL's static nested sub-models. A client of width share r trains the first
//! `round(r · units)` units of every narrowed unit group, so the smaller sub-models nest inside
//! the larger ones and the first units are trained by every client.
//!
//! Diao, Ding and Tarokh, "HeteroFL: Computation and Communication Efficient Federated Learning
//! for Heterogeneous Clients", ICLR 2021 (arXiv:2010.01264). The server averages each element
//! over the clients that trained it (aggregator `coverage-mean`, as the `heterofl` method sets).
//! Not included: the paper's "scaler" (outputs divided by r during training) and its static
//! BatchNorm; the levels and their assignment are [`super::width_levels`]'s.

use fl_core::{Mask, MaskCtx, MaskPolicy, Result};

use super::width_levels::WidthConfig;

pub struct HeteroFl {
    cfg: WidthConfig,
}

impl HeteroFl {
    pub fn new(cfg: WidthConfig) -> Self {
        HeteroFl { cfg }
    }
}

impl MaskPolicy for HeteroFl {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        let ratio = self.cfg.ratio(ctx.client, ctx.profiles);
        let counts = self.cfg.kept_counts("heterofl", ctx.structure, ratio)?;
        let kept: Vec<Option<Vec<i64>>> = counts.into_iter().map(|n| n.map(|n| (0..n).collect())).collect();
        ctx.structure.mask_from_units(&kept)
    }

    fl_core::stateless!();
}

fl_core::register!(MaskPolicy "heterofl" => HeteroFl::new(WidthConfig),
    summary: "HeteroFL: each client trains the first share of every unit group, its share from its speed or fixed shares",
    paper: "Diao, Ding and Tarokh, HeteroFL, ICLR 2021");

#[cfg(test)]
mod tests {
    use super::super::testing::{kept_units, mlp_structure, with_ctx};
    use super::*;
    use crate::mask_policies::width_levels::Assign;
    use proptest::prelude::*;

    #[test]
    fn a_client_keeps_the_first_share_of_each_group() {
        let structure = mlp_structure(&[10, 6]);
        let mut policy = HeteroFl::new(WidthConfig::default());
        // Speeds 1, 1/2 and 1/8 of the fastest: levels 1, 1/2, 1/8.
        let speeds = [8.0, 4.0, 1.0];
        let mut kept =
            |client| kept_units(&with_ctx(&structure, &speeds, client, 0, |ctx| policy.mask(ctx)), &structure);
        assert_eq!(kept(0), [(0..10).collect::<Vec<_>>(), (0..6).collect()]);
        assert_eq!(kept(1), [vec![0, 1, 2, 3, 4], vec![0, 1, 2]]);
        // round(10/8) = 1 and round(6/8) = 1 (at least one unit).
        assert_eq!(kept(2), [vec![0], vec![0]]);
    }

    #[test]
    fn only_the_named_groups_narrow_and_an_unknown_one_is_an_error() {
        let structure = mlp_structure(&[10, 6]);
        let cfg = WidthConfig { groups: vec!["fc2".into()], ..WidthConfig::default() };
        let mut policy = HeteroFl::new(cfg);
        let mask = with_ctx(&structure, &[2.0, 1.0], 1, 0, |ctx| policy.mask(ctx));
        assert_eq!(kept_units(&mask, &structure), [(0..10).collect::<Vec<_>>(), vec![0, 1, 2]]);
        let mut bad = HeteroFl::new(WidthConfig { groups: vec!["fc9".into()], ..WidthConfig::default() });
        let err = with_ctx(&structure, &[1.0], 0, 0, |ctx| bad.mask(ctx).map(|_| ())).unwrap_err().to_string();
        assert!(err.contains("heterofl") && err.contains("groups") && err.contains("fc9"), "{err}");
    }

    proptest! {
        /// A client's sub-model contains every slower client's (HeteroFL's nesting), whatever
        /// the speeds.
        #[test]
        fn smaller_sub_models_nest_in_larger_ones(speeds in proptest::collection::vec(0.01f64..10.0, 2..8), units in 1i64..40) {
            let structure = mlp_structure(&[units]);
            let mut policy = HeteroFl::new(WidthConfig { assign: Assign::Speed, ..WidthConfig::default() });
            let kept: Vec<Vec<i64>> = (0..speeds.len())
                .map(|c| kept_units(&with_ctx(&structure, &speeds, c, 0, |ctx| policy.mask(ctx)), &structure).remove(0))
                .collect();
            for a in 0..speeds.len() {
                for b in 0..speeds.len() {
                    if speeds[a] >= speeds[b] {
                        prop_assert!(kept[b].iter().all(|u| kept[a].contains(u)), "{:?} ⊄ {:?}", kept[b], kept[a]);
                    }
                }
            }
        }
    }
}
