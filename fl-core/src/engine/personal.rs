//! Personal tensors ([`TensorRole::Personal`]: Co-S²P's exit heads): a client trains them and
//! keeps them. They live in the client's state beside what its trainer keeps, under
//! `personal.<tensor>`; a job starts from the client's own copy where it has one, the trainer
//! never sees them in its state, and after the job the client keeps what it trained.

use crate::mask::{Mask, TensorRole};
use crate::params::ParamSet;

const PREFIX: &str = "personal.";

fn is_personal(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// The names of `mask`'s personal tensors, among the model's `names`.
fn personal_names<'n>(mask: &Mask, names: &'n [String]) -> impl Iterator<Item = &'n String> {
    names.iter().enumerate().filter(move |(t, _)| mask.role(*t) == TensorRole::Personal).map(|(_, n)| n)
}

/// `state` without `personal.` entries, or None if nothing else is left.
fn without_personal(state: &ParamSet) -> Option<ParamSet> {
    let (names, tensors): (Vec<String>, Vec<_>) =
        state.iter().filter(|(n, _)| !is_personal(n)).map(|(n, t)| (n.to_string(), t.shallow_clone())).unzip();
    (!names.is_empty()).then(|| ParamSet::new(names, tensors).expect("one name per tensor"))
}

/// What the client's trainer kept: its state without the personal tensors.
pub(super) fn trainer_state(state: Option<&ParamSet>) -> Option<ParamSet> {
    state.and_then(without_personal)
}

/// The job's starting tensors: `start` (the sub-model of the global model, its tensors named as
/// the model's `names`) with each personal tensor of `mask` replaced by the client's own copy,
/// where its `state` has one of the same shape.
pub(super) fn own_copies(start: &ParamSet, mask: &Mask, names: &[String], state: Option<&ParamSet>) -> ParamSet {
    let Some(state) = state else { return start.shallow_clone() };
    let personal: Vec<&String> = personal_names(mask, names).collect();
    let tensors = start
        .iter()
        .map(|(name, t)| {
            let own = personal.iter().any(|p| *p == name).then(|| state.get(&format!("{PREFIX}{name}"))).flatten();
            match own {
                Some(own) if own.size() == t.size() => own.to_device(t.device()),
                _ => t.shallow_clone(),
            }
        })
        .collect();
    ParamSet::new(start.names().to_vec(), tensors).expect("the same names")
}

/// The client's state after a job under `mask` that trained `trained`: its trainer's new state
/// (or, if the trainer kept nothing new, its previous one) and its personal tensors, those the
/// job trained replacing the copies it had, on the host.
pub(super) fn kept_state(
    previous: Option<ParamSet>,
    trainer: Option<ParamSet>,
    trained: &ParamSet,
    mask: &Mask,
    names: &[String],
) -> Option<ParamSet> {
    let trainer = trainer.or_else(|| previous.as_ref().and_then(without_personal));
    let mut entries: Vec<(String, tch::Tensor)> =
        trainer.iter().flat_map(|s| s.iter().map(|(n, t)| (n.to_string(), t.to_device(tch::Device::Cpu)))).collect();
    let fresh: Vec<String> = personal_names(mask, names).map(|n| format!("{PREFIX}{n}")).collect();
    if let Some(previous) = &previous {
        entries.extend(
            previous
                .iter()
                .filter(|(n, _)| is_personal(n) && !fresh.iter().any(|f| f == n))
                .map(|(n, t)| (n.to_string(), t.shallow_clone())),
        );
    }
    for key in fresh {
        let name = &key[PREFIX.len()..];
        let tensor = trained.get(name).expect("a personal tensor is held by the job");
        entries.push((key.clone(), tensor.to_device(tch::Device::Cpu)));
    }
    if entries.is_empty() {
        return None;
    }
    let (names, tensors) = entries.into_iter().unzip();
    Some(ParamSet::new(names, tensors).expect("one name per tensor"))
}

#[cfg(test)]
mod tests {
    use tch::Tensor;

    use super::*;
    use crate::mask::StructuredMask;

    fn set(entries: &[(&str, f32)]) -> ParamSet {
        let names = entries.iter().map(|(n, _)| n.to_string()).collect();
        ParamSet::new(names, entries.iter().map(|(_, v)| Tensor::from_slice(&[*v])).collect()).unwrap()
    }

    fn value(s: &ParamSet, name: &str) -> f64 {
        s.get(name).unwrap().double_value(&[0])
    }

    /// Tensors `a` (trained), `exit` (personal), `head` (trained).
    fn mask() -> Mask {
        let names = 3;
        let keep = vec![vec![None]; names];
        Mask::Structured(StructuredMask::new(keep).with_personal(&[false, true, false]))
    }

    #[test]
    fn a_job_starts_from_the_clients_own_copy_and_the_client_keeps_what_it_trained() {
        let names: Vec<String> = ["a", "exit", "head"].map(String::from).to_vec();
        let start = set(&[("a", 1.0), ("exit", 2.0), ("head", 3.0)]);
        // First job: no state, the global copy.
        assert!(own_copies(&start, &mask(), &names, None).equal(&start));
        let trained = set(&[("a", 1.5), ("exit", 2.5), ("head", 3.5)]);
        let width = set(&[("width_scores.heads", 9.0)]);
        let kept = kept_state(None, Some(width), &trained, &mask(), &names).unwrap();
        assert_eq!(kept.names(), ["width_scores.heads", "personal.exit"]);
        assert_eq!(value(&kept, "personal.exit"), 2.5);
        // The trainer sees its own state only.
        assert_eq!(trainer_state(Some(&kept)).unwrap().names(), ["width_scores.heads"]);
        // Second job: the own copy replaces the global one; a trainer that keeps nothing new
        // leaves its previous state.
        let second = own_copies(&start, &mask(), &names, Some(&kept));
        assert_eq!((value(&second, "a"), value(&second, "exit")), (1.0, 2.5));
        let trained = set(&[("a", 1.0), ("exit", 4.0), ("head", 3.0)]);
        let kept = kept_state(Some(kept), None, &trained, &mask(), &names).unwrap();
        assert_eq!((value(&kept, "width_scores.heads"), value(&kept, "personal.exit")), (9.0, 4.0));
        // A job without the exit keeps the client's copy.
        let full = Mask::Structured(StructuredMask::new(vec![vec![None]; 3]));
        let kept = kept_state(Some(kept), None, &trained, &full, &names).unwrap();
        assert_eq!(value(&kept, "personal.exit"), 4.0);
        assert!(kept_state(None, None, &trained, &full, &names).is_none(), "nothing to keep");
    }
}
