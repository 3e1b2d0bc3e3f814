//! Writers of small files in the official formats (written here byte by byte, independently of
//! the crate's readers) and a helper that builds a registered dataset component.

#![allow(dead_code)] // reason: each test binary uses a different subset of these helpers

use std::io::Write;
use std::path::Path;

use fl_core::registry::{Builder, ComponentKind, DataContext, Params, Registry};
use fl_core::tch::Device;
use fl_core::{FederatedData, Result};

/// Bytes of an IDX image file: magic 0x00000803, count, rows, cols (big-endian), pixels.
pub fn idx_images(count: u32, rows: u32, cols: u32, pixels: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, 8, 3];
    for d in [count, rows, cols] {
        b.extend_from_slice(&d.to_be_bytes());
    }
    b.extend_from_slice(pixels);
    b
}

/// Bytes of an IDX label file: magic 0x00000801, count, labels.
pub fn idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, 8, 1];
    b.extend_from_slice(&(labels.len() as u32).to_be_bytes());
    b.extend_from_slice(labels);
    b
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

pub fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Pixel `p` (0..784) of 28x28 image `i` in the test pattern: distinct and easy to recompute.
pub fn mnist_pixel(i: usize, p: usize) -> u8 {
    ((i * 31 + p * 7) % 256) as u8
}

/// Writes a tiny MNIST-layout directory: `train` and `test` samples with labels `i % 10`;
/// the train files raw, the test files gzipped (both forms must load).
pub fn write_tiny_mnist(dir: &Path, train: usize, test: usize) {
    let images = |n: usize| -> Vec<u8> { (0..n).flat_map(|i| (0..784).map(move |p| mnist_pixel(i, p))).collect() };
    let labels = |n: usize| -> Vec<u8> { (0..n).map(|i| (i % 10) as u8).collect() };
    write(&dir.join("train-images-idx3-ubyte"), &idx_images(train as u32, 28, 28, &images(train)));
    write(&dir.join("train-labels-idx1-ubyte"), &idx_labels(&labels(train)));
    write(&dir.join("t10k-images-idx3-ubyte.gz"), &gzip(&idx_images(test as u32, 28, 28, &images(test))));
    write(&dir.join("t10k-labels-idx1-ubyte.gz"), &gzip(&idx_labels(&labels(test))));
}

/// One CIFAR record's pixels: plane c (R, G, B), row r, column x hold `cifar_pixel(i, c, r, x)`.
pub fn cifar_pixel(i: usize, c: usize, r: usize, x: usize) -> u8 {
    ((i * 13 + c * 100 + r * 3 + x) % 256) as u8
}

/// The 3072 pixel bytes of record `i`: R plane, G plane, B plane, each 32x32 row-major.
pub fn cifar_pixels(i: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(3072);
    for c in 0..3 {
        for r in 0..32 {
            for x in 0..32 {
                b.push(cifar_pixel(i, c, r, x));
            }
        }
    }
    b
}

/// A CIFAR-10 file of records `first..first + n` with label `i % 10`.
pub fn cifar10_file(first: usize, n: usize) -> Vec<u8> {
    (first..first + n).flat_map(|i| std::iter::once((i % 10) as u8).chain(cifar_pixels(i))).collect()
}

/// A CIFAR-100 file of records `first..first + n`: coarse label `i % 20`, fine label `(i * 7) % 100`.
pub fn cifar100_file(first: usize, n: usize) -> Vec<u8> {
    (first..first + n)
        .flat_map(|i| [(i % 20) as u8, ((i * 7) % 100) as u8].into_iter().chain(cifar_pixels(i)))
        .collect()
}

/// Writes CIFAR-10 into `dir`: 2 records per training batch (10 in all), 3 test records.
pub fn write_tiny_cifar10(dir: &Path) {
    for b in 0..5 {
        write(&dir.join(format!("data_batch_{}.bin", b + 1)), &cifar10_file(2 * b, 2));
    }
    write(&dir.join("test_batch.bin"), &cifar10_file(100, 3));
}

/// Writes CIFAR-100 into `dir`: 4 train records, 2 test records.
pub fn write_tiny_cifar100(dir: &Path) {
    write(&dir.join("train.bin"), &cifar100_file(0, 4));
    write(&dir.join("test.bin"), &cifar100_file(50, 2));
}

/// Builds the registered dataset `name` with parameters `table` (TOML) on the CPU.
pub fn build_dataset(name: &str, table: &str, data_dir: &Path, seed: u64) -> Result<FederatedData> {
    let registry = Registry::get()?;
    let component = registry.component(ComponentKind::Dataset, name, "test.toml", "dataset.name")?;
    let params = Params::new("test.toml", "dataset", table.parse::<toml::Table>().unwrap());
    let ctx = DataContext { data_dir: data_dir.to_path_buf(), device: Device::Cpu, seed };
    match component.build {
        Builder::Dataset(f) => f(&params, &ctx),
        _ => unreachable!("looked up as a dataset"),
    }
}

/// Builds the registered partitioner `name` with parameters `table` (TOML).
pub fn build_partitioner(name: &str, table: &str) -> Result<Box<dyn fl_core::Partitioner>> {
    let registry = Registry::get()?;
    let component = registry.component(ComponentKind::Partitioner, name, "test.toml", "partition.name")?;
    let params = Params::new("test.toml", "partition", table.parse::<toml::Table>().unwrap());
    match component.build {
        Builder::Partitioner(f) => f(&params),
        _ => unreachable!("looked up as a partitioner"),
    }
}

/// One AG News CSV record as the official files write it: every field in double quotes, a
/// quote inside a field doubled, `\n` at the end.
pub fn agnews_record(class: &str, title: &str, description: &str) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    format!("{},{},{}\n", quote(class), quote(title), quote(description))
}

/// A whole AG News CSV file of `(class, title, description)` records.
pub fn agnews_csv(records: &[(&str, &str, &str)]) -> String {
    records.iter().map(|(c, t, d)| agnews_record(c, t, d)).collect()
}

/// The tiny AG News corpus of the `agnews` tests: texts (title + " " + description) and their
/// `basic_english` tokens are
/// - train: "cat cat sat" (class 1), "dog the cat" (2), `a "dog" sat, ok` (3) →
///   [cat cat sat], [dog the cat], [a dog sat , ok];
/// - test: "zebra cat" (4), "the zebra zebra" (2) → [zebra cat], [the zebra zebra].
pub const TINY_AGNEWS_TRAIN: [(&str, &str, &str); 3] =
    [("1", "cat cat", "sat"), ("2", "dog", "the cat"), ("3", "a \"dog\"", "sat, ok")];
pub const TINY_AGNEWS_TEST: [(&str, &str, &str); 2] = [("4", "zebra", "cat"), ("2", "the zebra", "zebra")];

/// Writes [`TINY_AGNEWS_TRAIN`] and [`TINY_AGNEWS_TEST`] as `train.csv` and `test.csv` in `dir`.
pub fn write_tiny_agnews(dir: &Path) {
    write(&dir.join("train.csv"), agnews_csv(&TINY_AGNEWS_TRAIN).as_bytes());
    write(&dir.join("test.csv"), agnews_csv(&TINY_AGNEWS_TEST).as_bytes());
}
