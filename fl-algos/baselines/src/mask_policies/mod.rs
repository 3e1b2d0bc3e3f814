//! Mask policies of the width-scaling baselines: every client trains a physically smaller
//! model whose width follows its capacity.

pub mod fedrolex;
pub mod heterofl;
pub mod own_width;
#[cfg(test)]
mod testing;
pub mod width_levels;
