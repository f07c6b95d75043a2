//! The SIMD level of this CPU: the widest instruction set its kernels may use, detected at run
//! time and capped by `OPLEDGER_SIMD=scalar|avx2|avx512` (to test the fallbacks). Part of the
//! device's identity: baselines are kept per SIMD level.

use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    Scalar,
    Avx2Fma,
    Avx512,
}

impl SimdLevel {
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2Fma => "avx2+fma",
            SimdLevel::Avx512 => "avx512f",
        }
    }
    /// f32 lanes of one vector register.
    pub fn f32_lanes(self) -> usize {
        match self {
            SimdLevel::Scalar => 1,
            SimdLevel::Avx2Fma => 8,
            SimdLevel::Avx512 => 16,
        }
    }
}

/// The variable that caps the SIMD level.
pub const SIMD_VAR: &str = "OPLEDGER_SIMD";

/// The cap `OPLEDGER_SIMD` sets: `scalar`, `avx2`, `avx512` or `native` (unset or empty: none).
/// Any other value is refused, so that a misspelt cap never measures silently at full width.
pub fn cap() -> Result<SimdLevel, String> {
    match std::env::var(SIMD_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(SimdLevel::Avx512),
        Ok(v) => match v.trim() {
            "scalar" => Ok(SimdLevel::Scalar),
            "avx2" => Ok(SimdLevel::Avx2Fma),
            "avx512" | "native" | "" => Ok(SimdLevel::Avx512),
            other => Err(format!(
                "{SIMD_VAR}={other:?}: expected scalar, avx2, avx512 or native"
            )),
        },
        Err(std::env::VarError::NotUnicode(v)) => Err(format!(
            "{SIMD_VAR}={v:?}: expected scalar, avx2, avx512 or native"
        )),
    }
}

/// The widest level this CPU supports, capped by `OPLEDGER_SIMD` (checked by [`cap`] before a
/// CPU backend is chosen).
pub fn level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| detect().min(cap().unwrap_or(SimdLevel::Avx512)))
}

/// Whether this CPU runs `l`'s instructions, whatever `OPLEDGER_SIMD` caps (tests run every
/// path the CPU has).
pub fn supports(l: SimdLevel) -> bool {
    l <= detect()
}

#[cfg(target_arch = "x86_64")]
fn detect() -> SimdLevel {
    if is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
    {
        SimdLevel::Avx512
    } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        SimdLevel::Avx2Fma
    } else {
        SimdLevel::Scalar
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> SimdLevel {
    SimdLevel::Scalar
}
