//! Seeded host inputs of a workload, and the f64 reference computed from them.
//!
//! Values are uniform in ranges that exercise each op (negative and positive, never all zero);
//! chunks are filled in parallel from independent streams, so the numbers depend only on the
//! seed, not on the thread count.

pub use crate::backend::cpu::simd::LineVec;
use crate::rng::Rng;
use crate::spec::{ElemOp, Elementwise};
use rayon::prelude::*;

const FILL_CHUNK: usize = 1 << 16;

/// The bf16 bit pattern nearest to `x` (round to nearest, ties to even; NaN stays a NaN):
/// what a GPU's `cvt.rn.bf16.f32` gives, for uploading bf16 tensors.
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16) | 0x0040;
    }
    // Finite values and infinities: add just under half an ulp of bf16 (plus one on an odd
    // result, for ties to even) and truncate. No overflow: the largest finite pattern plus
    // 0x8000 stays below 2^32.
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The f32 value of a bf16 bit pattern (exact).
pub fn bf16_value(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Fills `n` values uniform in [lo, hi) from stream `tensor_id` of `seed`, in a cache-line
/// aligned, huge-page buffer (see [`LineVec`]: the CPU kernels stream these tensors).
pub fn uniform(n: usize, seed: u64, tensor_id: u64, lo: f32, hi: f32) -> LineVec {
    let mut v = LineVec::zeroed(n);
    v.par_chunks_mut(FILL_CHUNK)
        .enumerate()
        .for_each(|(ci, chunk)| {
            let mut rng = Rng::stream(seed, (tensor_id << 40) ^ ci as u64);
            for x in chunk {
                *x = lo + (hi - lo) * rng.next_f64() as f32;
            }
        });
    v
}

/// Inputs of an elementwise chain.
#[derive(Debug)]
pub struct ElementwiseInputs {
    pub x: LineVec,
    /// `cols` values, present when the chain has a `bias_add`.
    pub bias: LineVec,
    /// For each op index, the second tensor of `add`/`mul` ops (empty for others).
    pub operands: Vec<LineVec>,
}

impl ElementwiseInputs {
    pub fn generate(w: &Elementwise, seed: u64) -> Self {
        let n = w.elements() as usize;
        let x = uniform(n, seed, 0, -4.0, 4.0);
        let bias = if w.ops.contains(&ElemOp::BiasAdd) {
            uniform(w.cols as usize, seed, 1, -1.0, 1.0)
        } else {
            LineVec::zeroed(0)
        };
        let operands = w
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| match op {
                ElemOp::Add => uniform(n, seed, 2 + i as u64, -2.0, 2.0),
                // Gates away from zero so relative errors stay meaningful.
                ElemOp::Mul => uniform(n, seed, 2 + i as u64, 0.25, 2.0),
                _ => LineVec::zeroed(0),
            })
            .collect();
        ElementwiseInputs { x, bias, operands }
    }

    /// Host bytes of these inputs for a workload (without generating them).
    pub fn bytes_for(w: &Elementwise) -> u64 {
        let t = w.elements() * 4;
        let operands = w.ops.iter().filter(|o| o.reads_tensor()).count() as u64;
        t * (1 + operands) + w.cols * 4
    }

    /// The f64 reference of output element `i`: the chain evaluated in double precision on the
    /// same (f32) inputs.
    pub fn reference(&self, w: &Elementwise, i: usize) -> f64 {
        let col = i % w.cols as usize;
        let scale = w.scale as f32 as f64;
        let mut v = self.x[i] as f64;
        for (k, op) in w.ops.iter().enumerate() {
            v = match op {
                ElemOp::BiasAdd => v + self.bias[col] as f64,
                ElemOp::Add => v + self.operands[k][i] as f64,
                ElemOp::Mul => v * self.operands[k][i] as f64,
                ElemOp::Scale => v * scale,
                ElemOp::Relu => {
                    if v < 0.0 {
                        0.0
                    } else {
                        v
                    }
                }
                ElemOp::Gelu => {
                    let c = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
                }
                ElemOp::Silu => v / (1.0 + (-v).exp()),
            };
        }
        v
    }
}

#[cfg(test)]
mod bf16_tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_round_trips() {
        assert_eq!(bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_bits(-2.0), 0xc000);
        assert_eq!(bf16_bits(f32::INFINITY), 0x7f80);
        assert_eq!(bf16_bits(f32::NEG_INFINITY), 0xff80);
        assert!(bf16_value(bf16_bits(f32::NAN)).is_nan());
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even pattern (1.0).
        assert_eq!(bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80);
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up to even.
        assert_eq!(bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(bf16_bits(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 0x3f81);
        // Every bf16 value converts back to itself; rounding is within half an ulp (2^-8 relative).
        for h in (0u16..0x7f80).step_by(7) {
            assert_eq!(bf16_bits(bf16_value(h)), h);
        }
        for &x in uniform(1000, 5, 0, -3.0, 3.0).iter() {
            let r = bf16_value(bf16_bits(x));
            assert!(((r - x) / x).abs() <= 2f32.powi(-8), "{x} -> {r}");
        }
    }
}
