//! The models register under their documented names, build from TOML tables through the
//! registry, and reject unknown keys and invalid values with errors naming the key.

use fl_core::rng::Rng;
use fl_core::{Builder, ComponentKind, DataSpec, Error, Mode, ModelError, Params, Registry, forward_one};
use rand::SeedableRng;
use tch::Tensor;

// Keeps the crate's `inventory` registrations linked (inventory issue #50).
use fl_models as _;

fn build(name: &str, table: &str, spec: &DataSpec) -> fl_core::Result<std::sync::Arc<dyn fl_core::Model>> {
    let registry = Registry::get()?;
    let c = registry.component(ComponentKind::Model, name, "test.toml", "model.name")?;
    let Builder::Model(build) = c.build else { panic!("`{name}` is not a model") };
    build(&Params::new("test.toml", "model", toml::from_str(table).unwrap()), spec)
}

fn mnist() -> DataSpec {
    DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None }
}

fn defaults_of(registry: &Registry, name: &str) -> toml::Table {
    (registry.component(ComponentKind::Model, name, "", "").unwrap().defaults)()
}

#[test]
fn every_model_is_registered_with_defaults() {
    let registry = Registry::get().unwrap();
    let names: Vec<&str> = registry.components(ComponentKind::Model).map(|c| c.name).collect();
    for want in ["alexnet", "cnn2", "fasttext", "lenet5", "mlp", "textcnn", "vgg11"] {
        assert!(names.contains(&want), "`{want}` missing from {names:?}");
    }
    let mlp = registry.component(ComponentKind::Model, "mlp", "", "").unwrap();
    let defaults = (mlp.defaults)();
    assert_eq!(defaults["hidden"], toml::Value::Array(vec![toml::Value::Integer(200)]));
    assert_eq!(defaults["dropout"], toml::Value::Float(0.0));
    assert_eq!(defaults["dropout_position"], toml::Value::String("before-relu".into()));
    // LeNet-5 has no keys of its own: only the projection head's, which every model has.
    let lenet = registry.component(ComponentKind::Model, "lenet5", "", "").unwrap();
    assert_eq!((lenet.defaults)(), toml::from_str::<toml::Table>("projection_dim = 0").unwrap());
    assert_eq!(defaults_of(registry, "mlp")["projection_dim"].as_integer(), Some(0));
    let fasttext = registry.component(ComponentKind::Model, "fasttext", "", "").unwrap();
    let defaults = (fasttext.defaults)();
    assert_eq!((defaults["dim"].as_integer(), defaults["hidden"].as_integer()), (Some(128), Some(128)));
}

#[test]
fn fasttext_builds_from_the_text_spec_and_rejects_images() {
    let agnews = DataSpec { input_shape: vec![200], classes: 4, vocab_size: Some(98_635) };
    assert_eq!(build("fasttext", "", &agnews).unwrap().structure().num_params(), 12_642_308);
    let small = build("fasttext", "dim = 8\nhidden = 4", &DataSpec { vocab_size: Some(10), ..agnews.clone() }).unwrap();
    assert_eq!(small.structure().num_params(), 10 * 8 + 4 * 8 + 4 + 4 * 4 + 4);
    let p = small.init(&mut Rng::seed_from_u64(2));
    let x = Tensor::from_slice(&[3i64; 400]).view([2, 200]);
    let y = forward_one(&*small, p.tensors(), &x, &mut Mode::Eval);
    assert_eq!(y.size(), [2, 4]);
    // log_softmax outputs: each row's probabilities sum to 1.
    let total = y.exp().sum(tch::Kind::Double).double_value(&[]);
    assert!((total - 2.0).abs() < 1e-5, "{total}");
    let err = build("fasttext", "", &mnist()).err().unwrap().to_string();
    assert!(err.contains("fasttext needs token-id inputs (a text dataset such as agnews)"), "{err}");
    let err = build("fasttext", "dims = 64", &agnews).err().unwrap().to_string();
    assert!(err.contains("dims"), "{err}");
    let err = build("fasttext", "hidden = 0", &agnews).err().unwrap().to_string();
    assert!(err.contains("model.hidden"), "{err}");
}

#[test]
fn models_build_from_toml_and_run() {
    let mlp = build("mlp", "hidden = [200, 200]\ndropout = 0.5\ndropout_position = \"after-relu\"", &mnist()).unwrap();
    assert_eq!(mlp.structure().num_params(), 199_210);
    let lenet =
        build("lenet5", "", &DataSpec { input_shape: vec![3, 32, 32], classes: 100, vocab_size: None }).unwrap();
    assert_eq!(lenet.structure().num_params(), 62_006 - 10 * 84 - 10 + 100 * 84 + 100);
    let p = lenet.init(&mut Rng::seed_from_u64(1));
    let x = Tensor::zeros([2, 3, 32, 32], (tch::Kind::Float, tch::Device::Cpu));
    assert_eq!(forward_one(&*lenet, p.tensors(), &x, &mut Mode::Eval).size(), [2, 100]);
}

#[test]
fn bad_tables_are_errors_naming_the_key() {
    let err = |name: &str, table: &str| build(name, table, &mnist()).err().expect("an error").to_string();
    assert!(err("mlp", "hiden = [10]").contains("hiden"));
    assert!(err("mlp", "dropout = 1.5").contains("model.dropout"));
    assert!(err("mlp", "hidden = [0]").contains("model.hidden"));
    assert!(err("mlp", "dropout_position = \"middle\"").contains("model.dropout_position"));
    assert!(err("lenet5", "padding = 2").contains("padding"));
    let shape = build("lenet5", "", &DataSpec { input_shape: vec![784], classes: 10, vocab_size: None })
        .err()
        .unwrap()
        .to_string();
    assert!(shape.contains("[784]"), "{shape}");
}

/// The error a model gives for data it cannot take, as a value to match on.
fn model_error(name: &str, spec: &DataSpec) -> ModelError {
    match build(name, "", spec) {
        Err(Error::Model(e)) => e,
        Err(other) => panic!("{name}: expected a model error, got {other:?}"),
        Ok(_) => panic!("{name}: built for {spec:?}"),
    }
}

#[test]
fn models_name_the_shape_they_cannot_take() {
    let flat = DataSpec { input_shape: vec![784], ..mnist() };
    assert_eq!(
        model_error("lenet5", &flat),
        ModelError::InputShape {
            model: "lenet5",
            expected: "[C, 28, 28] (conv1 padded by 2) or [C, 32, 32]",
            found: vec![784]
        }
    );
    assert!(matches!(
        model_error("cnn3", &flat),
        ModelError::InputShape { model: "cnn3", found, .. } if found == [784]
    ));
    assert!(matches!(
        model_error("mlp", &DataSpec { input_shape: vec![3, 0, 2], ..mnist() }),
        ModelError::InputShape { model: "mlp", found, .. } if found == [3, 0, 2]
    ));
    assert_eq!(
        model_error("mlp", &DataSpec { classes: 0, ..mnist() }),
        ModelError::NoClasses { model: "mlp", classes: 0 }
    );
    let text = DataSpec { input_shape: vec![200], classes: 4, vocab_size: Some(100) };
    assert_eq!(model_error("mlp", &text), ModelError::NeedsRealValues { model: "mlp" });
    assert_eq!(
        model_error("fasttext", &mnist()),
        ModelError::NeedsTokenIds { model: "fasttext", found: vec![1, 28, 28] }
    );
    assert_eq!(
        model_error("fasttext", &DataSpec { vocab_size: Some(0), ..text }),
        ModelError::EmptyVocabulary { model: "fasttext", vocab_size: 0 }
    );
}
