//! The batch schedule of a cohort: which samples each client trains on at each step.
//!
//! Each client's sample order comes from its own host stream, exactly as if it trained alone:
//! its positions are reshuffled at the start of every epoch (the previous epoch's order
//! shuffled again) and cut into consecutive batches, the last one of an epoch shorter. The
//! whole schedule is drawn before training and copied to the device once, so the step loop
//! makes no host round trip.
//!
//! Clients train in lockstep. Cohort order puts the clients with the most steps first, so the
//! clients still training at any step are a prefix of the cohort and the others drop out of
//! the computation (they are not padded). Within a step, a client whose batch is shorter than
//! the longest of the step is padded with zero-weight repeats of a valid sample: they cost
//! compute but add nothing to its loss or gradients.

use rand::seq::SliceRandom;
use tch::{Device, Tensor};

use crate::data::Dataset;
use crate::rng::Rng;
use crate::trainer::TrainJob;

/// Step `t` of a cohort as its per-step tables (`[T, ...]`: batches, learning rates) are read:
/// at `t` from the host, or at a step index kept on the device. A step captured as a CUDA graph
/// reads the device index, so that each replay reads its own step's rows; the host `t` still
/// gives the step's shape, which a graph is captured for.
#[derive(Clone, Copy)]
pub struct StepAt<'a> {
    pub t: usize,
    pub device: Option<&'a Tensor>,
}

impl StepAt<'_> {
    /// Step `t`, read at `t`.
    pub fn host(t: usize) -> StepAt<'static> {
        StepAt { t, device: None }
    }

    /// This step's row of `table`.
    pub fn row(&self, table: &Tensor) -> Tensor {
        match self.device {
            Some(index) => table.index_select(0, index).squeeze_dim(0),
            None => table.get(self.t as i64),
        }
    }
}

/// One client's part of a cohort schedule.
pub struct ClientPlan<'a> {
    /// The client's sample indices into the training set, on the compute device.
    pub indices: &'a Tensor,
    /// How many samples it has.
    pub samples: usize,
    /// Optimisation steps it makes.
    pub steps: usize,
    /// Its batch-order stream.
    pub rng: &'a mut Rng,
}

/// A cohort's whole batch schedule, drawn before training and kept on the device.
pub struct BatchSchedule {
    /// Steps of each client, in cohort order (non-increasing).
    steps: Vec<usize>,
    /// `[T, C, B]` sample indices into the training set.
    indices: Tensor,
    /// `[T, C, B]` loss weights: `1 / len` for a client's `len` samples of the step, 0 for padding.
    weights: Tensor,
    /// Per step: clients still training (a prefix) and the longest batch among them.
    shapes: Vec<(i64, i64)>,
    /// Per step: whether some client's batch is padded.
    padded: Vec<bool>,
    /// Per client (cohort order), per step: the local epoch (pass over its samples) it is in.
    epochs: Vec<Vec<usize>>,
}

impl BatchSchedule {
    /// Draws the schedule of `clients`, given in cohort order (steps non-increasing), with
    /// batches of at most `batch_size` samples.
    pub fn draw(mut clients: Vec<ClientPlan>, batch_size: usize, device: Device) -> BatchSchedule {
        let steps: Vec<usize> = clients.iter().map(|c| c.steps).collect();
        assert!(steps.windows(2).all(|w| w[0] >= w[1]), "cohort order puts the longest jobs first");
        let total = steps.first().copied().unwrap_or(0);
        let width = clients.iter().map(|c| batch_size.min(c.samples)).max().unwrap_or(1);
        let cells = total * width;
        let mut positions = vec![0i64; clients.len() * cells];
        let mut weights = vec![0f32; clients.len() * cells];
        let mut longest = vec![0usize; total];
        let mut shortest = vec![usize::MAX; total];
        let mut epochs = Vec::with_capacity(clients.len());
        for (c, plan) in clients.iter_mut().enumerate() {
            let n = plan.samples;
            let mut order: Vec<i64> = (0..n as i64).collect();
            let mut position = n;
            let mut epoch_of = Vec::with_capacity(plan.steps);
            let mut passes = 0;
            for (step, longest) in longest.iter_mut().enumerate().take(plan.steps) {
                if position >= n {
                    order.shuffle(plan.rng);
                    position = 0;
                    passes += 1;
                }
                epoch_of.push(passes - 1);
                let len = batch_size.min(n - position);
                let at = c * cells + step * width;
                positions[at..at + len].copy_from_slice(&order[position..position + len]);
                weights[at..at + len].fill(1.0 / len as f32);
                *longest = (*longest).max(len);
                shortest[step] = shortest[step].min(len);
                position += len;
            }
            epochs.push(epoch_of);
        }
        let shape = [clients.len() as i64, total as i64, width as i64];
        let positions = Tensor::from_slice(&positions).reshape(shape).to_device(device);
        let indices: Vec<Tensor> = clients
            .iter()
            .enumerate()
            .map(|(c, plan)| plan.indices.index_select(0, &positions.get(c as i64).reshape([-1])))
            .collect();
        let indices = Tensor::stack(&indices, 0).reshape(shape).permute([1, 0, 2]).contiguous();
        let weights = Tensor::from_slice(&weights).reshape(shape).to_device(device).permute([1, 0, 2]).contiguous();
        let shapes = (0..total).map(|t| (steps.iter().filter(|&&s| s > t).count() as i64, longest[t] as i64)).collect();
        let padded = (0..total).map(|t| shortest[t] < longest[t]).collect();
        BatchSchedule { steps, indices, weights, shapes, padded, epochs }
    }

    /// The schedule of the jobs `jobs[order[0]], jobs[order[1]], …` (cohort order, steps
    /// non-increasing), job `j` making `steps[j]` steps, each drawing from its own stream.
    pub fn draw_for_jobs(
        jobs: &mut [TrainJob],
        order: &[usize],
        steps: &[usize],
        batch_size: usize,
        device: Device,
    ) -> BatchSchedule {
        let mut slots: Vec<Option<&mut TrainJob>> = jobs.iter_mut().map(Some).collect();
        let plans = order
            .iter()
            .map(|&j| {
                let job = slots[j].take().expect("each job once");
                let samples = job.indices.size()[0] as usize;
                ClientPlan { indices: &job.indices, samples, steps: steps[j], rng: &mut job.rng }
            })
            .collect();
        BatchSchedule::draw(plans, batch_size, device)
    }

    /// Steps of the longest job.
    pub fn total_steps(&self) -> usize {
        self.shapes.len()
    }

    /// Steps of each client, in cohort order.
    pub fn steps(&self) -> &[usize] {
        &self.steps
    }

    /// Clients training at step `t` (the first `k` of the cohort) and the longest batch `b`.
    pub fn shape(&self, t: usize) -> (i64, i64) {
        self.shapes[t]
    }

    /// Per client (cohort order), per step of that client: its local epoch, from 0.
    pub fn epochs(&self) -> &[Vec<usize>] {
        &self.epochs
    }

    /// Whether some client's batch at step `t` is padded (see [`crate::model::Training::valid`]).
    pub fn padded(&self, t: usize) -> bool {
        self.padded[t]
    }

    /// The per-step tables on the device, sample indices and loss weights `[T, C, B]`, which
    /// a kept cohort's graphs read where they are ([`crate::trainer::kept_steps`]).
    pub(crate) fn tables_mut(&mut self) -> [&mut Tensor; 2] {
        [&mut self.indices, &mut self.weights]
    }

    /// Sample indices `[k, b]` and loss weights `[k, b]` of step `at`.
    pub fn batch(&self, at: StepAt) -> (Tensor, Tensor) {
        let (k, b) = self.shapes[at.t];
        let cut = |x: &Tensor| at.row(x).narrow(0, 0, k).narrow(1, 0, b);
        (cut(&self.indices), cut(&self.weights))
    }

    /// Step `t`'s batch of `data`: the clients still training `k`, the batch length `b`, the
    /// inputs `[k, b, ...]`, the labels `[k·b]` and the loss weights `[k, b]`.
    pub fn inputs(&self, data: &Dataset, at: StepAt) -> (i64, i64, Tensor, Tensor, Tensor) {
        let (k, b) = self.shape(at.t);
        let (indices, weights) = self.batch(at);
        let flat = indices.reshape([-1]);
        let mut x_shape = vec![k, b];
        x_shape.extend(&data.x.size()[1..]);
        let x = data.x.index_select(0, &flat).reshape(x_shape.as_slice());
        let y = data.y.index_select(0, &flat);
        (k, b, x, y, weights)
    }
}
