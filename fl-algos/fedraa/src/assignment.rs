//! Fragment assignment rules (Fed-RAA §5, §6.2): Gre-RAA, its ablations, and the offline
//! optimum K* of Theorem 2 that sets Gre-RAA's delay bound by default.

use fl_core::rng::Rng;
use rand::Rng as _;
use serde::{Deserialize, Serialize};

/// How an idle client's fragment is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Among fragments the client finishes within K, the least-updated; ties uniform.
    #[default]
    GreRaa,
    /// Uniform over all fragments (Random Fed-RAA).
    Random,
    /// The least-updated fragment, no delay bound (MP-RAA).
    MinPriority,
    /// Synchronous rounds: every client assigned by Gre-RAA (counting the round's
    /// assignments), all train from the same model, one aggregation per round (Sync Fed-RAA).
    SyncRounds,
}

/// A uniform draw among the indices of `counts` with the least count (among `allowed`).
fn least(counts: &[u64], allowed: impl Fn(usize) -> bool, rng: &mut Rng) -> Option<usize> {
    let min = (0..counts.len()).filter(|&j| allowed(j)).map(|j| counts[j]).min()?;
    let ties: Vec<usize> = (0..counts.len()).filter(|&j| allowed(j) && counts[j] == min).collect();
    Some(ties[rng.random_range(0..ties.len())])
}

/// Gre-RAA (Fed-RAA §5.1, Algorithm 2) for one client: `costs[j]` its delay on fragment j,
/// `counts[j]` the fragment's updates. Returns the fragment and whether no fragment met `k`, in
/// which case the cheapest is taken (the paper assumes K large enough).
pub fn gre_raa(costs: &[f64], k: f64, counts: &[u64], rng: &mut Rng) -> (usize, bool) {
    match least(counts, |j| costs[j] <= k, rng) {
        Some(j) => (j, false),
        None => {
            let cheapest =
                (0..costs.len()).min_by(|&a, &b| costs[a].total_cmp(&costs[b])).expect("at least one fragment");
            (cheapest, true)
        }
    }
}

/// MP-RAA: the least-updated fragment, ties uniform.
pub fn min_priority(counts: &[u64], rng: &mut Rng) -> usize {
    least(counts, |_| true, rng).expect("at least one fragment")
}

/// Uniform over `m` fragments.
pub fn random(m: usize, rng: &mut Rng) -> usize {
    rng.random_range(0..m)
}

/// The delay bound of Theorem 2's offline assignment (Fed-RAA, Appendix B), `costs[i][j]` being
/// client i's delay on fragment j. Clients are ranked fastest first, fragments largest first;
/// fragment j goes to the j-th group of ⌊N/M⌋ clients, the last group taking the rest. With
/// fewer clients than fragments, client i cycles through fragments i, i + N, … K* is the
/// largest delay of an assigned pair.
pub fn offline_k(costs: &[Vec<f64>]) -> f64 {
    let n = costs.len();
    let m = costs.first().map_or(0, Vec::len);
    if n == 0 || m == 0 {
        return 0.0;
    }
    let mut clients: Vec<usize> = (0..n).collect();
    clients.sort_by(|&a, &b| costs[a].iter().sum::<f64>().total_cmp(&costs[b].iter().sum()));
    let mut fragments: Vec<usize> = (0..m).collect();
    let column = |j: usize| costs.iter().map(|row| row[j]).sum::<f64>();
    fragments.sort_by(|&a, &b| column(b).total_cmp(&column(a)));
    let group_of = |rank: usize| if n >= m { (rank / (n / m)).min(m - 1) } else { rank };
    let mut k = 0.0f64;
    if n >= m {
        for (rank, &i) in clients.iter().enumerate() {
            k = k.max(costs[i][fragments[group_of(rank)]]);
        }
    } else {
        for (f, &j) in fragments.iter().enumerate() {
            k = k.max(costs[clients[f % n]][j]);
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worked example, not in the paper: c = ratio / capability (the code's cost).
    fn costs(caps: &[f64], ratios: &[f64]) -> Vec<Vec<f64>> {
        caps.iter().map(|c| ratios.iter().map(|r| r / c).collect()).collect()
    }

    #[test]
    fn offline_k_reproduces_the_worked_example() {
        let caps = [3.0, 3.0, 3.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0];
        for (parts, want) in [(2, 0.4), (3, 0.2), (4, 0.15), (5, 0.15)] {
            let ratios = crate::fragments::table4_ratios(parts).unwrap();
            let k = offline_k(&costs(&caps, &ratios));
            assert!((k - want).abs() < 1e-12, "M = {parts}: K* = {k}, want {want}");
        }
    }

    #[test]
    fn offline_k_of_the_beta_profiles() {
        // The paper's β profiles (§6.3): capabilities {1, 3}, share β at 1; β = 0.5 and 0.9.
        let profile = |weak: usize| -> Vec<f64> { (0..10).map(|i| if i < weak { 1.0 } else { 3.0 }).collect() };
        for (weak, wants) in [(5, [0.4, 0.3, 0.2, 0.2]), (9, [0.6, 0.5, 0.4, 0.35])] {
            for (parts, want) in (2..=5).zip(wants) {
                let k = offline_k(&costs(&profile(weak), &crate::fragments::table4_ratios(parts).unwrap()));
                assert!((k - want).abs() < 1e-12, "β = {weak}/10, M = {parts}: K* = {k}, want {want}");
            }
        }
    }
}
