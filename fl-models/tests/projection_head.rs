//! MOON's projection head (`[model] projection_dim`) on any model: its tensors and their
//! initialisation, a forward pass equal to the layers written out, the FLOP count, unit groups
//! that still narrow the base's last features, and a clear error for a bad width.

use std::sync::Arc;

use fl_core::rng::Rng;
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::{Builder, DataSpec, Mode, Model, Params, Registry, forward_one};
use rand::SeedableRng;

use fl_models as _;

fn build(name: &str, table: &str, spec: &DataSpec) -> fl_core::Result<Arc<dyn Model>> {
    let registry = Registry::get()?;
    let Builder::Model(build) = registry.component(fl_core::ComponentKind::Model, name, "exp.toml", "model")?.build
    else {
        unreachable!("registry keys builders by kind")
    };
    build(&Params::new("exp.toml", "model", toml::from_str(table).unwrap()), spec)
}

fn mnist() -> DataSpec {
    DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None }
}

#[test]
fn the_head_sits_between_the_features_and_the_classifier() {
    let base = build("lenet5", "", &mnist()).unwrap();
    let head = build("lenet5", "projection_dim = 256", &mnist()).unwrap();
    let (b, h) = (base.structure(), head.structure());
    assert_eq!(h.tensors.len(), b.tensors.len() + 4);
    let tail: Vec<(String, Vec<i64>)> = h.tensors[8..].iter().map(|t| (t.name.clone(), t.shape.clone())).collect();
    let want = [
        ("projection.0.weight", vec![84, 84]),
        ("projection.0.bias", vec![84]),
        ("projection.1.weight", vec![256, 84]),
        ("projection.1.bias", vec![256]),
        ("fc3.weight", vec![10, 256]),
        ("fc3.bias", vec![10]),
    ];
    assert_eq!(tail, want.map(|(n, s)| (n.to_string(), s)));
    assert_eq!(h.tensors[..8], b.tensors[..8]);
    // LeNet-5's 61,706 parameters less its 850-parameter classifier, plus the head's.
    assert_eq!(h.num_params(), 61_706 - 850 + (84 * 84 + 84) + (256 * 84 + 256) + (10 * 256 + 10));
    // The groups are the base's: `fc2`'s units are now also the columns of projection.0.weight.
    assert_eq!(h.groups, b.groups);
    let fc2 = h.groups.iter().find(|g| g.name == "fc2").expect("lenet5 narrows fc2");
    assert!(fc2.members.iter().any(|m| h.tensors[m.tensor].name == "projection.0.weight" && m.dim == 1));
    // Forward FLOPs: the base's up to its classifier, then three linear layers.
    let flops = head.flops_per_tensor(&h.shapes());
    assert_eq!(flops[..8], base.flops_per_tensor(&b.shapes())[..8]);
    assert_eq!(flops[8..], [2.0 * 84.0 * 84.0, 84.0, 2.0 * 256.0 * 84.0, 256.0, 2.0 * 10.0 * 256.0, 10.0]);
}

#[test]
fn the_forward_pass_equals_the_layers_written_out_and_the_init_is_pytorchs() {
    let head = build("lenet5", "projection_dim = 16", &mnist()).unwrap();
    let p = head.init(&mut Rng::seed_from_u64(4));
    let t = p.tensors();
    // nn.Linear's bounds, 1/√fan_in, for weights and biases alike; drawn, not constant.
    for (i, fan_in) in [(8, 84.0), (9, 84.0), (10, 84.0), (11, 84.0), (12, 16.0), (13, 16.0)] {
        let bound = 1.0 / f64::sqrt(fan_in);
        let (lo, hi) = (t[i].min().double_value(&[]), t[i].max().double_value(&[]));
        assert!(-bound <= lo && hi <= bound && hi - lo > bound / 2.0, "tensor {i}: [{lo}, {hi}] vs ±{bound}");
    }
    let x = Tensor::rand([3, 1, 28, 28], (Kind::Float, Device::Cpu));
    let stacked: Vec<Tensor> = t.iter().map(|t| t.unsqueeze(0)).collect();
    let base = build("lenet5", "", &mnist()).unwrap();
    let h = base.features(&stacked[..8], &x.unsqueeze(0), &mut Mode::Eval).squeeze_dim(0);
    assert_eq!(h.size(), [3, 84]);
    let z = (h.matmul(&t[8].tr()) + &t[9]).relu().matmul(&t[10].tr()) + &t[11];
    let want = z.matmul(&t[12].tr()) + &t[13];
    let got = forward_one(&*head, t, &x, &mut Mode::Eval);
    assert!(f64::try_from((got - want).abs().max()).unwrap() < 1e-5);
    // The features of the wrapped model are z.
    let features = head.features(&stacked[..12], &x.unsqueeze(0), &mut Mode::Eval).squeeze_dim(0);
    assert!(f64::try_from((features - z).abs().max()).unwrap() < 1e-5);
}

#[test]
fn a_bad_width_names_the_key() {
    for value in ["-1", "2.5", "\"wide\""] {
        let err = build("mlp", &format!("projection_dim = {value}"), &mnist()).err().expect("refused").to_string();
        assert!(err.contains("exp.toml") && err.contains("model.projection_dim"), "{err}");
    }
    // 0 is no head at all.
    let plain = build("mlp", "projection_dim = 0", &mnist()).unwrap();
    assert_eq!(plain.structure(), build("mlp", "", &mnist()).unwrap().structure());
}
