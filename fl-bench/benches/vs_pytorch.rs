//! Local-training throughput of our loop against the same loop written in PyTorch with the
//! same torch wheel, same machine, same process tree, one intra-op thread each. Prints both in
//! samples/s and their ratio.

use std::path::PathBuf;
use std::process::Command;

use fl_bench::{BATCH, LR, MlpWorkload};

#[allow(clippy::disallowed_methods)] // reason: a benchmark measures host time
fn time<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let start = std::time::Instant::now();
    let out = f();
    (out, start.elapsed().as_secs_f64())
}

fn main() {
    fl_core::tch::set_num_threads(1);
    let samples = 6000;
    let epochs = 5;
    let w = MlpWorkload::new(samples);
    w.epoch(0); // warm-up
    let (_, secs) = time(|| (1..=epochs).map(|e| w.epoch(e)).sum::<f64>());
    let ours = (samples as u64 * epochs) as f64 / secs;

    let libtorch = PathBuf::from(std::env::var("LIBTORCH").expect("LIBTORCH is set by .cargo/config.toml"));
    let site = libtorch.canonicalize().expect("libtorch exists").parent().expect("site-packages").to_path_buf();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/train_loop.py");
    let out = Command::new("python3")
        .arg(&script)
        .args(["--samples", &samples.to_string(), "--epochs", &epochs.to_string()])
        .args(["--batch", &BATCH.to_string(), "--lr", &LR.to_string()])
        .env("PYTHONPATH", &site)
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "train_loop.py failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let theirs: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("samples_per_s "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected output from train_loop.py: {stdout}"));
    println!("local training, MLP 784-200-10, batch {BATCH}, {samples} samples x {epochs} epochs, 1 thread");
    println!("  fl (Rust, tch)       {ours:>10.0} samples/s");
    println!("  PyTorch (same wheel) {theirs:>10.0} samples/s");
    println!("  ratio fl / PyTorch   {:>10.3}", ours / theirs);
}
