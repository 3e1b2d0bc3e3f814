//! What the JPEG-folder readers (Tiny-ImageNet, ImageNet) list before decoding anything: the
//! image files of both splits with their labels, the classes, and a fingerprint of the listing
//! that keys their caches.

use std::path::{Path, PathBuf};

/// The files of both splits and their labels.
#[derive(Debug, Clone)]
pub struct Listing {
    pub root: PathBuf,
    /// The classes in label order: label `k` is `wnids[k]`.
    pub wnids: Vec<String>,
    pub train: Vec<(PathBuf, u16)>,
    pub val: Vec<(PathBuf, u16)>,
    /// Of what decides the listing (index files or kept classes) and every image's path and size.
    pub fingerprint: [u8; 32],
}

impl Listing {
    /// Training images per class.
    pub fn train_per_class(&self) -> Vec<usize> {
        let mut counts = vec![0; self.wnids.len()];
        for &(_, l) in &self.train {
            counts[usize::from(l)] += 1;
        }
        counts
    }
}

/// Whether `path` names a JPEG file (`.jpeg` or `.jpg`, any case).
pub fn is_jpeg_name(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("jpeg") || e.eq_ignore_ascii_case("jpg"))
}
