//! CPU kernels of the row-wise operators: RMSNorm, LayerNorm and softmax over rows×cols.
//!
//! - unfused: every step is its own parallel pass (kernel) and every intermediate — full-size
//!   tensors and per-row vectors — goes through memory, as the ledger lists them;
//! - fused: one pass per row; the row (≤ a few KiB) stays in L1/L2 between its sweeps (stats,
//!   then apply), so the tensor is read once and written once.
//!
//! Row statistics are summed in 64 independent f32 lanes (vectorizable, and more accurate than
//! one running sum). Large outputs are written with streaming stores in both variants.
//!
//! The fused kernels prefetch the next row into L2 during the row's last, L1-resident sweep —
//! RMSNorm and LayerNorm during their statistics sweep too, which reads the cache while memory
//! would idle (softmax's maximum sweep asking for it was slower) — and softmax scales by 1/Σ as
//! the row is written out. docs/performance.md has the figures.
//!
//! The fused softmax's exponentials are its arithmetic: on AVX-512 and AVX2 they run through
//! hand-vectorized exponentials of 12 and 15 operations (the auto-vectorized scalar one takes
//! 18), so that the row's arithmetic hides behind the next row's read. With streaming output
//! the rows go in pairs: row j's exponential sweep also writes row j − 1 out, so that the write
//! stream runs beside the arithmetic (a separate write-out sweep left memory idle during the
//! exponentials and the arithmetic idle during the write-out), out of the one row buffer that
//! row j's values then replace. The maximum stays its own sweep: folding row j + 1's maximum
//! into that sweep too was measured slower; docs/performance.md has the figures.
//!
//! Both are arranged around the L1: at 4096 columns three rows of 16 KiB fill a 48 KiB L1, and
//! the next row's sweep evicted lines still wanted. Softmax reads and writes one row buffer
//! instead of two (32 KiB with x's row); LayerNorm's statistics sweep reads a value of each line
//! of w and b, so that the row it brings in evicts the previous x instead ([`ln_stats`]).

use super::math;
use super::simd::{
    level, prefetch_l2, store_fence, stream_norm_apply, stream_norm_apply_at, stream_scale,
    supports, LineVec, SimdLevel,
};
use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::rows::{Layernorm, Rmsnorm, RowOp, Softmax};
use crate::kinds::{Tensors, Variant, WorkloadKind};
use crate::multiversion;
use rayon::prelude::*;
use std::sync::Arc;

const LANES: usize = 64;

/// Σ f(x) over a row in LANES independent accumulators, asking for `next`'s lines into L2 as
/// the sweep passes the same place in x ([`prefetch_next_lines`]; none where `next` is empty).
#[inline(always)]
fn lanes_sum(x: &[f32], next: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|&v| f(v)).sum();
    let ask = next.len() >= x.len();
    for (ci, c) in chunks.enumerate() {
        if ask {
            prefetch_next_lines::<LANES>(next, ci * LANES);
        }
        for l in 0..LANES {
            acc[l] += f(c[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Asks for the lines of `next[at..at + N]` into L2. A statistics sweep reads its row from the
/// cache while memory would idle until the apply sweep streams the row out and asks for the next
/// one; asked for here too, the next row's lines come in during both sweeps (the apply's asks
/// then find them on their way or there). A prefetch is a hint: an address past `next` reads
/// nothing and cannot fault.
#[inline(always)]
fn prefetch_next_lines<const N: usize>(next: &[f32], at: usize) {
    for line in (0..N).step_by(16) {
        prefetch_l2(next.as_ptr().wrapping_add(at + line));
    }
}

multiversion! {
    fn sum_row(x: &[f32]) -> f32 {
        lanes_sum(x, &[], |v| v)
    }
}

multiversion! {
    /// Σ x², asking for `next`'s lines as it goes (see [`lanes_sum`]).
    fn sum_sq_row(x: &[f32], next: &[f32]) -> f32 {
        lanes_sum(x, next, |v| v * v)
    }
}

/// [`shifted_sums_row`]'s accumulators a sum: four vectors of AVX2, two of AVX-512. With
/// [`LANES`] (sixteen AVX2 registers for the two sums) LLVM spilled and shuffled them through
/// ~30 register moves per 64 values; this sweep runs while memory idles between two rows'
/// streams, so its length shows in LayerNorm's time.
const STAT_LANES: usize = 32;

multiversion! {
    /// (Σ (x − k), Σ (x − k)²) over a row in one sweep, each in STAT_LANES independent
    /// accumulators, the squares added by a multiply-add. With `keep` (two rows as long as `x`,
    /// else empty), one value of each of their cache lines is read as the sweep passes it: see
    /// [`ln_stats`]. With `next` (as long as `x`, else empty), its lines are asked for into L2
    /// ([`prefetch_next_lines`]).
    fn shifted_sums_row(x: &[f32], k: f32, keep: [&[f32]; 2], next: &[f32]) -> (f32, f32) {
        let mut a1 = [0f32; STAT_LANES];
        let mut a2 = [0f32; STAT_LANES];
        let chunks = x.chunks_exact(STAT_LANES);
        let (mut t1, mut t2) = (0f32, 0f32);
        for &v in chunks.remainder() {
            t1 += v - k;
            t2 = M::f32(v - k, v - k, t2);
        }
        let keep = keep.map(|r| if r.len() >= x.len() { r } else { &[][..] });
        let ask = next.len() >= x.len();
        for (ci, c) in chunks.enumerate() {
            if ask {
                prefetch_next_lines::<STAT_LANES>(next, ci * STAT_LANES);
            }
            for r in keep {
                for line in (0..STAT_LANES).step_by(16) {
                    if let Some(v) = r.get(ci * STAT_LANES + line) {
                        // SAFETY: `v` is a reference to an initialised f32; the read is
                        // volatile only so that it is not left out (its value is not used).
                        unsafe { std::ptr::read_volatile(v) };
                    }
                }
            }
            for l in 0..STAT_LANES {
                let d = c[l] - k;
                a1[l] += d;
                a2[l] = M::f32(d, d, a2[l]);
            }
        }
        (a1.iter().sum::<f32>() + t1, a2.iter().sum::<f32>() + t2)
    }
}

/// A row's LayerNorm statistics, (mean, 1/√(variance + eps)), from one sweep over the row:
/// the sums of x − k and of (x − k)², k the mean of the row's first `⌈cols/16⌉` (at least 64)
/// values; mean = k + Σ(x − k)/n and variance = Σ(x − k)²/n − (mean − k)².
///
/// One sweep instead of two (the mean, then the squared deviations from it): the fused
/// LayerNorm then has RMSNorm's shape, statistics then the streamed-out apply, and reached
/// RMSNorm's share of the triad (docs/performance.md). The shift keeps the subtraction
/// accurate: by Cauchy–Schwarz the mean of any m of the n values lies within σ·√(n/m) of the
/// row's mean, so (mean − k)² ≤ 16·σ² and the variance loses at most a factor 17 of the
/// two-sweep form's relative accuracy — whatever the row's offset, and with an outlier among
/// the first values (a shift by the first value alone could lose all of it).
///
/// With `keep` (the weight and bias rows, as long as the row, where the three fit L1 together:
/// [`keeps_weights`]), the sweep also reads a value of each of their lines as it passes them.
/// The streamed apply reads x, w and b together: at 4096 columns, 48 KiB, the whole of a 48 KiB
/// L1, so that the next row's statistics sweep evicted w's and b's lines (the apply's oldest,
/// by position) and the apply fetched them from L2 again, holding fill buffers that its
/// streaming stores and prefetches wait for — fused LayerNorm at 4096 columns took a fifth
/// longer than RMSNorm, at 2048 columns as long. Read during the sweep, w's and b's lines are
/// newer than the previous row's x, which goes instead (docs/performance.md).
fn ln_stats(x: &[f32], eps: f32, keep: [&[f32]; 2], next: &[f32]) -> (f32, f32) {
    let n = x.len();
    if n == 0 {
        return (0.0, 1.0 / eps.sqrt());
    }
    let head = &x[..n.div_ceil(16).max(64).min(n)];
    let k = sum_row(head) / head.len() as f32;
    let (s1, s2) = shifted_sums_row(x, k, keep, next);
    let inv_n = 1.0 / n as f32;
    let d = s1 * inv_n;
    let var = s2 * inv_n - d * d;
    // Rounding may leave a constant row's variance a hair below 0; NaN stays NaN.
    let var = if var < 0.0 { 0.0 } else { var };
    (k + d, 1.0 / (var + eps).sqrt())
}

multiversion! {
    pub(super) fn max_row(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; LANES];
        let chunks = x.chunks_exact(LANES);
        let mut m = chunks.remainder().iter().fold(f32::NEG_INFINITY, |a, &v| if v > a { v } else { a });
        for c in chunks {
            for l in 0..LANES {
                acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
            }
        }
        for v in acc {
            m = if v > m { v } else { m };
        }
        m
    }
}

multiversion! {
    fn square_row(x: &[f32], out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v * v;
        }
    }
}

multiversion! {
    fn scale_row(x: &[f32], s: f32, out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v * s;
        }
    }
}

multiversion! {
    pub(super) fn scale_in_place(x: &mut [f32], s: f32) {
        for v in x.iter_mut() {
            *v *= s;
        }
    }
}

multiversion! {
    fn mul_row(x: &[f32], w: &[f32], out: &mut [f32]) {
        for ((o, &v), &w) in out.iter_mut().zip(x).zip(w) {
            *o = v * w;
        }
    }
}

multiversion! {
    fn sub_row(x: &[f32], m: f32, out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v - m;
        }
    }
}

multiversion! {
    fn exp_sub_row(x: &[f32], m: f32, out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = math::exp::<M>(v - m);
        }
    }
}

multiversion! {
    /// x = exp(x − m); returns Σ x.
    pub(super) fn exp_sub_sum_in_place(x: &mut [f32], m: f32) -> f32 {
        for v in x.iter_mut() {
            *v = math::exp::<M>(*v - m);
        }
        lanes_sum(x, &[], |v| v)
    }
}

multiversion! {
    fn affine_row(x: &[f32], w: &[f32], b: &[f32], out: &mut [f32]) {
        for (((o, &v), &w), &b) in out.iter_mut().zip(x).zip(w).zip(b) {
            *o = v * w + b;
        }
    }
}

/// Runs `body` over `0..n` in blocks of 1 KiB, first asking for the same 1 KiB of `next` to
/// be brought into L2: the fused kernels pass the next row's input, so that its lines arrive
/// while this row's (L1-resident, arithmetic-bound) sweep runs, instead of memory idling
/// until the next row's first sweep asks for them.
#[inline(always)]
fn with_prefetch(n: usize, next: &[f32], mut body: impl FnMut(std::ops::Range<usize>)) {
    const BLOCK: usize = 256;
    let mut i = 0;
    while i < n {
        let end = (i + BLOCK).min(n);
        if !next.is_empty() {
            let mut p = i;
            while p < end {
                prefetch_l2(next.as_ptr().wrapping_add(p));
                p += 16; // one 64-byte line
            }
        }
        body(i..end);
        i = end;
    }
}

multiversion! {
    /// rms_apply_row, prefetching `next` meanwhile.
    fn rms_apply_row_pf(x: &[f32], r: f32, w: &[f32], out: &mut [f32], next: &[f32]) {
        with_prefetch(out.len(), next, |b| {
            for ((o, &v), &w) in out[b.clone()].iter_mut().zip(&x[b.clone()]).zip(&w[b]) {
                *o = v * r * w;
            }
        });
    }
}

multiversion! {
    /// ln_apply_row, prefetching `next` meanwhile.
    fn ln_apply_row_pf(x: &[f32], mean: f32, r: f32, w: &[f32], b: &[f32], out: &mut [f32], next: &[f32]) {
        with_prefetch(out.len(), next, |k| {
            for (((o, &v), &w), &b) in out[k.clone()].iter_mut().zip(&x[k.clone()]).zip(&w[k.clone()]).zip(&b[k]) {
                *o = (v - mean) * r * w + b;
            }
        });
    }
}

multiversion! {
    /// out = exp(x − m), returning Σ out, prefetching `next` meanwhile.
    fn exp_sub_sum_row_pf(x: &[f32], m: f32, out: &mut [f32], next: &[f32]) -> f32 {
        with_prefetch(out.len(), next, |b| {
            for (o, &v) in out[b.clone()].iter_mut().zip(&x[b]) {
                *o = math::exp::<M>(v - m);
            }
        });
        lanes_sum(out, &[], |v| v)
    }
}

/// The previous row's write-out, done inside this row's exponential sweep out of the row
/// buffer the sweep writes its own values into: at each position the buffer's value (the
/// previous row's) is read and `dst = value · s` written with streaming stores before this
/// row's value takes its place — one buffer for the two rows, so that the sweep's working set
/// is x's row and one buffer (two buffers and x were 48 KiB at 4096 columns, a whole L1).
/// `dst` starts on a cache line and is as long as the row.
struct WriteOut<'a> {
    s: f32,
    dst: &'a mut [f32],
}

impl<'a> WriteOut<'a> {
    /// `dst` given back where it does not start on a cache line (the streaming stores need it)
    /// or its length is not `n`: the caller then writes the row out on its own.
    fn new(s: f32, dst: &'a mut [f32], n: usize) -> Result<Self, &'a mut [f32]> {
        if dst.as_ptr().align_offset(64) == 0 && dst.len() == n {
            Ok(WriteOut { s, dst })
        } else {
            Err(dst)
        }
    }

    /// The elements `from..` written with plain stores out of `buf` (the part the vector loop
    /// left), before the sweep stores its own values there.
    ///
    /// # Safety
    /// `buf` points to as many readable values as `dst` holds.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tail(&mut self, buf: *const f32, from: usize) {
        for (j, d) in self.dst.iter_mut().enumerate().skip(from) {
            // SAFETY: j < dst.len(), which the caller's contract bounds buf by.
            *d = unsafe { *buf.add(j) } * self.s;
        }
    }
}

/// [`exp_sub_sum_row_pf`] on AVX-512 with [`math::exp_v`] (10 vector operations an exponential
/// where the auto-vectorized scalar one takes 18): the row's exponentials are the fused
/// softmax's arithmetic, and while they run the next row's lines come from memory and, with
/// `prev`, the previous row goes out of `out` ([`WriteOut`]). Four sums of 16 lanes; the tail
/// through masked loads and stores.
///
/// # Safety
/// The CPU supports avx512f; `x` and `out` point to `n` values each (the same ones for the
/// exponentials in place: each vector is read before it is written); `prev`, when given, is `n`
/// long and apart from them, and `out` holds the values it writes out.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_sub_sum_avx512(
    (x, out, n): (*const f32, *mut f32, usize),
    m: f32,
    next: &[f32],
    mut prev: Option<WriteOut>,
) -> f32 {
    use std::arch::x86_64::*;
    let mv = _mm512_set1_ps(m);
    let sv = _mm512_set1_ps(prev.as_ref().map_or(1.0, |w| w.s));
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 64 <= n {
        if !next.is_empty() {
            prefetch_l2(next.as_ptr().wrapping_add(i));
            prefetch_l2(next.as_ptr().wrapping_add(i + 16));
            prefetch_l2(next.as_ptr().wrapping_add(i + 32));
            prefetch_l2(next.as_ptr().wrapping_add(i + 48));
        }
        // Four vectors' exponentials step by step, side by side (math::exp_core_avx512_n).
        let mut d = [_mm512_setzero_ps(); 4];
        for (h, dh) in d.iter_mut().enumerate() {
            // SAFETY: i + 64 <= n bounds x at i + 16·h .. + 16.
            *dh = _mm512_sub_ps(unsafe { _mm512_loadu_ps(x.add(i + 16 * h)) }, mv);
        }
        let e = math::exp_v_n(d);
        if let Some(w) = prev.as_mut() {
            for h in 0..4 {
                // SAFETY: prev is as long as the row (the caller's contract), so i + 64 <= n
                // bounds it and out; dst starts on a cache line (WriteOut::new) and i is a
                // multiple of 64 elements, so dst + i + 16·h is aligned as the streaming store
                // needs. The previous row's value is read before this row's is stored below.
                unsafe {
                    let v = _mm512_mul_ps(_mm512_loadu_ps(out.add(i + 16 * h)), sv);
                    _mm512_stream_ps(w.dst.as_mut_ptr().add(i + 16 * h), v);
                }
            }
        }
        for (h, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 64 <= n bounds out at i + 16·h .. + 16.
            unsafe { _mm512_storeu_ps(out.add(i + 16 * h), e[h]) };
            *a = _mm512_add_ps(*a, e[h]);
        }
        i += 64;
    }
    if let Some(w) = prev.as_mut() {
        // SAFETY: out holds n values, as many as prev (the caller's contract).
        unsafe { w.tail(out, i) };
    }
    while i < n {
        let k = (n - i).min(16);
        let mask: __mmask16 = ((1u32 << k) - 1) as u16;
        // SAFETY: the masked lanes are i .. i + k <= n of x and out; the others are not touched.
        unsafe {
            let v = math::exp_v(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x.add(i)), mv));
            _mm512_mask_storeu_ps(out.add(i), mask, v);
            acc[0] = _mm512_add_ps(acc[0], _mm512_maskz_mov_ps(mask, v));
        }
        i += k;
    }
    let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(s)
}

/// [`exp_sub_sum_avx512`] on AVX2+FMA with [`math::exp_v_avx2_n`] (11 operations an
/// exponential, the auto-vectorized scalar one 18), four sums of 8 lanes; the tail (under 32
/// elements) through the scalar [`math::exp`]. For `x ≤ m` (no exponential above 1).
///
/// # Safety
/// As [`exp_sub_sum_avx512`]'s, with avx2 and fma for avx512f.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sub_sum_avx2<M: math::MulAdd>(
    (x, out, n): (*const f32, *mut f32, usize),
    m: f32,
    next: &[f32],
    mut prev: Option<WriteOut>,
) -> f32 {
    use std::arch::x86_64::*;
    let mv = _mm256_set1_ps(m);
    let sv = _mm256_set1_ps(prev.as_ref().map_or(1.0, |w| w.s));
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        if !next.is_empty() {
            prefetch_l2(next.as_ptr().wrapping_add(i));
            prefetch_l2(next.as_ptr().wrapping_add(i + 16));
        }
        // Four vectors' exponentials step by step, side by side (math::reduce_poly_avx2_n).
        let mut d = [_mm256_setzero_ps(); 4];
        for (h, dh) in d.iter_mut().enumerate() {
            // SAFETY: i + 32 <= n bounds x at i + 8·h .. + 8.
            *dh = _mm256_sub_ps(unsafe { _mm256_loadu_ps(x.add(i + 8 * h)) }, mv);
        }
        let e = math::exp_v_avx2_n::<M, 4>(d);
        if let Some(w) = prev.as_mut() {
            for h in 0..4 {
                // SAFETY: prev is as long as the row (the caller's contract), so i + 32 <= n
                // bounds it and out; dst starts on a cache line (WriteOut::new) and i is a
                // multiple of 32 elements, so dst + i + 8·h is aligned to the 32 bytes the
                // store needs. The previous row's value is read before this row's is stored.
                unsafe {
                    let v = _mm256_mul_ps(_mm256_loadu_ps(out.add(i + 8 * h)), sv);
                    _mm256_stream_ps(w.dst.as_mut_ptr().add(i + 8 * h), v);
                }
            }
        }
        for (h, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 32 <= n bounds out at i + 8·h .. + 8.
            unsafe { _mm256_storeu_ps(out.add(i + 8 * h), e[h]) };
            *a = _mm256_add_ps(*a, e[h]);
        }
        i += 32;
    }
    if let Some(w) = prev.as_mut() {
        // SAFETY: out holds n values, as many as prev (the caller's contract).
        unsafe { w.tail(out, i) };
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0f32; 8];
    // SAFETY: 8 writable floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
    let mut sum: f32 = lanes.iter().sum();
    for j in i..n {
        // SAFETY: j < n bounds x and out.
        unsafe {
            let e = math::exp::<M>(*x.add(j) - m);
            *out.add(j) = e;
            sum += e;
        }
    }
    sum
}

/// `out = exp(x − m)` for `x ≤ m`, returning Σ out, prefetching `next` meanwhile, at level `l`
/// (below AVX2, the multiversioned loop at the process's level).
pub(super) fn exp_sub_sum_pf_at(
    l: SimdLevel,
    x: &[f32],
    m: f32,
    out: &mut [f32],
    next: &[f32],
) -> f32 {
    exp_sub_sum_write_at(l, x, m, out, next, None)
}

/// The hand-vectorized exponential sweep of level `l` (AVX-512, AVX2 with or without FMA), or
/// None below them (`prev` then left for the caller).
///
/// # Safety
/// The CPU supports `l`; as [`exp_sub_sum_avx512`]'s contract for the pointers and `prev`.
unsafe fn exp_sub_sum_vector(
    l: SimdLevel,
    xon: (*const f32, *mut f32, usize),
    m: f32,
    next: &[f32],
    prev: &mut Option<WriteOut>,
) -> Option<f32> {
    // SAFETY (each arm): the caller's contract.
    match l {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => Some(unsafe { exp_sub_sum_avx512(xon, m, next, prev.take()) }),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2Fma => {
            Some(unsafe { exp_sub_sum_avx2::<math::Fused>(xon, m, next, prev.take()) })
        }
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2NoFma => {
            Some(unsafe { exp_sub_sum_avx2::<math::Separate>(xon, m, next, prev.take()) })
        }
        _ => {
            let _ = (xon, m, next, prev);
            None
        }
    }
}

/// `x = exp(x − m)` for `x ≤ m` in place, returning Σ x, at level `l`: the softmax rows'
/// exponential sweep (AVX-512's 11 operations an exponential, AVX2's 12) where attention
/// turns a tile's scores into probabilities; below AVX2 the multiversioned loop.
pub(super) fn exp_sub_sum_in_place_at(l: SimdLevel, x: &mut [f32], m: f32) -> f32 {
    assert!(supports(l), "this CPU lacks {}", l.name());
    let n = x.len();
    let p = x.as_mut_ptr();
    // SAFETY: supports(l), asserted above; x and out are the same n values, each vector read
    // before it is written (the kernels' contract allows it); no row written out.
    if let Some(sum) = unsafe { exp_sub_sum_vector(l, (p, p, n), m, &[], &mut None) } {
        return sum;
    }
    exp_sub_sum_in_place(x, m)
}

/// [`exp_sub_sum_pf_at`] that also writes `prev` out of `out` (the previous row's values,
/// [`WriteOut`]; in the same sweep on AVX-512 and AVX2, before the exponentials on the
/// portable path).
fn exp_sub_sum_write_at(
    l: SimdLevel,
    x: &[f32],
    m: f32,
    out: &mut [f32],
    next: &[f32],
    mut prev: Option<WriteOut>,
) -> f32 {
    assert!(supports(l), "this CPU lacks {}", l.name());
    let n = x.len().min(out.len());
    assert!(
        prev.as_ref().is_none_or(|w| w.dst.len() == n),
        "the row written out is as long as this one"
    );
    // SAFETY: supports(l) and prev's length, asserted above; x and out are n long (distinct
    // borrows: apart).
    if let Some(sum) =
        unsafe { exp_sub_sum_vector(l, (x.as_ptr(), out.as_mut_ptr(), n), m, next, &mut prev) }
    {
        return sum;
    }
    if let Some(w) = prev {
        stream_scale(w.dst, out, w.s);
    }
    exp_sub_sum_row_pf(x, m, out, next)
}

/// The fused softmax with streaming stores, rows in pairs: row j's exponential sweep (into the
/// row buffer) also writes row j − 1 out of it, scaled by its 1/Σ, each value before row j's
/// takes its place ([`WriteOut`]), and asks for row j + 1 — the write stream runs beside the
/// arithmetic instead of after it, where memory would otherwise idle while the exponentials
/// run and the arithmetic while the row is written.
/// Tasks of `65536 / cols` rows (the last row of each written on its own); a row whose output
/// does not start on a cache line is written on its own too. At level `l` (the tests run every
/// level).
fn softmax_stream_at(l: SimdLevel, x: &[f32], out: &mut [f32], cols: usize) {
    if cols == 0 {
        return;
    }
    let rows_per_task = (65_536 / cols).max(1);
    let next = |r: usize| x.get((r + 1) * cols..(r + 2) * cols).unwrap_or(&[]);
    out.par_chunks_mut(cols * rows_per_task)
        .enumerate()
        .for_each(|(ci, block)| {
            let mut buf = vec![0f32; cols];
            // The row computed last: its output and 1/Σ; its values are in buf.
            let mut pending: Option<(&mut [f32], f32)> = None;
            for (j, o) in block.chunks_mut(cols).enumerate() {
                let r = ci * rows_per_task + j;
                let xr = &x[r * cols..(r + 1) * cols];
                let m = max_row(xr);
                let prev = pending
                    .take()
                    .and_then(|(po, ps)| match WriteOut::new(ps, po, cols) {
                        Ok(w) => Some(w),
                        Err(po) => {
                            stream_scale(po, &buf, ps);
                            None
                        }
                    });
                let s = exp_sub_sum_write_at(l, xr, m, &mut buf, next(r), prev);
                pending = Some((o, 1.0 / s));
            }
            if let Some((po, ps)) = pending {
                stream_scale(po, &buf, ps);
            }
            store_fence();
        });
}

/// The fused LayerNorm with streaming stores: each row's statistics in one sweep
/// ([`ln_stats`]), then the row normalised straight out of L1 with streaming stores, asking for
/// the next row during both sweeps ([`prefetch_next_lines`]) — RMSNorm's shape. At level `l`
/// (the tests run every level).
fn layernorm_stream_at(
    l: SimdLevel,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    out: &mut [f32],
    cols: usize,
    eps: f32,
) {
    if cols == 0 {
        return;
    }
    let next = |r: usize| x.get((r + 1) * cols..(r + 2) * cols).unwrap_or(&[]);
    let l1d_bytes = crate::device::l1d_cache_bytes().unwrap_or(32 << 10);
    let keep: [&[f32]; 2] = if keeps_weights(cols, l1d_bytes) {
        [w, b]
    } else {
        [&[], &[]]
    };
    row_pass_direct(out, cols, |r, o| {
        let xr = &x[r * cols..(r + 1) * cols];
        stream_norm_apply_at(
            l,
            o,
            xr,
            ln_stats(xr, eps, keep, next(r)),
            w,
            b,
            [next(r), &[]],
        );
    });
}

/// Whether LayerNorm's statistics sweep also reads w's and b's lines ([`ln_stats`]'s `keep`):
/// where a row, w and b fit a core's L1 data cache together (`l1d_bytes`, read from the
/// machine). Where they do not — 4096 columns against Zen 4's 32 KiB — the lines it reads push
/// out the row's own, which the apply sweep then fetches from L2 again: there the fused kernel
/// took a fifth longer with them than without (docs/performance.md).
fn keeps_weights(cols: usize, l1d_bytes: u64) -> bool {
    3 * (cols as u64) * 4 <= l1d_bytes
}

/// One parallel pass producing `out` row by row: `f(row, out_row)`. With `stream`, each row is
/// built in a buffer and written with streaming stores.
fn row_pass(
    out: &mut [f32],
    cols: usize,
    stream: bool,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    row_pass_scaled(out, cols, stream, |r, o| {
        f(r, o);
        1.0
    })
}

/// [`row_pass`] where `f` returns a factor for the whole row, applied as the row is written
/// (softmax's 1/Σ: one sweep fewer than scaling the row and then copying it out).
fn row_pass_scaled(
    out: &mut [f32],
    cols: usize,
    stream: bool,
    f: impl Fn(usize, &mut [f32]) -> f32 + Sync + Send,
) {
    let buffer = || if stream { vec![0f32; cols] } else { Vec::new() };
    row_tasks(out, cols, buffer, |buf, r, o| {
        if stream {
            let s = f(r, buf);
            stream_scale(o, buf, s);
        } else {
            let s = f(r, o);
            if s != 1.0 {
                scale_in_place(o, s);
            }
        }
    });
}

/// One parallel pass where `f(row, out_row)` writes the row's final values itself (with
/// streaming stores, [`stream_norm_apply`]).
fn row_pass_direct(out: &mut [f32], cols: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    row_tasks(out, cols, || (), |_, r, o| f(r, o));
}

/// The rows of `out` in parallel tasks of a few rows each: `f(state, row, out_row)`, with one
/// `init()` state per task (a row buffer); each task ends with a store fence.
fn row_tasks<S>(
    out: &mut [f32],
    cols: usize,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize, &mut [f32]) + Sync + Send,
) {
    let rows_per_task = (16_384 / cols).max(1);
    out.par_chunks_mut(cols * rows_per_task)
        .enumerate()
        .for_each(|(ci, block)| {
            let mut state = init();
            for (j, o) in block.chunks_mut(cols).enumerate() {
                f(&mut state, ci * rows_per_task + j, o);
            }
            store_fence();
        });
}

/// One parallel pass producing a per-row vector: `v[row] = f(row)`.
fn row_stat(v: &mut [f32], f: impl Fn(usize) -> f32 + Sync + Send) {
    v.par_iter_mut()
        .enumerate()
        .with_min_len(64)
        .for_each(|(r, s)| *s = f(r));
}

pub struct RowKernels {
    kind: WorkloadKind,
    r: RowOp,
    inputs: Arc<Tensors>,
    stream: bool,
    /// Full-size intermediates of the unfused variant ([`full_intermediates`] of them).
    t1: LineVec,
    t2: LineVec,
    /// Per-row intermediates of the unfused variant.
    v1: Vec<f32>,
    v2: Vec<f32>,
    v3: Vec<f32>,
}

impl RowKernels {
    pub fn new(kind: WorkloadKind, r: RowOp, inputs: Arc<Tensors>, stream: bool) -> Self {
        let (n, rows) = (r.elements() as usize, r.rows as usize);
        let full = |used: bool| LineVec::zeroed(if used { n } else { 0 });
        RowKernels {
            inputs,
            t1: full(true),
            t2: full(full_intermediates(kind) == 2),
            v1: vec![0f32; rows],
            v2: vec![0f32; rows],
            v3: vec![0f32; rows],
            kind,
            r,
            stream,
        }
    }

    fn unfused(&mut self, out: &mut [f32]) {
        let c = self.r.cols as usize;
        let (inv_c, eps, stream) = (1.0 / c as f32, self.r.eps as f32, self.stream);
        let t = &self.inputs;
        let (x, w, b) = (t.get("x"), t.get("weight"), t.get("bias"));
        let row = |r: usize| r * c..(r + 1) * c;
        match self.kind {
            WorkloadKind::Rmsnorm => {
                row_pass(&mut self.t1, c, stream, |r, o| square_row(&x[row(r)], o));
                let sq = &self.t1;
                row_stat(&mut self.v1, |r| sum_row(&sq[row(r)]) * inv_c);
                let ms = &self.v1;
                row_stat(&mut self.v2, |r| 1.0 / (ms[r] + eps).sqrt());
                let rs = &self.v2;
                // The squares are spent: the normalized rows take their buffer
                // (full_intermediates).
                row_pass(&mut self.t1, c, stream, |r, o| {
                    scale_row(&x[row(r)], rs[r], o)
                });
                let normed = &self.t1;
                row_pass(out, c, stream, |r, o| mul_row(&normed[row(r)], w, o));
            }
            WorkloadKind::Layernorm => {
                row_stat(&mut self.v1, |r| sum_row(&x[row(r)]) * inv_c);
                let mean = &self.v1;
                row_pass(&mut self.t1, c, stream, |r, o| {
                    sub_row(&x[row(r)], mean[r], o)
                });
                let centered = &self.t1;
                row_stat(&mut self.v2, |r| sum_sq_row(&centered[row(r)], &[]) * inv_c);
                let var = &self.v2;
                row_stat(&mut self.v3, |r| 1.0 / (var[r] + eps).sqrt());
                let rstd = &self.v3;
                row_pass(&mut self.t2, c, stream, |r, o| {
                    scale_row(&centered[row(r)], rstd[r], o)
                });
                let normed = &self.t2;
                row_pass(out, c, stream, |r, o| affine_row(&normed[row(r)], w, b, o));
            }
            _ => {
                row_stat(&mut self.v1, |r| max_row(&x[row(r)]));
                let m = &self.v1;
                row_pass(&mut self.t1, c, stream, |r, o| {
                    exp_sub_row(&x[row(r)], m[r], o)
                });
                let e = &self.t1;
                row_stat(&mut self.v2, |r| sum_row(&e[row(r)]));
                let s = &self.v2;
                row_pass(out, c, stream, |r, o| scale_row(&e[row(r)], 1.0 / s[r], o));
            }
        }
    }

    fn fused(&self, out: &mut [f32]) {
        let c = self.r.cols as usize;
        let (inv_c, eps) = (1.0 / c as f32, self.r.eps as f32);
        let t = &self.inputs;
        let (x, w, b) = (t.get("x"), t.get("weight"), t.get("bias"));
        // The next row's input (empty after the last), prefetched during this row's last sweep.
        let next = |r: usize| x.get((r + 1) * c..(r + 2) * c).unwrap_or(&[]);
        match self.kind {
            // Large outputs: the row normalised straight out with streaming stores, one sweep
            // over the L1-resident row after its statistics (not into a buffer and then out);
            // both sweeps ask for the next row's lines.
            WorkloadKind::Rmsnorm if self.stream => row_pass_direct(out, c, |r, o| {
                let xr = &x[r * c..(r + 1) * c];
                let rs = 1.0 / (sum_sq_row(xr, next(r)) * inv_c + eps).sqrt();
                stream_norm_apply(o, xr, 0.0, rs, w, &[], [next(r), &[]]);
            }),
            WorkloadKind::Layernorm if self.stream => {
                layernorm_stream_at(level(), x, w, b, out, c, eps)
            }
            WorkloadKind::Rmsnorm => row_pass(out, c, self.stream, |r, o| {
                let xr = &x[r * c..(r + 1) * c];
                let rs = 1.0 / (sum_sq_row(xr, &[]) * inv_c + eps).sqrt();
                rms_apply_row_pf(xr, rs, w, o, next(r));
            }),
            WorkloadKind::Layernorm => row_pass(out, c, self.stream, |r, o| {
                let xr = &x[r * c..(r + 1) * c];
                let (mean, rs) = ln_stats(xr, eps, [&[], &[]], &[]);
                ln_apply_row_pf(xr, mean, rs, w, b, o, next(r));
            }),
            _ if self.stream => softmax_stream_at(level(), x, out, c),
            _ => row_pass_scaled(out, c, self.stream, |r, o| {
                let xr = &x[r * c..(r + 1) * c];
                1.0 / exp_sub_sum_pf_at(level(), xr, max_row(xr), o, next(r))
            }),
        }
    }
}

impl Kernels for RowKernels {
    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        if variant == Variant::Unfused {
            self.unfused(out)
        } else {
            self.fused(out)
        }
    }
    fn buffers(&self) -> Vec<&[f32]> {
        vec![&self.t1, &self.t2, &self.v1, &self.v2, &self.v3]
    }
}

/// How many full-size intermediates the unfused variant holds at once. A buffer whose values
/// are spent is written again, as an eager framework's allocator hands a freed tensor's memory
/// to the next (RMSNorm's squares, summed, take its normalized rows): the same bytes move
/// through memory, and a 256 MiB case faults in one tensor fewer. LayerNorm's centered rows
/// are read while its normalized rows are written, so it holds two.
fn full_intermediates(kind: WorkloadKind) -> u64 {
    match kind {
        WorkloadKind::Layernorm => 2,
        _ => 1,
    }
}

/// Host bytes of the unfused variant's intermediates: its full-size tensors and three per-row
/// vectors.
fn row_scratch_bytes(kind: WorkloadKind, r: &RowOp) -> u64 {
    full_intermediates(kind) * r.elements() * 4 + 3 * r.rows * 4
}

/// What the fused softmax issues per vector at `l` (vector arithmetic instructions, FLOPs per
/// lane: an FMA 2, any other 1), from its three sweeps: the maximum (`vmaxps`: 1 / 1), the
/// exponential sweep (x − m, the clamp, the exponential, the running sum: AVX-512 `exp_v`
/// 12 / 19, AVX2 `exp_v_avx2_n` 13 / 20) and the scaling (1 / 1); `None` on the scalar path.
/// Softmax's ledger counts 5 FLOPs an element.
fn softmax_per_vector(l: SimdLevel) -> Option<(u64, u64)> {
    match l {
        SimdLevel::Avx512 => Some((14, 21)),
        SimdLevel::Avx2Fma => Some((15, 22)),
        // Without FMA the exponential keeps the two-step reduction (`reduce_poly_avx2_n`): one
        // operation more, and its eight FMAs each a multiply and an add.
        SimdLevel::Avx2NoFma => Some((24, 24)),
        SimdLevel::Scalar => None,
    }
}

/// The fused softmax's instruction stream (the unfused passes run the portable loops, whose
/// counts are the compiler's).
fn row_executed(kind: WorkloadKind, r: &RowOp, v: Variant) -> Option<crate::ledger::Executed> {
    if kind != WorkloadKind::Softmax || v != Variant::Fused {
        return None;
    }
    let l = level();
    let (instructions, flops) = softmax_per_vector(l)?;
    let lanes = l.f32_lanes() as u64;
    let vectors = r.rows.saturating_mul(r.cols.div_ceil(lanes));
    Some(crate::ledger::Executed::of_vectors(
        l.name(),
        lanes,
        vectors,
        (instructions, flops),
    ))
}

/// The fused softmax's row arithmetic alone: every task on its own row of up to 2048
/// elements in L1 (maximum, exponential sweep, scaling into a second L1 buffer), the fastest
/// of 9 timings of ~4 M elements a thread, scaled to the workload's elements.
fn row_arithmetic_secs(kind: WorkloadKind, r: &RowOp) -> Option<f64> {
    row_executed(kind, r, Variant::Fused)?;
    let n = (r.cols as usize).min(2048);
    let reps = ((4 << 20) / n / super::ARITHMETIC_TASKS).max(1);
    let x: Vec<f32> = (0..n).map(|i| i as f32 / n as f32 * 8.0 - 4.0).collect();
    let per_element = super::arithmetic_secs_per_element(n * reps, || {
        let (mut e, mut o) = (vec![0f32; n], vec![0f32; n]);
        for _ in 0..reps {
            let xr = std::hint::black_box(&x[..]);
            let s = exp_sub_sum_pf_at(level(), xr, max_row(xr), &mut e, &[]);
            scale_row(&e, 1.0 / s, &mut o);
            std::hint::black_box(&mut o);
        }
    });
    Some(r.elements() as f64 * per_element)
}

macro_rules! row_kernels {
    ($($ty:ident => $kind:ident),*) => {$(
        impl CpuKernels for $ty {
            fn scratch_bytes(&self) -> u64 {
                row_scratch_bytes(WorkloadKind::$kind, &self.0)
            }
            fn executed(&self, variant: Variant) -> Option<crate::ledger::Executed> {
                row_executed(WorkloadKind::$kind, &self.0, variant)
            }
            fn arithmetic_secs(&self) -> Option<f64> {
                row_arithmetic_secs(WorkloadKind::$kind, &self.0)
            }
            fn kernels(&self, inputs: Arc<Tensors>, cfg: &CaseConfig) -> Result<Box<dyn Kernels>> {
                Ok(Box::new(RowKernels::new(WorkloadKind::$kind, self.0.clone(), inputs, cfg.stream)))
            }
        }
    )*};
}
row_kernels!(Rmsnorm => Rmsnorm, Layernorm => Layernorm, Softmax => Softmax);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{DType, Workload};

    /// LayerNorm reads its weight and bias into L1 during the statistics sweep only where the
    /// row and they fit there together: 4096 columns on a 48 KiB L1, not on a 32 KiB one.
    #[test]
    fn layernorm_keeps_its_weights_in_l1_only_where_the_row_and_they_fit() {
        assert!(keeps_weights(4096, 48 << 10));
        assert!(!keeps_weights(4096, 32 << 10));
        assert!(keeps_weights(2048, 32 << 10));
        assert!(!keeps_weights(8192, 48 << 10));
    }

    /// The fused softmax's exponential sweep at every level this CPU has: every length (tails
    /// included), arguments from 0 down past f32's normal range, NaN passed through, the sum.
    #[test]
    fn exp_sub_sum_matches_f64_at_every_level() {
        for l in SimdLevel::ALL {
            if !supports(l) {
                continue;
            }
            for n in [0usize, 1, 17, 31, 32, 63, 64, 100, 4099] {
                let m = 3.5f32;
                let x: Vec<f32> = (0..n)
                    .map(|i| m - (i as f32 * 0.731) % 40.0 - if i % 13 == 5 { 60.0 } else { 0.0 })
                    .collect();
                let mut out = vec![f32::NAN; n + 3];
                let sum = exp_sub_sum_pf_at(l, &x, m, &mut out[..n], &x);
                let mut want_sum = 0f64;
                for i in 0..n {
                    let e = ((x[i] - m) as f64).exp();
                    want_sum += e;
                    let err = (out[i] as f64 - e).abs();
                    // The base-2 reduction's f = (x − m)·log2 e − n takes log2 e rounded to f32:
                    // 1.34e-8·|x − m| more relative error, beside the polynomial's.
                    let arg = ((x[i] - m) as f64).abs();
                    assert!(
                        err <= 1e-37 + (3e-7 + 1.4e-8 * arg) * e,
                        "{l:?} n={n} [{i}] exp({}) = {} vs {e}",
                        x[i] - m,
                        out[i]
                    );
                }
                assert!(
                    out[n..].iter().all(|v| v.is_nan()),
                    "{l:?} wrote past the row"
                );
                assert!(
                    (sum as f64 - want_sum).abs() <= 1e-5 * want_sum.max(1e-30),
                    "{l:?} n={n} Σ {sum} vs {want_sum}"
                );
                // In place (attention's tiles): the same values and sum, bit for bit.
                let mut inplace = x.clone();
                let sum_in_place = exp_sub_sum_in_place_at(l, &mut inplace, m);
                assert_eq!(
                    sum_in_place.to_bits(),
                    sum.to_bits(),
                    "{l:?} n={n} Σ in place"
                );
                assert!(
                    inplace
                        .iter()
                        .zip(&out)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{l:?} n={n}: in place differs"
                );
            }
            let mut out = [0f32; 40];
            let mut x = [-1f32; 40];
            x[3] = f32::NAN;
            x[35] = -200.0;
            x[36] = f32::NEG_INFINITY;
            let sum = exp_sub_sum_pf_at(l, &x, 0.0, &mut out, &[]);
            assert!(
                out[3].is_nan() && sum.is_nan(),
                "{l:?}: NaN not passed through"
            );
            assert_eq!(out[35], 0.0, "{l:?}: e^-200");
            assert_eq!(out[36], 0.0, "{l:?}: e^-inf (a masked score)");
        }
    }

    /// The paired kernels' test shapes: one-row and many-row tasks (65536 / cols rows), rows
    /// that start on a cache line and rows that do not, tails of every length.
    const PAIRED_SHAPES: [(usize, usize); 8] = [
        (1, 64),
        (3, 16),
        (40, 4096),
        (70, 1024),
        (5, 1000),
        (4, 4099),
        (300, 7),
        (2, 70_000),
    ];

    fn paired_input(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
            .collect()
    }

    /// `run` writes `want` bit for bit into an output at offset 0 of a line-aligned buffer and
    /// 3 elements in (no row on a line), and nothing outside it.
    fn check_paired(
        l: SimdLevel,
        (rows, cols): (usize, usize),
        want: &[f32],
        run: impl Fn(&mut [f32]),
    ) {
        let n = want.len();
        for offset in [0usize, 3] {
            let mut out = LineVec::zeroed(n + offset + 5);
            out.fill(f32::NAN);
            run(&mut out[offset..offset + n]);
            store_fence();
            let got = &out[offset..offset + n];
            for i in 0..n {
                assert_eq!(
                    got[i].to_bits(),
                    want[i].to_bits(),
                    "{l:?} {rows}x{cols} offset {offset} [{i}]: {} vs {}",
                    got[i],
                    want[i]
                );
            }
            let mut outside = out[..offset].iter().chain(&out[offset + n..]);
            assert!(
                outside.all(|v| v.is_nan()),
                "{l:?} {rows}x{cols}: wrote outside"
            );
        }
    }

    /// The pipelined softmax (each row written out inside the next row's exponential sweep)
    /// at every level this CPU has, against the rows one at a time — max, exponentials, then
    /// the row scaled by 1/Σ — bit for bit: rows that start on a cache line (the pipelined
    /// path) and rows that do not (written on their own), tasks of one row and of many, the
    /// last row of a task, tails of every length; nothing written outside the output.
    #[test]
    fn softmax_pipelined_matches_rows_one_at_a_time_at_every_level() {
        for l in SimdLevel::ALL {
            if !supports(l) {
                continue;
            }
            for (rows, cols) in PAIRED_SHAPES {
                let n = rows * cols;
                let x = paired_input(n);
                let mut want = vec![0f32; n];
                let mut buf = vec![0f32; cols];
                for (xr, wr) in x.chunks(cols).zip(want.chunks_mut(cols)) {
                    let s = 1.0 / exp_sub_sum_pf_at(l, xr, max_row(xr), &mut buf, &[]);
                    for (w, &e) in wr.iter_mut().zip(&buf) {
                        *w = e * s;
                    }
                }
                check_paired(l, (rows, cols), &want, |o| {
                    softmax_stream_at(l, &x, o, cols)
                });
            }
        }
    }

    /// The streamed LayerNorm at every level this CPU has, against the rows one at a time —
    /// [`ln_stats`], then the plain loop's (x − mean) · rstd · w + b — bit for bit, over the
    /// shapes and alignments of the softmax test above; nothing written outside the output.
    #[test]
    fn layernorm_streamed_matches_rows_one_at_a_time_at_every_level() {
        let eps = 1e-5f32;
        for l in SimdLevel::ALL {
            if !supports(l) {
                continue;
            }
            for (rows, cols) in PAIRED_SHAPES {
                let n = rows * cols;
                let x = paired_input(n);
                let w: Vec<f32> = (0..cols).map(|i| 0.5 + (i % 17) as f32 / 16.0).collect();
                let b: Vec<f32> = (0..cols).map(|i| (i % 5) as f32 * 0.25 - 0.5).collect();
                let mut want = vec![0f32; n];
                for (xr, wr) in x.chunks(cols).zip(want.chunks_mut(cols)) {
                    let (mean, rs) = ln_stats(xr, eps, [&[], &[]], &[]);
                    for i in 0..cols {
                        wr[i] = (xr[i] - mean) * rs * w[i] + b[i];
                    }
                }
                check_paired(l, (rows, cols), &want, |o| {
                    layernorm_stream_at(l, &x, &w, &b, o, cols, eps)
                });
            }
        }
    }

    #[test]
    fn asking_for_the_next_row_leaves_the_statistics_bit_for_bit() {
        let x: Vec<f32> = (0..4099)
            .map(|i| (i as f32 * 0.37).sin() * 3.0 + 1.0)
            .collect();
        let next: Vec<f32> = (0..4099).map(|i| i as f32).collect();
        for n in [0, 1, 15, 16, 17, 63, 64, 65, 1000, 4096, 4099] {
            let xr = &x[..n];
            // A next row as long, longer, shorter (not asked for) and empty (the last row).
            for nx in [&next[..n], &next[..], &next[..n / 2], &[][..]] {
                assert_eq!(
                    sum_sq_row(xr, nx).to_bits(),
                    sum_sq_row(xr, &[]).to_bits(),
                    "{n}"
                );
                let with = ln_stats(xr, 1e-5, [&[], &[]], nx);
                let without = ln_stats(xr, 1e-5, [&[], &[]], &[]);
                assert_eq!(
                    (with.0.to_bits(), with.1.to_bits()),
                    (without.0.to_bits(), without.1.to_bits()),
                    "{n}"
                );
            }
        }
    }

    /// The one-sweep statistics against the two-sweep ones in f64, on the rows that break a
    /// naive one-sweep variance: a large offset with small spread, a massive value among the
    /// first (the shift's sample), a massive value elsewhere, a constant row; NaN propagates.
    #[test]
    fn ln_stats_hold_on_offsets_and_outliers() {
        let noise = |i: usize| ((i as f32 * 0.618_034).fract() - 0.5) * 2.0;
        let rows: Vec<(&str, Vec<f32>)> = vec![
            (
                "offset 1e4, spread 1",
                (0..4096).map(|i| 1.0e4 + noise(i)).collect(),
            ),
            (
                "offset -3e3, spread 0.01",
                (0..1000).map(|i| -3.0e3 + 0.01 * noise(i)).collect(),
            ),
            (
                "massive first value",
                (0..4096)
                    .map(|i| if i == 0 { 3.0e4 } else { noise(i) })
                    .collect(),
            ),
            (
                "massive values among the first",
                (0..4096)
                    .map(|i| if i < 8 { 1.0e4 } else { noise(i) })
                    .collect(),
            ),
            (
                "massive last value",
                (0..4099)
                    .map(|i| if i == 4098 { 3.0e4 } else { noise(i) })
                    .collect(),
            ),
            ("short row", vec![1.0, 2.0, 4.0]),
        ];
        for (what, x) in &rows {
            let n = x.len() as f64;
            let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
            let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
            let (m, rs) = ln_stats(x, 0.0, [&[], &[]], &[]);
            let got_var = 1.0 / (rs as f64 * rs as f64);
            let sd = var.sqrt();
            assert!(
                (m as f64 - mean).abs() <= 1e-5 * (sd + mean.abs()),
                "{what}: mean {m} vs {mean}"
            );
            assert!(
                (got_var - var).abs() <= 1e-4 * var,
                "{what}: variance {got_var} vs {var}"
            );
        }
        let (_, rs) = ln_stats(&[3.5; 300], 1e-5, [&[], &[]], &[]);
        assert_eq!(rs, 1.0 / 1e-5f32.sqrt(), "a constant row's variance is 0");
        let mut x = vec![1.0f32; 200];
        x[150] = f32::NAN;
        let (m, rs) = ln_stats(&x, 1e-5, [&[], &[]], &[]);
        assert!(m.is_nan() && rs.is_nan());
    }

    #[test]
    fn every_row_kind_matches_f64_reference_both_variants() {
        for kind in [
            WorkloadKind::Rmsnorm,
            WorkloadKind::Layernorm,
            WorkloadKind::Softmax,
        ] {
            for (rows, cols) in [(5, 1000), (3, 64), (2, 4099), (300, 7)] {
                for stream in [false, true] {
                    let r = RowOp {
                        rows,
                        cols,
                        dtype: DType::F32,
                        eps: 1e-5,
                    };
                    let w = match kind {
                        WorkloadKind::Rmsnorm => Workload::Rmsnorm(Rmsnorm(r.clone())),
                        WorkloadKind::Layernorm => Workload::Layernorm(Layernorm(r.clone())),
                        _ => Workload::Softmax(Softmax(r.clone())),
                    };
                    let inputs = Arc::new(w.as_kind().inputs(7));
                    let mut k = RowKernels::new(kind, r, inputs.clone(), stream);
                    let n = (rows * cols) as usize;
                    for v in [Variant::Unfused, Variant::Fused] {
                        let mut out = vec![f32::NAN; n];
                        k.run(v, &mut out);
                        for (i, &o) in out.iter().enumerate() {
                            let e = w.as_kind().reference(&inputs, v, i);
                            assert!(
                                (o as f64 - e).abs() <= 1e-6 + 2e-5 * e.abs(),
                                "{kind:?} {v:?} {rows}x{cols} [{i}] {o} vs {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}
