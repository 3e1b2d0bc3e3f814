//! The real MNIST in the data directory (`fl data fetch mnist` puts it there; CI fetches it
//! before the tests). These tests fail, saying how to fetch it, when it is absent: a silent
//! skip would hide that the reader was never checked against the real files.

mod common;

use fl_core::tch::Kind;
use fl_data::{DataState, ImageDataset};

fn data_dir_with_mnist() -> std::path::PathBuf {
    let data_dir = fl_build::data_dir();
    let dir = ImageDataset::Mnist.default_dir(&data_dir);
    let files_there = fl_data::mnist::IDX_FILES.iter().all(|f| fl_data::idx::find(&dir, f).is_some());
    assert!(
        files_there,
        "the real MNIST is not in {}: run `fl data fetch mnist` (or `cargo run --release -p fl-data --example fetch -- mnist`) first",
        dir.display()
    );
    data_dir
}

#[test]
fn real_mnist_label_counts_are_the_canonical_ones() {
    let data_dir = data_dir_with_mnist();
    let info = fl_data::info("mnist", &data_dir).unwrap();
    let DataState::Present { train, test, train_per_class, .. } = info.state else { panic!("{info}") };
    assert_eq!((train, test), (60_000, 10_000));
    assert_eq!(train_per_class, vec![5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]);
    // The fetcher recognises the files by their SHA-256 and downloads nothing.
    if fl_data::mnist::IDX_FILES.iter().all(|f| ImageDataset::Mnist.default_dir(&data_dir).join(f).is_file()) {
        assert!(fl_data::fetch_mnist(&data_dir).unwrap().already_present);
    }
}

#[test]
fn real_mnist_normalised_train_tensor_has_mean_0_and_std_1() {
    let data_dir = data_dir_with_mnist();
    let data = common::build_dataset("mnist", "", &data_dir, 0).unwrap();
    assert_eq!(data.train.x.size(), vec![60_000, 1, 28, 28]);
    assert_eq!(data.test.x.size(), vec![10_000, 1, 28, 28]);
    let mean = data.train.x.mean(Kind::Double).double_value(&[]);
    let std = data.train.x.to_kind(Kind::Double).std(true).double_value(&[]);
    assert!(mean.abs() < 0.01, "mean {mean}");
    assert!((std - 1.0).abs() < 0.02, "std {std}");
}
