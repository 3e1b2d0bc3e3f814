//! `mlp`: a multilayer perceptron on flattened inputs, with optional dropout.
//!
//! Follows McMahan et al., "Communication-Efficient Learning of Deep Networks from
//! Decentralized Data", AISTATS 2017 (arXiv:1602.05629), whose MNIST "2NN" is 784-200-200-10 with
//! ReLU (`hidden = [200, 200]`, 199,210 parameters), and the MNIST MLP of Wang et al.'s RA-Fed
//! code (KDD '23, doi 10.1145/3580305.3599521), which Fed-RAA's MLPs share: 784-200-10 with
//! dropout 0.5 applied *before* the ReLU (`hidden = [200]`, `dropout = 0.5`, 159,010
//! parameters). `hidden = []` gives multinomial logistic regression.
//!
//! Layers are `fc1 … fc{n+1}` in PyTorch's `nn.Linear` layout (weight `[out, in]`). Each hidden
//! layer's neurons form a unit group (a row of `fc{i}.weight`, an entry of `fc{i}.bias`, a column
//! of `fc{i+1}.weight`); the output layer is not maskable. `forward` reads every layer width from
//! the tensors it gets, so a structured sub-model runs as is.
//!
//! **Dropout position.** Both arrangements are offered (`dropout_position`), but with inverted
//! dropout they compute the same function: the mask scales by 0 or `1 / (1 − p) > 0`, and
//! `relu(m · x) = m · relu(x)` for any `m ≥ 0`, values and gradients alike. With the same noise
//! stream the two give identical outputs (a test checks this); the option records which
//! arrangement a paper describes, nothing more.
//!
//! FLOPs follow [`crate::flops`]: 2 per multiply-add and 1 per bias addition; ReLU and dropout
//! are not counted.
//!
//! **Training steps** take gradients derived by hand ([`Model::loss_gradients`], on the layers
//! of [`crate::by_hand`]) instead of autograd's, the same to rounding (tests require 1e-5).

use fl_core::rng::Rng;
use fl_core::{DataSpec, InvalidKey, LossGradients, Mode, Model, ModelError, ModelFromConfig, ParamSet, Result};
use fl_core::{Structure, TensorSpec, UnitGroup, UnitMember};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;
use tch::Tensor;

use crate::{by_hand, cohort, flops, init};

/// Where a hidden layer's dropout sits relative to its ReLU (equivalent; see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropoutPosition {
    /// `Linear → Dropout → ReLU`, as in the KDD '23 RA-Fed code.
    #[default]
    BeforeRelu,
    /// `Linear → ReLU → Dropout`, the usual arrangement.
    AfterRelu,
}

/// Parameters of the `mlp` component.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MlpConfig {
    /// Hidden layer widths, input side first; empty for logistic regression.
    #[default(vec![200])]
    pub hidden: Vec<i64>,
    /// Dropout probability after each hidden layer, in [0, 1); 0 disables dropout.
    #[default(0.0)]
    pub dropout: f64,
    /// Where a hidden layer's dropout sits relative to its ReLU (the same function either way).
    #[default(DropoutPosition::BeforeRelu)]
    pub dropout_position: DropoutPosition,
}

impl MlpConfig {
    /// Checks the widths and the dropout probability; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if let Some(w) = self.hidden.iter().find(|&&w| w < 1) {
            return Err(InvalidKey::new(
                "hidden",
                format!("every width must be at least 1, got {w} in {:?}", self.hidden),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(InvalidKey::new("dropout", format!("must be in [0, 1), got {}", self.dropout)));
        }
        Ok(())
    }
}

/// The multilayer perceptron; see the module documentation.
#[derive(Debug)]
pub struct Mlp {
    cfg: MlpConfig,
    structure: Structure,
}

impl Mlp {
    /// An MLP from the flattened `spec.input_shape` to `spec.classes` logits.
    pub fn new(cfg: MlpConfig, spec: &DataSpec) -> Result<Mlp> {
        cfg.validate().map_err(|key| ModelError::Config { model: "mlp", key })?;
        if spec.input_shape.is_empty() || spec.input_shape.iter().any(|&d| d < 1) {
            return Err(ModelError::InputShape {
                model: "mlp",
                expected: "at least one dimension, each of size at least 1",
                found: spec.input_shape.clone(),
            }
            .into());
        }
        if spec.classes < 1 {
            return Err(ModelError::NoClasses { model: "mlp", classes: spec.classes }.into());
        }
        if spec.vocab_size.is_some() {
            return Err(ModelError::NeedsRealValues { model: "mlp" }.into());
        }
        let mut widths = vec![spec.input_shape.iter().product::<i64>()];
        widths.extend(&cfg.hidden);
        widths.push(spec.classes);
        let mut tensors = Vec::new();
        for (i, w) in widths.windows(2).enumerate() {
            let layer = i + 1;
            tensors.push(TensorSpec::new(format!("fc{layer}.weight"), vec![w[1], w[0]]));
            tensors.push(TensorSpec::new(format!("fc{layer}.bias"), vec![w[1]]));
        }
        let groups = (0..cfg.hidden.len())
            .map(|i| {
                let member = |tensor, dim| UnitMember { tensor, dim, block: 1 };
                UnitGroup {
                    name: format!("fc{}", i + 1),
                    units: cfg.hidden[i],
                    members: vec![member(2 * i, 0), member(2 * i + 1, 0), member(2 * i + 2, 1)],
                }
            })
            .collect();
        Ok(Mlp { cfg, structure: Structure { tensors, groups } })
    }

    pub fn config(&self) -> &MlpConfig {
        &self.cfg
    }

    fn hidden_activation(&self, h: &Tensor, mode: &mut Mode) -> Tensor {
        let mask = mode.dropout_mask(h, self.cfg.dropout);
        self.activate(h, mask.as_ref())
    }

    /// ReLU and the dropout `mask` (laid out as `h`), in the configured order.
    fn activate(&self, h: &Tensor, mask: Option<&Tensor>) -> Tensor {
        match (mask, self.cfg.dropout_position) {
            (None, _) => h.relu(),
            (Some(m), DropoutPosition::BeforeRelu) => (h * m).relu(),
            (Some(m), DropoutPosition::AfterRelu) => h.relu() * m,
        }
    }
}

impl Model for Mlp {
    fn structure(&self) -> &Structure {
        &self.structure
    }

    fn init(&self, rng: &mut Rng) -> ParamSet {
        init::pytorch_default(&self.structure, rng)
    }

    fn features(&self, body: &[Tensor], x: &Tensor, mode: &mut Mode) -> Tensor {
        let want = self.structure.tensors.len() - 2;
        assert_eq!(body.len(), want, "mlp features: expected {want} tensors before the classifier, got {}", body.len());
        let mut h = x.flatten(2, -1);
        for layer in body.chunks(2) {
            h = self.hidden_activation(&cohort::linear(&h, &layer[0], &layer[1]), mode);
        }
        h
    }

    fn flops_per_tensor(&self, shapes: &[Vec<i64>]) -> Vec<f64> {
        shapes.iter().map(|s| flops::of_tensor(s, 1)).collect()
    }

    /// The forward pass of [`Model::forward`] in the feature-major layout ([`by_hand`]), its
    /// dropout masks drawn for the same views in the same order, then the backward pass.
    fn loss_gradients(
        &self,
        params: &[Tensor],
        x: &Tensor,
        y: &Tensor,
        weights: &Tensor,
        mode: &mut Mode,
    ) -> Option<LossGradients> {
        let layers = params.len() / 2;
        // Each layer's input and the dropout mask applied to it.
        let mut inputs = vec![x.flatten(2, -1).transpose(1, 2)];
        let mut masks = vec![None];
        let mut z = by_hand::linear(&inputs[0], &params[0], &params[1]);
        for layer in params.chunks(2).skip(1) {
            let mask = mode.dropout_mask(&z.transpose(1, 2), self.cfg.dropout).map(|m| m.transpose(1, 2));
            inputs.push(self.activate(&z, mask.as_ref()));
            masks.push(mask);
            z = by_hand::linear(inputs.last().expect("pushed"), &layer[0], &layer[1]);
        }
        let (per_client, mut dz) = by_hand::cross_entropy(&z, y, weights);
        let mut grads: Vec<Tensor> = params.iter().map(|_| Tensor::new()).collect();
        for l in (0..layers).rev() {
            let (dw, db, da) = by_hand::linear_backward(&dz, &inputs[l], &params[2 * l], l > 0);
            (grads[2 * l], grads[2 * l + 1]) = (dw, db);
            if let Some(da) = da {
                dz = by_hand::relu_backward(&da, &inputs[l], masks[l].as_ref());
            }
        }
        Some(LossGradients { per_client, grads })
    }
}

impl ModelFromConfig for Mlp {
    type Config = MlpConfig;

    fn validate(config: &MlpConfig) -> std::result::Result<(), InvalidKey> {
        config.validate()
    }

    fn from_config(config: MlpConfig, spec: &DataSpec) -> Result<Self> {
        Mlp::new(config, spec)
    }
}

fl_core::register!(Model "mlp" => Mlp,
    summary: "multilayer perceptron on flattened inputs (ReLU, optional dropout before or after it)",
    paper: "McMahan et al., Communication-Efficient Learning of Deep Networks from Decentralized Data, AISTATS 2017 (2NN); \
                Wang et al., KDD '23 (MNIST MLP with dropout)");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_default_init, assert_grads_flow, input, labels, noise};
    use fl_core::forward_one;
    use fl_core::rng::{CohortNoise, TensorNoise};
    use fl_core::trainer::sgd::cross_entropy;
    use proptest::prelude::{Just, ProptestConfig, any};
    use proptest::{prop_oneof, proptest};
    use rand::SeedableRng;
    use tch::{Device, Kind};

    fn mnist() -> DataSpec {
        DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None }
    }

    fn mlp(hidden: &[i64], dropout: f64, position: DropoutPosition) -> Mlp {
        Mlp::new(MlpConfig { hidden: hidden.to_vec(), dropout, dropout_position: position }, &mnist()).unwrap()
    }

    fn default_mlp() -> Mlp {
        Mlp::new(MlpConfig::default(), &mnist()).unwrap()
    }

    #[test]
    fn structure_names_shapes_and_groups() {
        let m = default_mlp();
        let s = m.structure();
        assert_eq!(s.names(), ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
        assert_eq!(s.shapes(), vec![vec![200, 784], vec![200], vec![10, 200], vec![10]]);
        let member = |tensor, dim| UnitMember { tensor, dim, block: 1 };
        assert_eq!(
            s.groups,
            vec![UnitGroup { name: "fc1".into(), units: 200, members: vec![member(0, 0), member(1, 0), member(2, 1)] }]
        );
    }

    #[test]
    fn parameter_counts_match_the_papers() {
        // 784·200 + 200 + 200·10 + 10 (KDD '23 and Fed-RAA state 159,010).
        assert_eq!(default_mlp().structure().num_params(), 159_010);
        // FedAvg's 2NN: 784·200 + 200 + 200·200 + 200 + 200·10 + 10 (McMahan et al. state 199,210).
        assert_eq!(mlp(&[200, 200], 0.0, DropoutPosition::AfterRelu).structure().num_params(), 199_210);
        // Fed-RAA's CIFAR-10 MLP: 3072·2048 + 2048 + 2048·10 + 10 (the spec states 6,313,994).
        let cifar = DataSpec { input_shape: vec![3, 32, 32], classes: 10, vocab_size: None };
        let m = Mlp::new(MlpConfig { hidden: vec![2048], ..MlpConfig::default() }, &cifar).unwrap();
        assert_eq!(m.structure().num_params(), 6_313_994);
        // Logistic regression: 784·10 + 10, no unit groups.
        let lr = mlp(&[], 0.0, DropoutPosition::BeforeRelu);
        assert_eq!(lr.structure().num_params(), 7_850);
        assert!(lr.structure().groups.is_empty());
    }

    #[test]
    fn flops_per_sample_match_the_hand_count() {
        let m = default_mlp();
        // Weights 2·784·200 = 313,600 and 2·200·10 = 4,000 (together 317,600); biases 200 and 10.
        let f = m.flops_per_tensor(&m.structure().shapes());
        assert_eq!(f, vec![313_600.0, 200.0, 4_000.0, 10.0]);
        assert_eq!(m.forward_flops(&m.structure().shapes()), 317_810.0);
    }

    #[test]
    fn init_is_pytorch_default_and_deterministic() {
        let m = default_mlp();
        let p = m.init(&mut Rng::seed_from_u64(3));
        assert_eq!(p.names(), m.structure().names().as_slice());
        assert_eq!(p.shapes(), m.structure().shapes());
        // fan_in 784 for fc1, 200 for fc2; the biases share their weight's bound.
        assert_default_init(&p.tensors()[0], 784);
        assert_default_init(&p.tensors()[1], 784);
        assert_default_init(&p.tensors()[2], 200);
        assert_default_init(&p.tensors()[3], 200);
        assert!(p.equal(&m.init(&mut Rng::seed_from_u64(3))), "same seed, same parameters");
        let q = m.init(&mut Rng::seed_from_u64(4));
        assert!(p.tensors().iter().zip(q.tensors()).all(|(a, b)| !a.equal(b)), "other seed, other parameters");
    }

    #[test]
    fn forward_matches_hand_computed_logits() {
        // 3 inputs, 2 hidden, 2 classes.
        // h = relu(W1 x + b1) = relu([1 - 2 + 1.5 + 0.1, 2 + 0 - 3 - 0.2]) = relu([0.6, -1.2]) = [0.6, 0];
        // y = W2 h + b2 = [1·0.6 + 2·0 + 0, -1·0.6 + 0.5·0 + 1] = [0.6, 0.4].
        let spec = DataSpec { input_shape: vec![3], classes: 2, vocab_size: None };
        let m = Mlp::new(MlpConfig { hidden: vec![2], ..MlpConfig::default() }, &spec).unwrap();
        let w1 = Tensor::from_slice(&[1.0f32, -1.0, 0.5, 2.0, 0.0, -1.0]).reshape([2, 3]);
        let b1 = Tensor::from_slice(&[0.1f32, -0.2]);
        let w2 = Tensor::from_slice(&[1.0f32, 2.0, -1.0, 0.5]).reshape([2, 2]);
        let b2 = Tensor::from_slice(&[0.0f32, 1.0]);
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0]).reshape([1, 3]);
        let y = forward_one(&m, &[w1, b1, w2, b2], &x, &mut Mode::Eval);
        let got = Vec::<f32>::try_from(y.reshape([-1])).unwrap();
        assert!((got[0] - 0.6).abs() < 1e-6 && (got[1] - 0.4).abs() < 1e-6, "got {got:?}");
    }

    #[test]
    fn forward_equals_a_manual_matmul_chain() {
        let m = mlp(&[200, 50], 0.0, DropoutPosition::BeforeRelu);
        let p = m.init(&mut Rng::seed_from_u64(9));
        let x = input(&[8, 1, 28, 28], 1);
        let t = p.tensors();
        let flat = x.reshape([8, 784]);
        let h1 = (flat.matmul(&t[0].tr()) + &t[1]).relu();
        let h2 = (h1.matmul(&t[2].tr()) + &t[3]).relu();
        let want = h2.matmul(&t[4].tr()) + &t[5];
        let got = forward_one(&m, t, &x, &mut Mode::Eval);
        assert_eq!(got.size(), [8, 10]);
        assert!(got.allclose(&want, 1e-5, 1e-6, false));
    }

    #[test]
    fn half_width_sub_model_runs_and_costs_the_hand_count() {
        let m = mlp(&[200, 200], 0.0, DropoutPosition::BeforeRelu);
        let p = m.init(&mut Rng::seed_from_u64(5));
        let mask = m.structure().width_prefix_mask(0.5).unwrap();
        let shapes = mask.sub_shapes(&m.structure().shapes());
        assert_eq!(shapes, vec![vec![100, 784], vec![100], vec![100, 100], vec![100], vec![10, 100], vec![10]]);
        let sub = mask.extract(&p);
        let y = forward_one(&m, sub.tensors(), &input(&[4, 1, 28, 28], 2), &mut Mode::Eval);
        assert_eq!(y.size(), [4, 10]);
        // 2·(784·100 + 100·100 + 100·10) = 178,800 for the weights, 100 + 100 + 10 for the biases.
        assert_eq!(m.flops_per_tensor(&shapes), vec![156_800.0, 100.0, 20_000.0, 100.0, 2_000.0, 10.0]);
        assert_eq!(m.forward_flops(&shapes), 179_010.0);
    }

    #[test]
    fn a_sub_model_equals_the_full_model_with_dropped_units_zeroed() {
        // Arbitrary (not prefix) kept neurons: if the unit groups tied the wrong rows and
        // columns together, the two forwards would disagree.
        let m = mlp(&[20, 12], 0.0, DropoutPosition::BeforeRelu);
        let p = m.init(&mut Rng::seed_from_u64(6));
        let mask = m.structure().mask_from_units(&[Some(vec![1, 4, 5, 13, 19]), Some(vec![0, 7, 11])]).unwrap();
        let sub = mask.extract(&p);
        let zeroed = mask.scatter(&sub, &m.structure().shapes());
        let x = input(&[6, 1, 28, 28], 3);
        let a = forward_one(&m, sub.tensors(), &x, &mut Mode::Eval);
        let b = forward_one(&m, zeroed.tensors(), &x, &mut Mode::Eval);
        assert!(a.allclose(&b, 1e-5, 1e-6, false));
    }

    #[test]
    fn gradients_reach_every_tensor_of_full_and_sub_models() {
        let m = mlp(&[200, 200], 0.5, DropoutPosition::BeforeRelu);
        let p = m.init(&mut Rng::seed_from_u64(7));
        let x = input(&[16, 1, 28, 28], 4);
        assert_grads_flow(&m, p.tensors(), &x, &labels(16, 10));
        let sub = m.structure().width_prefix_mask(0.5).unwrap().extract(&p);
        assert_grads_flow(&m, sub.tensors(), &x, &labels(16, 10));
    }

    #[test]
    fn dropout_is_reproducible_in_training_and_off_in_eval() {
        let m = mlp(&[200], 0.5, DropoutPosition::BeforeRelu);
        let plain = mlp(&[200], 0.0, DropoutPosition::BeforeRelu);
        let p = m.init(&mut Rng::seed_from_u64(8));
        let x = input(&[32, 1, 28, 28], 5);
        let train = |seed| forward_one(&m, p.tensors(), &x, &mut Mode::train(&mut noise(seed)));
        assert!(train(1).equal(&train(1)), "same noise seed, same output");
        assert!(!train(1).equal(&train(2)), "other noise seed, other output");
        let eval = forward_one(&m, p.tensors(), &x, &mut Mode::Eval);
        assert!(eval.equal(&forward_one(&plain, p.tensors(), &x, &mut Mode::Eval)), "eval ignores dropout");
        assert!(!train(1).allclose(&eval, 1e-3, 1e-3, false), "training applies dropout");
        // Without dropout, training and eval forwards agree.
        let plain_train = forward_one(&plain, p.tensors(), &x, &mut Mode::train(&mut noise(1)));
        assert!(plain_train.equal(&eval));
    }

    #[test]
    fn dropout_drops_about_p_of_the_hidden_units() {
        // With fc2 = identity on 200 hidden units (classes = hidden = 200, zero bias) the logits
        // are the dropped-out hidden activations themselves.
        let spec = DataSpec { input_shape: vec![200], classes: 200, vocab_size: None };
        let m = Mlp::new(MlpConfig { hidden: vec![200], dropout: 0.25, ..MlpConfig::default() }, &spec).unwrap();
        let eye = Tensor::eye(200, (Kind::Float, tch::Device::Cpu));
        let zero = Tensor::zeros([200], (Kind::Float, tch::Device::Cpu));
        let params = [eye.shallow_clone(), zero.shallow_clone(), eye, zero];
        let x = Tensor::ones([50, 200], (Kind::Float, tch::Device::Cpu));
        let y = forward_one(&m, &params, &x, &mut Mode::train(&mut noise(11)));
        // Kept units are scaled to 1 / (1 - 0.25); dropped ones are 0.
        let kept = y.ne(0.0).to_kind(Kind::Double).mean(Kind::Double).double_value(&[]);
        assert!((kept - 0.75).abs() < 0.02, "kept share {kept}");
        let scaled = y.eq(0.0).logical_or(&(&y - 1.0 / 0.75).abs().lt(1e-6)).all().int64_value(&[]);
        assert_eq!(scaled, 1, "every output is 0 or 1/(1-p)");
    }

    #[test]
    fn dropout_before_and_after_relu_compute_the_same_function() {
        // relu(m·x) = m·relu(x) for m ∈ {0, 1/(1-p)}: with the same noise the two arrangements
        // give the same logits and the same gradients.
        let before = mlp(&[200, 100], 0.5, DropoutPosition::BeforeRelu);
        let after = mlp(&[200, 100], 0.5, DropoutPosition::AfterRelu);
        let p = before.init(&mut Rng::seed_from_u64(10));
        let x = input(&[16, 1, 28, 28], 6);
        let y = labels(16, 10);
        let run = |m: &Mlp| {
            let params: Vec<Tensor> = p.tensors().iter().map(|t| t.detach().copy().set_requires_grad(true)).collect();
            let logits = forward_one(m, &params, &x, &mut Mode::train(&mut noise(3)));
            logits.cross_entropy_for_logits(&y).backward();
            (logits.detach(), params.iter().map(Tensor::grad).collect::<Vec<_>>())
        };
        let (la, ga) = run(&before);
        let (lb, gb) = run(&after);
        assert!(la.equal(&lb));
        assert!(ga.iter().zip(&gb).all(|(a, b)| a.equal(b)));
    }

    /// `loss_gradients` against autograd on `forward` and the trainer's loss, with the same noise.
    fn assert_gradients_by_hand_equal_autograd(m: &Mlp, params: &[Tensor], c: i64, b: i64, seed: u64) {
        let cohort_noise =
            || CohortNoise::new((0..c as u64).map(|i| TensorNoise::new(seed + i)).collect(), Device::Cpu);
        let x = input(&[c, b, 1, 28, 28], seed);
        let y = labels(c * b, 10).roll([seed as i64].as_slice(), [0i64].as_slice());
        // Some weights 0, as for padded samples.
        let weights = input(&[c, b], seed + 1).clamp_min(0.0);
        let leaves: Vec<Tensor> = params.iter().map(|t| t.detach().copy().set_requires_grad(true)).collect();
        let mut noise_a = cohort_noise();
        let logits = m.forward(&leaves, &x, &mut Mode::train(&mut noise_a));
        let want = cross_entropy(&logits, &y, &weights);
        let grads = Tensor::run_backward(&[want.sum(Kind::Float)], &leaves.iter().collect::<Vec<_>>(), false, false);

        let mut noise_h = cohort_noise();
        let found = tch::no_grad(|| m.loss_gradients(params, &x, &y, &weights, &mut Mode::train(&mut noise_h)))
            .expect("the mlp has hand-derived gradients");
        assert_eq!(noise_h.draws(), noise_a.draws(), "the same noise draws");
        assert!(found.per_client.allclose(&want, 1e-5, 1e-6, false), "{} against {want}", found.per_client);
        assert_eq!(found.grads.len(), grads.len());
        for (i, (hand, auto)) in found.grads.iter().zip(&grads).enumerate() {
            assert_eq!(hand.size(), auto.size(), "tensor {i}");
            let diff = (hand - auto).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "tensor {i}: by hand and by autograd differ by {diff}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]

        #[test]
        fn gradients_by_hand_equal_autograd(
            depth in 0usize..3, width in 1i64..40, dropout in prop_oneof![Just(0.0), Just(0.5)], before in any::<bool>(),
            c in 1i64..4, b in 1i64..20, seed in 0u64..1000,
        ) {
            let position = if before { DropoutPosition::BeforeRelu } else { DropoutPosition::AfterRelu };
            let m = mlp(&vec![width; depth], dropout, position);
            // Each client its own parameters: the clients must stay apart.
            let inits: Vec<ParamSet> = (0..c as u64).map(|i| m.init(&mut Rng::seed_from_u64(seed + i))).collect();
            let stacked: Vec<Tensor> = (0..m.structure().tensors.len())
                .map(|j| Tensor::stack(&inits.iter().map(|p| p.tensors()[j].shallow_clone()).collect::<Vec<_>>(), 0))
                .collect();
            assert_gradients_by_hand_equal_autograd(&m, &stacked, c, b, seed);
        }
    }

    #[test]
    fn gradients_by_hand_of_the_kdd23_mlp_and_of_a_sub_model_equal_autograd() {
        let m = mlp(&[200], 0.5, DropoutPosition::BeforeRelu);
        let p = m.init(&mut Rng::seed_from_u64(11));
        let one = |p: &ParamSet| p.tensors().iter().map(|t| t.unsqueeze(0)).collect::<Vec<_>>();
        assert_gradients_by_hand_equal_autograd(&m, &one(&p), 1, 128, 5);
        let sub = m.structure().width_prefix_mask(0.5).unwrap().extract(&p);
        assert_gradients_by_hand_equal_autograd(&m, &one(&sub), 1, 32, 6);
    }

    #[test]
    fn config_validation_names_the_key() {
        let bad = |cfg: MlpConfig| cfg.validate().unwrap_err();
        assert!(bad(MlpConfig { hidden: vec![200, 0], ..MlpConfig::default() }).key == "hidden");
        assert!(bad(MlpConfig { dropout: 1.0, ..MlpConfig::default() }).key == "dropout");
        assert!(bad(MlpConfig { dropout: -0.1, ..MlpConfig::default() }).key == "dropout");
        assert!(bad(MlpConfig { dropout: f64::NAN, ..MlpConfig::default() }).key == "dropout");
        let err = Mlp::new(MlpConfig::default(), &DataSpec { input_shape: vec![], classes: 10, vocab_size: None })
            .unwrap_err();
        assert!(err.to_string().contains("input shape []"), "{err}");
        let text = DataSpec { input_shape: vec![200], classes: 4, vocab_size: Some(100) };
        let err = Mlp::new(MlpConfig::default(), &text).unwrap_err();
        assert!(err.to_string().contains("token ids"), "{err}");
    }
}
