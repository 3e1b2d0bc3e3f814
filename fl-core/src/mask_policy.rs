//! `MaskPolicy`: which part of the model a client trains in a job.

use crate::error::Result;
use crate::mask::Mask;
use crate::params::ParamSet;
use crate::profile::DeviceProfile;
use crate::rng::Rng;
use crate::structure::Structure;

pub struct MaskCtx<'a> {
    pub client: usize,
    /// Clients in the federation.
    pub num_clients: usize,
    pub profile: &'a DeviceProfile,
    /// Global model version the job starts from.
    pub version: u64,
    pub structure: &'a Structure,
    pub global: &'a ParamSet,
    /// The mask policy's own stream.
    pub rng: &'a mut Rng,
}

pub trait MaskPolicy: Send {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask>;

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
