//! Width levels: which share of each unit group a client keeps, from its capacity.
//!
//! HeteroFL and FedRolex give every client one of a few *levels* (shares of the units:
//! HeteroFL's a–e are 1, 1/2, 1/4, 1/8, 1/16) and shrink the hidden unit groups of the model
//! (neurons, channels, heads) to that share, at least one unit each. The level comes either
//! from the client's device (`assign = "speed"`: the largest level not above its throughput
//! relative to the fastest client, since a width share r costs about r of the FLOPs of the
//! layers it narrows), or from fixed shares of the federation (`assign = "shares"`, HeteroFL's
//! "a1-b1-…" mixes: clients in id order, which the partition makes arbitrary, split by the
//! cumulative shares). Both are functions of the configuration and the profiles, so the
//! assignment is static, as HeteroFL's "fix" setting and FedRolex's experiments have it.

use fl_core::{DeviceProfile, Error, InvalidKey, Result, Structure, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

/// How a client's level is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Assign {
    /// The largest level at most the client's FLOP/s over the fastest client's.
    #[default]
    Speed,
    /// Clients in id order split among the levels by `shares`.
    Shares,
}

/// The configuration both width policies take.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WidthConfig {
    /// The width shares a client may get, each in (0, 1] (HeteroFL's a–e by default).
    #[default(vec![1.0, 0.5, 0.25, 0.125, 0.0625])]
    pub levels: Vec<f64>,
    /// How a client's level is chosen.
    pub assign: Assign,
    /// With `assign = "shares"`: the share of the clients at each level, one per level,
    /// summing to 1 (empty: equal shares).
    pub shares: Vec<f64>,
    /// The unit groups to narrow, by name (empty: every group of the model).
    pub groups: Vec<String>,
}

impl Validate for WidthConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.levels.is_empty() {
            return Err(InvalidKey::new("levels", "at least one level is needed"));
        }
        if let Some(bad) = self.levels.iter().find(|l| !(**l > 0.0 && **l <= 1.0)) {
            return Err(InvalidKey::new("levels", format!("every level must be in (0, 1], got {bad}")));
        }
        if !self.shares.is_empty() {
            if self.shares.len() != self.levels.len() {
                return Err(InvalidKey::new(
                    "shares",
                    format!("one share per level: {} shares for {} levels", self.shares.len(), self.levels.len()),
                ));
            }
            if self.shares.iter().any(|s| !(*s >= 0.0)) || (self.shares.iter().sum::<f64>() - 1.0).abs() > 1e-6 {
                return Err(InvalidKey::new(
                    "shares",
                    format!("must be non-negative and sum to 1, got {:?}", self.shares),
                ));
            }
        }
        Ok(())
    }
}

impl WidthConfig {
    /// The width share of `client` among `profiles`.
    pub fn ratio(&self, client: usize, profiles: &[DeviceProfile]) -> f64 {
        match self.assign {
            Assign::Speed => {
                let fastest = profiles.iter().map(|p| p.flops_per_s).fold(0.0, f64::max);
                let relative = profiles[client].flops_per_s / fastest;
                let smallest = self.levels.iter().copied().fold(f64::INFINITY, f64::min);
                // A relative speed equal to a level up to rounding still earns it.
                self.levels.iter().copied().filter(|&l| l <= relative * (1.0 + 1e-9)).fold(smallest, f64::max)
            }
            Assign::Shares => {
                let n = profiles.len() as f64;
                let equal = vec![1.0 / self.levels.len() as f64; self.levels.len()];
                let shares = if self.shares.is_empty() { &equal } else { &self.shares };
                // Client i takes the level whose cumulative share first exceeds (i + ½) / n.
                let position = (client as f64 + 0.5) / n;
                let mut cumulative = 0.0;
                for (level, share) in self.levels.iter().zip(shares) {
                    cumulative += share;
                    if position < cumulative {
                        return *level;
                    }
                }
                *self.levels.last().expect("validated: at least one level")
            }
        }
    }

    /// Per unit group of `structure`, the units a client of width share `ratio` keeps
    /// (`round(ratio · units)`, at least 1), or `None` for a group left whole.
    pub fn kept_counts(&self, policy: &str, structure: &Structure, ratio: f64) -> Result<Vec<Option<i64>>> {
        if let Some(unknown) = self.groups.iter().find(|name| !structure.groups.iter().any(|g| &g.name == *name)) {
            let names: Vec<&str> = structure.groups.iter().map(|g| g.name.as_str()).collect();
            return Err(Error::component(
                policy,
                format!("groups: no unit group `{unknown}`; the model has {names:?}"),
            ));
        }
        Ok(structure
            .groups
            .iter()
            .map(|g| {
                let narrowed = self.groups.is_empty() || self.groups.contains(&g.name);
                narrowed.then(|| g.kept_at(ratio))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fl_core::testing::profiles;

    #[test]
    fn speed_gives_the_largest_level_a_client_can_afford() {
        let cfg = WidthConfig::default();
        let p = profiles(&[160.0, 80.0, 79.0, 20.0, 10.0, 9.0, 1.0]);
        let ratios: Vec<f64> = (0..p.len()).map(|c| cfg.ratio(c, &p)).collect();
        // Relative speeds 1, 1/2, 0.49, 1/8, 1/16, 0.056, 0.006: below the smallest level a
        // client still gets it.
        assert_eq!(ratios, [1.0, 0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0625]);
    }

    #[test]
    fn shares_split_the_clients_in_id_order() {
        let cfg = WidthConfig {
            levels: vec![1.0, 0.5, 0.25],
            assign: Assign::Shares,
            shares: vec![0.5, 0.3, 0.2],
            ..WidthConfig::default()
        };
        let p = profiles(&[1.0; 10]);
        let ratios: Vec<f64> = (0..10).map(|c| cfg.ratio(c, &p)).collect();
        assert_eq!(ratios, [1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]);
        // Equal shares by default: 3 levels over 6 clients, two each.
        let equal = WidthConfig { shares: vec![], ..cfg };
        let ratios: Vec<f64> = (0..6).map(|c| equal.ratio(c, &p[..6])).collect();
        assert_eq!(ratios, [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]);
    }

    #[test]
    fn bad_levels_and_shares_name_their_key() {
        let bad = |cfg: WidthConfig| cfg.validate().unwrap_err().key;
        assert_eq!(bad(WidthConfig { levels: vec![], ..WidthConfig::default() }), "levels");
        assert_eq!(bad(WidthConfig { levels: vec![1.0, 1.5], ..WidthConfig::default() }), "levels");
        assert_eq!(bad(WidthConfig { levels: vec![0.0], ..WidthConfig::default() }), "levels");
        assert_eq!(bad(WidthConfig { shares: vec![0.5, 0.5], ..WidthConfig::default() }), "shares");
        assert_eq!(
            bad(WidthConfig { levels: vec![1.0, 0.5], shares: vec![0.7, 0.7], ..WidthConfig::default() }),
            "shares"
        );
        assert!(
            WidthConfig { levels: vec![1.0, 0.5], shares: vec![0.7, 0.3], ..WidthConfig::default() }.validate().is_ok()
        );
    }
}
