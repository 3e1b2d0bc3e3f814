//! Property tests of masks: coverage counts equal, element by element, the number of client
//! masks that keep the element (computed independently on the host), and a structured mask's
//! extract → scatter round trip keeps exactly the kept elements.

use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{Coverage, Mask, ParamSet, StructuredMask};
use proptest::prelude::*;

/// Host-side description of a mask, from which both the tensor mask and the expected
/// membership are derived.
#[derive(Debug, Clone)]
enum HostMask {
    Full,
    /// Per tensor, per dim: kept indices (None: all).
    Structured(Vec<Vec<Option<Vec<i64>>>>),
    /// Per tensor: a 0/1 value per element (row-major).
    Elementwise(Vec<Vec<bool>>),
}

fn shapes_strategy() -> impl Strategy<Value = Vec<Vec<i64>>> {
    prop::collection::vec(prop::collection::vec(1i64..5, 1..=3), 1..=3)
}

fn subset(n: i64) -> impl Strategy<Value = Option<Vec<i64>>> {
    prop_oneof![
        Just(None),
        prop::collection::btree_set(0..n, 1..=n as usize).prop_map(|s| Some(s.into_iter().collect()))
    ]
}

fn mask_strategy(shapes: Vec<Vec<i64>>) -> impl Strategy<Value = HostMask> {
    let structured = shapes
        .iter()
        .map(|s| s.iter().map(|&n| subset(n)).collect::<Vec<_>>())
        .collect::<Vec<_>>()
        .prop_map(HostMask::Structured);
    let elementwise = shapes
        .iter()
        .map(|s| prop::collection::vec(any::<bool>(), s.iter().product::<i64>() as usize))
        .collect::<Vec<_>>()
        .prop_map(HostMask::Elementwise);
    prop_oneof![Just(HostMask::Full), structured, elementwise]
}

fn to_mask(m: &HostMask, shapes: &[Vec<i64>]) -> Mask {
    match m {
        HostMask::Full => Mask::Full,
        HostMask::Structured(keep) => Mask::Structured(StructuredMask::new(keep.clone())),
        HostMask::Elementwise(bits) => Mask::Elementwise(
            bits.iter()
                .zip(shapes)
                .map(|(b, s)| {
                    let v: Vec<f32> = b.iter().map(|&x| if x { 1.0 } else { 0.0 }).collect();
                    Some(Tensor::from_slice(&v).reshape(&s[..]))
                })
                .collect(),
        ),
    }
}

/// Whether element `flat` of tensor `t` is kept, from the host description alone.
fn keeps(m: &HostMask, t: usize, shape: &[i64], flat: i64) -> bool {
    match m {
        HostMask::Full => true,
        HostMask::Elementwise(bits) => bits[t][flat as usize],
        HostMask::Structured(keep) => {
            let mut rest = flat;
            let mut coords = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                coords[d] = rest % shape[d];
                rest /= shape[d];
            }
            coords.iter().enumerate().all(|(d, c)| keep[t][d].as_ref().is_none_or(|k| k.contains(c)))
        }
    }
}

fn case() -> impl Strategy<Value = (Vec<Vec<i64>>, Vec<HostMask>)> {
    shapes_strategy().prop_flat_map(|shapes| {
        let masks = prop::collection::vec(mask_strategy(shapes.clone()), 1..6);
        (Just(shapes), masks)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn coverage_counts_equal_the_number_of_masks_keeping_each_element((shapes, masks) in case()) {
        let mut coverage = Coverage::new(&shapes, Device::Cpu);
        for m in &masks {
            coverage.add(&to_mask(m, &shapes));
        }
        for (t, (counts, shape)) in coverage.counts().iter().zip(&shapes).enumerate() {
            let got: Vec<f32> = Vec::try_from(&counts.flatten(0, -1)).unwrap();
            for (flat, g) in got.iter().enumerate() {
                let want = masks.iter().filter(|m| keeps(m, t, shape, flat as i64)).count();
                prop_assert_eq!(*g as usize, want, "tensor {} element {}", t, flat);
            }
        }
    }

    #[test]
    fn extract_then_scatter_keeps_exactly_the_kept_elements((shapes, masks) in case()) {
        let names = (0..shapes.len()).map(|i| format!("t{i}")).collect();
        let n: i64 = shapes.iter().map(|s| s.iter().product::<i64>()).sum();
        let mut next = 1.0;
        let tensors = shapes.iter().map(|s| {
            let count = s.iter().product::<i64>();
            let t = Tensor::arange_start(next as i64, next as i64 + count, (Kind::Float, Device::Cpu)).reshape(&s[..]);
            next += count as f64;
            t
        }).collect();
        let params = ParamSet::new(names, tensors).unwrap();
        prop_assert_eq!(params.numel() as i64, n);
        for m in &masks {
            let mask = to_mask(m, &shapes);
            let sub = mask.extract(&params);
            prop_assert_eq!(sub.shapes(), mask.sub_shapes(&shapes));
            if !matches!(m, HostMask::Elementwise(_)) {
                prop_assert_eq!(mask.kept_params(&shapes), sub.numel() as i64);
            }
            let back = mask.scatter(&sub, &shapes);
            for (t, (b, p)) in back.tensors().iter().zip(params.tensors()).enumerate() {
                let got: Vec<f32> = Vec::try_from(&b.flatten(0, -1)).unwrap();
                let orig: Vec<f32> = Vec::try_from(&p.flatten(0, -1)).unwrap();
                for (flat, (g, o)) in got.iter().zip(&orig).enumerate() {
                    let want = if keeps(m, t, &shapes[t], flat as i64) { *o } else { 0.0 };
                    prop_assert_eq!(*g, want, "tensor {} element {}", t, flat);
                }
            }
        }
    }
}

#[test]
fn width_prefix_and_unit_masks_cover_the_right_rows_and_columns() {
    use fl_core::{Structure, TensorSpec, UnitGroup, UnitMember};
    let spec = |n: &str, s: Vec<i64>| TensorSpec::new(n, s);
    // fc1: 4 hidden units, fc2 reads them as columns.
    let s = Structure {
        tensors: vec![spec("fc1.weight", vec![4, 3]), spec("fc1.bias", vec![4]), spec("fc2.weight", vec![2, 4])],
        groups: vec![UnitGroup {
            name: "fc1".into(),
            units: 4,
            members: vec![
                UnitMember { tensor: 0, dim: 0, block: 1 },
                UnitMember { tensor: 1, dim: 0, block: 1 },
                UnitMember { tensor: 2, dim: 1, block: 1 },
            ],
        }],
    };
    let m = s.width_prefix_mask(0.5).unwrap();
    assert_eq!(m.sub_shapes(&s.shapes()), vec![vec![2, 3], vec![2], vec![2, 2]]);
    let m = s.mask_from_units(&[Some(vec![1, 3])]).unwrap();
    let dense = m.dense(&s.shapes(), Device::Cpu);
    let bias: Vec<f32> = Vec::try_from(&dense[1]).unwrap();
    assert_eq!(bias, vec![0.0, 1.0, 0.0, 1.0]);
    let fc2: Vec<f32> = Vec::try_from(&dense[2].flatten(0, -1)).unwrap();
    assert_eq!(fc2, vec![0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
    assert!(s.mask_from_units(&[Some(vec![4])]).is_err(), "unit 4 of 4 is out of range");
}
