//! Self-distillation across a sub-model's read-outs (Co-S²P, Eq. 3): every read-out (early
//! exits, then the deepest) learns from the labels and from the deepest one, the teacher,
//!
//! `L = Σ_i ((1 − λ) · CE(ŷ_i, y) + λ · KL_i · t²)`,
//!
//! where `KL_i` compares the temperature-`t` softmaxes of read-out i and of the teacher (0 for
//! the teacher itself, whose cross-entropy then weighs `1 − λ`). By default `KL_i` is
//! `KL(teacher ‖ student)` with the teacher detached, as `kl_div(log_softmax(ŷ_i/t),
//! softmax(ŷ_c/t).detach())` computes it (spec §5 item 9); `direction = "literal"` takes the
//! paper's formula as printed, `Σ σ(ŷ_i/t) ln(σ(ŷ_i/t) / σ(ŷ_c/t))`, with gradients into the
//! teacher too. Per-sample terms are weighted like the cross-entropy of a plain step (each
//! client's batch mean, padding out).

use serde::{Deserialize, Serialize};
use tch::{Kind, Reduction, Tensor};

use crate::error::InvalidKey;

/// Which KL divergence a read-out's distillation term is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlDirection {
    /// `KL(teacher ‖ student)`, the teacher detached (the usual self-distillation code).
    #[default]
    TeacherToStudent,
    /// `KL(student ‖ teacher)` as Eq. 3 prints it, the teacher trained by it too.
    Literal,
}

/// `[trainer] distill = { lambda = 0.2, temperature = 3 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistillConfig {
    /// λ₂: the distillation term's share, in [0, 1].
    pub lambda: f64,
    /// t: the softmax temperature (> 0).
    pub temperature: f64,
    /// Which KL divergence.
    pub direction: KlDirection,
}

impl Default for DistillConfig {
    /// Co-S²P's E1 values: λ₂ = 0.2, t = 3.
    fn default() -> Self {
        DistillConfig { lambda: 0.2, temperature: 3.0, direction: KlDirection::TeacherToStudent }
    }
}

impl DistillConfig {
    /// Checks λ and t; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if !(0.0..=1.0).contains(&self.lambda) {
            return Err(InvalidKey::new("distill.lambda", format!("expected a share in [0, 1], got {}", self.lambda)));
        }
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(InvalidKey::new("distill.temperature", format!("expected t > 0, got {}", self.temperature)));
        }
        Ok(())
    }

    /// Each client's loss `[k]` and its deepest read-out's cross-entropy `[k]` (what a step
    /// reports): `logits` one `[k, b, classes]` per read-out, deepest last; `y` `[k·b]`;
    /// `weights` `[k, b]`.
    pub fn loss(&self, logits: &[Tensor], y: &Tensor, weights: &Tensor) -> (Tensor, Tensor) {
        let teacher = logits.last().expect("at least one read-out");
        let [k, b, classes] = teacher.size()[..] else {
            panic!("distill: logits [k, b, classes], got {:?}", teacher.size())
        };
        let per_client =
            |per_sample: Tensor| (per_sample.reshape([k, b]) * weights).sum_dim_intlist(1, false, Kind::Float);
        let ce = |l: &Tensor| {
            per_client(l.reshape([-1, classes]).cross_entropy_loss::<Tensor>(y, None, Reduction::None, -100, 0.0))
        };
        let t = self.temperature;
        let teacher_log = (teacher / t).log_softmax(-1, Kind::Float);
        let teacher_log = match self.direction {
            KlDirection::TeacherToStudent => teacher_log.detach(),
            KlDirection::Literal => teacher_log,
        };
        let deepest = ce(teacher);
        let mut total = &deepest * (1.0 - self.lambda);
        for student in &logits[..logits.len() - 1] {
            let student_log = (student / t).log_softmax(-1, Kind::Float);
            let kl = match self.direction {
                KlDirection::TeacherToStudent => {
                    (teacher_log.exp() * (&teacher_log - &student_log)).sum_dim_intlist(-1, false, Kind::Float)
                }
                KlDirection::Literal => {
                    (student_log.exp() * (&student_log - &teacher_log)).sum_dim_intlist(-1, false, Kind::Float)
                }
            };
            total = total + ce(student) * (1.0 - self.lambda) + per_client(kl) * (self.lambda * t * t);
        }
        (total, deepest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(values: &[f32]) -> Tensor {
        Tensor::from_slice(values).reshape([1, 1, 2])
    }

    #[test]
    fn the_loss_matches_eq_3_worked_by_hand() {
        // One client, one sample of class 0; a student with logits (0, 0), a teacher (ln 3, 0).
        // CE: student ln 2 = 0.693147, teacher ln(4/3) = 0.287682. At t = 1 the teacher's
        // softmax is (¾, ¼), the student's (½, ½): KL(T‖S) = ¾ ln(3/2) + ¼ ln(1/2) = 0.130812;
        // KL(S‖T) = ½ ln(2/3) + ½ ln 2 = 0.143841.
        let y = Tensor::from_slice(&[0i64]);
        let w = Tensor::ones([1, 1], (Kind::Float, tch::Device::Cpu));
        let l = [logits(&[0.0, 0.0]), logits(&[3f32.ln(), 0.0])];
        let cfg = DistillConfig { lambda: 0.25, temperature: 1.0, direction: KlDirection::TeacherToStudent };
        let (total, deepest) = cfg.loss(&l, &y, &w);
        let want = 0.75 * (std::f64::consts::LN_2 + 0.287682) + 0.25 * 0.130812;
        assert!((total.double_value(&[0]) - want).abs() < 1e-5, "{total} vs {want}");
        assert!((deepest.double_value(&[0]) - 0.287682).abs() < 1e-5);
        let literal = DistillConfig { direction: KlDirection::Literal, ..cfg.clone() };
        let want = 0.75 * (std::f64::consts::LN_2 + 0.287682) + 0.25 * 0.143841;
        assert!((literal.loss(&l, &y, &w).0.double_value(&[0]) - want).abs() < 1e-5);
        // At t = 2 the softmaxes are (√3, 1)/(√3 + 1) and (½, ½): KL(T‖S) = 0.036341, times t² = 4.
        let warm = DistillConfig { temperature: 2.0, ..cfg };
        let want = 0.75 * (std::f64::consts::LN_2 + 0.287682) + 0.25 * 4.0 * 0.036341;
        assert!((warm.loss(&l, &y, &w).0.double_value(&[0]) - want).abs() < 1e-5);
    }

    #[test]
    fn the_detached_teacher_gets_no_gradient_from_the_students_term() {
        let y = Tensor::from_slice(&[1i64]);
        let w = Tensor::ones([1, 1], (Kind::Float, tch::Device::Cpu));
        let cfg = DistillConfig { lambda: 1.0, temperature: 2.0, direction: KlDirection::TeacherToStudent };
        let student = logits(&[0.3, 0.2]).set_requires_grad(true);
        let teacher = logits(&[1.0, 0.5]).set_requires_grad(true);
        // λ = 1: no cross-entropy at all, only the KL, which must not move the teacher.
        cfg.loss(&[student.shallow_clone(), teacher.shallow_clone()], &y, &w).0.sum(Kind::Float).backward();
        assert_eq!(teacher.grad().abs().sum(Kind::Float).double_value(&[]), 0.0);
        assert!(student.grad().abs().sum(Kind::Float).double_value(&[]) > 0.0);
    }

    #[test]
    fn bad_settings_name_their_key() {
        let bad = |cfg: DistillConfig| cfg.validate().unwrap_err().key;
        assert_eq!(bad(DistillConfig { lambda: 1.5, ..DistillConfig::default() }), "distill.lambda");
        assert_eq!(bad(DistillConfig { temperature: 0.0, ..DistillConfig::default() }), "distill.temperature");
    }
}
