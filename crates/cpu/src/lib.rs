//! The CPU backend: multithreaded (rayon), vectorized kernels with runtime CPU-feature dispatch,
//! timed with the monotonic clock, and a cold-cache flush that streams a buffer larger than the
//! last-level cache between samples.
//!
//! Each workload kind implements [`CpuKernels`] in its kernel file or folder (`gemm/` for `kind: gemm`):
//! its kernels on the kind's input tensors; [`CpuCase`] adds what is common: the outputs of both
//! variants, timing and the flush. The kind's module (`crates/model/src/kinds/`) owns inputs and references.

pub mod add_rmsnorm;
pub mod attention;
pub mod custom;
pub mod elementwise;
pub mod gemm;
pub mod lanes;
pub mod launch;
pub mod math;
pub mod probe;
pub mod probe_kernels;
pub mod rows;
pub mod simd;
pub mod vector;

// The lower crates' modules, reached as `crate::…` in this crate's files.
use opledger_model::device;
use opledger_model::error;
use opledger_model::kinds;
use opledger_model::ledger;
use opledger_model::settings;

use crate::error::Result;
use crate::kinds::{Kind, Tensors, Variant, Workload};
use rayon::prelude::*;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// One workload kind's kernels on the CPU, made ready on a case's inputs.
pub trait Kernels: Send {
    /// Runs `variant`, writing every element of `out`.
    fn run(&mut self, variant: Variant, out: &mut [f32]);
}

/// What the CPU backend runs of a kind: implemented by every kind, in the kind's kernel file.
pub trait CpuKernels: Kind {
    /// Why the CPU cannot run this workload, if it cannot (checked before anything runs).
    fn cannot_run(&self) -> Option<String> {
        None
    }
    /// Host bytes of the kernels' own buffers (intermediates, packed tiles) besides the inputs
    /// and the outputs.
    fn scratch_bytes(&self) -> u64 {
        0
    }
    /// The kernels of both variants on `inputs` (the kind's tensors).
    fn kernels(&self, inputs: Arc<Tensors>, cfg: &CaseConfig) -> Result<Box<dyn Kernels>>;
    /// What `variant`'s kernels execute at the SIMD level they run at, for kinds whose
    /// instruction stream differs from the ledger's nominal FLOPs enough to matter (a special
    /// function's polynomial per element); `None` where the nominal count is the model.
    fn executed(&self, _variant: Variant) -> Option<crate::ledger::Executed> {
        None
    }
    /// Seconds the kernels' arithmetic alone takes for the workload: run on every thread with
    /// its operands in L1, no memory in the way. Measured only where [`CpuKernels::executed`]
    /// says the arithmetic differs from the nominal count.
    fn arithmetic_secs(&self) -> Option<f64> {
        None
    }
}

/// Seconds per element of a kernel's arithmetic alone: `per_thread` (which computes
/// `elements_per_thread` elements on operands it keeps in L1) run on every thread at once, the
/// fastest of 9 timings ([`CpuKernels::arithmetic_secs`] scales it to the workload).
pub fn arithmetic_secs_per_element(
    elements_per_thread: usize,
    per_thread: impl Fn() + Sync,
) -> f64 {
    let threads = rayon::current_num_threads();
    let best = (0..9)
        .map(|_| {
            let start = Instant::now();
            (0..threads).into_par_iter().for_each(|_| per_thread());
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    best / (threads * elements_per_thread) as f64
}

/// How the backend runs a case, beyond the kind's parameters.
#[derive(Debug, Clone, Copy)]
pub struct CaseConfig {
    /// Write outputs with streaming (non-temporal) stores: outputs large against the cache.
    pub stream: bool,
    /// The gate experiment's deliberate slowdown (`settings::Settings`); 0 normally.
    pub experiment_slowdown: f64,
}

/// The CPU kernel table: every kind of the registry, through its [`CpuKernels`].
macro_rules! cpu_table {
    ($($variant:ident($name:literal) => $module:ident :: $ty:ident),* $(,)?) => {
        pub fn kernels_of(w: &Workload) -> &dyn CpuKernels {
            match w {
                $(Workload::$variant(k) => k),*
            }
        }
    };
}
crate::kinds::registry!(cpu_table);

/// The host memory a case of `w` holds on the CPU backend with a flush of `flush_bytes`: the
/// inputs twice (the checked run's are generated while the first set is still held), the
/// outputs of both sides, the kernels' scratch and the flush buffer.
pub fn host_bytes(w: &Workload, flush_bytes: u64) -> u64 {
    let k = kernels_of(w);
    (2 * k.input_bytes())
        .saturating_add(2 * k.output_len() * 4)
        .saturating_add(k.scratch_bytes())
        .saturating_add(flush_bytes)
}

/// Why the CPU backend cannot run `w`, if it cannot.
pub fn cannot_run(w: &Workload) -> Option<String> {
    kernels_of(w).cannot_run()
}

/// A read-only stream over a large buffer: it evicts the case's data, and since it writes
/// nothing, no dirty lines of its own are written back during the next timed run. The buffer
/// is made at the first flush, after the ceilings' probe has freed its arrays: a run's memory
/// is kept for reuse (`keep_freed_memory` in the backend), so the flush takes the probe's pages
/// instead of faulting in as many new ones.
pub struct FlushBuffer {
    bytes: u64,
    data: std::sync::OnceLock<simd::LineVec>,
}

impl FlushBuffer {
    pub fn new(bytes: u64) -> Self {
        FlushBuffer {
            bytes: bytes / 4 * 4,
            data: std::sync::OnceLock::new(),
        }
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// Whether the buffer has been made (by a first flush).
    pub fn is_made(&self) -> bool {
        self.data.get().is_some()
    }
    fn data(&self) -> &[f32] {
        // On huge pages (LineVec): a 4 KiB page at a time, the buffer faulted in a quarter of
        // a million pages and its reads walked the page tables every 4 KiB.
        self.data
            .get_or_init(|| simd::LineVec::filled((self.bytes / 4) as usize, 1.0))
    }
    /// Reads every line of the buffer: one word a 64-byte line (the buffer is line-aligned),
    /// which brings the whole line in and evicts what it replaces as a read of every word
    /// would, summed as integers (a float sum is one chain of dependent additions, which ran at
    /// a third of one core's read bandwidth). Every word of every line, in vectors of the
    /// baseline x86-64 level, was instruction-bound: a 600 MiB flush read at 16–17 GB/s where a
    /// word a line reads at 23 (docs/performance.md).
    pub fn flush(&self) {
        const LINE_WORDS: usize = 16;
        let s: u32 = self
            .data()
            .par_chunks(1 << 16)
            .map(|c| {
                c.iter()
                    .step_by(LINE_WORDS)
                    .fold(0u32, |a, x| a.wrapping_add(x.to_bits()))
            })
            .reduce(|| 0, u32::wrapping_add);
        black_box(s);
    }
}
