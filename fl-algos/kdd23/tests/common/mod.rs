//! Shared fixtures of the mask-policy tests: a small model structure, a random global model,
//! and one round of masks.

use fl_core::rng;
use fl_core::tch::{Kind, Tensor};
use fl_core::{Mask, MaskCtx, MaskPolicy, ParamSet, Structure, TensorSpec};

pub fn structure() -> Structure {
    let t = |name: &str, shape: Vec<i64>| TensorSpec::new(name, shape);
    Structure {
        tensors: vec![t("fc1.weight", vec![8, 10]), t("fc1.bias", vec![8]), t("fc2.weight", vec![2, 8])],
        groups: vec![],
    }
}

/// [`structure`] with its 8 hidden neurons as a unit group (fc1's rows and bias, fc2's columns).
pub fn structure_with_neurons() -> Structure {
    let member = |tensor, dim| fl_core::UnitMember { tensor, dim, block: 1 };
    Structure {
        groups: vec![fl_core::UnitGroup {
            name: "fc1".into(),
            units: 8,
            members: vec![member(0, 0), member(1, 0), member(2, 1)],
        }],
        ..structure()
    }
}

/// Per unit-granular mask: the neurons it keeps, after checking every slice of a neuron agrees.
pub fn kept_neurons(m: &Mask) -> Vec<bool> {
    let Mask::Elementwise(ts) = m else { panic!("expected an elementwise mask, got {m:?}") };
    let (fc1, bias, fc2) = (ts[0].as_ref().unwrap(), ts[1].as_ref().unwrap(), ts[2].as_ref().unwrap());
    (0..8)
        .map(|n| {
            let row = fc1.get(n).mean(Kind::Double).double_value(&[]);
            assert!(row == 0.0 || row == 1.0, "neuron {n}: its row is all kept or all masked");
            assert_eq!(bias.double_value(&[n]), row, "neuron {n}: bias as its row");
            assert_eq!(fc2.select(1, n).mean(Kind::Double).double_value(&[]), row, "neuron {n}: fc2 column as its row");
            row == 1.0
        })
        .collect()
}

pub fn global(s: &Structure) -> ParamSet {
    let tensors = s.tensors.iter().map(|t| Tensor::randn(&t.shape[..], fl_core::tch::kind::FLOAT_CPU)).collect();
    ParamSet::new(s.names(), tensors).unwrap()
}

/// Masks of every client in `round`, in client order, all on the same device.
pub fn round_masks(
    policy: &mut dyn MaskPolicy,
    s: &Structure,
    g: &ParamSet,
    round: u64,
    clients: usize,
    rng: &mut rng::Rng,
) -> Vec<Mask> {
    round_masks_on(policy, s, g, round, &vec![1.0; clients], rng)
}

/// Masks of every client in `round`; client n's device has throughput `flops_per_s[n]`.
pub fn round_masks_on(
    policy: &mut dyn MaskPolicy,
    s: &Structure,
    g: &ParamSet,
    round: u64,
    flops_per_s: &[f64],
    rng: &mut rng::Rng,
) -> Vec<Mask> {
    round_masks_result(policy, s, g, round, flops_per_s, rng).into_iter().map(|m| m.unwrap()).collect()
}

/// [`round_masks_on`] with each client's result as it came.
fn round_masks_result(
    policy: &mut dyn MaskPolicy,
    s: &Structure,
    g: &ParamSet,
    round: u64,
    flops_per_s: &[f64],
    rng: &mut rng::Rng,
) -> Vec<fl_core::Result<Mask>> {
    let profiles = fl_core::testing::profiles(flops_per_s);
    (0..profiles.len())
        .map(|client| {
            policy.mask(&mut MaskCtx {
                client,
                profiles: &profiles,
                version: round,
                choice: None,
                structure: s,
                global: g,
                client_state: None,
                rng,
            })
        })
        .collect()
}

/// The error of `policy` asked for client 0's mask in round 1 (of two identical devices).
pub fn mask_error(policy: &mut dyn MaskPolicy, s: &Structure, g: &ParamSet) -> String {
    let mut rng = rng::stream(1, &[0]);
    round_masks_result(policy, s, g, 1, &[1.0, 1.0], &mut rng).remove(0).unwrap_err().to_string()
}

/// Share of `fc1.weight` a mask keeps; checks the other tensors are unmasked.
pub fn fc1_share(m: &Mask) -> f64 {
    match m {
        Mask::Full => 1.0,
        Mask::Elementwise(ts) => {
            assert!(ts[1].is_none() && ts[2].is_none(), "only the maskable tensor is masked");
            ts[0].as_ref().unwrap().mean(Kind::Double).double_value(&[])
        }
        Mask::Structured(_) => panic!("region masks are elementwise"),
    }
}
