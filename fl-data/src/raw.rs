//! Images as the readers return them (u8 pixels, channel-major per sample, and u16 labels, since
//! ImageNet has more classes than a byte holds), and their one conversion into normalised device
//! tensors.
//!
//! The readers stay pure Rust and tensor-free so that `fl data info` can count samples without
//! libtorch work; the conversion happens once per load, as a handful of whole-tensor ops.

use fl_core::Dataset;
use tch::{Device, Kind, Tensor};

use crate::error::{DataError, Result};

/// `len()` images of `channels × rows × cols` bytes each, stored sample after sample, each
/// sample plane after plane (the CIFAR record layout; MNIST has one plane).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawImages {
    pub pixels: Vec<u8>,
    pub labels: Vec<u16>,
    pub channels: usize,
    pub rows: usize,
    pub cols: usize,
}

/// The official train and test splits of one dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSplits {
    pub train: RawImages,
    pub test: RawImages,
}

/// Per-channel normalisation constants (of pixel values scaled to [0, 1]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalization {
    pub mean: &'static [f64],
    pub std: &'static [f64],
}

impl RawImages {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Bytes per image.
    pub fn image_bytes(&self) -> usize {
        self.channels * self.rows * self.cols
    }

    /// Keeps the first `n` samples; `what` names the split and its source for the error.
    pub fn keep_first(&mut self, n: usize, what: &str) -> Result<()> {
        if n > self.len() {
            return Err(DataError::TooFewSamples { split: what.into(), asked: n, have: self.len() });
        }
        self.labels.truncate(n);
        self.pixels.truncate(n * self.image_bytes());
        Ok(())
    }

    /// Appends `other`'s samples (of the same image shape) after these.
    pub fn append(&mut self, other: &RawImages) {
        assert_eq!(other.image_bytes(), self.image_bytes(), "appended images have the same shape");
        self.pixels.extend_from_slice(&other.pixels);
        self.labels.extend_from_slice(&other.labels);
    }

    /// How many samples carry each label in `0..classes`.
    pub fn class_counts(&self, classes: usize) -> Vec<usize> {
        let mut counts = vec![0; classes];
        for &l in &self.labels {
            counts[l as usize] += 1;
        }
        counts
    }

    /// Float32 images `[n, C, H, W]`, `(x / 255 - mean_c) / std_c`, and int64 labels `[n]`, on
    /// `device`. The bytes travel to the device as u8 (a quarter of the float size) and are
    /// converted there, into one float tensor normalised in place: the peak is the bytes plus
    /// one float copy, not four (Tiny-ImageNet's training split is 4.9 GB as floats).
    pub fn to_dataset(&self, norm: Normalization, device: Device) -> Dataset {
        assert_eq!(norm.mean.len(), self.channels, "one mean per channel");
        assert_eq!(norm.std.len(), self.channels, "one std per channel");
        let (n, c) = (self.len() as i64, self.channels as i64);
        let shape = [n, c, self.rows as i64, self.cols as i64];
        let mut x = Tensor::from_slice(&self.pixels).to_device(device).view(shape).to_kind(Kind::Float);
        let mean = Tensor::from_slice(norm.mean).to_kind(Kind::Float).to_device(device).view([1, c, 1, 1]);
        let std = Tensor::from_slice(norm.std).to_kind(Kind::Float).to_device(device).view([1, c, 1, 1]);
        let _ = x.g_div_scalar_(255.0).g_sub_(&mean).g_div_(&std);
        let labels: Vec<i64> = self.labels.iter().map(|&l| i64::from(l)).collect();
        let y = Tensor::from_slice(&labels).to_device(device);
        Dataset { x, y }
    }
}
