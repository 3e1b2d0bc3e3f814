//! `fragment-polynomial`: staleness counted per fragment (Fed-RAA's Algorithm 1 stamps a task
//! with its fragment's version, τ ← q(j)). An arrival's staleness is the number of merges *of
//! its own fragment* since its dispatch, not of the whole model, weighted by the baselines'
//! polynomial (1 + s)^−a. A fragment nobody else touched meanwhile is fresh however many other
//! fragments moved.

use fl_algo_baselines::Polynomial;
use fl_core::{StalenessCtx, StalenessFn};

#[derive(Debug, Default)]
pub struct FragmentPolynomial {
    polynomial: Polynomial,
    /// Per fragment, the global versions it was merged into, in increasing order.
    merged_at: Vec<Vec<u64>>,
}

impl FragmentPolynomial {
    pub fn new(polynomial: Polynomial) -> Self {
        FragmentPolynomial { polynomial, merged_at: Vec::new() }
    }
}

impl StalenessFn for FragmentPolynomial {
    /// Called once per merged update. An update without a fragment (a scheduler that chose
    /// none) counts the merges of the whole model.
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        let u = ctx.update;
        let versions = match u.choice {
            None => ctx.versions,
            Some(j) => {
                if self.merged_at.len() <= j {
                    self.merged_at.resize_with(j + 1, Vec::new);
                }
                let merges = &mut self.merged_at[j];
                let now = u.base_version + ctx.versions;
                // Merges into versions base..now, not the one now under way (updates of the
                // same fragment in one aggregation are equally fresh).
                let since_dispatch =
                    merges.partition_point(|&v| v < now) - merges.partition_point(|&v| v < u.base_version);
                if merges.last() != Some(&now) {
                    merges.push(now);
                }
                since_dispatch as u64
            }
        };
        self.polynomial.weight(&StalenessCtx { versions, ..*ctx })
    }
}

fl_core::register!(Staleness "fragment-polynomial" => FragmentPolynomial::new(Polynomial),
    summary: "(1 + s)^−a, s the merges of the arrival's own fragment since its dispatch",
    paper: "Zhang et al., Fed-RAA, Algorithm 1 (τ ← q(j))");
