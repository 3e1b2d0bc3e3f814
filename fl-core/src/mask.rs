//! `Mask`: which part of each tensor a client trains.
//!
//! Two kinds, because the papers need both. *Structured* masks keep index lists along tensor
//! dimensions (kept neurons, channels, heads): the kept part is a physically smaller tensor
//! that can be extracted, trained and scattered back (HeteroFL, FedRolex, Fed-RAA fragments).
//! *Elementwise* masks keep individual elements as a 0/1 tensor (KDD'23 regions, PruneFL);
//! the client trains the full-shaped tensor with masked gradients.
//!
//! A structured mask may also give each tensor a [`TensorRole`]: *trained* (the default),
//! *frozen* (the client holds it and runs it forward, but computes no gradient for it and
//! keeps no optimizer state: a depth window's blocks below the window) or *dropped* (the
//! sub-model has no such tensor: the blocks above the window, the exits it does not end at)
//! or *personal* (trained by the client and kept by it: Co-S²P's early exits, see
//! `engine::personal`). Frozen, dropped and personal tensors are outside the mask: their delta
//! is zero and no client covers them.

use tch::{Device, Kind, Tensor};

use crate::error::{Result, ShapeError};
use crate::learned_width::WidthBudget;
use crate::params::ParamSet;
use crate::structure::Structure;

/// What a job does with one tensor of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TensorRole {
    /// Held, run and trained (its kept part).
    #[default]
    Train,
    /// Held and run forward, never trained: no gradient, no optimizer state, a zero delta.
    Freeze,
    /// Not part of the sub-model at all.
    Drop,
    /// Held, run and trained by the client, which keeps it: its job starts from the client's
    /// own copy (the global one at its first job), and it is neither uploaded nor aggregated
    /// (Co-S²P's personal exit heads).
    Personal,
}

impl TensorRole {
    /// Whether the job trains the tensor (trained or personal).
    pub fn trains(self) -> bool {
        matches!(self, TensorRole::Train | TensorRole::Personal)
    }
}

/// Kept indices per tensor and dimension (`None` keeps the whole dimension), and optionally
/// each tensor's [`TensorRole`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StructuredMask {
    keep: Vec<Vec<Option<Vec<i64>>>>,
    /// One role per tensor; empty: every tensor is trained.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    roles: Vec<TensorRole>,
    /// Where the client chooses its own width inside the mask (learned width masks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    width: Option<WidthBudget>,
}

/// The part of the model a client trains in a job.
#[derive(Debug)]
pub enum Mask {
    /// The whole model.
    Full,
    /// Kept indices along tensor dimensions: the client trains a physically smaller sub-model.
    Structured(StructuredMask),
    /// One 0/1 float tensor per parameter tensor; `None` keeps that tensor whole.
    Elementwise(Vec<Option<Tensor>>),
}

impl StructuredMask {
    /// A mask from kept indices, `keep[tensor][dim]` (`None`: the whole dimension); check it
    /// with [`StructuredMask::validate`].
    pub fn new(keep: Vec<Vec<Option<Vec<i64>>>>) -> Self {
        StructuredMask { keep, roles: Vec::new(), width: None }
    }

    /// This mask with the client choosing its own width inside it under `budget`
    /// ([`crate::learned_width`]): the job holds the groups at full width and its trainer
    /// finalises the units it keeps.
    pub fn with_width_budget(self, budget: WidthBudget) -> Self {
        StructuredMask { width: Some(budget), ..self }
    }

    /// This mask with a role for each tensor (validated with the mask).
    pub fn with_roles(self, roles: Vec<TensorRole>) -> Self {
        StructuredMask { roles, ..self }
    }

    /// What the job does with tensor `tensor`.
    pub fn role(&self, tensor: usize) -> TensorRole {
        self.roles.get(tensor).copied().unwrap_or_default()
    }

    /// This mask with the trained tensors flagged in `personal` (one flag per model tensor)
    /// kept by the client ([`TensorRole::Personal`]).
    pub fn with_personal(mut self, personal: &[bool]) -> Self {
        if self.roles.is_empty() {
            self.roles = vec![TensorRole::Train; personal.len()];
        }
        for (role, &p) in self.roles.iter_mut().zip(personal) {
            if p && *role == TensorRole::Train {
                *role = TensorRole::Personal;
            }
        }
        self
    }

    /// This mask with the groups of `structure` that `kept` names (one entry per group, as in
    /// [`Structure::mask_from_units`]) narrowed to those units, and no width budget: the
    /// sub-model a client that chooses its width ends up training.
    pub fn narrowed(&self, structure: &Structure, kept: &[Option<Vec<i64>>]) -> StructuredMask {
        let mut keep = self.keep.clone();
        for (group, units) in structure.groups.iter().zip(kept) {
            let Some(units) = units else { continue };
            for m in &group.members {
                keep[m.tensor][m.dim] = Some(m.indices(units));
            }
        }
        StructuredMask { keep, roles: self.roles.clone(), width: None }
    }

    /// Kept indices of dimension `dim` of tensor `tensor` (`None`: all).
    pub fn kept(&self, tensor: usize, dim: usize) -> Option<&[i64]> {
        self.keep.get(tensor).and_then(|dims| dims.get(dim)).and_then(|k| k.as_deref())
    }

    /// Checks ranks, ranges and uniqueness against the full shapes.
    pub fn validate(&self, shapes: &[Vec<i64>]) -> Result<()> {
        if self.keep.len() != shapes.len() {
            return Err(ShapeError::MaskTensors { mask: self.keep.len(), model: shapes.len() }.into());
        }
        if !self.roles.is_empty() && self.roles.len() != shapes.len() {
            return Err(ShapeError::MaskTensors { mask: self.roles.len(), model: shapes.len() }.into());
        }
        // The sub-model still ends in a classifier: its last two held tensors.
        if !self.roles.is_empty() && self.roles.iter().filter(|r| **r != TensorRole::Drop).count() < 2 {
            return Err(ShapeError::MaskDropsAll.into());
        }
        for (t, (dims, shape)) in self.keep.iter().zip(shapes).enumerate() {
            if dims.len() != shape.len() {
                return Err(ShapeError::MaskRank { tensor: t, mask: dims.len(), dims: shape.len() }.into());
            }
            for (d, idx) in dims.iter().enumerate() {
                let Some(idx) = idx else { continue };
                let mut sorted = idx.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != idx.len() || idx.iter().any(|&i| i < 0 || i >= shape[d]) {
                    return Err(ShapeError::MaskIndices { tensor: t, dim: d, size: shape[d] }.into());
                }
            }
        }
        Ok(())
    }

    fn sub_shape(&self, t: usize, shape: &[i64]) -> Vec<i64> {
        shape.iter().enumerate().map(|(d, &n)| self.kept(t, d).map_or(n, |k| k.len() as i64)).collect()
    }
}

impl Mask {
    /// A handle sharing the elementwise tensors (masks are never mutated after creation).
    pub fn shallow_clone(&self) -> Mask {
        match self {
            Mask::Full => Mask::Full,
            Mask::Structured(s) => Mask::Structured(s.clone()),
            Mask::Elementwise(ts) => {
                Mask::Elementwise(ts.iter().map(|t| t.as_ref().map(Tensor::shallow_clone)).collect())
            }
        }
    }

    /// The width the client chooses for itself inside this mask, if it does.
    pub fn width_budget(&self) -> Option<&WidthBudget> {
        match self {
            Mask::Structured(s) => s.width.as_ref(),
            Mask::Full | Mask::Elementwise(_) => None,
        }
    }

    /// Whether this is [`Mask::Full`] (a structured or elementwise mask that happens to keep
    /// everything is not).
    pub fn is_full(&self) -> bool {
        matches!(self, Mask::Full)
    }

    /// The model tensors the sub-model holds, in order: all but the dropped ones.
    pub fn held(&self, tensors: usize) -> Vec<usize> {
        (0..tensors).filter(|&t| self.role(t) != TensorRole::Drop).collect()
    }

    /// What the job does with tensor `tensor` (trained, unless a structured mask says
    /// otherwise).
    pub fn role(&self, tensor: usize) -> TensorRole {
        match self {
            Mask::Structured(s) => s.role(tensor),
            Mask::Full | Mask::Elementwise(_) => TensorRole::Train,
        }
    }

    /// Per tensor of the sub-model (the [`Mask::held`] ones), whether the job freezes it.
    pub fn frozen(&self, tensors: usize) -> Vec<bool> {
        self.held(tensors).into_iter().map(|t| self.role(t) == TensorRole::Freeze).collect()
    }

    /// Shapes of the sub-model's tensors: one per held tensor, so fewer than `shapes` when
    /// the mask drops some.
    pub fn sub_shapes(&self, shapes: &[Vec<i64>]) -> Vec<Vec<i64>> {
        match self {
            Mask::Structured(s) => self.held(shapes.len()).into_iter().map(|t| s.sub_shape(t, &shapes[t])).collect(),
            Mask::Full | Mask::Elementwise(_) => shapes.to_vec(),
        }
    }

    /// Number of elements the client holds per model tensor (0 for a dropped one; a frozen
    /// one counts: the client downloads it).
    pub fn held_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<i64> {
        match self {
            Mask::Structured(s) => shapes
                .iter()
                .enumerate()
                .map(|(t, sh)| match s.role(t) {
                    TensorRole::Drop => 0,
                    _ => s.sub_shape(t, sh).iter().product(),
                })
                .collect(),
            _ => self.kept_per_tensor(shapes),
        }
    }

    /// Number of kept (trained) elements per model tensor (0 for frozen and dropped ones;
    /// personal ones count: the job trains them).
    pub fn kept_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<i64> {
        match self {
            Mask::Structured(s) => shapes
                .iter()
                .enumerate()
                .map(|(t, sh)| match s.role(t).trains() {
                    true => s.sub_shape(t, sh).iter().product(),
                    false => 0,
                })
                .collect(),
            Mask::Elementwise(ts) => ts
                .iter()
                .zip(shapes)
                .map(|(m, sh)| match m {
                    Some(m) => m.sum(Kind::Double).double_value(&[]).round() as i64,
                    None => sh.iter().product(),
                })
                .collect(),
            Mask::Full => shapes.iter().map(|s| s.iter().product()).collect(),
        }
    }

    /// Number of elements the client uploads per model tensor: the kept ones of the tensors it
    /// does not keep for itself.
    pub fn uploaded_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<i64> {
        let mut kept = self.kept_per_tensor(shapes);
        for (t, k) in kept.iter_mut().enumerate() {
            if self.role(t) == TensorRole::Personal {
                *k = 0;
            }
        }
        kept
    }

    /// Total kept elements.
    pub fn kept_params(&self, shapes: &[Vec<i64>]) -> i64 {
        self.kept_per_tensor(shapes).iter().sum()
    }

    /// The client's starting tensors: for a structured mask the sub-tensor of each held tensor
    /// (names kept, dropped tensors left out); for elementwise masks the full-shaped tensor
    /// with masked-out elements set to 0 (the sub-model as a sparse model: they take no part in
    /// the forward pass, and gradient masking keeps them at 0).
    pub fn extract(&self, params: &ParamSet) -> ParamSet {
        match self {
            Mask::Structured(s) => {
                let held = self.held(params.len());
                let names = held.iter().map(|&t| params.names()[t].clone()).collect();
                let tensors = held
                    .iter()
                    .map(|&t| {
                        let full = &params.tensors()[t];
                        let mut out = full.shallow_clone();
                        for d in 0..full.dim() {
                            if let Some(k) = s.kept(t, d) {
                                out = out.index_select(d as i64, &Tensor::from_slice(k).to_device(full.device()));
                            }
                        }
                        out
                    })
                    .collect();
                ParamSet::new(names, tensors).expect("one name per held tensor")
            }
            Mask::Elementwise(_) => self.scatter(params, &params.shapes()),
            Mask::Full => params.shallow_clone(),
        }
    }

    /// Places `sub` (shaped by [`Mask::sub_shapes`]) into zero tensors of the full `shapes`;
    /// elements outside the mask are exactly zero. (Frozen tensors are placed like trained
    /// ones: a delta of a frozen tensor is zero because the job never moves it.)
    ///
    /// # Panics
    /// If the mask drops tensors, whose names `sub` cannot give: use [`Mask::scatter_named`].
    pub fn scatter(&self, sub: &ParamSet, shapes: &[Vec<i64>]) -> ParamSet {
        assert!(
            self.held(shapes.len()).len() == shapes.len(),
            "scatter: the mask drops tensors; scatter_named gives them their names"
        );
        self.scatter_named(sub, sub.names(), shapes)
    }

    /// [`Mask::scatter`] for any mask: the full model's tensors are called `names`, and a
    /// dropped or personal tensor is placed as zeros (a personal one stays with the client).
    pub fn scatter_named(&self, sub: &ParamSet, names: &[String], shapes: &[Vec<i64>]) -> ParamSet {
        match self {
            Mask::Full => sub.shallow_clone(),
            Mask::Elementwise(ms) => {
                let mut t_idx = 0;
                sub.map(|t| {
                    let out = match &ms[t_idx] {
                        Some(m) => t * m,
                        None => t.shallow_clone(),
                    };
                    t_idx += 1;
                    out
                })
            }
            Mask::Structured(s) => {
                let held = self.held(shapes.len());
                assert_eq!(
                    held.len(),
                    sub.len(),
                    "scatter: a sub-model of {} tensors for a mask holding {}",
                    sub.len(),
                    held.len()
                );
                let (kind, device) =
                    sub.tensors().first().map_or((Kind::Float, Device::Cpu), |t| (t.kind(), t.device()));
                let mut placed: Vec<Option<Tensor>> = (0..shapes.len()).map(|_| None).collect();
                for (&t_idx, t) in held.iter().zip(sub.tensors()) {
                    if s.role(t_idx) == TensorRole::Personal {
                        continue;
                    }
                    let mut out = t.shallow_clone();
                    for (d, &n) in shapes[t_idx].iter().enumerate() {
                        if let Some(k) = s.kept(t_idx, d) {
                            let mut size = out.size();
                            size[d] = n;
                            let idx = Tensor::from_slice(k).to_device(t.device());
                            out = Tensor::zeros(&size[..], (out.kind(), out.device())).index_copy(d as i64, &idx, &out);
                        }
                    }
                    placed[t_idx] = Some(out);
                }
                let tensors = placed
                    .into_iter()
                    .zip(shapes)
                    .map(|(t, sh)| t.unwrap_or_else(|| Tensor::zeros(sh.as_slice(), (kind, device))))
                    .collect();
                ParamSet::new(names.to_vec(), tensors).expect("one name per tensor")
            }
        }
    }

    /// The mask as one 0/1 float tensor per parameter tensor.
    pub fn dense(&self, shapes: &[Vec<i64>], device: Device) -> Vec<Tensor> {
        let ones = |sh: &Vec<i64>| Tensor::ones(&sh[..], (Kind::Float, device));
        match self {
            Mask::Full => shapes.iter().map(ones).collect(),
            Mask::Elementwise(ms) => ms
                .iter()
                .zip(shapes)
                .map(|(m, sh)| m.as_ref().map_or_else(|| ones(sh), |m| m.to_kind(Kind::Float).to_device(device)))
                .collect(),
            Mask::Structured(s) => {
                let held = self.held(shapes.len());
                let names = held.iter().map(|i| i.to_string()).collect();
                let covered = held.iter().zip(self.sub_shapes(shapes)).map(|(&t, sh)| match s.role(t) {
                    TensorRole::Freeze => Tensor::zeros(sh.as_slice(), (Kind::Float, device)),
                    _ => ones(&sh),
                });
                let sub = ParamSet::new(names, covered.collect()).expect("one name per held tensor");
                let all: Vec<String> = (0..shapes.len()).map(|i| i.to_string()).collect();
                self.scatter_named(&sub, &all, shapes).into_tensors()
            }
        }
    }
}

/// How many clients trained each element: the sum of their dense masks.
#[derive(Debug)]
pub struct Coverage {
    counts: Vec<Tensor>,
}

impl Coverage {
    /// Zero counts for tensors of full `shapes`, on `device`.
    pub fn new(shapes: &[Vec<i64>], device: Device) -> Self {
        Coverage { counts: shapes.iter().map(|s| Tensor::zeros(&s[..], (Kind::Float, device))).collect() }
    }

    /// Counts one more client that trained under `mask`.
    pub fn add(&mut self, mask: &Mask) {
        let shapes: Vec<Vec<i64>> = self.counts.iter().map(Tensor::size).collect();
        let device = self.counts.first().map_or(Device::Cpu, Tensor::device);
        for (c, m) in self.counts.iter_mut().zip(mask.dense(&shapes, device)) {
            *c = &*c + m;
        }
    }

    /// Per tensor, how many clients trained each element (float tensors of the full shapes).
    pub fn counts(&self) -> &[Tensor] {
        &self.counts
    }

    /// Share of elements that no client covered.
    pub fn uncovered_share(&self) -> f64 {
        let total: usize = self.counts.iter().map(Tensor::numel).sum();
        let zero: f64 = self.counts.iter().map(|c| c.eq(0.0).sum(Kind::Double).double_value(&[])).sum();
        if total == 0 { 0.0 } else { zero / total as f64 }
    }
}
