//! End-to-end throughput, each figure a ratio against a reference measured in the same run:
//!
//! - (a) FedAvg on real MNIST (`experiments/fedavg-mnist-iid.toml`) against the same experiment
//!   as a plain PyTorch loop (`scripts/fedavg_loop.py`, same torch wheel, same thread count);
//! - (b) the kdd23 `full` MNIST cell (`experiments/kdd23-cell.toml`, 3 of its 200 rounds) in
//!   cohorts (`batching = "on"`, as many cohorts as workers) against per-client training
//!   (`"off"`), and the per-client loop against the loop it replaced (one client's epoch, in
//!   this process);
//! - (c) where CUDA is available, (a) and (b) on the GPU against the CPU;
//! - (d) the FLOP efficiency of the kdd23 cell: its useful FLOP/s (forward and weight gradients,
//!   twice the forward FLOPs of each sample pass, from the model's shapes) over the FLOP/s of
//!   one large matrix product on the same device and threads, and (a)'s useful FLOPs at that
//!   product's rate: the highest ratio (a) could reach on this machine;
//! - (e) on CUDA, 8 kdd23 cells (the cell at 8 seeds) as one pack (`fl pack`, their cohorts
//!   merged) against the cell alone: rounds per second summed over the runs.
//!
//! Wall times exclude data loading on both sides. Each time is the fastest of [`REPEATS`] runs
//! taken in turn (ours, then the reference, then ours again, …), and the product's rate the
//! highest of as many: a busy moment of a shared machine slows one run, not one side of a
//! ratio. Run it while nothing else uses the machine.

use std::path::PathBuf;
use std::process::Command;

use fl_bench::MlpWorkload;
use fl_core::engine::cohort::Batching;
use fl_core::engine::pack::RunPack;
use fl_core::tch::{Cuda, Device, Kind, Tensor};
use fl_core::trainer::reference::ReferenceSgd;
use fl_core::{Experiment, RunOptions};

use fl_algos as _;
// `fl`'s allocator (mimalloc, which also serves libtorch's tensors): the figures are `fl`'s.
use fl_cli as _;
use fl_data as _;
use fl_models as _;

/// Runs behind each figure: the fastest counts (noise only slows a run down).
const REPEATS: usize = 3;

#[allow(clippy::disallowed_methods)] // reason: a benchmark measures host time
fn time<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let start = std::time::Instant::now();
    let out = f();
    (out, start.elapsed().as_secs_f64())
}

/// `path` inside fl-bench: `FL_BENCH_DIR` when set (a bench binary copied to another machine
/// without its source tree's path), else the crate's directory at build time.
fn here(path: &str) -> PathBuf {
    let dir = std::env::var_os("FL_BENCH_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    dir.join(path)
}

/// Wall seconds of the simulation (after its data is loaded), the final accuracy and the
/// aggregations; with cohorts, as many as there are workers (one on CUDA).
fn simulate(file: &str, device: Device, workers: usize, batching: Batching) -> (f64, f64, u64) {
    let path = here(file);
    let mut experiment = Experiment::from_file(&path).expect("benchmark experiment parses");
    experiment.run.batching = batching;
    if !device.is_cuda() {
        experiment.run.max_cohort = Some(experiment.clients.div_ceil(workers));
    }
    let opts = RunOptions { device, workers, data_dir: fl_build::data_dir() };
    let mut sim = experiment.build(&opts).expect("benchmark experiment builds (MNIST fetched by setup)");
    let (summary, secs) = time(|| sim.run(&mut ()).expect("benchmark run"));
    (secs, summary.final_accuracy, summary.aggregations)
}

/// Rounds per second of `runs` kdd23 cells (seeds 1, 2, …) in one pack on `device`, summed
/// over the runs (data loading excluded).
fn packed_cells(device: Device, runs: u64) -> f64 {
    let opts = RunOptions { device, workers: 1, data_dir: fl_build::data_dir() };
    let pack = RunPack::new();
    let mut sims = Vec::new();
    for seed in 1..=runs {
        let mut e = Experiment::from_file(&here("experiments/kdd23-cell.toml")).expect("benchmark experiment parses");
        e.seed = seed;
        sims.push(e.build_in(&opts, &pack).expect("benchmark experiment builds"));
    }
    let (rounds, secs) = time(|| {
        std::thread::scope(|s| {
            let runs: Vec<_> = sims
                .iter_mut()
                .map(|sim| s.spawn(move || sim.run(&mut ()).expect("benchmark run").aggregations))
                .collect();
            runs.into_iter().map(|r| r.join().expect("run thread")).sum::<u64>()
        })
    });
    rounds as f64 / secs
}

/// The PyTorch loop's seconds and final accuracy.
fn pytorch_fedavg(device: &str, threads: usize) -> (f64, f64) {
    let libtorch = PathBuf::from(std::env::var("LIBTORCH").expect("LIBTORCH is set by .cargo/config.toml"));
    let site = libtorch.canonicalize().expect("libtorch exists").parent().expect("site-packages").to_path_buf();
    let out = Command::new("python3")
        .arg(here("scripts/fedavg_loop.py"))
        .args(["--data", &fl_build::data_dir().join("mnist").display().to_string()])
        .args(["--threads", &threads.to_string(), "--device", device])
        .env("PYTHONPATH", &site)
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "fedavg_loop.py failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = |key: &str| -> f64 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no `{key}` in the output of fedavg_loop.py: {stdout}"))
    };
    (value("seconds "), value("accuracy "))
}

/// FLOP/s of a 2048×2048 by 2048×2048 product on `device` with the current thread count.
fn matmul_flops(device: Device) -> f64 {
    let n = 2048;
    let a = Tensor::ones([n, n], (Kind::Float, device)) * 0.5;
    let b = Tensor::ones([n, n], (Kind::Float, device)) * 0.25;
    let run = |reps| {
        let mut acc = Tensor::zeros([], (Kind::Float, device));
        for _ in 0..reps {
            acc += a.matmul(&b).sum(Kind::Float);
        }
        acc.double_value(&[])
    };
    run(2);
    let reps = if device.is_cuda() { 50 } else { 4 };
    let secs = (0..REPEATS).map(|_| time(|| run(reps)).1).fold(f64::INFINITY, f64::min);
    reps as f64 * 2.0 * (n * n * n) as f64 / secs
}

/// Useful FLOPs of one round of the kdd23 cell: every MNIST training sample passes 5 times
/// (full participation, 5 local epochs) through the MLP 784-200-10, whose forward costs
/// 2·(784·200 + 200·10) + 210 FLOPs; forward and weight gradients are twice that.
fn kdd23_round_flops() -> f64 {
    60_000.0 * 5.0 * 2.0 * MLP_FORWARD_FLOPS
}

/// Forward FLOPs of one sample through the MLP 784-200-10 of (a) and the kdd23 cell: a
/// multiply-add is 2 FLOPs, a bias addition 1.
const MLP_FORWARD_FLOPS: f64 = 2.0 * (784.0 * 200.0 + 200.0 * 10.0) + 210.0;

/// Useful FLOPs of benchmark (a): 10 rounds in which every MNIST training sample passes once
/// through the MLP 784-200-10 (forward and weight gradients, twice the forward), and the test
/// set's 10,000 samples are evaluated once (forward only).
fn fedavg_flops() -> f64 {
    10.0 * (60_000.0 * 2.0 * MLP_FORWARD_FLOPS + 10_000.0 * MLP_FORWARD_FLOPS)
}

fn report(device: Device, workers: usize) {
    let name = if device.is_cuda() { "cuda" } else { "cpu" };
    println!("\n== {name}, {workers} worker(s) ==");
    let fedavg = |batching| simulate("experiments/fedavg-mnist-iid.toml", device, workers, batching);
    let (mut ours, mut off, mut theirs) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    let (mut acc, mut their_acc) = (f64::NAN, f64::NAN);
    for _ in 0..REPEATS {
        let (secs, a, _) = fedavg(Batching::On);
        (ours, acc) = (ours.min(secs), a);
        off = off.min(fedavg(Batching::Off).0);
        let (secs, a) = pytorch_fedavg(name, workers);
        (theirs, their_acc) = (theirs.min(secs), a);
    }
    println!("(a) FedAvg MNIST MLP, 10 clients IID, batch 64, 10 rounds (accuracy {acc:.4}; PyTorch {their_acc:.4})");
    println!("    fl, cohorts          {ours:>8.2} s");
    println!("    fl, per client       {off:>8.2} s");
    println!("    PyTorch loop         {theirs:>8.2} s");
    println!("    ratio PyTorch / fl   {:>8.2}x (per client: {:.2}x)", theirs / ours, theirs / off);

    let cell = |batching| simulate("experiments/kdd23-cell.toml", device, workers, batching);
    let (mut cohort_s, mut alone_s, mut rounds) = (f64::INFINITY, f64::INFINITY, 0);
    for _ in 0..REPEATS {
        let (secs, _, r) = cell(Batching::On);
        (cohort_s, rounds) = (cohort_s.min(secs), r);
        alone_s = alone_s.min(cell(Batching::Off).0);
    }
    let rounds = rounds as f64;
    println!("(b) kdd23 cell (RAM-Fed L, MNIST α = 0.1, 10 clients x 5 epochs), {rounds} rounds");
    println!("    cohorts              {:>8.3} rounds/s", rounds / cohort_s);
    println!("    per client           {:>8.3} rounds/s", rounds / alone_s);
    println!("    ratio                {:>8.2}x", alone_s / cohort_s);
    if !device.is_cuda() {
        fl_core::tch::set_num_threads(1);
        let w = MlpWorkload::new(6000);
        let reference = ReferenceSgd::new(w.trainer.config().clone());
        let (_, now) = time(|| (0..3).map(|e| w.epoch(e)).sum::<f64>());
        let (_, before) = time(|| (0..3).map(|e| w.epoch_with(&reference, e)).sum::<f64>());
        println!("    one client's epoch (6000 samples, batch 32): {:.2}x the loop it replaced", before / now);
    }

    fl_core::tch::set_num_threads(if device.is_cuda() { 1 } else { workers as i32 });
    let peak = matmul_flops(device);
    let useful = kdd23_round_flops() * rounds / cohort_s.min(alone_s);
    println!("(d) kdd23 cell FLOP efficiency (faster mode)");
    println!("    useful               {:>8.1} GFLOP/s", useful / 1e9);
    println!("    2048^3 matmul        {:>8.1} GFLOP/s", peak / 1e9);
    println!("    efficiency           {:>8.1} %", 100.0 * useful / peak);
    // How far (a)'s ratio can go here: its useful work at the product's rate, no overhead.
    let floor = fedavg_flops() / peak;
    println!("    (a) at that rate     {floor:>8.2} s: at most {:.2}x the PyTorch loop", theirs / floor);
    if device.is_cuda() {
        let packed = packed_cells(device, 8);
        println!("(e) 8 kdd23 cells in one pack (seeds 1-8), their cohorts merged");
        println!("    pack                 {packed:>8.3} rounds/s (all runs)");
        println!("    ratio to one alone   {:>8.2}x", packed * cohort_s / rounds);
    }
}

fn main() {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    report(Device::Cpu, workers);
    if Cuda::is_available() {
        // (c): the same figures on the GPU; compare them with the CPU's above.
        report(Device::Cuda(0), workers);
    } else {
        println!("\n(c) no CUDA device: GPU figures skipped");
    }
}
