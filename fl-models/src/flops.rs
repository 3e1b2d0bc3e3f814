//! Forward-FLOP counting shared by the models, per sample: fl-core's convention
//! ([`fl_core::model::tensor_flops`]), under the name the models use.

pub use fl_core::model::tensor_flops as of_tensor;

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
