//! Vectorizable f32 math for the CPU kernels. libm calls do not vectorize, so exp is a
//! Cody–Waite range reduction with a degree-6 polynomial (Cephes `expf` coefficients, relative
//! error about 1e-7) built from operations LLVM turns into SIMD; tanh, GELU and SiLU derive from
//! it. Everything is `#[inline(always)]` so it is compiled with the caller's target features;
//! `mul_add` becomes one FMA instruction under AVX2/AVX-512 (the baseline build, on CPUs without
//! FMA, pays a library call: it is the slow fallback).
//! NaN propagates through every function (NaN never passes a check silently).

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// e^x for f32.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
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
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let r2 = r * r;
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5);
    let e = r2.mul_add(p, 1.0 + r);
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
pub fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

/// GELU, tanh form (as PyTorch `approximate="tanh"` and most fused kernels).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
                                // 0.5·x·(1 + tanh(u)) = x·σ(2u) = x / (1 + e^{−2u}): one exp and one division.
    let x2 = x * x;
    let u = C * x * 0.044_715f32.mul_add(x2, 1.0);
    x / (1.0 + exp(-2.0 * u))
}

/// SiLU: x·σ(x).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f32, b: f64) -> f64 {
        ((a as f64 - b) / b.abs().max(1e-30)).abs()
    }

    #[test]
    fn exp_is_accurate_over_its_range() {
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
}
