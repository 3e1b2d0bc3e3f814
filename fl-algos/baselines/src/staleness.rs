//! The basic staleness weights of asynchronous FL, as functions of the staleness `s` in
//! global model versions: polynomial `(1+s)^−a` and hinge (FedAsync), exponential `e^{−a s}`,
//! `1/√(1+s)` (FedBuff) and `1/(1 + a·s)` (asyncnc's reading of a staleness-aware mean, the
//! form of its learning-rate penalty); and one of the staleness in virtual seconds,
//! `1/(Δt/scale + 1)` (the Fed-RAA reference code's damping).

use fl_core::{FromConfig, InvalidKey, StalenessCtx, StalenessFn};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Polynomial {
    pub a: f64,
}

impl Default for Polynomial {
    fn default() -> Self {
        Polynomial { a: 0.5 }
    }
}

impl Polynomial {
    pub fn validate(&self) -> Result<(), InvalidKey> {
        non_negative("a", self.a)
    }
}

impl FromConfig for Polynomial {
    type Config = Self;

    fn from_config(config: Self) -> Result<Self, InvalidKey> {
        config.validate()?;
        Ok(config)
    }
}

impl StalenessFn for Polynomial {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        (1.0 + ctx.versions as f64).powf(-self.a)
    }
}

/// 1 while `s ≤ b`, then `1 / (a (s − b) + 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hinge {
    pub a: f64,
    pub b: f64,
}

impl Default for Hinge {
    fn default() -> Self {
        Hinge { a: 10.0, b: 4.0 }
    }
}

impl FromConfig for Hinge {
    type Config = Self;

    fn from_config(config: Self) -> Result<Self, InvalidKey> {
        non_negative("a", config.a)?;
        non_negative("b", config.b)?;
        Ok(config)
    }
}

impl StalenessFn for Hinge {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        let s = ctx.versions as f64;
        if s <= self.b { 1.0 } else { 1.0 / (self.a * (s - self.b) + 1.0) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Exponential {
    pub a: f64,
}

impl Default for Exponential {
    fn default() -> Self {
        Exponential { a: 0.5 }
    }
}

impl FromConfig for Exponential {
    type Config = Self;

    fn from_config(config: Self) -> Result<Self, InvalidKey> {
        non_negative("a", config.a)?;
        Ok(config)
    }
}

impl StalenessFn for Exponential {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        (-self.a * ctx.versions as f64).exp()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InverseSqrt {}

impl StalenessFn for InverseSqrt {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        1.0 / (1.0 + ctx.versions as f64).sqrt()
    }
}

impl FromConfig for InverseSqrt {
    type Config = Self;

    fn from_config(config: Self) -> Result<Self, InvalidKey> {
        Ok(config)
    }
}

/// `1 / (1 + a·s)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InverseLinear {
    pub a: f64,
}

impl Default for InverseLinear {
    fn default() -> Self {
        InverseLinear { a: 0.01 }
    }
}

impl FromConfig for InverseLinear {
    type Config = Self;

    fn from_config(config: Self) -> Result<Self, InvalidKey> {
        non_negative("a", config.a)?;
        Ok(config)
    }
}

impl StalenessFn for InverseLinear {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        1.0 / (1.0 + self.a * ctx.versions as f64)
    }
}

/// `1 / (Δt / scale + 1)`, Δt the virtual seconds between dispatch and arrival.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InverseTime {
    pub scale: f64,
}

impl Default for InverseTime {
    fn default() -> Self {
        InverseTime { scale: 100.0 }
    }
}

impl FromConfig for InverseTime {
    type Config = Self;

    fn from_config(config: Self) -> Result<Self, InvalidKey> {
        if !(config.scale > 0.0) {
            return Err(InvalidKey::new(
                "scale",
                format!("expected a positive number of seconds, got {}", config.scale),
            ));
        }
        Ok(config)
    }
}

impl StalenessFn for InverseTime {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        1.0 / (ctx.seconds / self.scale + 1.0)
    }
}

fn non_negative(name: &str, v: f64) -> Result<(), InvalidKey> {
    if v >= 0.0 { Ok(()) } else { Err(InvalidKey::new(name, format!("expected a non-negative number, got {v}"))) }
}

fl_core::register!(Staleness "polynomial" => Polynomial,
    summary: "(1 + s)^−a", paper: "Xie et al., arXiv:1903.03934");
fl_core::register!(Staleness "hinge" => Hinge,
    summary: "1 if s ≤ b, else 1 / (a (s − b) + 1)", paper: "Xie et al., arXiv:1903.03934");
fl_core::register!(Staleness "exponential" => Exponential, summary: "e^(−a s)", paper: "");
fl_core::register!(Staleness "inverse-linear" => InverseLinear,
    summary: "1 / (1 + a s)",
    paper: "Forootani and Iervolino: the form of their learning-rate delay penalty (Lemma 3)");
fl_core::register!(Staleness "inv-sqrt" => InverseSqrt,
    summary: "1 / sqrt(1 + s)", paper: "Nguyen et al., AISTATS 2022");
fl_core::register!(Staleness "inverse-time" => InverseTime,
    summary: "1 / (Δt / scale + 1) on the virtual seconds since dispatch",
    paper: "Fed-RAA reference code, github.com/tdwxz/fedraa (not cited by the paper)");
