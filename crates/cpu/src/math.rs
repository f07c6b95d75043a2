//! Vectorizable f32 math for the CPU kernels. libm calls do not vectorize, so exp is a
//! Cody–Waite range reduction with a degree-6 polynomial (Cephes `expf` coefficients, relative
//! error about 1e-7) built from operations LLVM turns into SIMD; tanh, GELU and SiLU derive from
//! it. Everything is `#[inline(always)]` so it is compiled with the caller's target features;
//! each multiply-add is the caller's [`MulAdd`]: with [`Fused`] one FMA instruction under
//! AVX2/AVX-512 (the baseline build, on CPUs without FMA, pays a library call: it is the slow
//! fallback), with [`Separate`] a multiply and an add (the `avx2-nofma` level).
//! The hand-vectorized exponentials of the AVX2 and AVX-512 kernels reduce in base 2 instead
//! (f = x·log2 e − n by one FMA, 2^f by a degree-5 polynomial), one operation fewer a vector.
//! NaN propagates through every function (NaN never passes a check silently).

/// The second input of an op for one segment.
#[derive(Clone, Copy)]
pub enum Operand<'a> {
    None,
    /// The bias values of the segment's columns.
    Bias(&'a [f32]),
    /// The segment of a second tensor.
    Tensor(&'a [f32]),
    Scale(f32),
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::__m256;

/// How a kernel computes a·b + c. [`Fused`]: one FMA instruction, one rounding (every level
/// a CPU is detected at). [`Separate`]: a multiply and an add, two roundings — the
/// `avx2-nofma` level counted sides run at, because Valgrind executes an FMA lane by lane in a
/// helper call (docs/counts.md). LLVM never fuses a separate multiply and add on its own (Rust
/// allows no contraction), so code written with `Separate` holds no FMA instruction.
pub trait MulAdd: Copy + 'static {
    /// Whether a·b + c is rounded once: the vector exponentials' base-2 reduction needs it
    /// (`reduce_poly_avx2_n`).
    const FUSED: bool;
    fn f32(a: f32, b: f32, c: f32) -> f32;
    /// a·b + c on eight lanes.
    ///
    /// # Safety
    /// The caller is compiled with avx2 and fma.
    #[cfg(target_arch = "x86_64")]
    unsafe fn v256(a: __m256, b: __m256, c: __m256) -> __m256;
    /// c − a·b on eight lanes.
    ///
    /// # Safety
    /// As [`MulAdd::v256`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn nv256(a: __m256, b: __m256, c: __m256) -> __m256;
}

/// One FMA instruction (see [`MulAdd`]).
#[derive(Debug, Clone, Copy)]
pub struct Fused;

/// A multiply and an add (see [`MulAdd`]).
#[derive(Debug, Clone, Copy)]
pub struct Separate;

impl MulAdd for Fused {
    const FUSED: bool = true;
    #[inline(always)]
    fn f32(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn v256(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: the caller is compiled with fma (the trait's contract).
        unsafe { std::arch::x86_64::_mm256_fmadd_ps(a, b, c) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn nv256(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: as above.
        unsafe { std::arch::x86_64::_mm256_fnmadd_ps(a, b, c) }
    }
}

impl MulAdd for Separate {
    const FUSED: bool = false;
    #[inline(always)]
    fn f32(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn v256(a: __m256, b: __m256, c: __m256) -> __m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller is compiled with avx (the trait's contract).
        unsafe { _mm256_add_ps(_mm256_mul_ps(a, b), c) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn nv256(a: __m256, b: __m256, c: __m256) -> __m256 {
        use std::arch::x86_64::*;
        // SAFETY: as above.
        unsafe { _mm256_sub_ps(c, _mm256_mul_ps(a, b)) }
    }
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// The vector exponentials' degree-5 polynomial for 2^f on [−½, ½], highest coefficient first
/// (Horner's form starts from the first and takes one FMA for each of the rest): a minimax
/// polynomial for e^r on [−ln2/2, ln2/2] (relative error 1.1e-7) with r = f·ln 2, its k-th
/// coefficient times (ln 2)^k, rounded to f32 — relative error 1.6e-7 in f32 arithmetic.
#[cfg(target_arch = "x86_64")]
const EXP2_POLY: [f32; 6] = [
    1.330_080_1e-3,
    9.669_456e-3,
    5.550_559e-2,
    0.240_222_87,
    std::f32::consts::LN_2, // 1.0 · ln 2
    1.0,
];

/// The minimax polynomial for e^r on [−ln2/2, ln2/2] (relative error 1.1e-7) that
/// [`EXP2_POLY`] rescales, for the AVX2 exponentials without FMA (see `reduce_poly_avx2_n`).
#[cfg(target_arch = "x86_64")]
const EXP_POLY: [f32; 6] = [
    8.312_860_5e-3,
    4.188_902e-2,
    1.666_711_1e-1,
    0.499_992_43,
    1.0,
    1.0,
];

/// e^x for f32.
#[inline(always)]
pub fn exp<M: MulAdd>(x: f32) -> f32 {
    // Beyond these e^x is inf or 0 in f32; clamping keeps the exponent arithmetic in range.
    // `max`/`min` written as comparisons so NaN passes through unchanged.
    let input = x;
    let x = if x > 88.72 { 88.72 } else { x };
    let x = if x < -87.3 { -87.3 } else { x };
    // Round x·log2(e) to the nearest integer by adding 1.5·2^23: the integer lands in the low
    // mantissa bits (no float→int conversion, which does not vectorize well).
    const SHIFT: f32 = 12_582_912.0;
    let t = x * LOG2E + SHIFT;
    let n = t - SHIFT;
    let ni = (t.to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32);
    let r = M::f32(-n, LN2_LO, M::f32(-n, LN2_HI, x));
    let r2 = r * r;
    let mut p = 1.987_569_1e-4f32;
    p = M::f32(p, r, 1.398_199_9e-3);
    p = M::f32(p, r, 8.333_452e-3);
    p = M::f32(p, r, 4.166_579_6e-2);
    p = M::f32(p, r, 1.666_666_5e-1);
    p = M::f32(p, r, 0.5);
    let e = M::f32(r2, p, 1.0 + r);
    // 2^n from its exponent bits; n is in [-126, 128] after the clamp (128 gives inf, as it should).
    let scale = f32::from_bits(((ni + 127) as u32) << 23);
    // Below the clamp the true value is denormal or 0; flush to 0 rather than return 2^-126.
    if input < -87.3 {
        0.0
    } else {
        e * scale
    }
}

/// tanh(x) = 1 − 2/(e^{2x} + 1): saturates to ±1 without overflow.
#[inline(always)]
pub fn tanh<M: MulAdd>(x: f32) -> f32 {
    1.0 - 2.0 / (exp::<M>(2.0 * x) + 1.0)
}

/// GELU, tanh form (as PyTorch `approximate="tanh"` and most fused kernels).
#[inline(always)]
pub fn gelu<M: MulAdd>(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
                                // 0.5·x·(1 + tanh(u)) = x·σ(2u) = x / (1 + e^{−2u}): one exp and one division.
    let x2 = x * x;
    let u = C * x * M::f32(0.044_715, x2, 1.0);
    x / (1.0 + exp::<M>(-2.0 * u))
}

/// SiLU: x·σ(x).
#[inline(always)]
pub fn silu<M: MulAdd>(x: f32) -> f32 {
    x / (1.0 + exp::<M>(-x))
}

/// ReLU that keeps NaN (f32::max would turn NaN into 0).
#[inline(always)]
pub fn relu(x: f32) -> f32 {
    if x < 0.0 {
        0.0
    } else {
        x
    }
}

/// Which x·σ(z) activation a slice kernel computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// GELU (tanh form): z = 2·√(2/π)·(x + 0.044715·x³).
    Gelu,
    /// SiLU: z = x.
    Silu,
}

/// `dst[i] = gelu(src[i])` or `silu(src[i])` over a slice. On AVX-512 a hand-vectorized kernel
/// ([`gate_v`]) replaces the scalar functions, the exponent arithmetic by `vscalefps`: in its
/// first form (a reciprocal estimate and a Newton step where it now divides) GELU on an
/// L1-resident 4096-element slice took a median of 0.43 ns/element/core against 0.50 for the
/// auto-vectorized scalar functions (14 timings each over 1 and 2 threads, 2-core Intel Xeon
/// VM). That matters
/// because on this machine a fused bias+GELU is as much arithmetic as memory stream (streaming
/// 8 B/element takes ~0.53 ns/element/core). Every element, the tail included,
/// goes through the same vector code (masked loads and stores), so the result of an element does
/// not depend on where a slice starts: the fused and unfused variants stay bit-identical.
/// Elsewhere the portable scalar functions run.
pub fn gate_slice(gate: Gate, dst: &mut [f32], src: &[f32]) {
    let n = dst.len().min(src.len());
    #[cfg(target_arch = "x86_64")]
    if crate::device::simd::level() == crate::device::simd::SimdLevel::Avx512 {
        // SAFETY: level() returns Avx512 only when the CPU reports avx512f.
        unsafe {
            match gate {
                Gate::Gelu => gate_avx512::<true>(&mut dst[..n], &src[..n]),
                Gate::Silu => gate_avx512::<false>(&mut dst[..n], &src[..n]),
            }
        }
        return;
    }
    gate_portable(gate, &mut dst[..n], &src[..n]);
}

crate::multiversion! {
    fn gate_portable(gate: Gate, dst: &mut [f32], src: &[f32]) {
        let n = dst.len();
        let src = &src[..n];
        match gate {
            Gate::Gelu => {
                for i in 0..n {
                    dst[i] = gelu::<M>(src[i]);
                }
            }
            Gate::Silu => {
                for i in 0..n {
                    dst[i] = silu::<M>(src[i]);
                }
            }
        }
    }
}

/// x·σ(z) = x / (1 + e^{−z}) over a slice, 16 lanes at a time; `GELU` picks z. Four vectors
/// per iteration: the dependency chain of one vector is ~90 cycles long, and independent chains
/// side by side keep both FMA ports busy where the scheduler alone does not look far enough ahead.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gate_avx512<const GELU: bool>(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::*;
    let n = dst.len().min(src.len());
    let mut i = 0;
    while i + 64 <= n {
        // SAFETY: i + 64 <= n bounds both slices for the four 16-lane loads and stores.
        unsafe {
            let p = src.as_ptr().add(i);
            let x0 = _mm512_loadu_ps(p);
            let x1 = _mm512_loadu_ps(p.add(16));
            let x2 = _mm512_loadu_ps(p.add(32));
            let x3 = _mm512_loadu_ps(p.add(48));
            let q = dst.as_mut_ptr().add(i);
            _mm512_storeu_ps(q, gate_v::<GELU>(x0));
            _mm512_storeu_ps(q.add(16), gate_v::<GELU>(x1));
            _mm512_storeu_ps(q.add(32), gate_v::<GELU>(x2));
            _mm512_storeu_ps(q.add(48), gate_v::<GELU>(x3));
        }
        i += 64;
    }
    while i < n {
        let left = n - i;
        let mask: __mmask16 = if left >= 16 {
            0xFFFF
        } else {
            ((1u32 << left) - 1) as __mmask16
        };
        // SAFETY: the mask enables only lanes i..i+left, all inside both slices; masked-off
        // lanes are neither read nor written (no fault even past the end).
        unsafe {
            let x = _mm512_maskz_loadu_ps(mask, src.as_ptr().add(i));
            _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), mask, gate_v::<GELU>(x));
        }
        i += 16;
    }
}

/// p·2^n ≈ 2^{x·q} (e^x where q is log2 e) for an argument already clamped to where the
/// caller needs it, in base 2: n = round(x·q) by the 1.5·2^23 shift trick (an FMA and a
/// subtraction), f = x·q − n by one FMA — the product unrounded, a single rounding of a value
/// under ½ —, p = 2^f by [`EXP2_POLY`] in Horner form, and 2^n by `vscalefps`. The one
/// sequence [`gate_v_n`] and [`exp_v_n`] share: the gate passes GELU's whole factor as q
/// ([`GELU_Q0`]), so the product that makes its argument is these FMAs'.
///
/// One operation fewer than the two-step Cody–Waite reduction to r = x − n·ln 2 (two FMAs)
/// and e^r, which on a two-core machine shows in the fused softmax's and bias+GELU's time
/// (docs/performance.md). The error it adds is log2 e's rounding in f32 times x, 1.34e-8·|x|
/// relative: under 2.3e-7 where e^x > 1e-7 for x ≤ 0, and GELU's own constants' rounding
/// outweighs it.
///
/// On `N` vectors step by step, as [`reduce_poly_avx2_n`] (why: there). Written one vector after
/// another (what LLVM made of four inlined single-vector calls), consecutive vectors' chains
/// overlapped too little to keep both FMA pipes busy: step by step, a copy of the fused
/// softmax's sweep ran 22% faster on one core in L1 (docs/performance.md). Every lane goes
/// through the same operations whatever `N` is: results are bit-identical.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn exp_core_avx512_n<const N: usize>(
    x: [std::arch::x86_64::__m512; N],
    q: [std::arch::x86_64::__m512; N],
) -> [std::arch::x86_64::__m512; N] {
    use std::arch::x86_64::*;
    const SHIFT: f32 = 12_582_912.0;
    let mut nf = [_mm512_setzero_ps(); N];
    let mut f = [_mm512_setzero_ps(); N];
    for k in 0..N {
        let t = _mm512_fmadd_ps(x[k], q[k], _mm512_set1_ps(SHIFT));
        nf[k] = _mm512_sub_ps(t, _mm512_set1_ps(SHIFT));
        f[k] = _mm512_fmsub_ps(x[k], q[k], nf[k]);
    }
    let mut p = [_mm512_set1_ps(EXP2_POLY[0]); N];
    for &c in &EXP2_POLY[1..] {
        for k in 0..N {
            p[k] = _mm512_fmadd_ps(p[k], f[k], _mm512_set1_ps(c));
        }
    }
    let mut out = [_mm512_setzero_ps(); N];
    for k in 0..N {
        out[k] = _mm512_scalef_ps(p[k], nf[k]);
    }
    out
}

/// 2^{x·q} on `N` vectors as (p, 2^n), in base 2 (as [`exp_core_avx512_n`]): t = x·q +
/// [`SHIFT_BIASED`] (the shift trick: t's low mantissa bits hold n + 127, n = round(x·q)),
/// f = x·q − n by one multiply-add (−n as the shift − t: with FMA the product x·q is never
/// rounded), p = 2^f by [`EXP2_POLY`] in Horner's form, five multiply-adds, and 2^n as t's
/// bits shifted left by 23 (0 for n = −127, +∞ for n = 128). The caller keeps x·q in
/// [−127, 128.5). Without FMA, x·q would be rounded before n is taken from it (an error of
/// 3e-8·|x·q| in f: 2.6e-6 relative at x = −64), so that level (the counted one) takes the
/// two-step Cody–Waite reduction to r = x − n·ln 2 and e^r's polynomial instead, which holds
/// for q = log2 e only: its one caller there is [`exp_v_avx2_n`]. Estrin's form is three FMA
/// latencies deep instead of five for one operation more; with the `N` vectors' chains side
/// by side the depth is hidden and the operation is not (Horner's form measured 4–9% faster
/// on one core in L1 under AVX2: docs/performance.md). Compiled with its callers' features,
/// and inlined into them.
///
/// On `N` vectors at once, step by step: each step is issued for all `N` before the next, so
/// that `N` independent dependency chains sit side by side in the instruction stream. Written
/// one vector after another (the form LLVM makes of `N` inlined single-vector calls when its 16
/// ymm registers run short), the exponential's ~45-cycle chain fills the scheduler before the
/// next vector's first operations enter it, and 8-lane vectors then run at the chain's latency,
/// not at the FMA ports' rate. Every lane goes through the same operations whatever `N` is:
/// results are bit-identical.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn reduce_poly_avx2_n<M: MulAdd, const N: usize>(
    x: [std::arch::x86_64::__m256; N],
    q: [std::arch::x86_64::__m256; N],
) -> (
    [std::arch::x86_64::__m256; N],
    [std::arch::x86_64::__m256; N],
) {
    use std::arch::x86_64::*;
    // Loops, not closures: a closure is compiled without this function's target features.
    let shift = _mm256_set1_ps(SHIFT_BIASED);
    let mut t = [_mm256_setzero_ps(); N];
    let mut f = [_mm256_setzero_ps(); N];
    for k in 0..N {
        // SAFETY: compiled with avx2 and fma (M's contract).
        t[k] = unsafe { M::v256(x[k], q[k], shift) };
        if M::FUSED {
            // SAFETY: as above.
            f[k] = unsafe { M::v256(x[k], q[k], _mm256_sub_ps(shift, t[k])) };
        } else {
            // The two-step reduction (n·ln2_hi is exact), "f" then holding r.
            let nf = _mm256_sub_ps(t[k], shift);
            // SAFETY: as above.
            f[k] = unsafe { M::nv256(nf, _mm256_set1_ps(LN2_HI), x[k]) };
            // SAFETY: as above.
            f[k] = unsafe { M::nv256(nf, _mm256_set1_ps(LN2_LO), f[k]) };
        }
    }
    let poly = if M::FUSED { &EXP2_POLY } else { &EXP_POLY };
    let mut p = [_mm256_set1_ps(poly[0]); N];
    for &c in &poly[1..] {
        for k in 0..N {
            // SAFETY: compiled with avx2 and fma (M's contract).
            p[k] = unsafe { M::v256(p[k], f[k], _mm256_set1_ps(c)) };
        }
    }
    let mut two_n = [_mm256_setzero_ps(); N];
    for k in 0..N {
        two_n[k] = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(t[k])));
    }
    (p, two_n)
}

/// 1.5·2^23 + 127: added to x·q (|x·q| < 2^22), the sum's low mantissa bits are n + 127, n =
/// round(x·q) ([`reduce_poly_avx2_n`]).
#[cfg(target_arch = "x86_64")]
const SHIFT_BIASED: f32 = 12_583_039.0;

/// One vector of x·σ(z) = x / (1 + e^{−z}), in 15 vector operations (GELU; SiLU 13):
/// - e^{−z} = 2^{x·q} by `exp_core_avx512_n`, q = −2·√(2/π)·log2 e·(1 + 0.044715·x²) for GELU
///   ([`GELU_Q0`]) and −log2 e for SiLU, x held at [`GELU_X_MAX`] / [`SILU_X_MAX`] (beyond,
///   e^{−z} < 2^−90 and the result is x): the FMAs that take n and f form the product x·q
///   unrounded, in place of the argument's last product (SiLU's negation);
/// - x/d by one masked `vdivps` (the divider works beside the FMA pipes: a `vrcp14ps` estimate,
///   a Newton step and a product took four instructions of the issue slots that bound this
///   gate, and the kernel's arithmetic alone measured slower that way — docs/performance.md),
///   zero where x is below [`GELU_X_TINY`] / [`SILU_X_TINY`] (−z > 86 there: σ(z) < e^−86,
///   below f32's normal range for any x but the largest; x = −∞ too gets 0, its limit).
///
/// Fewer operations matter because on a 2-core machine the fused bias+GELU is as much
/// arithmetic as memory stream.
///
/// # Safety
/// The CPU must support AVX-512F (the callers dispatch on the detected SIMD level).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub fn gate_v<const GELU: bool>(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    gate_v_n::<GELU, 1>([x])[0]
}

/// [`gate_v`] on `N` vectors step by step (why: [`exp_core_avx512_n`]); each lane's result is
/// `gate_v`'s.
///
/// # Safety
/// The CPU must support AVX-512F (the callers dispatch on the detected SIMD level).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub fn gate_v_n<const GELU: bool, const N: usize>(
    x: [std::arch::x86_64::__m512; N],
) -> [std::arch::x86_64::__m512; N] {
    use std::arch::x86_64::*;
    let one = _mm512_set1_ps(1.0);
    let (tiny_below, hi) = if GELU {
        (GELU_X_TINY, GELU_X_MAX)
    } else {
        (SILU_X_TINY, SILU_X_MAX)
    };
    let mut xa = [_mm512_setzero_ps(); N];
    let mut q = [_mm512_set1_ps(-LOG2E); N];
    let mut tiny = [0 as __mmask16; N];
    for k in 0..N {
        // NaN compares false, and stays NaN below.
        tiny[k] = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x[k], _mm512_set1_ps(tiny_below));
        // vminps returns the second operand when either is NaN: the argument goes second.
        // Lanes below the tiny bound are zeroed by the mask at the end, whatever the
        // arithmetic made of them (inf or NaN); the others have |x·q| ≤ 124.
        xa[k] = _mm512_min_ps(_mm512_set1_ps(hi), x[k]);
        if GELU {
            let x2 = _mm512_mul_ps(xa[k], xa[k]);
            q[k] = _mm512_fmadd_ps(_mm512_set1_ps(GELU_Q2), x2, _mm512_set1_ps(GELU_Q0));
        }
    }
    let e = exp_core_avx512_n(xa, q);
    let mut out = [_mm512_setzero_ps(); N];
    for k in 0..N {
        let d = _mm512_add_ps(one, e[k]);
        out[k] = _mm512_maskz_div_ps(!tiny[k], x[k], d);
    }
    out
}

/// GELU's −z·log2 e as x·q, q = GELU_Q0 + GELU_Q2·x² = −2·√(2/π)·log2 e·(1 + 0.044715·x²),
/// each constant rounded once from f64. The vector gates pass q to their exponential, whose
/// FMAs then form the product unrounded.
pub const GELU_Q0: f32 = (-2.0 * 0.797_884_560_802_865_4_f64 * std::f64::consts::LOG2_E) as f32;
/// See [`GELU_Q0`].
pub const GELU_Q2: f32 =
    (-2.0 * 0.797_884_560_802_865_4_f64 * 0.044_715 * std::f64::consts::LOG2_E) as f32;
/// The x above which the vector gates hold GELU's argument: −z·log2 e is −95.8 there, e^{−z}
/// under 2^−95, so 1 + e^{−z} is 1 and the result x itself for every larger x.
pub const GELU_X_MAX: f32 = 9.0;
/// The same for SiLU (−z = −x): −z·log2 e is −115.4.
pub const SILU_X_MAX: f32 = 80.0;
/// The x below which the AVX-512 gate gives 0: −z is 86 there (GELU).
pub const GELU_X_TINY: f32 = -9.94;
/// The same for SiLU.
pub const SILU_X_TINY: f32 = -86.0;

/// One vector of e^x for x ≤ 0 (softmax's and attention's x − max; NaN passes) in 10 vector
/// operations, for kernels where exp is most of the arithmetic: the argument clamped below at
/// −104 (−∞ from a masked score included), then `exp_core_avx512_n` (n = round(x·log2 e) by
/// the shift trick, f = x·log2 e − n by one FMA, 2^f by a degree-5 polynomial) and 2^n by
/// `vscalefps`, which also gives the right denormal or 0 below f32's normal range (where the
/// scalar [`exp`] clamps and flushes, 18 operations once LLVM has vectorized it). No clamp
/// above: every caller's argument is a value less its row's maximum, and on a two-core machine
/// the fused softmax's arithmetic takes as long as its memory stream, so each operation an
/// element shows in its time.
///
/// # Safety
/// The CPU must support AVX-512F (the callers dispatch on the detected SIMD level).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub fn exp_v(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    exp_v_n([x])[0]
}

/// [`exp_v`] on `N` vectors step by step (why: [`exp_core_avx512_n`]); each lane's result is
/// `exp_v`'s.
///
/// # Safety
/// The CPU must support AVX-512F (the callers dispatch on the detected SIMD level).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub fn exp_v_n<const N: usize>(
    x: [std::arch::x86_64::__m512; N],
) -> [std::arch::x86_64::__m512; N] {
    use std::arch::x86_64::*;
    let mut c = [_mm512_setzero_ps(); N];
    for k in 0..N {
        // vmaxps returns the second operand when either is NaN: the argument goes second.
        c[k] = _mm512_max_ps(_mm512_set1_ps(-104.0), x[k]);
    }
    exp_core_avx512_n(c, [_mm512_set1_ps(LOG2E); N])
}

/// `N` vectors of e^x on AVX2 for x ≤ 88.7 (softmax's x − max, ≤ 0; the AVX2 gate's −z without
/// FMA; NaN passes), 11 operations each (the auto-vectorized scalar [`exp`]: 18): x clamped
/// below at −88, n = round(x·log2 e) by the shift trick with the exponent's bias folded into
/// the shift (the low bits of the shifted sum hold n + 127, which shifted left by 23 are the
/// bits of 2^n: 0 for n = −127, +∞ for n = 128), f = x·log2 e − n by one multiply-add and the
/// degree-5 polynomial for 2^f, then p·2^n by one product. Below about −87.7 the result is 0,
/// as [`exp`] flushes it; from there to −87.3 the product is e^x's subnormal value. Where the
/// clamp, a mask of the lanes below it and the exponent added as an integer took four
/// operations, this takes two: the fused softmax on AVX2 is as much arithmetic as memory
/// stream. Step by step over the `N` vectors (why: [`reduce_poly_avx2_n`]).
///
/// # Safety
/// The CPU must support AVX2 and FMA (the callers dispatch on the detected SIMD level).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub fn exp_v_avx2_n<M: MulAdd, const N: usize>(
    x: [std::arch::x86_64::__m256; N],
) -> [std::arch::x86_64::__m256; N] {
    use std::arch::x86_64::*;
    let mut c = [_mm256_setzero_ps(); N];
    for k in 0..N {
        // vmaxps returns the second operand when either is NaN: the argument goes second.
        c[k] = _mm256_max_ps(_mm256_set1_ps(-88.0), x[k]);
    }
    let (p, two_n) = reduce_poly_avx2_n::<M, N>(c, [_mm256_set1_ps(LOG2E); N]);
    let mut out = [_mm256_setzero_ps(); N];
    for k in 0..N {
        out[k] = _mm256_mul_ps(p[k], two_n[k]);
    }
    out
}

/// `N` vectors of 2^{x·q} on AVX2+FMA as p and 2^n ([`reduce_poly_avx2_n`] with FMA, where any
/// factor q holds), the product x·q never rounded. For a caller that has e^{c·x} with a factor
/// q = c·log2 e it computes anyway (the GELU gate's −2·√(2/π)·log2 e·(1 + 0.044715·x²)): the
/// product that would make its argument c·x is the FMAs' own, one instruction fewer; and a
/// caller that wants 1 + p·2^n has it in one more FMA. The caller keeps x·q in [−127, 128.5):
/// below, 2^n's bits are not a power of two; where n is 128, 2^n is +∞.
///
/// # Safety
/// The CPU must support AVX2 and FMA (the callers dispatch on the detected SIMD level).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub fn exp2_product_avx2_n<const N: usize>(
    x: [std::arch::x86_64::__m256; N],
    q: [std::arch::x86_64::__m256; N],
) -> (
    [std::arch::x86_64::__m256; N],
    [std::arch::x86_64::__m256; N],
) {
    reduce_poly_avx2_n::<Fused, N>(x, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f32, b: f64) -> f64 {
        ((a as f64 - b) / b.abs().max(1e-30)).abs()
    }

    /// Both multiply-adds: the fused one of every detected level, and the separate one of
    /// `avx2-nofma`.
    #[test]
    fn exp_is_accurate_over_its_range() {
        exp_is_accurate_with::<Fused>();
        exp_is_accurate_with::<Separate>();
    }

    fn exp_is_accurate_with<M: MulAdd>() {
        let exp = exp::<M>;
        let mut worst: f64 = 0.0;
        let mut x = -87.0f32;
        while x < 88.0 {
            worst = worst.max(rel(exp(x), (x as f64).exp()));
            x += 0.013;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp(100.0), f32::INFINITY);
        assert_eq!(exp(-100.0), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn gelu_silu_tanh_match_f64() {
        gelu_silu_tanh_match_f64_with::<Fused>();
        gelu_silu_tanh_match_f64_with::<Separate>();
    }

    fn gelu_silu_tanh_match_f64_with<M: MulAdd>() {
        let (gelu, silu, tanh) = (gelu::<M>, silu::<M>, tanh::<M>);
        let mut x = -12.0f32;
        while x < 12.0 {
            let xd = x as f64;
            let g = 0.5
                * xd
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3))).tanh());
            assert!(
                (gelu(x) as f64 - g).abs() <= 1e-6 + 1e-5 * g.abs(),
                "gelu({x})"
            );
            let s = xd / (1.0 + (-xd).exp());
            assert!(
                (silu(x) as f64 - s).abs() <= 1e-6 + 1e-5 * s.abs(),
                "silu({x})"
            );
            assert!((tanh(x) as f64 - xd.tanh()).abs() <= 2e-7, "tanh({x})");
            x += 0.0371;
        }
        assert!(gelu(f32::NAN).is_nan() && silu(f32::NAN).is_nan() && relu(f32::NAN).is_nan());
        assert_eq!(relu(-1.0), 0.0);
        assert_eq!(relu(2.0), 2.0);
    }

    /// The slice kernels (the AVX-512 one where the CPU has it) agree with the f64 definitions
    /// to the same tolerance as the scalar functions, keep NaN, saturate at the extremes, and
    /// give every element the same bits wherever a slice starts and ends (masked tails).
    #[test]
    fn gate_slices_match_f64_and_do_not_depend_on_slice_bounds() {
        let src: Vec<f32> = (0..3001).map(|i| -30.0 + i as f32 * 0.0199).collect();
        for gate in [Gate::Gelu, Gate::Silu] {
            let mut whole = vec![f32::NAN; src.len()];
            gate_slice(gate, &mut whole, &src);
            for (i, (&x, &y)) in src.iter().zip(&whole).enumerate() {
                let xd = x as f64;
                let want = match gate {
                    Gate::Gelu => {
                        let u = (2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3));
                        0.5 * xd * (1.0 + u.tanh())
                    }
                    Gate::Silu => xd / (1.0 + (-xd).exp()),
                };
                assert!(
                    (y as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs(),
                    "{gate:?}({x}) = {y}, want {want} (element {i})"
                );
            }
            // Odd-sized pieces at odd offsets: bit-identical to the whole-slice result.
            let mut pieces = vec![f32::NAN; src.len()];
            let mut at = 0;
            for len in (1..).map(|k| (k * 7) % 45 + 1) {
                let end = (at + len).min(src.len());
                gate_slice(gate, &mut pieces[at..end], &src[at..end]);
                at = end;
                if at == src.len() {
                    break;
                }
            }
            for i in 0..src.len() {
                assert_eq!(
                    pieces[i].to_bits(),
                    whole[i].to_bits(),
                    "{gate:?} element {i}"
                );
            }
            let special = [f32::NAN, 0.0, -0.0, 1e30, -1e30, f32::INFINITY];
            let mut out = [0f32; 6];
            gate_slice(gate, &mut out, &special);
            assert!(out[0].is_nan(), "{gate:?} keeps NaN");
            assert_eq!(out[1], 0.0);
            assert_eq!(out[3], 1e30, "{gate:?} saturates to x");
            // The vector kernel gives the limit, 0; the scalar one x/e^88.72, under 1e-8 here.
            assert!(
                out[4] <= 0.0 && out[4] > -1e-8,
                "{gate:?}(-1e30) = {}",
                out[4]
            );
            if crate::device::simd::level() == crate::device::simd::SimdLevel::Avx512 {
                assert_eq!(out[4], 0.0, "{gate:?}(-1e30)");
            }
            assert_eq!(out[5], f32::INFINITY);
            // An empty slice is a no-op.
            gate_slice(gate, &mut [], &[]);
        }
    }
}
