//! Cohorts: how the engine batches client jobs into one computation.
//!
//! A dispatched job's inputs are fixed, so it need not train at once. It waits, *deferred*,
//! until the engine needs a result of a deferred job (its arrival or its mid-training pull) or
//! until `max_cohort` jobs wait. Then every deferred job trains: jobs whose (sub-)models have
//! equal shapes form cohorts of at most `max_cohort` jobs in dispatch order, each cohort one
//! computation on a worker (a synchronous round is one cohort; so are the jobs an asynchronous
//! scheduler dispatched since the last result it needed, whatever model versions they
//! started from). Cohorts train concurrently on the workers, so `max_cohort` also sets how
//! many cores a round can use.
//!
//! The rule reads only the order of events on the virtual clock and the configuration, never
//! the host's timing nor the number of workers, so the metrics are a deterministic function of
//! the configuration, the seed and the batching mode. (A client's result may differ in its last
//! bits between cohorts of different sizes: libtorch computes a batch of one with other
//! kernels.) With batching off (the default on CPU, see [`Batching`]), or a trainer that
//! cannot batch, every job is a cohort of one and trains as soon as the event that dispatched it
//! is handled. Outside a pack, cohorts start the largest first, whatever their dispatch order.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::pack::PackTicket;
use super::pool::JobHandle;
use crate::error::{JobFailure, Result};
use crate::trainer::TrainOutcome;

/// `[run] batching`: whether client jobs train in cohorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Batching {
    /// Cohorts on CUDA, where one large kernel replaces many tiny launches; one job at a time
    /// on CPU, where a job's working set stays in cache and the workers already use every core
    /// (measured on 2 cores: cohorts are 1.2x faster for an MLP at batch 64, up to 1.4x slower
    /// at batch 10 and 1.6x slower for LeNet-5, whose grouped convolutions are slow there).
    #[default]
    Auto,
    /// Cohorts wherever the trainer can batch, on any device.
    On,
    /// Every job alone (a cohort of one), started once the event that dispatched it is handled.
    Off,
}

impl Batching {
    /// Whether jobs train in cohorts on `device`.
    pub fn cohorts_on(self, device: tch::Device) -> bool {
        match self {
            Batching::Auto => device.is_cuda(),
            Batching::On => true,
            Batching::Off => false,
        }
    }
}

/// A cohort's outcomes, shared by its jobs; each job takes its own once.
pub(crate) struct CohortSlot {
    state: Mutex<State>,
}

enum State {
    Training(JobHandle<Result<Vec<TrainOutcome>>>),
    /// Submitted to the run's pack (see [`super::pack`]).
    Packed(PackTicket),
    Done(Vec<Option<TrainOutcome>>),
    Failed(JobFailure),
}

impl CohortSlot {
    pub(crate) fn new(handle: JobHandle<Result<Vec<TrainOutcome>>>) -> Self {
        CohortSlot { state: Mutex::new(State::Training(handle)) }
    }

    pub(crate) fn packed(ticket: PackTicket) -> Self {
        CohortSlot { state: Mutex::new(State::Packed(ticket)) }
    }

    /// A cohort trained before (a resumed run's): job `i`'s outcome is `outcomes[i]`.
    pub(crate) fn done(outcomes: Vec<TrainOutcome>) -> Self {
        CohortSlot { state: Mutex::new(State::Done(outcomes.into_iter().map(Some).collect())) }
    }

    /// Waits for the cohort and takes the outcome of its job `i`; a failure of the cohort is
    /// every job's failure.
    pub(crate) fn take(&self, i: usize) -> std::result::Result<TrainOutcome, JobFailure> {
        self.settled(i, Option::take)
    }

    /// Waits for the cohort and returns job `i`'s outcome, leaving it for [`CohortSlot::take`]
    /// (a checkpoint saves the outcomes of jobs still in flight).
    pub(crate) fn outcome(&self, i: usize) -> std::result::Result<TrainOutcome, JobFailure> {
        self.settled(i, |o| {
            o.as_ref().map(|o| TrainOutcome {
                params: o.params.shallow_clone(),
                mean_loss: o.mean_loss,
                steps: o.steps,
                lr_sum: o.lr_sum,
                pull_merge: o.pull_merge,
                state: o.state.as_ref().map(|s| s.shallow_clone()),
                kept_units: o.kept_units.clone(),
            })
        })
    }

    fn settled(
        &self,
        i: usize,
        read: impl FnOnce(&mut Option<TrainOutcome>) -> Option<TrainOutcome>,
    ) -> std::result::Result<TrainOutcome, JobFailure> {
        let mut state = self.state.lock().map_err(|_| JobFailure::ResultPoisoned)?;
        *state = match std::mem::replace(&mut *state, State::Done(Vec::new())) {
            State::Training(handle) => match handle.wait() {
                Ok(Ok(outcomes)) => State::Done(outcomes.into_iter().map(Some).collect()),
                Ok(Err(e)) => State::Failed(JobFailure::Training(Arc::new(e))),
                Err(failure) => State::Failed(failure),
            },
            State::Packed(ticket) => match ticket.wait() {
                Ok(outcomes) => State::Done(outcomes.into_iter().map(Some).collect()),
                Err(e) => State::Failed(e),
            },
            settled => settled,
        };
        match &mut *state {
            State::Done(outcomes) => outcomes.get_mut(i).and_then(read).ok_or(JobFailure::NoOutcome { index: i }),
            State::Failed(e) => Err(JobFailure::Cohort(Box::new(e.clone()))),
            State::Training(_) | State::Packed(_) => unreachable!("waited above"),
        }
    }
}

/// Splits jobs, given in dispatch order with what they must share to train together (their
/// [`crate::TrainJob::signature`]: sub-model shapes and frozen tensors), into cohorts: jobs of
/// equal signatures together, in order of each signature's first job; a group of `n` jobs is
/// cut into `⌈n / cap⌉` consecutive cohorts of nearly equal sizes.
pub(crate) fn cohorts<'a, K: PartialEq + ?Sized + 'a>(
    jobs: impl IntoIterator<Item = (u64, &'a K)>,
    cap: usize,
) -> Vec<Vec<u64>> {
    let mut groups: Vec<(&K, Vec<u64>)> = Vec::new();
    for (job, shapes) in jobs {
        match groups.iter_mut().find(|(s, _)| *s == shapes) {
            Some((_, ids)) => ids.push(job),
            None => groups.push((shapes, vec![job])),
        }
    }
    let mut out = Vec::new();
    for (_, ids) in groups {
        let parts = ids.len().div_ceil(cap.max(1));
        let (base, extra) = (ids.len() / parts, ids.len() % parts);
        let mut rest = ids.as_slice();
        for p in 0..parts {
            let (head, tail) = rest.split_at(base + usize::from(p < extra));
            out.push(head.to_vec());
            rest = tail;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_group_by_shape_and_split_evenly_under_the_cap() {
        let (a, b) = (vec![vec![2, 3]], vec![vec![1, 3]]);
        let jobs = [(0, &a), (1, &b), (2, &a), (3, &a), (4, &a), (5, &a), (6, &b)];
        let jobs = jobs.iter().map(|(j, s)| (*j, s.as_slice()));
        // Five jobs of shape `a` under a cap of 2: three cohorts of 2, 2 and 1; `b`'s two together.
        assert_eq!(cohorts(jobs.clone(), 2), vec![vec![0, 2], vec![3, 4], vec![5], vec![1, 6]]);
        assert_eq!(cohorts(jobs.clone(), 4), vec![vec![0, 2, 3], vec![4, 5], vec![1, 6]]);
        assert_eq!(cohorts(jobs.clone(), usize::MAX), vec![vec![0, 2, 3, 4, 5], vec![1, 6]]);
        assert_eq!(cohorts(jobs, 1).len(), 7);
    }
}
