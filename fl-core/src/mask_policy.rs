//! `MaskPolicy`: which part of the model a client trains in a job.

use crate::error::Result;
use crate::mask::Mask;
use crate::params::ParamSet;
use crate::profile::DeviceProfile;
use crate::rng::Rng;
use crate::structure::Structure;

pub struct MaskCtx<'a> {
    pub client: usize,
    /// Every client's device, in id order (resource-aware policies compare them).
    pub profiles: &'a [DeviceProfile],
    /// Global model version the job starts from.
    pub version: u64,
    /// The alternative the scheduler chose, below [`MaskPolicy::choices`] (Fed-RAA's
    /// fragment); `None` lets the policy decide.
    pub choice: Option<usize>,
    pub structure: &'a Structure,
    pub global: &'a ParamSet,
    /// The mask policy's own stream.
    pub rng: &'a mut Rng,
}

impl MaskCtx<'_> {
    /// Clients in the federation.
    pub fn num_clients(&self) -> usize {
        self.profiles.len()
    }

    /// The device of the client the mask is for.
    pub fn profile(&self) -> &DeviceProfile {
        &self.profiles[self.client]
    }
}

pub trait MaskPolicy: Send {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask>;

    /// Number of fixed alternatives a scheduler may choose between through
    /// [`MaskCtx::choice`] (0: the policy decides alone). A policy that offers choices must
    /// return the same mask for the same choice without drawing from `ctx.rng`, since the
    /// engine also asks it for masks to price jobs.
    fn choices(&self) -> usize {
        0
    }

    /// Scalar diagnostics for the metrics log (name, value), read at each evaluation.
    fn diagnostics(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
}

/// Every client trains the whole model.
#[derive(Debug, Default, Clone, Copy)]
pub struct FullModel;

impl MaskPolicy for FullModel {
    fn mask(&mut self, _: &mut MaskCtx) -> Result<Mask> {
        Ok(Mask::Full)
    }
}
