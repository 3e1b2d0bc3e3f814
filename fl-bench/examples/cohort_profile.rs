//! Where a cohort step's time goes on a device: `cargo run --release -p fl-bench --example
//! cohort_profile -- [cpu|cuda] [clients] [batch] [steps]` (defaults `cuda 670 128 10`: the
//! kdd23 MNIST column packed, 67 runs of 10 clients). Times, with the device synchronised
//! around each part, the parts of one SGD step of the kdd23 model (MLP 784-200-10 with
//! dropout 0.5 and an elementwise gradient mask on `fc1.weight`) for a whole cohort: the
//! batch gather, the dropout noise, the forward pass with the loss, the backward pass and the
//! masked update; then one large matrix product for the device's FLOP/s.

use fl_core::Mode;
use fl_core::rng::{CohortNoise, TensorNoise};
use fl_core::tch::{Cuda, Device, Kind, Tensor};
use fl_core::trainer::sgd::cross_entropy;

use fl_algos as _;
use fl_data as _;
use fl_models as _;

#[allow(clippy::disallowed_methods)] // reason: an example that measures host time
fn timed(device: Device, steps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let sync = || {
        if let Device::Cuda(i) = device {
            Cuda::synchronize(i as i64);
        }
    };
    sync();
    let start = std::time::Instant::now();
    for _ in 0..steps {
        f();
    }
    sync();
    start.elapsed().as_secs_f64() * 1e3 / steps as f64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = if args.first().is_none_or(|d| d == "cuda") { Device::Cuda(0) } else { Device::Cpu };
    let arg = |i: usize, default: i64| args.get(i).map_or(default, |a| a.parse().expect("a number"));
    let (k, b, steps) = (arg(1, 670), arg(2, 128), arg(3, 10) as usize);
    let model = fl_bench::mnist_mlp("hidden = [200]\ndropout = 0.5");
    let opts = (Kind::Float, device);
    let data = Tensor::rand([60_000, 1, 28, 28], opts);
    let labels = Tensor::randint(10, [60_000], (Kind::Int64, device));
    let params: Vec<Tensor> = [vec![k, 200, 784], vec![k, 200], vec![k, 10, 200], vec![k, 10]]
        .iter()
        .map(|s| Tensor::randn(s, opts) * 0.01)
        .collect();
    let mask = Tensor::rand([k, 200, 784], opts).ge(0.5).to_kind(Kind::Float);
    let step_size = Tensor::full([k, 1, 1], 0.01, opts);
    let index = Tensor::randint(60_000, [k * b], (Kind::Int64, device));
    let x = data.index_select(0, &index).reshape([k, b, 1, 28, 28]);
    let y = labels.index_select(0, &index);
    let mut noise = CohortNoise::new((0..k as u64).map(TensorNoise::new).collect(), device);
    let weights = Tensor::full([k, b], 1.0 / b as f64, opts);

    let gather = timed(device, steps, || {
        let _ = data.index_select(0, &index).reshape([k, b, 1, 28, 28]);
        let _ = labels.index_select(0, &index);
    });
    let dropout = timed(device, steps, || {
        let _ = noise.dropout_mask(&[k, b, 200], 0.5);
    });
    let loss_of = |inputs: &[Tensor], noise: &mut CohortNoise| {
        let mut mode = Mode::train(noise);
        let logits = model.forward(inputs, &x, &mut mode);
        cross_entropy(&logits, &y, &weights).sum(Kind::Float)
    };
    let forward = timed(device, steps, || {
        let _ = loss_of(&params, &mut noise);
    });
    let mut grads = Vec::new();
    let backward = timed(device, steps, || {
        let leaves: Vec<Tensor> = params.iter().map(|p| p.detach().set_requires_grad(true)).collect();
        let loss = loss_of(&leaves, &mut noise);
        grads = Tensor::run_backward(&[loss], &leaves.iter().collect::<Vec<_>>(), false, false);
    }) - forward;
    let mut ps: Vec<Tensor> = params.iter().map(Tensor::copy).collect();
    let update = timed(device, steps, || {
        fl_core::tch::no_grad(|| {
            for (i, (p, g)) in ps.iter_mut().zip(&grads).enumerate() {
                let mut g = g.shallow_clone();
                if i == 0 {
                    g *= &mask;
                }
                let step = if g.dim() == 3 { -&step_size } else { (-&step_size).squeeze_dim(-1) };
                let _ = p.addcmul_(&g, &step);
            }
        })
    });
    let n = 4096;
    let (a, c) = (Tensor::rand([n, n], opts), Tensor::rand([n, n], opts));
    let matmul = timed(device, steps, || {
        let _ = a.matmul(&c);
    });
    let gflops = 2.0 * (n * n * n) as f64 / matmul / 1e6;
    let fwd_flops = 2.0 * (k * b) as f64 * (784.0 * 200.0 + 200.0 * 10.0);
    println!("{device:?}: cohort of {k} clients, batch {b}: ms per step");
    println!("  gather   {gather:8.3}");
    println!("  dropout  {dropout:8.3}  (noise for [{k}, {b}, 200])");
    println!("  forward  {forward:8.3}  (with dropout and the loss; {:.1} GFLOP)", fwd_flops / 1e9);
    println!("  backward {backward:8.3}");
    println!("  update   {update:8.3}  (the mask, the step)");
    println!("  total    {:8.3}", gather + forward + backward + update);
    println!(
        "  4096^3 matmul: {gflops:.0} GFLOP/s; the step's forward + backward at that rate: {:.3} ms",
        3.0 * fwd_flops / gflops / 1e6
    );
}
