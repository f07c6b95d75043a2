//! CPU kernels of a decode-like launch chain: n small elementwise kernels (v·a_i + b_i) on a
//! small tensor. On the CPU a "launch" is a dispatch on the thread pool: waking the workers,
//! handing out the chunks and joining them.
//!
//! - eager: each op is its own parallel dispatch, joined before the next (n launches);
//! - graph: the chain is a plan replayed with one dispatch: each worker runs all n ops on its
//!   own slice (elementwise ops have no cross-slice dependencies), joined once.
//!
//! Both run the same ops on the same chunks through the same two ping-pong buffers.

use super::Kernels;
use crate::backend::inputs::{uniform, LineVec};
use crate::multiversion;
use crate::spec::{LaunchChain, Variant};
use rayon::prelude::*;

multiversion! {
    fn affine(dst: &mut [f32], src: &[f32], a: f32, b: f32) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = s * a + b;
        }
    }
}

/// Coefficients of op `i`: values stay bounded over thousands of ops.
pub fn coeffs(i: u64) -> (f32, f32) {
    (0.999 - 0.001 * (i % 3) as f32, 0.001 * (i % 7) as f32)
}

/// The buffers op `i` of an `ops`-long chain reads and writes: it reads x (first op) or the
/// buffer the previous op wrote, and writes the other of t0/t1, or `out` (last op). Every
/// variant and backend rotates its buffers this way, so they compute the same chain.
pub fn chain_buffers<'a, T: ?Sized>(
    i: u64,
    ops: u64,
    x: &'a T,
    t0: &'a mut T,
    t1: &'a mut T,
    out: &'a mut T,
) -> (&'a T, &'a mut T) {
    match (i, i == ops - 1, i % 2) {
        (0, true, _) => (x, out),
        (0, false, _) => (x, t0),
        (_, true, 1) => (t0, out),
        (_, true, _) => (t1, out),
        (_, false, 1) => (t0, t1),
        (_, false, _) => (t1, t0),
    }
}

pub struct LaunchKernels {
    l: LaunchChain,
    x: LineVec,
    t0: Vec<f32>,
    t1: Vec<f32>,
    chunk: usize,
}

impl LaunchKernels {
    pub fn new(l: LaunchChain, seed: u64) -> Self {
        let n = l.elements as usize;
        LaunchKernels {
            x: uniform(n, seed, 0, -2.0, 2.0),
            t0: vec![0f32; n],
            t1: vec![0f32; n],
            // One chunk per worker, as a small kernel gets a few blocks.
            chunk: n.div_ceil(rayon::current_num_threads()).max(1),
            l,
        }
    }

    /// The input tensor (for backends that upload it).
    pub fn host_input(&self) -> &[f32] {
        &self.x
    }

    fn eager(&mut self, out: &mut [f32]) {
        let ops = self.l.n_ops;
        let c = self.chunk;
        for i in 0..ops {
            let (a, b) = coeffs(i);
            let (src, dst) = chain_buffers(i, ops, &self.x[..], &mut self.t0, &mut self.t1, out);
            dst.par_chunks_mut(c)
                .zip(src.par_chunks(c))
                .for_each(|(d, s)| affine(d, s, a, b));
        }
    }

    fn graph(&mut self, out: &mut [f32]) {
        let ops = self.l.n_ops;
        let c = self.chunk;
        out.par_chunks_mut(c)
            .zip(self.t0.par_chunks_mut(c))
            .zip(self.t1.par_chunks_mut(c))
            .zip(self.x.par_chunks(c))
            .for_each(|(((o, t0), t1), x)| {
                for i in 0..ops {
                    let (a, b) = coeffs(i);
                    let (src, dst) = chain_buffers(i, ops, x, &mut *t0, &mut *t1, &mut *o);
                    affine(dst, src, a, b);
                }
            });
    }
}

impl Kernels for LaunchKernels {
    fn output_len(&self) -> usize {
        self.l.elements as usize
    }

    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        if variant == Variant::Eager {
            self.eager(out)
        } else {
            self.graph(out)
        }
    }

    fn reference(&self, idx: usize) -> f64 {
        (0..self.l.n_ops).fold(self.x[idx] as f64, |v, i| {
            let (a, b) = coeffs(i);
            v * a as f64 + b as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::DType;

    #[test]
    fn eager_and_graph_match_f64_for_odd_and_even_chains() {
        for (ops, n) in [(2, 5), (3, 1000), (200, 4099)] {
            let mut k = LaunchKernels::new(
                LaunchChain {
                    n_ops: ops,
                    elements: n,
                    dtype: DType::F32,
                },
                5,
            );
            let mut e = vec![f32::NAN; n as usize];
            let mut g = vec![f32::NAN; n as usize];
            k.run(Variant::Eager, &mut e);
            k.run(Variant::Graph, &mut g);
            for i in 0..n as usize {
                assert_eq!(e[i].to_bits(), g[i].to_bits(), "ops={ops} [{i}]");
                let r = k.reference(i);
                assert!(
                    (e[i] as f64 - r).abs() <= 1e-5 + 1e-5 * r.abs(),
                    "ops={ops} [{i}] {} vs {r}",
                    e[i]
                );
            }
        }
    }
}
