//! Client sampling: the variance of a sample mean with and without replacement against the
//! paper's formulas (§2.2; tabulated to four decimals, and measured over many draws), and the
//! invariants of the draws.

use fl_algo_asyncnc::Sampling;
use fl_algo_asyncnc::sampling::{draw, merge_duplicates, variance_factor};
use fl_core::rng;
use proptest::prelude::*;

#[test]
fn variance_factors_match_hand_computed_values() {
    // C = 10; columns J, 1/J, (C − J)/(J(C − 1)), printed to four decimals.
    let table = [
        (3, 0.3333, 0.2593),
        (4, 0.2500, 0.1667),
        (5, 0.2000, 0.1111),
        (6, 0.1667, 0.0741),
        (7, 0.1429, 0.0476),
        (8, 0.1250, 0.0278),
    ];
    for (j, with, without) in table {
        assert!((variance_factor(10, j, Sampling::WithReplacement) - with).abs() < 5e-5, "J = {j}");
        assert!((variance_factor(10, j, Sampling::WithoutReplacement) - without).abs() < 5e-5, "J = {j}");
    }
}

#[test]
fn sample_means_have_the_variance_of_the_formulas() {
    // A population of 10 scalars θ_k = k² (ν² its variance); 40,000 samples of each size and
    // kind; the mean squared error of the sample mean over ν² against the factor, within 4%
    // (the Monte Carlo error is about 1%; the two kinds differ by 22% to 78%).
    let population: Vec<f64> = (0..10).map(|k| (k * k) as f64).collect();
    let mean = population.iter().sum::<f64>() / 10.0;
    let nu2 = population.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 10.0;
    let mut rng = rng::stream(11, &[1]);
    for j in 3..=8 {
        for sampling in [Sampling::WithReplacement, Sampling::WithoutReplacement] {
            let trials = 40_000;
            let mse = (0..trials)
                .map(|_| {
                    let s = draw(&mut rng, 10, j, sampling);
                    let m = s.iter().map(|&c| population[c]).sum::<f64>() / j as f64;
                    (m - mean).powi(2)
                })
                .sum::<f64>()
                / trials as f64;
            let want = variance_factor(10, j, sampling);
            assert!((mse / nu2 / want - 1.0).abs() < 0.04, "J = {j}, {sampling:?}: {} vs {want}", mse / nu2);
        }
    }
}

proptest! {
    #[test]
    fn draws_are_in_range_and_distinct_without_replacement(seed in 0u64..1000, clients in 1usize..30, j in 1usize..30) {
        let mut rng = rng::stream(seed, &[2]);
        let with = draw(&mut rng, clients, j, Sampling::WithReplacement);
        prop_assert_eq!(with.len(), j);
        prop_assert!(with.iter().all(|&c| c < clients));
        let merged = merge_duplicates(&with);
        prop_assert_eq!(merged.iter().map(|(_, k)| *k as usize).sum::<usize>(), j);
        let mut ids: Vec<usize> = merged.iter().map(|(c, _)| *c).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), merged.len());
        if j <= clients {
            let mut without = draw(&mut rng, clients, j, Sampling::WithoutReplacement);
            prop_assert_eq!(without.len(), j);
            without.sort_unstable();
            without.dedup();
            prop_assert_eq!(without.len(), j);
            prop_assert!(without.iter().all(|&c| c < clients));
        }
    }
}
