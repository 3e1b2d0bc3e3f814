//! `neuron-fragments`: Fed-RAA's fixed fragments as a mask policy. The scheduler picks the
//! fragment (`MaskCtx::choice`); the policy builds the M disjoint fragments once, from the
//! model's structure, and hands out fragment j's mask.
//!
//! `mode = "neuron"` (the paper's "subset of neurons", Appendix C.1; which ones it does not
//! say) splits one unit group, the hidden neurons of the MLP: fragment j is the rows G_j of
//! `fc1.weight` and `fc1.bias` and the columns G_j of `fc2.weight`, a physically smaller
//! network that is sliced out, trained and scattered back. `mode = "repo-elementwise"` splits
//! the elements of the listed tensors (the output layer's weights by default) through the
//! argsort of their initial values, as the Fed-RAA code does. Every tensor the split does not
//! touch is *shared*: sent with every fragment, trained, and mixed on every merge.

use fl_core::tch::{Kind, Tensor};
use fl_core::{Error, InvalidKey, Mask, MaskCtx, MaskPolicy, ParamSet, Result, StateIn, StateOut, Structure, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::fragments::{resolve_ratios, split};

/// What a fragment is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FragmentMode {
    /// Disjoint sets of units (neurons, channels) of one unit group.
    #[default]
    Neuron,
    /// Disjoint sets of elements of the listed tensors (the Fed-RAA code).
    RepoElementwise,
}

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NeuronFragmentsConfig {
    /// M, the number of fragments.
    #[default(4)]
    pub parts: usize,
    /// Shares of the fragments; empty: Table 4's for `parts`.
    #[default(Vec::new())]
    pub ratios: Vec<f64>,
    /// What a fragment is made of: units of one group, or elements of the listed tensors.
    #[default(FragmentMode::Neuron)]
    pub mode: FragmentMode,
    /// The unit group split in `neuron` mode (absent: the model's only unit group).
    #[default(None)]
    pub group: Option<String>,
    /// The tensors split in `repo-elementwise` mode.
    #[default(vec!["fc2.weight".into()])]
    pub tensors: Vec<String>,
}

impl Validate for NeuronFragmentsConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        let ratios = resolve_ratios(self.parts, &self.ratios)?;
        if !self.ratios.is_empty() && self.ratios.len() != self.parts {
            return Err(InvalidKey::new("ratios", format!("{} shares for parts = {}", ratios.len(), self.parts)));
        }
        if self.mode == FragmentMode::RepoElementwise && self.tensors.is_empty() {
            return Err(InvalidKey::new("tensors", "repo-elementwise mode needs at least one tensor to split"));
        }
        Ok(())
    }
}

pub struct NeuronFragments {
    cfg: NeuronFragmentsConfig,
    ratios: Vec<f64>,
    /// Built at the first request: each fragment's mask, and the shared tensors' names.
    built: Option<(Vec<Mask>, Vec<String>)>,
}

impl NeuronFragments {
    /// The policy for `cfg`; fails where `parts` has no Table 4 ratios and none are given.
    pub fn new(cfg: NeuronFragmentsConfig) -> std::result::Result<Self, InvalidKey> {
        let ratios = resolve_ratios(cfg.parts, &cfg.ratios)?;
        Ok(NeuronFragments { cfg, ratios, built: None })
    }

    /// Builds the fragments for `structure` (elementwise mode ranks `global`'s values).
    pub fn build(&mut self, structure: &Structure, global: &ParamSet) -> Result<()> {
        if self.built.is_none() {
            self.built = Some(match self.cfg.mode {
                FragmentMode::Neuron => self.neuron(structure)?,
                FragmentMode::RepoElementwise => self.elementwise(structure, global)?,
            });
        }
        Ok(())
    }

    /// The fragments' masks, once built.
    pub fn fragments(&self) -> Option<&[Mask]> {
        self.built.as_ref().map(|(m, _)| &m[..])
    }

    /// Tensors every fragment carries whole, once built.
    pub fn shared_tensors(&self) -> Option<&[String]> {
        self.built.as_ref().map(|(_, s)| &s[..])
    }

    fn neuron(&self, structure: &Structure) -> Result<(Vec<Mask>, Vec<String>)> {
        let names: Vec<&str> = structure.groups.iter().map(|g| g.name.as_str()).collect();
        let g = match &self.cfg.group {
            Some(name) => structure.groups.iter().position(|g| &g.name == name).ok_or_else(|| {
                Error::component("neuron-fragments", format!("group: no unit group `{name}`; the model has: {names:?}"))
            })?,
            None if names.len() == 1 => 0,
            None => {
                return Err(Error::component(
                    "neuron-fragments",
                    format!("the model has {} unit groups {names:?}: name the one to split with `group`", names.len()),
                ));
            }
        };
        let group = &structure.groups[g];
        let masks = split(group.units, &self.ratios)?
            .into_iter()
            .map(|units| {
                let mut kept = vec![None; structure.groups.len()];
                kept[g] = Some(units.collect());
                structure.mask_from_units(&kept)
            })
            .collect::<Result<Vec<_>>>()?;
        let shared = (0..structure.tensors.len())
            .filter(|t| !group.members.iter().any(|m| m.tensor == *t))
            .map(|t| structure.tensors[t].name.clone())
            .collect();
        Ok((masks, shared))
    }

    fn elementwise(&self, structure: &Structure, global: &ParamSet) -> Result<(Vec<Mask>, Vec<String>)> {
        let mut split_tensors = Vec::new();
        for name in &self.cfg.tensors {
            let t = structure.tensor_index(name).ok_or_else(|| {
                Error::component(
                    "neuron-fragments",
                    format!("tensors: no tensor `{name}`; the model has: {}", structure.names().join(", ")),
                )
            })?;
            split_tensors.push(t);
        }
        let mut masks: Vec<Vec<Option<Tensor>>> =
            (0..self.ratios.len()).map(|_| (0..structure.tensors.len()).map(|_| None).collect()).collect();
        for &t in &split_tensors {
            let values = &global.tensors()[t];
            let order = values.flatten(0, -1).argsort(0, false);
            let n = order.size()[0];
            for (j, range) in split(n, &self.ratios)?.into_iter().enumerate() {
                let picked = order.narrow(0, range.start, range.end - range.start);
                let flat = Tensor::zeros([n], (Kind::Float, values.device())).index_fill(0, &picked, 1.0);
                masks[j][t] = Some(flat.reshape(values.size()));
            }
        }
        let shared = (0..structure.tensors.len())
            .filter(|t| !split_tensors.contains(t))
            .map(|t| structure.tensors[t].name.clone())
            .collect();
        Ok((masks.into_iter().map(Mask::Elementwise).collect(), shared))
    }
}

impl MaskPolicy for NeuronFragments {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        let Some(j) = ctx.choice else {
            return Err(Error::component(
                "neuron-fragments",
                "the scheduler must assign each job a fragment (use scheduler `async-fragments`)",
            ));
        };
        self.build(ctx.structure, ctx.global)?;
        let masks = self.fragments().expect("built above");
        masks.get(j).map(Mask::shallow_clone).ok_or_else(|| {
            Error::component("neuron-fragments", format!("fragment {j} requested, there are {}", masks.len()))
        })
    }

    fn choices(&self) -> usize {
        self.ratios.len()
    }

    // The fragments are built once; in `repo-elementwise` mode from the global model of the
    // moment, so a resumed run takes them from the checkpoint rather than building them anew.
    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("built", &self.built.as_ref().map(|(masks, shared)| (masks.len(), shared)))?;
        for (i, m) in self.built.iter().flat_map(|(masks, _)| masks.iter().enumerate()) {
            out.put_mask(&format!("fragment.{i}"), m)?;
        }
        Ok(())
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.built = match saved.get::<Option<(usize, Vec<String>)>>("built")? {
            Some((n, shared)) => {
                Some(((0..n).map(|i| saved.mask(&format!("fragment.{i}"))).collect::<Result<_>>()?, shared))
            }
            None => None,
        };
        Ok(())
    }
}

fl_core::register!(MaskPolicy "neuron-fragments" => NeuronFragments::new(NeuronFragmentsConfig)?,
    summary: "M disjoint fragments of the hidden units in Table 4 ratios; the scheduler picks one per job (Fed-RAA)",
    paper: "Zhang et al., Fed-RAA");
