//! Register-level streaming kernels for AVX-512: an elementwise chain applied to 16-lane
//! vectors that stay in registers from load to store, and the STREAM triad.
//!
//! Why not the L1-tile loop of [`super::elementwise`] on these CPUs: a tile pass per op costs
//! a load and a store per element per op, and — more important on a 2-core VM — the loads of
//! the next tile are issued only when the arithmetic on this one has finished, so memory and
//! arithmetic take turns instead of overlapping. Here each 64-element group is loaded, run
//! through every op and stored (non-temporal when streaming), and every line of every streamed
//! input is prefetched [`PREFETCH_ELEMS`] ahead so that the memory stream continues while GELU's
//! arithmetic runs. Measured on bias+GELU 8192² f32, 2 threads, huge pages (a throwaway
//! microbenchmark, 18 timings per kernel, medians): L1 tiles 14–15 GB/s, registers without
//! prefetch 19–20 GB/s, registers with a prefetch of every line 4 KiB ahead 30.3–30.7 GB/s,
//! against a triad of 36.3 GB/s.
//!
//! Both variants of a chain run through [`chain_segment`] (the unfused one op per pass), so they
//! share arithmetic, stores and prefetching and stay bit-identical; only the fusion differs.

#![cfg(target_arch = "x86_64")]

use super::math::{gate_v, Operand};
use crate::spec::ElemOp;
use std::arch::x86_64::*;

pub use super::simd::PREFETCH_ELEMS;

/// Elements per group: four vectors, so that four independent GELU dependency chains keep
/// both FMA ports busy.
const GROUP: usize = 64;

/// `dst[i] = op_k(… op_1(src[i], operand_1[i]) …, operand_k[i])` for the steps in order. Every
/// operand slice holds at least `dst.len()` elements (`src` too). With `stream`, whole lines of
/// `dst` are written with non-temporal stores (the partial lines at either end with plain
/// ones); call [`super::simd::store_fence`] before another thread reads `dst`.
///
/// An element's result depends only on its inputs, never on where the segment starts or ends:
/// every element goes through the same vector code, tails through masked loads and stores.
pub fn chain_segment(steps: &[(ElemOp, Operand<'_>)], dst: &mut [f32], src: &[f32], stream: bool) {
    let n = dst.len();
    assert!(src.len() >= n, "chain source shorter than its destination");
    for (op, operand) in steps {
        match operand {
            Operand::Bias(b) | Operand::Tensor(b) => {
                assert!(
                    b.len() >= n,
                    "operand of {} shorter than the segment",
                    op.name()
                )
            }
            Operand::None | Operand::Scale(_) => {}
        }
    }
    assert!(
        super::simd::level() == super::simd::SimdLevel::Avx512,
        "chain_segment needs AVX-512"
    );
    // SAFETY: the level check above guarantees avx512f; the asserts above guarantee the
    // slice lengths the kernel relies on.
    unsafe { chain_avx512(steps, dst, src, stream) }
}

/// One op on one vector of lanes `mask` at element `at`.
#[target_feature(enable = "avx512f")]
#[inline]
fn apply(op: ElemOp, operand: &Operand<'_>, at: usize, mask: __mmask16, v: __m512) -> __m512 {
    // SAFETY (loads): callers pass `at` and `mask` such that every enabled lane is inside the
    // operand slice (chain_segment checked its length against the segment's); masked-off
    // lanes are not read.
    match (op, operand) {
        (ElemOp::BiasAdd, Operand::Bias(b)) | (ElemOp::Add, Operand::Tensor(b)) => unsafe {
            _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, b.as_ptr().add(at)))
        },
        (ElemOp::Mul, Operand::Tensor(b)) => unsafe {
            _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, b.as_ptr().add(at)))
        },
        (ElemOp::Scale, Operand::Scale(s)) => _mm512_mul_ps(v, _mm512_set1_ps(*s)),
        // max(0, v) returns its second operand when either is NaN (NaN is kept) and −0 for
        // −0, as the scalar relu does.
        (ElemOp::Relu, _) => _mm512_max_ps(_mm512_setzero_ps(), v),
        (ElemOp::Gelu, _) => gate_v::<true>(v),
        (ElemOp::Silu, _) => gate_v::<false>(v),
        // operand_for() builds the operand from the op, so no other pairing occurs.
        _ => unreachable!("operand does not match op {}", op.name()),
    }
}

/// One op on the four full vectors of the group at element `at`. The match is taken once per
/// group and each arm is written out for the four vectors, so that they stay in registers and
/// the four GELU dependency chains interleave (a loop over `apply` compiled to one gate at a
/// time through the stack: 19–24 GB/s on bias+GELU 8192² against 30 for this form).
#[target_feature(enable = "avx512f")]
#[inline]
fn apply4(op: ElemOp, operand: &Operand<'_>, at: usize, v: [__m512; 4]) -> [__m512; 4] {
    // SAFETY (loads): the caller guarantees at + GROUP <= n, and chain_segment checked every
    // operand slice against n.
    let ld = |b: &[f32], k: usize| unsafe { _mm512_loadu_ps(b.as_ptr().add(at + 16 * k)) };
    match (op, operand) {
        (ElemOp::BiasAdd, Operand::Bias(b)) | (ElemOp::Add, Operand::Tensor(b)) => [
            _mm512_add_ps(v[0], ld(b, 0)),
            _mm512_add_ps(v[1], ld(b, 1)),
            _mm512_add_ps(v[2], ld(b, 2)),
            _mm512_add_ps(v[3], ld(b, 3)),
        ],
        (ElemOp::Mul, Operand::Tensor(b)) => [
            _mm512_mul_ps(v[0], ld(b, 0)),
            _mm512_mul_ps(v[1], ld(b, 1)),
            _mm512_mul_ps(v[2], ld(b, 2)),
            _mm512_mul_ps(v[3], ld(b, 3)),
        ],
        (ElemOp::Scale, Operand::Scale(s)) => {
            let s = _mm512_set1_ps(*s);
            v.map(|x| _mm512_mul_ps(x, s))
        }
        (ElemOp::Relu, _) => {
            let z = _mm512_setzero_ps();
            v.map(|x| _mm512_max_ps(z, x))
        }
        (ElemOp::Gelu, _) => [
            gate_v::<true>(v[0]),
            gate_v::<true>(v[1]),
            gate_v::<true>(v[2]),
            gate_v::<true>(v[3]),
        ],
        (ElemOp::Silu, _) => [
            gate_v::<false>(v[0]),
            gate_v::<false>(v[1]),
            gate_v::<false>(v[2]),
            gate_v::<false>(v[3]),
        ],
        _ => unreachable!("operand does not match op {}", op.name()),
    }
}

/// The chain on the lanes `mask` of the vector at element `i` (heads and tails).
#[target_feature(enable = "avx512f")]
#[inline]
fn one_vector(
    steps: &[(ElemOp, Operand<'_>)],
    dst: &mut [f32],
    src: &[f32],
    i: usize,
    mask: __mmask16,
) {
    // SAFETY: the caller enables only lanes inside dst and src (and, by chain_segment's
    // checks, inside every operand).
    unsafe {
        let mut v = _mm512_maskz_loadu_ps(mask, src.as_ptr().add(i));
        for (op, operand) in steps {
            v = apply(*op, operand, i, mask, v);
        }
        _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), mask, v);
    }
}

fn lanes(m: usize) -> __mmask16 {
    if m >= 16 {
        0xFFFF
    } else {
        ((1u32 << m) - 1) as __mmask16
    }
}

/// Prefetches the four lines of a group at element `at` of `t` (which may lie past its end).
#[target_feature(enable = "avx512f")]
#[inline]
fn prefetch_group(t: &[f32], at: usize) {
    let p = t.as_ptr().wrapping_add(at) as *const i8;
    _mm_prefetch::<_MM_HINT_T0>(p);
    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(128));
    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(192));
}

#[target_feature(enable = "avx512f")]
fn chain_avx512(steps: &[(ElemOp, Operand<'_>)], dst: &mut [f32], src: &[f32], stream: bool) {
    let n = dst.len();
    let mut i = 0;
    // Plain stores up to the first line boundary, so the streaming stores write whole lines.
    if stream {
        let head = dst.as_ptr().align_offset(64).min(n);
        while i < head {
            let m = (head - i).min(16);
            one_vector(steps, dst, src, i, lanes(m));
            i += m;
        }
    }
    while i + GROUP <= n {
        // Prefetch every line of each streamed input. Addresses are formed with wrapping
        // arithmetic (past the end they point nowhere; a prefetch never faults).
        prefetch_group(src, i + PREFETCH_ELEMS);
        for (_, operand) in steps {
            if let Operand::Tensor(b) = operand {
                prefetch_group(b, i + PREFETCH_ELEMS);
            }
        }
        // SAFETY: i + GROUP <= n bounds src (and every operand, checked by chain_segment) for
        // the four 16-lane loads.
        let mut v: [__m512; 4] = unsafe {
            let p = src.as_ptr().add(i);
            [
                _mm512_loadu_ps(p),
                _mm512_loadu_ps(p.add(16)),
                _mm512_loadu_ps(p.add(32)),
                _mm512_loadu_ps(p.add(48)),
            ]
        };
        for (op, operand) in steps {
            v = apply4(*op, operand, i, v);
        }
        let q = dst[i..i + GROUP].as_mut_ptr();
        for (k, vk) in v.iter().enumerate() {
            // SAFETY: q + 16k .. q + 16k + 16 lies in dst[i..i + GROUP]. With `stream`, the
            // head loop left i at a line boundary of dst and groups are whole lines, so
            // q + 16k is 64-byte aligned as _mm512_stream_ps requires.
            unsafe {
                if stream {
                    _mm512_stream_ps(q.add(16 * k), *vk);
                } else {
                    _mm512_storeu_ps(q.add(16 * k), *vk);
                }
            }
        }
        i += GROUP;
    }
    while i < n {
        let m = (n - i).min(16);
        one_vector(steps, dst, src, i, lanes(m));
        i += m;
    }
}

/// `a = b + s·c` with non-temporal stores and the inputs prefetched as the chain does: the
/// STREAM triad, written as the best streaming kernel of this module can do it, so that the
/// bandwidth ceiling is what the machine can do rather than what a naive loop does. All three
/// slices have `a.len()` elements or more; `a` should start on a cache line (else its first
/// partial line is written with plain stores).
pub fn triad_stream(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    let n = a.len();
    assert!(
        b.len() >= n && c.len() >= n,
        "triad inputs shorter than the output"
    );
    assert!(
        super::simd::level() == super::simd::SimdLevel::Avx512,
        "triad_stream needs AVX-512"
    );
    // SAFETY: avx512f checked above; lengths asserted above.
    unsafe { triad_avx512(a, b, c, s) }
}

#[target_feature(enable = "avx512f")]
fn triad_avx512(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    let n = a.len();
    let sv = _mm512_set1_ps(s);
    let head = a.as_ptr().align_offset(64).min(n);
    for j in 0..head {
        a[j] = s.mul_add(c[j], b[j]);
    }
    let mut i = head;
    while i + 16 <= n {
        // SAFETY: prefetches never fault (wrapping address arithmetic); i + 16 <= n bounds the
        // loads from b and c (asserted at least n long) and the store into a, which is 64-byte
        // aligned because i started at a line boundary and advances by whole lines.
        unsafe {
            let ahead = i + PREFETCH_ELEMS;
            _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().wrapping_add(ahead) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(c.as_ptr().wrapping_add(ahead) as *const i8);
            let v = _mm512_fmadd_ps(
                sv,
                _mm512_loadu_ps(c.as_ptr().add(i)),
                _mm512_loadu_ps(b.as_ptr().add(i)),
            );
            _mm512_stream_ps(a.as_mut_ptr().add(i), v);
        }
        i += 16;
    }
    for j in i..n {
        a[j] = s.mul_add(c[j], b[j]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::math;
    use crate::backend::cpu::simd::{level, store_fence, LineVec, SimdLevel};

    fn avx512() -> bool {
        level() == SimdLevel::Avx512
    }

    #[test]
    fn triad_matches_the_scalar_fma_at_every_length_and_offset() {
        if !avx512() {
            return;
        }
        let b: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.37).sin()).collect();
        let c: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.11).cos()).collect();
        for (start, len) in [(0, 0), (0, 1), (3, 17), (0, 1024), (5, 2995), (16, 2000)] {
            let mut a = LineVec::filled(3000, f32::NAN);
            triad_stream(
                &mut a[start..start + len],
                &b[start..start + len],
                &c[start..start + len],
                3.0,
            );
            store_fence();
            for i in start..start + len {
                assert_eq!(a[i].to_bits(), 3f32.mul_add(c[i], b[i]).to_bits(), "{i}");
            }
            assert!(a[..start]
                .iter()
                .chain(&a[start + len..])
                .all(|x| x.is_nan()));
        }
    }

    #[test]
    fn relu_in_registers_keeps_nan_and_negative_zero_like_the_scalar_one() {
        if !avx512() {
            return;
        }
        let x = [
            f32::NAN,
            -0.0,
            0.0,
            -1.0,
            2.5,
            f32::NEG_INFINITY,
            f32::INFINITY,
        ];
        for stream in [false, true] {
            let mut y = [7f32; 7];
            chain_segment(&[(ElemOp::Relu, Operand::None)], &mut y, &x, stream);
            store_fence();
            for (a, b) in x.iter().zip(&y) {
                assert_eq!(math::relu(*a).to_bits(), b.to_bits(), "relu({a})");
            }
        }
    }

    #[test]
    fn a_chain_writes_exactly_its_segment() {
        if !avx512() {
            return;
        }
        let x: Vec<f32> = (0..700).map(|i| i as f32 - 350.0).collect();
        for (start, len) in [(0, 64), (1, 63), (13, 200), (16, 640), (7, 1)] {
            let mut y = LineVec::filled(700, f32::NAN);
            chain_segment(
                &[(ElemOp::Scale, Operand::Scale(0.5))],
                &mut y[start..start + len],
                &x[start..start + len],
                true,
            );
            store_fence();
            for i in 0..700 {
                if (start..start + len).contains(&i) {
                    assert_eq!(y[i], x[i] * 0.5);
                } else {
                    assert!(y[i].is_nan(), "element {i} outside the segment was written");
                }
            }
        }
    }
}
