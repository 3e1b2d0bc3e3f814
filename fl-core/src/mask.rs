//! `Mask`: which part of each tensor a client trains.
//!
//! Two kinds, because the papers need both. *Structured* masks keep index lists along tensor
//! dimensions (kept neurons, channels, heads): the kept part is a physically smaller tensor
//! that can be extracted, trained and scattered back (HeteroFL, FedRolex, Fed-RAA fragments).
//! *Elementwise* masks keep individual elements as a 0/1 tensor (KDD'23 regions, PruneFL);
//! the client trains the full-shaped tensor with masked gradients.

use tch::{Device, Kind, Tensor};

use crate::error::{Result, ShapeError};
use crate::params::ParamSet;

/// Kept indices per tensor and dimension; `None` keeps the whole dimension.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StructuredMask {
    keep: Vec<Vec<Option<Vec<i64>>>>,
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
        StructuredMask { keep }
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

    /// Whether this is [`Mask::Full`] (a structured or elementwise mask that happens to keep
    /// everything is not).
    pub fn is_full(&self) -> bool {
        matches!(self, Mask::Full)
    }

    /// Shapes of the tensors a client trains under this mask.
    pub fn sub_shapes(&self, shapes: &[Vec<i64>]) -> Vec<Vec<i64>> {
        match self {
            Mask::Structured(s) => shapes.iter().enumerate().map(|(t, sh)| s.sub_shape(t, sh)).collect(),
            Mask::Full | Mask::Elementwise(_) => shapes.to_vec(),
        }
    }

    /// Number of kept (trained) elements per tensor.
    pub fn kept_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<i64> {
        match self {
            Mask::Elementwise(ts) => ts
                .iter()
                .zip(shapes)
                .map(|(m, sh)| match m {
                    Some(m) => m.sum(Kind::Double).double_value(&[]).round() as i64,
                    None => sh.iter().product(),
                })
                .collect(),
            _ => self.sub_shapes(shapes).iter().map(|s| s.iter().product()).collect(),
        }
    }

    /// Total kept elements.
    pub fn kept_params(&self, shapes: &[Vec<i64>]) -> i64 {
        self.kept_per_tensor(shapes).iter().sum()
    }

    /// The client's starting tensors: a sub-tensor per structured mask; for elementwise masks
    /// the full-shaped tensor with masked-out elements set to 0 (the sub-model as a sparse
    /// model: they take no part in the forward pass, and gradient masking keeps them at 0).
    pub fn extract(&self, params: &ParamSet) -> ParamSet {
        match self {
            Mask::Structured(s) => {
                let mut t_idx = 0;
                params.map(|t| {
                    let mut out = t.shallow_clone();
                    for d in 0..t.dim() {
                        if let Some(k) = s.kept(t_idx, d) {
                            out = out.index_select(d as i64, &Tensor::from_slice(k).to_device(t.device()));
                        }
                    }
                    t_idx += 1;
                    out
                })
            }
            Mask::Elementwise(_) => self.scatter(params, &params.shapes()),
            Mask::Full => params.shallow_clone(),
        }
    }

    /// Places `sub` (shaped by [`Mask::sub_shapes`]) into zero tensors of the full `shapes`;
    /// elements outside the mask are exactly zero.
    pub fn scatter(&self, sub: &ParamSet, shapes: &[Vec<i64>]) -> ParamSet {
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
                let mut t_idx = 0;
                sub.map(|t| {
                    let full = &shapes[t_idx];
                    let mut out = t.shallow_clone();
                    for (d, &n) in full.iter().enumerate() {
                        if let Some(k) = s.kept(t_idx, d) {
                            let mut size = out.size();
                            size[d] = n;
                            let idx = Tensor::from_slice(k).to_device(t.device());
                            out = Tensor::zeros(&size[..], (out.kind(), out.device())).index_copy(d as i64, &idx, &out);
                        }
                    }
                    t_idx += 1;
                    out
                })
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
            Mask::Structured(_) => {
                let names = (0..shapes.len()).map(|i| i.to_string()).collect();
                let sub = ParamSet::new(names, self.sub_shapes(shapes).iter().map(ones).collect())
                    .expect("one name per tensor");
                self.scatter(&sub, shapes).into_tensors()
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
