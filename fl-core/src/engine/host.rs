//! The engine's side of the scheduler's [`SchedulingContext`]: queries and actions on the
//! [`World`] of a run, and the observer its aggregations report evaluations to.

use tch::{Device, Tensor};

use super::record::Observer;
use super::world::{Event, World};
use crate::clock::{Tick, seconds};
use crate::error::{EngineError, Result};
use crate::params::ParamSet;
use crate::profile::DeviceProfile;
use crate::rng::{self, Rng, tag};
use crate::scheduler::{JobStart, SchedulingContext};
use crate::update::ClientUpdate;

/// The engine's side of [`SchedulingContext`]: the run and the observer of its evaluations.
pub(super) struct Host<'a> {
    pub(super) world: &'a mut World,
    pub(super) observer: &'a mut dyn Observer,
}

impl SchedulingContext for Host<'_> {
    fn now(&self) -> Tick {
        self.world.now
    }

    fn now_s(&self) -> f64 {
        seconds(self.world.now)
    }

    fn version(&self) -> u64 {
        self.world.version
    }

    fn num_clients(&self) -> usize {
        self.world.clients.len()
    }

    fn is_busy(&self, client: usize) -> bool {
        self.world.clients[client].running > 0
    }

    fn idle_clients(&self) -> Vec<usize> {
        (0..self.world.clients.len()).filter(|&c| self.world.clients[c].running == 0).collect()
    }

    fn in_flight(&self) -> usize {
        self.world.in_flight.len()
    }

    fn pending(&self) -> Vec<(usize, u64)> {
        self.world.pending.iter().map(|u| (u.client, u.base_version)).collect()
    }

    fn pending_len(&self) -> usize {
        self.world.pending.len()
    }

    fn profile(&self, client: usize) -> &DeviceProfile {
        &self.world.profiles[client]
    }

    fn samples(&self, client: usize) -> usize {
        self.world.clients[client].samples
    }

    fn global(&self) -> &ParamSet {
        &self.world.global
    }

    fn rng(&mut self) -> &mut Rng {
        &mut self.world.sched_rng
    }

    fn dispatch(&mut self, client: usize) -> Result<()> {
        self.world.dispatch(client, None, None, JobStart::default())
    }

    fn dispatch_job(&mut self, client: usize, start: JobStart) -> Result<()> {
        if !(start.wait_s >= 0.0 && start.wait_s.is_finite()) {
            return Err(EngineError::WaitSeconds { wait_s: start.wait_s }.into());
        }
        if let Some((version, params)) = &start.from {
            if *version > self.world.version {
                return Err(EngineError::StartVersionAhead { version: *version, current: self.world.version }.into());
            }
            if params.shapes() != self.world.shapes {
                return Err(EngineError::StartShapes.into());
            }
        }
        self.world.dispatch(client, None, None, start)
    }

    fn pending_updates(&self) -> &[ClientUpdate] {
        &self.world.pending
    }

    fn fresh_model(&self, key: u64) -> ParamSet {
        let device = self.world.global.tensors().first().map_or(Device::Cpu, Tensor::device);
        self.world.model.init(&mut rng::stream(self.world.seed, &[tag::MODEL_INIT, 1, key])).to_device(device)
    }

    fn mask_choices(&self) -> usize {
        self.world.mask_policy.choices()
    }

    fn dispatch_choice(&mut self, client: usize, choice: usize) -> Result<()> {
        self.world.dispatch(client, None, Some(choice), JobStart::default())
    }

    fn job_duration_s(&mut self, client: usize, choice: Option<usize>) -> Result<f64> {
        let w = &mut *self.world;
        // Pricing must not advance the policy's stream: it draws from a copy.
        let mut rng = w.mask_rng.clone();
        let mask = w.mask_for(client, choice, &mut rng)?;
        Ok(w.profiles[client].duration_s(&w.job_cost(client, &mask)))
    }

    fn set_diagnostic(&mut self, name: &str, value: f64) {
        self.world.sched_diagnostics.insert(name.to_string(), value);
    }

    fn dispatch_with_pull(&mut self, client: usize, share: f64) -> Result<()> {
        if !(share > 0.0 && share < 1.0) {
            return Err(EngineError::PullShare { share }.into());
        }
        self.world.dispatch(client, Some(share), None, JobStart::default())
    }

    fn aggregate(&mut self) -> Result<()> {
        self.world.aggregate(self.observer)
    }

    fn set_timer(&mut self, at: Tick, tag: u64) {
        let at = at.max(self.world.now);
        self.world.queue.push(at, Event::Timer(tag));
    }

    fn stop(&mut self) {
        self.world.stopped = true;
    }
}
