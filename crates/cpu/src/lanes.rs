//! The SIMD vector the register kernels ([`super::vector`]) are written against, implemented
//! for AVX-512 (`__m512`, 16 lanes), AVX2+FMA (`__m256`, 8 lanes) and AVX2 without FMA
//! ([`NoFma256`], the level counted sides run at). A kernel is written once,
//! generic over [`Lanes`], and instantiated inside a `#[target_feature]` function per level:
//! every method is `#[inline(always)]`, so it is compiled into that function with its features
//! (the intrinsics inline there; no call per vector operation).
//!
//! Where AVX2 lacks an AVX-512 instruction the gate uses substitutes: 2^n built in the exponent
//! bits by a shift (and a product) instead of `vscalefps`, a clamp of x where e^{−z} would
//! overflow instead of a mask register that zeroes those lanes, `vmaskmovps` for partial
//! vectors. Its x/d is one `vdivps` (the divider runs beside the FMA pipes; an estimate and a
//! Newton step took three more instructions from the issue slots that bound this gate on 8
//! lanes).

#![cfg(target_arch = "x86_64")]

use super::math::{Fused, MulAdd, Separate, GELU_Q0, GELU_Q2, GELU_X_MAX, SILU_X_MAX};
use std::arch::x86_64::*;

const GELU_C: f32 = 0.797_884_6; // √(2/π)

/// One SIMD vector of f32 lanes.
///
/// # Safety
/// Every method needs the CPU features of its implementation (avx512f, or avx2 and fma): call
/// them only from functions compiled with those features. Pointer methods read or write
/// `LANES` values (or the first `m`) at the pointer.
// Every method shares the trait's safety contract above.
#[allow(clippy::missing_safety_doc)]
pub unsafe trait Lanes: Copy {
    const LANES: usize;
    /// How [`Lanes::fmadd`] computes, for the scalar tails of a kernel written against `Self`.
    type MulAdd: MulAdd;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(p: *mut f32, v: Self);
    /// A non-temporal store; `p` is aligned to the vector's size.
    unsafe fn stream(p: *mut f32, v: Self);
    /// The first `m < LANES` values at `p` (others zero); nothing past them is read.
    unsafe fn load_first(p: *const f32, m: usize) -> Self;
    /// Writes the first `m < LANES` lanes at `p`; nothing past them is written.
    unsafe fn store_first(p: *mut f32, m: usize, v: Self);
    unsafe fn splat(x: f32) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    /// The larger of each lane (`b` where either is NaN, as `vmaxps`).
    unsafe fn max(a: Self, b: Self) -> Self;
    /// a·b + c, one rounding.
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self;
    /// max(0, v), keeping NaN and −0 as the scalar relu does.
    unsafe fn relu(v: Self) -> Self;
    /// x·σ(z) = x / (1 + e^{−z}): GELU (tanh form) when `GELU`, else SiLU.
    unsafe fn gate<const GELU: bool>(x: Self) -> Self;
    /// [`Lanes::gate`] on four vectors, each lane's result the same as `gate`'s.
    #[inline(always)]
    unsafe fn gate4<const GELU: bool>(x: [Self; 4]) -> [Self; 4] {
        unsafe {
            [
                Self::gate::<GELU>(x[0]),
                Self::gate::<GELU>(x[1]),
                Self::gate::<GELU>(x[2]),
                Self::gate::<GELU>(x[3]),
            ]
        }
    }
}

// SAFETY: the methods are used only under avx512f (see the trait's contract).
unsafe impl Lanes for __m512 {
    const LANES: usize = 16;
    type MulAdd = Fused;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn stream(p: *mut f32, v: Self) {
        unsafe { _mm512_stream_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, m: usize) -> Self {
        unsafe { _mm512_maskz_loadu_ps(((1u32 << m) - 1) as __mmask16, p) }
    }
    #[inline(always)]
    unsafe fn store_first(p: *mut f32, m: usize, v: Self) {
        unsafe { _mm512_mask_storeu_ps(p, ((1u32 << m) - 1) as __mmask16, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn relu(v: Self) -> Self {
        // vmaxps returns its second operand when either is NaN, and −0 for (0, −0).
        unsafe { _mm512_max_ps(_mm512_setzero_ps(), v) }
    }
    #[inline(always)]
    unsafe fn gate<const GELU: bool>(x: Self) -> Self {
        unsafe { super::math::gate_v::<GELU>(x) }
    }
    #[inline(always)]
    unsafe fn gate4<const GELU: bool>(x: [Self; 4]) -> [Self; 4] {
        unsafe { super::math::gate_v_n::<GELU, 4>(x) }
    }
}

// SAFETY: the methods are used only under avx2 and fma (see the trait's contract).
unsafe impl Lanes for __m256 {
    const LANES: usize = 8;
    type MulAdd = Fused;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn stream(p: *mut f32, v: Self) {
        unsafe { _mm256_stream_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, m: usize) -> Self {
        // vmaskmovps reads only the enabled lanes (no fault past them).
        unsafe { _mm256_maskload_ps(p, first_lanes(m)) }
    }
    #[inline(always)]
    unsafe fn store_first(p: *mut f32, m: usize, v: Self) {
        unsafe { _mm256_maskstore_ps(p, first_lanes(m), v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        unsafe { Fused::v256(a, b, c) }
    }
    #[inline(always)]
    unsafe fn relu(v: Self) -> Self {
        unsafe { _mm256_max_ps(_mm256_setzero_ps(), v) }
    }
    #[inline(always)]
    unsafe fn gate<const GELU: bool>(x: Self) -> Self {
        unsafe { gate_avx2_n::<Fused, GELU, 1>([x])[0] }
    }
    #[inline(always)]
    unsafe fn gate4<const GELU: bool>(x: [Self; 4]) -> [Self; 4] {
        unsafe { gate_avx2_n::<Fused, GELU, 4>(x) }
    }
}

/// AVX2's eight lanes with every multiply-add a multiply and an add ([`Separate`]): the vector
/// of the `avx2-nofma` level counted sides run at. Every other method is `__m256`'s.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct NoFma256(pub __m256);

// SAFETY: the methods are used only under avx2 and fma, as __m256's (see the trait's contract).
unsafe impl Lanes for NoFma256 {
    const LANES: usize = 8;
    type MulAdd = Separate;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { NoFma256(__m256::load(p)) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        unsafe { __m256::store(p, v.0) }
    }
    #[inline(always)]
    unsafe fn stream(p: *mut f32, v: Self) {
        unsafe { __m256::stream(p, v.0) }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, m: usize) -> Self {
        unsafe { NoFma256(__m256::load_first(p, m)) }
    }
    #[inline(always)]
    unsafe fn store_first(p: *mut f32, m: usize, v: Self) {
        unsafe { __m256::store_first(p, m, v.0) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { NoFma256(__m256::splat(x)) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        unsafe { NoFma256(__m256::add(a.0, b.0)) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        unsafe { NoFma256(__m256::mul(a.0, b.0)) }
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        unsafe { NoFma256(__m256::max(a.0, b.0)) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        unsafe { NoFma256(Separate::v256(a.0, b.0, c.0)) }
    }
    #[inline(always)]
    unsafe fn relu(v: Self) -> Self {
        unsafe { NoFma256(__m256::relu(v.0)) }
    }
    #[inline(always)]
    unsafe fn gate<const GELU: bool>(x: Self) -> Self {
        unsafe { NoFma256(gate_avx2_n::<Separate, GELU, 1>([x.0])[0]) }
    }
    #[inline(always)]
    unsafe fn gate4<const GELU: bool>(x: [Self; 4]) -> [Self; 4] {
        unsafe { gate_avx2_n::<Separate, GELU, 4>(x.map(|v| v.0)).map(NoFma256) }
    }
}

/// x·σ(z) = x / (1 + e^{−z}) on `N` vectors with AVX2's instructions, step by step (why:
/// `math::reduce_poly_avx2_n`); each lane's operations are the same for any `N`.
///
/// Where AVX-512 zeroes the lanes whose e^{−z} would overflow by a mask register, this clamps
/// x from below where −z·log2 e rounds to 128 ([`GELU_X_MIN`], [`SILU_X_MIN`]): there the
/// exponential's 2^n is +∞ (its exponent bits all ones), so x/(1 + ∞) is −0 for every x at or
/// below it, −∞ included, and above it the quotient is the true value, normal (|x|/e^{88.4} >
/// 2^−126). A compare and a masking `vandnps` fewer, and the mask's register free: the four
/// vectors' masks, arguments, exponents and polynomials did not fit AVX2's 16 registers. NaN
/// stays NaN (`vmaxps` and `vminps` return their second operand, the argument, when either is
/// NaN); +∞ gives +∞.
///
/// With FMA, −z·log2 e is x·q, q = −2·√(2/π)·log2 e·(1 + 0.044715·x²) for GELU (−log2 e for
/// SiLU), whose product [`super::math::exp2_product_avx2_n`]'s FMAs form unrounded in place of
/// the argument's last product (SiLU's negation); x is held above at [`GELU_X_MAX`] /
/// [`SILU_X_MAX`] in place of the clamp of −z (e^{−z} < 2^−90 there, so 1 + e^{−z} is 1 and the
/// result x itself; it keeps x·q above −126); and 1 + p·2^n is one FMA: 15 instructions a
/// vector where the compare-and-mask form took 18. Without FMA (`avx2-nofma`) x·q would be
/// rounded before n is taken from it, so that level computes −z and takes
/// [`super::math::exp_v_avx2_n`] of it.
///
/// # Safety
/// The caller is compiled with avx2 and fma.
#[inline(always)]
unsafe fn gate_avx2_n<M: MulAdd, const GELU: bool, const N: usize>(x: [__m256; N]) -> [__m256; N] {
    unsafe {
        let one = _mm256_set1_ps(1.0);
        let lo = _mm256_set1_ps(if GELU { GELU_X_MIN } else { SILU_X_MIN });
        let mut xl = [_mm256_setzero_ps(); N];
        for k in 0..N {
            xl[k] = _mm256_max_ps(lo, x[k]);
        }
        let mut d = [one; N];
        if M::FUSED {
            let hi = _mm256_set1_ps(if GELU { GELU_X_MAX } else { SILU_X_MAX });
            let mut xa = [_mm256_setzero_ps(); N];
            let mut q = [_mm256_set1_ps(-std::f32::consts::LOG2_E); N];
            for k in 0..N {
                xa[k] = _mm256_min_ps(hi, xl[k]);
                if GELU {
                    let a = _mm256_set1_ps(GELU_Q0);
                    let b = _mm256_set1_ps(GELU_Q2);
                    q[k] = _mm256_fmadd_ps(b, _mm256_mul_ps(xa[k], xa[k]), a);
                }
            }
            // 1 + p·2^n in one FMA: 2^n = +∞ gives +∞, 2^n = 0 gives 1.
            let (p, two_n) = super::math::exp2_product_avx2_n::<N>(xa, q);
            for k in 0..N {
                d[k] = _mm256_fmadd_ps(p[k], two_n[k], one);
            }
        } else {
            let mut mz = [_mm256_setzero_ps(); N];
            for k in 0..N {
                // −z: −2u for GELU (u = C·x·(1 + 0.044715·x²)), −x for SiLU.
                mz[k] = if GELU {
                    let a = _mm256_set1_ps(-2.0 * GELU_C);
                    let b = _mm256_set1_ps(-2.0 * GELU_C * 0.044_715);
                    _mm256_mul_ps(xl[k], M::v256(b, _mm256_mul_ps(xl[k], xl[k]), a))
                } else {
                    _mm256_sub_ps(_mm256_setzero_ps(), xl[k])
                };
            }
            // −z ≤ 88.7 here: e^{−z} is finite, or +∞ where n = 128; below −88 it is 0.
            let e = super::math::exp_v_avx2_n::<M, N>(mz);
            for k in 0..N {
                d[k] = _mm256_add_ps(one, e[k]);
            }
        }
        let mut out = [_mm256_setzero_ps(); N];
        for k in 0..N {
            out[k] = _mm256_div_ps(xl[k], d[k]);
        }
        out
    }
}

/// The x below which AVX2's GELU is −0: −z = 2·√(2/π)·(x + 0.044715·x³) is 88.70 there in f32,
/// −z·log2 e 127.97, so n = 128 with a margin of ±0.5 either way (±0.015 in x).
const GELU_X_MIN: f32 = -10.06;
/// The same for SiLU (−z = −x): −z·log2 e 128.00.
const SILU_X_MIN: f32 = -88.72;

/// The vmaskmovps mask enabling lanes 0..m.
#[inline(always)]
unsafe fn first_lanes(m: usize) -> __m256i {
    unsafe {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(m as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }
}
