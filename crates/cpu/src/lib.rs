//! The CPU backend: multithreaded (rayon), vectorized kernels with runtime CPU-feature dispatch,
//! timed with the monotonic clock, and a cold-cache flush between samples ([`cold`]: the case's
//! own buffers evicted from every cache level, or a buffer larger than the last level read).
//!
//! Each workload kind implements [`CpuKernels`] in its kernel file or folder (`gemm/` for `kind: gemm`):
//! its kernels on the kind's input tensors; [`CpuCase`] adds what is common: the outputs of both
//! variants, timing and the flush. The kind's module (`crates/model/src/kinds/`) owns inputs and references.

pub mod add_rmsnorm;
pub mod attention;
pub mod cold;
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

pub use cold::{ColdFlush, FlushBuffer};

use crate::error::Result;
use crate::kinds::{Kind, Tensors, Variant, Workload};
use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;

/// One workload kind's kernels on the CPU, made ready on a case's inputs.
pub trait Kernels: Send {
    /// Runs `variant`, writing every element of `out`.
    fn run(&mut self, variant: Variant, out: &mut [f32]);
    /// Every buffer the kernels keep between runs besides the inputs and the outputs
    /// (intermediates, packed or converted copies): what the cold flush evicts with them
    /// ([`cold`]). A buffer left out would stay in the caches between samples, and its side
    /// would be timed warm (`tests/held_buffers.rs` checks every kind's list against what its
    /// kernels hold).
    fn buffers(&self) -> Vec<&[f32]>;
    /// Calls `each`, on every thread of the pool, with what that thread keeps for these
    /// kernels on its own (a per-thread tile buffer): the cold flush evicts them there after
    /// [`Kernels::buffers`].
    fn thread_buffers(&self, _each: &(dyn Fn(&[&[f32]]) + Sync)) {}
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

/// Seconds per element of a kernel's arithmetic alone: `per_task` (which computes
/// `elements_per_task` elements on operands it keeps in L1) run [`ARITHMETIC_TASKS`] times per
/// thread over the pool, each call a task of its own, the fastest of 9 timings
/// ([`CpuKernels::arithmetic_secs`] scales it to the workload). Tasks, not one share a thread:
/// the kernels hand out their rows to whichever thread is free, so a core running slower than
/// the other (a virtual machine's, whose host core is shared) does less of the work; a fixed
/// share a thread timed the slower core's pace instead, up to 1.5× the kernels' own
/// (docs/performance.md).
pub fn arithmetic_secs_per_element(elements_per_task: usize, per_task: impl Fn() + Sync) -> f64 {
    let tasks = rayon::current_num_threads() * ARITHMETIC_TASKS;
    let best = (0..9)
        .map(|_| {
            let start = Instant::now();
            (0..tasks)
                .into_par_iter()
                .with_max_len(1)
                .for_each(|_| per_task());
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    best / (tasks * elements_per_task) as f64
}

/// Tasks a thread of [`arithmetic_secs_per_element`]: enough that the work follows the
/// threads' pace, few enough that each stays ~0.3 ms long.
pub const ARITHMETIC_TASKS: usize = 8;

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
/// inputs twice (a confirming pair's set is made while the checked run's is still held; the
/// first set is let go before the checked one is made), the outputs of both sides, the
/// kernels' scratch and the flush buffer.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The arithmetic alone is timed as tasks over the pool, not one fixed share a thread: nine
    /// timings of `threads × ARITHMETIC_TASKS` calls each, per element the fastest timing over
    /// every element those calls computed.
    #[test]
    fn the_arithmetic_alone_is_handed_out_as_tasks_and_scaled_per_element() {
        let calls = AtomicUsize::new(0);
        let per_element = arithmetic_secs_per_element(1000, || {
            calls.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_micros(200));
        });
        let tasks = rayon::current_num_threads() * ARITHMETIC_TASKS;
        assert_eq!(calls.load(Ordering::Relaxed), 9 * tasks);
        // Each task sleeps 200 µs for 1000 elements: the threads side by side take at least
        // 0.2 µs / threads an element.
        let floor = 200e-6 / 1000.0 / rayon::current_num_threads() as f64;
        assert!(per_element >= floor, "{per_element} < {floor}");
    }
}
