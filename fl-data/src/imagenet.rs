//! ImageNet (ILSVRC-2012; Russakovsky et al., "ImageNet Large Scale Visual Recognition
//! Challenge", IJCV 2015) read from a folder of JPEGs, and the dataset component `imagenet`: a
//! seeded choice of K of its classes (the ImageNet-200/300 subsets of papers such as Co-S²P),
//! resized to a chosen square resolution.
//!
//! **Files** (the dataset has no fetcher: its images are not redistributable):
//! ```text
//! <dir>/train/<wnid>/*.JPEG   training images, one directory per class (ILSVRC2012_img_train.tar,
//!                             each class's inner tar extracted into a directory named after it)
//! <dir>/val/<wnid>/*.JPEG     validation images sorted into the same class directories (the
//!                             layout the common `valprep.sh` makes of ILSVRC2012_img_val.tar)
//! ```
//! Files ending in `.JPEG`, `.jpeg` or `.jpg` (any case) are read; other files are ignored. The
//! validation split is the test split. Not read: the test images, the devkit, bounding boxes. The
//! flat `val/*.JPEG` of the official archive labelled by the devkit's
//! `ILSVRC2012_validation_ground_truth.txt` is rejected with a message: that file's class
//! indices follow the `ILSVRC2012_ID` order of the devkit's `meta.mat`, which is not the sorted
//! wnid order of `LOC_synset_mapping.txt` or `synsets.txt`, so pairing it with one of those would
//! mislabel the images without notice.
//!
//! **Classes.** The classes are the directories under `train/`, in sorted name order. `classes =
//! K` keeps K of those N: `rand::seq::index::sample` with a ChaCha8 generator seeded by
//! `class_seed` picks K indices uniformly, and the kept wnids are sorted again; label `k` is the
//! `k`-th kept wnid. Each split lists its kept classes in label order, each class's files in
//! sorted name order. A validation directory that has no training directory is an error; those of
//! classes not kept are not read.
//!
//! **Pixels.** Each image is decoded (grey and CMYK JPEGs converted to RGB), its shorter side
//! resized to `resolution` with the longer side scaled in proportion and truncated to whole
//! pixels (as torchvision's `Resize(resolution)`), by the `image` crate's triangle filter
//! (bilinear, widened when shrinking so that it averages every source pixel), then the centre
//! `resolution × resolution` square is cut out (offsets rounded down). Samples are u8 `[3, R, R]`,
//! plane after plane.
//!
//! **Bad files.** A file that does not decode (or cannot be read) is skipped; the count and the
//! first few files, each with the reason, go to stderr. When more than `max_bad_fraction` of a
//! split's files fail, the load is an error naming the first failing file. (ILSVRC-2012's training
//! set holds one PNG file named `.JPEG`; this crate decodes JPEG only, so it counts as bad.)
//!
//! **Cache.** Decoding is slow, so each split goes once into
//! `cache-{train,val}-k<K>-s<class_seed>-r<resolution>.bin` beside the data ([`crate::cache`]),
//! whose `what` repeats those parameters and whose fingerprint covers the kept wnids and each kept
//! file's path and size: other parameters or changed files are another cache. Labels can exceed a
//! byte, so the cache's label bytes hold each label's low byte and its extra bytes first the high
//! bytes (one per sample), then the skipped files, one `path<TAB>reason` line each (paths relative
//! to the dataset directory), so that a load from the cache reports them and checks them against
//! its own `max_bad_fraction`. The files are decoded on all available cores; the result does not
//! depend on their number. `fl data info imagenet` lists and counts the files of every class
//! without decoding them.
//!
//! Parameters of `imagenet` (all optional):
//! - `dir`: the directory holding `train/` and `val/`; default `<data_dir>/imagenet`.
//! - `classes`: K, the classes to keep; default all.
//! - `class_seed`: the seed of the choice of the K classes; default 0.
//! - `resolution`: the side of the square images, in pixels; default 224.
//! - `max_bad_fraction`: the fraction of a split's files that may fail to decode; default 0.01.
//! - `train_samples`, `test_samples`: keep only the first n samples of a split (all of the first
//!   class's come first: shuffle through the partitioner).
//! - `normalization`: `"dataset-stats"` (ImageNet's usual per-channel mean and std, default) or
//!   `"half"` (mean 0.5, std 0.5).
//! - `verify`: check the files against a `SHA256SUMS` in the directory first, when there is one
//!   (default true; see [`crate::integrity`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use fl_core::registry::{Builder, Component, DataContext, Params, defaults_of};
use fl_core::{DataSpec, FederatedData, InvalidKey};
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::cache::{self, CacheUse, Cached, Fingerprint, Lookup, Progress, Values};
use crate::datasets::{NormalizationChoice, keep_first_samples};
use crate::error::{DataError, Result};
pub use crate::jpeg_listing::Listing;
use crate::jpeg_listing::is_jpeg_name;
use crate::raw::{Normalization, RawImages, RawSplits};

/// The dataset's name in the registry, the data directory and `fl data info`.
pub const IMAGENET: &str = "imagenet";
/// ILSVRC-2012's classes (what `fl data info` says while the files are missing).
pub const IMAGENET_CLASSES: usize = 1000;
/// The usual per-channel statistics of ImageNet's training images (torchvision's).
pub const IMAGENET_NORMALIZATION: Normalization =
    Normalization { mean: &[0.485, 0.456, 0.406], std: &[0.229, 0.224, 0.225] };
const HALVES: Normalization = Normalization { mean: &[0.5; 3], std: &[0.5; 3] };
/// Skipped files named one by one on stderr; the rest are counted.
const SKIPS_SHOWN: usize = 10;
/// Files a decoding thread claims at a time.
const CHUNK: usize = 64;

/// Parameters of `imagenet`; see the module documentation.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImageNetConfig {
    pub dir: Option<PathBuf>,
    pub classes: Option<usize>,
    pub class_seed: u64,
    #[default(224)]
    pub resolution: usize,
    #[default(0.01)]
    pub max_bad_fraction: f64,
    pub train_samples: Option<usize>,
    pub test_samples: Option<usize>,
    pub normalization: NormalizationChoice,
    #[default(true)]
    pub verify: bool,
}

impl ImageNetConfig {
    /// Checks the values that need no data; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.classes == Some(0) {
            return Err(InvalidKey::new("classes", "expected at least 1"));
        }
        if self.resolution == 0 {
            return Err(InvalidKey::new("resolution", "expected at least 1 pixel"));
        }
        if !(0.0..=1.0).contains(&self.max_bad_fraction) {
            return Err(InvalidKey::new(
                "max_bad_fraction",
                format!("expected a fraction in [0, 1], got {}", self.max_bad_fraction),
            ));
        }
        Ok(())
    }
}

/// The default directory, `<data_dir>/imagenet`.
pub fn default_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(IMAGENET)
}

/// Where the files may be (one place: there is no archive directory to look into).
pub fn candidates(dir: &Path) -> [PathBuf; 1] {
    [dir.to_path_buf()]
}

/// What to do when the files are not there.
fn placement_hint(dir: &Path) -> String {
    format!(
        "ImageNet is not redistributable and has no fetcher: download ILSVRC2012_img_train.tar and \
         ILSVRC2012_img_val.tar from https://image-net.org (after accepting its terms of access), extract the \
         training images into {0}/train/<wnid>/*.JPEG (one directory per class) and the validation images into \
         {0}/val/<wnid>/*.JPEG (sorted into the same class directories, e.g. with valprep.sh), or set `dir` to a \
         directory in that layout",
        dir.display()
    )
}

/// `dir` when it holds `train/` and `val/` directories.
pub fn locate(dir: &Path) -> Result<PathBuf> {
    let absent: Vec<String> =
        ["train", "val"].into_iter().filter(|d| !dir.join(d).is_dir()).map(|d| format!("{d}/")).collect();
    if absent.is_empty() {
        return Ok(dir.to_path_buf());
    }
    Err(DataError::Missing {
        dataset: IMAGENET.into(),
        missing: absent.join(", "),
        looked_in: candidates(dir).to_vec(),
        hint: placement_hint(dir),
    })
}

/// The names of the directories in `dir`, sorted, and how many JPEG files lie directly in it.
fn subdirs_and_jpegs(dir: &Path) -> Result<(Vec<String>, usize)> {
    let mut names = Vec::new();
    let mut jpegs = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))? {
        let path = entry.map_err(|e| DataError::io(dir, e))?.path();
        if path.is_dir() {
            names.push(path.file_name().expect("a directory entry has a name").to_string_lossy().into_owned());
        } else if is_jpeg_name(&path) {
            jpegs += 1;
        }
    }
    names.sort();
    Ok((names, jpegs))
}

/// Every class: the directories under `root/train`, sorted.
pub fn class_dirs(root: &Path) -> Result<Vec<String>> {
    let train = root.join("train");
    let (wnids, _) = subdirs_and_jpegs(&train)?;
    if wnids.is_empty() {
        return Err(DataError::format(&train, "one directory of JPEGs per class (train/<wnid>/*.JPEG)", "none"));
    }
    if wnids.len() > usize::from(u16::MAX) + 1 {
        return Err(DataError::format(&train, "at most 65,536 class directories", wnids.len().to_string()));
    }
    Ok(wnids)
}

/// The kept classes, sorted: all of `all` when `classes` is `None`, else `classes` of them chosen
/// uniformly by a ChaCha8 generator seeded with `class_seed`.
pub fn choose_classes(all: &[String], classes: Option<usize>, class_seed: u64) -> Result<Vec<String>> {
    let Some(k) = classes else { return Ok(all.to_vec()) };
    if k == 0 || k > all.len() {
        return Err(DataError::Key(InvalidKey::new(
            "classes",
            format!("expected 1 to {} (the class directories under train/), got {k}", all.len()),
        )));
    }
    let mut rng = fl_core::rng::Rng::seed_from_u64(class_seed);
    let mut chosen = rand::seq::index::sample(&mut rng, all.len(), k).into_vec();
    chosen.sort_unstable();
    Ok(chosen.into_iter().map(|i| all[i].clone()).collect())
}

/// Lists the JPEGs of `kept` (sorted wnids, as [`choose_classes`] returns them) in both splits,
/// after checking that `val/` is sorted into directories of known classes.
pub fn list(root: &Path, kept: &[String]) -> Result<Listing> {
    let all = class_dirs(root)?;
    let val_dir = root.join("val");
    let (val_wnids, flat_jpegs) = subdirs_and_jpegs(&val_dir)?;
    if val_wnids.is_empty() && flat_jpegs > 0 {
        return Err(DataError::format(
            &val_dir,
            "the validation JPEGs sorted into class directories (val/<wnid>/*.JPEG)",
            format!(
                "{flat_jpegs} JPEGs directly in val/ (the official archive's flat layout, labelled by the devkit's \
                 ILSVRC2012_validation_ground_truth.txt, is not read; sort them into class directories first, \
                 e.g. with valprep.sh)"
            ),
        ));
    }
    if let Some(unknown) = val_wnids.iter().find(|w| all.binary_search(w).is_err()) {
        return Err(DataError::format(
            val_dir.join(unknown),
            "a class directory that train/ has too",
            format!("no train/{unknown}/"),
        ));
    }
    let mut fp = Fingerprint::default();
    fp.contents("kept classes", kept.join("\n").as_bytes());
    let mut splits = [Vec::new(), Vec::new()];
    for (split, files) in ["train", "val"].into_iter().zip(&mut splits) {
        for (k, wnid) in kept.iter().enumerate() {
            let class_dir = root.join(split).join(wnid);
            let entries = std::fs::read_dir(&class_dir).map_err(|e| {
                DataError::format(
                    &class_dir,
                    format!("the {split} JPEGs of class {k}, `{wnid}`"),
                    format!("no readable directory ({e})"),
                )
            })?;
            let mut class_files = Vec::new();
            for entry in entries {
                let path = entry.map_err(|e| DataError::io(&class_dir, e))?.path();
                if is_jpeg_name(&path) && path.is_file() {
                    class_files.push(path);
                }
            }
            class_files.sort();
            for path in class_files {
                fp.file(root, &path)?;
                files.push((path, k as u16));
            }
        }
    }
    let [train, val] = splits;
    Ok(Listing { root: root.to_path_buf(), wnids: kept.to_vec(), train, val, fingerprint: fp.finish() })
}

/// Decodes an image and makes it `3 × side × side` bytes, plane after plane: shorter side resized
/// to `side`, centre cut out (see the module documentation). The error is the reason alone.
fn decode_bytes(bytes: &[u8], side: usize) -> std::result::Result<Vec<u8>, String> {
    let image = image::load_from_memory_with_format(bytes, image::ImageFormat::Jpeg)
        .map_err(|e| format!("data that do not decode as a JPEG ({e})"))?;
    let rgb = image.to_rgb8();
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);
    if w == 0 || h == 0 {
        return Err(format!("an empty {w}x{h} image"));
    }
    let (new_w, new_h) = if w <= h { (side, h * side / w) } else { (w * side / h, side) };
    let resized = image::imageops::resize(&rgb, new_w as u32, new_h as u32, image::imageops::FilterType::Triangle);
    let (x0, y0) = ((new_w - side) / 2, (new_h - side) / 2);
    let plane = side * side;
    let mut planes = vec![0u8; 3 * plane];
    for r in 0..side {
        for x in 0..side {
            let px = resized.get_pixel((x0 + x) as u32, (y0 + r) as u32).0;
            for c in 0..3 {
                planes[c * plane + r * side + x] = px[c];
            }
        }
    }
    Ok(planes)
}

/// Reads and decodes one image into `3 × side × side` bytes (see the module documentation).
pub fn decode_resized(path: &Path, side: usize) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    decode_bytes(&bytes, side).map_err(|reason| DataError::format(path, "an image that decodes", reason))
}

/// A file that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// `⌊max_bad_fraction × total⌋`: the most failures a split of `total` files may have.
fn allowed_failures(max_bad_fraction: f64, total: usize) -> usize {
    (max_bad_fraction * total as f64).floor() as usize
}

/// Logs the skipped files of a split, or fails when they are more than `max_bad_fraction` allows.
fn check_skipped(what: &str, skipped: &[Skipped], total: usize, max_bad_fraction: f64) -> Result<()> {
    let Some(first) = skipped.first() else { return Ok(()) };
    let allowed = allowed_failures(max_bad_fraction, total);
    if skipped.len() > allowed {
        return Err(DataError::TooManyUndecodable {
            what: what.into(),
            bad: skipped.len(),
            total,
            max_bad_fraction,
            allowed,
            first: Box::new(DataError::format(&first.path, "an image that decodes", first.reason.clone())),
        });
    }
    eprintln!(
        "{what}: skipped {} of {total} files that do not decode (max_bad_fraction = {max_bad_fraction} allows \
         {allowed}):",
        skipped.len()
    );
    for s in skipped.iter().take(SKIPS_SHOWN) {
        eprintln!("  {}: {}", s.path.display(), s.reason);
    }
    if skipped.len() > SKIPS_SHOWN {
        eprintln!("  and {} more", skipped.len() - SKIPS_SHOWN);
    }
    Ok(())
}

/// Decodes `files` on all available cores, in order; stops early once the failures exceed what
/// `max_bad_fraction` allows.
fn decode_split(
    files: &[(PathBuf, u16)],
    side: usize,
    max_bad_fraction: f64,
    what: &str,
) -> Result<(RawImages, Vec<Skipped>)> {
    let allowed = allowed_failures(max_bad_fraction, files.len());
    let next = AtomicUsize::new(0);
    let failures = AtomicUsize::new(0);
    let progress = Mutex::new(Progress::start(format!("decoding {what} (once, into its cache)"), files.len()));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(files.len().div_ceil(CHUNK)).max(1);
    let mut decoded: Vec<Option<std::result::Result<Vec<u8>, String>>> = vec![None; files.len()];
    std::thread::scope(|s| {
        let worker = || {
            let mut out = Vec::new();
            while failures.load(Ordering::Relaxed) <= allowed {
                let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                if start >= files.len() {
                    break;
                }
                for (i, (path, _)) in files.iter().enumerate().skip(start).take(CHUNK) {
                    let result = std::fs::read(path).map_err(|e| e.to_string()).and_then(|b| decode_bytes(&b, side));
                    if result.is_err() {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    out.push((i, result));
                    progress.lock().expect("no decoding thread panics holding the lock").tick();
                }
            }
            out
        };
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(worker)).collect();
        for handle in handles {
            for (i, result) in handle.join().expect("a decoding thread does not panic") {
                decoded[i] = Some(result);
            }
        }
    });
    // Each decoded image is freed as it is copied, and the pixels are allocated once, so the
    // split needs little more than its own size at its peak.
    let decodes = decoded.iter().filter(|d| matches!(d, Some(Ok(_)))).count();
    let mut images = RawImages {
        pixels: Vec::with_capacity(decodes * 3 * side * side),
        labels: Vec::with_capacity(decodes),
        channels: 3,
        rows: side,
        cols: side,
    };
    let mut skipped = Vec::new();
    for ((path, label), result) in files.iter().zip(decoded) {
        match result {
            Some(Ok(planes)) => {
                images.pixels.extend_from_slice(&planes);
                images.labels.push(*label);
            }
            Some(Err(reason)) => skipped.push(Skipped { path: path.clone(), reason }),
            // Not reached: decoding stopped early.
            None => {}
        }
    }
    check_skipped(what, &skipped, files.len(), max_bad_fraction)?;
    Ok((images, skipped))
}

/// The cache's extra bytes: the labels' high bytes, then the skipped files.
fn cache_extra(root: &Path, labels: &[u16], skipped: &[Skipped]) -> Vec<u8> {
    let mut extra: Vec<u8> = labels.iter().map(|&l| (l >> 8) as u8).collect();
    for s in skipped {
        let relative = s.path.strip_prefix(root).unwrap_or(&s.path);
        // A reason is one line: the record is line-based.
        let reason = s.reason.replace(['\n', '\t'], " ");
        extra.extend_from_slice(format!("{}\t{reason}\n", relative.display()).as_bytes());
    }
    extra
}

/// The split in a cache hit, if its shape and extra bytes are the ones expected.
fn from_cached(c: Cached, root: &Path, side: usize) -> std::result::Result<(RawImages, Vec<Skipped>), Lookup> {
    let shape = [3, side, side];
    if c.sample_shape != shape {
        return Err(Lookup::Damaged(format!("samples of shape {:?}, not {shape:?}", c.sample_shape)));
    }
    let Values::U8(pixels) = c.values else { return Err(Lookup::Damaged("u32 values instead of pixel bytes".into())) };
    let n = c.labels.len();
    if c.extra.len() < n {
        return Err(Lookup::Damaged(format!("{} extra bytes, fewer than its {n} labels", c.extra.len())));
    }
    let labels = c.labels.iter().zip(&c.extra[..n]).map(|(&lo, &hi)| u16::from_le_bytes([lo, hi])).collect();
    let Ok(record) = std::str::from_utf8(&c.extra[n..]) else {
        return Err(Lookup::Damaged("a list of skipped files that is not UTF-8".into()));
    };
    let mut skipped = Vec::new();
    for line in record.lines() {
        let Some((path, reason)) = line.split_once('\t') else {
            return Err(Lookup::Damaged(format!("a skipped-file line without a reason: `{line}`")));
        };
        skipped.push(Skipped { path: root.join(path), reason: reason.into() });
    }
    Ok((RawImages { pixels, labels, channels: 3, rows: side, cols: side }, skipped))
}

/// One split from its cache, or decoded (and cached) when the cache is absent, stale or damaged.
fn split(
    listing: &Listing,
    which: &str,
    cfg: &ImageNetConfig,
    all_classes: usize,
) -> Result<(RawImages, Vec<Skipped>, CacheUse)> {
    let (k, seed, side) = (listing.wnids.len(), cfg.class_seed, cfg.resolution);
    let path = listing.root.join(format!("cache-{which}-k{k}-s{seed}-r{side}.bin"));
    let what = format!("{IMAGENET} {which}, {k} of {all_classes} classes, class_seed {seed}, resolution {side}");
    let found = match cache::lookup(&path, &what, &listing.fingerprint)? {
        Lookup::Hit(c) => match from_cached(c, &listing.root, side) {
            Ok((images, skipped)) => {
                check_skipped(&what, &skipped, images.len() + skipped.len(), cfg.max_bad_fraction)?;
                return Ok((images, skipped, CacheUse::Read));
            }
            Err(found) => found,
        },
        other => other,
    };
    cache::note_rebuild(&path, &found);
    let files = if which == "train" { &listing.train } else { &listing.val };
    let (images, skipped) = decode_split(files, side, cfg.max_bad_fraction, &what)?;
    let extra = cache_extra(&listing.root, &images.labels, &skipped);
    // The pixels move into the cache's struct and back (gigabytes for a large subset: no copy).
    let cached = Cached {
        labels: images.labels.iter().map(|&l| l as u8).collect(),
        sample_shape: vec![3, side, side],
        values: Values::U8(images.pixels),
        extra,
    };
    cache::store(&path, &what, &listing.fingerprint, &cached);
    let Values::U8(pixels) = cached.values else { unreachable!("built as bytes above") };
    let images = RawImages { pixels, labels: images.labels, channels: 3, rows: side, cols: side };
    Ok((images, skipped, found.rebuild_use()))
}

/// Both splits of the kept classes and how each was obtained.
#[derive(Debug, Clone)]
pub struct ImageNet {
    /// The training split and the validation split as the test split.
    pub splits: RawSplits,
    /// The kept classes, sorted: label `k` is `wnids[k]`.
    pub wnids: Vec<String>,
    /// The files skipped because they do not decode.
    pub train_skipped: Vec<Skipped>,
    pub val_skipped: Vec<Skipped>,
    pub train_cache: CacheUse,
    pub val_cache: CacheUse,
}

/// Reads ImageNet's kept classes from `dir` at `cfg.resolution` (the `dir` in `cfg` is not
/// consulted), from the caches when they are current. `classes` above the number of class
/// directories is a [`DataError::Key`] naming `classes`.
pub fn read_imagenet_cached(dir: &Path, cfg: &ImageNetConfig) -> Result<ImageNet> {
    cfg.validate()?;
    let root = locate(dir)?;
    let all = class_dirs(&root)?;
    let kept = choose_classes(&all, cfg.classes, cfg.class_seed)?;
    let listing = list(&root, &kept)?;
    let (train, train_skipped, train_cache) = split(&listing, "train", cfg, all.len())?;
    let (test, val_skipped, val_cache) = split(&listing, "val", cfg, all.len())?;
    Ok(ImageNet {
        splits: RawSplits { train, test },
        wnids: listing.wnids,
        train_skipped,
        val_skipped,
        train_cache,
        val_cache,
    })
}

/// Reads ImageNet as `cfg` asks (directory default `<ctx.data_dir>/imagenet`), keeps the first
/// samples as asked and puts both splits on `ctx.device`.
pub fn load_imagenet(cfg: &ImageNetConfig, params: &Params, ctx: &DataContext) -> fl_core::Result<FederatedData> {
    let dir = cfg.dir.clone().unwrap_or_else(|| default_dir(&ctx.data_dir));
    if cfg.verify {
        crate::integrity::check(&dir)?;
    }
    let mut read = read_imagenet_cached(&dir, cfg).map_err(|e| match e {
        DataError::Key(key) => params.invalid_key(key),
        other => other.into(),
    })?;
    keep_first_samples(&mut read.splits, cfg.train_samples, cfg.test_samples, params, &dir)?;
    let norm = match cfg.normalization {
        NormalizationChoice::DatasetStats => IMAGENET_NORMALIZATION,
        NormalizationChoice::Half => HALVES,
    };
    let side = cfg.resolution as i64;
    Ok(FederatedData {
        train: read.splits.train.to_dataset(norm, ctx.device),
        test: read.splits.test.to_dataset(norm, ctx.device),
        spec: DataSpec { input_shape: vec![3, side, side], classes: read.wnids.len() as i64, vocab_size: None },
        natural_partition: None,
    })
}

inventory::submit! {
    Component {
        name: IMAGENET,
        summary: "ImageNet (ILSVRC-2012) from train/<wnid>/*.JPEG and val/<wnid>/*.JPEG in <data_dir>/imagenet (not \
                  fetchable), the val split as test, a seeded choice of K classes, shorter side resized to \
                  resolution and centre-cropped, decoded once into cache-*.bin; params dir, classes, class_seed, \
                  resolution, max_bad_fraction, train_samples, test_samples",
        paper: "Russakovsky et al., ImageNet Large Scale Visual Recognition Challenge, IJCV 2015",
        defaults: defaults_of::<ImageNetConfig>,
        build: Builder::Dataset(|p, ctx| {
            let cfg: ImageNetConfig = p.parse_valid(ImageNetConfig::validate)?;
            load_imagenet(&cfg, p, ctx)
        }),
        origin: module_path!(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_above_a_byte_and_skipped_files_survive_the_cache_record() {
        let root = Path::new("/data/imagenet");
        let labels = vec![0, 255, 256, 299, 999];
        let skipped = vec![Skipped { path: root.join("train/n1/x.JPEG"), reason: "bad\tdata\non two lines".into() }];
        let cached = Cached {
            labels: labels.iter().map(|&l| l as u8).collect(),
            sample_shape: vec![3, 1, 1],
            values: Values::U8(vec![7; 15]),
            extra: cache_extra(root, &labels, &skipped),
        };
        let Ok((images, back)) = from_cached(cached, root, 1) else { panic!("the record reads back") };
        assert_eq!(images.labels, labels);
        assert_eq!(back, [Skipped { path: root.join("train/n1/x.JPEG"), reason: "bad data on two lines".into() }]);
    }
}
