//! The maskable tensors of a model (the paper does not name them; we follow the authors' code):
//! named in the policy's config, looked up in the model's structure; every other tensor is
//! trained by all clients.

use fl_core::{Error, Result, Structure};

/// The structure indices of `names`; an unknown name is an error that lists the model's tensors.
pub fn tensor_indices(policy: &str, names: &[String], structure: &Structure) -> Result<Vec<usize>> {
    names
        .iter()
        .map(|name| {
            structure.tensor_index(name).ok_or_else(|| {
                Error::component(
                    policy,
                    format!("the model has no tensor `{name}`; its tensors: {}", structure.names().join(", ")),
                )
            })
        })
        .collect()
}
