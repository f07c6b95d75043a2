//! The CPU backend: the kernels of `opledger-cpu` behind the [`Backend`] trait, timed with the
//! monotonic clock, with the cold-cache flush between samples (`opledger_cpu::cold`: each
//! case's own buffers evicted, or a buffer read).

pub use opledger_cpu::*;

use crate::{Backend, BackendError, Case};
use opledger_cpu::simd::LineVec;
use opledger_model::device::{DeviceInfo, DeviceKind, FlushMethod};
use opledger_model::error::{Error, Result};
use opledger_model::kinds::{Tensors, Variant, Workload};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

pub struct CpuBackend {
    device: DeviceInfo,
    flush: Arc<ColdFlush>,
    experiment_slowdown: f64,
}

/// How the CPU backend's cases start cold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CpuFlush {
    /// Each case's own buffers evicted ([`ColdFlush::Evict`]) where the CPU can, else a read of
    /// this many bytes; a worker's process reads this many.
    Evict { read_bytes: u64 },
    /// A read of this many bytes (0: warm, nothing flushed).
    Read { bytes: u64 },
}

impl CpuBackend {
    /// A backend on `device` whose cases start cold as `flush` says, with the gate
    /// experiment's slowdown (0: none).
    pub fn with_device(device: DeviceInfo, flush: CpuFlush, experiment_slowdown: f64) -> Self {
        let cold = match flush {
            CpuFlush::Evict { read_bytes } => ColdFlush::evicting_or_read(
                rayon::current_num_threads(),
                opledger_model::device::l2_cache_bytes().unwrap_or(2 << 20),
                read_bytes,
            ),
            CpuFlush::Read { bytes } => ColdFlush::Read(FlushBuffer::new(bytes)),
        };
        CpuBackend {
            device,
            flush: Arc::new(cold),
            experiment_slowdown,
        }
    }
}

/// Keeps memory a run frees within the process, to serve the next case's buffers (glibc: no
/// `mmap` for large blocks, no trimming of the heap's top). Left as it is, every large tensor
/// is mapped anew and its first writes fault each page in, which the kernel zeroes: on a
/// virtual machine whose host takes back the pages a guest frees, that cost more than the
/// samples themselves (docs/performance.md). Reused memory is zeroed by `calloc` at memory
/// speed instead. It holds for the main thread's heap, where a case's tensors, outputs and
/// scratch are made (the pool's threads keep glibc's arenas for their small buffers). Called
/// by `run` before anything is allocated for measuring; the counted child processes are other
/// programs and keep glibc's defaults (their buffers' addresses, and so their simulated
/// misses, stay as they were). Returns whether the allocator took both settings.
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; glibc serialises it with the allocator.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Streaming (non-temporal) stores pay off once an output is a sizeable part of the cache.
fn streams(output_bytes: u64) -> bool {
    output_bytes >= opledger_model::device::last_level_cache_bytes() / 4
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

    fn ceilings(&self, probe_bytes: Option<u64>) -> Result<opledger_model::device::Ceilings> {
        let default = probe::ProbeConfig::for_llc(self.device.llc_bytes);
        let cfg = match probe_bytes {
            Some(b) => probe::ProbeConfig {
                array_bytes: b,
                ..default
            },
            None => default,
        };
        let mut c = probe::probe_cpu(&cfg);
        // A probe whose arrays span memory decides how the light streaming kernels of this
        // process run (the first one; later probes change nothing); one in a cache leaves them
        // as they were.
        c.stream_prefetch = c
            .stream_prefetch
            .filter(|_| {
                opledger_model::device::probe_spans_memory(c.array_bytes, self.device.llc_bytes)
            })
            .map(simd::decide_stream_prefetch);
        Ok(c)
    }

    fn flush_bytes(&self) -> u64 {
        self.flush.read_bytes()
    }

    fn flush_method(&self) -> FlushMethod {
        self.flush.method()
    }

    fn host_bytes(&self, workload: &Workload) -> u64 {
        host_bytes(workload, self.flush.buffer_bytes())
    }

    fn case_warnings(&self, workload: &Workload) -> Vec<String> {
        elementwise::experiment_warning(workload, self.experiment_slowdown)
    }

    fn executed(
        &self,
        workload: &Workload,
        variant: Variant,
    ) -> Option<opledger_model::ledger::Executed> {
        kernels_of(workload).executed(variant)
    }

    fn arithmetic_secs(&self, workload: &Workload) -> Option<f64> {
        kernels_of(workload).arithmetic_secs()
    }

    fn prepare(&self, workload: &Workload, inputs: Arc<Tensors>) -> Result<Box<dyn Case>> {
        let k = kernels_of(workload);
        if let Some(why) = k.cannot_run() {
            return Err(Error::Backend(BackendError::Unsupported {
                backend: "cpu",
                reason: why,
            }));
        }
        let cfg = CaseConfig {
            stream: streams(k.output_len() * 4),
            experiment_slowdown: self.experiment_slowdown,
        };
        let kernels = k.kernels(inputs.clone(), &cfg)?;
        Ok(Box::new(CpuCase {
            inputs,
            kernels,
            workload: workload.clone(),
            cfg,
            output_len: k.output_len() as usize,
            outputs: Vec::new(),
            flush: self.flush.clone(),
        }))
    }
}

/// No kernels: what a case holds for the moment its kernels are made again.
struct Vacant;

impl Kernels for Vacant {
    fn run(&mut self, _variant: Variant, _out: &mut [f32]) {}
    fn buffers(&self) -> Vec<&[f32]> {
        Vec::new()
    }
}

/// A prepared case: its inputs, the kernels, one output per variant that ran, and the flush.
pub struct CpuCase {
    inputs: Arc<Tensors>,
    kernels: Box<dyn Kernels>,
    /// What the kernels were made of, to make them again on other inputs.
    workload: Workload,
    cfg: CaseConfig,
    output_len: usize,
    outputs: Vec<(Variant, LineVec)>,
    flush: Arc<ColdFlush>,
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
        // Everything the case holds: what the next sample's kernels read and write.
        let outputs = self.outputs.iter().map(|(_, o)| &o[..]);
        let buffers = cold::case_buffers(&self.inputs, outputs, self.kernels.as_ref());
        self.flush.flush(&buffers, self.kernels.as_ref());
    }

    fn flush_method(&self) -> FlushMethod {
        let outputs = self.outputs.iter().map(|(_, o)| &o[..]);
        let buffers = cold::case_buffers(&self.inputs, outputs, self.kernels.as_ref());
        self.flush.method_for(cold::bytes_of(&buffers))
    }

    fn flush_by_reading(&mut self) {
        self.flush.flush_by_reading();
    }

    fn poison_output(&mut self, variant: Variant) -> Result<()> {
        if let Some((_, o)) = self.outputs.iter_mut().find(|(v, _)| *v == variant) {
            o.fill(f32::NAN);
        }
        Ok(())
    }

    fn set_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()> {
        // The kernels are made again, as for a new case: what they derived from the inputs
        // (packed tiles, converted copies) must come from the new ones. The old kernels and
        // inputs go first, so that their buffers are free before the new ones are allocated.
        self.release_inputs();
        self.inputs = inputs.clone();
        self.kernels = kernels_of(&self.workload).kernels(inputs, &self.cfg)?;
        Ok(())
    }

    fn release_inputs(&mut self) {
        self.kernels = Box::new(Vacant);
        self.inputs = Arc::new(Tensors::new());
    }

    fn output(&self, variant: Variant) -> Result<Cow<'_, [f32]>> {
        self.outputs
            .iter()
            .find(|(v, _)| *v == variant)
            .map(|(_, o)| Cow::Borrowed(&o[..]))
            .ok_or(Error::Backend(BackendError::NotRun {
                variant: variant.name(),
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc takes both settings (the memory they keep is measured in docs/performance.md).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_keeps_freed_memory_when_asked() {
        assert!(keep_freed_memory());
    }

    /// The flush buffer is made at the first flush, of the size asked for.
    #[test]
    fn the_flush_buffer_is_made_when_first_used() {
        let f = FlushBuffer::new(3 << 20);
        assert_eq!(f.bytes(), 3 << 20);
        assert!(!f.is_made());
        f.flush();
        assert!(f.is_made());
    }

    /// By default a case's flush evicts its own lines and reads only the cores' private caches'
    /// worth, never the read flush's buffer; the read flush (a pair with a worker's side) reads
    /// that buffer; `--flush-mib` (a size given) reads it every time. The values stay.
    #[test]
    fn a_case_evicts_by_default_and_reads_when_asked() {
        use opledger_model::kinds::{elementwise::Elementwise, DType, Kind};
        use opledger_model::spec::ElemOp;
        let w = Elementwise {
            ops: vec![ElemOp::BiasAdd, ElemOp::Gelu],
            rows: 64,
            cols: 256,
            dtype: DType::F32,
            scale: 1.0,
        };
        let workload = Workload::Elementwise(w.clone());
        let device = DeviceInfo::this_cpu();
        let evicting = CpuBackend::with_device(
            device.clone(),
            CpuFlush::Evict {
                read_bytes: 3 << 20,
            },
            0.0,
        );
        let read = |b: &CpuBackend| match &*b.flush {
            ColdFlush::Evict { read, .. } | ColdFlush::Read(read) => read.is_made(),
        };
        let mut case = evicting
            .prepare(&workload, Arc::new(w.inputs(1)))
            .expect("a case");
        case.run_timed(Variant::Fused).expect("a run");
        let out = case.output(Variant::Fused).expect("an output").into_owned();
        case.flush_caches();
        if opledger_cpu::cold::can_evict() {
            assert_eq!(evicting.flush_method(), FlushMethod::Evict);
            assert!(
                !read(&evicting),
                "the evicting flush read the read flush's buffer"
            );
        }
        case.flush_by_reading();
        assert!(read(&evicting));
        assert_eq!(case.output(Variant::Fused).expect("an output"), out);
        // A case of more than twice the read's bytes (4 MiB of input and 4 MiB of output
        // against a read of 3 MiB) reads instead of evicting, and says so.
        let large = Elementwise {
            rows: 1024,
            cols: 1024,
            ..w.clone()
        };
        let mut case = evicting
            .prepare(
                &Workload::Elementwise(large.clone()),
                Arc::new(large.inputs(1)),
            )
            .expect("a case");
        case.run_timed(Variant::Fused).expect("a run");
        case.flush_caches();
        if opledger_cpu::cold::can_evict() {
            assert_eq!(case.flush_method(), FlushMethod::Read);
        }
        let reading = CpuBackend::with_device(device, CpuFlush::Read { bytes: 3 << 20 }, 0.0);
        assert_eq!(reading.flush_method(), FlushMethod::Read);
        let mut case = reading
            .prepare(&workload, Arc::new(w.inputs(1)))
            .expect("a case");
        case.flush_caches();
        assert!(read(&reading));
    }
}
