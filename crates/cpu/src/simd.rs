//! Runtime CPU-feature dispatch. Kernels are written once as plain loops and compiled three
//! times (AVX-512, AVX2+FMA, baseline) by [`multiversion!`]; the widest level this CPU supports
//! is picked at run time, so one binary runs everywhere (no `-C target-cpu=native`).
//! `OPLEDGER_SIMD=scalar|avx2|avx2-nofma|avx512` caps the level (to test the fallbacks).

pub use crate::device::simd::{level, supports, SimdLevel};
pub use crate::kinds::tensors::LineVec;

/// How far ahead of the current position the streamed inputs are prefetched: 4 KiB (measured:
/// 1 KiB 22–24 GB/s, 4 KiB 27–30, 8–16 KiB no better than 4).
pub const PREFETCH_ELEMS: usize = 1024;

/// Whether the streaming kernels of light arithmetic that stream two inputs or more (the
/// triad; chains without a GELU or SiLU; the add of add+RMSNorm) prefetch their inputs in
/// software. On some cores the hardware prefetchers alone stream several inputs faster, and
/// the software prefetches hold them back; on others the software prefetches help. The
/// bandwidth probe times its triad (two inputs) both ways and, where its arrays span memory,
/// decides this from the faster ([`decide_stream_prefetch`]). Until then, and in a process
/// that never probes (a counted one, whose counts must be the same on every machine), it is
/// on. Chains with a GELU or SiLU, and those of one input, prefetch always: measured faster
/// that way on every core tried.
static STREAM_PREFETCH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether light streaming kernels prefetch in software (see [`STREAM_PREFETCH`]).
pub fn stream_prefetch() -> bool {
    STREAM_PREFETCH.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sets whether light streaming kernels prefetch in software, for the kernels that start after.
fn set_stream_prefetch(on: bool) {
    STREAM_PREFETCH.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a probe has decided [`STREAM_PREFETCH`] for this process.
static STREAM_PREFETCH_DECIDED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Decides [`STREAM_PREFETCH`] from a probe's finding (`faster_with`: the triad streamed at
/// least as fast with software prefetches) if no probe has decided it yet, and returns what is
/// in force: one process, one form, so that its specs' kernels all run alike (a second probe
/// later in a run measures again, and changes nothing).
pub fn decide_stream_prefetch(faster_with: bool) -> bool {
    if !STREAM_PREFETCH_DECIDED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        set_stream_prefetch(faster_with);
    }
    stream_prefetch()
}

/// Defines `fn name(args) -> ret { body }` compiled for each [`SimdLevel`] and dispatched at run
/// time. The body must call only `#[inline(always)]` helpers so they are compiled with the same
/// features. In the body, `M` names the level's [`crate::math::MulAdd`] (`math::exp::<M>`):
/// [`crate::math::Fused`] at every level a CPU is detected at, [`crate::math::Separate`] at
/// `avx2-nofma`, whose instance is the AVX2 one with no FMA instruction in it.
#[macro_export]
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::extra_unused_type_parameters)]
            fn generic<M: $crate::math::MulAdd>($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            fn avx512($($arg: $ty),*) $(-> $ret)? { generic::<$crate::math::Fused>($($arg),*) }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn avx2<M: $crate::math::MulAdd>($($arg: $ty),*) $(-> $ret)? { generic::<M>($($arg),*) }

            match $crate::simd::level() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: level() returns Avx512 only when the CPU reports avx512f, avx512vl, avx2 and fma.
                $crate::simd::SimdLevel::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: level() returns Avx2Fma only when the CPU reports avx2 and fma.
                $crate::simd::SimdLevel::Avx2Fma => unsafe { avx2::<$crate::math::Fused>($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: level() returns Avx2NoFma only when the CPU reports avx2 and fma.
                $crate::simd::SimdLevel::Avx2NoFma => unsafe { avx2::<$crate::math::Separate>($($arg),*) },
                _ => generic::<$crate::math::Fused>($($arg),*),
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
        #[cfg(target_arch = "x86_64")]
        // SAFETY: level() returns Avx2Fma and Avx2NoFma only when the CPU reports avx2 and fma
        // (the kernel has no multiply-add: one instance serves both).
        SimdLevel::Avx2Fma | SimdLevel::Avx2NoFma => unsafe {
            stream_scale_avx2(&mut dst[..n], &src[..n], s)
        },
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
    // SAFETY: compiled with avx512f.
    unsafe { stream_scale_v::<std::arch::x86_64::__m512>(dst, src, s) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn stream_scale_avx2(dst: &mut [f32], src: &[f32], s: f32) {
    // SAFETY: compiled with avx2 and fma.
    unsafe { stream_scale_v::<std::arch::x86_64::__m256>(dst, src, s) }
}

/// # Safety
/// V's features are enabled; `src` holds at least `dst.len()` values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn stream_scale_v<V: super::lanes::Lanes>(dst: &mut [f32], src: &[f32], s: f32) {
    use std::arch::x86_64::*;
    let n = dst.len();
    // Plain stores up to the first 64-byte boundary, streaming stores for whole lines, plain
    // stores for the tail.
    let head = (dst.as_ptr().align_offset(64)).min(n);
    for (d, &v) in dst[..head].iter_mut().zip(&src[..head]) {
        *d = v * s;
    }
    // SAFETY: the caller's contract.
    let sv = unsafe { V::splat(s) };
    let mut i = head;
    while i + 16 <= n {
        // The source is prefetched 4 KiB ahead, as the register kernels do (a no-op cost when
        // it is an L1 tile; a prefetch never faults, so the address may run past the end).
        // SAFETY: prefetcht0 is a hint (SSE, part of x86_64).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(src.as_ptr().wrapping_add(i + PREFETCH_ELEMS) as *const i8)
        };
        for k in (0..16).step_by(V::LANES) {
            // SAFETY: i + 16 <= n bounds both slices; dst + i + k is aligned to the vector
            // (head aligned i to a line, each step adds a line), as the streaming store needs.
            unsafe {
                let v = V::mul(V::load(src.as_ptr().add(i + k)), sv);
                V::stream(dst.as_mut_ptr().add(i + k), v);
            }
        }
        i += 16;
    }
    for (d, &v) in dst[i..].iter_mut().zip(&src[i..]) {
        *d = v * s;
    }
}

/// A normalised row written out: `dst[i] = (src[i] − shift) · s · w[i] (+ b[i])` (no bias when
/// `b` is empty), with the streaming stores of [`stream_scale`], one line of each of `next`'s
/// rows (empty ones skipped) asked into L2 per line written (the next row's inputs arrive while
/// this row is written). One sweep where applying into a buffer and streaming the buffer out is
/// two. The arithmetic is the plain loop's, in its order (no fused multiply-add), so the result
/// is bit-identical to it.
pub fn stream_norm_apply(
    dst: &mut [f32],
    src: &[f32],
    shift: f32,
    s: f32,
    w: &[f32],
    b: &[f32],
    next: [&[f32]; 2],
) {
    stream_norm_apply_at(level(), dst, src, (shift, s), w, b, next)
}

/// [`stream_norm_apply`] at a given level (the tests run every level the CPU has).
pub fn stream_norm_apply_at(
    l: SimdLevel,
    dst: &mut [f32],
    src: &[f32],
    (shift, s): (f32, f32),
    w: &[f32],
    b: &[f32],
    next: [&[f32]; 2],
) {
    assert!(supports(l), "this CPU lacks {}", l.name());
    let n = dst.len().min(src.len()).min(w.len());
    let b = if b.len() >= n { &b[..n] } else { &[][..] };
    match l {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has avx512f (asserted above).
        SimdLevel::Avx512 => unsafe {
            stream_norm_apply_avx512(&mut dst[..n], &src[..n], shift, s, &w[..n], b, next)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has avx2 and fma (asserted above). No multiply-add in the kernel:
        // one instance serves both AVX2 levels.
        SimdLevel::Avx2Fma | SimdLevel::Avx2NoFma => unsafe {
            stream_norm_apply_avx2(&mut dst[..n], &src[..n], shift, s, &w[..n], b, next)
        },
        _ => {
            // No prefetch on the portable path: the hint is x86-64's.
            let _ = next;
            for i in 0..n {
                let v = (src[i] - shift) * s * w[i];
                dst[i] = if b.is_empty() { v } else { v + b[i] };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn stream_norm_apply_avx512(
    dst: &mut [f32],
    src: &[f32],
    shift: f32,
    s: f32,
    w: &[f32],
    b: &[f32],
    next: [&[f32]; 2],
) {
    // SAFETY: compiled with avx512f.
    unsafe { stream_norm_apply_v::<std::arch::x86_64::__m512>(dst, src, shift, s, w, b, next) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn stream_norm_apply_avx2(
    dst: &mut [f32],
    src: &[f32],
    shift: f32,
    s: f32,
    w: &[f32],
    b: &[f32],
    next: [&[f32]; 2],
) {
    // SAFETY: compiled with avx2 and fma.
    unsafe { stream_norm_apply_v::<std::arch::x86_64::__m256>(dst, src, shift, s, w, b, next) }
}

/// # Safety
/// V's features are enabled; `src` and `w` hold `dst.len()` values, `b` as many or none.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn stream_norm_apply_v<V: super::lanes::Lanes>(
    dst: &mut [f32],
    src: &[f32],
    shift: f32,
    s: f32,
    w: &[f32],
    b: &[f32],
    next: [&[f32]; 2],
) {
    let n = dst.len();
    let one = |i: usize| {
        let v = (src[i] - shift) * s * w[i];
        if b.is_empty() {
            v
        } else {
            v + b[i]
        }
    };
    let head = (dst.as_ptr().align_offset(64)).min(n);
    for (i, d) in dst[..head].iter_mut().enumerate() {
        *d = one(i);
    }
    // SAFETY: the caller's contract.
    let (shv, sv) = unsafe { (V::splat(-shift), V::splat(s)) };
    let mut i = head;
    while i + 16 <= n {
        for next in next {
            if i < next.len() {
                prefetch_l2(next.as_ptr().wrapping_add(i));
            }
        }
        for k in (0..16).step_by(V::LANES) {
            // SAFETY: i + 16 <= n bounds every slice read (the caller's contract) and dst; dst +
            // i + k is aligned to the vector (head aligned i to a line, each step adds a line),
            // as the streaming store needs. x + (−shift) is x − shift exactly.
            unsafe {
                let x = V::add(V::load(src.as_ptr().add(i + k)), shv);
                let mut v = V::mul(V::mul(x, sv), V::load(w.as_ptr().add(i + k)));
                if !b.is_empty() {
                    v = V::add(v, V::load(b.as_ptr().add(i + k)));
                }
                V::stream(dst.as_mut_ptr().add(i + k), v);
            }
        }
        i += 16;
    }
    for (j, d) in dst[i..].iter_mut().enumerate() {
        *d = one(i + j);
    }
}

/// Orders this thread's streaming stores before any later store (and before the task ends).
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    if level() >= SimdLevel::Avx2NoFma {
        // SAFETY: sfence has no preconditions; SSE is part of x86_64.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
}

#[cfg(test)]
mod norm_apply_tests {
    use super::*;

    /// Every level this CPU has writes what the plain loop writes, bit for bit, at every length
    /// and alignment, with and without a bias, and nothing outside `dst`.
    #[test]
    fn stream_norm_apply_matches_the_plain_loop_at_every_level() {
        let x: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let w: Vec<f32> = (0..3000).map(|i| 1.0 + (i as f32 * 0.11).cos()).collect();
        let b: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.05).sin()).collect();
        for l in SimdLevel::ALL {
            if !supports(l) {
                continue;
            }
            for (start, len) in [(0, 0), (0, 1), (3, 17), (0, 1024), (5, 2995), (16, 2000)] {
                for (shift, bias) in [(0.0f32, &[][..]), (0.25, &b[start..start + len])] {
                    let mut out = LineVec::filled(3000, f32::NAN);
                    let (xs, ws) = (&x[start..start + len], &w[start..start + len]);
                    stream_norm_apply_at(
                        l,
                        &mut out[start..start + len],
                        xs,
                        (shift, 0.7),
                        ws,
                        bias,
                        [&x, &w],
                    );
                    store_fence();
                    for i in 0..len {
                        let v = (xs[i] - shift) * 0.7 * ws[i];
                        let e = if bias.is_empty() { v } else { v + bias[i] };
                        assert_eq!(out[start + i].to_bits(), e.to_bits(), "{l:?} {start}+{i}");
                    }
                    assert!(out[..start]
                        .iter()
                        .chain(&out[start + len..])
                        .all(|v| v.is_nan()));
                }
            }
        }
    }
}

#[cfg(test)]
mod stream_prefetch_tests {
    use super::*;

    #[test]
    fn the_first_probe_decides_how_light_kernels_stream_and_later_ones_change_nothing() {
        // No other test of this crate decides it.
        assert!(!decide_stream_prefetch(false));
        assert!(
            !decide_stream_prefetch(true),
            "a second probe changes nothing"
        );
        assert!(!stream_prefetch());
    }
}
