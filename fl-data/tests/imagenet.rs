//! ImageNet in the folder layout `train/<wnid>/*.JPEG`, `val/<wnid>/*.JPEG`, on a tiny tree the
//! test writes (5 classes, 3 training images each of different shapes, one grey, and one
//! validation image each, encoded with the `image` crate): the seeded choice of K classes, the
//! resize-and-crop, labels, the cache and its key, corrupt files, the registered `imagenet`
//! component's parameters, `fl data info` and `fl data fetch`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use fl_data::cache::CacheUse;
use fl_data::imagenet::{self, ImageNetConfig, read_imagenet_cached};

/// The classes, written in this (unsorted) order; the reader sorts them.
const WNIDS: [&str; 5] = ["n04000004", "n01000001", "n03000003", "n02000002", "n05000005"];

/// The colour of every image of `wnid`: the centre band of a long image, all of a square one.
/// `n05000005`'s is grey, and its square training image is encoded as a one-channel JPEG.
fn colour(wnid: &str) -> [u8; 3] {
    match wnid {
        "n01000001" => [200, 30, 30],
        "n02000002" => [30, 200, 30],
        "n03000003" => [30, 30, 200],
        "n04000004" => [200, 200, 30],
        "n05000005" => [120, 120, 120],
        other => panic!("no colour for {other}"),
    }
}

/// JPEG-encodes `pixels` (`w × h` RGB when `rgb`, else grey) at quality 100.
fn jpeg(pixels: &[u8], w: u32, h: u32, rgb: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let color = if rgb { image::ColorType::Rgb8 } else { image::ColorType::L8 };
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 100).encode(pixels, w, h, color).unwrap();
    out
}

/// A `w × h` RGB JPEG whose outer quarters along its longer side are black and whose middle half
/// is `c`. Resizing the shorter side to R and cutting out the centre square keeps the middle
/// quarter of the longer side (R of 4R), so the result is all `c`; a squashing resize or an
/// off-centre crop would show black.
fn banded(w: u32, h: u32, c: [u8; 3]) -> Vec<u8> {
    let long = w.max(h);
    let pixels: Vec<u8> = (0..h)
        .flat_map(|y| (0..w).map(move |x| if w >= h { x } else { y }))
        .flat_map(|along| if along < long / 4 || along >= long * 3 / 4 { [0; 3] } else { c })
        .collect();
    jpeg(&pixels, w, h, true)
}

/// Writes the tree into `dir`: per class `a_wide.JPEG` (80x20), `b_tall.JPEG` (20x80) and
/// `c_square.JPEG` (30x30) in `train/<wnid>/`, and `val/<wnid>/v.JPEG` (40x30, ratio 4:3).
fn write_imagenet(dir: &Path) {
    for wnid in WNIDS {
        let c = colour(wnid);
        let train = dir.join("train").join(wnid);
        write(&train.join("a_wide.JPEG"), &banded(80, 20, c));
        write(&train.join("b_tall.JPEG"), &banded(20, 80, c));
        let square = if wnid == "n05000005" {
            jpeg(&[c[0]; 30 * 30], 30, 30, false)
        } else {
            jpeg(&[c; 30 * 30].concat(), 30, 30, true)
        };
        write(&train.join("c_square.JPEG"), &square);
        // Files that are not JPEGs are ignored.
        write(&train.join("boxes.txt"), b"not an image");
        let val: Vec<u8> = (0..40 * 30).flat_map(|_| c).collect();
        write(&dir.join("val").join(wnid).join("v.JPEG"), &jpeg(&val, 40, 30, true));
    }
}

/// A dataset directory `<tmp>/imagenet` holding the tree.
fn dataset() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("imagenet");
    write_imagenet(&dir);
    (t, dir)
}

fn sorted_wnids() -> Vec<String> {
    let mut all: Vec<String> = WNIDS.map(String::from).to_vec();
    all.sort();
    all
}

fn cfg(classes: Option<usize>, class_seed: u64, resolution: usize) -> ImageNetConfig {
    ImageNetConfig { classes, class_seed, resolution, ..ImageNetConfig::default() }
}

/// Checks that every pixel of every image of `images` is its label's class colour (within
/// JPEG's error) and that the split has `per_class` images of each class.
fn assert_labelled_by_colour(images: &fl_data::RawImages, wnids: &[String], per_class: usize, what: &str) {
    let side = images.rows;
    assert_eq!((images.channels, images.cols), (3, side), "{what}");
    assert_eq!(images.pixels.len(), images.len() * 3 * side * side, "{what}: [n, 3, R, R] bytes");
    assert_eq!(images.class_counts(wnids.len()), vec![per_class; wnids.len()], "{what}");
    for (i, &label) in images.labels.iter().enumerate() {
        let expected = colour(&wnids[usize::from(label)]);
        let image = &images.pixels[i * 3 * side * side..(i + 1) * 3 * side * side];
        for (c, plane) in image.chunks_exact(side * side).enumerate() {
            let worst = plane.iter().map(|&v| v.abs_diff(expected[c])).max().unwrap();
            assert!(worst <= 12, "{what} image {i} (label {label}) channel {c}: off by {worst} from {expected:?}");
        }
    }
}

#[test]
fn a_seeded_choice_keeps_k_distinct_sorted_classes_the_same_for_the_same_seed() {
    let all = sorted_wnids();
    let chosen = imagenet::choose_classes(&all, Some(3), 7).unwrap();
    assert_eq!(chosen.len(), 3);
    assert!(chosen.windows(2).all(|w| w[0] < w[1]), "sorted and distinct: {chosen:?}");
    assert!(chosen.iter().all(|w| all.contains(w)), "{chosen:?}");
    assert_eq!(imagenet::choose_classes(&all, Some(3), 7).unwrap(), chosen);
    // Of the 10 ways to keep 3 of 5, the seeds 0..20 pick more than one.
    let choices: std::collections::BTreeSet<Vec<String>> =
        (0..20).map(|s| imagenet::choose_classes(&all, Some(3), s).unwrap()).collect();
    assert!(choices.len() > 1, "every seed picked {choices:?}");
    assert_eq!(imagenet::choose_classes(&all, None, 7).unwrap(), all);
    let err = imagenet::choose_classes(&all, Some(6), 0).unwrap_err().to_string();
    assert!(err.contains("classes") && err.contains("1 to 5") && err.contains("got 6"), "{err}");
}

#[test]
fn the_kept_classes_are_read_resized_cropped_and_labelled_in_sorted_wnid_order() {
    let (_t, dir) = dataset();
    let read = read_imagenet_cached(&dir, &cfg(Some(3), 7, 10)).unwrap();
    assert_eq!(read.wnids, imagenet::choose_classes(&sorted_wnids(), Some(3), 7).unwrap());
    let train = &read.splits.train;
    assert_eq!((train.len(), train.rows), (9, 10));
    // Class by class, each class's files in name order.
    assert_eq!(train.labels, [0, 0, 0, 1, 1, 1, 2, 2, 2]);
    assert_labelled_by_colour(train, &read.wnids, 3, "train");
    assert_eq!(read.splits.test.labels, [0, 1, 2]);
    assert_labelled_by_colour(&read.splits.test, &read.wnids, 1, "val");
    assert!(read.train_skipped.is_empty() && read.val_skipped.is_empty());

    // All classes, at another resolution; the grey class is in three channels.
    let all = read_imagenet_cached(&dir, &cfg(None, 0, 16)).unwrap();
    assert_eq!(all.wnids, sorted_wnids());
    assert_eq!((all.splits.train.len(), all.splits.train.rows), (15, 16));
    assert_labelled_by_colour(&all.splits.train, &all.wnids, 3, "train, all classes");
    assert_labelled_by_colour(&all.splits.test, &all.wnids, 1, "val, all classes");
}

#[test]
fn the_second_load_reads_the_cache_and_other_parameters_get_their_own() {
    let (_t, dir) = dataset();
    let first = read_imagenet_cached(&dir, &cfg(Some(3), 7, 10)).unwrap();
    assert_eq!((&first.train_cache, &first.val_cache), (&CacheUse::Built, &CacheUse::Built));
    assert!(dir.join("cache-train-k3-s7-r10.bin").is_file() && dir.join("cache-val-k3-s7-r10.bin").is_file());
    let second = read_imagenet_cached(&dir, &cfg(Some(3), 7, 10)).unwrap();
    assert_eq!((&second.train_cache, &second.val_cache), (&CacheUse::Read, &CacheUse::Read));
    assert_eq!((&second.splits, &second.wnids), (&first.splits, &first.wnids));

    let sharper = read_imagenet_cached(&dir, &cfg(Some(3), 7, 12)).unwrap();
    assert_eq!(sharper.train_cache, CacheUse::Built, "another resolution does not reuse the cache");
    assert_eq!(sharper.splits.train.pixels.len(), 9 * 3 * 12 * 12);
    let reseeded = read_imagenet_cached(&dir, &cfg(Some(3), 8, 10)).unwrap();
    assert_eq!(reseeded.train_cache, CacheUse::Built, "another seed does not reuse the cache");
    assert_eq!(read_imagenet_cached(&dir, &cfg(Some(3), 7, 10)).unwrap().train_cache, CacheUse::Read);

    // A class's image replaced by a larger one: the fingerprint of the kept files changes.
    let kept = &first.wnids[0];
    write(&dir.join("train").join(kept).join("a_wide.JPEG"), &banded(120, 30, colour(kept)));
    let changed = read_imagenet_cached(&dir, &cfg(Some(3), 7, 10)).unwrap();
    assert!(matches!(&changed.train_cache, CacheUse::Rebuilt(why) if why.contains("source files changed")));
}

#[test]
fn a_corrupt_jpeg_is_skipped_and_counted_within_max_bad_fraction_and_an_error_beyond() {
    let (_t, dir) = dataset();
    let bad = dir.join("train/n03000003/b_zz_corrupt.JPEG");
    write(&bad, b"\xff\xd8\xff\xe0 these bytes are not a JPEG");
    let with = |fraction: f64| ImageNetConfig { max_bad_fraction: fraction, ..cfg(None, 0, 8) };

    // 1 of 16 training files fails: more than the default 1% allows (0 files).
    let err = read_imagenet_cached(&dir, &with(0.01)).unwrap_err().to_string();
    assert!(err.contains("1 of 16 files do not decode") && err.contains("max_bad_fraction = 0.01"), "{err}");
    assert!(err.contains("b_zz_corrupt.JPEG"), "the error names the file: {err}");

    // 10% allows one.
    let read = read_imagenet_cached(&dir, &with(0.1)).unwrap();
    assert_eq!(read.train_skipped.len(), 1);
    assert_eq!(read.train_skipped[0].path, bad);
    assert_eq!(read.splits.train.len(), 15);
    assert_labelled_by_colour(&read.splits.train, &read.wnids, 3, "train without the corrupt file");

    // The cache records the skipped file: a load from it reports it, or fails under a lower limit.
    let cached = read_imagenet_cached(&dir, &with(0.1)).unwrap();
    assert_eq!((&cached.train_cache, &cached.train_skipped), (&CacheUse::Read, &read.train_skipped));
    let err = read_imagenet_cached(&dir, &with(0.05)).unwrap_err().to_string();
    assert!(err.contains("1 of 16 files") && err.contains("b_zz_corrupt.JPEG"), "{err}");
}

#[test]
fn the_registered_component_checks_its_keys_and_normalises_with_imagenet_statistics() {
    let (t, dir) = dataset();
    let data = build_dataset("imagenet", "classes = 3\nclass_seed = 7\nresolution = 8", t.path(), 0).unwrap();
    assert_eq!(data.train.x.size(), [9, 3, 8, 8]);
    assert_eq!(data.test.x.size(), [3, 3, 8, 8]);
    assert_eq!((data.spec.input_shape.as_slice(), data.spec.classes), (&[3, 8, 8][..], 3));
    assert_eq!(Vec::<i64>::try_from(&data.train.y).unwrap(), [0, 0, 0, 1, 1, 1, 2, 2, 2]);
    let raw = read_imagenet_cached(&dir, &cfg(Some(3), 7, 8)).unwrap().splits.train;
    let (mean, std) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
    for c in 0..3 {
        let expected = (f64::from(raw.pixels[3 * 3 * 64 + c * 64 + 9]) / 255.0 - mean[c]) / std[c];
        let found = data.train.x.double_value(&[3, c as i64, 1, 1]);
        assert!((found - expected).abs() < 1e-5, "channel {c}: {found} vs {expected}");
    }
    let few = build_dataset("imagenet", "resolution = 8\ntrain_samples = 2\ntest_samples = 1", t.path(), 0).unwrap();
    assert_eq!((few.train.x.size()[0], few.test.x.size()[0]), (2, 1));

    let cases = [
        ("clases = 3", "clases"),
        ("classes = 0", "dataset.classes"),
        ("classes = 6", "dataset.classes"),
        ("resolution = 0", "dataset.resolution"),
        ("max_bad_fraction = 1.5", "dataset.max_bad_fraction"),
        ("resolution = 8\ntrain_samples = 16", "dataset.train_samples"),
    ];
    for (table, key) in cases {
        let err = build_dataset("imagenet", table, t.path(), 0).unwrap_err().to_string();
        assert!(err.contains(key), "`{table}`: {err}");
    }
}

#[test]
fn info_counts_the_files_and_fetch_says_the_data_are_not_redistributable() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("imagenet");
    let info = fl_data::info("imagenet", t.path()).unwrap();
    let fl_data::DataState::Missing(msg) = &info.state else { panic!("{info}") };
    assert!(msg.contains("train/, val/") && msg.contains(&dir.display().to_string()), "{msg}");
    assert!(msg.contains("train/<wnid>/*.JPEG") && msg.contains("val/<wnid>/*.JPEG"), "the layout: {msg}");
    assert_eq!(info.looked_in, std::slice::from_ref(&dir));
    let err = fl_data::fetch("imagenet", t.path()).unwrap_err().to_string();
    assert!(err.contains("not redistributable") && err.contains(&dir.display().to_string()), "{err}");

    write_imagenet(&dir);
    let info = fl_data::info("imagenet", t.path()).unwrap();
    let fl_data::DataState::Present { train, test, train_per_class, verified_files } = &info.state else {
        panic!("{info}")
    };
    assert_eq!((*train, *test, train_per_class, verified_files), (15, 5, &vec![3; 5], &None));
    assert_eq!(info.classes, 5);
    assert!(fl_data::fetch("imagenet", t.path()).unwrap().already_present);
}

#[test]
fn a_flat_validation_directory_or_an_unknown_class_is_an_error_naming_it() {
    let (_t, dir) = dataset();
    let unknown = dir.join("val/n09999999");
    write(&unknown.join("v.JPEG"), &banded(30, 30, [1, 2, 3]));
    let err = read_imagenet_cached(&dir, &cfg(None, 0, 8)).unwrap_err().to_string();
    assert!(err.contains("n09999999") && err.contains("no train/n09999999/"), "{err}");
    std::fs::remove_dir_all(&unknown).unwrap();

    let missing = dir.join("val/n02000002");
    std::fs::remove_dir_all(&missing).unwrap();
    let err = read_imagenet_cached(&dir, &cfg(None, 0, 8)).unwrap_err().to_string();
    assert!(err.contains("val/n02000002") && err.contains("class 1, `n02000002`"), "{err}");

    std::fs::remove_dir_all(dir.join("val")).unwrap();
    write(&dir.join("val/ILSVRC2012_val_00000001.JPEG"), &banded(30, 30, [1, 2, 3]));
    let err = read_imagenet_cached(&dir, &cfg(None, 0, 8)).unwrap_err().to_string();
    assert!(err.contains("val/<wnid>/*.JPEG") && err.contains("ILSVRC2012_validation_ground_truth.txt"), "{err}");
}
