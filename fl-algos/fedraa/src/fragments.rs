//! The fragments θ¹..θᴹ: disjoint shares of a model's units (or elements) in the ratios of the
//! paper's Table 4, cut at the cumulative boundaries ⌈H·R_k⌉ (the paper gives only ratios).

use std::ops::Range;

use fl_core::{Error, InvalidKey, Result};

/// Table 4: the partition ratios for 2 to 5 fragments, smallest first.
pub fn table4_ratios(parts: usize) -> Option<Vec<f64>> {
    let percents: &[f64] = match parts {
        2 => &[40.0, 60.0],
        3 => &[20.0, 30.0, 50.0],
        4 => &[10.0, 20.0, 30.0, 40.0],
        5 => &[5.0, 10.0, 20.0, 30.0, 35.0],
        _ => return None,
    };
    Some(percents.iter().map(|p| p / 100.0).collect())
}

/// The ratios a configuration asks for: `ratios` if given (normalised to sum 1), else Table 4's
/// for `parts`.
pub fn resolve_ratios(parts: usize, ratios: &[f64]) -> std::result::Result<Vec<f64>, InvalidKey> {
    if ratios.is_empty() {
        return table4_ratios(parts).ok_or_else(|| {
            InvalidKey::new("parts", format!("Table 4 has ratios for 2 to 5 fragments, got {parts} (or give `ratios`)"))
        });
    }
    if ratios.iter().any(|r| !(*r > 0.0)) {
        return Err(InvalidKey::new("ratios", format!("expected positive shares, got {ratios:?}")));
    }
    let total: f64 = ratios.iter().sum();
    Ok(ratios.iter().map(|r| r / total).collect())
}

/// Splits `0..n` into consecutive ranges of the given shares, cut at ⌈n·R_k⌉ for the
/// cumulative shares R_k. Errors if a range would be empty.
pub fn split(n: i64, ratios: &[f64]) -> Result<Vec<Range<i64>>> {
    let mut ranges = Vec::with_capacity(ratios.len());
    let (mut start, mut cumulative) = (0, 0.0);
    for (k, r) in ratios.iter().enumerate() {
        cumulative += r;
        // The tolerance absorbs rounding in the cumulative sum (0.05 + 0.1 + 0.2 > 0.35).
        let end = if k + 1 == ratios.len() { n } else { ((n as f64 * cumulative) - 1e-9).ceil() as i64 };
        if end <= start {
            return Err(Error::component(
                "neuron-fragments",
                format!("{n} units cannot be split in the ratios {ratios:?} (fragment {k} would be empty)"),
            ));
        }
        ranges.push(start..end);
        start = end;
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(n: i64, parts: usize) -> Vec<i64> {
        split(n, &table4_ratios(parts).unwrap()).unwrap().iter().map(|r| r.end - r.start).collect()
    }

    #[test]
    fn neuron_counts_follow_table_4_ratios() {
        // Table 4's ratios for H = 200, 2048 and 4096 hidden neurons (Appendix C.1).
        assert_eq!(sizes(200, 2), [80, 120]);
        assert_eq!(sizes(200, 3), [40, 60, 100]);
        assert_eq!(sizes(200, 4), [20, 40, 60, 80]);
        assert_eq!(sizes(200, 5), [10, 20, 40, 60, 70]);
        assert_eq!(sizes(2048, 3), [410, 614, 1024]);
        assert_eq!(sizes(2048, 4), [205, 410, 614, 819]);
        assert_eq!(sizes(2048, 5), [103, 205, 409, 615, 716]);
        assert_eq!(sizes(4096, 2), [1639, 2457]);
        assert_eq!(sizes(4096, 4), [410, 819, 1229, 1638]);
        assert_eq!(sizes(4096, 5), [205, 410, 819, 1229, 1433]);
    }

    #[test]
    fn too_few_units_is_an_error() {
        let err = split(3, &table4_ratios(5).unwrap()).unwrap_err().to_string();
        assert!(err.contains("fragment 1 would be empty"), "{err}");
    }

    #[test]
    fn given_ratios_are_normalised() {
        assert_eq!(resolve_ratios(0, &[1.0, 3.0]).unwrap(), [0.25, 0.75]);
        let err = resolve_ratios(6, &[]).unwrap_err();
        assert_eq!(err.key, "parts");
        assert!(err.message.contains("2 to 5"), "{err}");
    }
}
