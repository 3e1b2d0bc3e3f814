//! Split learning's cost (SplitFed, Thapa et al., AAAI 2022): the client runs the model up to a
//! cut, the server the rest, and every mini-batch the client uploads the activations at the cut
//! ("smashed data") and downloads their gradients, waiting for the server's part of the step and
//! for the exchange's latency. The client only ever holds, downloads and uploads its own part.
//!
//! Training itself is unchanged. SplitFed V1 keeps one server-side copy per client, trained in
//! step with that client's part, and averages both parts every round: that is FedAvg on the
//! whole model, so a split only changes what a job costs.

use serde::{Deserialize, Serialize};

use crate::error::InvalidKey;
use crate::structure::Structure;

/// Where the model is cut and how fast the server trains its part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitConfig {
    /// The last client-side tensor (in the model's order); every later tensor is the server's.
    pub cut: String,
    /// The server's training throughput, FLOP/s.
    pub server_flops_per_s: f64,
    /// Floats per sample crossing the cut. Default: the output width of the cut layer (the
    /// first dimension of its tensor), which is exact for fully connected layers; a cut after
    /// a convolution must state it (channels × height × width).
    #[serde(default)]
    pub activation_floats: Option<f64>,
    /// Network latency of one mini-batch exchange (activations up, gradients down), seconds;
    /// the client waits it out every step.
    #[serde(default)]
    pub round_trip_s: f64,
}

impl SplitConfig {
    /// Checks that the server's throughput is positive, the round trip non-negative and
    /// `activation_floats`, if given, positive; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(self.server_flops_per_s > 0.0) {
            return Err(InvalidKey::new(
                "split.server_flops_per_s",
                format!("expected a positive throughput, got {}", self.server_flops_per_s),
            ));
        }
        if !(self.round_trip_s >= 0.0) {
            return Err(InvalidKey::new(
                "split.round_trip_s",
                format!("expected a non-negative number of seconds, got {}", self.round_trip_s),
            ));
        }
        if let Some(a) = self.activation_floats
            && !(a > 0.0)
        {
            return Err(InvalidKey::new("split.activation_floats", format!("expected a positive number, got {a}")));
        }
        Ok(())
    }

    /// The cut on a model with this structure.
    pub fn resolve(&self, structure: &Structure) -> std::result::Result<SplitPoint, InvalidKey> {
        let index = structure.tensor_index(&self.cut).ok_or_else(|| {
            let names = structure.names().join(", ");
            InvalidKey::new("split.cut", format!("the model has no tensor `{}`; its tensors: {names}", self.cut))
        })?;
        if index + 1 == structure.tensors.len() {
            return Err(InvalidKey::new(
                "split.cut",
                format!("`{}` is the model's last tensor, which leaves the server nothing", self.cut),
            ));
        }
        let shape = &structure.tensors[index].shape;
        let activation_floats = match self.activation_floats {
            Some(a) => a,
            None if shape.len() <= 2 => shape[0] as f64,
            None => {
                return Err(InvalidKey::new(
                    "split.activation_floats",
                    format!("`{}` has shape {shape:?}; state the floats per sample at the cut", self.cut),
                ));
            }
        };
        Ok(SplitPoint {
            client_tensors: index + 1,
            activation_floats,
            server_flops_per_s: self.server_flops_per_s,
            round_trip_s: self.round_trip_s,
        })
    }
}

/// A cut resolved against a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitPoint {
    /// Tensors `0..client_tensors` are the client's.
    pub client_tensors: usize,
    /// Floats per sample crossing the cut each way (activations up, their gradients down).
    pub activation_floats: f64,
    /// The server's training throughput, FLOP/s.
    pub server_flops_per_s: f64,
    /// Latency of one mini-batch exchange, virtual seconds.
    pub round_trip_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structure::TensorSpec;

    fn mlp() -> Structure {
        let t = |name: &str, shape: Vec<i64>| TensorSpec::new(name, shape);
        Structure {
            tensors: vec![
                t("fc1.weight", vec![200, 784]),
                t("fc1.bias", vec![200]),
                t("fc2.weight", vec![10, 200]),
                t("fc2.bias", vec![10]),
            ],
            groups: vec![],
        }
    }

    fn cut(name: &str) -> SplitConfig {
        SplitConfig { cut: name.into(), server_flops_per_s: 1e11, activation_floats: None, round_trip_s: 0.0 }
    }

    #[test]
    fn the_cut_layer_width_crosses_the_cut() {
        let p = cut("fc1.bias").resolve(&mlp()).unwrap();
        assert_eq!((p.client_tensors, p.activation_floats), (2, 200.0));
    }

    #[test]
    fn a_bad_cut_names_the_model_tensors() {
        let e = cut("conv1.weight").resolve(&mlp()).unwrap_err();
        assert_eq!(e.key, "split.cut");
        assert!(e.message.contains("fc1.weight, fc1.bias, fc2.weight, fc2.bias"), "{e}");
        assert!(cut("fc2.bias").resolve(&mlp()).unwrap_err().message.contains("last tensor"));
    }
}
