//! `ProjectionHead`: MOON's projection head, put between any model's features and its
//! classifier by one key of the `[model]` section, `projection_dim = P` (0, the default: none).
//!
//! MOON (Li, He and Song, CVPR 2021, §3.2 and the authors' `ModelFedCon`) builds its network
//! from a base encoder, a projection head and an output layer: `h` = the base's features
//! (`[C, B, D]`), `z = W₂ relu(W₁ h + b₁) + b₂` with `W₁` `[D, D]` and `W₂` `[P, D]` (no
//! activation after `W₂`), logits `= W₃ z + b₃`. Its contrastive loss compares the `z` of
//! the local, global and previous models; `z` is this model's [`Model::features`]. The authors
//! use `P` = 256 for every dataset; the head's width `D` is the base's feature width, as their
//! `l1` layer is.
//!
//! The tensors are the base's up to its classifier, then `projection.0.{weight,bias}`,
//! `projection.1.{weight,bias}`, and the base's classifier (same names) reading `P` inputs.
//! The base's unit groups carry over unchanged: a group that narrows the base's last features
//! indexes dimension 1 of the tensor at the classifier's old place, which is now
//! `projection.0.weight`, whose columns are those features. New tensors take PyTorch's
//! `nn.Linear` initialisation.

use std::sync::Arc;

use tch::Tensor;

use crate::error::Result;
use crate::model::{Mode, Model, linear, split_classifier, tensor_flops};
use crate::params::ParamSet;
use crate::registry::Params;
use crate::rng::{self, Rng};
use crate::structure::{Structure, TensorSpec};

/// The `[model]` key that adds the head.
pub const KEY: &str = "projection_dim";

/// A model with MOON's projection head before its classifier.
pub struct ProjectionHead {
    base: Arc<dyn Model>,
    structure: Structure,
}

impl ProjectionHead {
    /// `base` with a head of output width `dim` (≥ 1).
    ///
    /// # Panics
    /// If a unit group of `base` indexes its classifier other than by the classifier's input
    /// dimension (no model does: classes are not maskable units).
    pub fn new(base: Arc<dyn Model>, dim: i64) -> Self {
        let full = base.structure();
        let (body, classifier) = split_classifier(&full.tensors);
        let [classes, width] = classifier[0].shape[..] else {
            panic!("projection head: the classifier weight {} is not [classes, D]", classifier[0].name)
        };
        let at = body.len();
        for g in &full.groups {
            assert!(
                g.members.iter().all(|m| m.tensor < at || (m.tensor == at && m.dim == 1)),
                "projection head: group {} indexes the classifier's classes",
                g.name
            );
        }
        let mut tensors = body.to_vec();
        tensors.extend([
            TensorSpec::new("projection.0.weight", [width, width]),
            TensorSpec::new("projection.0.bias", [width]),
            TensorSpec::new("projection.1.weight", [dim, width]),
            TensorSpec::new("projection.1.bias", [dim]),
            TensorSpec::new(classifier[0].name.clone(), [classes, dim]),
            classifier[1].clone(),
        ]);
        let structure = Structure { tensors, groups: full.groups.clone() };
        ProjectionHead { base, structure }
    }

    /// The base model's shapes for the head's (sub-)model shapes: the body, then the classifier
    /// reading the body's features.
    fn base_shapes(&self, shapes: &[Vec<i64>]) -> Vec<Vec<i64>> {
        let body = shapes.len() - 6;
        let (features, classes) = (shapes[body][1], shapes[body + 4][0]);
        let mut base = shapes[..body].to_vec();
        base.extend([vec![classes, features], vec![classes]]);
        base
    }
}

impl Model for ProjectionHead {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn replayable(&self) -> bool {
        self.base.replayable()
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        let base = self.base.init(rng);
        let body = base.tensors().len() - 2;
        let mut tensors: Vec<Tensor> = base.tensors()[..body].iter().map(Tensor::shallow_clone).collect();
        for pair in self.structure.tensors[body..].chunks(2) {
            let bound = 1.0 / (pair[0].shape[1] as f64).sqrt();
            tensors.extend(pair.iter().map(|t| rng::uniform(rng, &t.shape, bound)));
        }
        ParamSet::new(self.structure.names(), tensors).expect("one tensor per structure entry")
    }

    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let (base, head) = body.split_at(body.len() - 4);
        let h = self.base.features(base, x, mode);
        linear(&linear(&h, &head[0], &head[1]).relu(), &head[2], &head[3])
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        let body = shapes.len() - 6;
        let mut flops = self.base.flops_per_tensor(&self.base_shapes(shapes));
        flops.truncate(body);
        flops.extend(shapes[body..].iter().map(|s| tensor_flops(s, 1)));
        flops
    }
}

/// Takes [`KEY`] out of a `[model]` section: the parameters the base model reads, and the
/// head's width (0: no head).
pub fn split_params(params: &Params) -> Result<(Params, i64)> {
    let mut rest = params.clone();
    let dim = match rest.table.remove(KEY) {
        None => 0,
        Some(toml::Value::Integer(d)) if d >= 0 => d,
        Some(other) => {
            return Err(params.invalid_key(crate::InvalidKey::new(
                KEY,
                format!("expected a width ≥ 1 (or 0 for no projection head), got {other}"),
            )));
        }
    };
    Ok((rest, dim))
}

/// `base`, with a projection head of width `dim` unless `dim` is 0.
pub fn wrap(base: Arc<dyn Model>, dim: i64) -> Arc<dyn Model> {
    if dim == 0 { base } else { Arc::new(ProjectionHead::new(base, dim)) }
}

/// A model config's defaults as `fl list` prints them, with [`KEY`].
pub fn defaults_with_key<C: Default + serde::Serialize>() -> toml::Table {
    let mut table = crate::registry::defaults_of::<C>();
    table.insert(KEY.into(), toml::Value::Integer(0));
    table
}
