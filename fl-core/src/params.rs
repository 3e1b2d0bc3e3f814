//! `ParamSet`: a model state as an ordered list of named tensors.
//!
//! The global model, a client's copy, an update (delta) and an aggregator's memory are all
//! ParamSets. Arithmetic returns new tensors: a global model version is never mutated in
//! place, so snapshots handed to in-flight jobs can share storage with it (`shallow_clone`).
//!
//! The elementwise arithmetic (`sub`, `add`, `add_scaled`, `scale`) of a set of many tensors
//! runs as one operation on each set's concatenation, and its result's tensors are views of
//! one buffer, which the next such operation reads as is: a few kernels an update instead of
//! one per tensor, which on a GPU is what the engine's thread spends its time launching (a
//! ViT's update has about 180 tensors). The numbers are those of the operations tensor by
//! tensor: each element is computed by the same correctly rounded operations.

use tch::{Device, Kind, Tensor};

use crate::error::{Result, ShapeError};

/// A model state: named tensors in the model's [`crate::Structure`] order.
#[derive(Debug)]
pub struct ParamSet {
    names: Vec<String>,
    tensors: Vec<Tensor>,
    /// The one contiguous 1-D buffer whose consecutive parts `tensors` are views of, where an
    /// elementwise operation made the set.
    flat: Option<Tensor>,
}

/// Tensors from which a set's elementwise arithmetic runs on its concatenation: below, the
/// concatenation's copy costs more than the launches it saves.
const FLAT_FROM: usize = 8;

impl ParamSet {
    /// A set of `tensors` named `names`, in that order; fails if the counts differ.
    pub fn new(names: Vec<String>, tensors: Vec<Tensor>) -> Result<Self> {
        if names.len() != tensors.len() {
            return Err(ShapeError::NameCount { names: names.len(), tensors: tensors.len() }.into());
        }
        Ok(ParamSet { names, tensors, flat: None })
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the set has no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Tensor names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The tensors, in order.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// The tensors, in order, without their names.
    pub fn into_tensors(self) -> Vec<Tensor> {
        self.tensors
    }

    /// The tensor called `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.names.iter().position(|n| n == name).map(|i| &self.tensors[i])
    }

    /// `(name, tensor)` pairs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.names.iter().map(String::as_str).zip(&self.tensors)
    }

    /// Each tensor's shape, in order.
    pub fn shapes(&self) -> Vec<Vec<i64>> {
        self.tensors.iter().map(Tensor::size).collect()
    }

    /// Total number of scalar parameters.
    pub fn numel(&self) -> usize {
        self.tensors.iter().map(Tensor::numel).sum()
    }

    /// A new handle on the same storage (cheap; safe because versions are immutable).
    pub fn shallow_clone(&self) -> Self {
        ParamSet { flat: self.flat.as_ref().map(Tensor::shallow_clone), ..self.map(Tensor::shallow_clone) }
    }

    /// An independent copy, detached from any autograd graph.
    pub fn deep_clone(&self) -> Self {
        self.map(|t| t.detach().copy())
    }

    /// Zero tensors of the same names, shapes, kinds and device.
    pub fn zeros_like(&self) -> Self {
        self.map(Tensor::zeros_like)
    }

    /// The set on `device` (shares storage where the tensors already are there).
    pub fn to_device(&self, device: Device) -> Self {
        self.map(|t| t.to_device(device))
    }

    /// The set converted to element type `kind` (shares storage where it already is).
    pub fn to_kind(&self, kind: Kind) -> Self {
        self.map(|t| t.to_kind(kind))
    }

    /// Which of `sets` hold only finite values (no NaN, no infinity), read from the device in
    /// one transfer. Each set's floating-point tensors are checked as one concatenation: three
    /// kernels a set on a GPU, where a check per tensor launched two per tensor (hundreds for a
    /// ViT's update, on the engine's thread).
    pub fn all_finite(sets: &[&ParamSet]) -> Vec<bool> {
        if sets.is_empty() {
            return Vec::new();
        }
        let flags: Vec<Tensor> = sets
            .iter()
            .map(|s| {
                let floats: Vec<Tensor> =
                    s.tensors.iter().filter(|t| t.is_floating_point()).map(|t| t.reshape([-1])).collect();
                let device = s.tensors.first().map_or(Device::Cpu, Tensor::device);
                match floats.is_empty() {
                    true => Tensor::from(true).to_device(device),
                    false => Tensor::cat(&floats, 0).isfinite().all(),
                }
            })
            .collect();
        Vec::<bool>::try_from(Tensor::stack(&flags, 0).to_device(Device::Cpu)).expect("one flag per set")
    }

    /// Applies `f` to each tensor, keeping the names.
    pub fn map(&self, f: impl FnMut(&Tensor) -> Tensor) -> Self {
        ParamSet { names: self.names.clone(), tensors: self.tensors.iter().map(f).collect(), flat: None }
    }

    /// Applies `f` to matching tensors of `self` and `other`; the names must agree.
    pub fn zip_map(&self, other: &ParamSet, mut f: impl FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        assert_eq!(self.names, other.names, "ParamSet::zip_map: parameter names differ");
        let tensors = self.tensors.iter().zip(&other.tensors).map(|(a, b)| f(a, b)).collect();
        ParamSet { names: self.names.clone(), tensors, flat: None }
    }

    /// The kind of the set's elements where its elementwise arithmetic runs on one contiguous
    /// 1-D tensor: where it has its buffer, or else at least [`FLAT_FROM`] tensors of one
    /// floating-point kind on one device.
    fn flat_kind(&self) -> Option<Kind> {
        if let Some(flat) = &self.flat {
            return Some(flat.kind());
        }
        let first = self.tensors.first()?;
        let (kind, device) = (first.kind(), first.device());
        let uniform = self.tensors.iter().all(|t| t.kind() == kind && t.device() == device);
        (self.tensors.len() >= FLAT_FROM && uniform && first.is_floating_point()).then_some(kind)
    }

    /// The set's tensors as one contiguous 1-D tensor (where [`ParamSet::flat_kind`] says so):
    /// its buffer, or their concatenation.
    fn flattened(&self) -> Tensor {
        match &self.flat {
            Some(flat) => flat.shallow_clone(),
            None => Tensor::cat(&self.tensors.iter().map(|t| t.reshape([-1])).collect::<Vec<_>>(), 0),
        }
    }

    /// A set named and shaped as this one whose tensors are consecutive views of `flat`.
    fn with_flat(&self, flat: Tensor) -> Self {
        let sizes: Vec<i64> = self.tensors.iter().map(|t| t.numel() as i64).collect();
        let parts = flat.split_with_sizes(sizes.as_slice(), 0);
        let tensors = parts.iter().zip(&self.tensors).map(|(part, t)| part.view(t.size().as_slice())).collect();
        ParamSet { names: self.names.clone(), tensors, flat: Some(flat) }
    }

    /// Elementwise `f` of matching tensors of `self` and `other` (names must agree): on both
    /// sets' concatenations where both have one, of one kind and the same shapes, else tensor
    /// by tensor.
    fn zip_elementwise(&self, other: &ParamSet, f: impl Fn(&Tensor, &Tensor) -> Tensor) -> Self {
        assert_eq!(self.names, other.names, "ParamSet: parameter names differ");
        if self.flat_kind().is_some_and(|kind| other.flat_kind() == Some(kind)) && self.shapes() == other.shapes() {
            return self.with_flat(f(&self.flattened(), &other.flattened()));
        }
        self.zip_map(other, f)
    }

    /// `self - other`.
    pub fn sub(&self, other: &ParamSet) -> Self {
        self.zip_elementwise(other, |a, b| a - b)
    }

    /// `self + other`.
    pub fn add(&self, other: &ParamSet) -> Self {
        self.zip_elementwise(other, |a, b| a + b)
    }

    /// `self + alpha * other`.
    pub fn add_scaled(&self, other: &ParamSet, alpha: f64) -> Self {
        self.zip_elementwise(other, |a, b| a + b * alpha)
    }

    /// `alpha * self`.
    pub fn scale(&self, alpha: f64) -> Self {
        match self.flat_kind() {
            Some(_) => self.with_flat(self.flattened() * alpha),
            None => self.map(|t| t * alpha),
        }
    }

    /// `(1 - alpha) * self + alpha * other`.
    pub fn lerp(&self, other: &ParamSet, alpha: f64) -> Self {
        self.zip_map(other, |a, b| a * (1.0 - alpha) + b * alpha)
    }

    /// Squared L2 norm of all parameters, as a 0-d tensor on the parameters' device.
    pub fn norm_sq(&self) -> Tensor {
        self.tensors
            .iter()
            .map(|t| t.square().sum(Kind::Float))
            .reduce(|a, b| a + b)
            .unwrap_or_else(|| Tensor::zeros([], (Kind::Float, Device::Cpu)))
    }

    /// Whether every tensor of both sets is exactly equal (same names, shapes and values).
    pub fn equal(&self, other: &ParamSet) -> bool {
        self.names == other.names
            && self.tensors.iter().zip(&other.tensors).all(|(a, b)| a.size() == b.size() && a.equal(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[&[f32]]) -> ParamSet {
        let names = (0..values.len()).map(|i| format!("p{i}")).collect();
        ParamSet::new(names, values.iter().map(|v| Tensor::from_slice(v)).collect()).unwrap()
    }

    fn values(p: &ParamSet) -> Vec<Vec<f32>> {
        p.tensors().iter().map(|t| Vec::<f32>::try_from(t).unwrap()).collect()
    }

    #[test]
    fn arithmetic_matches_hand_values() {
        let a = set(&[&[1.0, 2.0], &[3.0]]);
        let b = set(&[&[0.5, -1.0], &[1.0]]);
        assert_eq!(values(&a.sub(&b)), vec![vec![0.5, 3.0], vec![2.0]]);
        assert_eq!(values(&a.add_scaled(&b, 2.0)), vec![vec![2.0, 0.0], vec![5.0]]);
        assert_eq!(values(&a.lerp(&b, 0.25)), vec![vec![0.875, 1.25], vec![2.5]]);
        assert_eq!(a.norm_sq().double_value(&[]), 14.0);
        assert_eq!(a.numel(), 3);
    }

    /// A set of 10 tensors of assorted shapes (a scalar, an empty one, a transposed matrix)
    /// with values from `seed`.
    fn many(seed: u64) -> ParamSet {
        let shapes: [&[i64]; 10] = [&[3, 4], &[4], &[], &[2, 3, 2], &[0], &[5], &[1, 1], &[7, 2], &[3], &[2, 2]];
        let tensors = shapes
            .iter()
            .enumerate()
            .map(|(i, shape)| {
                let t = crate::rng::TensorNoise::new(seed + i as u64).uniform(shape, Device::Cpu) * 4.0 - 2.0;
                if i == 7 { t.reshape([2, 7]).transpose(0, 1) } else { t }
            })
            .collect();
        ParamSet::new((0..10).map(|i| format!("p{i}")).collect(), tensors).unwrap()
    }

    #[test]
    fn arithmetic_on_concatenations_gives_the_tensor_by_tensor_numbers() {
        let (a, b, c) = (many(1), many(20), many(40));
        let by_tensor = |x: &ParamSet| x.map(Tensor::shallow_clone);
        // The same chain as an aggregation: Δ = a − b, Σ = 0.3 Δ + 0.7 c, then b + Σ.
        let flat = b.add(&a.sub(&b).scale(0.3).add_scaled(&c, 0.7));
        let each = by_tensor(&b).zip_map(
            &by_tensor(&a).zip_map(&b, |x, y| x - y).map(|t| t * 0.3).zip_map(&c, |x, y| x + y * 0.7),
            |x, y| x + y,
        );
        assert!(flat.flat.is_some(), "a set of 10 tensors runs on its concatenation");
        assert_eq!(flat.shapes(), a.shapes());
        for ((name, x), y) in flat.iter().zip(each.tensors()) {
            assert!(x.equal(y), "`{name}` differs");
        }
        // Its tensors are consecutive views of the buffer, which the next operation reads.
        let buffer = flat.flat.as_ref().unwrap().data_ptr() as usize;
        assert_eq!(flat.tensors()[0].data_ptr() as usize, buffer);
        assert_eq!(flat.tensors()[1].data_ptr() as usize, buffer + 12 * 4, "after the 3x4 matrix");
        assert!(flat.shallow_clone().flat.is_some(), "a shallow clone keeps the buffer");
        // A few tensors, or an integer one among them, go tensor by tensor.
        assert!(set(&[&[1.0], &[2.0]]).scale(2.0).flat.is_none());
        let mut tensors = a.shallow_clone().into_tensors();
        tensors[4] = Tensor::from_slice(&[3i64]);
        let mixed = ParamSet::new(a.names().to_vec(), tensors).unwrap();
        let doubled = mixed.add(&mixed);
        assert!(doubled.flat.is_none());
        assert_eq!(Vec::<i64>::try_from(&doubled.tensors()[4]).unwrap(), [6]);
    }

    #[test]
    fn all_finite_finds_a_nan_or_an_infinity_in_any_tensor_of_a_set() {
        let names = |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>();
        let with = |bad: f32| {
            // A matrix read transposed (not contiguous), an integer buffer, and `bad` in the last.
            let m = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, bad]).reshape([2, 3]).transpose(0, 1);
            let tensors = vec![Tensor::from_slice(&[1.0f32]), Tensor::from_slice(&[7i64]), m];
            ParamSet::new(names(3), tensors).unwrap()
        };
        let (fine, nan, inf) = (with(6.0), with(f32::NAN), with(f32::NEG_INFINITY));
        let ints = ParamSet::new(names(1), vec![Tensor::from_slice(&[3i64])]).unwrap();
        let empty = ParamSet::new(Vec::new(), Vec::new()).unwrap();
        assert_eq!(ParamSet::all_finite(&[&fine, &nan, &inf, &ints, &empty]), [true, false, false, true, true]);
        assert!(ParamSet::all_finite(&[]).is_empty());
    }

    #[test]
    fn shallow_clones_share_storage_and_deep_clones_do_not() {
        let a = set(&[&[1.0, 2.0]]);
        let shallow = a.shallow_clone();
        let deep = a.deep_clone();
        let _ = a.tensors()[0].shallow_clone().fill_(9.0);
        assert_eq!(values(&shallow), vec![vec![9.0, 9.0]]);
        assert_eq!(values(&deep), vec![vec![1.0, 2.0]]);
    }
}
