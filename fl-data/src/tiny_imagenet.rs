//! Tiny-ImageNet-200 (Le and Yang, "Tiny ImageNet Visual Recognition Challenge", CS231N 2015)
//! in the layout of the official `tiny-imagenet-200.zip`:
//!
//! ```text
//! tiny-imagenet-200/wnids.txt                     200 WordNet ids, one a line: the classes, in order
//! tiny-imagenet-200/train/<wnid>/images/*.JPEG    500 training images per class
//! tiny-imagenet-200/val/val_annotations.txt       `file<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1` per line
//! tiny-imagenet-200/val/images/*.JPEG             10,000 validation images
//! ```
//! (`test/` has no labels and is not read; `words.txt` and the boxes are not used.) The labelled
//! validation split is the test set, as in the papers that train on Tiny-ImageNet.
//!
//! Class `k` is line `k` of `wnids.txt`. Training images are read class by class, each class's
//! files in sorted name order; validation images in the order of `val_annotations.txt`. Every
//! image is a 64x64 JPEG; grey ones (the set has a few hundred) are repeated into three
//! channels. Decoding 110,000 JPEGs takes a while, so the pixels go once into
//! `cache-train.bin` and `cache-val.bin` beside the data ([`crate::cache`]; u8 `[n, 3, 64, 64]`
//! and u8 labels), and later loads read those.

use std::path::{Path, PathBuf};

use crate::cache::{self, CacheUse, Cached, Fingerprint, Lookup, Progress, Values};
use crate::error::{DataError, Result};
pub use crate::jpeg_listing::Listing;
use crate::jpeg_listing::is_jpeg_name;
use crate::raw::{RawImages, RawSplits};

/// The dataset's name in the registry, the data directory and `fl data info`.
pub const TINY_IMAGENET: &str = "tiny-imagenet";
/// The directory the official archive unzips to.
pub const TINY_SUBDIR: &str = "tiny-imagenet-200";
pub const TINY_ARCHIVE: &str = "tiny-imagenet-200.zip";
/// The official archive (CS231N's).
pub const TINY_URL: &str = "http://cs231n.stanford.edu/tiny-imagenet-200.zip";
pub const TINY_CLASSES: usize = 200;
/// Images are `SIDE × SIDE` RGB.
pub const SIDE: usize = 64;
pub const WNIDS: &str = "wnids.txt";
pub const VAL_ANNOTATIONS: &str = "val/val_annotations.txt";
pub const TRAIN_CACHE: &str = "cache-train.bin";
pub const VAL_CACHE: &str = "cache-val.bin";

/// Where the files may be: `dir` itself or the archive's directory under it, in the order tried.
pub fn candidates(dir: &Path) -> [PathBuf; 2] {
    [dir.to_path_buf(), dir.join(TINY_SUBDIR)]
}

/// The default directory: `<data_dir>/tiny-imagenet`, or `<data_dir>/tiny-imagenet-200` when
/// only that exists (the archive unzipped straight into the data directory).
pub fn default_dir(data_dir: &Path) -> PathBuf {
    let named = data_dir.join(TINY_IMAGENET);
    let unzipped = data_dir.join(TINY_SUBDIR);
    if !named.exists() && unzipped.join(WNIDS).is_file() { unzipped } else { named }
}

/// The directory (`dir` or `dir/tiny-imagenet-200`) holding `wnids.txt`, `train/` and
/// `val/val_annotations.txt`.
pub fn locate(dir: &Path) -> Result<PathBuf> {
    let needed = [WNIDS, "train", VAL_ANNOTATIONS];
    let holds = |d: &Path| needed.iter().all(|f| d.join(f).exists());
    if let Some(found) = candidates(dir).into_iter().find(|d| holds(d)) {
        return Ok(found);
    }
    let looked_in = candidates(dir).to_vec();
    // The training images are a directory: `train/`.
    let shown = |f: &str| if f == "train" { "train/".to_owned() } else { f.to_owned() };
    let absent: Vec<String> =
        needed.iter().copied().filter(|f| !looked_in.iter().any(|d| d.join(f).exists())).map(shown).collect();
    let missing = if absent.is_empty() {
        format!("a directory holding all of {}", needed.map(shown).join(", "))
    } else {
        absent.join(", ")
    };
    Err(DataError::Missing {
        dataset: TINY_IMAGENET.into(),
        missing,
        looked_in,
        hint: format!(
            "download {TINY_ARCHIVE} ({TINY_URL}) and unzip it in {} (it creates {TINY_SUBDIR}/ there){}",
            dir.display(),
            dir.parent()
                .filter(|_| dir.file_name().is_some_and(|n| n == TINY_IMAGENET))
                .map(|p| format!(" or in {}", p.display()))
                .unwrap_or_default()
        ),
    })
}

/// Reads `wnids.txt`, lists each class's training JPEGs and parses `val_annotations.txt`.
pub fn list(root: &Path) -> Result<Listing> {
    let mut fp = Fingerprint::default();
    let wnids_path = root.join(WNIDS);
    let text = std::fs::read_to_string(&wnids_path).map_err(|e| DataError::io(&wnids_path, e))?;
    fp.contents(WNIDS, text.as_bytes());
    let wnids: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
    if wnids.len() != TINY_CLASSES {
        return Err(DataError::format(
            &wnids_path,
            format!("{TINY_CLASSES} WordNet ids, one a line"),
            format!("{} non-empty lines", wnids.len()),
        ));
    }
    let index = |wnid: &str| wnids.iter().position(|w| w == wnid);
    for (i, w) in wnids.iter().enumerate() {
        if index(w) != Some(i) {
            return Err(DataError::format(&wnids_path, "distinct WordNet ids", format!("`{w}` twice")));
        }
    }
    let mut train = Vec::new();
    for (k, wnid) in wnids.iter().enumerate() {
        let class_dir = root.join("train").join(wnid).join("images");
        let entries = std::fs::read_dir(&class_dir).map_err(|e| {
            DataError::format(
                &class_dir,
                format!("the training JPEGs of class {k}, `{wnid}` (line {} of {WNIDS})", k + 1),
                format!("no readable directory ({e})"),
            )
        })?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| DataError::io(&class_dir, e))?.path();
            if is_jpeg_name(&path) {
                files.push(path);
            }
        }
        files.sort();
        for path in files {
            fp.file(root, &path)?;
            train.push((path, k as u16));
        }
    }
    let ann_path = root.join(VAL_ANNOTATIONS);
    let text = std::fs::read_to_string(&ann_path).map_err(|e| DataError::io(&ann_path, e))?;
    fp.contents(VAL_ANNOTATIONS, text.as_bytes());
    let mut val = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let line_no = i + 1;
        let mut fields = line.split('\t');
        let (Some(file), Some(wnid)) = (fields.next(), fields.next()) else {
            return Err(DataError::format(
                &ann_path,
                format!("`file<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1` on line {line_no}"),
                format!("`{line}`"),
            ));
        };
        let Some(label) = index(wnid.trim()) else {
            return Err(DataError::format(
                &ann_path,
                format!("a WordNet id listed in {WNIDS} on line {line_no}"),
                format!("`{wnid}`"),
            ));
        };
        let path = root.join("val").join("images").join(file.trim());
        if !path.is_file() {
            return Err(DataError::format(
                &path,
                format!("the image named on line {line_no} of {}", ann_path.display()),
                "no such file",
            ));
        }
        fp.file(root, &path)?;
        val.push((path, label as u16));
    }
    Ok(Listing { root: root.to_path_buf(), wnids, train, val, fingerprint: fp.finish() })
}

/// Decodes one JPEG into `3 × 64 × 64` bytes, plane after plane (grey images repeated into
/// three channels).
pub fn decode_jpeg(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let image = image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg)
        .map_err(|e| DataError::format(path, "a JPEG image", format!("data that do not decode ({e})")))?;
    if (image.width() as usize, image.height() as usize) != (SIDE, SIDE) {
        return Err(DataError::format(
            path,
            format!("a {SIDE}x{SIDE} image"),
            format!("{}x{}", image.width(), image.height()),
        ));
    }
    let rgb = image.to_rgb8();
    let mut planes = vec![0u8; 3 * SIDE * SIDE];
    for (p, px) in rgb.pixels().enumerate() {
        for c in 0..3 {
            planes[c * SIDE * SIDE + p] = px.0[c];
        }
    }
    Ok(planes)
}

fn decode_all(files: &[(PathBuf, u16)], what: &str) -> Result<RawImages> {
    let mut progress = Progress::start(format!("decoding {what} (once, into its cache)"), files.len());
    let mut pixels = Vec::with_capacity(files.len() * 3 * SIDE * SIDE);
    for (path, _) in files {
        pixels.extend_from_slice(&decode_jpeg(path)?);
        progress.tick();
    }
    let labels = files.iter().map(|&(_, l)| l).collect();
    Ok(RawImages { pixels, labels, channels: 3, rows: SIDE, cols: SIDE })
}

/// One split from its cache, or decoded (and cached) when the cache is absent, stale or damaged.
fn split(listing: &Listing, which: &str, cache_name: &str) -> Result<(RawImages, CacheUse)> {
    let path = listing.root.join(cache_name);
    let what = format!("{TINY_IMAGENET} {which}");
    let shape = vec![3, SIDE, SIDE];
    let found = cache::lookup(&path, &what, &listing.fingerprint)?;
    match found {
        Lookup::Hit(c) if c.sample_shape == shape => {
            if let Values::U8(pixels) = c.values {
                let labels = c.labels.into_iter().map(u16::from).collect();
                let images = RawImages { pixels, labels, channels: 3, rows: SIDE, cols: SIDE };
                return Ok((images, CacheUse::Read));
            }
            let found = Lookup::Damaged("u32 values instead of pixel bytes".into());
            rebuild(listing, which, &path, &what, found)
        }
        Lookup::Hit(c) => {
            let found = Lookup::Damaged(format!("samples of shape {:?}, not {shape:?}", c.sample_shape));
            rebuild(listing, which, &path, &what, found)
        }
        other => rebuild(listing, which, &path, &what, other),
    }
}

fn rebuild(listing: &Listing, which: &str, path: &Path, what: &str, found: Lookup) -> Result<(RawImages, CacheUse)> {
    cache::note_rebuild(path, &found);
    let files = if which == "train" { &listing.train } else { &listing.val };
    let images = decode_all(files, what)?;
    // The pixels move into the cache's struct and back (1.2 GB for the training split: no copy).
    // Tiny-ImageNet's labels are below 200: one byte each in the cache.
    let cached = Cached {
        labels: images.labels.iter().map(|&l| l as u8).collect(),
        sample_shape: vec![3, SIDE, SIDE],
        values: Values::U8(images.pixels),
        extra: Vec::new(),
    };
    cache::store(path, what, &listing.fingerprint, &cached);
    let Values::U8(pixels) = cached.values else { unreachable!("built as bytes above") };
    let images = RawImages { pixels, labels: images.labels, channels: 3, rows: SIDE, cols: SIDE };
    Ok((images, found.rebuild_use()))
}

/// Both splits and how each was obtained.
#[derive(Debug, Clone)]
pub struct TinyImageNet {
    pub splits: RawSplits,
    pub wnids: Vec<String>,
    pub train_cache: CacheUse,
    pub val_cache: CacheUse,
}

/// Reads Tiny-ImageNet from `dir` (or `dir/tiny-imagenet-200`): the training split and the
/// validation split as the test split, from the caches when they are current.
pub fn read_tiny_imagenet_cached(dir: &Path) -> Result<TinyImageNet> {
    let listing = list(&locate(dir)?)?;
    let (train, train_cache) = split(&listing, "train", TRAIN_CACHE)?;
    let (test, val_cache) = split(&listing, "val", VAL_CACHE)?;
    Ok(TinyImageNet { splits: RawSplits { train, test }, wnids: listing.wnids, train_cache, val_cache })
}

/// [`read_tiny_imagenet_cached`]'s splits.
pub fn read_tiny_imagenet(dir: &Path) -> Result<RawSplits> {
    Ok(read_tiny_imagenet_cached(dir)?.splits)
}
