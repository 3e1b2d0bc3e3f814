//! Golden values of the staleness functions `hinge` (FedAsync) and `inv-sqrt` (FedBuff), built
//! through the registry so that the registered names and default parameters are checked too.

// Referenced so that the crate's registrations are linked into this test binary (inventory
// issue #50).
use fl_algo_baselines as _;
use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::tch::Tensor;
use fl_core::{Mask, ParamSet, StalenessCtx, StalenessFn};

/// The registered staleness function `name`, built from the TOML parameters `params`.
fn build(name: &str, params: &str) -> Box<dyn StalenessFn> {
    let c = Registry::get().unwrap().component(ComponentKind::Staleness, name, "test", "staleness").unwrap();
    let Builder::Staleness(build) = c.build else { unreachable!("registry keys builders by kind") };
    build(&Params::new("test", "staleness", params.parse().unwrap())).unwrap()
}

/// The weights of `f` at each staleness in `versions` (the seconds are set far from 0 so that a
/// function reading them instead of the versions would show).
fn weights(f: &mut dyn StalenessFn, versions: &[u64]) -> Vec<f64> {
    let global = ParamSet::new(vec!["p".into()], vec![Tensor::from_slice(&[1.0f32])]).unwrap();
    let update = fl_core::testing::client_update(global.shallow_clone(), global.map(|t| t * 0.0), Mask::Full, 1);
    versions
        .iter()
        .map(|&v| f.weight(&StalenessCtx { versions: v, seconds: 1000.0, update: &update, global: &global }))
        .collect()
}

fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-12, "got {got:?}, want {want:?}");
    }
}

#[test]
fn hinge_with_its_default_parameters() {
    // FedAsync (Xie, Koyejo, Gupta 2019): s_{a,b}(t − τ) = 1 if t − τ ≤ b, else 1 / (a (t − τ − b) + 1).
    // With the defaults a = 10, b = 4: staleness 0 and 4 (on the hinge) weigh 1; 5 weighs
    // 1 / (10·1 + 1) = 1/11, 6 weighs 1 / (10·2 + 1) = 1/21, 14 weighs 1 / (10·10 + 1) = 1/101.
    // Both branches give 1 at s = b, so the side the hinge point falls on changes no weight.
    let mut f = build("hinge", "");
    assert_close(&weights(&mut *f, &[0, 4, 5, 6, 14]), &[1.0, 1.0, 1.0 / 11.0, 1.0 / 21.0, 1.0 / 101.0]);
}

#[test]
fn hinge_with_other_parameters() {
    // a = 0.5, b = 2: staleness 1 and 2 weigh 1; 3 weighs 1 / (0.5·1 + 1) = 2/3,
    // 6 weighs 1 / (0.5·4 + 1) = 1/3, 10 weighs 1 / (0.5·8 + 1) = 1/5.
    let mut f = build("hinge", "a = 0.5\nb = 2.0");
    assert_close(&weights(&mut *f, &[1, 2, 3, 6, 10]), &[1.0, 1.0, 2.0 / 3.0, 1.0 / 3.0, 0.2]);
}

#[test]
fn inverse_square_root() {
    // FedBuff's 1 / √(1 + s): 1/√1 = 1, 1/√4 = 1/2, 1/√9 = 1/3, 1/√100 = 1/10.
    let mut f = build("inv-sqrt", "");
    assert_close(&weights(&mut *f, &[0, 3, 8, 99]), &[1.0, 0.5, 1.0 / 3.0, 0.1]);
}
