//! What autograd costs a small model's step: `cargo run --release -p fl-bench --example step_cost
//! -- [batch] [clients] [steps]` (defaults `32 1 3000`) times, on one CPU thread, the forward and
//! backward pass of the kdd23 MLP (784-200-10, dropout 0.5 before the ReLU) with the trainer's
//! weighted cross-entropy, once through autograd and once through the model's hand-derived
//! gradients ([`fl_core::Model::loss_gradients`]), each client with its own noise stream, and
//! prints the largest difference between the two gradients of each tensor.

use fl_cli as _;
use fl_core::Mode;
use fl_core::rng::{CohortNoise, TensorNoise};
use fl_core::tch::{Device, Kind, Tensor};
use fl_core::trainer::sgd::cross_entropy;

use fl_algos as _;
use fl_data as _;
use fl_models as _;

/// Microseconds per call of `f`, after 50 calls to warm up.
#[allow(clippy::disallowed_methods)] // reason: an example that measures host time
fn micros_per_call(calls: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..50 {
        f();
    }
    let start = std::time::Instant::now();
    for _ in 0..calls {
        f();
    }
    start.elapsed().as_secs_f64() * 1e6 / calls as f64
}

fn main() {
    fl_core::tch::set_num_threads(1);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: i64| args.get(i).map_or(default, |a| a.parse().expect("a number"));
    let (b, k, steps) = (arg(0, 32), arg(1, 1), arg(2, 3000) as usize);
    let model = fl_bench::mnist_mlp("hidden = [200]\ndropout = 0.5");
    let opts = (Kind::Float, Device::Cpu);
    let data = Tensor::rand([6000, 1, 28, 28], opts);
    let labels = Tensor::randint(10, [6000], (Kind::Int64, Device::Cpu));
    let params: Vec<Tensor> = [vec![k, 200, 784], vec![k, 200], vec![k, 10, 200], vec![k, 10]]
        .iter()
        .map(|s| Tensor::randn(s, opts) * 0.01)
        .collect();
    let index = Tensor::randint(6000, [k * b], (Kind::Int64, Device::Cpu));
    let weights = Tensor::full([k, b], 1.0 / b as f64, opts);
    let streams = || CohortNoise::new((0..k as u64).map(TensorNoise::new).collect(), Device::Cpu);
    let batch = || (data.index_select(0, &index).reshape([k, b, 1, 28, 28]), labels.index_select(0, &index));

    let (mut noise, mut by_autograd) = (streams(), Vec::new());
    let autograd = micros_per_call(steps, || {
        let (x, y) = batch();
        let leaves: Vec<Tensor> = params.iter().map(|p| p.detach().set_requires_grad(true)).collect();
        let logits = model.forward(&leaves, &x, &mut Mode::train(&mut noise));
        let loss = cross_entropy(&logits, &y, &weights).sum(Kind::Float);
        by_autograd = Tensor::run_backward(&[loss], &leaves.iter().collect::<Vec<_>>(), false, false);
    });
    let (mut noise, mut by_hand) = (streams(), Vec::new());
    let hand = micros_per_call(steps, || {
        let (x, y) = batch();
        let found =
            fl_core::tch::no_grad(|| model.loss_gradients(&params, &x, &y, &weights, &mut Mode::train(&mut noise)));
        by_hand = found.expect("the mlp has hand-derived gradients").grads;
    });
    println!("MLP 784-200-10, dropout 0.5, {k} client(s), batch {b}, one thread: µs per forward + backward");
    println!("  autograd   {autograd:8.1}");
    println!("  by hand    {hand:8.1}  ({:.2}x)", autograd / hand);
    let diffs: Vec<String> = by_autograd
        .iter()
        .zip(&by_hand)
        .map(|(a, h)| format!("{:.1e}", (a - h).abs().max().double_value(&[])))
        .collect();
    println!("  largest gradient difference per tensor: {}", diffs.join(", "));
}
