//! The models register under their documented names, build from TOML tables through the
//! registry, and reject unknown keys and invalid values with errors naming the key.

use fl_core::rng::Rng;
use fl_core::{Builder, DataSpec, Kind, Mode, Params, Registry};
use rand::SeedableRng;
use tch::Tensor;

// Keeps the crate's `inventory` registrations linked (inventory issue #50).
use fl_models as _;

fn build(name: &str, table: &str, spec: &DataSpec) -> fl_core::Result<std::sync::Arc<dyn fl_core::Model>> {
    let registry = Registry::get()?;
    let c = registry.component(Kind::Model, name, "test.toml", "model.name")?;
    let Builder::Model(build) = c.build else { panic!("`{name}` is not a model") };
    build(&Params::new("test.toml", "model", toml::from_str(table).unwrap()), spec)
}

fn mnist() -> DataSpec {
    DataSpec { input_shape: vec![1, 28, 28], classes: 10 }
}

#[test]
fn every_model_is_registered_with_defaults() {
    let registry = Registry::get().unwrap();
    let names: Vec<&str> = registry.components(Kind::Model).map(|c| c.name).collect();
    for want in ["lenet5", "mlp"] {
        assert!(names.contains(&want), "`{want}` missing from {names:?}");
    }
    let mlp = registry.component(Kind::Model, "mlp", "", "").unwrap();
    let defaults = (mlp.defaults)();
    assert_eq!(defaults["hidden"], toml::Value::Array(vec![toml::Value::Integer(200)]));
    assert_eq!(defaults["dropout"], toml::Value::Float(0.0));
    assert_eq!(defaults["dropout_position"], toml::Value::String("before-relu".into()));
    let lenet = registry.component(Kind::Model, "lenet5", "", "").unwrap();
    assert!((lenet.defaults)().is_empty());
}

#[test]
fn models_build_from_toml_and_run() {
    let mlp = build("mlp", "hidden = [200, 200]\ndropout = 0.5\ndropout_position = \"after-relu\"", &mnist()).unwrap();
    assert_eq!(mlp.structure().num_params(), 199_210);
    let lenet = build("lenet5", "", &DataSpec { input_shape: vec![3, 32, 32], classes: 100 }).unwrap();
    assert_eq!(lenet.structure().num_params(), 62_006 - 10 * 84 - 10 + 100 * 84 + 100);
    let p = lenet.init(&mut Rng::seed_from_u64(1));
    let x = Tensor::zeros([2, 3, 32, 32], (tch::Kind::Float, tch::Device::Cpu));
    assert_eq!(lenet.forward(p.tensors(), &x, &mut Mode::Eval).size(), [2, 100]);
}

#[test]
fn bad_tables_are_errors_naming_the_key() {
    let err = |name: &str, table: &str| build(name, table, &mnist()).err().expect("an error").to_string();
    assert!(err("mlp", "hiden = [10]").contains("hiden"));
    assert!(err("mlp", "dropout = 1.5").contains("model.dropout"));
    assert!(err("mlp", "hidden = [0]").contains("model.hidden"));
    assert!(err("mlp", "dropout_position = \"middle\"").contains("model.dropout_position"));
    assert!(err("lenet5", "padding = 2").contains("padding"));
    let shape = build("lenet5", "", &DataSpec { input_shape: vec![784], classes: 10 }).err().unwrap().to_string();
    assert!(shape.contains("[784]"), "{shape}");
}
