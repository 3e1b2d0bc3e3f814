//! Masks over whole units of a model's unit groups (a ViT's attention heads and MLP neurons, a
//! hidden layer's neurons, a CNN's channels), for the KDD'23 policies run on structured models
//! (Co-S²P's baselines "on heads and neurons"): a unit is kept or masked in every tensor slice
//! it owns ([`UnitMember`]), and an element owned by units of several groups is kept
//! only where all of them are.

use fl_core::rng::Rng;
use fl_core::structure::UnitMember;
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{Error, Result, Structure};

use crate::regions::balanced_random;

/// `per_unit` (`[units]`) laid along `member`'s dimension of a tensor of `shape`: each of the
/// unit's `block` indices carries its value, broadcast over the other dimensions.
fn along(member: &UnitMember, shape: &[i64], per_unit: &Tensor) -> Tensor {
    let values = per_unit.repeat_interleave_self_int(member.block, 0, None::<i64>);
    let mut view = vec![1; shape.len()];
    view[member.dim] = values.size()[0];
    values.reshape(view.as_slice()).expand(shape, false).contiguous()
}

/// Fails where the model has no unit groups, naming the policy.
pub fn require_groups(policy: &str, structure: &Structure) -> Result<()> {
    if structure.groups.is_empty() {
        return Err(Error::component(
            policy,
            "granularity = \"unit\" needs a model with unit groups (heads, neurons, channels); this one has none",
        ));
    }
    Ok(())
}

/// Region ids `[shape]` of each member tensor (structure index, ids): every group's units split
/// into `k` balanced random regions.
pub fn unit_regions(
    structure: &Structure,
    shapes: &[Vec<i64>],
    k: i64,
    rng: &mut Rng,
    device: Device,
) -> Vec<(usize, Tensor)> {
    let mut ids = Vec::new();
    for group in &structure.groups {
        let regions = Tensor::from_slice(&balanced_random(group.units, k, rng)).to_device(device);
        for member in &group.members {
            ids.push((member.tensor, along(member, &shapes[member.tensor], &regions)));
        }
    }
    ids
}

/// Multiplies `mask` into slot `t`: several groups' masks of one tensor keep their intersection.
pub fn combine(masks: &mut [Option<Tensor>], t: usize, mask: Tensor) {
    masks[t] = Some(match masks[t].take() {
        Some(m) => m * mask,
        None => mask,
    });
}

/// Per tensor, the 0/1 mask keeping in every group its `fraction` (at least one unit) with the
/// largest `scores` summed over their slices; `scores` has the model's tensors' shapes (defined
/// at least for the groups' members). None for tensors no group owns.
pub fn top_units(structure: &Structure, scores: &[Tensor], fraction: f64) -> Vec<Option<Tensor>> {
    let mut masks: Vec<Option<Tensor>> = (0..structure.tensors.len()).map(|_| None).collect();
    for group in &structure.groups {
        let unit_score = group
            .members
            .iter()
            .map(|m| {
                let s = &scores[m.tensor];
                let per_index =
                    s.transpose(0, m.dim as i64).reshape([s.size()[m.dim], -1]).sum_dim_intlist(1, false, Kind::Float);
                per_index.reshape([group.units, m.block]).sum_dim_intlist(1, false, Kind::Float)
            })
            .reduce(|a, b| a + b)
            .expect("a group has members");
        let (_, top) = unit_score.topk(group.kept_at(fraction), 0, true, false);
        let keep = unit_score.zeros_like().index_fill(0, &top, 1.0);
        for member in &group.members {
            let shape = scores[member.tensor].size();
            combine(&mut masks, member.tensor, along(member, &shape, &keep));
        }
    }
    masks
}

#[cfg(test)]
mod tests {
    use fl_core::structure::{TensorSpec, UnitGroup};

    use super::*;

    /// fc1 `[4, 3]` (rows: 4 neurons), fc2 `[2, 4]` (columns: the same neurons), and a head-like
    /// group of 2 units of 2 rows each in `qkv` `[4, 3]`.
    fn structure() -> Structure {
        let t = |name: &str, shape: Vec<i64>| TensorSpec::new(name, shape);
        let member = |tensor, dim, block| UnitMember { tensor, dim, block };
        Structure {
            tensors: vec![t("fc1", vec![4, 3]), t("fc2", vec![2, 4]), t("qkv", vec![4, 3])],
            groups: vec![
                UnitGroup { name: "mlp".into(), units: 4, members: vec![member(0, 0, 1), member(1, 1, 1)] },
                UnitGroup { name: "heads".into(), units: 2, members: vec![member(2, 0, 2)] },
            ],
        }
    }

    #[test]
    fn top_units_keep_the_units_with_the_largest_summed_scores_in_every_slice() {
        let s = structure();
        // Neuron scores: fc1 row sums 3, 30, 6, 9 plus fc2 column sums 1, 1, 10, 0 → 4, 31, 16, 9.
        let fc1 = Tensor::from_slice(&[1f32, 1., 1., 10., 10., 10., 2., 2., 2., 3., 3., 3.]).reshape([4, 3]);
        let fc2 = Tensor::from_slice(&[1f32, 0., 5., 0., 0., 1., 5., 0.]).reshape([2, 4]);
        // Head scores: rows 0-1 sum 2, rows 2-3 sum 12.
        let qkv = Tensor::from_slice(&[1f32, 0., 0., 0., 1., 0., 4., 4., 0., 0., 2., 2.]).reshape([4, 3]);
        let masks = top_units(&s, &[fc1, fc2, qkv], 0.5);
        let rows = |m: &Tensor| Vec::<f32>::try_from(m.select(1, 0)).unwrap();
        assert_eq!(rows(masks[0].as_ref().unwrap()), vec![0., 1., 1., 0.], "neurons 1 and 2 (31, 16) kept");
        let fc2_mask = Vec::<f32>::try_from(masks[1].as_ref().unwrap().get(0)).unwrap();
        assert_eq!(fc2_mask, vec![0., 1., 1., 0.], "the same neurons' fc2 columns");
        assert_eq!(rows(masks[2].as_ref().unwrap()), vec![0., 0., 1., 1.], "the second head's two rows");
    }

    #[test]
    fn unit_regions_give_each_unit_one_region_in_all_its_slices() {
        let s = structure();
        let shapes: Vec<Vec<i64>> = s.tensors.iter().map(|t| t.shape.clone()).collect();
        let mut rng = fl_core::rng::stream(1, &[2]);
        let ids = unit_regions(&s, &shapes, 2, &mut rng, Device::Cpu);
        assert_eq!(ids.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![0, 1, 2]);
        let fc1: Vec<i64> = Vec::try_from(ids[0].1.select(1, 0)).unwrap();
        let fc2: Vec<i64> = Vec::try_from(ids[1].1.get(1)).unwrap();
        assert_eq!(fc1, fc2, "a neuron's row and column share its region");
        assert_eq!(fc1.iter().filter(|&&r| r == 0).count(), 2, "balanced: two neurons a region");
        let qkv: Vec<i64> = Vec::try_from(ids[2].1.select(1, 2)).unwrap();
        assert_eq!((qkv[0], qkv[2]), (qkv[1], qkv[3]), "a head's two rows share its region");
        assert_ne!(qkv[0], qkv[2], "two heads, two regions");
    }
}
