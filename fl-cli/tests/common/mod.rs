//! Small dataset files in the official formats, for end-to-end runs of the base experiments
//! (the real CIFAR and AG News are in no package registry), and the small non-IID MNIST
//! federation that the FedASMU tests share.

#![allow(dead_code)] // Each test crate uses some of the writers.

use std::path::Path;
use std::process::Command;

use fl_core::tch::Device;
use fl_core::{Experiment, RunOptions};

/// Runs the experiment `text` as `<out>/<name>.toml` on CPU with the data in `data_dir`, into
/// `<out>/<name>`, and returns its summary.
pub fn run_experiment(text: &str, name: &str, data_dir: &Path, out: &Path) -> serde_json::Value {
    let file = out.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    let dir = out.join(name);
    let o = Command::new(env!("CARGO_BIN_EXE_fl"))
        .args(["run", file.to_str().unwrap(), "--quiet", "--workers", "2", "--device", "cpu", "--out"])
        .arg(&dir)
        .env("FL_DATA_DIR", data_dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// Writes CIFAR-10's binary files into `dir`: `n` training records over 5 batches and `n / 5`
/// test records; the label is the record index mod 10 and the pixels encode the label.
pub fn write_cifar10(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let record = |i: usize| {
        let label = (i % 10) as u8;
        let mut r = vec![label];
        r.extend((0..3072).map(|p| label.wrapping_mul(25).wrapping_add((p % 7) as u8 + (i % 3) as u8)));
        r
    };
    for b in 0..5 {
        let bytes: Vec<u8> = (b * n / 5..(b + 1) * n / 5).flat_map(record).collect();
        std::fs::write(dir.join(format!("data_batch_{}.bin", b + 1)), bytes).unwrap();
    }
    std::fs::write(dir.join("test_batch.bin"), (0..n / 5).flat_map(record).collect::<Vec<u8>>()).unwrap();
}

/// Writes AG News `train.csv` and `test.csv`: the class's keyword in a few words of filler.
pub fn write_agnews(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let words = ["world", "sports", "business", "science"];
    let csv = |count: usize| -> String {
        (0..count)
            .map(|i| {
                let class = i % 4;
                format!(
                    "\"{}\",\"News, {} today\",\"The \"\"{}\"\" story ({i}).\"\n",
                    class + 1,
                    words[class],
                    words[class]
                )
            })
            .collect()
    };
    std::fs::write(dir.join("train.csv"), csv(n)).unwrap();
    std::fs::write(dir.join("test.csv"), csv(n / 5)).unwrap();
}

/// Writes CIFAR-100's `train.bin` and `test.bin` into `dir`: `n` training records and `n / 5`
/// test records; the fine label is the record index mod 100, the coarse one its fifth, and the
/// pixels encode the fine label.
pub fn write_cifar100(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let record = |i: usize| {
        let fine = (i % 100) as u8;
        let mut r = vec![fine / 5, fine];
        r.extend((0..3072).map(|p| fine.wrapping_mul(7).wrapping_add((p % 5) as u8)));
        r
    };
    std::fs::write(dir.join("train.bin"), (0..n).flat_map(record).collect::<Vec<u8>>()).unwrap();
    std::fs::write(dir.join("test.bin"), (0..n / 5).flat_map(record).collect::<Vec<u8>>()).unwrap();
}

/// `method` on 6,000 MNIST samples split among `clients` clients (Dirichlet α = 0.5, at least
/// 20 samples each), an MLP 784-64-10, SGD at lr 0.05 in batches of 32, seed 2; `rest` goes on
/// inside `[trainer]` and may open later sections.
pub fn mnist_experiment(method: &str, clients: usize, rest: &str) -> Experiment {
    let text = format!(
        r#"
        seed = 2
        clients = {clients}
        method = "{method}"
        [dataset]
        name = "mnist"
        train_samples = 6000
        test_samples = 2000
        [partition]
        name = "dirichlet"
        alpha = 0.5
        min_samples = 20
        [model]
        name = "mlp"
        hidden = [64]
        [trainer]
        lr = 0.05
        batch_size = 32
        {rest}
        "#
    );
    Experiment::parse(&text, method).unwrap()
}

/// CPU, two workers, the data cache.
pub fn options() -> RunOptions {
    RunOptions { device: Device::Cpu, workers: 2, data_dir: fl_build::data_dir() }
}
