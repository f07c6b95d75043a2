//! Measured ceilings of the CPU under test, taken in the same run as the cases they judge:
//! STREAM-style copy and triad bandwidth (all threads, arrays larger than the last-level cache)
//! and the FMA throughput peak (all threads, the widest SIMD this CPU has, enough independent
//! accumulators to hide the FMA latency). Each is the best of several repetitions spread over
//! at least [`MIN_PROBE_SECS`], as STREAM reports: a ceiling is what the machine can do, not
//! what it usually does. The triad is
//! written the way the elementwise kernels are (on AVX-512: registers, prefetched inputs,
//! non-temporal stores into cache-line-aligned huge-page buffers; elsewhere an L1 tile), so the
//! ceiling and the kernels pay the same store path (no write-allocate reads on either side) and
//! a kernel is never judged against a slower loop than its own. On the register path it is timed
//! with and without software prefetches of its inputs, in turns: the faster is the ceiling, and
//! decides how the light streaming kernels run (`simd::stream_prefetch`).

#[cfg(target_arch = "x86_64")]
use super::simd::SimdLevel;
use super::simd::{self, store_fence, stream_copy, LineVec};
use crate::device::Ceilings;
use crate::multiversion;
use rayon::prelude::*;
use std::hint::black_box;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct ProbeConfig {
    pub array_bytes: u64,
    pub reps: usize,
    /// FMA-loop iterations per thread per repetition.
    pub fma_iters: u64,
}

impl ProbeConfig {
    /// Arrays of two thirds of the last-level cache each (their three span twice it; at least
    /// 64 MiB), 5 repetitions.
    pub fn for_llc(llc_bytes: u64) -> Self {
        ProbeConfig {
            array_bytes: crate::device::default_probe_array_bytes(llc_bytes),
            reps: 5,
            fma_iters: 1 << 21,
        }
    }
}

const CHUNK: usize = 1 << 16;

/// Each ceiling's repetitions go on past `reps` until they have taken this long together (at
/// most [`MAX_REPS`] of them): arrays that fit in a cache time a repetition in a millisecond,
/// and six such repetitions can all fall in other processes' time slices on a busy machine (a
/// test suite's parallel runs once probed an 8 MiB triad at 2.9 and then 3.7 GB/s, a tenth of
/// the machine's memory triad), where dozens spread over this span find moments when every
/// thread runs. Memory-sized arrays take longer than this in their `reps`.
const MIN_PROBE_SECS: f64 = 0.05;
/// The most repetitions of one ceiling.
const MAX_REPS: usize = 500;

/// Whether a ceiling's repetitions stop after `done` of them, begun at `start`.
fn enough(done: usize, reps: usize, start: Instant) -> bool {
    done > reps && (done >= MAX_REPS || start.elapsed().as_secs_f64() >= MIN_PROBE_SECS)
}

multiversion! {
    fn triad_chunk(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
        for ((a, &b), &c) in a.iter_mut().zip(b).zip(c) {
            *a = M::f32(s, c, b);
        }
    }
}

/// `a = b + s·c` with streaming stores: in registers, its inputs prefetched in software with
/// `prefetch`, on AVX-512 and AVX2+FMA (the way the elementwise kernels run there), through an
/// L1 tile elsewhere. Call [`store_fence`]
/// before the result is read by another thread.
pub fn triad_streaming(a: &mut [f32], b: &[f32], c: &[f32], s: f32, prefetch: bool) {
    #[cfg(target_arch = "x86_64")]
    if super::vector::available() {
        super::vector::triad_stream(a, b, c, s, prefetch);
        return;
    }
    // The L1-tile path has no software prefetches to leave out.
    let _ = prefetch;
    let mut tile = [0f32; 1024];
    for ((a, b), c) in a.chunks_mut(1024).zip(b.chunks(1024)).zip(c.chunks(1024)) {
        let n = a.len();
        triad_chunk(&mut tile[..n], b, c, s);
        stream_copy(a, &tile[..n]);
    }
}

/// Measures copy, triad and FMA ceilings on the current rayon pool.
pub fn probe_cpu(cfg: &ProbeConfig) -> Ceilings {
    let n = (cfg.array_bytes / 4).max(CHUNK as u64) as usize;
    // Initialise in parallel so pages are spread as the kernels will touch them.
    let mut a = LineVec::zeroed(n);
    let mut b = LineVec::zeroed(n);
    let mut c = LineVec::zeroed(n);
    b.par_chunks_mut(CHUNK).for_each(|s| s.fill(1.0));
    c.par_chunks_mut(CHUNK).for_each(|s| s.fill(2.0));
    a.par_chunks_mut(CHUNK).for_each(|s| s.fill(0.0));
    let bytes = (n * 4) as f64;
    let reps = cfg.reps.max(1);
    // The triad's best with and without software prefetches ([`simd::stream_prefetch`]), the
    // two in turns; only the register kernels prefetch, elsewhere there is one form.
    let forms: &[bool] = if registers() { &[true, false] } else { &[true] };
    let mut best_triad = [f64::INFINITY; 2];
    let mut best_copy = f64::INFINITY;
    let (start, mut done) = (Instant::now(), 0);
    while !enough(done, reps, start) {
        done += 1;
        for (&with, best) in forms.iter().zip(best_triad.iter_mut()) {
            let t = Instant::now();
            a.par_chunks_mut(CHUNK)
                .zip(b.par_chunks(CHUNK))
                .zip(c.par_chunks(CHUNK))
                .for_each(|((a, b), c)| {
                    triad_streaming(a, b, c, 3.0, with);
                    store_fence();
                });
            *best = best.min(t.elapsed().as_secs_f64());
        }
        let t = Instant::now();
        c.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .for_each(|(c, a)| {
                stream_copy(c, a);
                store_fence();
            });
        best_copy = best_copy.min(t.elapsed().as_secs_f64());
    }
    black_box(&a);
    black_box(&c);
    let threads = rayon::current_num_threads();
    let (fma_flops, fma_secs) = fma_peak(cfg.fma_iters, reps);
    let [with, without] = best_triad;
    Ceilings {
        copy_bytes_per_sec: 2.0 * bytes / best_copy,
        triad_bytes_per_sec: 3.0 * bytes / with.min(without),
        fma_flops_per_sec: fma_flops / fma_secs,
        tensor_flops_per_sec: None,
        threads,
        array_bytes: (n * 4) as u64,
        stream_prefetch: registers().then(|| prefetch_streams_faster(with, without)),
    }
}

/// Whether the triad runs on the register kernels, which prefetch in software.
fn registers() -> bool {
    #[cfg(target_arch = "x86_64")]
    if super::vector::available() {
        return true;
    }
    false
}

/// Whether the triad streamed at least as fast with software prefetches (best times `with`
/// and `without`): without them only where that is 3% faster or more, so that two forms
/// within the noise of each other keep the one the kernels had.
fn prefetch_streams_faster(with_secs: f64, without_secs: f64) -> bool {
    without_secs >= 0.97 * with_secs
}

/// One thread's share of an FMA repetition: when it began after the repetition's start, how
/// long it ran by the wall clock and by its own CPU clock.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ThreadRep {
    start_secs: f64,
    wall_secs: f64,
    cpu_secs: f64,
}

/// Whether every thread ran throughout an FMA repetition of `rep_secs`: each one began within
/// a tenth of it, and was on its CPU for at least nine tenths of its own wall time. A VM's
/// virtual CPU taken away by its host for a few milliseconds (docs/measurement.md has how
/// often), or a thread another process preempts, runs its loop in the
/// same CPU time over a longer wall time; where every repetition of a probe met such a stall,
/// the best of them read the peak at about half (the threads' time is the stalled one's).
/// The CPU clock of a guest leaves out the time its host took (steal time), which is what
/// makes the stall visible. Threads that finish at different times (cores of two kinds) are
/// whole: each ran throughout its own loop.
fn whole(rep_secs: f64, threads: &[ThreadRep]) -> bool {
    threads
        .iter()
        .all(|t| t.start_secs <= 0.1 * rep_secs && t.cpu_secs >= 0.9 * t.wall_secs)
}

/// The CPU time this thread has run, in seconds (`None` where the clock cannot be read).
fn thread_cpu_secs() -> Option<f64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing else.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
    }
    #[cfg(not(unix))]
    None
}

/// The FMA peak of all threads: the FLOPs of one repetition and the time of the best whole one
/// ([`whole`], by its threads' own walls), after at least `reps` repetitions over
/// [`MIN_PROBE_SECS`]. Without a whole one, the time of a repetition is that of its longest loop
/// by its thread's own CPU clock: on a machine whose cores other processes share (a test
/// suite's parallel runs), no thread runs throughout, and the wall clock reads the peak at the
/// share the probe got (two probes at once read half each), while each thread's CPU clock
/// counts only the time it ran. Waiting for a whole repetition instead kept two probes
/// contending for as long as they waited. Where the CPU clock cannot be read, the best
/// repetition of any kind.
fn fma_peak(iters: u64, reps: usize) -> (f64, f64) {
    let mut best = FmaBest::default();
    let mut flops = 0.0;
    let (start, mut done) = (Instant::now(), 0);
    while !enough(done, reps, start) {
        done += 1;
        let t = Instant::now();
        let per_thread: Vec<(f32, f64, Option<ThreadRep>)> = rayon::broadcast(|_| {
            let (began, cpu) = (t.elapsed().as_secs_f64(), thread_cpu_secs());
            let wall = Instant::now();
            let (kept, flops) = fma_loop(iters);
            let wall_secs = wall.elapsed().as_secs_f64();
            let rep = cpu.zip(thread_cpu_secs()).map(|(c0, c1)| ThreadRep {
                start_secs: began,
                wall_secs,
                cpu_secs: c1 - c0,
            });
            (kept, flops, rep)
        });
        let threads: Option<Vec<ThreadRep>> = per_thread.iter().map(|p| p.2).collect();
        best.record(t.elapsed().as_secs_f64(), threads.as_deref());
        flops = per_thread.iter().map(|&(_, f, _)| f).sum();
        black_box(per_thread);
    }
    (flops, best.secs())
}

/// The best FMA repetitions so far, in seconds: of any kind, whole ([`whole`]), and by the
/// threads' CPU clocks ([`on_cpu_secs`]).
#[derive(Debug, Clone, Copy)]
struct FmaBest {
    any: f64,
    whole: f64,
    on_cpu: f64,
}

impl Default for FmaBest {
    fn default() -> Self {
        FmaBest {
            any: f64::INFINITY,
            whole: f64::INFINITY,
            on_cpu: f64::INFINITY,
        }
    }
}

impl FmaBest {
    /// One repetition of `secs` by the wall clock; `threads` where every thread's CPU clock
    /// was read.
    fn record(&mut self, secs: f64, threads: Option<&[ThreadRep]>) {
        self.any = self.any.min(secs);
        if let Some(r) = threads {
            // Timed by the threads' own walls: the caller's wall also holds the time it took
            // to be woken once they finished, which a busy machine stretches.
            if whole(secs, r) {
                self.whole = self.whole.min(threads_secs(r));
            }
            let on_cpu = on_cpu_secs(r);
            if on_cpu > 0.0 {
                self.on_cpu = self.on_cpu.min(on_cpu);
            }
        }
    }

    /// The peak's time: the best whole repetition (by its threads' walls), else the best by
    /// the CPU clocks, else the best of any kind (by the caller's wall).
    fn secs(&self) -> f64 {
        [self.whole, self.on_cpu]
            .into_iter()
            .find(|s| s.is_finite())
            .unwrap_or(self.any)
    }
}

/// A whole repetition's time: its longest loop by its thread's wall clock.
fn threads_secs(threads: &[ThreadRep]) -> f64 {
    threads.iter().map(|t| t.wall_secs).fold(0.0, f64::max)
}

/// How long a repetition would have taken with every thread on a core of its own: its longest
/// loop by its thread's CPU clock.
fn on_cpu_secs(threads: &[ThreadRep]) -> f64 {
    threads.iter().map(|t| t.cpu_secs).fold(0.0, f64::max)
}

/// Runs `iters` rounds of independent FMAs on this thread at the SIMD level in force; returns
/// a value to keep and the FLOPs done (the probe's peak; `benches/kernels.rs` times it beside
/// the GEMM micro-kernel).
pub fn fma_loop(iters: u64) -> (f32, f64) {
    match simd::level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: level() returns Avx512 only when the CPU reports avx512f.
        SimdLevel::Avx512 => unsafe { fma_avx512(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: level() returns Avx2Fma and Avx2NoFma only when the CPU reports avx2 and
        // fma. The peak is the machine's at AVX2's width, whichever form the kernels take.
        SimdLevel::Avx2Fma | SimdLevel::Avx2NoFma => unsafe { fma_avx2(iters) },
        _ => fma_scalar(iters),
    }
}

// acc = acc·a + b with a < 1 converges to b/(1−a) = 1 and stays normal. The operands go
// through black_box: with known constants LLVM proves 1.0 a fixed point and deletes the loop.
const FMA_A: f32 = 0.999;
const FMA_B: f32 = 0.001;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_avx512(iters: u64) -> (f32, f64) {
    use std::arch::x86_64::*;
    // 16 accumulators: 2 FMA ports × 4-cycle latency needs ≥ 8 in flight; 16 leaves slack.
    const ACC: usize = 16;
    let a = _mm512_set1_ps(black_box(FMA_A));
    let b = _mm512_set1_ps(black_box(FMA_B));
    let mut acc: [__m512; ACC] = std::array::from_fn(|i| _mm512_set1_ps(black_box(i as f32)));
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_fmadd_ps(*v, a, b);
        }
    }
    let mut sum = _mm512_setzero_ps();
    for v in acc {
        sum = _mm512_add_ps(sum, v);
    }
    (
        _mm512_reduce_add_ps(sum),
        iters as f64 * (ACC * 16 * 2) as f64,
    )
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_avx2(iters: u64) -> (f32, f64) {
    use std::arch::x86_64::*;
    const ACC: usize = 12;
    let a = _mm256_set1_ps(black_box(FMA_A));
    let b = _mm256_set1_ps(black_box(FMA_B));
    let mut acc: [__m256; ACC] = std::array::from_fn(|i| _mm256_set1_ps(black_box(i as f32)));
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    let mut out = [0f32; 8];
    let mut sum = _mm256_setzero_ps();
    for v in acc {
        sum = _mm256_add_ps(sum, v);
    }
    // SAFETY: `out` holds exactly 8 f32, the width of one __m256.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
    (out.iter().sum(), iters as f64 * (ACC * 8 * 2) as f64)
}

fn fma_scalar(iters: u64) -> (f32, f64) {
    let (a, b) = (black_box(FMA_A), black_box(FMA_B));
    // 64-bit Arm always has NEON and a fused multiply-add: 64 accumulators are 16 vectors of 4,
    // enough independent `fmla` chains to cover their latency on two or four pipes, so the probe
    // finds the real roof there. Elsewhere (x86-64 without AVX2/FMA) a·x + b stays two
    // operations: `mul_add` would be a library call per element.
    #[cfg(target_arch = "aarch64")]
    {
        const ACC: usize = 64;
        let mut acc: [f32; ACC] = std::array::from_fn(|i| black_box(i as f32));
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = v.mul_add(a, b);
            }
        }
        (acc.iter().sum(), iters as f64 * (ACC * 2) as f64)
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        const ACC: usize = 8;
        let mut acc: [f32; ACC] = std::array::from_fn(|i| black_box(i as f32));
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = *v * a + b;
            }
        }
        (acc.iter().sum(), iters as f64 * (ACC * 2) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_probe_gives_positive_finite_ceilings() {
        let c = probe_cpu(&ProbeConfig {
            array_bytes: 1 << 20,
            reps: 1,
            fma_iters: 1 << 12,
        });
        for v in [
            c.copy_bytes_per_sec,
            c.triad_bytes_per_sec,
            c.fma_flops_per_sec,
        ] {
            assert!(v.is_finite() && v > 0.0, "{c:?}");
        }
        assert!(c.ridge() > 0.0);
    }

    #[test]
    fn a_repetition_with_a_stalled_or_late_thread_is_not_whole() {
        let ran = |start_secs, wall_secs, cpu_secs| ThreadRep {
            start_secs,
            wall_secs,
            cpu_secs,
        };
        // Both threads ran their 9.2 ms loops throughout.
        assert!(whole(
            9.4e-3,
            &[ran(0.1e-3, 9.3e-3, 9.3e-3), ran(0.0, 9.2e-3, 9.2e-3)]
        ));
        // A VM's repetitions as measured: one thread's loop took 13.3 ms by the wall clock and
        // 9.2 ms on its CPU (its host took the rest); one began 4.4 ms late.
        assert!(!whole(
            13.4e-3,
            &[ran(0.0, 9.3e-3, 9.3e-3), ran(0.0, 13.3e-3, 9.2e-3)]
        ));
        assert!(!whole(
            13.8e-3,
            &[ran(4.4e-3, 9.4e-3, 9.4e-3), ran(0.0, 9.3e-3, 9.3e-3)]
        ));
        // Cores of two kinds: the faster finished first, each ran throughout its own loop.
        assert!(whole(
            9.3e-3,
            &[ran(0.0, 4.1e-3, 4.1e-3), ran(0.0, 9.2e-3, 9.1e-3)]
        ));
    }

    #[test]
    fn without_a_whole_repetition_the_peak_is_timed_by_the_threads_cpu_clocks() {
        let ran = |start_secs, wall_secs, cpu_secs| ThreadRep {
            start_secs,
            wall_secs,
            cpu_secs,
        };
        // Two probes at once on two cores, as measured: each thread's 9.3 ms loop took about
        // 18.6 ms by the wall clock, time-sliced with the other probe's threads.
        let mut b = FmaBest::default();
        b.record(
            18.7e-3,
            Some(&[ran(0.0, 18.6e-3, 9.3e-3), ran(0.1e-3, 18.5e-3, 9.4e-3)]),
        );
        b.record(
            18.9e-3,
            Some(&[ran(0.0, 18.8e-3, 9.35e-3), ran(0.0, 18.7e-3, 9.5e-3)]),
        );
        assert_eq!(b.secs(), 9.4e-3, "the longer loop of the better repetition");
        // A whole repetition, where one comes, is its threads' wall clocks': the longer loop,
        // not the caller's 12 ms (woken late on a busy machine once the threads finished).
        b.record(
            12.0e-3,
            Some(&[ran(0.0, 9.5e-3, 9.3e-3), ran(0.0, 9.4e-3, 9.4e-3)]),
        );
        assert_eq!(b.secs(), 9.5e-3);
        // Without CPU clocks, nothing tells a shared repetition apart: the best of any kind.
        let mut b = FmaBest::default();
        b.record(18.7e-3, None);
        b.record(19.0e-3, None);
        assert_eq!(b.secs(), 18.7e-3);
    }

    #[test]
    fn software_prefetches_are_left_out_only_where_the_triad_streams_three_percent_faster() {
        assert!(prefetch_streams_faster(1.0, 1.0));
        assert!(prefetch_streams_faster(1.0, 0.98), "within the noise: kept");
        assert!(!prefetch_streams_faster(1.0, 0.96));
        // Measured on a Zen 4 VM: the triad 40.6 GB/s without, 38.0 with.
        assert!(!prefetch_streams_faster(1.0 / 38.0, 1.0 / 40.6));
        assert!(prefetch_streams_faster(1.0, 1.2));
    }

    #[test]
    fn a_probe_on_the_register_kernels_says_which_form_streamed_faster() {
        let c = probe_cpu(&ProbeConfig {
            array_bytes: 1 << 20,
            reps: 1,
            fma_iters: 1 << 12,
        });
        assert_eq!(c.stream_prefetch.is_some(), registers(), "{c:?}");
    }

    #[test]
    fn fma_peak_reads_a_repetition_and_its_flops() {
        let (flops, secs) = fma_peak(1 << 12, 3);
        assert!(
            flops > 0.0 && secs.is_finite() && secs > 0.0,
            "{flops} {secs}"
        );
        assert!(thread_cpu_secs().is_some_and(|s| s > 0.0));
    }

    #[test]
    fn fma_loop_counts_flops_and_stays_finite() {
        let (v, flops) = fma_loop(100);
        assert!(v.is_finite() && v > 0.0);
        let lanes = simd::level().f32_lanes() as f64;
        assert!(flops >= 100.0 * 2.0 * lanes * 8.0, "{flops}");
    }
}
