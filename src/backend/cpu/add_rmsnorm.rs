//! CPU kernels of `kind: add_rmsnorm`.
//!
//! - unfused: an add pass over the whole tensors (s = x + residual, written to memory), then an
//!   RMSNorm pass per row that reads s back (its sum of squares, then y).
//! - fused: one pass per row: s = x + residual is written while its sum of squares accumulates,
//!   then y is computed from the row of s still in cache.
//!
//! Both variants round s to f32 and sum the squares of a row in the same order, so their outputs
//! are bit-identical. For tensors large against the cache both write s and y with streaming
//! stores (no write-allocate reads, which the ledger does not count): s through an L1 tile, y
//! straight from the normalising sweep; the fused variant keeps its row in a scratch row, so its
//! second sweep reads the cache, not s.

use super::simd::{store_fence, stream_copy, stream_norm_apply, LineVec};
use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::add_rmsnorm::AddRmsnorm;
use crate::kinds::{Tensors, Variant};
use crate::multiversion;
use rayon::prelude::*;
use std::sync::Arc;

/// Elements per task of the add pass: 256 KiB of f32.
const CHUNK: usize = 1 << 16;
/// Independent partial sums of a row's squares: enough to fill a vector register and hide the
/// FMA latency.
const LANES: usize = 16;

multiversion! {
    /// out = a + b.
    fn add(out: &mut [f32], a: &[f32], b: &[f32]) {
        for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
            *o = a + b;
        }
    }
}

multiversion! {
    /// Σ v², in LANES partial sums added at the end.
    fn sum_sq(v: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        let mut chunks = v.chunks_exact(LANES);
        for c in &mut chunks {
            for k in 0..LANES {
                acc[k] = c[k].mul_add(c[k], acc[k]);
            }
        }
        for (k, &x) in chunks.remainder().iter().enumerate() {
            acc[k] = x.mul_add(x, acc[k]);
        }
        acc.iter().sum()
    }
}

multiversion! {
    /// y = s · rstd · w.
    fn scale_weight(y: &mut [f32], s: &[f32], rstd: f32, w: &[f32]) {
        for ((y, &s), &w) in y.iter_mut().zip(s).zip(w) {
            *y = s * rstd * w;
        }
    }
}

/// Elements per streaming tile (16 KiB, in L1).
const TILE: usize = 4096;

/// `dst = f(tile)` for consecutive tiles of `dst`, written with streaming stores.
fn streamed(dst: &mut [f32], mut f: impl FnMut(usize, &mut [f32])) {
    let mut tile = [0f32; TILE];
    for (k, d) in dst.chunks_mut(TILE).enumerate() {
        let t = &mut tile[..d.len()];
        f(k * TILE, t);
        stream_copy(d, t);
    }
}

/// 1/√(mean(s²) + ε) of one row.
fn rstd(s: &[f32], eps: f32) -> f32 {
    1.0 / (sum_sq(s) / s.len() as f32 + eps).sqrt()
}

impl CpuKernels for AddRmsnorm {
    /// The sum s, which both variants write.
    fn scratch_bytes(&self) -> u64 {
        self.0.elements() * 4
    }
    fn kernels(&self, inputs: Arc<Tensors>, cfg: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Ok(Box::new(AddRmsnormKernels {
            sum: LineVec::zeroed(self.0.elements() as usize),
            cols: self.0.cols as usize,
            eps: self.0.eps as f32,
            // Non-temporal stores (AVX-512, AVX2) make the tile copy pay for itself; without
            // them (the portable path) the copy costs more than it saves.
            stream: cfg.stream && super::simd::level() >= super::simd::SimdLevel::Avx2Fma,
            inputs,
        }))
    }
}

pub struct AddRmsnormKernels {
    inputs: Arc<Tensors>,
    /// s = x + residual: the residual stream both variants write.
    sum: LineVec,
    cols: usize,
    eps: f32,
    /// Write s and y with streaming stores (tensors large against the cache).
    stream: bool,
}

impl AddRmsnormKernels {
    fn run_streaming(&mut self, variant: Variant, out: &mut [f32]) {
        let t = &self.inputs;
        let (x, res, w) = (t.get("x"), t.get("residual"), t.get("weight"));
        let (cols, eps) = (self.cols, self.eps);
        if variant == Variant::Unfused {
            self.sum
                .par_chunks_mut(CHUNK)
                .zip(x.par_chunks(CHUNK).zip(res.par_chunks(CHUNK)))
                .for_each(|(s, (x, r))| {
                    streamed(s, |at, tile| add(tile, &x[at..at + tile.len()], &r[at..]));
                    store_fence();
                });
            out.par_chunks_mut(cols)
                .zip(self.sum.par_chunks(cols))
                .with_min_len(16)
                .for_each(|(y, s)| {
                    let r = rstd(s, eps);
                    stream_norm_apply(y, s, 0.0, r, w, &[], &[]);
                    store_fence();
                });
            return;
        }
        out.par_chunks_mut(cols)
            .zip(self.sum.par_chunks_mut(cols))
            .zip(x.par_chunks(cols).zip(res.par_chunks(cols)))
            .with_min_len(16)
            .for_each_init(
                || vec![0f32; cols],
                |row, ((y, s), (x, r))| {
                    add(row, x, r);
                    stream_copy(s, row);
                    let rs = rstd(row, eps);
                    stream_norm_apply(y, row, 0.0, rs, w, &[], &[]);
                    store_fence();
                },
            );
    }
}

impl Kernels for AddRmsnormKernels {
    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        if self.stream {
            return self.run_streaming(variant, out);
        }
        let t = &self.inputs;
        let (x, res, w) = (t.get("x"), t.get("residual"), t.get("weight"));
        let (cols, eps) = (self.cols, self.eps);
        if variant == Variant::Unfused {
            self.sum
                .par_chunks_mut(CHUNK)
                .zip(x.par_chunks(CHUNK).zip(res.par_chunks(CHUNK)))
                .for_each(|(s, (x, r))| add(s, x, r));
            out.par_chunks_mut(cols)
                .zip(self.sum.par_chunks(cols))
                .with_min_len(16)
                .for_each(|(y, s)| scale_weight(y, s, rstd(s, eps), w));
        } else {
            out.par_chunks_mut(cols)
                .zip(self.sum.par_chunks_mut(cols))
                .zip(x.par_chunks(cols).zip(res.par_chunks(cols)))
                .with_min_len(16)
                .for_each(|((y, s), (x, r))| {
                    add(s, x, r);
                    scale_weight(y, s, rstd(s, eps), w);
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::rows::RowOp;
    use crate::kinds::{DType, Kind};

    #[test]
    fn both_variants_match_the_f64_reference_and_each_other() {
        for (rows, cols) in [
            (1, 1),
            (3, 17),
            (5, 1000),
            (2, 4099),
            (3, 2 * TILE as u64 + 5),
        ] {
            let k = AddRmsnorm(RowOp {
                rows,
                cols,
                dtype: DType::F32,
                eps: 1e-5,
            });
            let inputs = Arc::new(k.inputs(9));
            for stream in [false, true] {
                let cfg = CaseConfig {
                    stream,
                    experiment_slowdown: 0.0,
                };
                let mut kernels = k.kernels(inputs.clone(), &cfg).unwrap();
                let n = (rows * cols) as usize;
                let (mut u, mut f) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                kernels.run(Variant::Unfused, &mut u);
                kernels.run(Variant::Fused, &mut f);
                for i in 0..n {
                    assert_eq!(u[i].to_bits(), f[i].to_bits(), "{rows}x{cols} [{i}]");
                    let e = k.reference(&inputs, Variant::Fused, i);
                    assert!(
                        (f[i] as f64 - e).abs() <= 1e-6 + 2e-5 * e.abs(),
                        "{rows}x{cols} [{i}] {} vs {e}",
                        f[i]
                    );
                }
            }
        }
    }
}
