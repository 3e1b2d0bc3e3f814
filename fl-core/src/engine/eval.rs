//! Evaluation of a model on a device-resident test set: one host read per evaluation.

use tch::{Kind, Tensor};

use crate::data::Dataset;
use crate::model::{Mode, Model, forward_one};
use crate::params::ParamSet;

/// Test accuracy and mean cross-entropy of `params` on `test`.
pub fn evaluate(model: &dyn Model, params: &ParamSet, test: &Dataset, batch_size: usize) -> (f64, f64) {
    let n = test.len() as i64;
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let device = test.y.device();
    tch::no_grad(|| {
        let mut correct = Tensor::zeros([], (Kind::Int64, device));
        let mut loss_sum = Tensor::zeros([], (Kind::Double, device));
        let mut begin = 0;
        while begin < n {
            let len = (batch_size as i64).min(n - begin);
            let x = test.x.narrow(0, begin, len);
            let y = test.y.narrow(0, begin, len);
            let logits = forward_one(model, params.tensors(), &x, &mut Mode::Eval);
            correct += logits.argmax(-1, false).eq_tensor(&y).sum(Kind::Int64);
            loss_sum += logits.cross_entropy_for_logits(&y).to_kind(Kind::Double) * len as f64;
            begin += len;
        }
        let stats = Tensor::stack(&[correct.to_kind(Kind::Double), loss_sum], 0).to_device(tch::Device::Cpu);
        let v = Vec::<f64>::try_from(&stats).expect("two doubles");
        (v[0] / n as f64, v[1] / n as f64)
    })
}
