//! Seeded host inputs of a workload, and the f64 reference computed from them.
//!
//! Values are uniform in ranges that exercise each op (negative and positive, never all zero);
//! chunks are filled in parallel from independent streams, so the numbers depend only on the
//! seed, not on the thread count.

use crate::rng::Rng;
use crate::spec::{ElemOp, Elementwise};
use rayon::prelude::*;

const FILL_CHUNK: usize = 1 << 16;

/// Fills `n` values uniform in [lo, hi) from stream `tensor_id` of `seed`.
pub fn uniform(n: usize, seed: u64, tensor_id: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut v = vec![0f32; n];
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
    pub x: Vec<f32>,
    /// `cols` values, present when the chain has a `bias_add`.
    pub bias: Vec<f32>,
    /// For each op index, the second tensor of `add`/`mul` ops (empty for others).
    pub operands: Vec<Vec<f32>>,
}

impl ElementwiseInputs {
    pub fn generate(w: &Elementwise, seed: u64) -> Self {
        let n = w.elements() as usize;
        let x = uniform(n, seed, 0, -4.0, 4.0);
        let bias = if w.ops.contains(&ElemOp::BiasAdd) {
            uniform(w.cols as usize, seed, 1, -1.0, 1.0)
        } else {
            Vec::new()
        };
        let operands = w
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| match op {
                ElemOp::Add => uniform(n, seed, 2 + i as u64, -2.0, 2.0),
                // Gates away from zero so relative errors stay meaningful.
                ElemOp::Mul => uniform(n, seed, 2 + i as u64, 0.25, 2.0),
                _ => Vec::new(),
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
