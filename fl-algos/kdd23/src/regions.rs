//! Region partitions of the maskable tensors (the paper's neuron regions, §6.2): each element
//! (or output row) of a maskable tensor belongs to one of K equal-size regions.

use fl_core::rng::Rng;
use fl_core::tch::{Device, Kind, Tensor};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

/// How elements are assigned to regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionKind {
    /// A seeded random balanced assignment, drawn once (the only one under which Γ*, S* and τ
    /// mean what the paper says).
    #[default]
    StaticRandom,
    /// The same, redrawn every round.
    PerRoundRandom,
    /// The released code: region = rank of the element's index in `argsort(w)` · K / M,
    /// recomputed from the global model every round.
    CodeArgsort,
}

/// What a region is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Granularity {
    /// Single weight entries (the code).
    #[default]
    Element,
    /// Output units: rows of the tensor (the paper's "neuron regions").
    Neuron,
    /// Whole units of the model's unit groups (heads, neurons, channels) in every slice they
    /// own ([`crate::units`]); `tensors` is not read: every group's members are maskable.
    Unit,
}

/// Region ids `0..k` for `units` units, balanced (sizes differ by at most one) and shuffled.
pub fn balanced_random(units: i64, k: i64, rng: &mut Rng) -> Vec<i64> {
    let mut ids: Vec<i64> = (0..units).map(|i| i * k / units).collect();
    ids.shuffle(rng);
    ids
}

/// Region ids of every element of a tensor of `shape`, on `device`.
///
/// # Panics
/// For [`Granularity::Unit`], whose regions span tensors: see `units::unit_regions`.
pub fn random_regions(shape: &[i64], k: i64, granularity: Granularity, rng: &mut Rng, device: Device) -> Tensor {
    match granularity {
        Granularity::Element => {
            let n: i64 = shape.iter().product();
            Tensor::from_slice(&balanced_random(n, k, rng)).reshape(shape).to_device(device)
        }
        Granularity::Unit => panic!("unit regions come from the model's unit groups: units::unit_regions"),
        Granularity::Neuron => {
            let rows = Tensor::from_slice(&balanced_random(shape[0], k, rng)).to_device(device);
            let mut view = vec![1; shape.len()];
            view[0] = shape[0];
            rows.reshape(&view[..]).expand(shape, false).contiguous()
        }
    }
}

/// The code's assignment: `region[p] = argsort(w.flatten())[p] · K / M` (rows ranked by their
/// first weight's order are not part of the code; element granularity only).
pub fn argsort_regions(w: &Tensor, k: i64) -> Tensor {
    let m = w.numel() as i64;
    let order = w.flatten(0, -1).argsort(0, false);
    (order * k).floor_divide_scalar(m).reshape(&w.size()[..]).to_kind(Kind::Int64)
}

/// The 0/1 float mask of the elements whose region is in `kept`.
pub fn region_mask(regions: &Tensor, kept: &[i64]) -> Tensor {
    let mut mask = regions.zeros_like().to_kind(Kind::Bool);
    for &r in kept {
        mask = mask.logical_or(&regions.eq(r));
    }
    mask.to_kind(Kind::Float)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_regions_are_balanced() {
        let mut rng = fl_core::rng::stream(1, &[0]);
        let ids = random_regions(&[10, 6], 4, Granularity::Element, &mut rng, Device::Cpu);
        let counts: Vec<i64> = (0..4).map(|r| ids.eq(r).sum(Kind::Int64).int64_value(&[])).collect();
        assert_eq!(counts, vec![15, 15, 15, 15]);
        let rows = random_regions(&[8, 3], 4, Granularity::Neuron, &mut rng, Device::Cpu);
        for r in 0..4 {
            assert_eq!(rows.eq(r).sum(Kind::Int64).int64_value(&[]), 6, "two rows of three per region");
        }
        let first_col = rows.select(1, 0);
        assert!(rows.eq_tensor(&first_col.unsqueeze(1).expand([8, 3], false)).all().int64_value(&[]) == 1);
    }

    #[test]
    fn argsort_regions_follow_the_code() {
        // w = [0.3, -1, 2, 0.5]: argsort = [1, 0, 3, 2]; regions with K = 2, M = 4: [0, 0, 1, 1].
        let w = Tensor::from_slice(&[0.3f32, -1.0, 2.0, 0.5]);
        let r: Vec<i64> = Vec::try_from(&argsort_regions(&w, 2)).unwrap();
        assert_eq!(r, vec![0, 0, 1, 1]);
        let w = Tensor::from_slice(&[2.0f32, 0.3, -1.0, 0.5]);
        // argsort = [2, 1, 3, 0] → [1, 0, 1, 0].
        let r: Vec<i64> = Vec::try_from(&argsort_regions(&w, 2)).unwrap();
        assert_eq!(r, vec![1, 0, 1, 0]);
    }
}
