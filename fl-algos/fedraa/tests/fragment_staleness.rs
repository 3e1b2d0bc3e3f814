//! `fragment-polynomial` counts the merges of an arrival's own fragment since its dispatch.

use fl_algo_baselines::Polynomial;
use fl_algo_fedraa::FragmentPolynomial;
use fl_core::tch::Tensor;
use fl_core::{ClientUpdate, Mask, ParamSet, StalenessCtx, StalenessFn};

fn update(choice: Option<usize>, base_version: u64) -> ClientUpdate {
    let p = ParamSet::new(vec!["w".into()], vec![Tensor::zeros([1], fl_core::tch::kind::FLOAT_CPU)]).unwrap();
    ClientUpdate {
        base_version,
        choice,
        ..fl_core::testing::client_update(p.shallow_clone(), p.shallow_clone(), Mask::Full, 1)
    }
}

#[test]
fn staleness_counts_only_the_merges_of_the_same_fragment() {
    let mut f = FragmentPolynomial::new(Polynomial { a: 1.0 });
    let global = update(None, 0).base;
    // (fragment, dispatched at version, merged into version) → merges of that fragment since
    // dispatch, worked by hand; weight 1/(1 + s) with a = 1.
    let script = [
        (Some(0), 0, 0, 0), // fragment 0's first merge
        (Some(1), 0, 1, 0), // fragment 1 untouched since version 0, though the model moved
        (Some(0), 0, 2, 1), // fragment 0 merged once (version 0) since dispatch
        (Some(0), 1, 3, 1), // since version 1: the merge into version 2
        (Some(1), 3, 4, 0), // fragment 1 last merged into version 1
        (Some(1), 0, 5, 2), // since version 0: versions 1 and 4
        (None, 2, 6, 4),    // no fragment: the merges of the whole model, 6 − 2
    ];
    for (choice, base, now, lag) in script {
        let u = update(choice, base);
        let w = f.weight(&StalenessCtx { versions: now - base, seconds: 0.0, update: &u, global: &global });
        assert_eq!(w, 1.0 / (1.0 + lag as f64), "fragment {choice:?} dispatched at {base}, merged into {now}");
    }
}

#[test]
fn updates_of_one_fragment_in_the_same_aggregation_are_equally_fresh() {
    let mut f = FragmentPolynomial::new(Polynomial { a: 1.0 });
    let global = update(None, 0).base;
    for _ in 0..3 {
        let u = update(Some(2), 0);
        assert_eq!(f.weight(&StalenessCtx { versions: 0, seconds: 0.0, update: &u, global: &global }), 1.0);
    }
    let u = update(Some(2), 0);
    assert_eq!(f.weight(&StalenessCtx { versions: 1, seconds: 0.0, update: &u, global: &global }), 0.5);
}
