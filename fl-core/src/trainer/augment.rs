//! Image augmentation on the device, per sample, drawn from each client's noise stream: random
//! resized crop, translation (pad-and-crop) and horizontal flip, all applied as one affine
//! resampling of the batch (`affine_grid` + bilinear `grid_sample`), so that a cohort's batch is
//! augmented in two kernels whatever its size.
//!
//! - `crop_scale = [a, b]`, `crop_ratio = [r₁, r₂]`: torchvision's `RandomResizedCrop` to the
//!   input's own size: a region of area `s·H·W` (`s ~ U[a, b]`) and aspect ratio `r`
//!   (`log r ~ U[log r₁, log r₂]`) at a uniform position, resized bilinearly. torchvision
//!   retries a draw whose region does not fit the image (then falls back to a centre crop);
//!   here a side longer than the image is clamped to it, so the region's area and ratio shift
//!   instead.
//! - `translate = p`: the image shifted by a whole number of pixels in `[−p, p]` on each axis,
//!   zeros coming in (the CIFAR standard `RandomCrop(32, padding = 4)` for `p = 4`).
//! - `flip = true`: mirrored left to right with probability ½.
//!
//! Seven uniforms per sample come from the client's stream, before the forward pass's dropout
//! draws, so a client's augmentation is the same alone or in a cohort.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::error::InvalidKey;
use crate::rng::CohortNoise;

/// Uniforms per sample: the crop's area, ratio and centre (x, y), the shift (x, y), the flip.
const DRAWS: i64 = 7;

/// `[trainer] augment = { ... }`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AugmentConfig {
    /// Area shares of a random resized crop, `[min, max]` in (0, 1] (torchvision: [0.08, 1]);
    /// absent: no crop.
    pub crop_scale: Option<[f64; 2]>,
    /// Aspect ratios of the crop, `[min, max]` (torchvision: [3/4, 4/3]).
    pub crop_ratio: Option<[f64; 2]>,
    /// Largest shift in pixels on each axis (pad-and-crop); 0: none.
    pub translate: i64,
    /// Mirror left to right with probability ½.
    pub flip: bool,
}

impl AugmentConfig {
    /// Checks the ranges; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if let Some([a, b]) = self.crop_scale
            && !(a > 0.0 && a <= b && b <= 1.0)
        {
            return Err(InvalidKey::new("augment.crop_scale", format!("expected 0 < min <= max <= 1, got [{a}, {b}]")));
        }
        if let Some([a, b]) = self.crop_ratio
            && !(a > 0.0 && a <= b && b.is_finite())
        {
            return Err(InvalidKey::new("augment.crop_ratio", format!("expected 0 < min <= max, got [{a}, {b}]")));
        }
        if self.crop_ratio.is_some() && self.crop_scale.is_none() {
            return Err(InvalidKey::new("augment.crop_ratio", "needs crop_scale (the crop's area)"));
        }
        if self.translate < 0 {
            return Err(InvalidKey::new("augment.translate", format!("must be at least 0, got {}", self.translate)));
        }
        Ok(())
    }

    /// The batch `x` (`[C, B, ch, H, W]`, clients first) augmented per sample with draws from
    /// each client's stream.
    ///
    /// # Panics
    /// If `x` is not five-dimensional.
    pub fn apply(&self, x: &Tensor, noise: &mut CohortNoise) -> Tensor {
        let [c, b, ch, h, w] = x.size()[..] else { panic!("augment: expected [C, B, ch, H, W], got {:?}", x.size()) };
        let u = noise.uniform(&[c, b, DRAWS]).reshape([c * b, DRAWS]).to_kind(Kind::Float);
        let draw = |i: i64| u.select(1, i);
        let (hf, wf) = (h as f64, w as f64);
        // The region's width and height as shares of the image's, and its centre's offset from
        // the image's centre, in grid_sample's normalised coordinates ([-1, 1] across the image).
        let (mut sx, mut sy) = (draw(0).ones_like(), draw(0).ones_like());
        if let Some([a, bmax]) = self.crop_scale {
            let area = draw(0) * (bmax - a) + a;
            let [r1, r2] = self.crop_ratio.unwrap_or([1.0, 1.0]);
            let ratio = (draw(1) * (r2 / r1).ln() + r1.ln()).exp();
            sx = (&area * &ratio).sqrt().clamp_max(1.0);
            sy = (&area / &ratio).sqrt().clamp_max(1.0);
        }
        // A centre anywhere the region fits: offset within ±(1 − share).
        let mut tx = (draw(2) * 2.0 - 1.0) * (1.0 - &sx);
        let mut ty = (draw(3) * 2.0 - 1.0) * (1.0 - &sy);
        if self.translate > 0 {
            let p = self.translate as f64;
            // A whole shift k in [−p, p] pixels moves the centre by 2k/W in normalised units.
            let shift = |v: Tensor| (v * (2.0 * p + 1.0)).floor().clamp_max(2.0 * p) - p;
            tx = tx + shift(draw(4)) * (2.0 / wf);
            ty = ty + shift(draw(5)) * (2.0 / hf);
        }
        let flip = if self.flip { draw(6).lt(0.5).to_kind(Kind::Float) * -2.0 + 1.0 } else { draw(6).ones_like() };
        let zeros = sx.zeros_like();
        let theta = Tensor::stack(&[&sx * &flip, zeros.shallow_clone(), tx, zeros, sy, ty], 1).reshape([c * b, 2, 3]);
        let grid = Tensor::affine_grid_generator(&theta.to_kind(x.kind()), [c * b, ch, h, w], false);
        // Zeros come in where the image is shifted; a crop's bilinear samples near its edge read
        // the border pixel (as resizing a crop does), not zeros.
        let padding = if self.translate > 0 { 0 } else { 1 };
        x.reshape([c * b, ch, h, w]).grid_sampler(&grid, 0, padding, false).reshape([c, b, ch, h, w])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::TensorNoise;
    use tch::Device;

    fn noise(seeds: &[u64]) -> CohortNoise {
        CohortNoise::new(seeds.iter().map(|&s| TensorNoise::new(s)).collect(), Device::Cpu)
    }

    /// `[C, B, 1, 5, 6]` images with distinct values.
    fn images(c: i64, b: i64) -> Tensor {
        Tensor::arange(c * b * 30, (Kind::Float, Device::Cpu)).reshape([c, b, 1, 5, 6]) + 1.0
    }

    /// `img` `[ch, H, W]` shifted by (dx, dy) pixels, zeros coming in.
    fn shifted(img: &Tensor, dx: i64, dy: i64) -> Tensor {
        let [_, h, w] = img.size()[..] else { unreachable!() };
        let padded = img.constant_pad_nd([w, w, h, h]);
        padded.narrow(1, h + dy, h).narrow(2, w + dx, w)
    }

    #[test]
    fn flipping_mirrors_about_half_the_samples_and_leaves_the_rest() {
        let cfg = AugmentConfig { flip: true, ..AugmentConfig::default() };
        let x = images(1, 400);
        let out = cfg.apply(&x, &mut noise(&[3]));
        let mut mirrored = 0;
        for i in 0..400 {
            let (o, s) = (out.get(0).get(i), x.get(0).get(i));
            if o.allclose(&s.flip([2]), 1e-5, 1e-5, false) {
                mirrored += 1;
            } else {
                assert!(o.allclose(&s, 1e-5, 1e-5, false), "sample {i} is neither itself nor its mirror");
            }
        }
        assert!((160..240).contains(&mirrored), "{mirrored} of 400 mirrored");
    }

    #[test]
    fn translation_shifts_by_whole_pixels_within_the_bound() {
        let cfg = AugmentConfig { translate: 2, ..AugmentConfig::default() };
        let x = images(1, 60);
        let out = cfg.apply(&x, &mut noise(&[4]));
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..60 {
            let (o, s) = (out.get(0).get(i), x.get(0).get(i));
            let hit = (-2..=2)
                .flat_map(|dx| (-2..=2).map(move |dy| (dx, dy)))
                .find(|&(dx, dy)| o.allclose(&shifted(&s, dx, dy), 1e-4, 1e-3, false));
            // (float32 rounding of the grid leaks ~1e-4 of a pixel across the edge)
            let (dx, dy) = hit.unwrap_or_else(|| panic!("sample {i} is no shift of at most 2 pixels"));
            seen.insert((dx, dy));
        }
        assert!(seen.len() > 10, "shifts drawn: {seen:?}");
    }

    #[test]
    fn a_full_crop_is_the_identity_and_a_smaller_one_samples_inside_the_image() {
        let x = images(1, 20);
        let whole =
            AugmentConfig { crop_scale: Some([1.0, 1.0]), crop_ratio: Some([1.0, 1.0]), ..AugmentConfig::default() };
        // Area 1 at ratio 1 on a 5×6 image: both sides clamp to the image's.
        assert!(whole.apply(&x, &mut noise(&[5])).allclose(&x, 1e-4, 1e-4, false));
        let zoom =
            AugmentConfig { crop_scale: Some([0.1, 0.5]), crop_ratio: Some([0.75, 1.333]), ..AugmentConfig::default() };
        let out = zoom.apply(&x, &mut noise(&[6]));
        for i in 0..20 {
            let (o, s) = (out.get(0).get(i), x.get(0).get(i));
            // Bilinear samples of the region lie within the image's values, none from padding.
            let (lo, hi) = (s.min().double_value(&[]), s.max().double_value(&[]));
            assert!(o.min().double_value(&[]) >= lo - 1e-4 && o.max().double_value(&[]) <= hi + 1e-4, "sample {i}");
            assert!(!o.allclose(&s, 1e-3, 1e-3, false), "sample {i} was not cropped");
        }
    }

    #[test]
    fn each_client_draws_from_its_own_stream() {
        let cfg = AugmentConfig { crop_scale: Some([0.3, 1.0]), translate: 1, flip: true, ..AugmentConfig::default() };
        let x = images(3, 4);
        let all = cfg.apply(&x, &mut noise(&[10, 11, 12]));
        for c in 0..3i64 {
            let alone = cfg.apply(&x.narrow(0, c, 1), &mut noise(&[10 + c as u64]));
            assert!(alone.get(0).allclose(&all.get(c), 1e-6, 1e-6, false), "client {c}");
        }
    }

    #[test]
    fn bad_ranges_name_their_key() {
        let bad = |cfg: AugmentConfig| cfg.validate().unwrap_err().key;
        assert_eq!(
            bad(AugmentConfig { crop_scale: Some([0.5, 0.2]), ..AugmentConfig::default() }),
            "augment.crop_scale"
        );
        assert_eq!(
            bad(AugmentConfig { crop_scale: Some([0.0, 1.0]), ..AugmentConfig::default() }),
            "augment.crop_scale"
        );
        assert_eq!(
            bad(AugmentConfig { crop_ratio: Some([1.0, 2.0]), ..AugmentConfig::default() }),
            "augment.crop_ratio"
        );
        assert_eq!(bad(AugmentConfig { translate: -1, ..AugmentConfig::default() }), "augment.translate");
    }
}
