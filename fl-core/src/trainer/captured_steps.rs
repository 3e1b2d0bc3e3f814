//! A cohort's steps replayed from CUDA graphs, one graph per step shape.
//!
//! Steps of one shape (clients still training, batch length, whether some batch is padded)
//! run the same kernels on the same tensors; only their rows of the per-step tables differ,
//! and a captured step reads those at a step index kept on the device
//! ([`crate::trainer::schedule::StepAt`]). The first step of a shape that recurs often enough
//! runs eagerly on the capture stream and is then captured; every later step of that shape is
//! one replay. The graphs share their thread's memory pool (see [`crate::trainer::cuda_graph`]),
//! so a cohort of many shapes holds about one step's scratch memory, not one per shape. Off CUDA the same steps run eagerly (what the tests check the device-indexed
//! steps with).

use std::collections::BTreeMap;

use crate::error::Result;
use crate::trainer::cuda_graph::{self, Graph};

/// Clients still training, batch length, whether some batch is padded.
pub(crate) type StepShape = (i64, i64, bool);

/// Steps of a shape it takes for a capture to pay: one runs eagerly while it is captured, and
/// a capture costs about what an eager step does.
const WORTH_CAPTURING: usize = 3;

pub(crate) struct CapturedSteps {
    /// Whether steps are captured (else every step runs eagerly).
    capture: bool,
    graphs: BTreeMap<StepShape, Graph>,
    /// Steps of each shape still to run.
    remaining: BTreeMap<StepShape, usize>,
}

impl CapturedSteps {
    /// For a cohort whose steps still to run have `shapes`, in order; captured if `capture`,
    /// and replayed from `graphs`, graphs of these steps kept from an earlier cohort, where
    /// they hold a shape.
    pub(crate) fn new(
        shapes: impl IntoIterator<Item = StepShape>,
        capture: bool,
        graphs: BTreeMap<StepShape, Graph>,
    ) -> Self {
        let mut remaining = BTreeMap::new();
        for shape in shapes {
            *remaining.entry(shape).or_insert(0) += 1;
        }
        CapturedSteps { capture, graphs, remaining }
    }

    /// The graphs, for a later cohort of the same steps.
    pub(crate) fn into_graphs(self) -> BTreeMap<StepShape, Graph> {
        self.graphs
    }

    /// Runs the next step, of `shape`: a replay of its graph, else `step` eagerly, captured as
    /// well where enough steps of its shape remain. `step` must read what changes between
    /// steps from the device and write its results in place.
    pub(crate) fn run(&mut self, shape: StepShape, mut step: impl FnMut()) -> Result<()> {
        let remaining =
            self.remaining.get_mut(&shape).map_or(0, |left| std::mem::replace(left, left.saturating_sub(1)));
        if let Some(graph) = self.graphs.get(&shape) {
            return graph.replay();
        }
        if self.capture && remaining >= WORTH_CAPTURING {
            let graph = cuda_graph::with_thread_stream(|stream| stream.capture(&mut step))?;
            self.graphs.insert(shape, graph);
        } else {
            step();
        }
        Ok(())
    }
}
