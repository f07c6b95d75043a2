//! Register-level streaming kernels for AVX-512 and AVX2+FMA: an elementwise chain applied to
//! vectors that stay in registers from load to store, and the STREAM triad. Written once over
//! [`Lanes`] (16 lanes under AVX-512, 8 under AVX2) and instantiated per level.
//!
//! Why not the L1-tile loop of [`super::elementwise`] on these CPUs: a tile pass per op costs
//! a load and a store per element per op, and — more important on a 2-core VM — the loads of
//! the next tile are issued only when the arithmetic on this one has finished, so memory and
//! arithmetic take turns instead of overlapping. Here each group of four vectors is loaded, run
//! through every op and stored (non-temporal when streaming), and every line of every streamed
//! input is prefetched [`PREFETCH_ELEMS`] ahead so that the memory stream continues while GELU's
//! arithmetic runs; streaming on AVX-512, a group of a one-op pass or of a chain without a gate
//! takes its vectors one at a time up to the stores (why: the comment in `chain`). Measured on
//! bias+GELU 8192² f32, 2 threads, huge pages (a throwaway microbenchmark, 18 timings per
//! kernel, medians): L1 tiles 14–15 GB/s, registers without prefetch 19–20 GB/s, registers with
//! a prefetch of every line 4 KiB ahead 30.3–30.7 GB/s, against a triad of 36.3 GB/s. Chains
//! with light arithmetic (no GELU or SiLU) that stream two inputs or more, and the triad,
//! prefetch only where the probe found the triad faster that way (`simd::stream_prefetch`):
//! on some cores the hardware prefetchers alone stream several inputs faster, while a
//! one-input chain still gains from the software prefetches (docs/performance.md has the runs).
//!
//! Both variants of a chain run through [`chain_segment`] (the unfused one op per pass), so they
//! share arithmetic, stores and prefetching and stay bit-identical; only the fusion differs.

#![cfg(target_arch = "x86_64")]

use super::lanes::{Lanes, NoFma256};
use super::math::Operand;
use super::simd::{level, stream_prefetch, SimdLevel};
use opledger_model::spec::ElemOp;
use std::arch::x86_64::*;

pub use super::simd::PREFETCH_ELEMS;

/// Vectors per group: four independent GELU dependency chains keep both FMA ports busy.
const GROUP_VECTORS: usize = 4;

/// Whether this CPU runs the register kernels (AVX-512, or AVX2 with FMA).
pub fn available() -> bool {
    level() >= SimdLevel::Avx2NoFma
}

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
    chain_at(level(), steps, dst, src, stream, prefetches(steps))
}

/// Whether a chain prefetches its inputs in software: chains that stream two inputs or more,
/// with light arithmetic, as the probe's triad (two inputs) found faster on this machine; gated
/// ones and one-input ones always (`simd::stream_prefetch`).
fn prefetches(steps: &[(ElemOp, Operand<'_>)]) -> bool {
    let inputs = 1 + steps
        .iter()
        .filter(|(_, operand)| matches!(operand, Operand::Tensor(_)))
        .count();
    gated(steps) || inputs == 1 || stream_prefetch()
}

/// [`chain_segment`] at a given level, prefetching or not (tests run every level the CPU has,
/// both ways).
fn chain_at(
    l: SimdLevel,
    steps: &[(ElemOp, Operand<'_>)],
    dst: &mut [f32],
    src: &[f32],
    stream: bool,
    prefetch: bool,
) {
    assert!(super::simd::supports(l), "this CPU lacks {}", l.name());
    match l {
        // SAFETY: the CPU has avx512f (asserted above); chain_segment checked the slice
        // lengths the kernel relies on.
        SimdLevel::Avx512 => unsafe { chain_avx512(steps, dst, src, stream, prefetch) },
        // SAFETY: as above, for avx2 and fma.
        SimdLevel::Avx2Fma => unsafe { chain_avx2::<__m256>(steps, dst, src, stream, prefetch) },
        // SAFETY: as above.
        SimdLevel::Avx2NoFma => unsafe {
            chain_avx2::<NoFma256>(steps, dst, src, stream, prefetch)
        },
        SimdLevel::Scalar => panic!("chain_segment needs AVX2 or AVX-512"),
    }
}

#[target_feature(enable = "avx512f")]
fn chain_avx512(
    steps: &[(ElemOp, Operand<'_>)],
    dst: &mut [f32],
    src: &[f32],
    stream: bool,
    prefetch: bool,
) {
    // SAFETY: compiled with avx512f, which __m512's methods need; lengths checked by the caller.
    unsafe { chain::<__m512>(steps, dst, src, stream, prefetch) }
}

/// `V` is `__m256` (FMA) or [`NoFma256`] (the `avx2-nofma` level).
#[target_feature(enable = "avx2,fma")]
fn chain_avx2<V: Lanes>(
    steps: &[(ElemOp, Operand<'_>)],
    dst: &mut [f32],
    src: &[f32],
    stream: bool,
    prefetch: bool,
) {
    // SAFETY: compiled with avx2 and fma, which V's methods need; lengths checked by the
    // caller.
    unsafe { chain::<V>(steps, dst, src, stream, prefetch) }
}

/// What one vector of `op` issues at `level` in [`chain_segment`]: (vector arithmetic
/// instructions, FLOPs per lane — an FMA 2, any other instruction 1). Counted from the
/// sequences the kernels are written as (`lanes.rs` and `math.rs`: `gate_v` and
/// `exp_core_avx512_n` under AVX-512, `gate_avx2_n`, `exp2_product_avx2_n` and `exp_v_avx2_n` under AVX2); loads,
/// stores and prefetches are left out. The ledger's nominal GELU is 9 FLOPs, its SiLU 3.
pub fn executed_per_vector(op: ElemOp, level: SimdLevel) -> (u64, u64) {
    match (op, level) {
        // vaddps / vmulps / vmaxps, the operand from memory.
        (ElemOp::BiasAdd | ElemOp::Add | ElemOp::Mul | ElemOp::Scale | ElemOp::Relu, _) => (1, 1),
        // The tiny-lane compare and the argument's clamp (2 / 2), GELU's factor q (mul, FMA:
        // 2 / 3), the exponential of x·q (n by an FMA and a subtraction, f by an FMA — 3 / 5;
        // Horner's 5 FMAs — 5 / 10; vscalefps — 1 / 1), 1 + e and the masked division
        // (2 / 2). SiLU's q is a constant (−2 / −3).
        (ElemOp::Gelu, SimdLevel::Avx512) => (15, 23),
        (ElemOp::Silu, SimdLevel::Avx512) => (13, 20),
        // The two clamps (2 / 2) and the same q (2 / 3); the exponential (n by an FMA, −n by a
        // subtraction, f by an FMA — 3 / 5; Horner's 5 FMAs — 5 / 10; 2^n by a shift — 1 / 1),
        // then 1 + p·2^n by an FMA and the division (2 / 3).
        (ElemOp::Gelu, SimdLevel::Avx2Fma | SimdLevel::Scalar) => (15, 24),
        (ElemOp::Silu, SimdLevel::Avx2Fma | SimdLevel::Scalar) => (13, 21),
        // Without FMA the argument −z is formed (GELU: mul, mul + add, mul — 4; SiLU: a
        // subtraction), then clamped, and its exponential keeps the two-step reduction (n by a
        // multiply and an add, −n by a subtraction, r by two multiplies and two subtractions,
        // Horner's 5 multiplies and 5 adds, a shift and a product: 19), x clamped first,
        // 1 + e and the division (see `lanes::gate_avx2_n`).
        (ElemOp::Gelu, SimdLevel::Avx2NoFma) => (27, 27),
        (ElemOp::Silu, SimdLevel::Avx2NoFma) => (24, 24),
    }
}

/// The first `m` lanes (all when m = LANES) of `b` at `at`.
///
/// # Safety
/// V's features are enabled; at + m ≤ b.len().
#[inline(always)]
unsafe fn load_part<V: Lanes>(b: &[f32], at: usize, m: usize) -> V {
    // SAFETY: the caller's contract.
    unsafe {
        if m == V::LANES {
            V::load(b.as_ptr().add(at))
        } else {
            V::load_first(b.as_ptr().add(at), m)
        }
    }
}

/// One op on the first `m` lanes (all when m = LANES) of the vector at element `at`.
///
/// # Safety
/// V's features are enabled; lanes at..at+m lie inside every operand slice.
#[inline(always)]
unsafe fn apply<V: Lanes>(op: ElemOp, operand: &Operand<'_>, at: usize, m: usize, v: V) -> V {
    let ld = |b: &[f32]| unsafe {
        if m == V::LANES {
            V::load(b.as_ptr().add(at))
        } else {
            V::load_first(b.as_ptr().add(at), m)
        }
    };
    // SAFETY: the caller's contract.
    unsafe {
        match (op, operand) {
            (ElemOp::BiasAdd, Operand::Bias(b)) | (ElemOp::Add, Operand::Tensor(b)) => {
                V::add(v, ld(b))
            }
            (ElemOp::Mul, Operand::Tensor(b)) => V::mul(v, ld(b)),
            (ElemOp::Scale, Operand::Scale(s)) => V::mul(v, V::splat(*s)),
            (ElemOp::Relu, _) => V::relu(v),
            (ElemOp::Gelu, _) => V::gate::<true>(v),
            (ElemOp::Silu, _) => V::gate::<false>(v),
            // operand_for() builds the operand from the op, so no other pairing occurs.
            _ => unreachable!("operand does not match op {}", op.name()),
        }
    }
}

/// `[e(0), e(1), e(2), e(3)]` with `$x` bound to the group's vector k and `$k` to k: written
/// out so that the four vectors stay in registers and their dependency chains interleave (a
/// loop over one vector at a time compiled to one gate at a time through the stack: 19–24 GB/s
/// on bias+GELU 8192² against 30 for this form). A macro, not a closure: a closure is compiled
/// without the caller's target features, and the intrinsics in it then become calls.
macro_rules! each {
    ($v:expr, |$x:ident, $k:ident| $e:expr) => {{
        let v = $v;
        [
            {
                let ($x, $k) = (v[0], 0usize);
                $e
            },
            {
                let ($x, $k) = (v[1], 1usize);
                $e
            },
            {
                let ($x, $k) = (v[2], 2usize);
                $e
            },
            {
                let ($x, $k) = (v[3], 3usize);
                $e
            },
        ]
    }};
}

/// One op on the group's full vectors at element `at`; the match is taken once per group.
///
/// # Safety
/// V's features are enabled; at + GROUP_VECTORS·LANES ≤ every operand's length.
#[inline(always)]
unsafe fn apply_group<V: Lanes>(
    op: ElemOp,
    operand: &Operand<'_>,
    at: usize,
    v: [V; GROUP_VECTORS],
) -> [V; GROUP_VECTORS] {
    // SAFETY: the caller's contract.
    unsafe {
        match (op, operand) {
            (ElemOp::BiasAdd, Operand::Bias(b)) | (ElemOp::Add, Operand::Tensor(b)) => {
                each!(v, |x, k| V::add(
                    x,
                    V::load(b.as_ptr().add(at + k * V::LANES))
                ))
            }
            (ElemOp::Mul, Operand::Tensor(b)) => {
                each!(v, |x, k| V::mul(
                    x,
                    V::load(b.as_ptr().add(at + k * V::LANES))
                ))
            }
            (ElemOp::Scale, Operand::Scale(s)) => {
                let s = V::splat(*s);
                each!(v, |x, _k| V::mul(x, s))
            }
            (ElemOp::Relu, _) => each!(v, |x, _k| V::relu(x)),
            (ElemOp::Gelu, _) => V::gate4::<true>(v),
            (ElemOp::Silu, _) => V::gate4::<false>(v),
            _ => unreachable!("operand does not match op {}", op.name()),
        }
    }
}

/// The chain on the first `m` lanes of the vector at element `i` (heads and tails).
///
/// # Safety
/// V's features are enabled; i + m ≤ the length of dst, src and every operand.
#[inline(always)]
unsafe fn one_vector<V: Lanes>(
    steps: &[(ElemOp, Operand<'_>)],
    dst: &mut [f32],
    src: &[f32],
    i: usize,
    m: usize,
) {
    // SAFETY: the caller's contract; partial vectors read and write only their m lanes.
    unsafe {
        let mut v = load_part::<V>(src, i, m);
        for (op, operand) in steps {
            v = apply(*op, operand, i, m, v);
        }
        if m == V::LANES {
            V::store(dst.as_mut_ptr().add(i), v)
        } else {
            V::store_first(dst.as_mut_ptr().add(i), m, v)
        }
    }
}

/// Prefetches `lines` cache lines from element `at` of `t` (which may lie past its end).
#[inline(always)]
fn prefetch_lines(t: &[f32], at: usize, lines: usize) {
    let p = t.as_ptr().wrapping_add(at) as *const i8;
    for l in 0..lines {
        // SAFETY: prefetcht0 is a hint with no architectural effect (it never faults); SSE is
        // part of x86_64.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64 * l)) };
    }
}

/// Stores a group's vectors at element `i` of `dst`, non-temporal with `stream`.
///
/// # Safety
/// V's features are enabled; i + GROUP_VECTORS·LANES ≤ dst.len(); with `stream`, dst + i lies
/// on a cache line (groups are whole lines, so each vector is aligned to its size as the
/// streaming store requires).
#[inline(always)]
unsafe fn store_group<V: Lanes>(dst: &mut [f32], i: usize, v: &[V; GROUP_VECTORS], stream: bool) {
    let q = dst[i..i + GROUP_VECTORS * V::LANES].as_mut_ptr();
    for (k, vk) in v.iter().enumerate() {
        // SAFETY: q + k·LANES .. + LANES lies in dst[i..i + group]; alignment as above.
        unsafe {
            if stream {
                V::stream(q.add(k * V::LANES), *vk);
            } else {
                V::store(q.add(k * V::LANES), *vk);
            }
        }
    }
}

/// # Safety
/// V's features are enabled; src and every operand hold at least dst.len() elements.
#[inline(always)]
unsafe fn chain<V: Lanes>(
    steps: &[(ElemOp, Operand<'_>)],
    dst: &mut [f32],
    src: &[f32],
    stream: bool,
    prefetch: bool,
) {
    // The choice is a constant of the loop it picks: a flag tested in the loop held a register
    // there, and the counted AVX2 chain spilled for it (docs/performance.md).
    // SAFETY (both): the caller's contract.
    if prefetch {
        unsafe { chain_loop::<V, true>(steps, dst, src, stream) }
    } else {
        unsafe { chain_loop::<V, false>(steps, dst, src, stream) }
    }
}

/// Whether a chain has a gate (GELU or SiLU): arithmetic enough to change how it streams.
fn gated(steps: &[(ElemOp, Operand<'_>)]) -> bool {
    steps
        .iter()
        .any(|(op, _)| matches!(op, ElemOp::Gelu | ElemOp::Silu))
}

/// [`chain`]'s loop, its inputs prefetched in software where `PREFETCH`.
///
/// # Safety
/// As [`chain`].
#[inline(always)]
unsafe fn chain_loop<V: Lanes, const PREFETCH: bool>(
    steps: &[(ElemOp, Operand<'_>)],
    dst: &mut [f32],
    src: &[f32],
    stream: bool,
) {
    let n = dst.len();
    let group = GROUP_VECTORS * V::LANES;
    let group_lines = group / 16;
    let mut i = 0;
    // Plain stores up to the first line boundary, so the streaming stores write whole lines.
    if stream {
        let head = dst.as_ptr().align_offset(64).min(n);
        while i < head {
            let m = (head - i).min(V::LANES);
            // SAFETY: i + m ≤ head ≤ n.
            unsafe { one_vector::<V>(steps, dst, src, i, m) };
            i += m;
        }
    }
    // AVX-512 streaming, vector by vector: the prefetch of its line (and of each streamed
    // operand's line) PREFETCH_ELEMS ahead, its load, every op; then the group's four stores
    // together. In the grouped form below (loads together at the top of the group, each op on
    // the four vectors side by side) a one-op pass or a chain without a gate streams slower
    // in every measurement: in the specs' cold runs the unfused bias+GELU (two one-op passes)
    // 27.7–32.5 ms against 22.6–26.6 this way, scale→add→ReLU→mul fused 13.8–14.6 against
    // 12.4–13.0. A gate after another op stays grouped: fused bias+GELU measured 15.7–18.2 ms
    // this way, moving with the VM's phase, against 16.6–17.2 grouped in the same minutes.
    // With its operands in L1 the grouped form computes faster (3.9 Gelem/s a core on
    // bias+GELU against 2.7–2.8): it serves cache-resident outputs, and AVX2 (its streaming
    // gate measured no faster this way). docs/performance.md has the runs.
    let per_vector = V::LANES == 16 && stream && (steps.len() == 1 || !gated(steps));
    while i + group <= n {
        if per_vector {
            // SAFETY: V's features are enabled (the caller's contract).
            let mut v = [unsafe { V::splat(0.0) }; GROUP_VECTORS];
            for (k, vk) in v.iter_mut().enumerate() {
                let at = i + k * V::LANES;
                if PREFETCH {
                    prefetch_lines(src, at + PREFETCH_ELEMS, 1);
                    for (_, operand) in steps {
                        if let Operand::Tensor(b) = operand {
                            prefetch_lines(b, at + PREFETCH_ELEMS, 1);
                        }
                    }
                }
                // SAFETY: at + LANES ≤ i + group ≤ n bounds src and every operand (checked
                // by chain_segment).
                let mut x = unsafe { V::load(src.as_ptr().add(at)) };
                for (op, operand) in steps {
                    // SAFETY: as above.
                    x = unsafe { apply(*op, operand, at, V::LANES, x) };
                }
                *vk = x;
            }
            // SAFETY: as the stores below.
            unsafe { store_group(dst, i, &v, stream) };
            i += group;
            continue;
        }
        // Grouped: the group's lines prefetched and its vectors loaded together, then each op
        // on all four (the gate runs four dependency chains side by side: one at a time, the
        // scheduler fills with one chain and the FMA ports wait, docs/performance.md).
        // Addresses are formed with wrapping arithmetic (past the end they point nowhere; a
        // prefetch never faults).
        if PREFETCH {
            prefetch_lines(src, i + PREFETCH_ELEMS, group_lines);
            for (_, operand) in steps {
                if let Operand::Tensor(b) = operand {
                    prefetch_lines(b, i + PREFETCH_ELEMS, group_lines);
                }
            }
        }
        // SAFETY: i + group ≤ n bounds src and every operand (checked by chain_segment).
        let mut v: [V; GROUP_VECTORS] = unsafe {
            each!([(); GROUP_VECTORS], |_u, k| V::load(
                src.as_ptr().add(i + k * V::LANES)
            ))
        };
        for (op, operand) in steps {
            // SAFETY: as above.
            v = unsafe { apply_group(*op, operand, i, v) };
        }
        // SAFETY: i + group ≤ n = dst.len(); with `stream`, the head loop left i at a line
        // boundary of dst.
        unsafe { store_group(dst, i, &v, stream) };
        i += group;
    }
    while i < n {
        let m = (n - i).min(V::LANES);
        // SAFETY: i + m ≤ n.
        unsafe { one_vector::<V>(steps, dst, src, i, m) };
        i += m;
    }
}

/// `a = b + s·c` with non-temporal stores and, with `prefetch`, the inputs prefetched as a chain
/// does (a light chain where `simd::stream_prefetch` says so): the
/// STREAM triad, written as the best streaming kernel of this module can do it, so that the
/// bandwidth ceiling is what the machine can do rather than what a naive loop does. All three
/// slices have `a.len()` elements or more; `a` should start on a cache line (else its first
/// partial line is written with plain stores).
pub fn triad_stream(a: &mut [f32], b: &[f32], c: &[f32], s: f32, prefetch: bool) {
    let n = a.len();
    assert!(
        b.len() >= n && c.len() >= n,
        "triad inputs shorter than the output"
    );
    triad_at(level(), a, b, c, s, prefetch)
}

/// [`triad_stream`] at a given level.
fn triad_at(l: SimdLevel, a: &mut [f32], b: &[f32], c: &[f32], s: f32, prefetch: bool) {
    assert!(super::simd::supports(l), "this CPU lacks {}", l.name());
    match l {
        // SAFETY: the CPU has avx512f (asserted above); triad_stream asserted the lengths.
        SimdLevel::Avx512 => unsafe { triad_avx512(a, b, c, s, prefetch) },
        // SAFETY: as above, for avx2 and fma. The probe's triad measures memory: at either
        // AVX2 level it is the machine's own FMA form (it never runs in a counted process).
        SimdLevel::Avx2Fma | SimdLevel::Avx2NoFma => unsafe { triad_avx2(a, b, c, s, prefetch) },
        SimdLevel::Scalar => panic!("triad_stream needs AVX2 or AVX-512"),
    }
}

#[target_feature(enable = "avx512f")]
fn triad_avx512(a: &mut [f32], b: &[f32], c: &[f32], s: f32, prefetch: bool) {
    // SAFETY: compiled with avx512f; lengths checked by the caller.
    unsafe { triad::<__m512>(a, b, c, s, prefetch) }
}

#[target_feature(enable = "avx2,fma")]
fn triad_avx2(a: &mut [f32], b: &[f32], c: &[f32], s: f32, prefetch: bool) {
    // SAFETY: compiled with avx2 and fma; lengths checked by the caller.
    unsafe { triad::<__m256>(a, b, c, s, prefetch) }
}

/// # Safety
/// V's features are enabled; b and c hold at least a.len() elements.
#[inline(always)]
unsafe fn triad<V: Lanes>(a: &mut [f32], b: &[f32], c: &[f32], s: f32, prefetch: bool) {
    let n = a.len();
    // SAFETY: the caller's contract.
    let sv = unsafe { V::splat(s) };
    let head = a.as_ptr().align_offset(64).min(n);
    for j in 0..head {
        a[j] = s.mul_add(c[j], b[j]);
    }
    let mut i = head;
    // A line (16 values) a step: one vector under AVX-512, two under AVX2.
    while i + 16 <= n {
        if prefetch {
            let ahead = i + PREFETCH_ELEMS;
            prefetch_lines(b, ahead, 1);
            prefetch_lines(c, ahead, 1);
        }
        for k in (0..16).step_by(V::LANES) {
            // SAFETY: i + 16 ≤ n bounds the loads from b and c and the store into a, which is
            // aligned to the vector because i started at a line boundary and advances by lines.
            unsafe {
                let v = V::fmadd(
                    sv,
                    V::load(c.as_ptr().add(i + k)),
                    V::load(b.as_ptr().add(i + k)),
                );
                V::stream(a.as_mut_ptr().add(i + k), v);
            }
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
    use crate::math;
    use crate::simd::{store_fence, LineVec, SimdLevel};

    /// The register levels this CPU has, whatever OPLEDGER_SIMD caps.
    fn levels() -> Vec<SimdLevel> {
        [SimdLevel::Avx2NoFma, SimdLevel::Avx2Fma, SimdLevel::Avx512]
            .into_iter()
            .filter(|&l| crate::simd::supports(l))
            .collect()
    }

    #[test]
    fn triad_matches_the_scalar_fma_at_every_length_and_offset() {
        for l in levels() {
            let b: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.37).sin()).collect();
            let c: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.11).cos()).collect();
            for ((start, len), prefetch) in
                [(0, 0), (0, 1), (3, 17), (0, 1024), (5, 2995), (16, 2000)]
                    .into_iter()
                    .flat_map(|at| [(at, true), (at, false)])
            {
                let mut a = LineVec::filled(3000, f32::NAN);
                triad_at(
                    l,
                    &mut a[start..start + len],
                    &b[start..start + len],
                    &c[start..start + len],
                    3.0,
                    prefetch,
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
    }

    #[test]
    fn relu_in_registers_keeps_nan_and_negative_zero_like_the_scalar_one() {
        for l in levels() {
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
                chain_at(
                    l,
                    &[(ElemOp::Relu, Operand::None)],
                    &mut y,
                    &x,
                    stream,
                    true,
                );
                store_fence();
                for (a, b) in x.iter().zip(&y) {
                    assert_eq!(math::relu(*a).to_bits(), b.to_bits(), "relu({a})");
                }
            }
        }
    }

    #[test]
    fn streamed_fused_and_one_op_a_pass_chains_give_the_same_bits() {
        // Streaming on AVX-512, a one-op pass and a chain without a gate run each vector through
        // every op before the next; a chain with a gate after another op, the cached form and
        // AVX2 run each op on four vectors side by side. Every lane goes through the same
        // operations either way: a chain, streamed or not, its inputs prefetched or not, matches
        // its ops applied one pass each, bit for bit, whatever the segment's start.
        let n = 1037;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
            .collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
        let t: Vec<f32> = (0..n).map(|i| 1.0 + (i % 5) as f32 * 0.25).collect();
        let with_gates = vec![
            (ElemOp::BiasAdd, Operand::Bias(&b)),
            (ElemOp::Gelu, Operand::None),
            (ElemOp::Mul, Operand::Tensor(&t)),
            (ElemOp::Silu, Operand::None),
            (ElemOp::Scale, Operand::Scale(0.5)),
            (ElemOp::Relu, Operand::None),
        ];
        let without_gates = vec![
            (ElemOp::BiasAdd, Operand::Bias(&b)),
            (ElemOp::Mul, Operand::Tensor(&t)),
            (ElemOp::Scale, Operand::Scale(0.5)),
            (ElemOp::Relu, Operand::None),
            (ElemOp::Add, Operand::Tensor(&t)),
        ];
        let chains = [
            with_gates,
            without_gates,
            vec![(ElemOp::Gelu, Operand::None)],
            vec![(ElemOp::Silu, Operand::None)],
        ];
        for steps in &chains {
            for l in levels() {
                for start in [0, 5] {
                    // The steps as they apply to a segment starting at element `start`.
                    let fused_steps: Vec<(ElemOp, Operand<'_>)> = steps
                        .iter()
                        .map(|(op, operand)| {
                            let operand = match operand {
                                Operand::Bias(v) => Operand::Bias(&v[start..]),
                                Operand::Tensor(v) => Operand::Tensor(&v[start..]),
                                o => *o,
                            };
                            (*op, operand)
                        })
                        .collect();
                    let mut passes = x[start..].to_vec();
                    for step in &fused_steps {
                        let src = passes.clone();
                        chain_at(l, &[*step], &mut passes, &src, false, true);
                    }
                    for (stream, prefetch) in [(false, true), (true, true), (true, false)] {
                        let mut y = LineVec::filled(n, f32::NAN);
                        chain_at(
                            l,
                            &fused_steps,
                            &mut y[start..],
                            &x[start..],
                            stream,
                            prefetch,
                        );
                        store_fence();
                        for (i, (a, e)) in y[start..].iter().zip(&passes).enumerate() {
                            assert_eq!(
                                a.to_bits(),
                                e.to_bits(),
                                "{} {} ops stream={stream} prefetch={prefetch} start={start} element {i}: {a} against {e}",
                                l.name(),
                                steps.len()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_chain_writes_exactly_its_segment() {
        for l in levels() {
            let x: Vec<f32> = (0..700).map(|i| i as f32 - 350.0).collect();
            for (start, len) in [(0, 64), (1, 63), (13, 200), (16, 640), (7, 1)] {
                let mut y = LineVec::filled(700, f32::NAN);
                chain_at(
                    l,
                    &[(ElemOp::Scale, Operand::Scale(0.5))],
                    &mut y[start..start + len],
                    &x[start..start + len],
                    true,
                    false,
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

    /// Where the gates hold their argument or give up on it (AVX2's clamp where 2^n turns to
    /// +∞, AVX-512's zeroed lanes, the upper hold where 1 + e^{−z} is 1), every x of a fine
    /// grid across those points is within 2e-5 of the f64 value (−z's own rounding, ~1e-7·|z|,
    /// is the exponential's relative error where the result is tiny), or within 1e-35 of it
    /// (AVX-512 gives 0 where σ(z) < e^−86, |x·σ(z)| < 4e-36 there): no lane comes out NaN,
    /// infinite or of the wrong magnitude on either side of a bound.
    #[test]
    fn the_gate_in_registers_holds_across_its_clamps_at_every_level() {
        // x·σ(2u), not 0.5·x·(1 + tanh u): 1 + tanh u cancels to 0 in f64 far below −1.
        let gelu =
            |v: f64| v / (1.0 + (-2.0 * 0.797_884_560_8 * (v + 0.044_715 * v * v * v)).exp());
        let silu = |v: f64| v / (1.0 + (-v).exp());
        // Each gate, its f64 value, and the ranges of x around its bounds.
        type Case = (ElemOp, fn(f64) -> f64, [(f32, f32); 3]);
        let cases: [Case; 2] = [
            (ElemOp::Gelu, gelu, [(-10.3, -9.7), (8.7, 9.3), (-4.0, 4.0)]),
            (
                ElemOp::Silu,
                silu,
                [(-89.5, -85.5), (79.0, 81.0), (-20.0, 20.0)],
            ),
        ];
        for l in levels() {
            for (op, f, ranges) in cases {
                for (from, to) in ranges {
                    let x: Vec<f32> = (0..=4000)
                        .map(|i| from + (to - from) * i as f32 / 4000.0)
                        .collect();
                    let mut y = vec![f32::NAN; x.len()];
                    chain_at(l, &[(op, Operand::None)], &mut y, &x, false, true);
                    for (a, b) in x.iter().zip(&y) {
                        let want = f(*a as f64);
                        assert!(
                            (*b as f64 - want).abs() <= 1e-35 + 2e-5 * want.abs(),
                            "{} {op:?}({a}) = {b}, f64 {want}",
                            l.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_gate_in_registers_matches_f64_at_every_level() {
        let x: Vec<f32> = (0..40_000).map(|i| -30.0 + i as f32 * 1.5e-3).collect();
        for l in levels() {
            for (op, f) in [
                (
                    ElemOp::Gelu,
                    (|v: f64| {
                        0.5 * v * (1.0 + (0.797_884_560_8 * (v + 0.044_715 * v * v * v)).tanh())
                    }) as fn(f64) -> f64,
                ),
                (ElemOp::Silu, |v: f64| v / (1.0 + (-v).exp())),
            ] {
                let mut y = vec![0f32; x.len()];
                chain_at(l, &[(op, Operand::None)], &mut y, &x, false, true);
                for (a, b) in x.iter().zip(&y) {
                    let e = f(*a as f64);
                    if e.abs() > 1e-3 {
                        assert!(
                            ((*b as f64 - e) / e).abs() < 1e-6,
                            "{} {op:?}({a}) = {b}, f64 {e}",
                            l.name()
                        );
                    }
                }
                let special = [
                    f32::NAN,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    0.0,
                    -0.0,
                    1e30,
                    -1e30,
                ];
                let mut z = [7f32; 7];
                chain_at(l, &[(op, Operand::None)], &mut z, &special, false, true);
                assert!(z[0].is_nan(), "{} {op:?}(NaN) = {}", l.name(), z[0]);
                assert_eq!(z[1], f32::INFINITY, "{} {op:?}(inf)", l.name());
                assert_eq!(z[2], 0.0, "{} {op:?}(-inf)", l.name());
                assert_eq!(z[3], 0.0);
                assert!(
                    (z[5] / 1e30 - 1.0).abs() < 1e-6,
                    "{} {op:?}(1e30) = {}",
                    l.name(),
                    z[5]
                );
                assert_eq!(z[6], 0.0, "{} {op:?}(-1e30)", l.name());
            }
        }
    }
}
