//! `textcnn`: Kim's convolutional sentence classifier, the FedASMU IMDb model.
//!
//! Y. Kim, "Convolutional Neural Networks for Sentence Classification", EMNLP 2014
//! (arXiv:1408.5882); used on IMDb by J. Jia, J. Liu et al., "Efficient Federated Learning
//! with Timely Update Dissemination" (FedASMU, arXiv:2507.06031), after Zhou et al.'s
//! "Distilled One-Shot Federated Learning", without its hyper-parameters. These follow the
//! spec's recommendation ([rec], §4.1), Kim's CNN-rand:
//!
//! ```text
//! Embedding(V, dim = 100, padding_idx = 0) → for each width k in {3, 4, 5}: Conv1d(dim → 100, k)
//!   → ReLU → max over time → concatenate (300) → dropout 0.5 → Linear(300, classes)
//! ```
//!
//! `V` and the sequence length are the dataset's ([`fl_core::DataSpec::vocab_size`] and
//! `input_shape = [seq_len]`), as for `fasttext`; inputs are int64 token ids `[batch,
//! seq_len]` (`[C, B, seq_len]` for a cohort), id 0 being padding (and `<unk>`). The padding row
//! of the embedding starts at 0 and gets no gradient (PyTorch's `padding_idx`); padded
//! positions still enter the convolutions and the max, as in Kim's code, so `seq_len` must be
//! at least the widest filter. The embedding dimension, filter count, widths and dropout are
//! parameters. With V = 25,000, seq_len 256 and 2 classes the model has 2,620,902 parameters.
//! Logits out; the softmax is left to the loss. Dropout draws each client's mask from its own
//! noise stream ([`Mode::dropout`]), so a client's result is the same alone or in a cohort.
//!
//! Convolutions in cohort form: the embedded sequence becomes the grouped layout `[B, C·dim, 1,
//! seq_len]` and each width is one grouped 2-D convolution with a 1×k kernel
//! ([`cohort::conv2d`]). Weights are stored in `nn.Conv1d`'s layout `[filters, dim, k]`.
//!
//! **Feature order.** The pooled features are laid out filter-major, width-minor (feature
//! `3f + j` is filter `f` of the j-th width), not width-major as `torch.cat` would give. The
//! function is the same up to a permutation of `fc.weight`'s columns; the order lets a filter
//! index be one maskable unit: the unit groups are the embedding dimensions (a column of
//! `embedding.weight`, an input channel of every convolution) and the filters (a row and a bias
//! entry of every convolution, and `len(widths)` consecutive columns of `fc.weight`).
//!
//! Initialisation: PyTorch's defaults: the embedding N(0, 1) with row 0 zeroed, convolutions
//! and the linear layer U(±1/√fan_in) (fan-in `dim · k` and `filters · len(widths)`).
//!
//! FLOPs per sample follow [`crate::flops`]: the lookup costs nothing; a width-k convolution's
//! weight costs `2 · filters · dim · k` and its bias `filters` at each of its `seq_len − k + 1`
//! positions; the linear layer `2 · in · classes + classes`. ReLU, max and dropout are not
//! counted. About 60.8 MFLOP per 256-token sample.

use fl_core::rng::Rng;
use fl_core::{DataSpec, InvalidKey, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result, Structure};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;
use tch::Tensor;

use crate::cohort;
use crate::layout::{Cursor, Layout};

/// The model's registered name, which its errors begin with.
const NAME: &str = "textcnn";

/// The token id whose embedding row is zero and receives no gradient (padding and `<unk>`).
pub const PADDING_IDX: i64 = 0;

/// Parameters of the `textcnn` component.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TextCnnConfig {
    /// Embedding dimension, at least 1.
    #[default(100)]
    pub dim: i64,
    /// Filters per width, at least 1.
    #[default(100)]
    pub filters: i64,
    /// Filter widths in tokens, each at least 1; at least one.
    #[default(vec![3, 4, 5])]
    pub widths: Vec<i64>,
    /// Dropout probability on the pooled features, in [0, 1); 0 disables it.
    #[default(0.5)]
    pub dropout: f64,
}

impl TextCnnConfig {
    /// Checks the sizes and the dropout probability; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.dim < 1 {
            return Err(InvalidKey::new("dim", format!("must be at least 1, got {}", self.dim)));
        }
        if self.filters < 1 {
            return Err(InvalidKey::new("filters", format!("must be at least 1, got {}", self.filters)));
        }
        if self.widths.is_empty() || self.widths.iter().any(|&k| k < 1) {
            return Err(InvalidKey::new(
                "widths",
                format!("must be one or more widths, each at least 1, got {:?}", self.widths),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(InvalidKey::new("dropout", format!("must be in [0, 1), got {}", self.dropout)));
        }
        Ok(())
    }
}

/// The TextCNN; see the module documentation.
#[derive(Debug)]
pub struct TextCnn {
    cfg: TextCnnConfig,
    layout: Layout,
    structure: Structure,
}

impl TextCnn {
    /// A TextCNN for token-id sequences `spec.input_shape = [seq_len]` over `spec.vocab_size`
    /// ids, with `spec.classes` outputs.
    pub fn new(cfg: TextCnnConfig, spec: &DataSpec) -> Result<TextCnn> {
        cfg.validate().map_err(|key| ModelError::Config { model: NAME, key })?;
        let Some(vocab) = spec.vocab_size else {
            return Err(ModelError::NeedsTokenIds { model: NAME, found: spec.input_shape.clone() }.into());
        };
        if vocab < 1 {
            return Err(ModelError::EmptyVocabulary { model: NAME, vocab_size: vocab }.into());
        }
        let unsupported = |expected| ModelError::InputShape { model: NAME, expected, found: spec.input_shape.clone() };
        let &[seq_len] = spec.input_shape.as_slice() else {
            return Err(unsupported("[seq_len]").into());
        };
        let widest = cfg.widths.iter().copied().max().unwrap_or(1);
        if seq_len < widest {
            return Err(unsupported("[seq_len] with seq_len at least the widest filter").into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: NAME, classes: spec.classes }.into());
        }
        let (dim, filters) = (cfg.dim, cfg.filters);
        let mut l = Layout::default();
        let embedding = l.embedding("embedding", vocab, dim, PADDING_IDX);
        let convs: Vec<usize> = cfg
            .widths
            .iter()
            .enumerate()
            .map(|(i, &k)| l.conv1d(&format!("convs.{i}"), filters, dim, k, seq_len - k + 1))
            .collect();
        let n = cfg.widths.len() as i64;
        let fc = l.linear("fc", spec.classes, filters * n);
        let mut members = vec![(embedding, 1, 1)];
        members.extend(convs.iter().map(|&c| (c, 1, 1)));
        l.group("embedding", dim, &members);
        let mut members: Vec<(usize, usize, i64)> = convs.iter().flat_map(|&c| [(c, 0, 1), (c + 1, 0, 1)]).collect();
        members.push((fc, 1, n));
        l.group("filters", filters, &members);
        Ok(TextCnn { cfg, structure: l.structure(), layout: l })
    }

    pub fn config(&self) -> &TextCnnConfig {
        &self.cfg
    }
}

impl Model for TextCnn {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        self.layout.init(rng)
    }

    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let mut p = Cursor::new(NAME, body, self.structure.tensors.len() - 2);
        // `[C, B, L, dim]` → the grouped layout `[B, C·dim, 1, L]`.
        let embedded = cohort::embedding(p.next(), x, PADDING_IDX);
        let [c, b, len, dim] = embedded.size()[..] else {
            panic!("textcnn forward: expected token ids [C, B, seq_len], got {:?}", x.size())
        };
        let grouped = embedded.permute([1, 0, 3, 2]).reshape([b, c * dim, 1, len]);
        let pooled: Vec<Tensor> = self
            .cfg
            .widths
            .iter()
            .map(|_| {
                let (weight, bias) = p.pair();
                let y = cohort::conv2d(&grouped, &weight.unsqueeze(3), bias, 1, 0).relu();
                // Max over time: `[B, C·filters, 1, L − k + 1]` → `[C, B, filters]`.
                y.amax([2i64, 3].as_slice(), false).reshape([b, c, -1]).transpose(0, 1)
            })
            .collect();
        // Filter-major features `[C, B, filters · widths]` (see the module documentation).
        let features = Tensor::stack(&pooled, -1).flatten(2, -1);
        mode.dropout(&features, self.cfg.dropout)
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        self.layout.flops(NAME, shapes)
    }
}

impl ModelFromConfig for TextCnn {
    type Config = TextCnnConfig;

    fn validate(config: &TextCnnConfig) -> std::result::Result<(), InvalidKey> {
        config.validate()
    }

    fn from_config(config: TextCnnConfig, spec: &DataSpec) -> Result<Self> {
        TextCnn::new(config, spec)
    }
}

fl_core::register!(Model "textcnn" => TextCnn,
    summary: "TextCNN: embedding 100 (padding id 0), conv widths 3/4/5 x 100 filters, ReLU, max over time, dropout 0.5, fc-classes",
    paper: "Kim, Convolutional Neural Networks for Sentence Classification, EMNLP 2014 (FedASMU's IMDb model, arXiv:2507.06031)");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_default_init, input, noise};
    use fl_core::forward_one;
    use rand::SeedableRng;
    use tch::Kind;

    fn spec(vocab: i64, seq_len: i64, classes: i64) -> DataSpec {
        DataSpec { input_shape: vec![seq_len], classes, vocab_size: Some(vocab) }
    }

    fn small(dropout: f64) -> TextCnn {
        TextCnn::new(TextCnnConfig { dim: 8, filters: 6, widths: vec![2, 3], dropout }, &spec(30, 9, 3)).unwrap()
    }

    /// Token ids in `[0, vocab)` of `shape`, about a quarter of them padding.
    fn ids(shape: &[i64], vocab: i64, seed: u64) -> Tensor {
        let u = (input(shape, seed) + 1.0) / 2.0;
        let id = (&u * (vocab - 1) as f64).to_kind(Kind::Int64) + 1;
        id.where_self(&u.ge(0.25), &id.zeros_like())
    }

    #[test]
    fn structure_and_parameter_counts_match_the_hand_count() {
        let m = TextCnn::new(TextCnnConfig::default(), &spec(25_000, 256, 2)).unwrap();
        let s = m.structure();
        assert_eq!(
            s.names(),
            [
                "embedding.weight",
                "convs.0.weight",
                "convs.0.bias",
                "convs.1.weight",
                "convs.1.bias",
                "convs.2.weight",
                "convs.2.bias",
                "fc.weight",
                "fc.bias"
            ]
        );
        assert_eq!(s.shapes()[3], [100, 100, 4]);
        assert_eq!(s.shapes()[7], [2, 300]);
        // Embedding 25,000·100 = 2,500,000; convolutions 100·100·3 + 100 = 30,100,
        // 100·100·4 + 100 = 40,100, 100·100·5 + 100 = 50,100; fc 2·300 + 2 = 602: 2,620,902.
        assert_eq!(s.num_params(), 2_620_902);
        let groups: Vec<(&str, i64, usize)> =
            s.groups.iter().map(|g| (g.name.as_str(), g.units, g.members.len())).collect();
        assert_eq!(groups, [("embedding", 100, 4), ("filters", 100, 7)]);
        assert_eq!(s.groups[1].members[6], fl_core::UnitMember { tensor: 7, dim: 1, block: 3 });
    }

    #[test]
    fn flops_per_sample_match_the_hand_count() {
        let m = TextCnn::new(TextCnnConfig::default(), &spec(25_000, 256, 2)).unwrap();
        // Width 3 at 254 positions: 2·100·100·3·254 = 15,240,000, bias 100·254 = 25,400;
        // width 4 at 253: 20,240,000 and 25,300; width 5 at 252: 25,200,000 and 25,200;
        // fc 2·300·2 = 1,200 and 2; the lookup 0.
        let want = [0.0, 15_240_000.0, 25_400.0, 20_240_000.0, 25_300.0, 25_200_000.0, 25_200.0, 1_200.0, 2.0];
        assert_eq!(m.flops_per_tensor(&m.structure().shapes()), want);
        assert_eq!(m.forward_flops(&m.structure().shapes()), 60_757_102.0);
    }

    #[test]
    fn init_is_pytorch_default_with_a_zero_padding_row() {
        let m = TextCnn::new(TextCnnConfig::default(), &spec(2_000, 64, 2)).unwrap();
        let p = m.init(&mut Rng::seed_from_u64(3));
        assert_eq!(p.shapes(), m.structure().shapes());
        let emb = &p.tensors()[0];
        assert_eq!(emb.get(0).abs().sum(Kind::Double).double_value(&[]), 0.0);
        let rest = emb.narrow(0, 1, 1_999).to_kind(Kind::Double);
        assert!((rest.std(true).double_value(&[]) - 1.0).abs() < 0.03);
        for (i, fan) in [300, 300, 400, 400, 500, 500, 300, 300].into_iter().enumerate() {
            assert_default_init(&p.tensors()[i + 1], fan);
        }
    }

    #[test]
    fn forward_equals_kims_network_written_out() {
        let m = small(0.5);
        let p = m.init(&mut Rng::seed_from_u64(4));
        let t = p.tensors();
        let x = ids(&[5, 9], 30, 1);
        // Embedding → [B, dim, L] → Conv1d → ReLU → max over time → torch.cat (width-major).
        let e = Tensor::embedding(&t[0], &x, 0, false, false).transpose(1, 2);
        let pooled: Vec<Tensor> = [1, 3]
            .iter()
            .map(|&i| e.conv1d(&t[i], Some(&t[i + 1]), [1], [0], [1], 1).relu().amax([2i64].as_slice(), false))
            .collect();
        let cat = Tensor::cat(&pooled, 1);
        // Our fc column 2f + j is torch.cat's column 6j + f.
        let perm: Vec<i64> = (0..12).map(|col| (col % 2) * 6 + col / 2).collect();
        let mut w_cat = Tensor::zeros([3, 12], (Kind::Float, tch::Device::Cpu));
        let _ = w_cat.index_copy_(1, &Tensor::from_slice(&perm), &t[5]);
        let want = cat.matmul(&w_cat.tr()) + &t[6];
        let got = forward_one(&m, t, &x, &mut Mode::Eval);
        assert_eq!(got.size(), [5, 3]);
        assert!(got.allclose(&want, 1e-5, 1e-6, false), "{got} {want}");
        // Dropout acts in training mode only.
        assert!(!forward_one(&m, t, &x, &mut Mode::train(&mut noise(1))).allclose(&want, 1e-5, 1e-6, false));
        assert!(forward_one(&small(0.0), t, &x, &mut Mode::train(&mut noise(1))).allclose(&want, 1e-5, 1e-6, false));
    }

    #[test]
    fn gradients_reach_every_tensor_and_never_the_padding_row() {
        let m = small(0.5);
        let p = m.init(&mut Rng::seed_from_u64(5));
        let params: Vec<Tensor> = p.tensors().iter().map(|t| t.detach().copy().set_requires_grad(true)).collect();
        let x = ids(&[16, 9], 30, 2);
        let y = Tensor::arange(16, (Kind::Int64, tch::Device::Cpu)).remainder(3);
        forward_one(&m, &params, &x, &mut Mode::train(&mut noise(3))).cross_entropy_for_logits(&y).backward();
        for (i, t) in params.iter().enumerate() {
            let g = t.grad();
            assert!(g.defined() && g.isfinite().all().int64_value(&[]) == 1, "tensor {i}");
            assert!(g.abs().sum(Kind::Double).double_value(&[]) > 0.0, "tensor {i}: zero gradient");
        }
        assert_eq!(params[0].grad().get(0).abs().sum(Kind::Double).double_value(&[]), 0.0, "padding row");
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        let m = small(0.5);
        let p = m.init(&mut Rng::seed_from_u64(6));
        let mask = m.structure().mask_from_units(&[Some(vec![0, 2, 3, 7]), Some(vec![1, 4, 5])]).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.shapes()[1], [3, 4, 2]);
        assert_eq!(sub.shapes()[5], [3, 6]);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = ids(&[4, 9], 30, 3);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
    }

    #[test]
    fn bad_inputs_and_config_are_errors_naming_the_model() {
        let image = DataSpec { input_shape: vec![3, 32, 32], classes: 10, vocab_size: None };
        let err = TextCnn::new(TextCnnConfig::default(), &image).unwrap_err().to_string();
        assert!(err.contains("textcnn needs token-id inputs"), "{err}");
        let err = TextCnn::new(TextCnnConfig::default(), &spec(100, 4, 2)).unwrap_err().to_string();
        assert!(err.contains("textcnn") && err.contains("[4]") && err.contains("widest"), "{err}");
        assert_eq!(TextCnnConfig { widths: vec![], ..TextCnnConfig::default() }.validate().unwrap_err().key, "widths");
        assert_eq!(TextCnnConfig { dropout: -0.1, ..TextCnnConfig::default() }.validate().unwrap_err().key, "dropout");
        assert_eq!(TextCnnConfig { filters: 0, ..TextCnnConfig::default() }.validate().unwrap_err().key, "filters");
    }
}
