//! Host time of one forward + backward pass of a cohort against the same clients run as
//! cohorts of one: `cargo run --release -p fl-models --example cohort_step_time -- [model]
//! [clients] [batch] [steps]` (defaults `cnn3 5 64 20`; `resnet20` uses 3×32×32 inputs, the
//! others 1×28×28). The two variants alternate step by step, so that load from other processes
//! hits both alike; prints the median and the fastest milliseconds per step of the whole
//! cohort for each, with libtorch's default threads and with one thread.

use std::sync::Arc;
use std::time::Duration;

use fl_core::rng::{self, CohortNoise, TensorNoise};
use fl_core::tch::{Device, Kind, Reduction, Tensor};
use fl_core::{Builder, DataSpec, Mode, Model, Params, Registry};

use fl_models as _;

#[allow(clippy::disallowed_methods)] // reason: an example that measures host time
fn time(f: impl Fn()) -> Duration {
    let start = std::time::Instant::now();
    f();
    start.elapsed()
}

fn model(name: &str, spec: &DataSpec) -> Arc<dyn Model> {
    let registry = Registry::get().expect("registry");
    let Builder::Model(build) =
        registry.component(fl_core::ComponentKind::Model, name, "args", "model").expect("model").build
    else {
        unreachable!("registry keys builders by kind")
    };
    build(&Params::new("args", "model", toml::Table::new()), spec).expect("model builds")
}

/// One forward and backward pass of `clients` clients stacked in `state` on `x` `[C, B, ...]`.
fn step(model: &dyn Model, state: &[Tensor], trainable: &[bool], x: &Tensor, y: &Tensor) {
    let clients = x.size()[0];
    let inputs: Vec<Tensor> = state
        .iter()
        .zip(trainable)
        .map(|(t, &tr)| if tr { t.detach().set_requires_grad(true) } else { t.shallow_clone() })
        .collect();
    let mut noise = CohortNoise::new((0..clients as u64).map(TensorNoise::new).collect(), x.device());
    let logits = model.forward(&inputs, x, &mut Mode::train(&mut noise));
    let classes = logits.size()[2];
    let loss =
        logits.reshape([-1, classes]).cross_entropy_loss::<Tensor>(&y.reshape([-1]), None, Reduction::Mean, -100, 0.0);
    let leaves: Vec<&Tensor> = inputs.iter().zip(trainable).filter(|(_, tr)| **tr).map(|(t, _)| t).collect();
    let grads = Tensor::run_backward(&[loss], &leaves, false, false);
    assert_eq!(grads.len(), leaves.len());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: i64| args.get(i).map_or(default, |a| a.parse().expect("a number"));
    let name = args.first().map_or("cnn3", String::as_str);
    let (clients, batch, steps) = (arg(1, 5), arg(2, 64), arg(3, 20) as usize);
    let input_shape = if name == "resnet20" { vec![3, 32, 32] } else { vec![1, 28, 28] };
    let spec = DataSpec { input_shape: input_shape.clone(), classes: 10, vocab_size: None };
    let model = model(name, &spec);
    let trainable = model.structure().trainable();
    let states: Vec<Vec<Tensor>> =
        (0..clients as u64).map(|c| model.init(&mut rng::stream(1, &[c])).into_tensors()).collect();
    let stacked: Vec<Tensor> = (0..trainable.len())
        .map(|i| Tensor::stack(&states.iter().map(|s| s[i].shallow_clone()).collect::<Vec<_>>(), 0))
        .collect();
    let mut shape = vec![clients, batch];
    shape.extend(&input_shape);
    let x = TensorNoise::new(2).uniform(&shape, Device::Cpu) * 2.0 - 1.0;
    let y = (TensorNoise::new(3).uniform(&[clients, batch], Device::Cpu) * 10.0).to_kind(Kind::Int64);
    let singles: Vec<Vec<Tensor>> = states.iter().map(|s| s.iter().map(|t| t.unsqueeze(0)).collect()).collect();
    let cohort = || step(&*model, &stacked, &trainable, &x, &y);
    let alone = || {
        for (c, s) in singles.iter().enumerate() {
            let c = c as i64;
            step(&*model, s, &trainable, &x.narrow(0, c, 1), &y.narrow(0, c, 1));
        }
    };
    for threads in [tch::get_num_threads(), 1] {
        tch::set_num_threads(threads);
        println!("{name}: {clients} clients, batch {batch}, input {input_shape:?}, {threads} torch threads");
        for _ in 0..3 {
            cohort();
            alone();
        }
        let mut times = [Vec::new(), Vec::new()];
        for _ in 0..steps {
            times[0].push(time(cohort));
            times[1].push(time(alone));
        }
        for (label, mut t) in ["one cohort", "cohorts of one"].into_iter().zip(times) {
            t.sort();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!("  {label:>14}: median {:8.2} ms, fastest {:8.2} ms per step", ms(t[t.len() / 2]), ms(t[0]));
        }
    }
}
