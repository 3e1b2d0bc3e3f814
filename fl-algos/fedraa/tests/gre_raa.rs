//! Gre-RAA's rule over random profiles: only fragments within K, the least-updated among them,
//! ties drawn uniformly; the ablations' rules.

use fl_algo_fedraa::{gre_raa, min_priority};
use fl_core::rng;
use proptest::prelude::*;

proptest! {
    #[test]
    fn gre_raa_picks_a_least_updated_fragment_within_k(
        costs in prop::collection::vec(0.01f64..10.0, 2..6),
        counts in prop::collection::vec(0u64..4, 6),
        k in 0.01f64..10.0,
        seed in 0u64..1000,
    ) {
        let m = costs.len();
        let counts = &counts[..m];
        let (j, fallback) = gre_raa(&costs, k, counts, &mut rng::stream(seed, &[0]));
        let feasible: Vec<usize> = (0..m).filter(|&i| costs[i] <= k).collect();
        prop_assert_eq!(fallback, feasible.is_empty());
        if feasible.is_empty() {
            // The cheapest fragment, since none meets K.
            prop_assert!(costs.iter().all(|c| costs[j] <= *c));
        } else {
            prop_assert!(costs[j] <= k, "fragment {} costs {} > K = {}", j, costs[j], k);
            let least = feasible.iter().map(|&i| counts[i]).min().unwrap();
            prop_assert_eq!(counts[j], least);
        }
    }

    #[test]
    fn min_priority_ignores_cost(counts in prop::collection::vec(0u64..4, 2..6), seed in 0u64..1000) {
        let j = min_priority(&counts, &mut rng::stream(seed, &[0]));
        prop_assert_eq!(counts[j], *counts.iter().min().unwrap());
    }
}

#[test]
fn ties_are_broken_uniformly() {
    // Fragments 0, 2 and 3 are within K with the fewest updates; 1 has more, 4 is too slow.
    let costs = [1.0, 1.0, 2.0, 0.5, 9.0];
    let counts = [3, 4, 3, 3, 0];
    let mut rng = rng::stream(5, &[0]);
    let mut hits = [0usize; 5];
    let draws = 30_000;
    for _ in 0..draws {
        hits[gre_raa(&costs, 2.0, &counts, &mut rng).0] += 1;
    }
    assert_eq!((hits[1], hits[4]), (0, 0), "{hits:?}");
    for j in [0, 2, 3] {
        let share = hits[j] as f64 / draws as f64;
        assert!((share - 1.0 / 3.0).abs() < 0.015, "fragment {j}: share {share}, {hits:?}");
    }
}
