//! Runtime CPU-feature dispatch. Kernels are written once as plain loops and compiled three
//! times (AVX-512, AVX2+FMA, baseline) by [`multiversion!`]; the widest level this CPU supports
//! is picked at run time, so one binary runs everywhere (no `-C target-cpu=native`).
//! `OPLEDGER_SIMD=scalar|avx2|avx512` caps the level (to test the fallbacks).

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

/// The widest level this CPU supports, capped by `OPLEDGER_SIMD`.
pub fn level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let detected = detect();
        let cap = match std::env::var("OPLEDGER_SIMD").as_deref() {
            Ok("scalar") => SimdLevel::Scalar,
            Ok("avx2") => SimdLevel::Avx2Fma,
            _ => SimdLevel::Avx512,
        };
        detected.min(cap)
    })
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

/// Defines `fn name(args) -> ret { body }` compiled for each [`SimdLevel`] and dispatched at run
/// time. The body must call only `#[inline(always)]` helpers so they are compiled with the same
/// features.
#[macro_export]
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            fn avx512($($arg: $ty),*) $(-> $ret)? { generic($($arg),*) }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn avx2($($arg: $ty),*) $(-> $ret)? { generic($($arg),*) }

            match $crate::backend::cpu::simd::level() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: level() returns Avx512 only when the CPU reports avx512f, avx512vl, avx2 and fma.
                $crate::backend::cpu::simd::SimdLevel::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: level() returns Avx2Fma only when the CPU reports avx2 and fma.
                $crate::backend::cpu::simd::SimdLevel::Avx2Fma => unsafe { avx2($($arg),*) },
                _ => generic($($arg),*),
            }
        }
    };
}

/// Copies `src` into `dst` with non-temporal (streaming) stores where the CPU has them: the
/// destination lines are written without being read first (no write-allocate traffic) and do
/// not evict useful data. For outputs far larger than the cache. Call [`store_fence`] before
/// another thread reads `dst`.
pub fn stream_copy(dst: &mut [f32], src: &[f32]) {
    let n = dst.len().min(src.len());
    match level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: level() returns Avx512 only when the CPU reports avx512f.
        SimdLevel::Avx512 => unsafe { stream_copy_avx512(&mut dst[..n], &src[..n]) },
        _ => dst[..n].copy_from_slice(&src[..n]),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn stream_copy_avx512(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::*;
    let n = dst.len();
    // Plain stores up to the first 64-byte boundary, streaming stores for whole lines, plain
    // stores for the tail.
    let head = (dst.as_ptr().align_offset(64)).min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let mut i = head;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n bounds both slices; dst + i is 64-byte aligned (head aligned it
        // and each step adds 64 bytes), as _mm512_stream_ps requires.
        unsafe {
            let v = _mm512_loadu_ps(src.as_ptr().add(i));
            _mm512_stream_ps(dst.as_mut_ptr().add(i), v);
        }
        i += 16;
    }
    dst[i..].copy_from_slice(&src[i..]);
}

/// Orders this thread's streaming stores before any later store (and before the task ends).
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx512 {
        // SAFETY: sfence has no preconditions; SSE is part of x86_64.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
}
