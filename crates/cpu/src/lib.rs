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
