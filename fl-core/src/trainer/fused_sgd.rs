//! The SGD update of one stacked tensor in a single pass over memory, on the CPU.
//!
//! The tensor form of the update ([`crate::trainer::sgd`]) makes a weight's gradient
//! contiguous, multiplies it by the mask, adds the momentum, then steps the parameters: four
//! passes over tensors larger than the L2 cache, each a libtorch dispatch. On the kdd23 cell
//! (MLP 784-200-10, batch 128, one client a worker) the copy and the elementwise kernels were
//! about 8% of the profile. Here each element is read and written once. [`crate::model::linear`]
//! hands its weight's gradient back row-major; one with its last two dimensions swapped (the
//! `x Wᵀ` of [`crate::model::linear_rows`], for token sequences) is read in cache-sized tiles.
//!
//! The numbers are the tensor form's, bit for bit: ATen's CPU kernels compute
//! `a.addcmul_(b, c)` as one fused multiply-add `fma(b, c, a)` (checked on every element of a
//! million random triples against float64 arithmetic), so the loop below uses `mul_add` where
//! the tensor form uses `addcmul_`, and a plain product where it multiplies. The fused path
//! runs only where the CPU has FMA instructions (x86-64 with AVX2 and FMA); elsewhere the
//! tensor form runs.

use tch::{Device, Kind, Tensor};

/// The per-client factors of one update of the first `k` clients.
pub(crate) struct SgdTerms<'a> {
    /// Weight decay λ (L2: λ·w added to the gradient), if any.
    pub decay: Option<f32>,
    /// Each client's momentum factor (β, or β times 0 where the client's momentum restarts),
    /// with the momentum buffers; `None` without momentum.
    pub momentum: Option<(&'a [f32], &'a Tensor)>,
    /// Each client's step: minus its learning rate at this step (0 once it stopped).
    pub step: &'a [f32],
}

/// Whether this machine runs the fused update: x86-64 with AVX2 and FMA.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// How a gradient's elements lie in memory against its parameters' row-major order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    /// Row-major, as the parameters.
    Contiguous,
    /// Row-major with the last two dimensions swapped (`rows × cols` blocks stored as
    /// `cols × rows`, each within one client's slice): the weight gradient of `x Wᵀ`.
    Transposed { rows: usize, cols: usize },
}

/// Applies `p ← p + step · d`, `d = (g + λp) ⊙ mask + β v` (and `v ← d`) to the first `k`
/// clients' slices, in place. Returns false, touching nothing, where the tensors do not fit the
/// fused path (not float32 on the CPU, parameters, mask or buffers not contiguous, a gradient
/// in another layout than row-major or with its last two dimensions swapped, or a machine
/// without FMA); the caller then runs the tensor form.
pub(crate) fn apply(p: &Tensor, g: &Tensor, mask: Option<&Tensor>, terms: &SgdTerms) -> bool {
    let k = terms.step.len();
    let size = p.size();
    let same =
        |t: &Tensor| t.device() == Device::Cpu && t.kind() == Kind::Float && t.size() == size && t.is_contiguous();
    let buffers = terms.momentum.map(|(_, v)| v);
    if !available()
        || size.first().is_none_or(|&c| c as usize != k)
        || !same(p)
        || !mask.into_iter().chain(buffers).all(same)
        || g.device() != Device::Cpu
        || g.kind() != Kind::Float
        || g.size() != size
        || terms.momentum.is_some_and(|(factors, _)| factors.len() != k)
    {
        return false;
    }
    let Some(layout) = layout_of(g) else { return false };
    let numel = p.numel();
    if numel == 0 {
        return true;
    }
    let spans: Vec<(usize, usize)> =
        [Some(p), Some(g), mask, buffers].into_iter().flatten().map(|t| span(t, numel)).collect();
    let overlap = spans.iter().enumerate().any(|(i, a)| spans[..i].iter().any(|b| a.0 < b.1 && b.0 < a.1));
    assert!(!overlap, "fused SGD update: the parameters, gradient, mask and momentum share memory");
    run(p, g, mask, terms, layout, numel);
    true
}

/// The gradient's layout, if the fused path reads it.
fn layout_of(g: &Tensor) -> Option<Layout> {
    if g.is_contiguous() {
        return Some(Layout::Contiguous);
    }
    let size = g.size();
    let dims = size.len();
    // The swapped dimensions must lie within each client's slice, not include the clients'.
    if dims < 3 || !g.transpose(-1, -2).is_contiguous() {
        return None;
    }
    Some(Layout::Transposed { rows: size[dims - 2] as usize, cols: size[dims - 1] as usize })
}

/// `[start, end)` of a tensor's `numel` float32 elements in memory.
fn span(t: &Tensor, numel: usize) -> (usize, usize) {
    let start = t.data_ptr() as usize;
    (start, start + numel * 4)
}

/// The update over checked tensors: one client's slice at a time, its factors fixed.
#[allow(unsafe_code)] // reason: the tensors' memory as slices, and a kernel compiled for FMA.
fn run(p: &Tensor, g: &Tensor, mask: Option<&Tensor>, terms: &SgdTerms, layout: Layout, numel: usize) {
    // SAFETY: `apply` checked that every tensor is a float32 CPU tensor of `numel` > 0 elements,
    // dense (contiguous, or for the gradient contiguous once its last two dimensions swap),
    // that no two of them overlap in memory, and that the machine has AVX2 and FMA. The
    // tensors outlive this call and no other reference to their memory is used meanwhile.
    unsafe {
        let p = std::slice::from_raw_parts_mut(p.data_ptr() as *mut f32, numel);
        let g = std::slice::from_raw_parts(g.data_ptr() as *const f32, numel);
        let mask = mask.map(|m| std::slice::from_raw_parts(m.data_ptr() as *const f32, numel));
        let velocity = terms.momentum.map(|(_, v)| std::slice::from_raw_parts_mut(v.data_ptr() as *mut f32, numel));
        update_fma(p, g, mask, velocity, terms, layout);
    }
}

/// Rows and columns of the tiles a transposed gradient is read in: 16 × 128 floats, 8 KB.
/// Sixteen rows are one cache line of each stored column; 128 columns make each row's update
/// long enough to run in vector registers.
const TILE_ROWS: usize = 16;
const TILE_COLS: usize = 128;

/// The update of every client, compiled with FMA so that `mul_add` is one instruction and
/// the element loops vectorise.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
fn update_fma(
    p: &mut [f32],
    g: &[f32],
    mask: Option<&[f32]>,
    mut velocity: Option<&mut [f32]>,
    terms: &SgdTerms,
    layout: Layout,
) {
    let k = terms.step.len();
    let n = p.len() / k;
    for c in 0..k {
        let range = c * n..(c + 1) * n;
        let factors = Factors { decay: terms.decay, momentum: terms.momentum.map(|(m, _)| m[c]), step: terms.step[c] };
        let p = &mut p[range.clone()];
        let g = &g[range.clone()];
        let mask = mask.map(|m| &m[range.clone()]);
        let v = velocity.as_deref_mut().map(|v| &mut v[range]);
        match layout {
            Layout::Contiguous => elements(p, g, mask, v, &factors),
            Layout::Transposed { rows, cols } => transposed(p, g, mask, v, &factors, rows, cols),
        }
    }
}

/// One client's factors.
struct Factors {
    decay: Option<f32>,
    momentum: Option<f32>,
    step: f32,
}

/// One client's update over a row-major gradient, element by element in the tensor form's
/// order of operations.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
#[inline]
fn elements(p: &mut [f32], g: &[f32], mask: Option<&[f32]>, v: Option<&mut [f32]>, f: &Factors) {
    // Each combination its own loop, so that none branches per element and each vectorises.
    match (f.decay, mask, v, f.momentum) {
        (None, None, None, _) => {
            for (p, &g) in p.iter_mut().zip(g) {
                *p = g.mul_add(f.step, *p);
            }
        }
        (None, Some(m), None, _) => {
            for ((p, &g), &m) in p.iter_mut().zip(g).zip(m) {
                *p = (g * m).mul_add(f.step, *p);
            }
        }
        (None, None, Some(v), Some(beta)) => {
            for ((p, &g), v) in p.iter_mut().zip(g).zip(v) {
                let d = v.mul_add(beta, g);
                *v = d;
                *p = d.mul_add(f.step, *p);
            }
        }
        (None, Some(m), Some(v), Some(beta)) => {
            for (((p, &g), &m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
                let d = v.mul_add(beta, g * m);
                *v = d;
                *p = d.mul_add(f.step, *p);
            }
        }
        (decay, mask, mut v, beta) => {
            // Weight decay: rare enough on this path to take the general loop.
            for i in 0..p.len() {
                let mut d = match decay {
                    Some(decay) => p[i].mul_add(decay, g[i]),
                    None => g[i],
                };
                if let Some(m) = mask {
                    d *= m[i];
                }
                if let (Some(v), Some(beta)) = (v.as_deref_mut(), beta) {
                    d = v[i].mul_add(beta, d);
                    v[i] = d;
                }
                p[i] = d.mul_add(f.step, p[i]);
            }
        }
    }
}

/// One client's update over a gradient whose `rows × cols` blocks are stored as `cols × rows`:
/// each tile is transposed into a buffer in cache, then updated row by row.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
fn transposed(
    p: &mut [f32],
    g: &[f32],
    mask: Option<&[f32]>,
    mut v: Option<&mut [f32]>,
    f: &Factors,
    rows: usize,
    cols: usize,
) {
    let block = rows * cols;
    let mut tile = [0f32; TILE_ROWS * TILE_COLS];
    for b in 0..p.len() / block {
        let base = b * block;
        let g = &g[base..base + block];
        for r0 in (0..rows).step_by(TILE_ROWS) {
            let h = TILE_ROWS.min(rows - r0);
            for c0 in (0..cols).step_by(TILE_COLS) {
                let w = TILE_COLS.min(cols - c0);
                for c in 0..w {
                    let column = &g[(c0 + c) * rows + r0..(c0 + c) * rows + r0 + h];
                    for (r, &x) in column.iter().enumerate() {
                        tile[r * TILE_COLS + c] = x;
                    }
                }
                for r in 0..h {
                    let at = base + (r0 + r) * cols + c0;
                    let row = at..at + w;
                    elements(
                        &mut p[row.clone()],
                        &tile[r * TILE_COLS..r * TILE_COLS + w],
                        mask.map(|m| &m[row.clone()]),
                        v.as_deref_mut().map(|v| &mut v[row]),
                        f,
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tensor form of the update in `sgd.rs`, written out for one tensor.
    fn tensor_form(
        p: &Tensor,
        g: &Tensor,
        mask: Option<&Tensor>,
        decay: Option<f32>,
        v: Option<(&[f32], &Tensor)>,
        step: &[f32],
    ) {
        let k = step.len() as i64;
        let view = |x: &[f32]| {
            let mut shape = vec![1i64; p.dim()];
            shape[0] = k;
            Tensor::from_slice(x).view(shape.as_slice())
        };
        tch::no_grad(|| {
            // The tensor form works on autograd's gradient in place; here on a copy, since the
            // fused path reads the same gradient after.
            let mut g = g.contiguous().copy();
            if let Some(decay) = decay {
                let _ = g.addcmul_(p, &Tensor::from(decay));
            }
            if let Some(m) = mask {
                g *= m;
            }
            let direction = match v {
                Some((beta, v)) => g.addcmul_out(v, v, &view(beta)),
                None => g,
            };
            let _ = p.shallow_clone().addcmul_(&direction, &view(step));
        });
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        Vec::<f32>::try_from(t.flatten(0, -1)).expect("float tensor").into_iter().map(f32::to_bits).collect()
    }

    #[test]
    fn the_fused_update_is_the_tensor_forms_bit_for_bit() {
        if !available() {
            return; // The tensor form runs on this machine; nothing to compare.
        }
        tch::manual_seed(7);
        // Shapes: a transposed weight gradient with ragged tiles, a bias, a 4-d weight.
        for (shape, transposed) in
            [(vec![3i64, 45, 70], true), (vec![2, 33], false), (vec![2, 5, 3, 37], true), (vec![1, 200, 784], true)]
        {
            for (decay, masked, momentum) in [
                (None, false, false),
                (None, true, false),
                (None, false, true),
                (None, true, true),
                (Some(0.01f32), true, true),
                (Some(0.003), false, false),
            ] {
                let k = shape[0] as usize;
                let p0 = Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu));
                let g = if transposed {
                    Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu))
                        .transpose(-1, -2)
                        .contiguous()
                        .transpose(-1, -2)
                } else {
                    Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu))
                };
                assert_eq!(layout_of(&g).map(|l| l == Layout::Contiguous), Some(!transposed));
                let mask = masked
                    .then(|| Tensor::rand(shape.as_slice(), (Kind::Float, Device::Cpu)).ge(0.5).to_kind(Kind::Float));
                let v0 = Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu));
                let beta: Vec<f32> = (0..k).map(|c| if c == 1 { 0.0 } else { 0.5 + 0.1 * c as f32 }).collect();
                let step: Vec<f32> = (0..k).map(|c| -0.05 / (1.0 + c as f32)).collect();
                let (p_tensor, v_tensor) = (p0.copy(), v0.copy());
                tensor_form(
                    &p_tensor,
                    &g,
                    mask.as_ref(),
                    decay,
                    momentum.then_some((beta.as_slice(), &v_tensor)),
                    &step,
                );
                let (p_fused, v_fused) = (p0.copy(), v0.copy());
                let terms = SgdTerms { decay, momentum: momentum.then_some((beta.as_slice(), &v_fused)), step: &step };
                assert!(apply(&p_fused, &g, mask.as_ref(), &terms));
                let case = format!("{shape:?}, decay {decay:?}, mask {masked}, momentum {momentum}");
                assert_eq!(bits(&p_fused), bits(&p_tensor), "parameters, {case}");
                assert_eq!(bits(&v_fused), bits(&v_tensor), "momentum buffers, {case}");
                assert!(bits(&p_fused) != bits(&p0), "the update moved nothing, {case}");
            }
        }
    }

    #[test]
    fn tensors_the_fused_path_cannot_read_are_left_to_the_tensor_form() {
        let p = Tensor::ones([2, 4, 6], (Kind::Float, Device::Cpu));
        let step = [-0.1f32, -0.2];
        let terms = SgdTerms { decay: None, momentum: None, step: &step };
        // A gradient strided otherwise than row-major or transposed, a double gradient, a
        // narrowed (non-contiguous) parameter view, a step for the wrong number of clients.
        let strided = Tensor::ones([2, 4, 12], (Kind::Float, Device::Cpu)).slice(2, 0, 12, 2);
        assert!(!apply(&p, &strided, None, &terms));
        assert!(!apply(&p, &p.to_kind(Kind::Double), None, &terms));
        let wide = Tensor::ones([2, 4, 12], (Kind::Float, Device::Cpu));
        assert!(!apply(&wide.narrow(2, 0, 6), &p.ones_like(), None, &terms));
        // A `[clients, n]` gradient stored transposed: its clients' slices are interleaved.
        let flat = Tensor::ones([2, 24], (Kind::Float, Device::Cpu));
        let interleaved = Tensor::ones([24, 2], (Kind::Float, Device::Cpu)).transpose(0, 1);
        assert!(!apply(&flat, &interleaved, None, &terms));
        assert_eq!(bits(&flat), vec![1f32.to_bits(); 48]);
        let three = [-0.1f32; 3];
        assert!(!apply(&p, &p.ones_like(), None, &SgdTerms { decay: None, momentum: None, step: &three }));
        assert_eq!(bits(&p), vec![1f32.to_bits(); 48], "a refused update touches nothing");
    }
}
