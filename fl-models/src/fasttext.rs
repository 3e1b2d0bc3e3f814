//! `fasttext`: the fastText-style text classifier of the KDD '23 RA-Fed experiments.
//!
//! Follows Joulin, Grave, Bojanowski and Mikolov, "Bag of Tricks for Efficient Text
//! Classification", EACL 2017 (arXiv:1607.01759), in the form of the KDD '23 code (Wang et
//! al., doi 10.1145/3580305.3599521; PFLlib's `fastText`, the model the paper's §6.1 names for AG News):
//!
//! ```text
//! Embedding(V, dim, padding_idx = 0) → mean over all seq_len positions (padding included)
//!   → Linear(dim, hidden) (no activation) → Linear(hidden, classes) → log_softmax
//! ```
//!
//! `V` is the dataset's vocabulary size ([`fl_core::DataSpec::vocab_size`]); inputs are int64
//! token ids `[batch, seq_len]`. With V = 98,635, dim = hidden = 128 and 4 classes (AG News)
//! the model has 12,642,308 parameters.
//!
//! **Output.** `forward` returns `log_softmax` of the logits, as the paper's model does. The
//! trainers apply cross-entropy (itself a log-softmax and NLL) to it, which is what the paper
//! does too; since log_softmax is idempotent, loss, gradients and argmax are those of the raw
//! logits.
//!
//! **Padding.** Id 0 is both padding and `<unk>` (PFLlib's pipeline). Its embedding row starts
//! at 0 and, as with PyTorch's `padding_idx`, receives no gradient, so it stays 0 under plain
//! SGD; the mean still divides by `seq_len`, padding included, as the paper's model does.
//!
//! Tensors: `embedding.weight` `[V, dim]`, `fc1.weight` `[hidden, dim]`, `fc1.bias`,
//! `fc2.weight` `[classes, hidden]`, `fc2.bias` (the names the KDD '23 mask policy uses: it
//! masks `embedding.weight` and `fc1.weight`). Unit groups: the embedding dimensions (a column
//! of `embedding.weight` and of `fc1.weight`) and fc1's neurons (a row of `fc1.weight`, an entry
//! of `fc1.bias`, a column of `fc2.weight`). `forward` reads every width from the tensors, so a
//! structured sub-model runs as is.
//!
//! Initialisation: PyTorch's defaults ([`crate::init`]): the embedding N(0, 1) with row 0 set
//! to 0, the linear layers U(±1/√fan_in).
//!
//! FLOPs per sample, following [`crate::flops`]: the embedding lookup is a gather (no FLOPs);
//! the mean costs `seq_len · dim` (`(seq_len − 1) · dim` additions and `dim` divisions), charged
//! to `embedding.weight`; the linear layers cost `2 · in · out` for the weight and `out` for the
//! bias. The log_softmax is not counted.

use fl_core::rng::Rng;
use fl_core::{DataSpec, InvalidKey, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result};
use fl_core::{Structure, TensorSpec, UnitGroup, UnitMember};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;
use tch::Tensor;

use crate::{cohort, flops, init};

/// The model's registered name, which its errors begin with.
const NAME: &str = "fasttext";

/// The token id whose embedding row is zero and receives no gradient (padding and `<unk>`).
pub const PADDING_IDX: i64 = 0;

/// Parameters of the `fasttext` component.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FastTextConfig {
    /// Embedding dimension, at least 1.
    #[default(128)]
    pub dim: i64,
    /// Width of the hidden linear layer, at least 1.
    #[default(128)]
    pub hidden: i64,
}

impl FastTextConfig {
    /// Checks the widths; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.dim < 1 {
            return Err(InvalidKey::new("dim", format!("must be at least 1, got {}", self.dim)));
        }
        if self.hidden < 1 {
            return Err(InvalidKey::new("hidden", format!("must be at least 1, got {}", self.hidden)));
        }
        Ok(())
    }
}

/// The fastText classifier; see the module documentation.
#[derive(Debug)]
pub struct FastText {
    cfg: FastTextConfig,
    structure: Structure,
    /// Token ids per sample.
    seq_len: i64,
}

impl FastText {
    /// A fastText model for token-id sequences `spec.input_shape = [seq_len]` over
    /// `spec.vocab_size` ids, with `spec.classes` outputs.
    pub fn new(cfg: FastTextConfig, spec: &DataSpec) -> Result<FastText> {
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
        if seq_len < 1 {
            return Err(unsupported("[seq_len] with seq_len at least 1").into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: NAME, classes: spec.classes }.into());
        }
        let (dim, hidden, classes) = (cfg.dim, cfg.hidden, spec.classes);
        let t = |name: &str, shape: Vec<i64>| TensorSpec::new(name, shape);
        let tensors = vec![
            t("embedding.weight", vec![vocab, dim]),
            t("fc1.weight", vec![hidden, dim]),
            t("fc1.bias", vec![hidden]),
            t("fc2.weight", vec![classes, hidden]),
            t("fc2.bias", vec![classes]),
        ];
        let member = |tensor, dim| UnitMember { tensor, dim, block: 1 };
        let groups = vec![
            UnitGroup { name: "embedding".into(), units: dim, members: vec![member(0, 1), member(1, 1)] },
            UnitGroup { name: "fc1".into(), units: hidden, members: vec![member(1, 0), member(2, 0), member(3, 1)] },
        ];
        Ok(FastText { cfg, structure: Structure { tensors, groups }, seq_len })
    }

    pub fn config(&self) -> &FastTextConfig {
        &self.cfg
    }
}

impl Model for FastText {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        let shapes = self.structure.shapes();
        let linear_bound = |weight: &[i64]| 1.0 / (init::fan_in(weight) as f64).sqrt();
        let tensors = vec![
            init::embedding(rng, &shapes[0], Some(PADDING_IDX)),
            init::uniform(rng, &shapes[1], linear_bound(&shapes[1])),
            init::uniform(rng, &shapes[2], linear_bound(&shapes[1])),
            init::uniform(rng, &shapes[3], linear_bound(&shapes[3])),
            init::uniform(rng, &shapes[4], linear_bound(&shapes[3])),
        ];
        ParamSet::new(self.structure.names(), tensors).expect("one tensor per structure entry")
    }

    fn features(&self, body: &[Tensor], x: &Tensor, _mode: &mut Mode) -> Tensor {
        assert_eq!(body.len(), 3, "fasttext features: expected 3 tensors before the classifier, got {}", body.len());
        // PyTorch's `padding_idx`: the padding row's gradient is zero.
        let embedded = cohort::embedding(&body[0], x, PADDING_IDX);
        let mean = embedded.mean_dim(2, false, embedded.kind());
        cohort::linear(&mean, &body[1], &body[2])
    }

    /// The classifier's logits through `log_softmax`, as the paper's model outputs.
    fn forward(&self, params: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let (body, head) = fl_core::model::split_classifier(params);
        let logits = cohort::linear(&self.features(body, x, mode), &head[0], &head[1]);
        logits.log_softmax(-1, logits.kind())
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        shapes
            .iter()
            .enumerate()
            .map(|(i, s)| if i == 0 { (self.seq_len * s[1]) as f64 } else { flops::of_tensor(s, 1) })
            .collect()
    }
}

impl ModelFromConfig for FastText {
    type Config = FastTextConfig;

    fn validate(config: &FastTextConfig) -> std::result::Result<(), InvalidKey> {
        config.validate()
    }

    fn from_config(config: FastTextConfig, spec: &DataSpec) -> Result<Self> {
        FastText::new(config, spec)
    }
}

fl_core::register!(Model "fasttext" => FastText,
    summary: "fastText text classifier: embedding (padding id 0) → mean over positions → linear → linear → log_softmax",
    paper: "Joulin et al., Bag of Tricks for Efficient Text Classification, EACL 2017; Wang et al., KDD '23 (AG News model)");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::assert_default_init;
    use fl_core::forward_one;
    use rand::SeedableRng;
    use tch::Kind;

    fn spec(vocab: i64, seq_len: i64, classes: i64) -> DataSpec {
        DataSpec { input_shape: vec![seq_len], classes, vocab_size: Some(vocab) }
    }

    fn ids(rows: &[&[i64]]) -> Tensor {
        let flat: Vec<i64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_slice(&flat).view([rows.len() as i64, rows[0].len() as i64])
    }

    fn floats(values: &[f32], shape: &[i64]) -> Tensor {
        Tensor::from_slice(values).view(shape)
    }

    #[test]
    fn structure_names_shapes_and_groups() {
        let m = FastText::new(FastTextConfig { dim: 8, hidden: 6 }, &spec(50, 20, 4)).unwrap();
        let s = m.structure();
        assert_eq!(s.names(), ["embedding.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
        assert_eq!(s.shapes(), vec![vec![50, 8], vec![6, 8], vec![6], vec![4, 6], vec![4]]);
        let member = |tensor, dim| UnitMember { tensor, dim, block: 1 };
        assert_eq!(
            s.groups,
            vec![
                UnitGroup { name: "embedding".into(), units: 8, members: vec![member(0, 1), member(1, 1)] },
                UnitGroup { name: "fc1".into(), units: 6, members: vec![member(1, 0), member(2, 0), member(3, 1)] },
            ]
        );
    }

    #[test]
    fn parameter_count_matches_the_paper() {
        // 98,635·128 + 128·128 + 128 + 4·128 + 4 = 12,625,280 + 16,384 + 128 + 512 + 4 (the parameter count of the KDD '23 code's model).
        let m = FastText::new(FastTextConfig::default(), &spec(98_635, 200, 4)).unwrap();
        assert_eq!(m.structure().num_params(), 12_642_308);
    }

    #[test]
    fn flops_per_sample_match_the_hand_count() {
        let m = FastText::new(FastTextConfig::default(), &spec(98_635, 200, 4)).unwrap();
        // Mean: 200·128 = 25,600; fc1: 2·128·128 = 32,768 + 128; fc2: 2·128·4 = 1,024 + 4.
        let f = m.flops_per_tensor(&m.structure().shapes());
        assert_eq!(f, vec![25_600.0, 32_768.0, 128.0, 1_024.0, 4.0]);
        assert_eq!(m.forward_flops(&m.structure().shapes()), 59_524.0);
    }

    #[test]
    fn forward_matches_a_hand_computation() {
        // V = 4, dim = 2, hidden = 2, 2 classes, seq_len = 3.
        // Rows: e0 = [0, 0] (padding), e1 = [1, 2], e2 = [3, -1], e3 = [0.5, 0.5].
        // Document [1, 2, 0]: mean = ([1, 2] + [3, -1] + [0, 0]) / 3 = [4/3, 1/3]
        //   fc1 = [[1, 0], [1, 1]] · mean + [0, -1] = [4/3, 2/3]
        //   fc2 = [[1, -1], [0, 2]] · h + [0, 0.5] = [2/3, 11/6]: logits differ by 7/6, so
        //   log_softmax = [-ln(1 + e^(7/6)), -ln(1 + e^(-7/6))].
        // Document [3, 3, 3]: mean = [0.5, 0.5]; h = [0.5, 0]; logits [0.5, 0.5] → [-ln 2, -ln 2].
        let m = FastText::new(FastTextConfig { dim: 2, hidden: 2 }, &spec(4, 3, 2)).unwrap();
        let params = [
            floats(&[0.0, 0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 0.5], &[4, 2]),
            floats(&[1.0, 0.0, 1.0, 1.0], &[2, 2]),
            floats(&[0.0, -1.0], &[2]),
            floats(&[1.0, -1.0, 0.0, 2.0], &[2, 2]),
            floats(&[0.0, 0.5], &[2]),
        ];
        let y = forward_one(&m, &params, &ids(&[&[1, 2, 0], &[3, 3, 3]]), &mut Mode::Eval);
        assert_eq!(y.size(), [2, 2]);
        let got = Vec::<f32>::try_from(y.reshape([-1])).unwrap();
        let d = 7.0f64 / 6.0;
        let want = [-(1.0 + d.exp()).ln(), -(1.0 + (-d).exp()).ln(), -(2f64.ln()), -(2f64.ln())];
        for (g, w) in got.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn the_padding_row_gets_no_gradient() {
        let m = FastText::new(FastTextConfig { dim: 4, hidden: 3 }, &spec(6, 5, 2)).unwrap();
        let p = m.init(&mut Rng::seed_from_u64(1));
        let params: Vec<Tensor> = p.tensors().iter().map(|t| t.detach().copy().set_requires_grad(true)).collect();
        // Padding (0) fills most positions; token 5 never appears.
        let x = ids(&[&[1, 2, 0, 0, 0], &[3, 0, 4, 0, 0], &[0, 0, 0, 0, 0]]);
        let y = Tensor::from_slice(&[0i64, 1, 0]);
        forward_one(&m, &params, &x, &mut Mode::Eval).cross_entropy_for_logits(&y).backward();
        let g = params[0].grad();
        let row_norm = |r: i64| g.get(r).abs().sum(Kind::Double).double_value(&[]);
        assert_eq!(row_norm(0), 0.0, "padding row");
        assert_eq!(row_norm(5), 0.0, "unused token");
        for r in 1..=4 {
            assert!(row_norm(r) > 0.0, "row {r} is used and must get a gradient");
        }
        for (i, t) in params.iter().enumerate().skip(1) {
            assert!(t.grad().abs().sum(Kind::Double).double_value(&[]) > 0.0, "tensor {i}");
        }
    }

    #[test]
    fn init_is_pytorch_default_deterministic_and_zero_on_the_padding_row() {
        let m = FastText::new(FastTextConfig { dim: 16, hidden: 32 }, &spec(2_000, 10, 4)).unwrap();
        let p = m.init(&mut Rng::seed_from_u64(3));
        assert_eq!(p.names(), m.structure().names().as_slice());
        assert_eq!(p.shapes(), m.structure().shapes());
        let emb = &p.tensors()[0];
        assert_eq!(emb.get(0).abs().sum(Kind::Double).double_value(&[]), 0.0, "padding row is 0");
        // The other 1,999 · 16 = 31,984 entries are N(0, 1): mean within 5 standard errors
        // (5/√31,984 ≈ 0.028) and standard deviation within a few percent of 1.
        let rest = emb.narrow(0, 1, 1_999).to_kind(Kind::Double);
        assert!(rest.mean(Kind::Double).double_value(&[]).abs() < 0.028);
        assert!((rest.std(true).double_value(&[]) - 1.0).abs() < 0.03);
        assert_default_init(&p.tensors()[1], 16);
        assert_default_init(&p.tensors()[2], 16);
        assert_default_init(&p.tensors()[3], 32);
        assert_default_init(&p.tensors()[4], 32);
        assert!(p.equal(&m.init(&mut Rng::seed_from_u64(3))), "same seed, same parameters");
        let q = m.init(&mut Rng::seed_from_u64(4));
        assert!(!p.tensors()[0].equal(&q.tensors()[0]), "other seed, other parameters");
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        let m = FastText::new(FastTextConfig { dim: 10, hidden: 8 }, &spec(30, 7, 3)).unwrap();
        let p = m.init(&mut Rng::seed_from_u64(5));
        let mask = m.structure().mask_from_units(&[Some(vec![0, 3, 4, 9]), Some(vec![1, 2, 6])]).unwrap();
        let sub = mask.extract(&p);
        assert_eq!(sub.shapes(), vec![vec![30, 4], vec![3, 4], vec![3], vec![3, 3], vec![3]]);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = ids(&[&[1, 5, 29, 0, 0, 0, 0], &[7, 7, 2, 3, 11, 0, 0]]);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
    }

    #[test]
    fn learns_a_tiny_keyword_task() {
        // 4 classes over 12 token ids: class c's documents contain token c + 1 once, among
        // noise tokens 5..12 and padding, at varying positions and lengths.
        let (vocab, seq_len, n) = (12i64, 8i64, 128i64);
        let mut rows = Vec::new();
        let mut labels = Vec::new();
        let mut state = 7u64;
        let mut next = |k: u64| {
            state = fl_core::rng::mix64(state.wrapping_add(0x9e37_79b9_7f4a_7c15));
            (state % k) as i64
        };
        for i in 0..n {
            let class = i % 4;
            let len = 2 + next(6);
            let key_at = next(len as u64);
            for pos in 0..seq_len {
                rows.push(match pos {
                    p if p == key_at => class + 1,
                    p if p < len => 5 + next(7),
                    _ => 0,
                });
            }
            labels.push(class);
        }
        let x = Tensor::from_slice(&rows).view([n, seq_len]);
        let y = Tensor::from_slice(&labels);
        let m = FastText::new(FastTextConfig { dim: 16, hidden: 16 }, &spec(vocab, seq_len, 4)).unwrap();
        let mut params: Vec<Tensor> = m
            .init(&mut Rng::seed_from_u64(6))
            .tensors()
            .iter()
            .map(|t| t.detach().copy().set_requires_grad(true))
            .collect();
        // Full-batch gradient descent.
        for _ in 0..300 {
            let loss = forward_one(&m, &params, &x, &mut Mode::Eval).cross_entropy_for_logits(&y);
            for p in params.iter_mut() {
                p.zero_grad();
            }
            loss.backward();
            tch::no_grad(|| {
                for p in params.iter_mut() {
                    *p -= p.grad() * 0.5;
                }
            });
        }
        let predicted = forward_one(&m, &params, &x, &mut Mode::Eval).argmax(-1, false);
        let accuracy = predicted.eq_tensor(&y).to_kind(Kind::Double).mean(Kind::Double).double_value(&[]);
        assert!(accuracy > 0.95, "accuracy {accuracy}");
        assert_eq!(params[0].get(0).abs().sum(Kind::Double).double_value(&[]), 0.0, "padding row still 0");
    }

    #[test]
    fn real_valued_inputs_and_bad_shapes_are_errors_naming_the_model() {
        let image = DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None };
        let err = FastText::new(FastTextConfig::default(), &image).unwrap_err().to_string();
        assert!(err.contains("fasttext needs token-id inputs (a text dataset such as agnews)"), "{err}");
        let err = FastText::new(FastTextConfig::default(), &DataSpec { vocab_size: Some(10), ..image }).unwrap_err();
        assert!(err.to_string().contains("[seq_len]"), "{err}");
        let bad = FastTextConfig { dim: 0, ..FastTextConfig::default() }.validate().unwrap_err();
        assert_eq!(bad.key, "dim", "{bad}");
    }
}
