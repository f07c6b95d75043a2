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

/// Asks for the cache line holding `p` to be brought into L2 (x86-64; a no-op elsewhere). A
/// prefetch never faults, so `p` may point anywhere.
#[inline(always)]
pub fn prefetch_l2(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetcht1 is a hint with no architectural effect; SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Copies `src` into `dst` with non-temporal (streaming) stores where the CPU has them: the
/// destination lines are written without being read first (no write-allocate traffic) and do
/// not evict useful data. For outputs far larger than the cache. Call [`store_fence`] before
/// another thread reads `dst`.
pub fn stream_copy(dst: &mut [f32], src: &[f32]) {
    stream_scale(dst, src, 1.0);
}

/// `dst = src · s`, written as [`stream_copy`] writes (`s = 1` copies exactly: x · 1 = x for
/// every f32, NaN included).
pub fn stream_scale(dst: &mut [f32], src: &[f32], s: f32) {
    let n = dst.len().min(src.len());
    match level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: level() returns Avx512 only when the CPU reports avx512f.
        SimdLevel::Avx512 => unsafe { stream_scale_avx512(&mut dst[..n], &src[..n], s) },
        _ => {
            for (d, &v) in dst[..n].iter_mut().zip(&src[..n]) {
                *d = v * s;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn stream_scale_avx512(dst: &mut [f32], src: &[f32], s: f32) {
    use std::arch::x86_64::*;
    let n = dst.len();
    // Plain stores up to the first 64-byte boundary, streaming stores for whole lines, plain
    // stores for the tail.
    let head = (dst.as_ptr().align_offset(64)).min(n);
    for (d, &v) in dst[..head].iter_mut().zip(&src[..head]) {
        *d = v * s;
    }
    let sv = _mm512_set1_ps(s);
    let mut i = head;
    while i + 16 <= n {
        // The source is prefetched 4 KiB ahead, as the register kernels do (a no-op cost when
        // it is an L1 tile; a prefetch never faults, so the address may run past the end).
        _mm_prefetch::<_MM_HINT_T0>(
            src.as_ptr().wrapping_add(i + super::vector::PREFETCH_ELEMS) as *const i8
        );
        // SAFETY: i + 16 <= n bounds both slices; dst + i is 64-byte aligned (head aligned it
        // and each step adds 64 bytes), as _mm512_stream_ps requires.
        unsafe {
            let v = _mm512_mul_ps(_mm512_loadu_ps(src.as_ptr().add(i)), sv);
            _mm512_stream_ps(dst.as_mut_ptr().add(i), v);
        }
        i += 16;
    }
    for (d, &v) in dst[i..].iter_mut().zip(&src[i..]) {
        *d = v * s;
    }
}

/// Orders this thread's streaming stores before any later store (and before the task ends).
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    if level() == SimdLevel::Avx512 {
        // SAFETY: sfence has no preconditions; SSE is part of x86_64.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
}

/// A heap buffer of f32 whose first element sits on a 64-byte cache-line boundary, backed by
/// transparent huge pages where the OS offers them.
///
/// - Alignment: streaming stores need whole aligned lines. A `Vec<f32>` from the allocator
///   starts 16 bytes into a line, so every tile written into it would begin and end with a
///   partial line of plain stores — a read-for-ownership of that line and a mix of cached and
///   non-temporal stores to it. Measured on bias+ReLU 8192² (a throwaway microbenchmark of the
///   fused tile loop, 2 threads, 9 timings per variant): 27–29 GB/s median into an aligned
///   output, 21–24 GB/s into one offset by 16 bytes.
/// - Huge pages: a 256 MiB tensor is 65 536 pages of 4 KiB; streaming it walks the page tables
///   every 4 KiB. Linux's `madvise(MADV_HUGEPAGE)` asks for 2 MiB pages (honoured when
///   `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or `madvise`; the environment
///   manifest records it). Measured (same microbenchmark, 18 timings per kernel): triad
///   33.0 → 36.3 GB/s median, copy 30.5 → 36.2, fused bias+GELU 27.3 → 30.7.
pub struct LineVec {
    buf: Vec<f32>,
    off: usize,
    len: usize,
}

/// f32 elements per cache line; the most a buffer has to be shifted to reach a line boundary.
const LINE_F32: usize = 16;

impl LineVec {
    /// `len` copies of `value`, the first on a cache-line boundary.
    pub fn filled(len: usize, value: f32) -> Self {
        let total = len + LINE_F32 - 1;
        let mut buf: Vec<f32> = Vec::with_capacity(total);
        // The advice must come before the pages are first touched (by the fill below).
        advise_huge_pages(buf.as_mut_ptr(), total);
        buf.resize(total, value);
        // An f32 pointer is 4-byte aligned, so at most 15 elements separate it from a line
        // boundary; `min` keeps the slice in bounds even if align_offset gave up (it may).
        let off = buf.as_ptr().align_offset(64).min(LINE_F32 - 1);
        LineVec { buf, off, len }
    }
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        Self::filled(len, 0.0)
    }
}

/// Buffers from this size up ask for huge pages (smaller ones would not fill a 2 MiB page).
const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// Asks the kernel to back the 2 MiB-aligned part of `[ptr, ptr + len)` with huge pages. Only
/// advice: where it is refused or unsupported the buffer keeps normal pages.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut f32, len: usize) {
    const HUGE: usize = 2 << 20;
    let bytes = len * std::mem::size_of::<f32>();
    if bytes < HUGE_PAGE_MIN_BYTES {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + bytes) & !(HUGE - 1);
    if end > start {
        // SAFETY: [start, end) lies inside the allocation `ptr` points to (rounded inwards to
        // page boundaries, as madvise requires); MADV_HUGEPAGE changes no contents and no
        // mapping the program relies on, only the page size the kernel uses.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut f32, _len: usize) {}

impl std::ops::Deref for LineVec {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for LineVec {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

impl std::fmt::Debug for LineVec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineVec").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_vec_starts_on_a_cache_line_and_has_the_requested_length() {
        for len in [0, 1, 15, 16, 17, 1000, 1 << 20] {
            let mut v = LineVec::filled(len, 2.5);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 2.5));
            if len > 0 {
                assert_eq!(v.as_ptr() as usize % 64, 0, "len {len}");
            }
            v.iter_mut().for_each(|x| *x = 1.0);
            assert_eq!(v.iter().sum::<f32>(), len as f32);
        }
    }
}
