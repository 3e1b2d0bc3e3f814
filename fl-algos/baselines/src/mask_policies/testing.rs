//! Helpers for the width policies' tests: an MLP's structure, a mask context, and the units a
//! structured mask keeps per group.

use fl_core::rng::Rng;
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::testing::profiles;
use fl_core::{Mask, MaskCtx, ParamSet, Structure, TensorSpec, UnitGroup, UnitMember};
use rand::SeedableRng;

/// An MLP `4 → hidden[0] → … → 3` with one unit group per hidden layer (`fc1`, `fc2`, …).
pub fn mlp_structure(hidden: &[i64]) -> Structure {
    let mut widths = vec![4];
    widths.extend(hidden);
    widths.push(3);
    let mut tensors = Vec::new();
    for (i, w) in widths.windows(2).enumerate() {
        tensors.push(TensorSpec::new(format!("fc{}.weight", i + 1), [w[1], w[0]]));
        tensors.push(TensorSpec::new(format!("fc{}.bias", i + 1), [w[1]]));
    }
    let groups = hidden
        .iter()
        .enumerate()
        .map(|(i, &units)| {
            let member = |tensor, dim| UnitMember { tensor, dim, block: 1 };
            UnitGroup {
                name: format!("fc{}", i + 1),
                units,
                members: vec![member(2 * i, 0), member(2 * i + 1, 0), member(2 * i + 2, 1)],
            }
        })
        .collect();
    Structure { tensors, groups }
}

/// Runs `f` on the mask context of `client`'s job from `version`, clients with these speeds.
pub fn with_ctx<T>(
    structure: &Structure,
    speeds: &[f64],
    client: usize,
    version: u64,
    f: impl FnOnce(&mut MaskCtx) -> T,
) -> T {
    let profiles = profiles(speeds);
    let zeros = structure.shapes().iter().map(|s| Tensor::zeros(s.as_slice(), (Kind::Float, Device::Cpu))).collect();
    let global = ParamSet::new(structure.names(), zeros).unwrap();
    let mut rng = Rng::seed_from_u64(0);
    let mut ctx = MaskCtx {
        client,
        profiles: &profiles,
        version,
        choice: None,
        structure,
        global: &global,
        client_state: None,
        rng: &mut rng,
    };
    f(&mut ctx)
}

/// The units a structured mask keeps in each group, read from the group's first member.
pub fn kept_units(mask: &fl_core::Result<Mask>, structure: &Structure) -> Vec<Vec<i64>> {
    let Ok(Mask::Structured(s)) = mask else { panic!("expected a structured mask, got {:?}", mask.as_ref().err()) };
    structure
        .groups
        .iter()
        .map(|g| {
            let m = &g.members[0];
            match s.kept(m.tensor, m.dim) {
                Some(rows) => rows.iter().step_by(m.block as usize).map(|r| r / m.block).collect(),
                None => (0..g.units).collect(),
            }
        })
        .collect()
}
