//! A component's state in a checkpoint: [`StateOut`] collects it, [`StateIn`] gives it back.
//!
//! A run resumed from a checkpoint must go on exactly as if it had never stopped, so every
//! component that remembers something between events (a scheduler's round, an aggregator's
//! memory of past updates, a mask policy's drawn partition) saves it when the engine asks and
//! restores it before the run goes on. Values are any serde type, stored under a key; tensors
//! and parameter sets are stored beside them and come back on the run's device.
//!
//! The traits' default refuses ([`not_resumable`]), so a component that says nothing is never
//! resumed wrongly: the run then writes no checkpoints and says why. A component without state
//! implements both methods as `Ok(())`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tch::{Device, Kind, Tensor};

use crate::error::{Error, Result};
use crate::mask::Mask;
use crate::params::ParamSet;

/// Values and tensors a component saved, by key.
#[derive(Default, Serialize, serde::Deserialize)]
pub struct StateOut {
    values: BTreeMap<String, ciborium::Value>,
    #[serde(skip)]
    tensors: BTreeMap<String, Tensor>,
    /// Keys of the parameter sets, with their tensors' names (the tensors are `key.i`).
    params: BTreeMap<String, Vec<String>>,
}

impl StateOut {
    /// Saves `value` under `key`.
    pub fn put<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<()> {
        let v = ciborium::Value::serialized(value).map_err(|e| state_error(key, e.to_string()))?;
        self.values.insert(key.to_string(), v);
        Ok(())
    }

    /// Saves a tensor under `key`.
    pub fn put_tensor(&mut self, key: &str, tensor: &Tensor) {
        self.tensors.insert(key.to_string(), tensor.shallow_clone());
    }

    /// Saves a parameter set under `key`.
    pub fn put_params(&mut self, key: &str, params: &ParamSet) {
        for (i, t) in params.tensors().iter().enumerate() {
            self.put_tensor(&format!("{key}.{i}"), t);
        }
        self.params.insert(key.to_string(), params.names().to_vec());
    }

    /// Saves an optional parameter set under `key` (nothing when absent).
    pub fn put_params_opt(&mut self, key: &str, params: Option<&ParamSet>) {
        if let Some(p) = params {
            self.put_params(key, p);
        }
    }

    /// Saves a list of optional tensors under `key` (an elementwise mask's, a cache's).
    pub fn put_tensor_list(&mut self, key: &str, tensors: &[Option<Tensor>]) -> Result<()> {
        let present: Vec<bool> = tensors.iter().map(Option::is_some).collect();
        for (i, t) in tensors.iter().enumerate() {
            if let Some(t) = t {
                self.put_tensor(&format!("{key}.{i}"), t);
            }
        }
        self.put(key, &present)
    }

    /// Saves a list of parameter sets under `key`, absent ones included.
    pub fn put_params_list(&mut self, key: &str, sets: &[Option<&ParamSet>]) -> Result<()> {
        for (i, p) in sets.iter().enumerate() {
            self.put_params_opt(&format!("{key}.{i}"), *p);
        }
        self.put(key, &sets.len())
    }

    /// Saves a mask under `key`.
    pub fn put_mask(&mut self, key: &str, mask: &Mask) -> Result<()> {
        match mask {
            Mask::Full => self.put(key, "full"),
            Mask::Structured(s) => {
                self.put(&format!("{key}.structured"), s)?;
                self.put(key, "structured")
            }
            Mask::Elementwise(ms) => {
                self.put_tensor_list(&format!("{key}.elementwise"), ms)?;
                self.put(key, "elementwise")
            }
        }
    }

    /// The tensors saved, by key (the checkpoint writes them beside the values).
    pub(crate) fn tensors(&self) -> &BTreeMap<String, Tensor> {
        &self.tensors
    }

    /// The state read back, with its tensors (already on the run's device).
    pub(crate) fn into_input(mut self, tensors: BTreeMap<String, Tensor>) -> StateIn {
        self.tensors = tensors;
        StateIn { state: self }
    }
}

/// A component's saved state, handed back on resume.
pub struct StateIn {
    state: StateOut,
}

impl StateIn {
    /// The value saved under `key`.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<T> {
        let v = self.state.values.get(key).ok_or_else(|| state_error(key, "missing".into()))?;
        v.deserialized().map_err(|e| state_error(key, e.to_string()))
    }

    /// The tensor saved under `key`.
    pub fn tensor(&self, key: &str) -> Result<Tensor> {
        self.state.tensors.get(key).map(Tensor::shallow_clone).ok_or_else(|| state_error(key, "no tensor".into()))
    }

    /// The parameter set saved under `key`.
    pub fn params(&self, key: &str) -> Result<ParamSet> {
        self.params_opt(key)?.ok_or_else(|| state_error(key, "no parameter set".into()))
    }

    /// The list of optional tensors saved under `key`.
    pub fn tensor_list(&self, key: &str) -> Result<Vec<Option<Tensor>>> {
        let present: Vec<bool> = self.get(key)?;
        present.iter().enumerate().map(|(i, &p)| p.then(|| self.tensor(&format!("{key}.{i}"))).transpose()).collect()
    }

    /// The list of parameter sets saved under `key`.
    pub fn params_list(&self, key: &str) -> Result<Vec<Option<ParamSet>>> {
        let len: usize = self.get(key)?;
        (0..len).map(|i| self.params_opt(&format!("{key}.{i}"))).collect()
    }

    /// The mask saved under `key`.
    pub fn mask(&self, key: &str) -> Result<Mask> {
        match self.get::<String>(key)?.as_str() {
            "full" => Ok(Mask::Full),
            "structured" => Ok(Mask::Structured(self.get(&format!("{key}.structured"))?)),
            "elementwise" => Ok(Mask::Elementwise(self.tensor_list(&format!("{key}.elementwise"))?)),
            other => Err(state_error(key, format!("unknown mask kind {other}"))),
        }
    }

    /// The parameter set saved under `key`, if one was.
    pub fn params_opt(&self, key: &str) -> Result<Option<ParamSet>> {
        let Some(names) = self.state.params.get(key) else { return Ok(None) };
        let tensors = (0..names.len()).map(|i| self.tensor(&format!("{key}.{i}"))).collect::<Result<Vec<_>>>()?;
        ParamSet::new(names.clone(), tensors).map(Some)
    }
}

/// Inside an `impl Scheduler`, `impl Aggregator` or `impl MaskPolicy` block: says the
/// component keeps no state between events, so checkpoints need nothing of it.
#[macro_export]
macro_rules! stateless {
    () => {
        fn save_state(&self, _: &mut $crate::StateOut) -> $crate::Result<()> {
            Ok(())
        }

        fn load_state(&mut self, _: &$crate::StateIn) -> $crate::Result<()> {
            Ok(())
        }
    };
}

/// The error of a component that cannot save its state: checkpoints are off for its runs.
pub fn not_resumable(component: &str) -> Error {
    Error::NotResumable { component: component.to_string() }
}

fn state_error(key: &str, what: String) -> Error {
    Error::component("checkpoint", format!("state `{key}`: {what}"))
}

/// A tensor as bytes: its kind, shape and contiguous host data.
#[derive(Serialize, serde::Deserialize)]
pub(crate) struct TensorHeader {
    kind: String,
    shape: Vec<i64>,
    /// Where its bytes start in the checkpoint's blob, and how many.
    offset: u64,
    len: u64,
}

const KINDS: [(Kind, &str); 7] = [
    (Kind::Float, "f32"),
    (Kind::Double, "f64"),
    (Kind::Int64, "i64"),
    (Kind::Int, "i32"),
    (Kind::Bool, "bool"),
    (Kind::Uint8, "u8"),
    (Kind::Half, "f16"),
];

/// Appends `t`'s bytes to `blob`; returns its header.
pub(crate) fn encode_tensor(t: &Tensor, blob: &mut Vec<u8>) -> Result<TensorHeader> {
    let kind = t.kind();
    let name = KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, n)| *n)
        .ok_or_else(|| state_error("tensor", format!("kind {kind:?} cannot be saved")))?;
    let host = t.to_device(Device::Cpu).contiguous();
    let numel = host.numel();
    let len = numel * kind.elt_size_in_bytes();
    let offset = blob.len();
    blob.resize(offset + len, 0);
    host.copy_data_u8(&mut blob[offset..], numel);
    Ok(TensorHeader { kind: name.to_string(), shape: host.size(), offset: offset as u64, len: len as u64 })
}

/// The tensor `h` describes, read from `blob`, on `device`.
pub(crate) fn decode_tensor(h: &TensorHeader, blob: &[u8], device: Device) -> Result<Tensor> {
    let kind = KINDS
        .iter()
        .find(|(_, n)| *n == h.kind)
        .map(|(k, _)| *k)
        .ok_or_else(|| state_error("tensor", format!("unknown kind {}", h.kind)))?;
    let (start, end) = (h.offset as usize, (h.offset + h.len) as usize);
    let bytes = blob.get(start..end).ok_or_else(|| state_error("tensor", "bytes past the end of the file".into()))?;
    let numel: i64 = h.shape.iter().product();
    if numel as usize * kind.elt_size_in_bytes() != bytes.len() {
        return Err(state_error("tensor", format!("{} bytes for shape {:?}", bytes.len(), h.shape)));
    }
    Ok(Tensor::f_from_data_size(bytes, &h.shape, kind)?.to_device(device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_tensors_and_parameter_sets_come_back_as_saved() {
        let mut out = StateOut::default();
        out.put("round", &7u64).unwrap();
        out.put("loss", &f64::NAN).unwrap();
        out.put("lists", &vec![vec![1usize, 2], vec![]]).unwrap();
        let p = ParamSet::new(
            vec!["w".into(), "b".into()],
            vec![Tensor::from_slice(&[1.5f32, -2.0, 3.25]).view([3, 1]), Tensor::from_slice(&[7i64])],
        )
        .unwrap();
        out.put_params("memory.3", &p);
        out.put_params_list("own", &[None, Some(&p)]).unwrap();
        let m = Tensor::from_slice(&[true, false]);
        out.put_mask("mask", &Mask::Elementwise(vec![None, Some(m.shallow_clone())])).unwrap();
        let mut blob = Vec::new();
        let headers: BTreeMap<String, TensorHeader> =
            out.tensors().iter().map(|(k, t)| (k.clone(), encode_tensor(t, &mut blob).unwrap())).collect();
        let tensors = headers.iter().map(|(k, h)| (k.clone(), decode_tensor(h, &blob, Device::Cpu).unwrap())).collect();
        let input = out.into_input(tensors);
        assert_eq!(input.get::<u64>("round").unwrap(), 7);
        assert!(input.get::<f64>("loss").unwrap().is_nan());
        assert_eq!(input.get::<Vec<Vec<usize>>>("lists").unwrap(), vec![vec![1, 2], vec![]]);
        let back = input.params("memory.3").unwrap();
        assert_eq!(back.names(), p.names());
        assert!(back.equal(&p));
        assert_eq!(back.tensors()[1].kind(), Kind::Int64);
        assert!(input.params_opt("memory.4").unwrap().is_none());
        let own = input.params_list("own").unwrap();
        assert!(own[0].is_none() && own[1].as_ref().unwrap().equal(&p));
        let Mask::Elementwise(ms) = input.mask("mask").unwrap() else { panic!("an elementwise mask") };
        assert!(ms[0].is_none() && ms[1].as_ref().unwrap().equal(&m));
        assert!(input.get::<u64>("absent").unwrap_err().to_string().contains("`absent`"));
    }
}
