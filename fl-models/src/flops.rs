//! Forward-FLOP counting shared by the models, per sample.
//!
//! The convention: a multiply-add is 2 FLOPs and a bias addition 1 FLOP per output element, so
//! a linear weight `[out, in]` costs `2 · out · in`, its bias `out`, and a convolution weight
//! `[co, ci, kh, kw]` costs `2 · co · ci · kh · kw` at each of its output positions, its bias
//! `co` per position. Activations, pooling, dropout, flattening and the loss are not counted:
//! they attach to no parameter tensor and are a small share of the total.

/// FLOPs attributed to one weight (rank ≥ 2) or bias (rank 1) tensor applied at `positions`
/// output positions (1 for a linear layer, `H_out · W_out` for a convolution).
pub fn of_tensor(shape: &[i64], positions: i64) -> f64 {
    let elements: i64 = shape.iter().product();
    let per_position = if shape.len() >= 2 { 2 * elements } else { elements };
    (per_position * positions) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_count_two_flops_per_multiply_add_and_biases_one_per_output() {
        assert_eq!(of_tensor(&[200, 784], 1), 313_600.0);
        assert_eq!(of_tensor(&[200], 1), 200.0);
        // conv(1 → 6, 5x5) at 28x28 output positions: 2 · 6 · 25 · 784.
        assert_eq!(of_tensor(&[6, 1, 5, 5], 784), 235_200.0);
        assert_eq!(of_tensor(&[6], 784), 4_704.0);
    }
}
