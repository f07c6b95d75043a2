//! CPU kernels of `kind: add_rmsnorm`.
//!
//! - unfused: an add pass over the whole tensors (s = x + residual, written to memory), then an
//!   RMSNorm pass per row that reads s back (its sum of squares, then y).
//! - fused: one pass per row in two sweeps: s = x + residual is kept in an L1 row and streamed
//!   out while its sum of squares accumulates, then y is computed from the row still in L1.
//!   Both sweeps ask for the next row's x and r into L2, so that memory's reads go on while
//!   the second sweep works from the L1 row.
//!
//! Both variants round s to f32 and sum the squares of a row in the same order, so their outputs
//! are bit-identical. For tensors large against the cache both write s and y with streaming
//! stores (no write-allocate reads, which the ledger does not count): s through an L1 tile, y
//! straight from the normalising sweep; the fused variant keeps its row in a scratch row, so its
//! second sweep reads the cache, not s.

use super::simd::{
    level, store_fence, stream_copy, stream_norm_apply, supports, LineVec, SimdLevel,
};
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
        sum_sq_with::<M>(v)
    }
}

/// [`sum_sq`]'s loop with the multiply-add `M` (the tests name it for each level).
#[inline(always)]
fn sum_sq_with<M: super::math::MulAdd>(v: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = v.chunks_exact(LANES);
    for c in &mut chunks {
        for k in 0..LANES {
            acc[k] = M::f32(c[k], c[k], acc[k]);
        }
    }
    for (k, &x) in chunks.remainder().iter().enumerate() {
        acc[k] = M::f32(x, x, acc[k]);
    }
    acc.iter().sum()
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
    rstd_of(sum_sq(s), s.len(), eps)
}

/// 1/√(Σs²/n + ε).
fn rstd_of(sum_sq: f32, n: usize, eps: f32) -> f32 {
    1.0 / (sum_sq / n as f32 + eps).sqrt()
}

/// The fused row's first sweep: `row = s = x + r`, the same s written to `s_out` with
/// streaming stores, and Σ s² returned, summed exactly as [`sum_sq`] sums it (lane k of LANES
/// takes the elements ≡ k mod LANES, by fused multiply-add, then the lanes in order), so both
/// variants stay bit-identical. One sweep that reads memory where add, copy-out and sum were
/// three, two of them over the L1 row while memory idled. The lines of `next` (the next row's
/// x and r, or empty) are asked for into L2 as the sweep goes. Where `s_out` does not start on
/// a cache line (a streaming store needs whole lines) the row takes the three sweeps.
fn add_stream_sum_sq(
    l: SimdLevel,
    row: &mut [f32],
    s_out: &mut [f32],
    x: &[f32],
    r: &[f32],
    next: [&[f32]; 2],
) -> f32 {
    assert!(supports(l), "this CPU lacks {}", l.name());
    let n = row.len();
    assert!(s_out.len() == n && x.len() == n && r.len() == n);
    #[cfg(target_arch = "x86_64")]
    let aligned = s_out.as_ptr().align_offset(64) == 0;
    match l {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has avx512f (asserted above); the slices have one length.
        SimdLevel::Avx512 if aligned => unsafe { add_stream_sum_sq_avx512(row, s_out, x, r, next) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has avx2 and fma (asserted above); the slices have one length.
        SimdLevel::Avx2Fma if aligned => unsafe {
            add_stream_sum_sq_avx2::<std::arch::x86_64::__m256>(row, s_out, x, r, next)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        SimdLevel::Avx2NoFma if aligned => unsafe {
            add_stream_sum_sq_avx2::<super::lanes::NoFma256>(row, s_out, x, r, next)
        },
        _ => {
            // No prefetch on the three sweeps' path: the hint is x86-64's.
            let _ = next;
            add(row, x, r);
            stream_copy(s_out, row);
            sum_sq(row)
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn add_stream_sum_sq_avx512(
    row: &mut [f32],
    s_out: &mut [f32],
    x: &[f32],
    r: &[f32],
    next: [&[f32]; 2],
) -> f32 {
    // SAFETY: compiled with avx512f; the caller's slices have one length, s_out line-aligned.
    unsafe { add_stream_sum_sq_v::<std::arch::x86_64::__m512>(row, s_out, x, r, next) }
}

/// `V` is `__m256` (FMA) or [`super::lanes::NoFma256`] (the `avx2-nofma` level).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn add_stream_sum_sq_avx2<V: super::lanes::Lanes>(
    row: &mut [f32],
    s_out: &mut [f32],
    x: &[f32],
    r: &[f32],
    next: [&[f32]; 2],
) -> f32 {
    // SAFETY: compiled with avx2 and fma, which V's methods need; the caller's slices have one
    // length, s_out aligned.
    unsafe { add_stream_sum_sq_v::<V>(row, s_out, x, r, next) }
}

/// # Safety
/// V's features are enabled; the four slices have one length; `s_out` starts on a 64-byte line.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_stream_sum_sq_v<V: super::lanes::Lanes>(
    row: &mut [f32],
    s_out: &mut [f32],
    x: &[f32],
    r: &[f32],
    next: [&[f32]; 2],
) -> f32 {
    use super::simd::PREFETCH_ELEMS;
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let n = row.len();
    // LANES partial sums as LANES / V::LANES vectors (one zmm, or two ymm).
    // SAFETY: the caller's contract (V's features).
    let mut acc = unsafe { [V::splat(0.0); LANES / 8] };
    let mut i = 0;
    // Light arithmetic: prefetched as the probe found the triad faster (`simd::stream_prefetch`).
    let prefetch = super::simd::stream_prefetch();
    while i + LANES <= n {
        // x and r ahead of the sweep, running on into the next row's (the tensors are one
        // array); a prefetch never faults, so the address may run past the end.
        if prefetch {
            // SAFETY: prefetcht0 is a hint (SSE, part of x86_64).
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(
                    x.as_ptr().wrapping_add(i + PREFETCH_ELEMS) as *const i8
                );
                _mm_prefetch::<_MM_HINT_T0>(
                    r.as_ptr().wrapping_add(i + PREFETCH_ELEMS) as *const i8
                );
            }
        }
        // The next row's x and r into L2, a line of each per line of this row (see
        // `run_streaming`).
        for next in next {
            if i < next.len() {
                super::simd::prefetch_l2(next.as_ptr().wrapping_add(i));
            }
        }
        for k in (0..LANES).step_by(V::LANES) {
            // SAFETY: i + LANES <= n bounds every slice; s_out + i + k is aligned to the vector
            // (s_out starts on a line and i steps by whole lines), as the streaming store needs.
            unsafe {
                let s = V::add(
                    V::load(x.as_ptr().add(i + k)),
                    V::load(r.as_ptr().add(i + k)),
                );
                V::store(row.as_mut_ptr().add(i + k), s);
                V::stream(s_out.as_mut_ptr().add(i + k), s);
                acc[k / V::LANES] = V::fmadd(s, s, acc[k / V::LANES]);
            }
        }
        i += LANES;
    }
    let mut lanes = [0f32; LANES];
    for k in (0..LANES).step_by(V::LANES) {
        // SAFETY: lanes holds LANES values, k + V::LANES <= LANES.
        unsafe { V::store(lanes.as_mut_ptr().add(k), acc[k / V::LANES]) };
    }
    for (k, j) in (i..n).enumerate() {
        let s = x[j] + r[j];
        row[j] = s;
        s_out[j] = s;
        lanes[k] = <V::MulAdd as super::math::MulAdd>::f32(s, s, lanes[k]);
    }
    lanes.iter().sum()
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
            stream: cfg.stream && super::simd::level() >= super::simd::SimdLevel::Avx2NoFma,
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
        let (cols, eps, level) = (self.cols, self.eps, level());
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
                    stream_norm_apply(y, s, 0.0, r, w, &[], [&[], &[]]);
                    store_fence();
                });
            return;
        }
        // The next row's x and r (empty after the last row), asked for into L2 during both of
        // this row's sweeps: the first reads memory for this row while the second works on the
        // L1 row with only y's stores going out, so memory's reads would idle there. Measured
        // at 86% of the triad without, 96% with (docs/performance.md).
        let next = |k: usize| -> [&[f32]; 2] {
            let at = (k + 1) * cols..(k + 2) * cols;
            [x.get(at.clone()).unwrap_or(&[]), res.get(at).unwrap_or(&[])]
        };
        out.par_chunks_mut(cols)
            .zip(self.sum.par_chunks_mut(cols))
            .zip(x.par_chunks(cols).zip(res.par_chunks(cols)))
            .enumerate()
            .with_min_len(16)
            .for_each_init(
                || vec![0f32; cols],
                |row, (k, ((y, s), (xr, rr)))| {
                    let sum_sq = add_stream_sum_sq(level, row, s, xr, rr, next(k));
                    stream_norm_apply(y, row, 0.0, rstd_of(sum_sq, cols, eps), w, &[], next(k));
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
    fn buffers(&self) -> Vec<&[f32]> {
        vec![&self.sum]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::rows::RowOp;
    use crate::kinds::{DType, Kind};

    /// The one-sweep add at every level this CPU has gives the three sweeps' row, s and Σ s²
    /// bit for bit, at every length and alignment, and writes nothing outside s.
    #[test]
    fn the_one_sweep_add_matches_the_three_sweeps_at_every_level() {
        let x: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let r: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.11).cos() - 0.5).collect();
        for l in [
            SimdLevel::Scalar,
            SimdLevel::Avx2NoFma,
            SimdLevel::Avx2Fma,
            SimdLevel::Avx512,
        ] {
            if !supports(l) {
                continue;
            }
            for (start, len) in [
                (0, 0),
                (0, 1),
                (0, 15),
                (0, 16),
                (3, 17),
                (16, 2000),
                (0, 2999),
            ] {
                let (xs, rs) = (&x[start..start + len], &r[start..start + len]);
                let mut want = vec![0f32; len];
                add(&mut want, xs, rs);
                let want_sum = if l == SimdLevel::Avx2NoFma {
                    sum_sq_with::<crate::math::Separate>(&want)
                } else {
                    sum_sq_with::<crate::math::Fused>(&want)
                };
                let mut row = vec![f32::NAN; len];
                let mut s = LineVec::filled(3000, f32::NAN);
                let got_sum =
                    add_stream_sum_sq(l, &mut row, &mut s[start..start + len], xs, rs, [&x, &r]);
                store_fence();
                assert_eq!(got_sum.to_bits(), want_sum.to_bits(), "{l:?} {start}+{len}");
                for i in 0..len {
                    assert_eq!(row[i].to_bits(), want[i].to_bits(), "{l:?} row {start}+{i}");
                    assert_eq!(
                        s[start + i].to_bits(),
                        want[i].to_bits(),
                        "{l:?} s {start}+{i}"
                    );
                }
                assert!(s[..start]
                    .iter()
                    .chain(&s[start + len..])
                    .all(|v| v.is_nan()));
            }
        }
    }

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
