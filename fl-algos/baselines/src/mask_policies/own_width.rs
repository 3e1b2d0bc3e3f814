//! `own-width`: every client receives the whole model and chooses for itself which units of
//! the narrowed groups it keeps, within a width share from its capacity (the levels and their
//! assignment of [`super::width_levels`]).
//!
//! The policy only sets the budget ([`fl_core::WidthBudget`]: the share `R` of the groups'
//! parameters the client keeps); the trainer spends it: choosing units by PLATON's importance
//! while training (`[trainer] platon`, FedAvg+PLATON in Co-S²P's Table 1; with `coverage-mean`
//! the server averages each element over the clients that kept it), by masks learned before
//! training (`[trainer] width_masks`), or as a memory ratio of quantised weights
//! (`[trainer] quantize`, FedAvg+Q-ViT).

use fl_core::{Mask, MaskCtx, MaskPolicy, Result, WidthBudget};

use super::width_levels::WidthConfig;

pub struct OwnWidth {
    cfg: WidthConfig,
}

impl OwnWidth {
    pub fn new(cfg: WidthConfig) -> Self {
        OwnWidth { cfg }
    }
}

impl MaskPolicy for OwnWidth {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        let ratio = self.cfg.ratio(ctx.client, ctx.profiles);
        let counts = self.cfg.kept_counts("own-width", ctx.structure, ratio)?;
        let whole = ctx.structure.mask_from_units(&vec![None; ctx.structure.groups.len()])?;
        let learned = (0..counts.len()).filter(|&g| counts[g].is_some()).collect();
        let budget = WidthBudget::new(ratio, learned, Vec::new(), true);
        match whole {
            Mask::Structured(mask) if ratio < 1.0 && !budget.learned.is_empty() => {
                Ok(Mask::Structured(mask.with_width_budget(budget)))
            }
            _ => Ok(Mask::Full),
        }
    }

    fl_core::stateless!();
}

fl_core::register!(MaskPolicy "own-width" => OwnWidth::new(WidthConfig),
    summary: "every client holds the whole model with a budget, a share from its speed or fixed shares, that the trainer spends (platon, width_masks or quantize)",
    paper: "Zhang et al., PLATON, ICML 2022 (as FedAvg+PLATON in Li et al., Co-S²P, arXiv:2410.08457)");

#[cfg(test)]
mod tests {
    use super::super::testing::{mlp_structure, with_ctx};
    use super::*;

    #[test]
    fn the_whole_model_goes_out_with_the_clients_share_as_its_budget() {
        let structure = mlp_structure(&[10, 6]);
        let mut policy = OwnWidth::new(WidthConfig {
            levels: vec![1.0, 0.25],
            groups: vec!["fc2".into()],
            ..WidthConfig::default()
        });
        let speeds = [8.0, 2.0];
        let slow = with_ctx(&structure, &speeds, 1, 3, |ctx| policy.mask(ctx)).unwrap();
        assert_eq!(
            slow.kept_params(&structure.shapes()),
            structure.shapes().iter().map(|s| s.iter().product::<i64>()).sum::<i64>()
        );
        assert_eq!(slow.width_budget(), Some(&WidthBudget::new(0.25, vec![1], vec![], true)));
        // The fastest client keeps everything: no budget at all.
        let fast = with_ctx(&structure, &speeds, 0, 3, |ctx| policy.mask(ctx)).unwrap();
        assert!(fast.is_full() && fast.width_budget().is_none());
    }
}
