//! Tiny-ImageNet-200 in its official layout, on a tiny copy written by the test (200 WordNet
//! ids, a few JPEGs encoded here with the `image` crate, one of them grey): class order, pixel
//! layout, the cache (read on the second load, rebuilt when damaged or stale), the registered
//! `tiny-imagenet` component, `fl data info`, and errors that name the file and the expectation.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use fl_data::cache::{self, CacheUse};
use fl_data::tiny_imagenet::{self, TRAIN_CACHE, VAL_CACHE, read_tiny_imagenet_cached};

/// Class `k`'s WordNet id: not in sorted order, so a reader that sorted the ids would fail.
fn wnid(k: usize) -> String {
    format!("n{:08}", 1000 + (k * 37) % 200)
}

/// JPEG-encodes `pixels` (`w × h` RGB when `rgb`, else grey) at quality 100.
fn jpeg(pixels: &[u8], w: u32, h: u32, rgb: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let color = if rgb { image::ColorType::Rgb8 } else { image::ColorType::L8 };
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 100).encode(pixels, w, h, color).unwrap();
    out
}

/// A 64x64 RGB JPEG whose left half (columns 0..32) is `left` and right half `right`.
fn halves(left: [u8; 3], right: [u8; 3]) -> Vec<u8> {
    let pixels: Vec<u8> = (0..64 * 64).flat_map(|p| if p % 64 < 32 { left } else { right }).collect();
    jpeg(&pixels, 64, 64, true)
}

/// A 64x64 grey JPEG of one value.
fn grey(v: u8) -> Vec<u8> {
    jpeg(&[v; 64 * 64], 64, 64, false)
}

/// A training image: class, file name, left colour, right colour (`None`: a grey image of the
/// left colour's first value).
type TrainImage = (usize, &'static str, [u8; 3], Option<[u8; 3]>);

/// The training images; class 3's is grey. Files of a class are written out of order; the
/// reader sorts them by name.
const TRAIN: [TrainImage; 5] = [
    (0, "b_1.JPEG", [200, 20, 20], Some([20, 20, 200])),
    (0, "a_0.JPEG", [20, 200, 20], Some([20, 200, 20])),
    (2, "x_0.JPEG", [100, 150, 200], Some([0, 0, 0])),
    (3, "g_0.JPEG", [90, 90, 90], None),
    (199, "z_0.JPEG", [250, 250, 250], Some([250, 250, 250])),
];

/// Writes the tiny dataset into `root` (the `tiny-imagenet-200` directory): 200 ids, the
/// training images above (every other class has an empty `images/` directory), and three
/// validation images listed out of name order.
fn write_tiny(root: &Path) {
    let ids: Vec<String> = (0..200).map(wnid).collect();
    write(&root.join("wnids.txt"), format!("{}\n", ids.join("\n")).as_bytes());
    for id in &ids {
        std::fs::create_dir_all(root.join("train").join(id).join("images")).unwrap();
        // The official archive has a boxes file beside each class's images; it is not read.
        write(&root.join("train").join(id).join(format!("{id}_boxes.txt")), b"ignored\t0\t0\t63\t63\n");
    }
    for (class, file, left, right) in TRAIN {
        let bytes = match right {
            Some(right) => halves(left, right),
            None => grey(left[0]),
        };
        write(&root.join("train").join(wnid(class)).join("images").join(file), &bytes);
    }
    write(&root.join("val/images/val_0.JPEG"), &halves([10, 10, 10], [10, 10, 10]));
    write(&root.join("val/images/val_1.JPEG"), &grey(160));
    write(&root.join("val/images/val_2.JPEG"), &halves([0, 255, 0], [0, 255, 0]));
    let ann = format!(
        "val_2.JPEG\t{}\t0\t0\t63\t63\nval_0.JPEG\t{}\t1\t2\t60\t61\nval_1.JPEG\t{}\t5\t5\t40\t40\n",
        wnid(5),
        wnid(199),
        wnid(0)
    );
    write(&root.join("val/val_annotations.txt"), ann.as_bytes());
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A dataset directory `<tmp>/tiny-imagenet` holding the archive's `tiny-imagenet-200/`.
fn dataset() -> (tempfile::TempDir, PathBuf) {
    let t = tmp();
    let dir = t.path().join("tiny-imagenet");
    write_tiny(&dir.join("tiny-imagenet-200"));
    (t, dir)
}

/// Pixel (channel, row, col) of image `i` of 3x64x64 planes.
fn px(pixels: &[u8], i: usize, c: usize, r: usize, x: usize) -> u8 {
    pixels[i * 3 * 64 * 64 + c * 64 * 64 + r * 64 + x]
}

fn assert_close(found: u8, expected: u8, what: &str) {
    assert!(found.abs_diff(expected) <= 4, "{what}: found {found}, expected {expected} (JPEG, quality 100)");
}

#[test]
fn splits_read_in_class_order_with_sorted_files_and_grey_images_in_three_channels() {
    let (_t, dir) = dataset();
    let read = read_tiny_imagenet_cached(&dir).unwrap();
    assert_eq!(read.wnids.len(), 200);
    assert_eq!(read.wnids[..3], [wnid(0), wnid(1), wnid(2)]);
    let train = &read.splits.train;
    assert_eq!((train.channels, train.rows, train.cols), (3, 64, 64));
    // Class 0's a_0 before b_1, then classes 2, 3 and 199.
    assert_eq!(train.labels, [0, 0, 2, 3, 199]);
    assert_eq!(train.pixels.len(), 5 * 3 * 64 * 64);
    let expected_train: [([u8; 3], [u8; 3]); 5] = [
        ([20, 200, 20], [20, 200, 20]),
        ([200, 20, 20], [20, 20, 200]),
        ([100, 150, 200], [0, 0, 0]),
        ([90, 90, 90], [90, 90, 90]),
        ([250, 250, 250], [250, 250, 250]),
    ];
    for (i, (left, right)) in expected_train.iter().enumerate() {
        for c in 0..3 {
            assert_close(px(&train.pixels, i, c, 10, 5), left[c], &format!("train {i} channel {c} left"));
            assert_close(px(&train.pixels, i, c, 50, 60), right[c], &format!("train {i} channel {c} right"));
        }
    }
    // The grey image: three identical planes.
    let plane = 64 * 64;
    let g = &train.pixels[3 * 3 * plane..4 * 3 * plane];
    assert_eq!(g[..plane], g[plane..2 * plane]);
    assert_eq!(g[..plane], g[2 * plane..]);
    // Validation images in the annotation file's order, labelled by their ids' lines.
    let test = &read.splits.test;
    assert_eq!(test.labels, [5, 199, 0]);
    assert_close(px(&test.pixels, 0, 1, 30, 30), 255, "val_2 green");
    assert_close(px(&test.pixels, 0, 0, 30, 30), 0, "val_2 red");
    assert_close(px(&test.pixels, 1, 2, 63, 63), 10, "val_0");
    for c in 0..3 {
        assert_close(px(&test.pixels, 2, c, 0, 0), 160, "val_1 (grey)");
    }
}

#[test]
fn the_second_load_reads_the_cache_and_a_damaged_or_stale_cache_is_rebuilt() {
    let (_t, dir) = dataset();
    let root = dir.join("tiny-imagenet-200");
    let first = read_tiny_imagenet_cached(&dir).unwrap();
    assert_eq!((&first.train_cache, &first.val_cache), (&CacheUse::Built, &CacheUse::Built));
    assert!(root.join(TRAIN_CACHE).is_file() && root.join(VAL_CACHE).is_file());
    let modified = std::fs::metadata(root.join(TRAIN_CACHE)).unwrap().modified().unwrap();

    let second = read_tiny_imagenet_cached(&dir).unwrap();
    assert_eq!((&second.train_cache, &second.val_cache), (&CacheUse::Read, &CacheUse::Read));
    assert_eq!(second.splits, first.splits);
    assert_eq!(std::fs::metadata(root.join(TRAIN_CACHE)).unwrap().modified().unwrap(), modified);

    // One pixel byte flipped: the SHA-256 in the header no longer matches.
    let mut bytes = std::fs::read(root.join(TRAIN_CACHE)).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0x40;
    std::fs::write(root.join(TRAIN_CACHE), &bytes).unwrap();
    let damaged = read_tiny_imagenet_cached(&dir).unwrap();
    assert!(matches!(&damaged.train_cache, CacheUse::Rebuilt(why) if why.contains("SHA-256")), "{damaged:?}");
    assert_eq!(damaged.val_cache, CacheUse::Read);
    assert_eq!(damaged.splits, first.splits);
    assert_eq!(read_tiny_imagenet_cached(&dir).unwrap().train_cache, CacheUse::Read, "the rebuilt cache is whole");

    // Truncated.
    std::fs::write(root.join(VAL_CACHE), &std::fs::read(root.join(VAL_CACHE)).unwrap()[..500]).unwrap();
    let truncated = read_tiny_imagenet_cached(&dir).unwrap();
    assert!(matches!(&truncated.val_cache, CacheUse::Rebuilt(why) if why.contains("bytes")), "{truncated:?}");
    assert_eq!(truncated.splits, first.splits);

    // A training image added: the train cache is stale, the validation cache too (one
    // fingerprint covers the dataset).
    write(&root.join("train").join(wnid(7)).join("images/new.JPEG"), &grey(30));
    let grown = read_tiny_imagenet_cached(&dir).unwrap();
    assert!(matches!(&grown.train_cache, CacheUse::Rebuilt(why) if why.contains("source files changed")));
    assert_eq!(grown.splits.train.labels, [0, 0, 2, 3, 7, 199]);
    assert_eq!(grown.splits.test, first.splits.test);
}

#[test]
fn the_cache_file_has_the_documented_header() {
    let (_t, dir) = dataset();
    read_tiny_imagenet_cached(&dir).unwrap();
    let bytes = std::fs::read(dir.join("tiny-imagenet-200").join(VAL_CACHE)).unwrap();
    assert_eq!(&bytes[..8], cache::MAGIC);
    let what = "tiny-imagenet val";
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize, what.len());
    assert_eq!(&bytes[12..12 + what.len()], what.as_bytes());
    let at = 12 + what.len() + 32;
    assert_eq!(bytes[at], 1, "u8 values");
    assert_eq!(u64::from_le_bytes(bytes[at + 1..at + 9].try_into().unwrap()), 3, "3 samples");
    assert_eq!(u32::from_le_bytes(bytes[at + 9..at + 13].try_into().unwrap()), 3, "3 dimensions");
    let dims: Vec<u64> =
        (0..3).map(|d| u64::from_le_bytes(bytes[at + 13 + 8 * d..at + 21 + 8 * d].try_into().unwrap())).collect();
    assert_eq!(dims, [3, 64, 64]);
    let header = at + 13 + 24 + 8 + 32;
    assert_eq!(bytes.len(), header + 3 + 3 * 3 * 64 * 64);
    assert_eq!(bytes[header..header + 3], [5, 199, 0], "labels, then pixels");
}

#[test]
fn the_registered_component_normalises_with_the_dataset_statistics() {
    let (t, _dir) = dataset();
    let data = build_dataset("tiny-imagenet", "", t.path(), 0).unwrap();
    assert_eq!(data.train.x.size(), [5, 3, 64, 64]);
    assert_eq!(data.test.x.size(), [3, 3, 64, 64]);
    assert_eq!(data.spec.input_shape, [3, 64, 64]);
    assert_eq!(data.spec.classes, 200);
    assert_eq!(Vec::<i64>::try_from(&data.train.y).unwrap(), [0, 0, 2, 3, 199]);
    let raw = read_tiny_imagenet_cached(&t.path().join("tiny-imagenet")).unwrap().splits.train;
    let (mean, std) = ([0.4802, 0.4481, 0.3975], [0.2302, 0.2265, 0.2262]);
    for c in 0..3 {
        let expected = (f64::from(px(&raw.pixels, 1, c, 10, 5)) / 255.0 - mean[c]) / std[c];
        let found = data.train.x.double_value(&[1, c as i64, 10, 5]);
        assert!((found - expected).abs() < 1e-5, "channel {c}: {found} vs {expected}");
    }
    let few = build_dataset("tiny-imagenet", "train_samples = 2\ntest_samples = 1", t.path(), 0).unwrap();
    assert_eq!((few.train.x.size()[0], few.test.x.size()[0]), (2, 1));
    let err = build_dataset("tiny-imagenet", "train_samples = 6", t.path(), 0).unwrap_err().to_string();
    assert!(err.contains("train_samples") && err.contains("has 5"), "{err}");
}

#[test]
fn an_archive_unzipped_straight_into_the_data_directory_is_found() {
    let t = tmp();
    write_tiny(&t.path().join("tiny-imagenet-200"));
    assert_eq!(tiny_imagenet::default_dir(t.path()), t.path().join("tiny-imagenet-200"));
    let info = fl_data::info("tiny-imagenet", t.path()).unwrap();
    let fl_data::DataState::Present { train, test, train_per_class, verified_files } = &info.state else {
        panic!("{info}")
    };
    assert_eq!((*train, *test, verified_files), (5, 3, &None));
    assert_eq!(train_per_class.len(), 200);
    assert_eq!((train_per_class[0], train_per_class[1], train_per_class[199]), (2, 0, 1));
    assert_eq!(info.classes, 200);
    assert!(fl_data::fetch("tiny-imagenet", t.path()).unwrap().already_present);
}

#[test]
fn a_missing_dataset_says_which_archive_to_get_and_where_to_unzip_it() {
    let t = tmp();
    let info = fl_data::info("tiny-imagenet", t.path()).unwrap();
    let fl_data::DataState::Missing(msg) = &info.state else { panic!("{info}") };
    let dir = t.path().join("tiny-imagenet");
    assert!(msg.contains("tiny-imagenet-200.zip") && msg.contains(&dir.display().to_string()), "{msg}");
    assert!(msg.contains("wnids.txt"), "{msg}");
    assert_eq!(info.looked_in, [dir.clone(), dir.join("tiny-imagenet-200")]);
    assert!(info.to_string().contains("status:   missing"));
    let err = fl_data::fetch("tiny-imagenet", t.path()).unwrap_err().to_string();
    assert!(err.contains("tiny-imagenet-200.zip"), "{err}");
}

fn err_of(dir: &Path) -> String {
    read_tiny_imagenet_cached(dir).unwrap_err().to_string()
}

#[test]
fn malformed_files_are_errors_naming_the_file_and_the_expectation() {
    let (_t, dir) = dataset();
    let root = dir.join("tiny-imagenet-200");
    let wnids = std::fs::read_to_string(root.join("wnids.txt")).unwrap();

    let short: Vec<&str> = wnids.lines().take(199).collect();
    std::fs::write(root.join("wnids.txt"), short.join("\n")).unwrap();
    let err = err_of(&dir);
    assert!(err.contains("wnids.txt") && err.contains("expected 200 WordNet ids") && err.contains("199"), "{err}");

    let doubled = wnids.replacen(&wnid(1), &wnid(0), 1);
    std::fs::write(root.join("wnids.txt"), doubled).unwrap();
    let err = err_of(&dir);
    assert!(err.contains("wnids.txt") && err.contains("distinct") && err.contains(&wnid(0)), "{err}");
    std::fs::write(root.join("wnids.txt"), &wnids).unwrap();

    std::fs::remove_dir_all(root.join("train").join(wnid(4))).unwrap();
    let err = err_of(&dir);
    assert!(err.contains(&format!("{}/images", wnid(4))) && err.contains("class 4") && err.contains("line 5"), "{err}");
    std::fs::create_dir_all(root.join("train").join(wnid(4)).join("images")).unwrap();

    let ann_path = root.join("val/val_annotations.txt");
    let ann = std::fs::read_to_string(&ann_path).unwrap();
    std::fs::write(&ann_path, format!("{ann}val_9.JPEG\tn99999999\t0\t0\t1\t1\n")).unwrap();
    let err = err_of(&dir);
    assert!(err.contains("val_annotations.txt") && err.contains("line 4") && err.contains("n99999999"), "{err}");
    std::fs::write(&ann_path, format!("{ann}val_9.JPEG\n")).unwrap();
    let err = err_of(&dir);
    assert!(err.contains("val_annotations.txt") && err.contains("file<TAB>wnid") && err.contains("line 4"), "{err}");
    std::fs::write(&ann_path, format!("{ann}val_9.JPEG\t{}\t0\t0\t1\t1\n", wnid(3))).unwrap();
    let err = err_of(&dir);
    assert!(err.contains("val_9.JPEG") && err.contains("line 4") && err.contains("no such file"), "{err}");
    std::fs::write(&ann_path, &ann).unwrap();

    let broken = root.join("train").join(wnid(2)).join("images/x_0.JPEG");
    std::fs::write(&broken, b"\xff\xd8 not really a JPEG").unwrap();
    let err = err_of(&dir);
    assert!(err.contains("x_0.JPEG") && err.contains("expected a JPEG image"), "{err}");
    std::fs::write(&broken, jpeg(&[7; 32 * 32 * 3], 32, 32, true)).unwrap();
    let err = err_of(&dir);
    assert!(err.contains("x_0.JPEG") && err.contains("expected a 64x64 image, found 32x32"), "{err}");
}
