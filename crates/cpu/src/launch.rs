//! CPU kernels of a decode-like launch chain: n small elementwise kernels (v·a_i + b_i) on a
//! small tensor. On the CPU a "launch" is a dispatch on the thread pool: waking the workers,
//! handing out the chunks and joining them.
//!
//! - eager: each op is its own parallel dispatch, joined before the next (n launches);
//! - graph: the chain is a plan replayed with one dispatch: each worker runs all n ops on its
//!   own slice (elementwise ops have no cross-slice dependencies), joined once.
//!
//! Both run the same ops on the same chunks through the same two ping-pong buffers.

use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::launch_chain::{chain_buffers, coeffs, LaunchChain};
use crate::kinds::{Tensors, Variant};
use crate::multiversion;
use rayon::prelude::*;
use std::sync::Arc;

multiversion! {
    fn affine(dst: &mut [f32], src: &[f32], a: f32, b: f32) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = s * a + b;
        }
    }
}

impl CpuKernels for LaunchChain {
    /// The two intermediates t0 and t1.
    fn scratch_bytes(&self) -> u64 {
        2 * self.elements * 4
    }
    fn kernels(&self, inputs: Arc<Tensors>, _: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Ok(Box::new(LaunchKernels::new(self.clone(), inputs)))
    }
}

pub struct LaunchKernels {
    l: LaunchChain,
    inputs: Arc<Tensors>,
    t0: Vec<f32>,
    t1: Vec<f32>,
    chunk: usize,
}

impl LaunchKernels {
    pub fn new(l: LaunchChain, inputs: Arc<Tensors>) -> Self {
        let n = l.elements as usize;
        LaunchKernels {
            inputs,
            t0: vec![0f32; n],
            t1: vec![0f32; n],
            // One chunk per worker, as a small kernel gets a few blocks.
            chunk: n.div_ceil(rayon::current_num_threads()).max(1),
            l,
        }
    }

    fn eager(&mut self, out: &mut [f32]) {
        let ops = self.l.n_ops;
        let c = self.chunk;
        for i in 0..ops {
            let (a, b) = coeffs(i);
            let (src, dst) = chain_buffers(
                i,
                ops,
                self.inputs.get("x"),
                &mut self.t0,
                &mut self.t1,
                out,
            );
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
            .zip(self.inputs.get("x").par_chunks(c))
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
    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        if variant == Variant::Eager {
            self.eager(out)
        } else {
            self.graph(out)
        }
    }
    fn buffers(&self) -> Vec<&[f32]> {
        vec![&self.t0, &self.t1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{DType, Kind};

    #[test]
    fn eager_and_graph_match_f64_for_odd_and_even_chains() {
        for (ops, n) in [(2, 5), (3, 1000), (200, 4099)] {
            let l = LaunchChain {
                n_ops: ops,
                elements: n,
                dtype: DType::F32,
            };
            let inputs = Arc::new(l.inputs(5));
            let mut k = LaunchKernels::new(l.clone(), inputs.clone());
            let mut e = vec![f32::NAN; n as usize];
            let mut g = vec![f32::NAN; n as usize];
            k.run(Variant::Eager, &mut e);
            k.run(Variant::Graph, &mut g);
            for i in 0..n as usize {
                assert_eq!(e[i].to_bits(), g[i].to_bits(), "ops={ops} [{i}]");
                let r = l.reference(&inputs, Variant::Eager, i);
                assert!(
                    (e[i] as f64 - r).abs() <= 1e-5 + 1e-5 * r.abs(),
                    "ops={ops} [{i}] {} vs {r}",
                    e[i]
                );
            }
        }
    }
}
