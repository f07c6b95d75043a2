//! The opened GPU: its context and the one stream every operation is ordered on, the modules
//! compiled from `kernels/*.cu` (NVRTC, for the device's own architecture, when a case first
//! needs them), allocation and upload, timing with CUDA events, the L2 flush before cold samples,
//! the device's own ceilings probes, and the launch helper every kernel file uses.
//!
//! Status: not yet run on a GPU (`scripts/gpu-check.sh` is the check to run on one). Every launch
//! runs end to end in the tests on `tests/cudasim`, a CPU stand-in for the driver library, and
//! its outputs match the f64 references there.

use super::nvrtc::{self, Output};
use crate::device::Ceilings;
use crate::error::{Error, Result};
use crate::BackendError;
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DriverError, LaunchConfig,
    PushKernelArg,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(super) fn driver_error(what: &str) -> impl Fn(DriverError) -> Error + '_ {
    move |e| {
        if leaves_context_unusable(&e) {
            lost().get_or_insert_with(|| format!("CUDA {what}: {e:?}"));
        }
        Error::Backend(BackendError::Driver {
            what: format!("CUDA {what}"),
            detail: format!("{e:?}"),
        })
    }
}

/// The first fault that left this process's CUDA context unusable, once there was one.
fn lost() -> std::sync::MutexGuard<'static, Option<String>> {
    static LOST: Mutex<Option<String>> = Mutex::new(None);
    LOST.lock().unwrap_or_else(|e| e.into_inner())
}

/// The errors after which a context is unusable ("sticky"): every later call of the process on
/// it fails with the same error, whatever it asks.
fn leaves_context_unusable(e: &DriverError) -> bool {
    use sys::cudaError_enum::*;
    matches!(
        e.0,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
    )
}

/// Refuses new work once the context was lost: the specs after a fault say so (and which fault)
/// instead of each reporting the fault's error as its own.
pub(super) fn refuse_if_lost() -> Result<()> {
    match lost().clone() {
        Some(first) => Err(BackendError::ContextLost { first }.into()),
        None => Ok(()),
    }
}

/// Threads per block of the grid-stride and per-row kernels.
pub(super) const BLOCK: u32 = 256;

/// The opened device: context, the one stream every operation is ordered on, and the modules
/// compiled so far (a module that failed to compile keeps its NVRTC log, so every case that
/// needs it fails with the log and the run goes on).
pub struct Gpu {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) modules: Mutex<HashMap<&'static str, std::result::Result<Arc<CudaModule>, String>>>,
    /// The users' kernels compiled so far, by the SHA-256 of their file name, text and options:
    /// each is compiled once per run, whatever the number of cases (sweep points) using it.
    pub(super) user_modules: Mutex<HashMap<String, Arc<CudaModule>>>,
    /// The kernels looked up so far, by family and name.
    pub(super) functions: Mutex<HashMap<(&'static str, String), CudaFunction>>,
    pub(super) name: String,
    pub(super) arch: u32,
    pub(super) sms: u32,
    pub(super) l2_bytes: u64,
    pub(super) memory_bytes: u64,
    /// The most dynamic shared memory a block may opt into on this device (None when the
    /// driver does not say).
    pub(super) max_shared_optin_bytes: Option<u64>,
    /// The device's PCI address as `nvidia-smi --id` takes it (`00000000:19:00.0`): the GPU
    /// opledger opened, whatever CUDA_VISIBLE_DEVICES renumbered.
    pub(super) pci_bus_id: String,
    /// The manifest's driver summary, and the driver's version for the device identity.
    pub(super) driver: String,
    pub(super) driver_version: String,
    /// Read through before each cold sample (None in warm mode); it holds zeros.
    pub(super) flush: Mutex<Option<CudaSlice<u8>>>,
}

impl Gpu {
    pub(super) fn open(flush: Option<u64>) -> Result<Self> {
        super::Driver::open()?;
        if !nvrtc::available() {
            return Err(Error::BackendUnavailable(
                "a CUDA device is present but NVRTC (libnvrtc) could not be loaded; install it (e.g. `pip install nvidia-cuda-nvrtc`) and put its lib folder on LD_LIBRARY_PATH".into(),
            ));
        }
        let unavailable = |what: &'static str| {
            move |e: DriverError| Error::BackendUnavailable(format!("CUDA {what}: {e:?}"))
        };
        let ctx = CudaContext::new(0).map_err(unavailable("cannot open device 0"))?;
        // SAFETY: every buffer and launch of this backend is ordered on the one stream below,
        // so cudarc's per-buffer event tracking (meant for several streams) has nothing to
        // order; it would only add an event record to every launch and distort launch timings.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(unavailable("cannot create a stream"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(unavailable("compute capability"))?;
        let attr = |a| ctx.attribute(a).map_err(unavailable("device attribute"));
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let l2_bytes = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64;
        let max_shared_optin_bytes = ctx
            .attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
            .ok()
            .map(|v| v as u64);
        let name = ctx.name().map_err(unavailable("device name"))?;
        let pci = |a| ctx.attribute(a).unwrap_or(0);
        let pci_bus_id = format!(
            "{:08X}:{:02X}:{:02X}.0",
            pci(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            pci(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            pci(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)
        );
        let memory_bytes = ctx.total_mem().map_err(unavailable("device memory"))? as u64;
        let flush_bytes = flush.unwrap_or(2 * l2_bytes.max(1 << 20));
        let flush = if flush_bytes > 0 {
            Some(
                stream
                    .alloc_zeros::<u8>(flush_bytes as usize)
                    .map_err(unavailable("allocating the L2 flush buffer"))?,
            )
        } else {
            None
        };
        Ok(Gpu {
            driver: super::driver_summary(),
            driver_version: super::driver_version()
                .map(|v| format!("CUDA {v}"))
                .unwrap_or_default(),
            ctx,
            stream,
            modules: Mutex::new(HashMap::new()),
            user_modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            name,
            arch: (major * 10 + minor) as u32,
            sms,
            l2_bytes,
            memory_bytes,
            max_shared_optin_bytes,
            pci_bus_id,
            flush: Mutex::new(flush),
        })
    }

    /// The module of one kernel family, compiled (CUBIN for this architecture, PTX for the
    /// driver to JIT if the CUBIN does not load) on first use.
    pub(super) fn module(&self, family: &'static str) -> Result<Arc<CudaModule>> {
        let mut modules = self
            .modules
            .lock()
            .map_err(|_| BackendError::Kernel("CUDA module cache poisoned".into()))?;
        let entry = modules.entry(family).or_insert_with(|| {
            let src = nvrtc::SOURCES
                .iter()
                .find(|s| s.name == family)
                .ok_or_else(|| format!("no CUDA source named {family}"))?;
            let cubin = nvrtc::compile(src, self.arch, Output::Cubin)?;
            match self
                .ctx
                .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            {
                Ok(m) => Ok(m),
                Err(cubin_err) => {
                    let ptx = nvrtc::compile(src, self.arch, Output::Ptx)?;
                    let text = String::from_utf8_lossy(&ptx).into_owned();
                    self.ctx
                        .load_module(cudarc::nvrtc::Ptx::from_src(text))
                        .map_err(|ptx_err| {
                            format!("{family}: the driver loads neither the sm_{} CUBIN ({cubin_err:?}) nor the PTX ({ptx_err:?})", self.arch)
                        })
                }
            }
        });
        entry
            .clone()
            .map_err(|log| BackendError::Compile { log }.into())
    }

    /// A kernel of a family, looked up in the driver once per process: later calls (from inside
    /// an enqueue, so inside a timed sample) are a map lookup, not a driver call.
    pub(super) fn function(&self, family: &'static str, name: &str) -> Result<CudaFunction> {
        let key = (family, name.to_string());
        if let Some(f) = self
            .functions
            .lock()
            .map_err(|_| BackendError::Kernel("CUDA function cache poisoned".into()))?
            .get(&key)
        {
            return Ok(f.clone());
        }
        let f = self
            .module(family)?
            .load_function(name)
            .map_err(driver_error("loading a kernel"))?;
        if let Ok(mut functions) = self.functions.lock() {
            functions.insert(key, f.clone());
        }
        Ok(f)
    }

    /// A grid-stride launch over `n` elements: enough blocks to fill every SM several times.
    pub(super) fn grid_for(&self, n: u64) -> LaunchConfig {
        let blocks = n.div_ceil(BLOCK as u64).clamp(1, self.sms as u64 * 32) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// One block of `BLOCK` threads per row.
    pub(super) fn per_row(rows: u64) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    pub(super) fn upload(&self, host: &[f32]) -> Result<CudaSlice<f32>> {
        if host.is_empty() {
            // A one-element placeholder keeps every kernel argument a valid pointer.
            return self
                .stream
                .alloc_zeros::<f32>(1)
                .map_err(driver_error("allocating"));
        }
        self.stream
            .clone_htod(host)
            .map_err(driver_error("copying inputs to the device"))
    }

    pub(super) fn zeros(&self, n: u64) -> Result<CudaSlice<f32>> {
        self.stream
            .alloc_zeros::<f32>(n.max(1) as usize)
            .map_err(driver_error("allocating"))
    }

    /// One sample of `enqueue`, by the one timing rule of every GPU side: what is timed
    /// starts behind the work already on the stream (the flush of a cold sample, and a
    /// [`HOLD_SECS`] hold) with no host synchronisation in between, so the host's launches
    /// never leave the GPU idle inside a sample; it includes all the work the call started, on
    /// any stream (the context is synchronised before the end mark); and its event time is held
    /// against the host's clock around it. Seconds.
    pub(super) fn time(&self, enqueue: impl FnOnce() -> Result<()>) -> Result<f64> {
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(timing).map_err(driver_error("event"))?;
        let end = self.ctx.new_event(timing).map_err(driver_error("event"))?;
        self.hold(HOLD_SECS)?;
        let host = std::time::Instant::now();
        start
            .record(&self.stream)
            .map_err(driver_error("recording an event"))?;
        enqueue()?;
        self.ctx
            .synchronize()
            .map_err(driver_error("kernel execution"))?;
        end.record(&self.stream)
            .map_err(driver_error("recording an event"))?;
        end.synchronize()
            .map_err(driver_error("kernel execution"))?;
        let host_secs = host.elapsed().as_secs_f64();
        let ms = start
            .elapsed_ms(&end)
            .map_err(driver_error("event timing"))?;
        let device_secs = f64::from(ms) / 1e3;
        // The events' resolution is about half a microsecond, and the two clocks differ.
        if device_secs > host_secs * 1.01 + 2e-6 {
            return Err(BackendError::ImpossibleTime {
                device_secs,
                host_secs,
            }
            .into());
        }
        Ok(device_secs)
    }

    /// Keeps the stream busy for `secs` (the `opledger_hold` kernel, no memory touched).
    pub(super) fn hold(&self, secs: f64) -> Result<()> {
        let hold = self.function("probe", "opledger_hold")?;
        let ns = (secs * 1e9) as i64;
        // SAFETY (launch): opledger_hold(long long ns) reads and writes no memory.
        launch(
            self,
            &hold,
            LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            },
            "opledger_hold",
            |b| {
                b.arg(&ns);
            },
        )
    }

    /// The warm-up before a spec's first sample: [`WARM_UP_SECS`] of busy GPU, so that its
    /// clocks have ramped from idle (an H200 idles at a sixth of its boost clock).
    pub(super) fn warm_up(&self) -> Result<()> {
        self.hold(WARM_UP_SECS)?;
        self.stream
            .synchronize()
            .map_err(driver_error("the warm-up"))
    }

    pub(super) fn flush_l2(&self) -> Result<()> {
        let mut flush = self
            .flush
            .lock()
            .map_err(|_| BackendError::Kernel("CUDA flush buffer poisoned".into()))?;
        if let Some(buf) = flush.as_mut() {
            let n4 = (buf.len() / 16) as u64;
            let read = self.function("probe", "probe_flush_read")?;
            let n4_arg = n4 as i64;
            // SAFETY (launch): probe_flush_read(float4* buf, long long n4) reads n4 float4
            // values of `buf`, which holds at least 16·n4 bytes (and writes none: it holds zeros).
            launch(self, &read, self.grid_for(n4), "probe_flush_read", |b| {
                b.arg(&mut *buf).arg(&n4_arg);
            })?;
        }
        Ok(())
    }

    /// The best of 6 timed launches of a peak kernel at `max_iters` loop iterations, or at fewer
    /// where a trial launch at 1/64 of them says one launch would run past
    /// [`PEAK_LAUNCH_BUDGET_SECS`]. A GPU runs the full count in well under a millisecond, so it
    /// always gets `max_iters`; a device that runs a launch a thousand times slower (the CPU
    /// stand-in for the driver) would otherwise spend tens of seconds on every probe. The peak is
    /// computed from the count used, so it stays right either way. Returns (iterations, secs).
    fn best_of_sized(
        &self,
        max_iters: i32,
        mut launch: impl FnMut(i32) -> Result<()>,
    ) -> Result<(i32, f64)> {
        let trial_iters = (max_iters / 64).max(1);
        let trial_secs = self.time(|| launch(trial_iters))?;
        let iters = iters_within_budget(max_iters, trial_iters, trial_secs);
        let mut best = f64::INFINITY;
        for _ in 0..6 {
            best = best.min(self.time(|| launch(iters))?);
        }
        Ok((iters, best))
    }

    /// Device-to-device copy bandwidth (best of 6, bytes read + written), the FP32 FMA peak and,
    /// from sm_80, the bf16 tensor-core peak (each the best of 6 launches sized by
    /// [`Gpu::best_of_sized`]): the GPU's roofline ceilings as measured, beside the datasheet's.
    pub(super) fn probe(&self, probe_bytes: Option<u64>) -> Result<Ceilings> {
        let bytes = probe_bytes.unwrap_or((8 * self.l2_bytes).max(256 << 20));
        let n4 = (bytes / 16).max(1);
        let src = self.zeros(4 * n4)?;
        let mut dst = self.zeros(4 * n4)?;
        let copy = self.function("probe", "probe_copy")?;
        let cfg = self.grid_for(n4);
        let mut best_copy = f64::INFINITY;
        for _ in 0..6 {
            let n4_arg = n4 as i64;
            let t = self.time(|| {
                let mut b = self.stream.launch_builder(&copy);
                b.arg(&mut dst).arg(&src).arg(&n4_arg);
                // SAFETY: probe_copy(float4* dst, const float4* src, long long n4) reads and
                // writes n4 float4 values; both buffers hold 4·n4 floats.
                unsafe { b.launch(cfg) }
                    .map(|_| ())
                    .map_err(driver_error("launching probe_copy"))
            })?;
            best_copy = best_copy.min(t);
        }
        let fma = self.function("probe", "probe_fma")?;
        let blocks = self.sms * 8;
        let threads = blocks as u64 * BLOCK as u64;
        let mut out = self.zeros(threads)?;
        let (a, b_coef) = (0.999_f32, 0.001_f32);
        let fma_cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let (iters, best_fma) = self.best_of_sized(4096, |iters| {
            let mut b = self.stream.launch_builder(&fma);
            b.arg(&mut out).arg(&a).arg(&b_coef).arg(&iters);
            // SAFETY: probe_fma(float* out, float a, float b, int iters) writes one float
            // per thread; `out` holds one per launched thread.
            unsafe { b.launch(fma_cfg) }
                .map(|_| ())
                .map_err(driver_error("launching probe_fma"))
        })?;
        // The tensor-core peak (bf16 mma.sync, f32 accumulation) on devices that have bf16
        // tensor cores: the compute ceiling of bf16 workloads. Each warp runs a dependent chain,
        // so 8 warps per block and 8 blocks per SM keep enough of them in flight.
        let tensor_flops_per_sec = if self.arch >= 80 {
            let mma = self.function("probe", "probe_mma_bf16")?;
            let mma_blocks = self.sms * 8;
            let mma_threads = mma_blocks as u64 * BLOCK as u64;
            let warps = mma_threads / 32;
            let mut mma_out = self.zeros(mma_threads)?;
            let mma_cfg = LaunchConfig {
                grid_dim: (mma_blocks, 1, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            let (mma_iters, best_mma) = self.best_of_sized(2048, |iters| {
                let mut b = self.stream.launch_builder(&mma);
                b.arg(&mut mma_out).arg(&iters);
                // SAFETY: probe_mma_bf16(float* out, int iters) writes one float per thread;
                // `mma_out` holds one per launched thread; sm_80+ was checked.
                unsafe { b.launch(mma_cfg) }
                    .map(|_| ())
                    .map_err(driver_error("launching probe_mma_bf16"))
            })?;
            // One m16n8k16 is 16·8·16 multiply-adds: 4096 FLOPs.
            Some(4096.0 * mma_iters as f64 * warps as f64 / best_mma)
        } else {
            None
        };
        let copy_bps = 2.0 * (16 * n4) as f64 / best_copy;
        Ok(Ceilings {
            tensor_flops_per_sec,
            copy_bytes_per_sec: copy_bps,
            // The GPU probe has no triad; copy bandwidth stands for the memory roof.
            triad_bytes_per_sec: copy_bps,
            fma_flops_per_sec: 2.0 * 8.0 * iters as f64 * threads as f64 / best_fma,
            threads: self.sms as usize,
            array_bytes: 16 * n4,
            stream_prefetch: None,
        })
    }

    /// Launches the empty `opledger_marker` kernel with grid x = `seq` + 1 (a grid is never
    /// empty) and waits for it: in a profiler's export the launches after it belong to `seq`
    /// (`opledger counters` reads it).
    pub(super) fn mark(&self, seq: u32) -> Result<()> {
        let marker = self.function("probe", "opledger_marker")?;
        let cfg = LaunchConfig {
            grid_dim: (seq + 1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        launch(self, &marker, cfg, "opledger_marker", |_| {})?;
        self.stream
            .synchronize()
            .map_err(driver_error("synchronizing after opledger_marker"))
    }

    pub(super) fn free_bytes(&self) -> Option<u64> {
        self.ctx.mem_get_info().ok().map(|(free, _)| free as u64)
    }
}

/// The hold before each sample's start event: longer than the host takes to enqueue the event
/// and a built-in case's launches (a few, of a few microseconds each), and short against a
/// sample's flush and the time a sample costs anyway.
pub(super) const HOLD_SECS: f64 = 100e-6;

/// The busy warm-up before a spec's first sample (`Gpu::warm_up`).
pub(super) const WARM_UP_SECS: f64 = 0.05;

/// How long one launch of a peak kernel may run before the probe shortens its loop.
const PEAK_LAUNCH_BUDGET_SECS: f64 = 0.05;

/// The loop count of a peak kernel: `max_iters` unless a trial launch of `trial_iters` that took
/// `trial_secs` says `max_iters` would run past [`PEAK_LAUNCH_BUDGET_SECS`]; then the count that
/// fits it, never below `trial_iters`.
fn iters_within_budget(max_iters: i32, trial_iters: i32, trial_secs: f64) -> i32 {
    let per_iter_secs = trial_secs / f64::from(trial_iters.max(1));
    if per_iter_secs.is_nan()
        || per_iter_secs <= 0.0
        || per_iter_secs * f64::from(max_iters) <= PEAK_LAUNCH_BUDGET_SECS
    {
        return max_iters;
    }
    let fitting = (PEAK_LAUNCH_BUDGET_SECS / per_iter_secs).floor();
    (fitting as i32).clamp(trial_iters, max_iters)
}

/// Launches `func` with the arguments pushed by `args`.
pub(super) fn launch<'a>(
    gpu: &'a Gpu,
    func: &'a CudaFunction,
    cfg: LaunchConfig,
    what: &str,
    args: impl FnOnce(&mut cudarc::driver::LaunchArgs<'a>),
) -> Result<()> {
    let mut b = gpu.stream.launch_builder(func);
    args(&mut b);
    // SAFETY: every call site passes the arguments of the kernel's C signature in order, with
    // buffers of the sizes the kernel indexes (documented at each site).
    let what = format!("launching {what}");
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(driver_error(&what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_device_gets_the_full_loop_and_a_slow_one_a_loop_within_budget() {
        // A GPU: 64 iterations in 5 µs, so 4096 take 0.3 ms.
        assert_eq!(iters_within_budget(4096, 64, 5e-6), 4096);
        // A launch a thousand times slower: 64 iterations in 10 ms, so 320 fit 50 ms.
        assert_eq!(iters_within_budget(4096, 64, 0.01), 320);
        // Slower still: never below the trial's count.
        assert_eq!(iters_within_budget(4096, 64, 1.0), 64);
        // A timer that read zero (or nonsense) leaves the full loop.
        assert_eq!(iters_within_budget(2048, 32, 0.0), 2048);
        assert_eq!(iters_within_budget(2048, 32, f64::NAN), 2048);
    }
}
