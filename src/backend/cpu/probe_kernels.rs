//! The ceiling probes as a workload kind (`kind: probe`), so a spec can put the machine's
//! ceilings in the report as cases of their own: STREAM copy and triad (the kernels of the
//! run's own probe, [`crate::device::probe`]) and an FMA kernel that runs
//! `PROBE_FMA_ITERS` dependent FMAs on every element, 128 elements in flight per thread.

use super::simd::{store_fence, stream_copy};
use super::Kernels;
use crate::backend::inputs::{uniform, LineVec};
use crate::ledger::PROBE_FMA_ITERS;
use crate::multiversion;
use crate::spec::{ProbeWorkload, Variant};
use rayon::prelude::*;

const CHUNK: usize = 1 << 16;
const TRIAD_S: f32 = 3.0;
const FMA_A: f32 = 0.999;
const FMA_B: f32 = 0.001;

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

pub struct ProbeKernels {
    p: ProbeWorkload,
    b: LineVec,
    c: LineVec,
}

impl ProbeKernels {
    pub fn new(p: ProbeWorkload, seed: u64) -> Self {
        let n = p.elements as usize;
        ProbeKernels {
            b: uniform(n, seed, 0, -1.0, 1.0),
            c: uniform(n, seed, 1, -1.0, 1.0),
            p,
        }
    }
}

impl Kernels for ProbeKernels {
    fn output_len(&self) -> usize {
        self.p.elements as usize
    }

    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        let (b, c) = (&self.b, &self.c);
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
                    crate::device::probe::triad_streaming(o, b, c, TRIAD_S);
                    store_fence();
                }),
            _ => out
                .par_chunks_mut(CHUNK)
                .zip(b.par_chunks(CHUNK))
                .for_each(|(o, x)| fma_block(o, x, FMA_A, FMA_B)),
        }
    }

    /// The copy's reference; each variant is checked against its own (`reference_of`).
    fn reference(&self, i: usize) -> f64 {
        self.b[i] as f64
    }

    fn variants_agree(&self) -> bool {
        false
    }

    /// The f64 value variant `v` must produce at element `i`.
    fn reference_of(&self, v: Variant, i: usize) -> f64 {
        let (b, c) = (self.b[i] as f64, self.c[i] as f64);
        match v {
            Variant::Copy => b,
            Variant::Triad => b + TRIAD_S as f64 * c,
            _ => (0..PROBE_FMA_ITERS).fold(b, |v, _| v * FMA_A as f64 + FMA_B as f64),
        }
    }
}
