//! `Structure`: what a model exposes to masks and to the cost model.
//!
//! A model lists its tensors (name and shape) and its *unit groups*: the neurons, channels or
//! heads that can be dropped, each naming which tensor dimensions move together when a unit
//! goes (a hidden neuron is a row of `fc1.weight`, an entry of `fc1.bias` and a column of
//! `fc2.weight`). Structured masks are built from kept units, so a physically smaller
//! sub-model can be sliced out, trained and scattered back.
//!
//! A model made of a stack of blocks (a transformer) also tags each tensor with its
//! [`Depth`], so that a *depth window* can be cut: blocks below it frozen, blocks in it
//! trained, blocks above it dropped, the sub-model ending in the early exit at the window's
//! top ([`Structure::depth_window`]).

use crate::error::{Result, ShapeError};
use crate::mask::{Mask, StructuredMask, TensorRole};

/// One tensor of a model: its name, full shape, and whether it is trained.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// PyTorch-style name, e.g. `fc1.weight`; unique within the model.
    pub name: String,
    /// The full (unmasked) shape.
    pub shape: Vec<i64>,
    /// False for a *buffer*: state the forward pass updates itself in training (BatchNorm's
    /// running statistics). Buffers get no gradient and no optimizer step, but they are part
    /// of the model state: clients send them and aggregators average them.
    pub trainable: bool,
    /// Where the tensor sits along the model's stack of blocks.
    pub depth: Depth,
}

/// Where a tensor sits along a model's stack of blocks, for depth windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Depth {
    /// Below every block (embeddings), or in a model without blocks: always held, frozen
    /// when a window starts above the first block.
    #[default]
    Stem,
    /// Part of block `i` (0-based).
    Block(usize),
    /// Part of the early exit read after `d` blocks (a head of its own): held only by a
    /// window ending there.
    Exit(usize),
    /// The final head, read after every block: held only by a window reaching the top.
    Head,
}

impl TensorSpec {
    /// A trainable parameter.
    pub fn new(name: impl Into<String>, shape: impl Into<Vec<i64>>) -> Self {
        TensorSpec { name: name.into(), shape: shape.into(), trainable: true, depth: Depth::Stem }
    }

    /// A buffer (see [`TensorSpec::trainable`]).
    pub fn buffer(name: impl Into<String>, shape: impl Into<Vec<i64>>) -> Self {
        TensorSpec { name: name.into(), shape: shape.into(), trainable: false, depth: Depth::Stem }
    }

    /// This tensor at `depth`.
    pub fn at(self, depth: Depth) -> Self {
        TensorSpec { depth, ..self }
    }
}

/// One tensor dimension that a unit group indexes. Unit `u` covers indices
/// `u * block .. (u + 1) * block` of that dimension (a conv channel feeding a flattened linear
/// layer covers `block = H * W` columns).
#[derive(Debug, Clone, PartialEq)]
pub struct UnitMember {
    /// The tensor, as an index into [`Structure::tensors`].
    pub tensor: usize,
    /// The dimension of that tensor the units index.
    pub dim: usize,
    /// Indices of the dimension per unit (1 for a neuron's row or column).
    pub block: i64,
}

impl UnitMember {
    /// The indices of the member's dimension that `units` cover, in their order.
    pub fn indices(&self, units: &[i64]) -> Vec<i64> {
        units.iter().flat_map(|&u| u * self.block..(u + 1) * self.block).collect()
    }
}

/// Units (neurons, channels, heads) that a structured mask keeps or drops together across the
/// tensors they appear in: a layer's width.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitGroup {
    /// A name for error messages, e.g. the layer's (`fc1`).
    pub name: String,
    /// Number of units in the full model.
    pub units: i64,
    /// The tensor dimensions that move together when a unit goes; no dimension may belong to
    /// two groups.
    pub members: Vec<UnitMember>,
}

impl UnitGroup {
    /// How many units a width share `ratio` keeps: the nearest whole number, at least one.
    pub fn kept_at(&self, ratio: f64) -> i64 {
        ((self.units as f64 * ratio).round() as i64).clamp(1, self.units)
    }
}

/// What a model exposes to masks and to the cost model: its tensors and its maskable unit
/// groups.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Structure {
    /// Every tensor of the model state (parameters and buffers), in the order of `forward`'s
    /// parameters and of every [`crate::ParamSet`] of the model.
    pub tensors: Vec<TensorSpec>,
    /// The unit groups structured masks are built from (empty: the model cannot be narrowed).
    pub groups: Vec<UnitGroup>,
}

impl Structure {
    /// Tensor names, in structure order.
    pub fn names(&self) -> Vec<String> {
        self.tensors.iter().map(|t| t.name.clone()).collect()
    }

    /// Full tensor shapes, in structure order.
    pub fn shapes(&self) -> Vec<Vec<i64>> {
        self.tensors.iter().map(|t| t.shape.clone()).collect()
    }

    /// Trainable parameters (buffers excluded, as PyTorch's `parameters()` counts).
    pub fn num_params(&self) -> i64 {
        self.tensors.iter().filter(|t| t.trainable).map(|t| t.shape.iter().product::<i64>()).sum()
    }

    /// Elements of every tensor (buffers included), or `None` if the count overflows 64 bits.
    pub fn elements(&self) -> Option<u64> {
        self.tensors.iter().try_fold(0u64, |sum, t| {
            let n = t.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?))?;
            sum.checked_add(n)
        })
    }

    /// Whether each tensor is trainable (false for buffers), in structure order.
    pub fn trainable(&self) -> Vec<bool> {
        self.tensors.iter().map(|t| t.trainable).collect()
    }

    /// The position of the tensor called `name`, if the model has one.
    pub fn tensor_index(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name)
    }

    /// A structured mask keeping, for each group, the listed units (`None` keeps the group
    /// whole). `kept` has one entry per group.
    pub fn mask_from_units(&self, kept: &[Option<Vec<i64>>]) -> Result<Mask> {
        if kept.len() != self.groups.len() {
            return Err(ShapeError::UnitEntries { entries: kept.len(), groups: self.groups.len() }.into());
        }
        let mut keep: Vec<Vec<Option<Vec<i64>>>> = self.tensors.iter().map(|t| vec![None; t.shape.len()]).collect();
        for (group, units) in self.groups.iter().zip(kept) {
            let Some(units) = units else { continue };
            if let Some(&bad) = units.iter().find(|&&u| u < 0 || u >= group.units) {
                return Err(
                    ShapeError::UnitOutOfRange { group: group.name.clone(), unit: bad, units: group.units }.into()
                );
            }
            for m in &group.members {
                let slot = &mut keep[m.tensor][m.dim];
                if slot.is_some() {
                    return Err(ShapeError::OverlappingGroups {
                        group: group.name.clone(),
                        dim: m.dim,
                        tensor: self.tensors[m.tensor].name.clone(),
                    }
                    .into());
                }
                *slot = Some(m.indices(units));
            }
        }
        let mask = StructuredMask::new(keep);
        mask.validate(&self.shapes())?;
        Ok(Mask::Structured(mask))
    }

    /// Blocks in the model's stack (0 for a model without [`Depth::Block`] tensors).
    pub fn blocks(&self) -> usize {
        self.tensors
            .iter()
            .filter_map(|t| if let Depth::Block(i) = t.depth { Some(i + 1) } else { None })
            .max()
            .unwrap_or(0)
    }

    /// The depths after which the model has an early exit, ascending.
    pub fn exits(&self) -> Vec<usize> {
        let mut exits: Vec<usize> =
            self.tensors.iter().filter_map(|t| if let Depth::Exit(d) = t.depth { Some(d) } else { None }).collect();
        exits.sort_unstable();
        exits.dedup();
        exits
    }

    /// The role of every tensor in the depth window `window` of blocks: the stem and the blocks
    /// below the window frozen (the stem trained when the window starts at block 0), the
    /// window's blocks trained, the blocks above it dropped, and the sub-model reading out at
    /// the window's top: through the early exit there, trained, or through the final head when
    /// the window reaches the last block. Every other exit is dropped.
    pub fn depth_window(&self, window: std::ops::Range<usize>) -> Result<Vec<TensorRole>> {
        self.depth_window_with_exits(window, &[])
    }

    /// [`Structure::depth_window`] that also keeps, trained, the early exits after each depth
    /// of `exits` (inside the window, below its top): the shallower read-outs a sub-model
    /// distils into (Co-S²P's exits of the shallower clients).
    pub fn depth_window_with_exits(&self, window: std::ops::Range<usize>, exits: &[usize]) -> Result<Vec<TensorRole>> {
        let blocks = self.blocks();
        let available = self.exits();
        let top_ok = window.end == blocks || available.contains(&window.end);
        let inner_ok = exits.iter().all(|d| available.contains(d) && *d > window.start && *d < window.end);
        if window.is_empty() || window.end > blocks || !top_ok || !inner_ok {
            return Err(ShapeError::DepthWindow {
                start: window.start,
                end: window.end,
                inner: exits.to_vec(),
                blocks,
                exits: available,
            }
            .into());
        }
        Ok(self
            .tensors
            .iter()
            .map(|t| match t.depth {
                Depth::Stem if window.start > 0 => TensorRole::Freeze,
                Depth::Stem => TensorRole::Train,
                Depth::Block(i) if i < window.start => TensorRole::Freeze,
                Depth::Block(i) if i < window.end => TensorRole::Train,
                Depth::Block(_) => TensorRole::Drop,
                Depth::Exit(d) if d == window.end || exits.contains(&d) => TensorRole::Train,
                Depth::Exit(_) => TensorRole::Drop,
                Depth::Head if window.end == blocks => TensorRole::Train,
                Depth::Head => TensorRole::Drop,
            })
            .collect())
    }

    /// The depth after which each read-out of a (sub-)model whose tensors are `names` (in
    /// structure order) reads: an early exit's depth, or every block for the final head; in
    /// order, the deepest last. Names that are not the model's are skipped.
    pub fn readouts(&self, names: &[String]) -> Vec<usize> {
        let mut depths = Vec::new();
        let mut last: Option<Depth> = None;
        for name in names {
            let Some(t) = self.tensor_index(name) else { continue };
            let depth = self.tensors[t].depth;
            if Some(depth) != last {
                match depth {
                    Depth::Exit(d) => depths.push(d),
                    Depth::Head => depths.push(self.blocks()),
                    Depth::Stem | Depth::Block(_) => {}
                }
            }
            last = Some(depth);
        }
        depths
    }

    /// A sub-model: the depth window `window` ([`Structure::depth_window`]) with the kept units
    /// of each group (`kept` as in [`Structure::mask_from_units`]; units of dropped blocks are
    /// ignored).
    pub fn submodel(&self, window: std::ops::Range<usize>, kept: &[Option<Vec<i64>>]) -> Result<Mask> {
        self.submodel_with_exits(window, &[], kept)
    }

    /// [`Structure::submodel`] keeping the early exits after `exits` too
    /// ([`Structure::depth_window_with_exits`]).
    pub fn submodel_with_exits(
        &self,
        window: std::ops::Range<usize>,
        exits: &[usize],
        kept: &[Option<Vec<i64>>],
    ) -> Result<Mask> {
        let roles = self.depth_window_with_exits(window, exits)?;
        let Mask::Structured(width) = self.mask_from_units(kept)? else {
            unreachable!("mask_from_units is structured")
        };
        let mask = width.with_roles(roles);
        mask.validate(&self.shapes())?;
        Ok(Mask::Structured(mask))
    }

    /// A mask keeping the first `ratio` share of every group's units (HeteroFL's nested
    /// width prefix), at least one unit per group; `ratio` must be in (0, 1].
    pub fn width_prefix_mask(&self, ratio: f64) -> Result<Mask> {
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(ShapeError::WidthRatio { ratio: ratio.to_string() }.into());
        }
        let kept: Vec<Option<Vec<i64>>> = self
            .groups
            .iter()
            .map(|g| {
                let n = ((g.units as f64 * ratio).round() as i64).clamp(1, g.units);
                Some((0..n).collect())
            })
            .collect();
        self.mask_from_units(&kept)
    }
}
