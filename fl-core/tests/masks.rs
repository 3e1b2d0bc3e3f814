//! Property tests of masks: coverage counts equal, element by element, the number of client
//! masks that keep the element (computed independently on the host), and a structured mask's
//! extract → scatter round trip keeps exactly the kept elements, with tensors trained, frozen
//! (held, never covered) or dropped (absent from the sub-model, zero when scattered back).
//! Depth windows give each tensor of a stack of blocks its role.

use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{Coverage, Mask, ParamSet, StructuredMask, TensorRole};
use proptest::prelude::*;

/// Host-side description of a mask, from which both the tensor mask and the expected
/// membership are derived.
#[derive(Debug, Clone)]
enum HostMask {
    Full,
    /// Per tensor, per dim: kept indices (None: all); per tensor its role (empty: trained).
    Structured(Vec<Vec<Option<Vec<i64>>>>, Vec<TensorRole>),
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
    let role = prop_oneof![Just(TensorRole::Train), Just(TensorRole::Freeze), Just(TensorRole::Drop)];
    let roles = prop_oneof![Just(Vec::new()), prop::collection::vec(role, shapes.len())];
    let structured =
        (shapes.iter().map(|s| s.iter().map(|&n| subset(n)).collect::<Vec<_>>()).collect::<Vec<_>>(), roles)
            .prop_map(|(keep, roles)| HostMask::Structured(keep, roles));
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
        HostMask::Structured(keep, roles) => {
            Mask::Structured(StructuredMask::new(keep.clone()).with_roles(roles.clone()))
        }
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

/// The role of tensor `t`, from the host description.
fn role(m: &HostMask, t: usize) -> TensorRole {
    match m {
        HostMask::Structured(_, roles) => roles.get(t).copied().unwrap_or(TensorRole::Train),
        _ => TensorRole::Train,
    }
}

/// Whether element `flat` of tensor `t` is trained, from the host description alone.
fn trains(m: &HostMask, t: usize, shape: &[i64], flat: i64) -> bool {
    role(m, t) == TensorRole::Train && keeps(m, t, shape, flat)
}

/// Whether element `flat` of tensor `t` is in the sub-model (trained or frozen), from the host
/// description alone.
fn holds(m: &HostMask, t: usize, shape: &[i64], flat: i64) -> bool {
    role(m, t) != TensorRole::Drop && keeps(m, t, shape, flat)
}

/// Whether element `flat` of tensor `t` is inside the kept indices, whatever its role.
fn keeps(m: &HostMask, t: usize, shape: &[i64], flat: i64) -> bool {
    match m {
        HostMask::Full => true,
        HostMask::Elementwise(bits) => bits[t][flat as usize],
        HostMask::Structured(keep, _) => {
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
                let want = masks.iter().filter(|m| trains(m, t, shape, flat as i64)).count();
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
            let held = mask.held(shapes.len());
            let names: Vec<&String> = held.iter().map(|&t| &params.names()[t]).collect();
            prop_assert_eq!(sub.names().iter().collect::<Vec<_>>(), names, "the sub-model keeps the held tensors' names");
            prop_assert_eq!(mask.frozen(shapes.len()), held.iter().map(|&t| role(m, t) == TensorRole::Freeze).collect::<Vec<_>>());
            if !matches!(m, HostMask::Elementwise(_)) {
                prop_assert_eq!(mask.held_per_tensor(&shapes).iter().sum::<i64>(), sub.numel() as i64);
                let trained: i64 = shapes.iter().enumerate()
                    .map(|(t, s)| (0..s.iter().product::<i64>()).filter(|&f| trains(m, t, s, f)).count() as i64)
                    .sum();
                prop_assert_eq!(mask.kept_params(&shapes), trained);
            }
            let back = mask.scatter_named(&sub, params.names(), &shapes);
            prop_assert_eq!(back.names(), params.names());
            for (t, (b, p)) in back.tensors().iter().zip(params.tensors()).enumerate() {
                let got: Vec<f32> = Vec::try_from(&b.flatten(0, -1)).unwrap();
                let orig: Vec<f32> = Vec::try_from(&p.flatten(0, -1)).unwrap();
                for (flat, (g, o)) in got.iter().zip(&orig).enumerate() {
                    let want = if holds(m, t, &shapes[t], flat as i64) { *o } else { 0.0 };
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
    for bad in [0.0, -0.5, 1.5, f64::NAN] {
        let err = s.width_prefix_mask(bad).unwrap_err().to_string();
        assert!(err.contains("width ratio") && err.contains("(0, 1]"), "{bad}: {err}");
    }
}

/// A stack of three blocks (one tensor each) over a stem, with early exits after one and two
/// blocks and a final head (two tensors each, a norm and a classifier).
fn stack() -> fl_core::Structure {
    use fl_core::{Depth, TensorSpec};
    let t = |name: &str, depth| TensorSpec::new(name, vec![2, 2]).at(depth);
    let tensors = vec![
        t("stem", Depth::Stem),
        t("block0", Depth::Block(0)),
        t("block1", Depth::Block(1)),
        t("block2", Depth::Block(2)),
        t("exit1.norm", Depth::Exit(1)),
        t("exit1.head", Depth::Exit(1)),
        t("exit2.norm", Depth::Exit(2)),
        t("exit2.head", Depth::Exit(2)),
        t("norm", Depth::Head),
        t("head", Depth::Head),
    ];
    fl_core::Structure { tensors, groups: vec![] }
}

#[test]
fn a_depth_window_freezes_below_trains_inside_and_reads_out_at_its_top() {
    use TensorRole::{Drop as D, Freeze as F, Train as T};
    let s = stack();
    assert_eq!((s.blocks(), s.exits()), (3, vec![1, 2]));
    //                         stem b0 b1 b2 e1 e1 e2 e2 norm head
    assert_eq!(s.depth_window(1..2).unwrap(), [F, F, T, D, D, D, T, T, D, D]);
    assert_eq!(s.depth_window(0..1).unwrap(), [T, T, D, D, T, T, D, D, D, D]);
    assert_eq!(s.depth_window(2..3).unwrap(), [F, F, F, T, D, D, D, D, T, T]);
    assert_eq!(s.depth_window(0..3).unwrap(), [T, T, T, T, D, D, D, D, T, T]);
    for bad in [1..1, 2..4, 0..0] {
        let err = s.depth_window(bad.clone()).unwrap_err().to_string();
        assert!(err.contains("depth window") && err.contains("3 blocks"), "{bad:?}: {err}");
    }
    // Inner exits: the window 0..3 reading out after 1 and 2 blocks too, in order.
    assert_eq!(s.depth_window_with_exits(0..3, &[1, 2]).unwrap(), [T, T, T, T, T, T, T, T, T, T]);
    assert_eq!(s.depth_window_with_exits(1..3, &[2]).unwrap(), [F, F, T, T, D, D, T, T, T, T]);
    assert!(s.depth_window_with_exits(1..3, &[1]).is_err(), "an exit at the window's start reads a frozen block");
    let names: Vec<String> =
        ["stem", "block0", "block1", "exit2.norm", "exit2.head", "norm", "head"].map(String::from).to_vec();
    assert_eq!(s.readouts(&names), [2, 3]);
    // Without an exit after one block, a window cannot end there.
    let mut no_exit1 = stack();
    no_exit1.tensors.retain(|t| !t.name.starts_with("exit1"));
    assert!(no_exit1.depth_window(0..1).is_err());
    // As a mask: the sub-model holds stem, block 0, block 1 and exit 2; only block 1 and exit 2
    // are covered; the upload is their elements, the download theirs and the frozen ones'.
    let mask = s.submodel(1..2, &[]).unwrap();
    let shapes = s.shapes();
    assert_eq!(mask.held(shapes.len()), [0, 1, 2, 6, 7]);
    assert_eq!(mask.frozen(shapes.len()), [true, true, false, false, false]);
    assert_eq!(mask.kept_params(&shapes), 12);
    assert_eq!(mask.held_per_tensor(&shapes).iter().sum::<i64>(), 20);
    let covered: Vec<f64> =
        mask.dense(&shapes, Device::Cpu).iter().map(|d| d.sum(Kind::Double).double_value(&[])).collect();
    assert_eq!(covered, [0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 4.0, 4.0, 0.0, 0.0]);
}

#[test]
fn roles_for_another_number_of_tensors_or_too_few_held_are_refused() {
    let shapes = vec![vec![2], vec![3], vec![4]];
    let keep = vec![vec![None]; 3];
    let short = StructuredMask::new(keep.clone()).with_roles(vec![TensorRole::Train; 2]);
    assert!(short.validate(&shapes).is_err());
    let all_but_one = StructuredMask::new(keep).with_roles(vec![TensorRole::Drop, TensorRole::Drop, TensorRole::Train]);
    let err = all_but_one.validate(&shapes).unwrap_err().to_string();
    assert!(err.contains("at least two tensors"), "{err}");
}
