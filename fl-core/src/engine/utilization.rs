//! Resource utilisation (Co-S²P Eq. 17): how much of an aggregation's span its clients spent
//! working, `Σ_n T_n / (N · max_n T_n)` over the `N` updates it aggregates, `T_n` a job's
//! virtual seconds from dispatch to arrival (training and transfers). A run's figure is the
//! mean over its aggregations: 1 when every aggregation takes one update or equal jobs, lower
//! the longer the slowest client keeps the others waiting.

/// One aggregation's utilisation from its updates' job times; `None` without updates or when
/// every job took no time.
pub fn resource_utilization(times: &[f64]) -> Option<f64> {
    let longest = times.iter().copied().fold(0.0, f64::max);
    (longest > 0.0).then(|| times.iter().sum::<f64>() / (times.len() as f64 * longest))
}

/// Utilisation summed over aggregations, for a mean.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Utilization {
    pub(crate) sum: f64,
    pub(crate) aggregations: u64,
}

impl Utilization {
    pub(crate) fn add(&mut self, times: &[f64]) {
        if let Some(u) = resource_utilization(times) {
            self.sum += u;
            self.aggregations += 1;
        }
    }

    /// The mean over the aggregations counted, NaN without any.
    pub(crate) fn mean(&self) -> f64 {
        if self.aggregations == 0 { f64::NAN } else { self.sum / self.aggregations as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilization_follows_eq_17_by_hand() {
        // Jobs of 10, 20 and 40 s: 70 / (3 · 40) = 0.5833…; one update alone: 1.
        assert!((resource_utilization(&[10.0, 20.0, 40.0]).unwrap() - 70.0 / 120.0).abs() < 1e-12);
        assert_eq!(resource_utilization(&[7.0]), Some(1.0));
        assert_eq!(resource_utilization(&[]), None);
        let mut run = Utilization::default();
        run.add(&[10.0, 20.0, 40.0]);
        run.add(&[5.0, 5.0]);
        run.add(&[]);
        assert!((run.mean() - (70.0 / 120.0 + 1.0) / 2.0).abs() < 1e-12);
        assert!(Utilization::default().mean().is_nan());
    }
}
