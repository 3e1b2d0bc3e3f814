//! A cohort's steps replayed from CUDA graphs, one graph per step shape.
//!
//! Steps of one shape ([`StepShape`]: clients still training, batch length, and the host's
//! branches) run the same kernels on the same tensors; only their rows of the per-step tables
//! differ, and a captured step reads those at a step index kept on the device
//! ([`crate::trainer::schedule::StepAt`]). The first step of a shape that recurs often enough
//! runs eagerly on the capture stream and is then captured; every later step of that shape is
//! one replay. The graphs share their thread's memory pool (see [`crate::trainer::cuda_graph`]),
//! so a cohort of many shapes holds about one step's scratch memory, not one per shape.
//!
//! Off CUDA the same steps run eagerly, and a step of a shape that would be replayed runs with
//! the index of the step its graph would have been captured at: a replay runs the captured
//! kernels whatever the step, so a step that reads anything of its own from the host (a
//! table row by the host index, a value computed from it) trains other numbers there, and
//! the tests that compare these steps with the cohort's see it without a GPU.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::trainer::cuda_graph::{self, Graph};

/// What a step's kernels depend on besides the values they read: steps of equal shapes replay
/// one graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct StepShape {
    /// Clients still training.
    pub clients: i64,
    /// Batch length.
    pub batch: i64,
    /// Whether some batch is padded, where the model reads the padding mask.
    pub padded: bool,
    /// Whether PLATON prunes after the step.
    pub prunes: bool,
    /// Whether some client ends an epoch at the step, where early stopping checks it.
    pub epoch_ends: bool,
}

/// Steps of a shape it takes for a capture to pay: one runs eagerly while it is captured, and
/// a capture costs about what an eager step does.
const WORTH_CAPTURING: usize = 3;

/// What replays the steps of a shape.
pub(crate) enum Replay {
    /// Its CUDA graph.
    Graph(Graph),
    /// Off CUDA: the index of the step its graph would have been captured at, which every
    /// later step of the shape runs with, eagerly.
    CapturedAt(usize),
}

pub(crate) struct CapturedSteps {
    /// Whether steps are captured as CUDA graphs (else replays are emulated, eagerly).
    capture: bool,
    replays: BTreeMap<StepShape, Replay>,
    /// Steps of each shape still to run.
    remaining: BTreeMap<StepShape, usize>,
}

impl CapturedSteps {
    /// For a cohort whose steps still to run have `shapes`, in order; captured if `capture`,
    /// and replayed from `replays`, those of these steps kept from an earlier cohort, where
    /// they hold a shape.
    pub(crate) fn new(
        shapes: impl IntoIterator<Item = StepShape>,
        capture: bool,
        replays: BTreeMap<StepShape, Replay>,
    ) -> Self {
        let mut remaining = BTreeMap::new();
        for shape in shapes {
            *remaining.entry(shape).or_insert(0) += 1;
        }
        CapturedSteps { capture, replays, remaining }
    }

    /// The replays, for a later cohort of the same steps.
    pub(crate) fn into_replays(self) -> BTreeMap<StepShape, Replay> {
        self.replays
    }

    /// Runs step `t`, of `shape`: a replay of its shape, else `step(t)` eagerly, captured as
    /// well where enough steps of its shape remain. `step(i)` runs step `i`; it must read what
    /// changes between steps from the device and write its results in place.
    pub(crate) fn run(&mut self, shape: StepShape, t: usize, mut step: impl FnMut(usize)) -> Result<()> {
        let remaining =
            self.remaining.get_mut(&shape).map_or(0, |left| std::mem::replace(left, left.saturating_sub(1)));
        match self.replays.get(&shape) {
            Some(Replay::Graph(graph)) => return graph.replay(),
            Some(&Replay::CapturedAt(at)) => {
                step(at);
                return Ok(());
            }
            None => {}
        }
        if remaining < WORTH_CAPTURING {
            step(t);
        } else if self.capture {
            let graph = cuda_graph::with_thread_stream(|stream| stream.capture(|| step(t)))?;
            self.replays.insert(shape, Replay::Graph(graph));
        } else {
            step(t);
            self.replays.insert(shape, Replay::CapturedAt(t));
        }
        Ok(())
    }
}
