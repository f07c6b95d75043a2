//! The ceiling probes as a workload kind (`kind: probe`), so a spec can put the machine's
//! ceilings in the report as cases of their own: STREAM copy and triad (the kernels of the
//! run's own probe, [`super::probe`]) and an FMA kernel that runs
//! `PROBE_FMA_ITERS` dependent FMAs on every element, 128 elements in flight per thread.

use super::simd::{store_fence, stream_copy};
use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::probe::{ProbeWorkload, FMA_A, FMA_B, PROBE_FMA_ITERS, TRIAD_S};
use crate::kinds::{Tensors, Variant};
use crate::multiversion;
use rayon::prelude::*;
use std::sync::Arc;

const CHUNK: usize = 1 << 16;

multiversion! {
    /// y = x after PROBE_FMA_ITERS rounds of v·a + b; 128 lanes = 8 zmm chains in flight.
    fn fma_block(y: &mut [f32], x: &[f32], a: f32, b: f32) {
        const L: usize = 128;
        let mut xs = x.chunks_exact(L);
        let mut ys = y.chunks_exact_mut(L);
        for (yc, xc) in (&mut ys).zip(&mut xs) {
            let mut acc = [0f32; L];
            acc.copy_from_slice(xc);
            for _ in 0..PROBE_FMA_ITERS {
                for v in acc.iter_mut() {
                    *v = v.mul_add(a, b);
                }
            }
            yc.copy_from_slice(&acc);
        }
        for (yv, &xv) in ys.into_remainder().iter_mut().zip(xs.remainder()) {
            let mut v = xv;
            for _ in 0..PROBE_FMA_ITERS {
                v = v.mul_add(a, b);
            }
            *yv = v;
        }
    }
}

impl CpuKernels for ProbeWorkload {
    fn kernels(&self, inputs: Arc<Tensors>, _: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Ok(Box::new(ProbeKernels { inputs }))
    }
}

pub struct ProbeKernels {
    inputs: Arc<Tensors>,
}

impl Kernels for ProbeKernels {
    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        let (b, c) = (self.inputs.get("b"), self.inputs.get("c"));
        match variant {
            Variant::Copy => {
                out.par_chunks_mut(CHUNK)
                    .zip(b.par_chunks(CHUNK))
                    .for_each(|(o, x)| {
                        stream_copy(o, x);
                        store_fence();
                    })
            }
            Variant::Triad => out
                .par_chunks_mut(CHUNK)
                .zip(b.par_chunks(CHUNK))
                .zip(c.par_chunks(CHUNK))
                .for_each(|((o, b), c)| {
                    super::probe::triad_streaming(o, b, c, TRIAD_S, super::simd::stream_prefetch());
                    store_fence();
                }),
            _ => out
                .par_chunks_mut(CHUNK)
                .zip(b.par_chunks(CHUNK))
                .for_each(|(o, x)| fma_block(o, x, FMA_A, FMA_B)),
        }
    }
    fn buffers(&self) -> Vec<&[f32]> {
        Vec::new()
    }
}
