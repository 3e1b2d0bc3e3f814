//! A cohort's CUDA graphs kept for the worker's next cohort of the same kind.
//!
//! A synchronous round's cohort is the last one again with other values: the same clients'
//! step counts, the same shapes, the same options. Capturing its step shapes again costs about
//! two eager steps and two host waits each, a tenth of a kdd23 round on an H200 by the
//! README's figures. So a cohort that finishes gives its graphs, and the tensors its steps
//! read, to its thread ([`keep`]); the next cohort on that thread whose [`StepKey`] is equal
//! takes them ([`take`]), copies its own values into those tensors and replays the graphs
//! without capturing. A thread keeps the last few kinds of cohort it trained, so that cohorts
//! of two or three kinds taking turns (a round cut into cohorts by `max_cohort`) each find
//! theirs. Graphs stay with the thread that captured them: its capture stream's
//! memory pool holds their scratch, which only one replay at a time may use.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use crate::data::Dataset;
use crate::model::Model;
use crate::trainer::captured_steps::{Replay, StepShape};
use crate::trainer::sgd::SgdConfig;

/// What a captured step's kernels depend on besides the values of the tensors it reads:
/// cohorts of equal keys run the same kernels on tensors of the same shapes. The model and
/// the data are held, so that their addresses stay theirs while the key lives.
pub(crate) struct StepKey {
    pub config: SgdConfig,
    pub model: Arc<dyn Model>,
    pub data: Dataset,
    pub trainable: Vec<bool>,
    pub masked: Vec<bool>,
    pub reads_padding: bool,
    /// Shape, kind and device of each tensor the steps read, in the cohort's order.
    pub inputs: Vec<(Vec<i64>, Kind, Device)>,
}

impl PartialEq for StepKey {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
            && Arc::ptr_eq(&self.model, &other.model)
            && self.data.x.data_ptr() == other.data.x.data_ptr()
            && self.data.y.data_ptr() == other.data.y.data_ptr()
            && self.trainable == other.trainable
            && self.masked == other.masked
            && self.reads_padding == other.reads_padding
            && self.inputs == other.inputs
    }
}

/// A finished cohort's graphs (off CUDA, their emulation) and the tensors they read, in the
/// order of the key's inputs.
pub(crate) struct KeptSteps {
    pub key: StepKey,
    pub inputs: Vec<Tensor>,
    pub replays: BTreeMap<StepShape, Replay>,
}

/// Kinds of cohort a thread keeps steps for; the least recently kept goes first.
const KINDS_KEPT: usize = 4;

thread_local! {
    static KEPT: RefCell<Vec<KeptSteps>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `steps` for this thread's next cohort of their key, dropping the least recently kept
/// steps of another kind beyond [`KINDS_KEPT`].
pub(crate) fn keep(steps: KeptSteps) {
    KEPT.with_borrow_mut(|kept| {
        kept.retain(|k| k.key != steps.key);
        if kept.len() == KINDS_KEPT {
            kept.remove(0);
        }
        kept.push(steps);
    });
}

/// This thread's kept steps of key `key`, if any.
pub(crate) fn take(key: &StepKey) -> Option<KeptSteps> {
    KEPT.with_borrow_mut(|kept| kept.iter().position(|k| &k.key == key).map(|at| kept.remove(at)))
}
