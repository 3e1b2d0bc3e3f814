//! Pretrained weights for the `vit` model from a `safetensors` checkpoint the user supplies.
//!
//! Both common namings are read: timm's (`cls_token`, `pos_embed`, `patch_embed.proj`,
//! `blocks.{i}.attn.qkv`, …, `norm`, `head`), whose fused `qkv` `[3D, D]` is split into our
//! `q`, `k`, `v` (rows 0..D, D..2D, 2D..3D), and Hugging Face's `ViTModel` /
//! `ViTForImageClassification` (`vit.embeddings.cls_token`, `…position_embeddings`,
//! `…patch_embeddings.projection`, `vit.encoder.layer.{i}.attention.attention.{query,key,value}`,
//! `…attention.output.dense`, `…layernorm_before` / `_after`, `…intermediate.dense`,
//! `…output.dense`, `vit.layernorm`, `classifier`; the `vit.` prefix is optional).
//!
//! - **Resolution.** A position embedding for another patch grid is resized as timm's
//!   `resample_abs_pos_embed` does: the class token's row kept, the grid's rows interpolated
//!   bicubically (`align_corners = false`) to the model's grid.
//! - **Deeper models.** With `extend = "repeat-last"`, a model of L blocks from a checkpoint of
//!   L₀ < L ≤ 2·L₀ blocks initialises block i ≥ L₀ from checkpoint block i − (L − L₀): Co-S²P's
//!   E3 rule (ViT-Base(Ext.)'s blocks 13–16 from ViT-B's 9–12). Otherwise the depths must agree.
//! - **Head.** The classifier is imported when its shape matches (same class count) and kept at
//!   its fresh initialisation otherwise, as fine-tuning to a new label set does; `head = "never"`
//!   always keeps it fresh. Early exits and AdaViT's decision networks are never in a
//!   checkpoint and keep theirs.
//!
//! A tensor the model needs and the checkpoint lacks, or one of another shape, is an error that
//! names the tensor (ours and the checkpoint's) and both shapes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use fl_core::{Error, Result, Structure};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;
use tch::{Kind, Tensor};

/// How blocks beyond the checkpoint's depth are initialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Extend {
    /// The model's depth must equal the checkpoint's.
    #[default]
    Refuse,
    /// Block i ≥ L₀ copies checkpoint block i − (L − L₀) (Co-S²P's E3).
    RepeatLast,
}

/// Whether the classifier comes from the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeadImport {
    /// When its shape matches the model's.
    #[default]
    IfShapesMatch,
    /// Never: the head keeps its fresh initialisation.
    Never,
}

/// `[model] pretrained = { path = "…", extend = "repeat-last" }`.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PretrainedConfig {
    /// The `safetensors` file.
    pub path: PathBuf,
    /// How blocks beyond the checkpoint's depth are initialised.
    pub extend: Extend,
    /// Whether the classifier comes from the checkpoint.
    pub head: HeadImport,
}

/// The imported tensors, kept on the host (a model is shared across threads).
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// Per imported tensor: its index in the model's structure, values (row-major), shape.
    pub tensors: Vec<(usize, Vec<f32>, Vec<i64>)>,
    /// The model's tensors left at their fresh initialisation (exits, a resized head).
    pub fresh: Vec<String>,
    /// `(model block, checkpoint block)` for blocks copied by `extend = "repeat-last"`.
    pub copied_blocks: Vec<(usize, usize)>,
    /// The checkpoint's position-embedding length, when it was resized to the model's.
    pub resized_positions: Option<i64>,
}

impl Imported {
    /// Writes the imported values over `params` (the model's fresh tensors, in structure
    /// order).
    pub fn apply(&self, params: &mut [Tensor]) {
        for (index, values, shape) in &self.tensors {
            params[*index] = Tensor::from_slice(values).reshape(shape.as_slice());
        }
    }
}

/// The two namings a checkpoint may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Naming {
    Timm,
    /// Hugging Face's, with this prefix (`vit.` or nothing).
    HuggingFace(&'static str),
}

impl Naming {
    fn detect(names: &BTreeMap<String, Tensor>) -> Naming {
        for prefix in ["vit.", ""] {
            if names.contains_key(&format!("{prefix}embeddings.cls_token")) {
                return Naming::HuggingFace(prefix);
            }
        }
        Naming::Timm
    }

    /// Blocks in the checkpoint: one past the largest block index named.
    fn depth(self, names: &BTreeMap<String, Tensor>) -> usize {
        let marker = match self {
            Naming::Timm => "blocks.".to_string(),
            Naming::HuggingFace(p) => format!("{p}encoder.layer."),
        };
        names
            .keys()
            .filter_map(|n| n.strip_prefix(&marker)?.split('.').next()?.parse::<usize>().ok())
            .map(|i| i + 1)
            .max()
            .unwrap_or(0)
    }

    /// The checkpoint's name for our tensor `ours` (a block's tensors at checkpoint block
    /// `block`), and, for q/k/v under timm's naming, which third of the fused `qkv` it is.
    fn source(self, ours: &str, block: Option<usize>) -> Option<(String, Option<i64>)> {
        let (stem, part) = match ours.strip_prefix("blocks.") {
            Some(rest) => {
                let (_, part) = rest.split_once('.')?;
                (None, part)
            }
            None => (Some(ours), ""),
        };
        match (self, stem) {
            (Naming::Timm, Some(name)) => Some((name.to_string(), None)),
            (Naming::Timm, None) => {
                let b = block?;
                let (layer, leaf) = part.rsplit_once('.')?;
                match layer {
                    "attn.q" | "attn.k" | "attn.v" => {
                        let third = ["attn.q", "attn.k", "attn.v"].iter().position(|l| *l == layer)? as i64;
                        Some((format!("blocks.{b}.attn.qkv.{leaf}"), Some(third)))
                    }
                    _ => Some((format!("blocks.{b}.{part}"), None)),
                }
            }
            (Naming::HuggingFace(p), Some(name)) => {
                let mapped = match name {
                    "cls_token" => "embeddings.cls_token".to_string(),
                    "pos_embed" => "embeddings.position_embeddings".to_string(),
                    n if n.starts_with("patch_embed.proj.") => {
                        format!("embeddings.patch_embeddings.projection.{}", n.rsplit('.').next()?)
                    }
                    n if n.starts_with("norm.") => format!("layernorm.{}", n.rsplit('.').next()?),
                    n if n.starts_with("head.") => {
                        return Some((format!("classifier.{}", n.rsplit('.').next()?), None));
                    }
                    _ => return None,
                };
                Some((format!("{p}{mapped}"), None))
            }
            (Naming::HuggingFace(p), None) => {
                let b = block?;
                let (layer, leaf) = part.rsplit_once('.')?;
                let hf = match layer {
                    "norm1" => "layernorm_before",
                    "norm2" => "layernorm_after",
                    "attn.q" => "attention.attention.query",
                    "attn.k" => "attention.attention.key",
                    "attn.v" => "attention.attention.value",
                    "attn.proj" => "attention.output.dense",
                    "mlp.fc1" => "intermediate.dense",
                    "mlp.fc2" => "output.dense",
                    _ => return None,
                };
                Some((format!("{p}encoder.layer.{b}.{hf}.{leaf}"), None))
            }
        }
    }
}

/// Reads `cfg.path` and maps its tensors onto the model described by `structure` (blocks
/// `blocks`, position embedding over a `grid` of patches plus the class token).
pub fn import(structure: &Structure, blocks: usize, grid: (i64, i64), cfg: &PretrainedConfig) -> Result<Imported> {
    let fail = |message: String| Error::component("vit", format!("pretrained {}: {message}", cfg.path.display()));
    let checkpoint: BTreeMap<String, Tensor> = Tensor::read_safetensors(&cfg.path)
        .map_err(|e| fail(format!("cannot read it as safetensors: {e}")))?
        .into_iter()
        .collect();
    let naming = Naming::detect(&checkpoint);
    let depth = naming.depth(&checkpoint);
    let extra = blocks.saturating_sub(depth);
    if depth == 0 {
        return Err(fail(
            "no transformer blocks found (timm's `blocks.{i}.…` or Hugging Face's `encoder.layer.{i}.…`)".into(),
        ));
    }
    if extra > 0 && (cfg.extend == Extend::Refuse || extra > depth) {
        return Err(fail(format!(
            "the checkpoint has {depth} blocks and the model {blocks}; set extend = \"repeat-last\" to copy its last {extra} blocks (at most {depth})"
        )));
    }
    let mut imported =
        Imported { tensors: Vec::new(), fresh: Vec::new(), copied_blocks: Vec::new(), resized_positions: None };
    for (index, spec) in structure.tensors.iter().enumerate() {
        let ours = spec.name.as_str();
        let never_in_a_checkpoint = ours.starts_with("exits.") || ours.contains(".decide.");
        if never_in_a_checkpoint || (ours.starts_with("head.") && cfg.head == HeadImport::Never) {
            imported.fresh.push(spec.name.clone());
            continue;
        }
        let block = ours.strip_prefix("blocks.").and_then(|r| r.split('.').next()?.parse::<usize>().ok());
        let source_block = block.map(|b| if b < depth { b } else { b - extra });
        if let (Some(b), Some(s)) = (block, source_block)
            && b != s
            && !imported.copied_blocks.contains(&(b, s))
        {
            imported.copied_blocks.push((b, s));
        }
        let (name, third) = naming
            .source(ours, source_block)
            .ok_or_else(|| fail(format!("no checkpoint tensor corresponds to `{ours}`")))?;
        let found = checkpoint.get(&name).ok_or_else(|| {
            fail(format!("missing tensor `{name}` (for the model's `{ours}`, shape {:?})", spec.shape))
        })?;
        let mut value = found.to_kind(Kind::Float);
        if let Some(third) = third {
            let rows = value.size()[0];
            if rows % 3 != 0 {
                return Err(fail(format!("`{name}` has shape {:?}: a fused qkv needs 3·D rows", value.size())));
            }
            value = value.narrow(0, third * rows / 3, rows / 3);
        }
        if ours == "pos_embed" && value.size() != spec.shape {
            imported.resized_positions = Some(value.size().get(1).copied().unwrap_or(0));
            value = resize_positions(&value, grid).map_err(|m| fail(format!("`{name}`: {m}")))?;
        }
        if value.size() != spec.shape {
            if ours.starts_with("head.") {
                imported.fresh.push(spec.name.clone());
                continue;
            }
            return Err(fail(format!(
                "`{name}` has shape {:?}, the model's `{ours}` needs {:?}",
                value.size(),
                spec.shape
            )));
        }
        let values = Vec::<f32>::try_from(value.contiguous().view(-1)).map_err(|e| fail(format!("`{name}`: {e}")))?;
        imported.tensors.push((index, values, spec.shape.clone()));
    }
    Ok(imported)
}

/// A position embedding `[1, 1 + g₀², D]` (class token first, a square grid) resized to
/// `[1, 1 + gh·gw, D]` by bicubic interpolation of the grid.
fn resize_positions(pos: &Tensor, (gh, gw): (i64, i64)) -> std::result::Result<Tensor, String> {
    let [1, t, d] = pos.size()[..] else { return Err(format!("expected [1, T, D], got {:?}", pos.size())) };
    let g = ((t - 1) as f64).sqrt().round() as i64;
    if g * g != t - 1 {
        return Err(format!("{} patch positions are not a square grid", t - 1));
    }
    let cls = pos.narrow(1, 0, 1);
    let grid = pos.narrow(1, 1, t - 1).reshape([1, g, g, d]).permute([0, 3, 1, 2]);
    let resized = grid.upsample_bicubic2d([gh, gw], false, None, None).permute([0, 2, 3, 1]).reshape([1, gh * gw, d]);
    Ok(Tensor::cat(&[cls, resized], 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::input;
    use crate::{Vit, VitConfig};
    use fl_core::rng::Rng;
    use fl_core::{DataSpec, Model, ParamSet};
    use rand::SeedableRng;

    fn spec(side: i64, classes: i64) -> DataSpec {
        DataSpec { input_shape: vec![3, side, side], classes, vocab_size: None }
    }

    fn cfg(depth: i64) -> VitConfig {
        VitConfig {
            depth: Some(depth),
            hidden: Some(8),
            mlp: Some(12),
            heads: Some(2),
            patch: Some(4),
            ..VitConfig::default()
        }
    }

    /// A model's parameters with values that tell tensors apart (init leaves biases at zero).
    fn params(m: &Vit) -> ParamSet {
        let shapes = m.structure().shapes();
        let tensors = shapes.iter().enumerate().map(|(i, s)| input(s, 40 + i as u64)).collect();
        ParamSet::new(m.structure().names(), tensors).unwrap()
    }

    /// `p` under timm's names: q, k and v fused into `qkv`.
    fn timm(p: &ParamSet) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (name, t) in p.iter() {
            if let Some(rest) = name.strip_suffix(".weight").or(name.strip_suffix(".bias")) {
                let leaf = &name[rest.len() + 1..];
                if let Some(block) = rest.strip_suffix(".attn.q") {
                    let get = |x: &str| p.get(&format!("{block}.attn.{x}.{leaf}")).unwrap().shallow_clone();
                    out.push((format!("{block}.attn.qkv.{leaf}"), Tensor::cat(&[get("q"), get("k"), get("v")], 0)));
                    continue;
                }
                if rest.ends_with(".attn.k") || rest.ends_with(".attn.v") {
                    continue;
                }
            }
            out.push((name.to_string(), t.shallow_clone()));
        }
        out
    }

    /// `p` under Hugging Face's names, with the `vit.` prefix.
    fn hugging_face(p: &ParamSet) -> Vec<(String, Tensor)> {
        p.iter()
            .map(|(name, t)| {
                let mapped = match name {
                    "cls_token" => "vit.embeddings.cls_token".to_string(),
                    "pos_embed" => "vit.embeddings.position_embeddings".to_string(),
                    n if n.starts_with("patch_embed.proj.") => {
                        format!("vit.embeddings.patch_embeddings.projection.{}", n.rsplit('.').next().unwrap())
                    }
                    n if n.starts_with("norm.") => format!("vit.layernorm.{}", n.rsplit('.').next().unwrap()),
                    n if n.starts_with("head.") => format!("classifier.{}", n.rsplit('.').next().unwrap()),
                    n => {
                        let rest = n.strip_prefix("blocks.").unwrap();
                        let (b, part) = rest.split_once('.').unwrap();
                        let (layer, leaf) = part.rsplit_once('.').unwrap();
                        let hf = match layer {
                            "norm1" => "layernorm_before",
                            "norm2" => "layernorm_after",
                            "attn.q" => "attention.attention.query",
                            "attn.k" => "attention.attention.key",
                            "attn.v" => "attention.attention.value",
                            "attn.proj" => "attention.output.dense",
                            "mlp.fc1" => "intermediate.dense",
                            "mlp.fc2" => "output.dense",
                            other => panic!("unexpected layer {other}"),
                        };
                        format!("vit.encoder.layer.{b}.{hf}.{leaf}")
                    }
                };
                (mapped, t.shallow_clone())
            })
            .collect()
    }

    fn write(dir: &tempfile::TempDir, tensors: &[(String, Tensor)]) -> PathBuf {
        let path = dir.path().join("vit.safetensors");
        Tensor::write_safetensors(tensors, &path).unwrap();
        path
    }

    fn pretrained(path: &std::path::Path, extend: Extend) -> Option<PretrainedConfig> {
        Some(PretrainedConfig { path: path.to_path_buf(), extend, head: HeadImport::IfShapesMatch })
    }

    #[test]
    fn timm_and_hugging_face_checkpoints_load_exactly() {
        let source = Vit::new(cfg(2), &spec(8, 3)).unwrap();
        let want = params(&source);
        let dir = tempfile::tempdir().unwrap();
        for tensors in [timm(&want), hugging_face(&want)] {
            let path = write(&dir, &tensors);
            let m =
                Vit::new(VitConfig { pretrained: pretrained(&path, Extend::Refuse), ..cfg(2) }, &spec(8, 3)).unwrap();
            let got = m.init(&mut Rng::seed_from_u64(9));
            assert!(got.equal(&want), "imported tensors differ from the checkpoint's");
            assert!(m.imported().unwrap().fresh.is_empty());
        }
    }

    #[test]
    fn positions_are_resized_bicubically_and_the_class_token_row_kept() {
        let source = Vit::new(cfg(2), &spec(8, 3)).unwrap();
        let mut p = params(&source);
        // A constant grid stays constant under bicubic interpolation.
        let pos = p.get("pos_embed").unwrap().shallow_clone();
        let constant = Tensor::cat(&[pos.narrow(1, 0, 1), pos.narrow(1, 1, 4).ones_like() * 0.25], 1);
        p = ParamSet::new(
            p.names().to_vec(),
            p.iter()
                .map(|(n, t)| if n == "pos_embed" { constant.shallow_clone() } else { t.shallow_clone() })
                .collect(),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, &timm(&p));
        // 16×16 images: a 4×4 grid of patches instead of 2×2.
        let m = Vit::new(VitConfig { pretrained: pretrained(&path, Extend::Refuse), ..cfg(2) }, &spec(16, 3)).unwrap();
        assert_eq!(m.imported().unwrap().resized_positions, Some(5));
        let got = m.init(&mut Rng::seed_from_u64(1));
        let resized = got.get("pos_embed").unwrap();
        assert_eq!(resized.size(), [1, 17, 8]);
        assert!(resized.narrow(1, 0, 1).equal(&pos.narrow(1, 0, 1)), "the class token's row is kept");
        assert!(resized.narrow(1, 1, 16).allclose(&(resized.narrow(1, 1, 16).ones_like() * 0.25), 1e-6, 1e-6, false));
        // Every other tensor is imported as is.
        assert!(got.get("blocks.1.mlp.fc2.weight").unwrap().equal(p.get("blocks.1.mlp.fc2.weight").unwrap()));
    }

    #[test]
    fn a_deeper_model_copies_the_last_blocks_only_when_asked() {
        let source = Vit::new(cfg(2), &spec(8, 3)).unwrap();
        let want = params(&source);
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, &timm(&want));
        let err =
            Vit::new(VitConfig { pretrained: pretrained(&path, Extend::Refuse), ..cfg(3) }, &spec(8, 3)).unwrap_err();
        assert!(
            err.to_string().contains("2 blocks and the model 3") && err.to_string().contains("repeat-last"),
            "{err}"
        );
        // Co-S²P's E3 rule at small scale: 3 blocks from 2, block 2 from checkpoint block 1.
        let m =
            Vit::new(VitConfig { pretrained: pretrained(&path, Extend::RepeatLast), ..cfg(3) }, &spec(8, 3)).unwrap();
        assert_eq!(m.imported().unwrap().copied_blocks, [(2, 1)]);
        let got = m.init(&mut Rng::seed_from_u64(2));
        for leaf in ["norm1.weight", "attn.q.weight", "attn.v.bias", "mlp.fc2.weight"] {
            let copied = got.get(&format!("blocks.2.{leaf}")).unwrap();
            assert!(copied.equal(want.get(&format!("blocks.1.{leaf}")).unwrap()), "blocks.2.{leaf}");
            assert!(
                got.get(&format!("blocks.0.{leaf}")).unwrap().equal(want.get(&format!("blocks.0.{leaf}")).unwrap())
            );
        }
        // More than twice the checkpoint's depth cannot be filled from its last blocks.
        assert!(
            Vit::new(VitConfig { pretrained: pretrained(&path, Extend::RepeatLast), ..cfg(5) }, &spec(8, 3)).is_err()
        );
    }

    #[test]
    fn decision_networks_stay_fresh_and_the_backbone_is_imported() {
        let source = Vit::new(cfg(2), &spec(8, 3)).unwrap();
        let want = params(&source);
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, &timm(&want));
        let decided =
            VitConfig { pretrained: pretrained(&path, Extend::Refuse), decisions: Some(Default::default()), ..cfg(2) };
        let m = Vit::new(decided, &spec(8, 3)).unwrap();
        let fresh = &m.imported().unwrap().fresh;
        assert_eq!(fresh.len(), 12, "three decision nets of two tensors in each of two blocks: {fresh:?}");
        assert!(fresh.iter().all(|n| n.contains(".decide.")), "{fresh:?}");
        let got = m.init(&mut Rng::seed_from_u64(3));
        assert!(got.get("blocks.1.mlp.fc1.weight").unwrap().equal(want.get("blocks.1.mlp.fc1.weight").unwrap()));
    }

    #[test]
    fn a_head_for_other_classes_and_the_exits_stay_fresh() {
        let source = Vit::new(cfg(2), &spec(8, 3)).unwrap();
        let want = params(&source);
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, &timm(&want));
        let m = Vit::new(
            VitConfig { pretrained: pretrained(&path, Extend::Refuse), exits: vec![1], ..cfg(2) },
            &spec(8, 7),
        )
        .unwrap();
        let fresh = &m.imported().unwrap().fresh;
        assert_eq!(
            fresh,
            &[
                "exits.1.norm.weight",
                "exits.1.norm.bias",
                "exits.1.head.weight",
                "exits.1.head.bias",
                "head.weight",
                "head.bias"
            ]
        );
        let got = m.init(&mut Rng::seed_from_u64(3));
        assert!(got.get("blocks.1.attn.k.weight").unwrap().equal(want.get("blocks.1.attn.k.weight").unwrap()));
        assert_eq!(got.get("head.weight").unwrap().size(), [7, 8]);
    }

    #[test]
    fn missing_and_misshaped_tensors_are_errors_naming_them_and_their_shapes() {
        let source = Vit::new(cfg(2), &spec(8, 3)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut tensors = timm(&params(&source));
        tensors.retain(|(n, _)| n != "blocks.1.mlp.fc2.weight");
        let path = write(&dir, &tensors);
        let err =
            Vit::new(VitConfig { pretrained: pretrained(&path, Extend::Refuse), ..cfg(2) }, &spec(8, 3)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("missing tensor `blocks.1.mlp.fc2.weight`") && text.contains("[8, 12]"), "{text}");
        // A checkpoint whose MLP is 16 wide, for a model whose MLP is 12 wide.
        let wide = Vit::new(VitConfig { mlp: Some(16), ..cfg(2) }, &spec(8, 3)).unwrap();
        let path = write(&dir, &timm(&params(&wide)));
        let text = Vit::new(VitConfig { pretrained: pretrained(&path, Extend::Refuse), ..cfg(2) }, &spec(8, 3))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("`blocks.0.mlp.fc1.weight` has shape [16, 8]") && text.contains("needs [12, 8]"),
            "{text}"
        );
        let text = Vit::new(
            VitConfig { pretrained: pretrained(&dir.path().join("absent.safetensors"), Extend::Refuse), ..cfg(2) },
            &spec(8, 3),
        )
        .unwrap_err()
        .to_string();
        assert!(text.contains("absent.safetensors") && text.contains("cannot read"), "{text}");
    }
}
