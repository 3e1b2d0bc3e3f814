//! Client sampling for a round: J of C clients without replacement (a uniformly random
//! J-subset, the paper's §3 and its code) or J independent uniform draws with replacement
//! (the paper's variance analysis). Rounds are independent, so a client may be drawn in
//! consecutive rounds and its participation count is Binomial(rounds, J/C) without
//! replacement.
//!
//! The paper's variance of the sample mean of a population θ₁..θ_m (mean θ̄, variance
//! ν² = (1/m) Σ‖θ_k − θ̄‖²) over samples of size s is ν²/s with replacement and
//! (m − s)/(s(m − 1))·ν² without ([`variance_factor`]).

use fl_core::rng::Rng;
use rand::Rng as _;
use rand::seq::index;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sampling {
    #[default]
    WithoutReplacement,
    WithReplacement,
}

/// `j` client ids out of `clients`, in draw order.
pub fn draw(rng: &mut Rng, clients: usize, j: usize, sampling: Sampling) -> Vec<usize> {
    match sampling {
        Sampling::WithoutReplacement => index::sample(rng, clients, j).into_vec(),
        Sampling::WithReplacement => (0..j).map(|_| rng.random_range(0..clients)).collect(),
    }
}

/// Duplicate draws merged: each distinct client once, in first-draw order, with how often it
/// was drawn.
pub fn merge_duplicates(draws: &[usize]) -> Vec<(usize, u32)> {
    let mut merged: Vec<(usize, u32)> = Vec::new();
    for &c in draws {
        match merged.iter_mut().find(|(d, _)| *d == c) {
            Some((_, k)) => *k += 1,
            None => merged.push((c, 1)),
        }
    }
    merged
}

/// E‖θ̄_sample − θ̄‖² / ν² for samples of size `s` from a population of `m` (the paper's §2
/// sampling lemma): 1/s with replacement, (m − s)/(s(m − 1)) without.
pub fn variance_factor(m: usize, s: usize, sampling: Sampling) -> f64 {
    let (m, s) = (m as f64, s as f64);
    match sampling {
        Sampling::WithReplacement => 1.0 / s,
        Sampling::WithoutReplacement => (m - s) / (s * (m - 1.0)),
    }
}
