//! The CPU backend: multithreaded (rayon), vectorized kernels with runtime CPU-feature dispatch,
//! timed with the monotonic clock, and a cold-cache flush that streams a buffer larger than the
//! last-level cache between samples.
//!
//! Each workload kind implements [`CpuKernels`] in its kernel file (`gemm.rs` for `kind: gemm`):
//! its kernels on the kind's input tensors; [`CpuCase`] adds what is common: the outputs of both
//! variants, timing and the flush. The kind's module (`src/kinds/`) owns inputs and references.

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

use super::{Backend, Case};
use crate::device::DeviceInfo;
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::kinds::{Kind, Tensors, Variant, Workload};
use rayon::prelude::*;
use simd::LineVec;
use std::borrow::Cow;
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
pub(crate) fn arithmetic_secs_per_element(
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
        fn kernels_of(w: &Workload) -> &dyn CpuKernels {
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

pub struct CpuBackend {
    device: DeviceInfo,
    flush: Arc<FlushBuffer>,
    experiment_slowdown: f64,
}

impl CpuBackend {
    /// A backend whose cold-cache flush streams `flush_bytes` (0 disables flushing).
    pub fn new(flush_bytes: u64) -> Self {
        Self::with_device(DeviceInfo::this_cpu(), flush_bytes, 0.0)
    }
    /// [`CpuBackend::new`] on a known device, with the gate experiment's slowdown (0: none).
    pub fn with_device(device: DeviceInfo, flush_bytes: u64, experiment_slowdown: f64) -> Self {
        CpuBackend {
            device,
            flush: Arc::new(FlushBuffer::new(flush_bytes)),
            experiment_slowdown,
        }
    }
}

/// Streaming (non-temporal) stores pay off once an output is a sizeable part of the cache.
fn streams(output_bytes: u64) -> bool {
    output_bytes >= crate::device::last_level_cache_bytes() / 4
}

impl Backend for CpuBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }

    fn device(&self) -> DeviceInfo {
        self.device.clone()
    }

    fn describe_compute(&self) -> String {
        let threads = rayon::current_num_threads();
        let plural = if threads == 1 { "" } else { "s" };
        format!("{threads} thread{plural}, {}", self.device.simd)
    }

    fn ceilings(&self, probe_bytes: Option<u64>) -> Result<crate::device::Ceilings> {
        let default = probe::ProbeConfig::for_llc(self.device.llc_bytes);
        let cfg = match probe_bytes {
            Some(b) => probe::ProbeConfig {
                array_bytes: b,
                ..default
            },
            None => default,
        };
        Ok(probe::probe_cpu(&cfg))
    }

    fn flush_bytes(&self) -> u64 {
        self.flush.bytes()
    }

    fn host_bytes(&self, workload: &Workload) -> u64 {
        host_bytes(workload, self.flush.bytes())
    }

    fn case_warnings(&self, workload: &Workload) -> Vec<String> {
        elementwise::experiment_warning(workload, self.experiment_slowdown)
    }

    fn executed(&self, workload: &Workload, variant: Variant) -> Option<crate::ledger::Executed> {
        kernels_of(workload).executed(variant)
    }

    fn arithmetic_secs(&self, workload: &Workload) -> Option<f64> {
        kernels_of(workload).arithmetic_secs()
    }

    fn prepare(&self, workload: &Workload, inputs: Arc<Tensors>) -> Result<Box<dyn Case>> {
        let k = kernels_of(workload);
        if let Some(why) = k.cannot_run() {
            return Err(Error::Backend(super::BackendError::Unsupported {
                backend: "cpu",
                reason: why,
            }));
        }
        let cfg = CaseConfig {
            stream: streams(k.output_len() * 4),
            experiment_slowdown: self.experiment_slowdown,
        };
        let kernels = k.kernels(inputs, &cfg)?;
        Ok(Box::new(CpuCase {
            kernels,
            workload: workload.clone(),
            cfg,
            output_len: k.output_len() as usize,
            outputs: Vec::new(),
            flush: self.flush.clone(),
        }))
    }
}

/// A read-only stream over a large buffer: it evicts the case's data, and since it writes
/// nothing, no dirty lines of its own are written back during the next timed run.
pub struct FlushBuffer {
    data: Vec<f32>,
}

impl FlushBuffer {
    pub fn new(bytes: u64) -> Self {
        let n = (bytes / 4) as usize;
        let mut data = vec![0f32; n];
        data.par_chunks_mut(1 << 16).for_each(|c| c.fill(1.0));
        FlushBuffer { data }
    }
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64 * 4
    }
    pub fn flush(&self) {
        let s: f32 = self
            .data
            .par_chunks(1 << 16)
            .map(|c| c.iter().sum::<f32>())
            .sum();
        black_box(s);
    }
}

/// No kernels: what a case holds for the moment its kernels are made again.
struct Vacant;

impl Kernels for Vacant {
    fn run(&mut self, _variant: Variant, _out: &mut [f32]) {}
}

/// A prepared case: the kernels, one output per variant that ran, and the flush buffer.
pub struct CpuCase {
    kernels: Box<dyn Kernels>,
    /// What the kernels were made of, to make them again on other inputs.
    workload: Workload,
    cfg: CaseConfig,
    output_len: usize,
    outputs: Vec<(Variant, LineVec)>,
    flush: Arc<FlushBuffer>,
}

impl Case for CpuCase {
    fn run_timed(&mut self, variant: Variant) -> Result<f64> {
        let idx = match self.outputs.iter().position(|(v, _)| *v == variant) {
            Some(i) => i,
            None => {
                // NaN-filled, so an output element a kernel forgot to write fails the check.
                self.outputs
                    .push((variant, LineVec::filled(self.output_len, f32::NAN)));
                self.outputs.len() - 1
            }
        };
        let out = &mut self.outputs[idx].1;
        let t = Instant::now();
        self.kernels.run(variant, out);
        Ok(t.elapsed().as_secs_f64())
    }

    fn flush_caches(&mut self) {
        self.flush.flush();
    }

    fn poison_output(&mut self, variant: Variant) -> Result<()> {
        if let Some((_, o)) = self.outputs.iter_mut().find(|(v, _)| *v == variant) {
            o.fill(f32::NAN);
        }
        Ok(())
    }

    fn set_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()> {
        // The kernels are made again, as for a new case: what they derived from the inputs
        // (packed tiles, converted copies) must come from the new ones. The old kernels go
        // first, so that their buffers are free before the new ones are allocated.
        self.kernels = Box::new(Vacant);
        self.kernels = kernels_of(&self.workload).kernels(inputs, &self.cfg)?;
        Ok(())
    }

    fn output(&self, variant: Variant) -> Result<Cow<'_, [f32]>> {
        self.outputs
            .iter()
            .find(|(v, _)| *v == variant)
            .map(|(_, o)| Cow::Borrowed(&o[..]))
            .ok_or(Error::Backend(super::BackendError::NotRun {
                variant: variant.name(),
            }))
    }
}
