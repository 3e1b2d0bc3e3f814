//! The readers of the official formats on small files written by the tests themselves (IDX raw
//! and gzipped, CIFAR-10 and CIFAR-100 binary), the tensors the dataset components build from
//! them, and the error messages for broken or missing files.

mod common;

use common::*;
use fl_core::tch::{Kind, Tensor};
use fl_data::cifar::{self, Cifar100Labels};
use fl_data::{DataError, idx, mnist};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap()
}

fn labels(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t).unwrap()
}

#[test]
fn idx_round_trip_raw_and_gzipped() {
    let dir = tmp();
    let pixels: Vec<u8> = (0..2 * 3 * 4).map(|v| v as u8 * 10).collect();
    let raw = dir.path().join("images");
    let gz = dir.path().join("images.gz");
    write(&raw, &idx_images(2, 3, 4, &pixels));
    write(&gz, &gzip(&idx_images(2, 3, 4, &pixels)));
    for path in [&raw, &gz] {
        let im = idx::read_images(path).unwrap();
        assert_eq!((im.count, im.rows, im.cols), (2, 3, 4));
        assert_eq!(im.pixels, pixels);
    }
    let lab = dir.path().join("labels.gz");
    write(&lab, &gzip(&idx_labels(&[3, 1, 4])));
    assert_eq!(idx::read_labels(&lab).unwrap(), vec![3, 1, 4]);
    // `find` prefers the raw file and falls back to the `.gz` one.
    assert_eq!(idx::find(dir.path(), "images"), Some(raw));
    assert_eq!(idx::find(dir.path(), "labels"), Some(lab));
    assert_eq!(idx::find(dir.path(), "absent"), None);
}

#[test]
fn bad_magic_names_the_file_and_the_expected_magic() {
    let dir = tmp();
    let path = dir.path().join("train-images-idx3-ubyte");
    // A label file where images are expected.
    write(&path, &idx_labels(&[1, 2]));
    let err = idx::read_images(&path).unwrap_err().to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("0x00000803") && err.contains("0x00000801"), "{err}");
}

#[test]
fn truncated_and_padded_idx_files_are_errors_naming_the_sizes() {
    let dir = tmp();
    let path = dir.path().join("short");
    let mut bytes = idx_images(2, 28, 28, &[0; 2 * 784]);
    bytes.truncate(bytes.len() - 5);
    write(&path, &bytes);
    let err = idx::read_images(&path).unwrap_err().to_string();
    assert!(
        err.contains(&path.display().to_string()) && err.contains("1568 bytes") && err.contains("truncated"),
        "{err}"
    );

    let mut bytes = idx_labels(&[1, 2]);
    bytes.push(0);
    write(&path, &bytes);
    let err = idx::read_labels(&path).unwrap_err().to_string();
    assert!(err.contains("2 bytes after the header") && err.contains("trailing"), "{err}");

    write(&path, &[0, 0, 8]);
    let err = idx::read_labels(&path).unwrap_err().to_string();
    assert!(err.contains("only 3 bytes"), "{err}");
}

#[test]
fn mnist_directory_reads_raw_train_and_gzipped_test_files() {
    let dir = tmp();
    write_tiny_mnist(dir.path(), 12, 5);
    let s = mnist::read_mnist(dir.path(), mnist::MnistVariant::Mnist).unwrap();
    assert_eq!((s.train.len(), s.test.len()), (12, 5));
    assert_eq!((s.train.channels, s.train.rows, s.train.cols), (1, 28, 28));
    assert_eq!(s.train.labels, (0..12).map(|i| (i % 10) as u16).collect::<Vec<_>>());
    assert_eq!(s.test.pixels[784 * 4 + 100], mnist_pixel(4, 100));
}

#[test]
fn mnist_image_and_label_counts_must_agree() {
    let dir = tmp();
    write_tiny_mnist(dir.path(), 4, 2);
    let labels_path = dir.path().join("train-labels-idx1-ubyte");
    write(&labels_path, &idx_labels(&[0, 1, 2]));
    let err = mnist::read_mnist(dir.path(), mnist::MnistVariant::Mnist).unwrap_err().to_string();
    assert!(err.contains(&labels_path.display().to_string()) && err.contains("4 labels"), "{err}");
}

#[test]
fn missing_mnist_says_where_it_looked_and_how_to_fetch() {
    let dir = tmp();
    let err = build_dataset("fashion-mnist", "", dir.path(), 0).unwrap_err().to_string();
    let looked = dir.path().join("fashion-mnist");
    assert!(err.contains(&looked.display().to_string()), "{err}");
    assert!(err.contains("fl data fetch fashion-mnist"), "{err}");
    assert!(err.contains("train-images-idx3-ubyte"), "{err}");
}

#[test]
fn mnist_component_builds_normalised_tensors() {
    let data_dir = tmp();
    write_tiny_mnist(&data_dir.path().join("mnist"), 12, 5);
    let data = build_dataset("mnist", "", data_dir.path(), 0).unwrap();
    assert_eq!(data.train.x.size(), vec![12, 1, 28, 28]);
    assert_eq!(data.train.x.kind(), Kind::Float);
    assert_eq!(data.test.y.kind(), Kind::Int64);
    assert_eq!(labels(&data.test.y), vec![0, 1, 2, 3, 4]);
    assert_eq!(data.spec.input_shape, vec![1, 28, 28]);
    assert_eq!(data.spec.classes, 10);
    assert!(data.natural_partition.is_none());
    // Image 3, row 5, column 6 is pixel p = 5 * 28 + 6 = 146: (v / 255 - 0.1307) / 0.3081.
    let v = f32::from(mnist_pixel(3, 146));
    let want = (v / 255.0 - 0.1307) / 0.3081;
    let got = data.train.x.double_value(&[3, 0, 5, 6]) as f32;
    assert!((got - want).abs() < 1e-5, "got {got}, want {want}");

    // `dir` overrides the default location, and the sample limits keep the first samples.
    let elsewhere = tmp();
    write_tiny_mnist(elsewhere.path(), 7, 3);
    let table = format!("dir = {:?}\ntrain_samples = 4\ntest_samples = 2", elsewhere.path().display().to_string());
    let data = build_dataset("mnist", &table, data_dir.path(), 0).unwrap();
    assert_eq!((data.train.len(), data.test.len()), (4, 2));
    assert_eq!(labels(&data.train.y), vec![0, 1, 2, 3]);
}

#[test]
fn the_code_faithful_protocol_trains_on_both_splits_with_its_own_normalisation() {
    // KDD'23's code: train on train + test in [−1, 1], test on the test split with (0.1307, 0.3081).
    let data_dir = tmp();
    write_tiny_mnist(&data_dir.path().join("mnist"), 12, 5);
    let table = "train_includes_test = true\nnormalization = \"half\"\ntest_normalization = \"dataset-stats\"";
    let data = build_dataset("mnist", table, data_dir.path(), 0).unwrap();
    assert_eq!((data.train.len(), data.test.len()), (17, 5));
    assert_eq!(labels(&data.train.y)[12..], [0, 1, 2, 3, 4], "the test samples follow the train split");
    // Test image 3, pixel 146 is train sample 12 + 3 = 15 of the merged split.
    let v = f32::from(mnist_pixel(3, 146));
    let merged = data.train.x.double_value(&[15, 0, 5, 6]) as f32;
    assert!((merged - (v / 255.0 - 0.5) / 0.5).abs() < 1e-5, "train side: half normalisation, got {merged}");
    let test = data.test.x.double_value(&[3, 0, 5, 6]) as f32;
    assert!((test - (v / 255.0 - 0.1307) / 0.3081).abs() < 1e-5, "test side: dataset statistics, got {test}");
}

#[test]
fn sample_limits_above_the_split_size_and_unknown_keys_are_errors() {
    let data_dir = tmp();
    write_tiny_mnist(&data_dir.path().join("mnist"), 6, 2);
    let err = build_dataset("mnist", "train_samples = 7", data_dir.path(), 0).unwrap_err().to_string();
    assert!(err.contains("dataset.train_samples") && err.contains("has 6"), "{err}");
    let err = build_dataset("mnist", "train_sample = 3", data_dir.path(), 0).unwrap_err().to_string();
    assert!(err.contains("train_sample"), "{err}");
}

#[test]
fn cifar10_reader_keeps_labels_and_plane_order() {
    let dir = tmp();
    write_tiny_cifar10(dir.path());
    let s = cifar::read_cifar10(dir.path()).unwrap();
    assert_eq!((s.train.len(), s.test.len()), (10, 3));
    // Batches are concatenated in order 1..5, so train record i is record i of the writer.
    assert_eq!(s.train.labels, (0..10).map(|i| (i % 10) as u16).collect::<Vec<_>>());
    assert_eq!(s.test.labels, vec![0, 1, 2]);
    assert_eq!(&s.train.pixels[3072 * 7..3072 * 8], cifar_pixels(7).as_slice());
}

#[test]
fn cifar10_component_builds_nchw_tensors_with_per_channel_normalisation() {
    let data_dir = tmp();
    // The official archive's subdirectory is accepted under the dataset directory.
    write_tiny_cifar10(&data_dir.path().join("cifar10").join("cifar-10-batches-bin"));
    let data = build_dataset("cifar10", "", data_dir.path(), 0).unwrap();
    assert_eq!(data.train.x.size(), vec![10, 3, 32, 32]);
    assert_eq!(data.spec.input_shape, vec![3, 32, 32]);
    assert_eq!(data.spec.classes, 10);
    assert_eq!(labels(&data.test.y), vec![0, 1, 2]);
    // Record 6, pixel (row 4, column 9), every channel: (v / 255 - mean_c) / std_c by hand.
    let mean = [0.4914f32, 0.4822, 0.4465];
    let std = [0.2470f32, 0.2435, 0.2616];
    for c in 0..3 {
        let v = f32::from(cifar_pixel(6, c, 4, 9));
        let want = (v / 255.0 - mean[c]) / std[c];
        let got = data.train.x.double_value(&[6, c as i64, 4, 9]) as f32;
        assert!((got - want).abs() < 1e-5, "channel {c}: got {got}, want {want}");
    }
    // One worked value: record 0, green plane, row 0, column 0 holds 100:
    // (100 / 255 - 0.4822) / 0.2435 = -0.369787...
    assert_eq!(cifar_pixel(0, 1, 0, 0), 100);
    assert!((data.train.x.double_value(&[0, 1, 0, 0]) - (-0.369_787)).abs() < 1e-4);
    // The whole first test image equals the writer's planes, normalised.
    let want: Vec<f32> = cifar_pixels(100)
        .iter()
        .enumerate()
        .map(|(k, &v)| (f32::from(v) / 255.0 - mean[k / 1024]) / std[k / 1024])
        .collect();
    let got = values(&data.test.x.get(0));
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5));
}

#[test]
fn half_normalisation_maps_pixels_to_minus_one_one() {
    let data_dir = tmp();
    write_tiny_cifar10(&data_dir.path().join("cifar10"));
    let data = build_dataset("cifar10", "normalization = \"half\"", data_dir.path(), 0).unwrap();
    // Record 0, green plane, (0, 0) holds 100: (100 / 255 - 0.5) / 0.5 = -0.215686...
    assert!((data.train.x.double_value(&[0, 1, 0, 0]) - (-0.215_686)).abs() < 1e-5);
    let err = build_dataset("cifar10", "normalization = \"imagenet\"", data_dir.path(), 0).unwrap_err().to_string();
    assert!(err.contains("normalization"), "{err}");
}

#[test]
fn cifar_files_with_partial_records_or_bad_labels_are_errors_naming_the_file() {
    let dir = tmp();
    write_tiny_cifar10(dir.path());
    let path = dir.path().join("data_batch_3.bin");
    let mut bytes = cifar10_file(0, 2);
    bytes.truncate(3073 + 100);
    write(&path, &bytes);
    let err = cifar::read_cifar10(dir.path()).unwrap_err().to_string();
    assert!(err.contains(&path.display().to_string()) && err.contains("3073-byte records"), "{err}");

    let mut bytes = cifar10_file(0, 2);
    bytes[3073] = 12;
    write(&path, &bytes);
    let err = cifar::read_cifar10(dir.path()).unwrap_err().to_string();
    assert!(err.contains("0..10") && err.contains("12 in record 1"), "{err}");
}

#[test]
fn missing_cifar_says_where_it_looked_and_where_to_get_it() {
    let data_dir = tmp();
    let err = build_dataset("cifar10", "", data_dir.path(), 0).unwrap_err().to_string();
    let dir = data_dir.path().join("cifar10");
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(err.contains(&dir.join("cifar-10-batches-bin").display().to_string()), "{err}");
    assert!(err.contains("cifar-10-binary.tar.gz") && err.contains(cifar::CIFAR_PAGE), "{err}");
    assert!(err.contains("fl data fetch cifar10"), "{err}");
    let e = cifar::read_cifar100(&data_dir.path().join("cifar100"), Cifar100Labels::Fine).unwrap_err();
    assert!(matches!(e, DataError::Missing { .. }));
    assert!(e.to_string().contains("train.bin, test.bin") && e.to_string().contains("fl data fetch cifar100"), "{e}");
}

#[test]
fn cifar100_reads_fine_labels_by_default_and_coarse_on_request() {
    let data_dir = tmp();
    write_tiny_cifar100(&data_dir.path().join("cifar100").join("cifar-100-binary"));
    let fine = build_dataset("cifar100", "", data_dir.path(), 0).unwrap();
    assert_eq!(fine.spec.classes, 100);
    assert_eq!(labels(&fine.train.y), vec![0, 7, 14, 21]);
    assert_eq!(labels(&fine.test.y), vec![50, 57]);
    let coarse = build_dataset("cifar100", "labels = \"coarse\"", data_dir.path(), 0).unwrap();
    assert_eq!(coarse.spec.classes, 20);
    assert_eq!(labels(&coarse.train.y), vec![0, 1, 2, 3]);
    assert_eq!(labels(&coarse.test.y), vec![10, 11]);
    // Pixels follow the two label bytes: record 2, blue plane, row 31, column 31.
    let v = f32::from(cifar_pixel(2, 2, 31, 31));
    let want = (v / 255.0 - 0.4409) / 0.2762;
    assert!((fine.train.x.double_value(&[2, 2, 31, 31]) as f32 - want).abs() < 1e-5);
    let err = build_dataset("cifar100", "labels = \"medium\"", data_dir.path(), 0).unwrap_err().to_string();
    assert!(err.contains("dataset.labels"), "{err}");
}

#[test]
fn cifar100_fine_label_out_of_range_is_an_error() {
    let dir = tmp();
    write_tiny_cifar100(dir.path());
    let mut bytes = cifar100_file(0, 1);
    bytes[1] = 100;
    write(&dir.path().join("test.bin"), &bytes);
    let err = cifar::read_cifar100(dir.path(), Cifar100Labels::Coarse).unwrap_err().to_string();
    assert!(err.contains("test.bin") && err.contains("fine label bytes in 0..100"), "{err}");
}

#[test]
fn info_reports_counts_per_class_and_missing_datasets() {
    let data_dir = tmp();
    write_tiny_mnist(&data_dir.path().join("mnist"), 23, 4);
    let info = fl_data::info("mnist", data_dir.path()).unwrap();
    assert_eq!(
        info.state,
        fl_data::DataState::Present {
            train: 23,
            test: 4,
            train_per_class: vec![3, 3, 3, 2, 2, 2, 2, 2, 2, 2],
            verified_files: None
        }
    );
    let text = info.to_string();
    assert!(text.contains("train:    23 samples") && text.contains("0: 3, 1: 3, 2: 3, 3: 2"), "{text}");
    let missing = fl_data::info("cifar100", data_dir.path()).unwrap();
    assert!(matches!(missing.state, fl_data::DataState::Missing(_)));
    assert_eq!(missing.looked_in.len(), 2);
    assert!(missing.to_string().contains("status:   missing"));
    assert!(fl_data::info("imagenet-21k", data_dir.path()).unwrap_err().to_string().contains("known datasets: mnist"));
    assert!(matches!(fl_data::info("synthetic", data_dir.path()).unwrap().state, fl_data::DataState::Generated(_)));
}

#[test]
fn every_component_is_registered() {
    let registry = fl_core::Registry::get().unwrap();
    let names = |kind| registry.components(kind).map(|c| c.name).collect::<Vec<_>>();
    let datasets = names(fl_core::ComponentKind::Dataset);
    for n in fl_data::DATASET_NAMES {
        assert!(datasets.contains(&n), "{n} not in {datasets:?}");
    }
    let partitioners = names(fl_core::ComponentKind::Partitioner);
    for n in ["iid", "dirichlet", "shards"] {
        assert!(partitioners.contains(&n), "{n} not in {partitioners:?}");
    }
    // Defaults serialise (what `fl list` prints).
    for c in registry
        .components(fl_core::ComponentKind::Dataset)
        .chain(registry.components(fl_core::ComponentKind::Partitioner))
    {
        let _ = (c.defaults)();
    }
}
