//! Properties of the partitioners on random label vectors: every sample goes to exactly one
//! client, the same seed gives the same split, and each scheme's own promise holds (even
//! sizes, the Dirichlet limit α → ∞, label-aligned shards, the even-share cap, min_samples,
//! the local train share, a recorded draw replayed, asyncnc's floor-and-drop remainder).

mod common;

use common::build_partitioner;
use fl_core::rng::{Rng, stream};
use fl_core::{Partitioner, Validate};
use fl_data::partition::Cap;
use fl_data::{Dirichlet, DirichletConfig, Iid, Shards, ShardsConfig};
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, Gamma};

fn rng(seed: u64) -> Rng {
    stream(seed, &[fl_core::rng::tag::PARTITION])
}

fn dirichlet(alpha: f64, min_samples: usize, cap: Cap) -> Dirichlet {
    Dirichlet { cfg: DirichletConfig { alpha, min_samples, cap, ..DirichletConfig::default() } }
}

/// Asserts the `Partitioner` contract: `clients` lists, each sorted, together a permutation of
/// `0..n`.
fn assert_exact_cover(parts: &[Vec<i64>], n: usize, clients: usize) {
    assert_eq!(parts.len(), clients);
    for p in parts {
        assert!(p.windows(2).all(|w| w[0] < w[1]), "a client's list is not strictly ascending: {p:?}");
    }
    let mut all: Vec<i64> = parts.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..n as i64).collect::<Vec<_>>(), "not every sample assigned exactly once");
}

/// `dirichlet` with `remainder = "drop"`, built from its TOML table as an experiment builds it.
fn dirichlet_drop(alpha: f64, min_samples: usize, cap: &str) -> Box<dyn Partitioner> {
    let table = format!("alpha = {alpha:?}\nmin_samples = {min_samples}\ncap = \"{cap}\"\nremainder = \"drop\"");
    build_partitioner("dirichlet", &table).unwrap()
}

/// Asserts what `remainder = "drop"` promises: `clients` lists, no index twice, and per class k
/// fewer than one sample per client left over (each client's ⌊p_j · n_k⌋ falls short of
/// p_j · n_k by less than one): n_k − clients < assigned_k ≤ n_k. Returns the number dropped.
fn assert_drop_invariants(parts: &[Vec<i64>], labels: &[i64], classes: usize, clients: usize) -> usize {
    assert_eq!(parts.len(), clients);
    let mut all: Vec<i64> = parts.iter().flatten().copied().collect();
    all.sort_unstable();
    assert!(all.windows(2).all(|w| w[0] < w[1]), "an index is given twice");
    assert!(all.iter().all(|&i| (0..labels.len() as i64).contains(&i)), "an index is out of range");
    let assigned = histograms(&[all], labels, classes).remove(0);
    let global = histograms(&[(0..labels.len() as i64).collect()], labels, classes).remove(0);
    for (k, (&a, &nk)) in assigned.iter().zip(&global).enumerate() {
        assert!(a <= nk && nk - a < clients, "class {k}: {a} of {nk} assigned among {clients} clients");
    }
    labels.len() - assigned.iter().sum::<usize>()
}

/// `hist[client][class]`.
fn histograms(parts: &[Vec<i64>], labels: &[i64], classes: usize) -> Vec<Vec<usize>> {
    parts
        .iter()
        .map(|p| {
            let mut h = vec![0; classes];
            for &i in p {
                h[labels[i as usize] as usize] += 1;
            }
            h
        })
        .collect()
}

/// (labels, classes): 1..=12 classes, 1..600 samples.
fn labels_strategy() -> impl Strategy<Value = (Vec<i64>, usize)> {
    (1usize..=12).prop_flat_map(|classes| (prop::collection::vec(0..classes as i64, 1..600), Just(classes)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_partitioner_assigns_each_sample_exactly_once(
        (labels, classes) in labels_strategy(),
        clients in 1usize..25,
        log_alpha in -2.0f64..2.0,
        min_samples in 0usize..4,
        even_share in any::<bool>(),
        per in 1usize..4,
        seed in any::<u64>(),
    ) {
        let n = labels.len();
        let c = classes as i64;
        if clients <= n {
            let parts = Iid.partition(&labels, c, clients, &mut rng(seed)).unwrap();
            assert_exact_cover(&parts, n, clients);
            let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
            prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "iid sizes {sizes:?}");
        }
        if clients * per <= n {
            let parts = Shards { cfg: ShardsConfig { shards_per_client: per } }.partition(&labels, c, clients, &mut rng(seed)).unwrap();
            assert_exact_cover(&parts, n, clients);
        }
        if clients * min_samples <= n {
            let cap = if even_share { Cap::EvenShare } else { Cap::None };
            // With a minimum, a low α can exhaust the draws; that is an error value, not a wrong split.
            match dirichlet(10f64.powf(log_alpha), min_samples, cap).partition(&labels, c, clients, &mut rng(seed)) {
                Ok(parts) => {
                    assert_exact_cover(&parts, n, clients);
                    prop_assert!(parts.iter().all(|p| p.len() >= min_samples));
                }
                Err(e) => prop_assert!(min_samples > 0 && e.to_string().contains("after 1000 draws"), "{e}"),
            }
        }
    }

    #[test]
    fn same_seed_gives_the_same_partition(
        (labels, classes) in labels_strategy(),
        clients in 1usize..10,
        seed in any::<u64>(),
    ) {
        prop_assume!(clients * 2 <= labels.len());
        let c = classes as i64;
        let schemes: [Box<dyn Partitioner>; 3] =
            [Box::new(Iid), Box::new(Shards { cfg: ShardsConfig::default() }), Box::new(dirichlet(0.3, 0, Cap::EvenShare))];
        for p in &schemes {
            let a = p.partition(&labels, c, clients, &mut rng(seed)).unwrap();
            let b = p.partition(&labels, c, clients, &mut rng(seed)).unwrap();
            prop_assert_eq!(&a, &b);
        }
    }

    /// With α = 10⁴ every client's class histogram is the global one up to sampling noise.
    /// Bound: p ~ Dir(α·1_C) has Var(p_j) = (1/C)(1 − 1/C)/(Cα + 1) ≤ 1/(4(2α + 1)) for C ≥ 2,
    /// so sd(p_j) ≤ 0.0036 and |p_j − 1/C| ≤ 0.025 is a 7-sd event (probability < 1e-11 per
    /// check). Cutting at ⌊n_k · cumsum⌋ moves each count by less than one sample more on each
    /// side. Hence |count_jk − n_k/C| ≤ 0.025·n_k + 2. (Without the cap, which is what makes
    /// counts depend on earlier classes.)
    #[test]
    fn dirichlet_with_large_alpha_matches_the_global_class_mix(
        (labels, classes) in labels_strategy(),
        clients in 1usize..12,
        seed in any::<u64>(),
    ) {
        let parts = dirichlet(1e4, 0, Cap::None).partition(&labels, classes as i64, clients, &mut rng(seed)).unwrap();
        let global = histograms(&[(0..labels.len() as i64).collect()], &labels, classes).remove(0);
        for (j, h) in histograms(&parts, &labels, classes).iter().enumerate() {
            for (k, (&have, &nk)) in h.iter().zip(&global).enumerate() {
                let expect = nk as f64 / clients as f64;
                prop_assert!(
                    (have as f64 - expect).abs() <= 0.025 * nk as f64 + 2.0,
                    "client {j} class {k}: {have} samples, expected {expect:.1} of {nk}"
                );
            }
        }
    }

    /// The even-share cap: a client stops receiving classes once it holds N/C samples, so it
    /// never ends with more than N/C plus the largest class.
    #[test]
    fn dirichlet_even_share_cap_bounds_client_sizes(
        (labels, classes) in labels_strategy(),
        clients in 1usize..12,
        log_alpha in -2.0f64..1.0,
        seed in any::<u64>(),
    ) {
        let parts = dirichlet(10f64.powf(log_alpha), 0, Cap::EvenShare).partition(&labels, classes as i64, clients, &mut rng(seed)).unwrap();
        let largest_class = (0..classes as i64).map(|k| labels.iter().filter(|&&l| l == k).count()).max().unwrap();
        let bound = labels.len() as f64 / clients as f64 + largest_class as f64;
        prop_assert!(parts.iter().all(|p| (p.len() as f64) < bound));
    }

    /// `local_train_share` keeps a random ⌊share · n_j⌋ of each client's samples of the same
    /// draw (PFLlib's local train split): a subset per client, so no sample has two clients.
    #[test]
    fn dirichlet_local_train_share_keeps_that_share_of_each_clients_draw(
        (labels, classes) in labels_strategy(),
        clients in 1usize..12,
        share in 0.05f64..1.0,
        seed in any::<u64>(),
    ) {
        let whole = dirichlet(0.3, 0, Cap::EvenShare);
        let local = Dirichlet { cfg: DirichletConfig { local_train_share: share, ..whole.cfg.clone() } };
        let all = whole.partition(&labels, classes as i64, clients, &mut rng(seed)).unwrap();
        let kept = local.partition(&labels, classes as i64, clients, &mut rng(seed)).unwrap();
        for (a, k) in all.iter().zip(&kept) {
            prop_assert_eq!(k.len(), (share * a.len() as f64).floor() as usize);
            prop_assert!(k.windows(2).all(|w| w[0] < w[1]), "a client's list is not strictly ascending");
            prop_assert!(k.iter().all(|i| a.binary_search(i).is_ok()), "a kept sample was not the client's");
        }
    }

    /// A recorded draw replayed on a pool of any size: every sample goes to exactly one client,
    /// a client never gets a label it did not record, and each client's count of a label is
    /// its recorded count scaled to the pool, within one sample.
    #[test]
    fn dirichlet_replays_recorded_counts_in_proportion_on_any_pool(
        (labels, classes) in labels_strategy(),
        clients in 1usize..8,
        recorded in prop::collection::vec(prop::collection::vec(0u64..50, 12), 8),
        seed in any::<u64>(),
    ) {
        // Client j records count recorded[j][k] of label k; client 0 holds every label at least once.
        let counts: Vec<Vec<[u64; 2]>> = (0..clients)
            .map(|j| {
                (0..classes as u64)
                    .map(|k| [k, recorded[j][k as usize] + u64::from(j == 0)])
                    .filter(|[_, c]| *c > 0)
                    .collect()
            })
            .collect();
        let d = Dirichlet { cfg: DirichletConfig { counts: Some(counts.clone()), min_samples: 0, ..DirichletConfig::default() } };
        let parts = d.partition(&labels, classes as i64, clients, &mut rng(seed)).unwrap();
        assert_exact_cover(&parts, labels.len(), clients);
        let hist = histograms(&parts, &labels, classes);
        let wanted = |j: usize, k: usize| counts[j].iter().find(|[l, _]| *l == k as u64).map_or(0, |[_, c]| *c) as f64;
        for (j, h) in hist.iter().enumerate() {
            for (k, &got) in h.iter().enumerate() {
                let nk = labels.iter().filter(|&&l| l == k as i64).count() as f64;
                let total: f64 = (0..clients).map(|i| wanted(i, k)).sum();
                let expected = nk * wanted(j, k) / total;
                prop_assert!((got as f64 - expected).abs() < 1.0, "client {j} label {k}: {got} against {expected}");
                if wanted(j, k) == 0.0 {
                    prop_assert_eq!(got, 0);
                }
            }
        }
    }

    /// `remainder = "drop"` on random labels: no sample twice, per class fewer than one sample
    /// per client dropped, `min_samples` met (or the draws exhausted, an error value), and the
    /// same seed gives the same lists in the same order.
    #[test]
    fn dirichlet_drop_floors_each_share_and_drops_less_than_one_sample_per_client_per_class(
        (labels, classes) in labels_strategy(),
        clients in 1usize..25,
        log_alpha in -2.0f64..2.0,
        min_samples in 0usize..4,
        even_share in any::<bool>(),
        seed in any::<u64>(),
    ) {
        prop_assume!(clients * min_samples <= labels.len());
        let p = dirichlet_drop(10f64.powf(log_alpha), min_samples, if even_share { "even-share" } else { "none" });
        match p.partition(&labels, classes as i64, clients, &mut rng(seed)) {
            Ok(parts) => {
                assert_drop_invariants(&parts, &labels, classes, clients);
                prop_assert!(parts.iter().all(|p| p.len() >= min_samples));
                let again = p.partition(&labels, classes as i64, clients, &mut rng(seed)).unwrap();
                prop_assert_eq!(&parts, &again);
            }
            Err(e) => prop_assert!(min_samples > 0 && e.to_string().contains("after 1000 draws"), "{e}"),
        }
    }

    /// When every class fills a whole number of shards, each shard holds one label, so a client
    /// sees at most `shards_per_client` labels, and holds exactly that many shards' samples.
    #[test]
    fn shards_aligned_with_classes_give_at_most_shards_per_client_labels(
        clients in 1usize..15,
        per in 1usize..4,
        shard_size in 1usize..20,
        classes in 1usize..10,
        seed in any::<u64>(),
    ) {
        let shards = clients * per;
        // Deal the shards to classes round-robin, then list the labels sorted by class.
        let mut labels: Vec<i64> = (0..shards).flat_map(|s| std::iter::repeat_n((s % classes) as i64, shard_size)).collect();
        // Scramble sample order deterministically; the partitioner sorts by label itself.
        labels.reverse();
        let parts = Shards { cfg: ShardsConfig { shards_per_client: per } }.partition(&labels, classes as i64, clients, &mut rng(seed)).unwrap();
        assert_exact_cover(&parts, labels.len(), clients);
        for (j, h) in histograms(&parts, &labels, classes).iter().enumerate() {
            let distinct = h.iter().filter(|&&n| n > 0).count();
            prop_assert!(distinct <= per, "client {j} has {distinct} labels with {per} shards: {h:?}");
            prop_assert!(h.iter().all(|&n| n % shard_size == 0));
            prop_assert_eq!(h.iter().sum::<usize>(), per * shard_size);
        }
    }
}

#[test]
fn dirichlet_min_samples_is_met_on_a_skewed_split() {
    // 2,000 samples, 10 balanced classes, 20 clients, α = 0.1: a single draw often leaves a
    // client below 10 samples; the redraws must end with all at 10 or more.
    let labels: Vec<i64> = (0..2000).map(|i| i % 10).collect();
    let parts = dirichlet(0.1, 10, Cap::EvenShare).partition(&labels, 10, 20, &mut rng(1)).unwrap();
    assert_exact_cover(&parts, labels.len(), 20);
    assert!(parts.iter().all(|p| p.len() >= 10), "{:?}", parts.iter().map(Vec::len).collect::<Vec<_>>());
    // And the split is skewed: on average a client's largest class holds most of its samples.
    let hist = histograms(&parts, &labels, 10);
    let top_share: f64 =
        hist.iter().map(|h| *h.iter().max().unwrap() as f64 / h.iter().sum::<usize>() as f64).sum::<f64>() / 20.0;
    assert!(top_share > 0.5, "mean share of the top class {top_share}");
}

#[test]
fn dirichlet_client_weights_give_each_client_its_share_of_the_data() {
    // Co-S²P's E1 (Table 7): one NX with 8277 samples, three AGX 32GB with 24960, four AGX 64GB
    // with 36992; 12,000 samples of 10 classes.
    let weights = vec![8277.0, 24960.0, 24960.0, 24960.0, 36992.0, 36992.0, 36992.0, 36992.0];
    let total: f64 = weights.iter().sum();
    let labels: Vec<i64> = (0..12_000).map(|i| i % 10).collect();
    let weighted = |alpha: f64| Dirichlet {
        cfg: DirichletConfig { alpha, client_weights: weights.clone(), ..DirichletConfig::default() },
    };
    // Nearly the global mix (α = 100): every client within 10% of its share.
    let parts = weighted(100.0).partition(&labels, 10, 8, &mut rng(3)).unwrap();
    assert_exact_cover(&parts, labels.len(), 8);
    for (part, w) in parts.iter().zip(&weights) {
        let expected = 12_000.0 * w / total;
        assert!((part.len() as f64 - expected).abs() < 0.1 * expected, "{} against {expected}", part.len());
    }
    // E1's α = 1.5: label skew, yet the NX still holds the least and the AGX 64GB the most on average.
    let parts = weighted(1.5).partition(&labels, 10, 8, &mut rng(3)).unwrap();
    assert_exact_cover(&parts, labels.len(), 8);
    let sizes: Vec<f64> = parts.iter().map(|p| p.len() as f64).collect();
    let (agx32, agx64) = (sizes[1..4].iter().sum::<f64>() / 3.0, sizes[4..].iter().sum::<f64>() / 4.0);
    assert!(sizes[0] < agx32 && agx32 < agx64, "{sizes:?}");
    // Weights for another number of clients, or not positive: errors naming the key.
    let err = weighted(1.5).partition(&labels, 10, 7, &mut rng(3)).unwrap_err().to_string();
    assert!(err.contains("client_weights: 8 weights, the experiment has 7 clients"), "{err}");
    let bad = DirichletConfig { client_weights: vec![1.0, 0.0], ..DirichletConfig::default() };
    assert_eq!(bad.validate().unwrap_err().key, "client_weights");
}

#[test]
fn impossible_requests_are_clear_errors() {
    let labels: Vec<i64> = (0..30).map(|i| i % 3).collect();
    let err = Iid.partition(&labels, 3, 31, &mut rng(0)).unwrap_err().to_string();
    assert!(err.contains("31 clients but only 30 samples"), "{err}");
    let err = Shards { cfg: ShardsConfig { shards_per_client: 2 } }
        .partition(&labels, 3, 16, &mut rng(0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("32 shards, but only 30 samples"), "{err}");
    let err = dirichlet(0.5, 10, Cap::EvenShare).partition(&labels, 3, 4, &mut rng(0)).unwrap_err().to_string();
    assert!(err.contains("needs 40 samples, only 30 exist"), "{err}");
    // One class and a tiny α: nearly every draw puts everything on one client.
    let one_class = vec![0i64; 100];
    let d = Dirichlet {
        cfg: DirichletConfig {
            alpha: 1e-3,
            min_samples: 10,
            cap: Cap::None,
            max_draws: 20,
            ..DirichletConfig::default()
        },
    };
    let err = d.partition(&one_class, 1, 5, &mut rng(0)).unwrap_err().to_string();
    assert!(err.contains("after 20 draws") && err.contains("min_samples = 10"), "{err}");
    let err = Iid.partition(&[0, 5], 3, 1, &mut rng(0)).unwrap_err().to_string();
    assert!(err.contains("label 5 of sample 1 is outside 0..3"), "{err}");
    let err = Iid.partition(&labels, 3, 0, &mut rng(0)).unwrap_err().to_string();
    assert!(err.contains("at least one client"), "{err}");
}

#[test]
fn dirichlet_with_tiny_alpha_still_assigns_everything() {
    // α = 1e-4: Gamma draws underflow to 0 for most clients; the one-hot fallback keeps the
    // split valid.
    let labels: Vec<i64> = (0..500).map(|i| i % 5).collect();
    for cap in [Cap::EvenShare, Cap::None] {
        let parts = dirichlet(1e-4, 0, cap).partition(&labels, 5, 7, &mut rng(3)).unwrap();
        assert_exact_cover(&parts, 500, 7);
    }
}

#[test]
fn registered_partitioners_parse_their_parameters_strictly() {
    let labels: Vec<i64> = (0..100).map(|i| i % 10).collect();
    let p = build_partitioner("dirichlet", "alpha = 0.3\nmin_samples = 5\ncap = \"none\"").unwrap();
    assert_exact_cover(&p.partition(&labels, 10, 4, &mut rng(0)).unwrap(), 100, 4);
    let p = build_partitioner("shards", "shards_per_client = 3").unwrap();
    assert_exact_cover(&p.partition(&labels, 10, 4, &mut rng(0)).unwrap(), 100, 4);
    let p = build_partitioner("iid", "").unwrap();
    assert_exact_cover(&p.partition(&labels, 10, 4, &mut rng(0)).unwrap(), 100, 4);
    let err = build_partitioner("dirichlet", "alpha = 0.0").err().unwrap().to_string();
    assert!(err.contains("partition.alpha") && err.contains("> 0"), "{err}");
    let err = build_partitioner("dirichlet", "cap = \"sometimes\"").err().unwrap().to_string();
    assert!(err.contains("partition.cap"), "{err}");
    let err = build_partitioner("iid", "alpha = 1.0").err().unwrap().to_string();
    assert!(err.contains("alpha"), "{err}");
    let err = build_partitioner("shards", "shards_per_client = 0").err().unwrap().to_string();
    assert!(err.contains("partition.shards_per_client"), "{err}");
}

#[test]
fn dirichlet_replays_a_recorded_draw_exactly_on_a_pool_of_its_size() {
    // The pool holds exactly the recorded samples per label: the counts come back as recorded,
    // and the local train share keeps ⌊share · n_j⌋ of each.
    let labels: Vec<i64> = (0..60).map(|i| i64::from(i % 3 != 0) + i64::from(i % 3 == 2)).collect();
    let counts = vec![vec![[0, 15], [2, 1]], vec![[1, 20], [0, 5]], vec![[2, 19]]];
    let d = Dirichlet { cfg: DirichletConfig { counts: Some(counts), min_samples: 10, ..DirichletConfig::default() } };
    let parts = d.partition(&labels, 3, 3, &mut rng(4)).unwrap();
    assert_exact_cover(&parts, 60, 3);
    assert_eq!(histograms(&parts, &labels, 3), vec![vec![15, 0, 1], vec![5, 20, 0], vec![0, 0, 19]]);
    let local = Dirichlet { cfg: DirichletConfig { local_train_share: 0.5, ..d.cfg.clone() } };
    let kept = local.partition(&labels, 3, 3, &mut rng(4)).unwrap();
    assert_eq!(kept.iter().map(Vec::len).collect::<Vec<_>>(), vec![8, 12, 9]);
}

#[test]
fn a_recorded_draw_that_does_not_fit_is_a_clear_error() {
    let labels: Vec<i64> = (0..30).map(|i| i % 3).collect();
    let replay = |counts: Vec<Vec<[u64; 2]>>, clients: usize| {
        let d =
            Dirichlet { cfg: DirichletConfig { counts: Some(counts), min_samples: 0, ..DirichletConfig::default() } };
        d.partition(&labels, 3, clients, &mut rng(0)).unwrap_err().to_string()
    };
    let err = replay(vec![vec![[0, 10], [1, 10], [2, 10]]], 2);
    assert!(err.contains("counts: records 1 clients, the experiment has 2"), "{err}");
    let err = replay(vec![vec![[0, 10], [1, 10]]], 1);
    assert!(err.contains("counts: no client holds label 2, which has 10 samples"), "{err}");
    let err = replay(vec![vec![[0, 10], [1, 10], [2, 5], [3, 1]]], 1);
    assert!(err.contains("counts: label 3 is outside 0..3"), "{err}");
    let err =
        build_partitioner("dirichlet", "min_samples = 10\ncounts = [[[0, 4], [1, 5]]]").err().unwrap().to_string();
    assert!(err.contains("`partition.counts[0]`: client 0 holds 9 samples, fewer than min_samples = 10"), "{err}");
    let err = build_partitioner("dirichlet", "counts = [[[0, 40], [0, 5]]]").err().unwrap().to_string();
    assert!(err.contains("`partition.counts[0]`: label 0 is listed twice"), "{err}");
}

/// A digest of whole partitions, order included (client, position and index all count).
fn digest(parts: &[Vec<i64>]) -> u64 {
    parts
        .iter()
        .enumerate()
        .flat_map(|(j, p)| p.iter().enumerate().map(move |(i, &x)| (j as u64 + 1) * (i as u64 + 1) * (x as u64 + 3)))
        .fold(0u64, |a, b| a.wrapping_mul(1_000_003).wrapping_add(b))
}

#[test]
fn dirichlet_default_draws_are_unchanged_by_the_remainder_option() {
    // Sizes and digests recorded with the code of commit 925d7ce, before `remainder` existed:
    // committed reproduction results were partitioned by these draws.
    let labels: Vec<i64> = (0..997).map(|i| (i * 7 + i / 13) % 10).collect();
    let counts = "counts = [[[0, 40], [1, 3]], [[1, 60], [2, 7], [0, 1]], \
                  [[2, 50], [3, 90], [4, 1], [5, 1], [6, 1], [7, 1], [8, 1], [9, 1]]]\nmin_samples = 0";
    let cases: [(&str, usize, u64, &[usize], u64); 5] = [
        ("", 8, 42, &[106, 133, 154, 187, 126, 126, 78, 87], 16916682301727100255),
        (
            "alpha = 0.1\ncap = \"none\"\nmin_samples = 0",
            13,
            7,
            &[43, 13, 118, 78, 30, 11, 86, 98, 99, 138, 139, 19, 125],
            1781108489041391158,
        ),
        (
            "alpha = 0.05\nmin_samples = 20",
            10,
            3,
            &[138, 113, 75, 72, 101, 167, 61, 42, 128, 100],
            16159208702302794327,
        ),
        ("alpha = 0.3\nlocal_train_share = 0.84", 6, 11, &[185, 173, 114, 84, 137, 141], 7259571657360761627),
        (counts, 3, 5, &[109, 104, 784], 15659785117046758365),
    ];
    for (table, clients, seed, sizes, expected) in cases {
        for table in [table.to_string(), format!("{table}\nremainder = \"assign\"")] {
            let parts = build_partitioner("dirichlet", &table)
                .unwrap()
                .partition(&labels, 10, clients, &mut rng(seed))
                .unwrap();
            assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), sizes, "{table}");
            assert_eq!(digest(&parts), expected, "{table}");
        }
    }
}

#[test]
fn dirichlet_drop_gives_each_client_the_floor_of_its_share_of_each_class() {
    // The asyncnc procedure written out independently, on the same random stream: per class
    // (in label order, empty classes skipped as the partitioner does), shuffle the class's
    // indices, draw p ~ Dir(α·1_C) as normalised Gamma(α, 1) draws, give client i the next
    // ⌊p_i · n_k⌋ indices, client 0 first; drop the rest. One draw (min_samples = 0, no cap).
    let (classes, clients, alpha) = (7usize, 9usize, 0.4);
    let labels: Vec<i64> = (0..1500).map(|i| ((i * 11 + i / 7) % classes) as i64).collect();
    let mut r = rng(8);
    let gamma = Gamma::new(alpha, 1.0).unwrap();
    let mut expected: Vec<Vec<i64>> = vec![Vec::new(); clients];
    let mut dropped = 0;
    for k in 0..classes as i64 {
        let mut idx: Vec<i64> = (0..labels.len() as i64).filter(|&i| labels[i as usize] == k).collect();
        idx.shuffle(&mut r);
        let g: Vec<f64> = (0..clients).map(|_| gamma.sample(&mut r)).collect();
        let total: f64 = g.iter().sum();
        assert!(total > 0.0, "α = {alpha} does not underflow");
        let counts: Vec<usize> = g.iter().map(|gi| (gi / total * idx.len() as f64).floor() as usize).collect();
        let mut rest = idx.as_slice();
        for (part, &c) in expected.iter_mut().zip(&counts) {
            let (mine, next) = rest.split_at(c);
            part.extend_from_slice(mine);
            rest = next;
        }
        dropped += rest.len();
    }
    let parts = dirichlet_drop(alpha, 0, "none").partition(&labels, classes as i64, clients, &mut rng(8)).unwrap();
    assert_eq!(assert_drop_invariants(&parts, &labels, classes, clients), dropped);
    assert!(dropped > 0, "this draw leaves something over");
    for (j, (got, want)) in parts.iter().zip(&expected).enumerate() {
        let (mut got, mut want) = (got.clone(), want.clone());
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "client {j}");
    }
}

#[test]
fn dirichlet_drop_with_a_flat_alpha_drops_a_third_by_hand() {
    // α = 10⁶: sd(p_j) = √((1/3)(2/3)/(3·10⁶ + 1)) ≈ 2.7e-4, so 10 · p_j = 3.33 ± 0.01 and
    // ⌊10 · p_j⌋ = 3: each of 3 clients takes 3 of each 10-sample class, 1 per class is dropped.
    // Assigning the remainder instead gives the last client 4 of each class.
    let labels: Vec<i64> = (0..30).map(|i| i % 3).collect();
    let parts = dirichlet_drop(1e6, 0, "none").partition(&labels, 3, 3, &mut rng(2)).unwrap();
    assert_eq!(assert_drop_invariants(&parts, &labels, 3, 3), 3);
    assert_eq!(histograms(&parts, &labels, 3), vec![vec![3, 3, 3]; 3]);
    let assign = dirichlet(1e6, 0, Cap::None).partition(&labels, 3, 3, &mut rng(2)).unwrap();
    assert_eq!(histograms(&assign, &labels, 3), vec![vec![3, 3, 3], vec![3, 3, 3], vec![4, 4, 4]]);
}

#[test]
fn dirichlet_drop_shuffles_each_clients_list() {
    // asyncnc shuffles each client's list at the end. A sorted list of m distinct indices
    // comes out of a uniform shuffle with probability 1/m!; every client here holds dozens.
    let labels: Vec<i64> = (0..2000).map(|i| i % 10).collect();
    let parts = dirichlet_drop(5.0, 20, "none").partition(&labels, 10, 5, &mut rng(6)).unwrap();
    assert_drop_invariants(&parts, &labels, 10, 5);
    for (j, p) in parts.iter().enumerate() {
        assert!(p.len() >= 20 && !p.windows(2).all(|w| w[0] < w[1]), "client {j}'s list is sorted: {p:?}");
    }
}

#[test]
fn dirichlet_drop_keeps_min_samples_and_can_leave_a_client_empty_without_it() {
    // 1,000 samples, 20 clients, α = 0.1: a client needs p_j ≥ 1 / n_k = 0.01 to get a sample
    // of a class, which Dir(0.1) gives only a few clients per class, so without a minimum some
    // seeds leave a client empty (the simulation would refuse that partition). With
    // min_samples = 5 the redraws give every client at least 5.
    let labels: Vec<i64> = (0..1000).map(|i| i % 10).collect();
    let mut empty = 0;
    for seed in 0..10 {
        let parts = dirichlet_drop(0.1, 0, "none").partition(&labels, 10, 20, &mut rng(seed)).unwrap();
        assert_drop_invariants(&parts, &labels, 10, 20);
        empty += parts.iter().filter(|p| p.is_empty()).count();
        let parts = dirichlet_drop(0.1, 5, "none").partition(&labels, 10, 20, &mut rng(seed)).unwrap();
        assert_drop_invariants(&parts, &labels, 10, 20);
        assert!(
            parts.iter().all(|p| p.len() >= 5),
            "seed {seed}: {:?}",
            parts.iter().map(Vec::len).collect::<Vec<_>>()
        );
    }
    assert!(empty > 0, "no seed left a client empty");
}

#[test]
fn dirichlet_drop_composes_with_the_cap_and_the_local_train_share() {
    let labels: Vec<i64> = (0..1200).map(|i| (i * 3 + i / 5) % 6).collect();
    let table = "alpha = 0.3\nmin_samples = 10\nremainder = \"drop\"";
    let whole = build_partitioner("dirichlet", table).unwrap().partition(&labels, 6, 8, &mut rng(9)).unwrap();
    assert_drop_invariants(&whole, &labels, 6, 8);
    let local = build_partitioner("dirichlet", &format!("{table}\nlocal_train_share = 0.5"))
        .unwrap()
        .partition(&labels, 6, 8, &mut rng(9))
        .unwrap();
    for (w, l) in whole.iter().zip(&local) {
        let mut w = w.clone();
        w.sort_unstable();
        assert_eq!(l.len(), w.len() / 2);
        assert!(l.iter().all(|i| w.binary_search(i).is_ok()), "a kept sample was not the client's");
    }
}

#[test]
fn dirichlet_drop_replays_a_recorded_draw_flooring_the_proportions() {
    // Recorded totals per label: 20, 20, 20; the pool has 10 of each. Label 0: 15 · 10/20 = 7.5
    // and 5 · 10/20 = 2.5 floor to 7 and 2, one dropped; label 1: 10 to client 1; label 2:
    // 0.5 and 9.5 floor to 0 and 9, one dropped.
    let labels: Vec<i64> = (0..30).map(|i| i % 3).collect();
    let table = "counts = [[[0, 15], [2, 1]], [[1, 20], [0, 5]], [[2, 19]]]\nmin_samples = 0\nremainder = \"drop\"";
    let parts = build_partitioner("dirichlet", table).unwrap().partition(&labels, 3, 3, &mut rng(4)).unwrap();
    assert_eq!(assert_drop_invariants(&parts, &labels, 3, 3), 2);
    assert_eq!(histograms(&parts, &labels, 3), vec![vec![7, 0, 0], vec![2, 10, 0], vec![0, 0, 9]]);
}

#[test]
fn an_unknown_remainder_is_a_config_error_listing_the_values() {
    let err = build_partitioner("dirichlet", "remainder = \"keep\"").err().unwrap().to_string();
    assert!(err.contains("partition.remainder") && err.contains("`assign`") && err.contains("`drop`"), "{err}");
}
