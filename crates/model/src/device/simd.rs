//! The SIMD level of this CPU: the widest instruction set its kernels may use, detected at run
//! time and capped by `OPLEDGER_SIMD=scalar|avx2|avx2-nofma|avx512` (to test the fallbacks; read once by
//! `settings`, installed here by the command line). Part of the device's identity: baselines
//! are kept per SIMD level.

use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    Scalar,
    /// AVX2's vectors with every multiply-add computed as a multiply and an add (no FMA
    /// instruction): the level counted sides run at. Valgrind 3.19 executes an FMA lane by lane
    /// in a helper that saves and restores the floating-point control register twice, which
    /// made FMA four fifths of an attention side's counting time (docs/counts.md). Never
    /// chosen by detection; `OPLEDGER_SIMD=avx2-nofma` asks for it.
    Avx2NoFma,
    Avx2Fma,
    Avx512,
}

impl SimdLevel {
    /// Every level, narrowest first (the tests run each one the CPU has).
    pub const ALL: [SimdLevel; 4] = [
        SimdLevel::Scalar,
        SimdLevel::Avx2NoFma,
        SimdLevel::Avx2Fma,
        SimdLevel::Avx512,
    ];
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2NoFma => "avx2-nofma",
            SimdLevel::Avx2Fma => "avx2+fma",
            SimdLevel::Avx512 => "avx512f",
        }
    }
    /// f32 lanes of one vector register.
    pub fn f32_lanes(self) -> usize {
        match self {
            SimdLevel::Scalar => 1,
            SimdLevel::Avx2NoFma | SimdLevel::Avx2Fma => 8,
            SimdLevel::Avx512 => 16,
        }
    }
}

static CAP: OnceLock<SimdLevel> = OnceLock::new();

/// Caps the SIMD level of this process's CPU kernels, as `OPLEDGER_SIMD` asks
/// ([`crate::settings::Settings`]). Called once, when a command starts and before any kernel
/// runs; a later call changes nothing.
pub fn install_cap(cap: crate::settings::SimdCap) {
    use crate::settings::SimdCap;
    let _ = CAP.set(match cap {
        SimdCap::Scalar => SimdLevel::Scalar,
        SimdCap::Avx2NoFma => SimdLevel::Avx2NoFma,
        SimdCap::Avx2 => SimdLevel::Avx2Fma,
        SimdCap::Native => SimdLevel::Avx512,
    });
}

/// The widest level this CPU supports, capped as [`install_cap`] said (no cap where it was not
/// called). Inlined: the kernels (a crate of their own) dispatch on it at every call.
#[inline]
pub fn level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| detect().min(CAP.get().copied().unwrap_or(SimdLevel::Avx512)))
}

/// Whether this CPU runs `l`'s instructions, whatever `OPLEDGER_SIMD` caps (tests run every
/// path the CPU has).
#[inline]
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
