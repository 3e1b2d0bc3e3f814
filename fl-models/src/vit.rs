//! `vit`: the Vision Transformer, with heads and MLP neurons as unit groups, so that structured
//! width sub-models (HeteroFL, FedRolex, Co-S²P's learned masks) are physically smaller ViTs.
//!
//! Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021 (arXiv:2010.11929), in timm's
//! arrangement (`VisionTransformer`, class token, pre-norm): the image is cut into P×P patches,
//! each projected to D (`patch_embed.proj`, a P×P convolution with stride P, computed as one
//! linear map of the flattened patches); a learned class token is prepended and a learned
//! position embedding added; `depth` blocks follow, each
//! `x ← x + proj(attention(LN₁(x)))` then `x ← x + fc2(GELU(fc1(LN₂(x))))`; the final LayerNorm
//! is applied and the class token's representation goes to the linear head. LayerNorm ε is
//! 1e-6 (timm's), GELU is the exact (erf) form. With `dropout` p > 0, dropout follows the
//! position embedding, the attention projection, the MLP's GELU and its `fc2` (timm's
//! `pos_drop`, `proj_drop`, `drop`); attention weights are not dropped.
//!
//! **Tensors.** timm's names and layouts (`cls_token` `[1, 1, D]`, `pos_embed` `[1, T, D]`,
//! `patch_embed.proj.weight` `[D, ch, P, P]`, …, `head.weight` `[classes, D]`), except that
//! timm's fused `attn.qkv` `[3D, D]` is kept as three tensors `attn.q`, `attn.k`, `attn.v`
//! `[D, D]` (rows 0..D, D..2D and 2D..3D of timm's), so that a head is one block of rows in
//! each and can be sliced out.
//!
//! **Unit groups.** Per block, `blocks.{i}.heads`: head h is rows `h·d_h..(h+1)·d_h` of the q, k
//! and v weights and biases and the same columns of `attn.proj.weight`; `blocks.{i}.mlp`: MLP
//! neuron j is row j of `mlp.fc1` (weight and bias) and column j of `mlp.fc2.weight`. Removing a
//! head or a neuron is exactly zeroing its rows and columns in the full model (a test checks
//! this), and `forward` reads the kept head count from the tensors (`d_h = D / heads` stays).
//! D itself (the residual stream) is never cut.
//!
//! **Initialisation** as timm's default: linear weights N(0, 0.02²) (timm truncates at ±2,
//! 100σ away) with zero biases, the patch projection PyTorch's default U(±1/√fan_in),
//! `pos_embed` N(0, 0.02²), `cls_token` N(0, 10⁻¹²), LayerNorms 1 and 0.
//!
//! **Presets** (`preset`; any of `depth`, `hidden`, `mlp`, `heads`, `patch` overrides it):
//! Co-S²P's Table 4 models `tiny512` (8 blocks, D 512, MLP 2048, 8 heads, P 16: not DeiT-Ti),
//! `base` (ViT-B/16: 12, 768, 3072, 12, 16) and `base-ext` (16 blocks of ViT-B), and two small
//! ones of the same depth and head structure for the data available here: `small28`
//! (8 blocks, D 128, MLP 512, 8 heads, P 7: 16 patches of a 28×28 image) and `small32`
//! (the same with P 4: 64 patches of a 32×32 image).
//!
//! **Decisions** (`decisions = {}`): AdaViT's per-block decision networks
//! ([`crate::vit_decisions`]), three linear maps that decide per sample which patches and heads
//! a block computes and whether its attention and its MLP run. Their tensors end each block
//! (`blocks.{i}.decide.tokens`, `.heads`, `.layers`, weight and bias); a head's decision row
//! belongs to the head's unit.
//!
//! **Pretrained weights**: `pretrained = { path = "vit_b16.safetensors" }` starts from a timm or
//! Hugging Face checkpoint ([`crate::vit_import`]: position embeddings resized to the model's
//! grid, Co-S²P's copied blocks for deeper models, a fresh head for another class count).
//!
//! **FLOPs** follow [`crate::flops`] (2 per multiply-add, 1 per bias addition) at every token
//! for the block's linear maps and at every patch for the patch projection; the attention
//! products (`q kᵀ` and the weighted sum of `v`, `4·T²·width` per block) are attributed to the
//! `attn.q` weight, whose rows are the kept heads. So the weights of a full block cost
//! `24·T·D² + 4·T²·D`, Co-S²P's formula (§6.3 of its spec) with MLP = 4D. LayerNorm, GELU,
//! softmax and the position embedding's addition are not counted.

use fl_core::rng::Rng;
use fl_core::{DataSpec, Depth, InvalidKey, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result, Structure};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;
use tch::Tensor;

use crate::cohort;
use crate::flops;
use crate::layout::{Cursor, Fill, Layout};
use crate::vit_decisions::{self, BlockDecisions, DecisionsConfig};
use crate::vit_import::{Imported, PretrainedConfig, import};

/// The model's registered name, which its errors begin with.
const NAME: &str = "vit";

/// timm's LayerNorm ε.
const LN_EPS: f64 = 1e-6;
/// Standard deviation of timm's linear-weight and position-embedding initialisation.
const INIT_STD: f64 = 0.02;
/// Tensors per block: two LayerNorms (2 each), q, k, v, proj, fc1, fc2 (weight and bias each).
const PER_BLOCK: usize = 16;
/// Tensors before the first block: class token, position embedding, patch weight and bias.
const STEM: usize = 4;
/// Tensors of a read-out (an early exit, or the final norm and head): LayerNorm and linear.
const READOUT: usize = 4;

/// A named architecture: depth, hidden size, MLP size, heads and patch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VitPreset {
    /// Co-S²P's "ViT-Tiny": 8 blocks, D 512, MLP 2048, 8 heads, P 16.
    Tiny512,
    /// ViT-B/16: 12 blocks, D 768, MLP 3072, 12 heads, P 16.
    Base,
    /// Co-S²P's ViT-Base(Ext.): ViT-B/16 with 16 blocks.
    BaseExt,
    /// 8 blocks, D 128, MLP 512, 8 heads, P 7 (28×28 images).
    Small28,
    /// 8 blocks, D 128, MLP 512, 8 heads, P 4 (32×32 images).
    Small32,
}

impl VitPreset {
    /// `[depth, hidden, mlp, heads, patch]`.
    fn dims(self) -> [i64; 5] {
        match self {
            VitPreset::Tiny512 => [8, 512, 2048, 8, 16],
            VitPreset::Base => [12, 768, 3072, 12, 16],
            VitPreset::BaseExt => [16, 768, 3072, 12, 16],
            VitPreset::Small28 => [8, 128, 512, 8, 7],
            VitPreset::Small32 => [8, 128, 512, 8, 4],
        }
    }
}

/// Parameters of the `vit` component: a preset, any of whose sizes may be overridden.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VitConfig {
    /// The architecture the sizes start from.
    #[default(VitPreset::Small28)]
    pub preset: VitPreset,
    /// Transformer blocks (overrides the preset's).
    pub depth: Option<i64>,
    /// Hidden size D (overrides the preset's).
    pub hidden: Option<i64>,
    /// MLP hidden size (overrides the preset's).
    pub mlp: Option<i64>,
    /// Attention heads; must divide D (overrides the preset's).
    pub heads: Option<i64>,
    /// Patch side P; must divide the image's height and width (overrides the preset's).
    pub patch: Option<i64>,
    /// Dropout probability in [0, 1) (timm's `drop_rate`); 0 disables it.
    #[default(0.0)]
    pub dropout: f64,
    /// Depths (blocks below, 1 … depth − 1, ascending) with an early exit: a LayerNorm and a
    /// linear head of their own on the class token there, which a depth window ending at that
    /// depth reads out through. The full model's forward pass does not run them.
    pub exits: Vec<i64>,
    /// Initial weights from a `safetensors` checkpoint (timm or Hugging Face naming; see
    /// [`crate::vit_import`]); absent: timm's random initialisation.
    pub pretrained: Option<PretrainedConfig>,
    /// AdaViT's decision networks ([`crate::vit_decisions`]): each block decides per sample
    /// which patches and heads it computes and whether its attention and MLP run; absent: every
    /// block computes everything.
    pub decisions: Option<DecisionsConfig>,
}

/// The resolved sizes of a ViT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VitDims {
    pub depth: i64,
    pub hidden: i64,
    pub mlp: i64,
    pub heads: i64,
    pub patch: i64,
}

impl VitConfig {
    /// The preset's sizes with this config's overrides.
    pub fn dims(&self) -> VitDims {
        let [depth, hidden, mlp, heads, patch] = self.preset.dims();
        VitDims {
            depth: self.depth.unwrap_or(depth),
            hidden: self.hidden.unwrap_or(hidden),
            mlp: self.mlp.unwrap_or(mlp),
            heads: self.heads.unwrap_or(heads),
            patch: self.patch.unwrap_or(patch),
        }
    }

    /// Checks the sizes and the dropout probability; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        let d = self.dims();
        for (key, value) in
            [("depth", d.depth), ("hidden", d.hidden), ("mlp", d.mlp), ("heads", d.heads), ("patch", d.patch)]
        {
            if value < 1 {
                return Err(InvalidKey::new(key, format!("must be at least 1, got {value}")));
            }
        }
        if d.hidden % d.heads != 0 {
            return Err(InvalidKey::new(
                "heads",
                format!("{} heads do not divide the hidden size {}", d.heads, d.hidden),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(InvalidKey::new("dropout", format!("must be in [0, 1), got {}", self.dropout)));
        }
        if let Some(decisions) = &self.decisions {
            decisions.validate()?;
        }
        let ascending = self.exits.windows(2).all(|w| w[0] < w[1]);
        if !ascending || self.exits.iter().any(|&e| e < 1 || e >= d.depth) {
            return Err(InvalidKey::new(
                "exits",
                format!("depths in 1..{} ascending, each once, got {:?}", d.depth, self.exits),
            ));
        }
        Ok(())
    }
}

/// The Vision Transformer; see the module documentation.
#[derive(Debug)]
pub struct Vit {
    cfg: VitConfig,
    dims: VitDims,
    layout: Layout,
    structure: Structure,
    /// `[channels, H, W]` of one sample.
    input: [i64; 3],
    /// Tokens per sequence: the patches and the class token.
    tokens: i64,
    /// Tensors imported from `pretrained`, which `init` writes over its draws.
    imported: Option<Imported>,
}

impl Vit {
    /// The ViT for images `spec.input_shape` = `[channels, H, W]` (H and W multiples of the
    /// patch side) and `spec.classes` logits.
    pub fn new(cfg: VitConfig, spec: &DataSpec) -> Result<Vit> {
        cfg.validate().map_err(|key| ModelError::Config { model: NAME, key })?;
        let d = cfg.dims();
        if spec.vocab_size.is_some() {
            return Err(ModelError::NeedsRealValues { model: NAME }.into());
        }
        let unsupported = |expected| ModelError::InputShape { model: NAME, expected, found: spec.input_shape.clone() };
        let &[ch, h, w] = spec.input_shape.as_slice() else {
            return Err(unsupported("[channels, H, W]").into());
        };
        if ch < 1 || h < 1 || w < 1 || h % d.patch != 0 || w % d.patch != 0 {
            return Err(unsupported("[channels, H, W] with H and W multiples of the patch side").into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: NAME, classes: spec.classes }.into());
        }
        let patches = (h / d.patch) * (w / d.patch);
        let tokens = patches + 1;
        let (dm, hd) = (d.hidden, d.hidden / d.heads);
        let mut l = Layout::default(); // Tensors start in the stem.
        l.tensor("cls_token", [1, 1, dm], Fill::Normal { std: 1e-6 }, 0);
        l.tensor("pos_embed", [1, tokens, dm], Fill::Normal { std: INIT_STD }, 0);
        l.conv("patch_embed.proj", dm, ch, d.patch, patches);
        for i in 0..d.depth {
            l.depth = Depth::Block(i as usize);
            let b = format!("blocks.{i}");
            l.layer_norm(&format!("{b}.norm1"), dm);
            let q = l.linear_normal(&format!("{b}.attn.q"), dm, dm, tokens, INIT_STD);
            let k = l.linear_normal(&format!("{b}.attn.k"), dm, dm, tokens, INIT_STD);
            let v = l.linear_normal(&format!("{b}.attn.v"), dm, dm, tokens, INIT_STD);
            let proj = l.linear_normal(&format!("{b}.attn.proj"), dm, dm, tokens, INIT_STD);
            l.layer_norm(&format!("{b}.norm2"), dm);
            let fc1 = l.linear_normal(&format!("{b}.mlp.fc1"), d.mlp, dm, tokens, INIT_STD);
            let fc2 = l.linear_normal(&format!("{b}.mlp.fc2"), dm, d.mlp, tokens, INIT_STD);
            let head_rows = |t: usize| [(t, 0, hd), (t + 1, 0, hd)];
            let mut heads: Vec<(usize, usize, i64)> = [q, k, v].into_iter().flat_map(head_rows).collect();
            heads.push((proj, 1, hd));
            if let Some(decisions) = &cfg.decisions {
                // A head's decision row is one of its units' rows, so a sub-model of fewer heads
                // decides over the heads it holds.
                let bias = Fill::Constant { value: decisions.initial_bias() };
                for (net, units, at) in vit_decisions::nets(patches, d.heads) {
                    let w =
                        l.tensor(&format!("{b}.decide.{net}.weight"), [units, dm], Fill::Normal { std: INIT_STD }, at);
                    l.tensor(&format!("{b}.decide.{net}.bias"), [units], bias, at);
                    if net == "heads" {
                        heads.extend([(w, 0, 1), (w + 1, 0, 1)]);
                    }
                }
            }
            l.group(&format!("{b}.heads"), d.heads, &heads);
            l.group(&format!("{b}.mlp"), d.mlp, &[(fc1, 0, 1), (fc1 + 1, 0, 1), (fc2, 1, 1)]);
        }
        for &e in &cfg.exits {
            l.depth = Depth::Exit(e as usize);
            l.layer_norm(&format!("exits.{e}.norm"), dm);
            l.linear_normal(&format!("exits.{e}.head"), spec.classes, dm, 1, INIT_STD);
        }
        l.depth = Depth::Head;
        l.layer_norm("norm", dm);
        l.linear_normal("head", spec.classes, dm, 1, INIT_STD);
        let structure = l.structure();
        let grid = (h / d.patch, w / d.patch);
        let imported = cfg.pretrained.as_ref().map(|p| import(&structure, d.depth as usize, grid, p)).transpose()?;
        Ok(Vit { cfg, dims: d, structure, layout: l, input: [ch, h, w], tokens, imported })
    }

    pub fn config(&self) -> &VitConfig {
        &self.cfg
    }

    /// The resolved sizes.
    pub fn dims(&self) -> VitDims {
        self.dims
    }

    /// Tokens per sequence (patches + the class token).
    pub fn tokens(&self) -> i64 {
        self.tokens
    }

    /// What `pretrained` imported, if set.
    pub fn imported(&self) -> Option<&Imported> {
        self.imported.as_ref()
    }

    /// Tensors per block: 16, and AdaViT's decision networks' where set.
    fn per_block(&self) -> usize {
        PER_BLOCK + if self.cfg.decisions.is_some() { vit_decisions::TENSORS } else { 0 }
    }

    /// Blocks and read-outs (early exits, then the final one) of a (sub-)model of `tensors`
    /// tensors, `matrix(i)` saying whether tensor i is a weight matrix: after the stem, each
    /// block is [`Vit::per_block`] tensors whose fifth (the k projection) is a matrix, each
    /// read-out 4 whose fifth would be the next read-out's LayerNorm weight. The full model's
    /// exits count as read-outs.
    ///
    /// # Panics
    /// If the tensors after the blocks are not whole read-outs.
    fn layout_of(&self, tensors: usize, matrix: impl Fn(usize) -> bool) -> (usize, usize) {
        let mut i = STEM;
        let mut blocks = 0;
        while i + 4 < tensors && matrix(i + 4) {
            blocks += 1;
            i += self.per_block();
        }
        let rest = tensors.saturating_sub(i);
        assert!(
            rest >= READOUT && rest.is_multiple_of(READOUT),
            "{NAME}: {tensors} tensors end in {rest} that are no read-outs"
        );
        (blocks, rest / READOUT)
    }

    /// [`Vit::layout_of`] for stacked cohort tensors.
    fn layout_of_stacked(&self, params: &[Tensor]) -> (usize, usize) {
        self.layout_of(params.len(), |i| params[i].dim() == 3)
    }

    /// [`Vit::layout_of`] for unstacked shapes.
    fn layout_of_shapes(&self, shapes: &[Vec<i64>]) -> (usize, usize) {
        self.layout_of(shapes.len(), |i| shapes[i].len() == 2)
    }

    /// The token sequences `[C, B, T, D]` after the stem, and after each of `blocks` blocks
    /// (`blocks + 1` entries), reading the tensors from `p`.
    fn stages(&self, p: &mut Cursor, x: &Tensor, clients: i64, blocks: usize, mode: &mut Mode) -> Vec<Tensor> {
        let (cls, pos) = p.pair();
        let (pw, pb) = p.pair();
        let dm = pw.size()[1];
        let tokens = cohort::tokens_linear(&self.patches(x, clients), &pw.reshape([clients, dm, -1]), pb);
        let batch = tokens.size()[1];
        // The stacked class token is `[C, 1, 1, D]` and the position embedding `[C, 1, T, D]`.
        let cls = cls.expand([clients, batch, 1, dm], false);
        let mut stages = vec![mode.dropout(&(Tensor::cat(&[cls, tokens], 2) + pos), self.cfg.dropout)];
        for _ in 0..blocks {
            let next = self.block(stages.last().expect("the stem's output"), p, mode);
            stages.push(next);
        }
        stages
    }

    /// `x` `[C, B, ch, H, W]` → the patches flattened channel first `[C, B, N, ch·P·P]`, the
    /// order in which a `[D, ch, P, P]` convolution weight is flattened.
    fn patches(&self, x: &Tensor, clients: i64) -> Tensor {
        let [ch, h, w] = self.input;
        let p = self.dims.patch;
        let (gh, gw) = (h / p, w / p);
        x.reshape([clients, -1, ch, gh, p, gw, p]).permute([0, 1, 3, 5, 2, 4, 6]).reshape([
            clients,
            -1,
            gh * gw,
            ch * p * p,
        ])
    }

    /// One pre-norm block on `x` `[C, B, T, D]`.
    fn block(&self, x: &Tensor, p: &mut Cursor, mode: &mut Mode) -> Tensor {
        let drop = self.cfg.dropout;
        let (n1w, n1b) = p.pair();
        let (qw, qb) = p.pair();
        let (kw, kb) = p.pair();
        let (vw, vb) = p.pair();
        let (pw, pb) = p.pair();
        let (n2w, n2b) = p.pair();
        let (f1w, f1b) = p.pair();
        let (f2w, f2b) = p.pair();
        let h = cohort::layer_norm(x, n1w, n1b, LN_EPS);
        // AdaViT's decisions, where set, draw before anything else in the block.
        let decided = self.cfg.decisions.as_ref().map(|cfg| {
            let nets = [(); vit_decisions::TENSORS].map(|_| p.next());
            BlockDecisions::decide(x, &h, nets, cfg, mode)
        });
        let (q, k, v) =
            (cohort::tokens_linear(&h, qw, qb), cohort::tokens_linear(&h, kw, kb), cohort::tokens_linear(&h, vw, vb));
        let head_dim = self.dims.hidden / self.dims.heads;
        let attended = match &decided {
            Some(d) => d.attention(&q, &k, &v, head_dim),
            None => cohort::attention(&q, &k, &v, head_dim),
        };
        let attended = mode.dropout(&cohort::tokens_linear(&attended, pw, pb), drop);
        let x = x + match &decided {
            Some(d) => d.gate_attention(&attended),
            None => attended,
        };
        let h = cohort::layer_norm(&x, n2w, n2b, LN_EPS);
        let h = mode.dropout(&cohort::tokens_linear(&h, f1w, f1b).gelu("none"), drop);
        let mlp = mode.dropout(&cohort::tokens_linear(&h, f2w, f2b), drop);
        &x + match &decided {
            Some(d) => d.gate_mlp(&mlp),
            None => mlp,
        }
    }
}

impl Model for Vit {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        let fresh = self.layout.init(rng);
        match &self.imported {
            Some(imported) => {
                let mut tensors: Vec<Tensor> = fresh.tensors().iter().map(Tensor::shallow_clone).collect();
                imported.apply(&mut tensors);
                ParamSet::new(fresh.names().to_vec(), tensors).expect("one tensor per structure entry")
            }
            None => fresh,
        }
    }

    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        // The body lacks the last read-out's head pair: count as if it were there.
        let (blocks, readouts) = self.layout_of(body.len() + 2, |i| body[i].dim() == 3);
        let mut p = Cursor::new(NAME, body, STEM + self.per_block() * blocks + READOUT * readouts - 2);
        let h = self.stages(&mut p, x, body[0].size()[0], blocks, mode).pop().expect("the last stage");
        for _ in 0..READOUT * (readouts - 1) {
            p.next(); // Early exits, which the deepest read-out does not use.
        }
        let (nw, nb) = p.pair();
        cohort::layer_norm(&h.select(2, 0), nw, nb, LN_EPS)
    }

    fn forward_exits(&self, params: &[Tensor], x: &Tensor, mode: &mut Mode, depths: &[usize]) -> Vec<Tensor> {
        let (blocks, readouts) = self.layout_of_stacked(params);
        assert_eq!(depths.len(), readouts, "{NAME}: {readouts} read-outs, {} depths given", depths.len());
        let mut p = Cursor::new(NAME, params, params.len());
        let stages = self.stages(&mut p, x, params[0].size()[0], blocks, mode);
        depths
            .iter()
            .map(|&d| {
                assert!(d <= blocks, "{NAME}: a read-out after {d} blocks of a sub-model of {blocks}");
                let (nw, nb) = p.pair();
                let (hw, hb) = p.pair();
                cohort::linear(&cohort::layer_norm(&stages[d].select(2, 0), nw, nb, LN_EPS), hw, hb)
            })
            .collect()
    }

    fn activation_floats(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        self.activations(shapes)
    }

    fn records_usage(&self) -> bool {
        self.cfg.decisions.is_some()
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        let (blocks, readouts) = self.layout_of_shapes(shapes);
        let exits = readouts - 1;
        let (t, patches) = (self.tokens, self.tokens - 1);
        // Output positions: the patch projection at every patch, a block's linear maps at every
        // token, LayerNorms nothing (uncounted), each read-out's head once.
        let mut positions = vec![0, 0, patches, patches];
        let decisions = self.cfg.decisions.is_some();
        for _ in 0..blocks {
            positions.extend([0, 0, t, t, t, t, t, t, t, t, 0, 0, t, t, t, t]);
            if decisions {
                let nets = vit_decisions::nets(patches, self.dims.heads);
                positions.extend(nets.into_iter().flat_map(|(_, _, at)| [at, at])); // Weight and bias.
            }
        }
        // Every read-out, early exits included (a sub-model distilling into them runs them).
        for _ in 0..=exits {
            positions.extend([0, 0, 1, 1]);
        }
        assert_eq!(positions.len(), shapes.len(), "{NAME} flops: {} shapes", shapes.len());
        let mut out: Vec<f64> = shapes.iter().zip(&positions).map(|(s, &n)| flops::of_tensor(s, n)).collect();
        for block in 0..blocks {
            // The attention products, at the kept width (the q weight's rows).
            let q = STEM + block * self.per_block() + 2;
            out[q] += 4.0 * (t * t * shapes[q][0]) as f64;
        }
        out
    }
}

impl Vit {
    /// [`Model::activation_floats`]: what autograd keeps per sample, counted from our forward
    /// pass (T tokens, D hidden, w kept attention width of h heads, M kept MLP neurons):
    /// - the patches unfolded for the projection, `(T − 1)·ch·P²`, on the patch weight;
    /// - per block, on its first tensor: each LayerNorm its input, normalised output and affine
    ///   output (`3·T·D`) and statistics (`2·T`), twice, except that the first LayerNorm's
    ///   input and statistics (`T·D + 2·T`) count on the layer before the block (the block
    ///   before it, or the position embedding), since only a trained layer below makes autograd
    ///   keep them (a depth window's first block reads a frozen one); the attention's q, k, v, output and
    ///   log-sum-exp (`4·T·w + h·T`, the fused kernel keeps no T×T weights) and the projection's
    ///   input (`T·w`); GELU's input and `fc2`'s (`2·T·M`); with dropout, each mask (`2·T·D +
    ///   T·M`);
    /// - with decisions, the attention's explicit weights (the capped scores, their
    ///   exponentials, masked and normalised values, `4·h·T²`), the head-masked output (`T·w`),
    ///   the gated branches and the token decisions' input (`3·T·D`), on the block's first
    ///   tensor;
    /// - the position-embedding dropout's mask (`T·D`), on the class token;
    /// - the read-out: the class token's LayerNorm (`3·D + 2`) and the loss's log-probabilities.
    ///
    /// Within 5% of the heap growth measured across a training forward pass (`fl-models`'
    /// `job_memory` tests).
    fn activations(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        let (blocks, readouts) = self.layout_of_shapes(shapes);
        let exits = readouts - 1;
        let (t, d) = (self.tokens as f64, self.dims.hidden as f64);
        let dropout = if self.cfg.dropout > 0.0 { 1.0 } else { 0.0 };
        let head_dim = (self.dims.hidden / self.dims.heads) as f64;
        let mut out = vec![0.0; shapes.len()];
        out[0] = dropout * t * d;
        out[2] = (t - 1.0) * (self.input[0] * self.dims.patch * self.dims.patch) as f64;
        let decisions = if self.cfg.decisions.is_some() { 1.0 } else { 0.0 };
        for b in 0..blocks {
            let first = STEM + b * self.per_block();
            let width = shapes[first + 2][0] as f64;
            let neurons = shapes[first + 12][0] as f64;
            let below = if b == 0 { 1 } else { first - 1 };
            out[below] += t * d + 2.0 * t;
            out[first] = 5.0 * t * d
                + 2.0 * t
                + 5.0 * t * width
                + (width / head_dim) * t
                + 2.0 * t * neurons
                + dropout * (2.0 * t * d + t * neurons)
                + decisions * (4.0 * (width / head_dim) * t * t + t * width + 3.0 * t * d);
        }
        let readout = STEM + blocks * self.per_block() + READOUT * exits;
        out[readout] = 3.0 * d + 2.0;
        out[readout + 2] = shapes[readout + 2][0] as f64;
        out
    }
}

impl ModelFromConfig for Vit {
    type Config = VitConfig;

    fn validate(config: &VitConfig) -> std::result::Result<(), InvalidKey> {
        config.validate()
    }

    fn from_config(config: VitConfig, spec: &DataSpec) -> Result<Self> {
        Vit::new(config, spec)
    }
}

fl_core::register!(Model "vit" => Vit,
    summary: "Vision Transformer (class token, pre-norm blocks; heads and MLP neurons as unit groups; presets tiny512, base, base-ext, small28, small32)",
    paper: "Dosovitskiy et al., An Image is Worth 16x16 Words, ICLR 2021; Co-S²P's Table 4 sizes");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_grads_flow, input, labels, noise};
    use fl_core::forward_one;
    use rand::SeedableRng;
    use tch::Kind;

    fn spec(shape: &[i64], classes: i64) -> DataSpec {
        DataSpec { input_shape: shape.to_vec(), classes, vocab_size: None }
    }

    fn vit(cfg: VitConfig, shape: &[i64], classes: i64) -> Vit {
        Vit::new(cfg, &spec(shape, classes)).unwrap()
    }

    /// A 4-block ViT with D 16, MLP 24, 4 heads of 4 and 4×4 patches on 3×8×8 images (5 tokens).
    fn small(dropout: f64) -> Vit {
        let cfg = VitConfig {
            depth: Some(4),
            hidden: Some(16),
            mlp: Some(24),
            heads: Some(4),
            patch: Some(4),
            dropout,
            ..VitConfig::default()
        };
        vit(cfg, &[3, 8, 8], 3)
    }

    /// Random parameters with the scale of a trained model (timm's init makes attention
    /// nearly uniform, which would hide a mistake in it).
    fn params(m: &Vit, seed: u64) -> Vec<Tensor> {
        m.structure().shapes().iter().enumerate().map(|(i, s)| input(s, seed + i as u64) * 0.5).collect()
    }

    /// The single-model ViT written with libtorch's own layers (convolution, LayerNorm with its
    /// affine pair, attention through an explicit softmax), in evaluation mode.
    fn reference(m: &Vit, t: &[Tensor], x: &Tensor) -> Tensor {
        let d = m.dims();
        let hd = d.hidden / d.heads;
        let patches = x.conv2d(&t[2], Some(&t[3]), [d.patch, d.patch], [0, 0], [1, 1], 1); // [B, D, gh, gw]
        let b = x.size()[0];
        let tokens = patches.flatten(2, -1).transpose(1, 2);
        let cls = t[0].expand([b, 1, d.hidden], false);
        let mut h = Tensor::cat(&[cls, tokens], 1) + &t[1];
        let ln = |x: &Tensor, w: &Tensor, bias: &Tensor| x.layer_norm([d.hidden], Some(w), Some(bias), 1e-6, false);
        for i in 0..d.depth as usize {
            let p = &t[STEM + i * PER_BLOCK..STEM + (i + 1) * PER_BLOCK];
            let a = ln(&h, &p[0], &p[1]);
            let heads_of = |y: Tensor| y.reshape([b, -1, d.heads, hd]).transpose(1, 2);
            let q = heads_of(a.linear(&p[2], Some(&p[3])));
            let k = heads_of(a.linear(&p[4], Some(&p[5])));
            let v = heads_of(a.linear(&p[6], Some(&p[7])));
            let weights = (q.matmul(&k.transpose(2, 3)) / (hd as f64).sqrt()).softmax(-1, Kind::Float);
            let attended = weights.matmul(&v).transpose(1, 2).reshape([b, -1, d.hidden]);
            h = &h + attended.linear(&p[8], Some(&p[9]));
            let f = ln(&h, &p[10], &p[11]).linear(&p[12], Some(&p[13])).gelu("none");
            h = &h + f.linear(&p[14], Some(&p[15]));
        }
        let n = t.len();
        ln(&h, &t[n - 4], &t[n - 3]).select(1, 0).linear(&t[n - 2], Some(&t[n - 1]))
    }

    #[test]
    fn parameter_counts_match_co_s2p_table_4() {
        let imagenet = [3, 224, 224];
        let count = |preset, classes| {
            vit(VitConfig { preset, ..VitConfig::default() }, &imagenet, classes).structure().num_params()
        };
        // A block of D 512, MLP 2048: 4·512² + 4·512 (attention) + 2·512·2048 + 2048 + 512 (MLP)
        // + 4·512 (LayerNorms) = 3,152,384 (the spec's 3.152 M); 8 of them, plus the patch
        // projection 512·768 + 512, the class token 512, 197·512 position embeddings, the final
        // LayerNorm 1024 and a 200-class head 200·512 + 200: 25,817,800 (the spec's ≈ 25.8 M).
        assert_eq!(count(VitPreset::Tiny512, 200), 25_817_800);
        // ViT-B/16 with 300 classes: 12 · 7,087,872 + 590,592 + 768 + 151,296 + 1,536 + 230,700.
        assert_eq!(count(VitPreset::Base, 300), 86_029_356);
        // ViT-Base(Ext.): four more blocks of 7,087,872 (the spec's ≈ 114.4 M).
        assert_eq!(count(VitPreset::BaseExt, 300), 114_380_844);
        // small-28 on Fashion-MNIST: 8 blocks of 198,272, patches 128·49 + 128, 17 tokens.
        assert_eq!(vit(VitConfig::default(), &[1, 28, 28], 10).structure().num_params(), 1_596_426);
    }

    #[test]
    fn block_flops_follow_co_s2ps_formula() {
        // The weights of one block cost 24·T·D² + 4·T²·D (T = 197, D = 768 for ViT-B/16, the
        // spec's 2.91 GFLOP); the biases add T per output feature: 197 · (4·768 + 3072 + 768).
        let m = vit(VitConfig { preset: VitPreset::Base, ..VitConfig::default() }, &[3, 224, 224], 300);
        let f = m.flops_per_tensor(&m.structure().shapes());
        let (t, d) = (197.0, 768.0);
        let block = &f[STEM..STEM + PER_BLOCK];
        let weights: f64 = block.iter().step_by(2).sum();
        assert_eq!(weights, 24.0 * t * d * d + 4.0 * t * t * d);
        let biases: f64 = block.iter().skip(1).step_by(2).sum();
        assert_eq!(biases, t * (4.0 * d + 4.0 * d + d));
        // The stem: 196 patches through a 768×3×16×16 projection; the head once per sample.
        assert_eq!(f[2], 2.0 * 768.0 * 768.0 * 196.0);
        assert_eq!(f[f.len() - 2], 2.0 * 300.0 * 768.0);
        // Half the heads halve a block's attention and its q, k, v and proj products.
        let mask = m.structure().width_prefix_mask(0.5).unwrap();
        let half = m.flops_per_tensor(&mask.sub_shapes(&m.structure().shapes()));
        let half_attention: f64 = half[STEM..STEM + 10].iter().step_by(2).sum();
        assert_eq!(half_attention, (8.0 * t * d * d + 4.0 * t * t * d) / 2.0);
    }

    #[test]
    fn forward_equals_libtorchs_own_layers() {
        let m = small(0.0);
        let t = params(&m, 1);
        let x = input(&[5, 3, 8, 8], 100);
        let got = forward_one(&m, &t, &x, &mut Mode::Eval);
        assert_eq!(got.size(), [5, 3]);
        let want = reference(&m, &t, &x);
        assert!(got.allclose(&want, 1e-4, 1e-5, false), "max diff {}", (&got - &want).abs().max());
    }

    #[test]
    fn a_cohort_computes_each_clients_own_logits_and_gradients() {
        let m = small(0.3);
        let per_client: Vec<Vec<Tensor>> = (0..3).map(|c| params(&m, 10 * c)).collect();
        let stacked: Vec<Tensor> = (0..per_client[0].len())
            .map(|i| Tensor::stack(&per_client.iter().map(|p| p[i].shallow_clone()).collect::<Vec<_>>(), 0))
            .map(|t| t.set_requires_grad(true))
            .collect();
        let x = input(&[3, 4, 3, 8, 8], 7);
        let streams = |c: u64| fl_core::rng::TensorNoise::new(50 + c);
        let mut all_noise = fl_core::rng::CohortNoise::new((0..3).map(streams).collect(), tch::Device::Cpu);
        let all = m.forward(&stacked, &x, &mut Mode::train(&mut all_noise));
        all.sum(Kind::Float).backward();
        for c in 0..3i64 {
            let alone: Vec<Tensor> =
                per_client[c as usize].iter().map(|t| t.unsqueeze(0).set_requires_grad(true)).collect();
            let mut one = fl_core::rng::CohortNoise::new(vec![streams(c as u64)], tch::Device::Cpu);
            let y = m.forward(&alone, &x.narrow(0, c, 1), &mut Mode::train(&mut one));
            assert!(y.get(0).allclose(&all.get(c), 1e-5, 1e-6, false), "client {c}: logits");
            y.sum(Kind::Float).backward();
            for (i, (a, s)) in alone.iter().zip(&stacked).enumerate() {
                assert!(a.grad().get(0).allclose(&s.grad().get(c), 1e-4, 1e-6, false), "client {c}, tensor {i}");
            }
        }
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_heads_and_neurons_zeroed() {
        // Arbitrary kept heads and neurons per block: if a unit group tied the wrong rows and
        // columns together, the two forwards would disagree.
        let m = small(0.0);
        let p = ParamSet::new(m.structure().names(), params(&m, 3)).unwrap();
        let kept: Vec<Option<Vec<i64>>> = (0..4)
            .flat_map(|b| [Some(vec![(b + 1) % 4, 3 - b % 2]), if b == 2 { None } else { Some(vec![0, 5, 7 + b, 23]) }])
            .map(|k| {
                k.map(|mut v| {
                    v.sort();
                    v.dedup();
                    v
                })
            })
            .collect();
        let mask = m.structure().mask_from_units(&kept).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.tensors()[STEM + 2].size(), [8, 16], "two heads of 4 rows");
        assert_eq!(sub.tensors()[STEM + 12].size(), [4, 16], "four MLP neurons");
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = input(&[6, 3, 8, 8], 4);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false), "max diff {}", (&a - &b).abs().max());
        // The sub-model costs what its shapes say: two of four heads in block 0.
        let f = m.flops_per_tensor(&mask.sub_shapes(&m.structure().shapes()));
        assert_eq!(f[STEM + 2], 2.0 * 8.0 * 16.0 * 5.0 + 4.0 * 25.0 * 8.0);
    }

    /// `small` with early exits after one and two of its four blocks.
    fn small_with_exits() -> Vit {
        let cfg = VitConfig { exits: vec![1, 2], ..small(0.0).cfg.clone() };
        vit(cfg, &[3, 8, 8], 3)
    }

    #[test]
    fn the_full_models_forward_skips_its_early_exits() {
        let m = small_with_exits();
        assert_eq!(m.structure().blocks(), 4);
        assert_eq!(m.structure().exits(), [1, 2]);
        let t = params(&m, 12);
        let names = m.structure().names();
        // The tensors of the model without exits: the same forward, read by the reference.
        let kept: Vec<Tensor> =
            names.iter().zip(&t).filter(|(n, _)| !n.starts_with("exits.")).map(|(_, t)| t.shallow_clone()).collect();
        let x = input(&[5, 3, 8, 8], 13);
        let got = forward_one(&m, &t, &x, &mut Mode::Eval);
        let want = reference(&small(0.0), &kept, &x);
        assert!(got.allclose(&want, 1e-4, 1e-5, false), "max diff {}", (&got - &want).abs().max());
    }

    #[test]
    fn a_depth_window_runs_the_blocks_below_its_top_and_reads_out_through_that_exit() {
        let m = small_with_exits();
        let p = ParamSet::new(m.structure().names(), params(&m, 14)).unwrap();
        // Window 1..2 with heads {1} and neurons {0, 3, 5} in every block it holds.
        let kept: Vec<Option<Vec<i64>>> = (0..4).flat_map(|_| [Some(vec![1]), Some(vec![0, 3, 5])]).collect();
        let mask = m.structure().submodel(1..2, &kept).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.len(), STEM + 2 * PER_BLOCK + READOUT);
        assert!(sub.names()[sub.len() - 4].starts_with("exits.2.norm"));
        // What the window computes: a two-block ViT without exits (libtorch's own layers) on the
        // same tensors, the dropped heads and neurons zeroed at full width.
        let two = vit(VitConfig { depth: Some(2), exits: vec![], ..m.cfg.clone() }, &[3, 8, 8], 3);
        let x = input(&[4, 3, 8, 8], 15);
        let got = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let want = reference(&two, &sub_as_full(&two, &sub), &x);
        assert!(got.allclose(&want, 1e-4, 1e-5, false), "max diff {}", (&got - &want).abs().max());
        // Its FLOPs: the stem, two blocks of one head and three neurons, the exit's head once.
        let f = m.flops_per_tensor(&mask.sub_shapes(&m.structure().shapes()));
        let (t, d) = (5.0, 16.0);
        let block = 3.0 * (2.0 * 4.0 * d * t + 4.0 * t)
            + 4.0 * t * t * 4.0
            + (2.0 * d * 4.0 + d) * t
            + (2.0 * 3.0 * d + 3.0) * t
            + (2.0 * d * 3.0 + d) * t;
        let stem = 2.0 * d * 48.0 * 4.0 + d * 4.0;
        let head = 2.0 * 3.0 * d + 3.0;
        assert_eq!(f.iter().sum::<f64>(), stem + 2.0 * block + head);
    }

    #[test]
    fn a_window_with_inner_exits_reads_out_after_each_depth() {
        let m = small_with_exits();
        let p = ParamSet::new(m.structure().names(), params(&m, 21)).unwrap();
        // The window 0..2 holding the exit after one block too: stem, blocks 0 and 1, exits 1, 2.
        let mask = m.structure().submodel_with_exits(0..2, &[1], &vec![None; 8]).unwrap();
        let sub = mask.extract(&p);
        let depths = m.structure().readouts(sub.names());
        assert_eq!(depths, [1, 2]);
        let x = input(&[3, 3, 8, 8], 22);
        let stacked: Vec<Tensor> = sub.tensors().iter().map(|t| t.unsqueeze(0)).collect();
        let outs = m.forward_exits(&stacked, &x.unsqueeze(0), &mut Mode::Eval, &depths);
        // The deepest read-out is the sub-model's forward pass; the other, a one-block ViT's.
        let deepest = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        assert!(outs[1].squeeze_dim(0).allclose(&deepest, 1e-6, 1e-6, false));
        let one = vit(VitConfig { depth: Some(1), exits: vec![], ..m.cfg.clone() }, &[3, 8, 8], 3);
        let names = sub.names();
        let pick: Vec<Tensor> = names
            .iter()
            .zip(sub.tensors())
            .filter(|(n, _)| !n.starts_with("blocks.1.") && !n.starts_with("exits.2."))
            .map(|(_, t)| t.shallow_clone())
            .collect();
        let shallow = reference(&one, &pick, &x);
        assert!(
            outs[0].squeeze_dim(0).allclose(&shallow, 1e-4, 1e-5, false),
            "max diff {}",
            (&outs[0].squeeze_dim(0) - &shallow).abs().max()
        );
    }

    /// The window sub-model's tensors (narrowed) placed back at full width in the layout of
    /// `two`, a model of the window's depth without exits.
    fn sub_as_full(two: &Vit, sub: &ParamSet) -> Vec<Tensor> {
        let kept: Vec<Option<Vec<i64>>> = (0..2).flat_map(|_| [Some(vec![1]), Some(vec![0, 3, 5])]).collect();
        let mask = two.structure().mask_from_units(&kept).unwrap();
        let renamed =
            ParamSet::new(two.structure().names(), sub.tensors().iter().map(Tensor::shallow_clone).collect()).unwrap();
        mask.scatter(&renamed, &two.structure().shapes()).into_tensors()
    }

    #[test]
    fn gradients_reach_every_tensor_of_full_and_sub_models() {
        let m = small(0.1);
        let p = ParamSet::new(m.structure().names(), params(&m, 5)).unwrap();
        let x = input(&[8, 3, 8, 8], 6);
        assert_grads_flow(&m, p.tensors(), &x, &labels(8, 3));
        let sub = m.structure().width_prefix_mask(0.5).unwrap().extract(&p);
        assert_grads_flow(&m, sub.tensors(), &x, &labels(8, 3));
    }

    #[test]
    fn init_follows_timm() {
        let m = vit(VitConfig::default(), &[1, 28, 28], 10);
        let p = m.init(&mut Rng::seed_from_u64(2));
        let t = p.tensors();
        let std = |t: &Tensor| t.to_kind(Kind::Double).std(true).double_value(&[]);
        assert!(std(&t[0]) < 1e-5, "class token ~ N(0, 1e-12)");
        assert!((std(&t[1]) - 0.02).abs() < 0.002, "position embedding std {}", std(&t[1]));
        // The patch projection keeps PyTorch's default: U(±1/√49).
        crate::testing::assert_default_init(&t[2], 49);
        let q = STEM + 2;
        assert!((std(&t[q]) - 0.02).abs() < 0.001, "q weight std {}", std(&t[q]));
        assert_eq!(t[q + 1].abs().sum(Kind::Float).double_value(&[]), 0.0, "zero biases");
        assert!(t[STEM].eq(1.0).all().int64_value(&[]) == 1, "LayerNorm weight 1");
        assert!(p.equal(&m.init(&mut Rng::seed_from_u64(2))));
    }

    #[test]
    fn dropout_draws_from_the_clients_stream_and_is_off_in_eval() {
        let m = small(0.5);
        let t = params(&m, 8);
        let x = input(&[4, 3, 8, 8], 9);
        let train = |seed| forward_one(&m, &t, &x, &mut Mode::train(&mut noise(seed)));
        assert!(train(1).equal(&train(1)));
        assert!(!train(1).allclose(&train(2), 1e-3, 1e-3, false));
        let eval = forward_one(&m, &t, &x, &mut Mode::Eval);
        assert!(eval.allclose(&reference(&m, &t, &x), 1e-4, 1e-5, false), "eval ignores dropout");
    }

    #[test]
    fn bad_configs_and_inputs_name_what_is_wrong() {
        let bad = |cfg: VitConfig| cfg.validate().unwrap_err().key;
        assert_eq!(bad(VitConfig { heads: Some(3), ..VitConfig::default() }), "heads");
        assert_eq!(bad(VitConfig { depth: Some(0), ..VitConfig::default() }), "depth");
        assert_eq!(bad(VitConfig { dropout: 1.0, ..VitConfig::default() }), "dropout");
        let err = Vit::new(VitConfig { patch: Some(5), ..VitConfig::default() }, &spec(&[1, 28, 28], 10)).unwrap_err();
        assert!(err.to_string().contains("multiples of the patch side"), "{err}");
        let err = Vit::new(VitConfig::default(), &spec(&[784], 10)).unwrap_err();
        assert!(err.to_string().contains("[channels, H, W]"), "{err}");
        let toml = "preset = \"base\"\ndepth = 16\n";
        let cfg: VitConfig = toml::from_str(toml).unwrap();
        assert_eq!(cfg.dims(), VitDims { depth: 16, hidden: 768, mlp: 3072, heads: 12, patch: 16 });
        assert!(toml::from_str::<VitConfig>("preset = \"huge\"").is_err());
    }
}
