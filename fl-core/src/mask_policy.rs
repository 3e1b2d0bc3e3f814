//! `MaskPolicy`: which part of the model a client trains in a job.

use crate::error::Result;
use crate::mask::Mask;
use crate::params::ParamSet;
use crate::profile::DeviceProfile;
use crate::rng::Rng;
use crate::state::{StateIn, StateOut, not_resumable};
use crate::structure::Structure;

/// What a [`MaskPolicy`] sees when it chooses a mask for one job.
pub struct MaskCtx<'a> {
    /// The client the job is for (an index into `profiles`).
    pub client: usize,
    /// Every client's device, in id order (resource-aware policies compare them).
    pub profiles: &'a [DeviceProfile],
    /// Global model version the job starts from.
    pub version: u64,
    /// The alternative the scheduler chose, below [`MaskPolicy::choices`] (Fed-RAA's
    /// fragment); `None` lets the policy decide.
    pub choice: Option<usize>,
    /// The model's tensors and unit groups, from which structured masks are built.
    pub structure: &'a Structure,
    /// The current global model (for policies that look at weights, e.g. magnitude pruning).
    pub global: &'a ParamSet,
    /// What the client's trainer kept from its previous job ([`crate::TrainOutcome::state`]),
    /// on the host: a client's learned width scores ([`crate::learned_width`]); none before its
    /// first job has arrived.
    pub client_state: Option<&'a ParamSet>,
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

/// Chooses which part of the model a client trains in a job.
///
/// # Contract
/// The engine calls [`MaskPolicy::mask`] on the run's own thread each time a scheduler
/// dispatches a job, before the job starts, and keeps the result for the job: the client
/// starts from the masked (sub-)model ([`Mask::extract`]), the cost model charges what the mask
/// keeps, and the update's delta is scattered back to full shape, exactly zero outside the
/// mask. The engine also calls it to price a job
/// ([`crate::SchedulingContext::job_duration_s`]), with a copy of the random stream, and then
/// discards the mask; so the same job may be asked for more than once, and a policy should
/// not count calls as jobs.
///
/// The returned mask is one of: [`Mask::Full`]; a [`Mask::Structured`] mask, which the engine
/// validates against the model's shapes (an error otherwise), usually built with
/// [`Structure::mask_from_units`] or [`Structure::width_prefix_mask`], or with
/// [`Structure::submodel`] for a depth window (its tensors trained, frozen or dropped: see
/// [`crate::TensorRole`]); or a
/// [`Mask::Elementwise`] mask with one entry per model tensor, 0/1 tensors of the full shapes.
/// Randomness must come from `ctx.rng`, the policy's own stream.
///
/// # Example
/// The slower half of the clients (by FLOP/s) trains the first half of every unit group:
/// ```
/// use fl_core::{Mask, MaskCtx, MaskPolicy, Result};
///
/// struct HalfWidthForSlow;
///
/// impl MaskPolicy for HalfWidthForSlow {
///     fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
///         let mine = ctx.profile().flops_per_s;
///         let faster = ctx.profiles.iter().filter(|p| p.flops_per_s > mine).count();
///         if 2 * faster < ctx.num_clients() { Ok(Mask::Full) } else { ctx.structure.width_prefix_mask(0.5) }
///     }
/// }
/// # let _: Box<dyn MaskPolicy> = Box::new(HalfWidthForSlow);
/// ```
pub trait MaskPolicy: Send {
    /// The mask of the job described by `ctx`; see the trait's contract.
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

    /// Saves what it remembers between events for a checkpoint ([`crate::state`]). The
    /// default refuses, and runs with this mask policy then write no checkpoints: a mask policy with state
    /// saves it all, one without implements this as `Ok(())`.
    fn save_state(&self, _out: &mut StateOut) -> Result<()> {
        Err(not_resumable("mask policy"))
    }

    /// Restores what [`MaskPolicy::save_state`] saved, on a mask policy freshly built from the same config.
    fn load_state(&mut self, _saved: &StateIn) -> Result<()> {
        Err(not_resumable("mask policy"))
    }
}

/// Every client trains the whole model.
#[derive(Debug, Default, Clone, Copy)]
pub struct FullModel;

impl MaskPolicy for FullModel {
    fn mask(&mut self, _: &mut MaskCtx) -> Result<Mask> {
        Ok(Mask::Full)
    }

    crate::stateless!();
}
