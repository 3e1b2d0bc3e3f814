//! The basic staleness weights of asynchronous FL, as functions of the staleness `s` in
//! global model versions: polynomial `(1+s)^−a` and hinge (FedAsync), exponential `e^{−a s}`,
//! `1/√(1+s)` (FedBuff) and `1/(1 + a·s)` (asyncnc's reading of a staleness-aware mean, the
//! form of its learning-rate penalty); and one of the staleness in virtual seconds,
//! `1/(Δt/scale + 1)` (the Fed-RAA reference code's damping).

use fl_core::{InvalidKey, StalenessCtx, StalenessFn, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

/// `(1 + s)^−a`.
#[derive(Debug, Clone, Copy, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Polynomial {
    /// The exponent a, ≥ 0 (0: every weight 1).
    #[default(0.5)]
    pub a: f64,
}

impl Validate for Polynomial {
    fn validate(&self) -> Result<(), InvalidKey> {
        non_negative("a", self.a)
    }
}

impl StalenessFn for Polynomial {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        (1.0 + ctx.versions as f64).powf(-self.a)
    }
}

/// 1 while `s ≤ b`, then `1 / (a (s − b) + 1)`.
#[derive(Debug, Clone, Copy, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hinge {
    /// The slope a of the decay past `b`, ≥ 0.
    #[default(10.0)]
    pub a: f64,
    /// The staleness b, in versions (≥ 0), up to which the weight is 1.
    #[default(4.0)]
    pub b: f64,
}

impl Validate for Hinge {
    fn validate(&self) -> Result<(), InvalidKey> {
        non_negative("a", self.a)?;
        non_negative("b", self.b)
    }
}

impl StalenessFn for Hinge {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        let s = ctx.versions as f64;
        if s <= self.b { 1.0 } else { 1.0 / (self.a * (s - self.b) + 1.0) }
    }
}

/// `e^{−a s}`.
#[derive(Debug, Clone, Copy, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Exponential {
    /// The decay rate a per version, ≥ 0.
    #[default(0.5)]
    pub a: f64,
}

impl Validate for Exponential {
    fn validate(&self) -> Result<(), InvalidKey> {
        non_negative("a", self.a)
    }
}

impl StalenessFn for Exponential {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        (-self.a * ctx.versions as f64).exp()
    }
}

/// `1 / √(1 + s)`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InverseSqrt {}

impl Validate for InverseSqrt {}

impl StalenessFn for InverseSqrt {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        1.0 / (1.0 + ctx.versions as f64).sqrt()
    }
}

/// `1 / (1 + a·s)`.
#[derive(Debug, Clone, Copy, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InverseLinear {
    /// The penalty a per version, ≥ 0.
    #[default(0.01)]
    pub a: f64,
}

impl Validate for InverseLinear {
    fn validate(&self) -> Result<(), InvalidKey> {
        non_negative("a", self.a)
    }
}

impl StalenessFn for InverseLinear {
    fn weight(&mut self, ctx: &StalenessCtx) -> f64 {
        1.0 / (1.0 + self.a * ctx.versions as f64)
    }
}

/// `1 / (Δt / scale + 1)`, Δt the virtual seconds between dispatch and arrival.
#[derive(Debug, Clone, Copy, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InverseTime {
    /// The virtual seconds, > 0, after which the weight is 1/2.
    #[default(100.0)]
    pub scale: f64,
}

impl Validate for InverseTime {
    fn validate(&self) -> Result<(), InvalidKey> {
        if !(self.scale > 0.0) {
            return Err(InvalidKey::new("scale", format!("expected a positive number of seconds, got {}", self.scale)));
        }
        Ok(())
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

// Each function is its own config, so `From`'s identity builds it.
fl_core::register!(Staleness "polynomial" => Polynomial::from(Polynomial),
    summary: "(1 + s)^−a", paper: "Xie et al., arXiv:1903.03934");
fl_core::register!(Staleness "hinge" => Hinge::from(Hinge),
    summary: "1 if s ≤ b, else 1 / (a (s − b) + 1)", paper: "Xie et al., arXiv:1903.03934");
fl_core::register!(Staleness "exponential" => Exponential::from(Exponential), summary: "e^(−a s)", paper: "");
fl_core::register!(Staleness "inverse-linear" => InverseLinear::from(InverseLinear),
    summary: "1 / (1 + a s)",
    paper: "Forootani and Iervolino: the form of their learning-rate delay penalty (Lemma 3)");
fl_core::register!(Staleness "inv-sqrt" => InverseSqrt::from(InverseSqrt),
    summary: "1 / sqrt(1 + s)", paper: "Nguyen et al., AISTATS 2022");
fl_core::register!(Staleness "inverse-time" => InverseTime::from(InverseTime),
    summary: "1 / (Δt / scale + 1) on the virtual seconds since dispatch",
    paper: "Fed-RAA reference code, github.com/tdwxz/fedraa (not cited by the paper)");
