//! The CUDA runtime backend: the kernels of `kernels/*.cu`, compiled by NVRTC for the device's
//! own architecture when a case first needs them, launched through cudarc on one stream, timed
//! with CUDA events, with the L2 cache flushed (a buffer twice its size overwritten) before
//! every cold sample. Inputs are generated on the host by the same seeded generator as the CPU
//! backend's and uploaded, so the f64 references of the CPU kernels apply unchanged.
//!
//! Status: not yet run on hardware (`scripts/gpu-check.sh` is the check to run when a GPU is
//! lent). Every launch below, with the kernels, runs end to end in the tests on `tests/cudasim`,
//! a CPU stand-in for the driver library, and its outputs match the f64 references there.

use super::nvrtc::{self, Output};
use crate::backend::cpu::{attention, gemm, launch, rows, Kernels};
use crate::backend::inputs::{bf16_bits, bf16_value, ElementwiseInputs};
use crate::backend::{Backend, Case};
use crate::device::{slug, Ceilings, DeviceInfo};
use crate::error::{Error, Result};
use crate::spec::{ElemOp, Elementwise, Variant, Workload, WorkloadKind};
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaGraph, CudaModule, CudaSlice, CudaStream, DevicePtr,
    DriverError, LaunchConfig, PushKernelArg,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

fn driver_error(what: &str) -> impl Fn(DriverError) -> Error + '_ {
    move |e| Error::Backend(format!("CUDA {what}: {e:?}"))
}

/// Threads per block of the grid-stride and per-row kernels.
const BLOCK: u32 = 256;

/// The opened device: context, the one stream every operation is ordered on, and the modules
/// compiled so far (a module that failed to compile keeps its NVRTC log, so every case that
/// needs it fails with the log and the run goes on).
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    modules: Mutex<HashMap<&'static str, std::result::Result<Arc<CudaModule>, String>>>,
    name: String,
    arch: u32,
    sms: u32,
    l2_bytes: u64,
    memory_bytes: u64,
    /// The manifest's driver summary, and the driver's version for the device identity.
    driver: String,
    driver_version: String,
    /// Overwritten before each cold sample (None in warm mode).
    flush: Mutex<Option<CudaSlice<u8>>>,
}

impl Gpu {
    fn open(flush: Option<u64>) -> Result<Self> {
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
        let name = ctx.name().map_err(unavailable("device name"))?;
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
            name,
            arch: (major * 10 + minor) as u32,
            sms,
            l2_bytes,
            memory_bytes,
            flush: Mutex::new(flush),
        })
    }

    /// The module of one kernel family, compiled (CUBIN for this architecture, PTX for the
    /// driver to JIT if the CUBIN does not load) on first use.
    fn module(&self, family: &'static str) -> Result<Arc<CudaModule>> {
        let mut modules = self
            .modules
            .lock()
            .map_err(|_| Error::Backend("CUDA module cache poisoned".into()))?;
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
        entry.clone().map_err(Error::Backend)
    }

    fn function(&self, family: &'static str, name: &str) -> Result<CudaFunction> {
        self.module(family)?
            .load_function(name)
            .map_err(driver_error("loading a kernel"))
    }

    /// A grid-stride launch over `n` elements: enough blocks to fill every SM several times.
    fn grid_for(&self, n: u64) -> LaunchConfig {
        let blocks = n.div_ceil(BLOCK as u64).clamp(1, self.sms as u64 * 32) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// One block of `BLOCK` threads per row.
    fn per_row(rows: u64) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn upload(&self, host: &[f32]) -> Result<CudaSlice<f32>> {
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

    fn zeros(&self, n: u64) -> Result<CudaSlice<f32>> {
        self.stream
            .alloc_zeros::<f32>(n.max(1) as usize)
            .map_err(driver_error("allocating"))
    }

    /// Seconds between two events recorded around `enqueue` on the stream.
    fn time(&self, enqueue: impl FnOnce() -> Result<()>) -> Result<f64> {
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(timing).map_err(driver_error("event"))?;
        let end = self.ctx.new_event(timing).map_err(driver_error("event"))?;
        start
            .record(&self.stream)
            .map_err(driver_error("recording an event"))?;
        enqueue()?;
        end.record(&self.stream)
            .map_err(driver_error("recording an event"))?;
        end.synchronize()
            .map_err(driver_error("kernel execution"))?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(driver_error("event timing"))?;
        Ok(ms as f64 / 1e3)
    }

    fn flush_l2(&self) -> Result<()> {
        let mut flush = self
            .flush
            .lock()
            .map_err(|_| Error::Backend("CUDA flush buffer poisoned".into()))?;
        if let Some(buf) = flush.as_mut() {
            self.stream
                .memset_zeros(buf)
                .map_err(driver_error("flushing L2"))?;
        }
        Ok(())
    }

    /// Device-to-device copy bandwidth (best of 5, bytes read + written) and the FP32 FMA peak
    /// (best of 5): the GPU's roofline ceilings as measured, beside the datasheet's.
    fn probe(&self, probe_bytes: Option<u64>) -> Result<Ceilings> {
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
        let iters: i32 = 4096;
        let (a, b_coef) = (0.999_f32, 0.001_f32);
        let fma_cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut best_fma = f64::INFINITY;
        for _ in 0..6 {
            let t = self.time(|| {
                let mut b = self.stream.launch_builder(&fma);
                b.arg(&mut out).arg(&a).arg(&b_coef).arg(&iters);
                // SAFETY: probe_fma(float* out, float a, float b, int iters) writes one float
                // per thread; `out` holds one per launched thread.
                unsafe { b.launch(fma_cfg) }
                    .map(|_| ())
                    .map_err(driver_error("launching probe_fma"))
            })?;
            best_fma = best_fma.min(t);
        }
        // The tensor-core peak (bf16 mma.sync, f32 accumulation) on devices that have bf16
        // tensor cores: the compute ceiling of bf16 workloads. Each warp runs a dependent chain,
        // so 8 warps per block and 8 blocks per SM keep enough of them in flight.
        let tensor_flops_per_sec = if self.arch >= 80 {
            let mma = self.function("probe", "probe_mma_bf16")?;
            let mma_blocks = self.sms * 8;
            let mma_threads = mma_blocks as u64 * BLOCK as u64;
            let warps = mma_threads / 32;
            let mut mma_out = self.zeros(mma_threads)?;
            let mma_iters: i32 = 2048;
            let mma_cfg = LaunchConfig {
                grid_dim: (mma_blocks, 1, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut best_mma = f64::INFINITY;
            for _ in 0..6 {
                let t = self.time(|| {
                    let mut b = self.stream.launch_builder(&mma);
                    b.arg(&mut mma_out).arg(&mma_iters);
                    // SAFETY: probe_mma_bf16(float* out, int iters) writes one float per
                    // thread; `mma_out` holds one per launched thread; sm_80+ was checked.
                    unsafe { b.launch(mma_cfg) }
                        .map(|_| ())
                        .map_err(driver_error("launching probe_mma_bf16"))
                })?;
                best_mma = best_mma.min(t);
            }
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
        })
    }

    fn free_bytes(&self) -> Option<u64> {
        self.ctx.mem_get_info().ok().map(|(free, _)| free as u64)
    }
}

/// The CUDA backend.
pub struct CudaBackend {
    gpu: Arc<Gpu>,
}

impl CudaBackend {
    /// Opens device 0 and readies NVRTC; `BackendUnavailable` (exit 3) when there is no driver,
    /// no device or no NVRTC. `flush`: None for twice the L2, Some(0) for warm runs.
    pub fn open(flush: Option<u64>) -> Result<Self> {
        Ok(CudaBackend {
            gpu: Arc::new(Gpu::open(flush)?),
        })
    }

    pub fn describe(&self) -> String {
        let g = &self.gpu;
        format!(
            "{} (sm_{}, {} SMs, {} MiB L2; {})",
            g.name,
            g.arch,
            g.sms,
            g.l2_bytes >> 20,
            g.driver
        )
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device(&self) -> DeviceInfo {
        let host = DeviceInfo::this_cpu();
        let g = &self.gpu;
        DeviceInfo {
            // Name, architecture and SM count (a MIG slice or a cut-down part has fewer SMs):
            // what makes two GPUs' timings comparable. Memory and driver are recorded and
            // compared with a warning, not keyed: a driver update should not orphan baselines.
            key: format!("cuda-{}-sm{}-{}sms", slug(&g.name), g.arch, g.sms),
            kind: "cuda".into(),
            name: g.name.clone(),
            cores: g.sms as usize,
            llc_bytes: g.l2_bytes,
            simd: format!("sm_{}", g.arch),
            os: host.os,
            kernel: host.kernel,
            governor: host.governor,
            rustc: host.rustc,
            memory_bytes: g.memory_bytes,
            driver: g.driver_version.clone(),
        }
    }

    fn ceilings(&self, probe_bytes: Option<u64>) -> Result<Ceilings> {
        self.gpu.probe(probe_bytes)
    }

    fn flush_bytes(&self) -> u64 {
        self.gpu
            .flush
            .lock()
            .ok()
            .and_then(|f| f.as_ref().map(|b| b.len() as u64))
            .unwrap_or(0)
    }

    fn tiling(&self) -> crate::ledger::Tiling {
        crate::ledger::Tiling {
            reuse_cache_bytes: self.gpu.l2_bytes,
            ..crate::ledger::Tiling::CUDA
        }
    }

    fn required_bytes(&self, workload: &Workload) -> u64 {
        device_bytes(workload)
    }

    fn prepare(&self, workload: &Workload, seed: u64) -> Result<Box<dyn Case>> {
        let need = device_bytes(workload);
        if let Some(free) = self.gpu.free_bytes() {
            if need > free / 10 * 9 {
                return Err(Error::Backend(format!(
                    "the case needs {:.2} GiB of device memory but {:.2} GiB is free",
                    need as f64 / (1u64 << 30) as f64,
                    free as f64 / (1u64 << 30) as f64
                )));
            }
        }
        let gpu = self.gpu.clone();
        Ok(match workload {
            Workload::Elementwise(w) => Box::new(GpuCase::new(ElementwiseGpu::new(gpu, w, seed)?)),
            Workload::Rmsnorm(r) | Workload::Layernorm(r) | Workload::Softmax(r) => Box::new(
                GpuCase::new(RowsGpu::new(gpu, workload.kind(), r, seed)?),
            ),
            Workload::Gemm(g) => Box::new(GpuCase::new(GemmGpu::new(gpu, g, seed)?)),
            Workload::Attention(a) if a.dtype == crate::spec::DType::Bf16 => {
                Box::new(GpuCase::new(AttentionBf16Gpu::new(gpu, a, seed)?))
            }
            Workload::Attention(a) => Box::new(GpuCase::new(AttentionGpu::new(gpu, a, seed)?)),
            Workload::LaunchChain(l) => Box::new(GpuCase::new(ChainGpu::new(gpu, l, seed)?)),
            Workload::Probe(_) => {
                return Err(Error::Backend(
                    "the probe kind runs on the CPU backend; on a GPU the run's own copy and FMA probes measure the ceilings".into(),
                ))
            }
        })
    }
}

/// Device bytes of a case: inputs, both outputs and every intermediate.
fn device_bytes(workload: &Workload) -> u64 {
    match workload {
        Workload::Elementwise(w) => {
            let n = w.elements() * 4;
            let operands = w
                .ops
                .iter()
                .filter(|o| matches!(o, ElemOp::Add | ElemOp::Mul))
                .count() as u64;
            n * (1 + operands + 4) + w.cols * 4
        }
        Workload::Rmsnorm(r) | Workload::Layernorm(r) | Workload::Softmax(r) => {
            r.elements() * 4 * 5 + r.cols * 8 + r.rows * 12
        }
        Workload::Gemm(g) => 4 * (g.m * g.k + g.k * g.n + 2 * g.m * g.n),
        Workload::Attention(a) => {
            let elem = a.dtype.bytes();
            let t = a.heads_total() * a.seq_len * a.head_dim * elem;
            5 * t + 2 * a.heads_total() * a.seq_len * a.seq_len * elem
        }
        Workload::LaunchChain(l) => l.elements * 4 * 5,
        Workload::Probe(p) => p.elements * 4 * 3,
    }
}

/// One workload kind on the GPU: enqueue a variant, give its output buffer, and the host
/// reference (the CPU backend's, on the same inputs).
trait GpuKernels {
    fn gpu(&self) -> &Arc<Gpu>;
    /// Enqueues `variant` on the stream (no synchronisation).
    fn enqueue(&mut self, variant: Variant) -> Result<()>;
    /// The f32 output buffer of `variant`; kernels that store another type return None and
    /// override [`Self::output_host`].
    fn output_buffer(&self, variant: Variant) -> Option<&CudaSlice<f32>>;
    /// The output of `variant` on the host, as f32.
    fn output_host(&self, variant: Variant) -> Result<Vec<f32>> {
        let buf = self.output_buffer(variant).ok_or_else(|| {
            Error::Backend(format!(
                "no f32 output buffer for variant {}",
                variant.name()
            ))
        })?;
        self.gpu()
            .stream
            .clone_dtoh(buf)
            .map_err(driver_error("copying the output to the host"))
    }
    fn output_len(&self) -> usize;
    fn reference(&self, i: usize) -> f64;
    fn reference_samples(&self) -> usize {
        4096
    }
}

struct GpuCase<K: GpuKernels> {
    k: K,
    ran: Vec<Variant>,
}

impl<K: GpuKernels> GpuCase<K> {
    fn new(k: K) -> Self {
        GpuCase { k, ran: Vec::new() }
    }
}

impl<K: GpuKernels> Case for GpuCase<K> {
    fn run_timed(&mut self, variant: Variant) -> Result<f64> {
        // An owned handle, so that the enqueue closure may borrow the kernels mutably.
        let gpu = self.k.gpu().clone();
        let t = gpu.time(|| self.k.enqueue(variant))?;
        if !self.ran.contains(&variant) {
            self.ran.push(variant);
        }
        Ok(t)
    }

    fn flush_caches(&mut self) {
        // A failed flush shows up as the next launch's error; nothing to report here.
        let _ = self.k.gpu().flush_l2();
    }

    fn output(&self, variant: Variant) -> Result<Cow<'_, [f32]>> {
        if !self.ran.contains(&variant) {
            return Err(Error::Backend(format!(
                "variant {} has not run",
                variant.name()
            )));
        }
        let mut host = self.k.output_host(variant)?;
        host.truncate(self.k.output_len());
        Ok(Cow::Owned(host))
    }

    fn output_len(&self) -> usize {
        self.k.output_len()
    }

    fn reference(&self, index: usize) -> f64 {
        self.k.reference(index)
    }

    fn reference_samples(&self) -> usize {
        self.k.reference_samples()
    }
}

/// Launches `func` with the arguments pushed by `args`.
fn launch<'a>(
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
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(|e| Error::Backend(format!("CUDA launching {what}: {e:?}")))
}

// ---- elementwise chains ----

struct ElementwiseGpu {
    gpu: Arc<Gpu>,
    w: Elementwise,
    inputs: ElementwiseInputs,
    x: CudaSlice<f32>,
    // Never read on the host: owned so that the operand pointers in the chains stay valid.
    #[allow(dead_code)]
    bias: CudaSlice<f32>,
    #[allow(dead_code)]
    operands: Vec<CudaSlice<f32>>,
    t0: CudaSlice<f32>,
    t1: CudaSlice<f32>,
    out_unfused: CudaSlice<f32>,
    out_fused: CudaSlice<f32>,
    /// The whole chain (fused) and one one-op chain per op (unfused), operand pointers filled.
    fused: OplChain,
    unfused: Vec<OplChain>,
    chain_fn: CudaFunction,
}

/// Ops per chain that `ew_chain` takes (`OPL_MAX_OPS` in elementwise.cu).
const MAX_CHAIN_OPS: usize = 16;

/// `struct OplChain` of elementwise.cu, passed by value: operand device pointers, op codes and
/// the op count, with C's layout.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct OplChain {
    operands: [u64; MAX_CHAIN_OPS],
    ops: [i32; MAX_CHAIN_OPS],
    n_ops: i32,
}

// SAFETY: OplChain is #[repr(C)] plain data whose layout matches `struct OplChain` in
// elementwise.cu (16 pointers, 16 ints, one int; 200 bytes with tail padding on both sides).
unsafe impl cudarc::driver::DeviceRepr for OplChain {}

impl OplChain {
    /// The chain of `ops` (op code, operand device pointer); at most MAX_CHAIN_OPS.
    fn of(ops: &[(i32, u64)]) -> Self {
        let mut c = OplChain {
            operands: [0; MAX_CHAIN_OPS],
            ops: [0; MAX_CHAIN_OPS],
            n_ops: ops.len() as i32,
        };
        for (k, &(op, ptr)) in ops.iter().enumerate() {
            c.ops[k] = op;
            c.operands[k] = ptr;
        }
        c
    }
}

fn op_code(op: ElemOp) -> i32 {
    match op {
        ElemOp::BiasAdd => 0,
        ElemOp::Add => 1,
        ElemOp::Mul => 2,
        ElemOp::Scale => 3,
        ElemOp::Relu => 4,
        ElemOp::Gelu => 5,
        ElemOp::Silu => 6,
    }
}

/// The operand op `k` reads: the bias for bias_add, its own tensor for add/mul, and (unread)
/// the bias otherwise, so that every pointer handed to a kernel is valid.
fn operand_of<'a>(
    op: ElemOp,
    k: usize,
    bias: &'a CudaSlice<f32>,
    operands: &'a [CudaSlice<f32>],
) -> &'a CudaSlice<f32> {
    match op {
        ElemOp::Add | ElemOp::Mul => &operands[k],
        _ => bias,
    }
}

impl ElementwiseGpu {
    fn new(gpu: Arc<Gpu>, w: &Elementwise, seed: u64) -> Result<Self> {
        let inputs = ElementwiseInputs::generate(w, seed);
        let n = w.elements();
        let x = gpu.upload(&inputs.x)?;
        let bias = gpu.upload(&inputs.bias)?;
        let operands = inputs
            .operands
            .iter()
            .map(|o| gpu.upload(o))
            .collect::<Result<Vec<_>>>()?;
        if w.ops.len() > MAX_CHAIN_OPS {
            return Err(Error::Backend(format!(
                "the CUDA elementwise kernel takes chains of at most {MAX_CHAIN_OPS} ops (this one has {})",
                w.ops.len()
            )));
        }
        // Each op with the device pointer of its operand (valid for as long as the buffers
        // live in this case, which owns them).
        let steps: Vec<(i32, u64)> = w
            .ops
            .iter()
            .enumerate()
            .map(|(k, op)| {
                let (p, _sync) = operand_of(*op, k, &bias, &operands).device_ptr(&gpu.stream);
                (op_code(*op), p)
            })
            .collect();
        Ok(ElementwiseGpu {
            chain_fn: gpu.function("elementwise", "ew_chain")?,
            fused: OplChain::of(&steps),
            unfused: steps.iter().map(|s| OplChain::of(&[*s])).collect(),
            t0: gpu.zeros(n)?,
            t1: gpu.zeros(n)?,
            out_unfused: gpu.zeros(n)?,
            out_fused: gpu.zeros(n)?,
            w: w.clone(),
            inputs,
            x,
            bias,
            operands,
            gpu,
        })
    }
}

impl GpuKernels for ElementwiseGpu {
    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn enqueue(&mut self, variant: Variant) -> Result<()> {
        let n = self.w.elements() as i64;
        let cols = self.w.cols as i64;
        let scale = self.w.scale as f32;
        // Rows of a multiple of 4 columns run as float4: a quarter of the threads.
        let cfg = self.gpu.grid_for(if cols % 4 == 0 {
            n as u64 / 4
        } else {
            n as u64
        });
        let gpu = &self.gpu;
        if variant == Variant::Fused {
            let chain = self.fused;
            // SAFETY (launch): ew_chain(y, x, chain, scale, n, cols): y and x hold n floats;
            // each operand pointer of the chain is the bias (cols floats) for bias_add or a
            // tensor of n floats for add/mul; all are 256-byte aligned device allocations.
            return launch(gpu, &self.chain_fn, cfg, "ew_chain", |b| {
                b.arg(&mut self.out_fused)
                    .arg(&self.x)
                    .arg(&chain)
                    .arg(&scale)
                    .arg(&n)
                    .arg(&cols);
            });
        }
        let passes = self.unfused.len() as u64;
        for (k, chain) in self.unfused.iter().enumerate() {
            let (src, dst) = crate::backend::cpu::launch::chain_buffers(
                k as u64,
                passes,
                &self.x,
                &mut self.t0,
                &mut self.t1,
                &mut self.out_unfused,
            );
            // SAFETY (launch): as for the fused chain, with a one-op chain; src and dst are
            // distinct buffers of n floats.
            launch(gpu, &self.chain_fn, cfg, "ew_chain", |b| {
                b.arg(dst)
                    .arg(src)
                    .arg(chain)
                    .arg(&scale)
                    .arg(&n)
                    .arg(&cols);
            })?;
        }
        Ok(())
    }

    fn output_buffer(&self, variant: Variant) -> Option<&CudaSlice<f32>> {
        Some(if variant == Variant::Fused {
            &self.out_fused
        } else {
            &self.out_unfused
        })
    }

    fn output_len(&self) -> usize {
        self.w.elements() as usize
    }

    fn reference(&self, i: usize) -> f64 {
        self.inputs.reference(&self.w, i)
    }
}

// ---- RMSNorm, LayerNorm, softmax ----

struct RowsGpu {
    gpu: Arc<Gpu>,
    kind: WorkloadKind,
    host: rows::RowKernels,
    rows: u64,
    cols: u64,
    eps: f32,
    x: CudaSlice<f32>,
    w: CudaSlice<f32>,
    b: CudaSlice<f32>,
    t1: CudaSlice<f32>,
    t2: CudaSlice<f32>,
    v1: CudaSlice<f32>,
    v2: CudaSlice<f32>,
    v3: CudaSlice<f32>,
    out_unfused: CudaSlice<f32>,
    out_fused: CudaSlice<f32>,
}

impl RowsGpu {
    fn new(gpu: Arc<Gpu>, kind: WorkloadKind, r: &crate::spec::RowOp, seed: u64) -> Result<Self> {
        let host = rows::RowKernels::new(kind, r.clone(), seed, false);
        let (x, w, b) = host.host_inputs();
        let n = r.elements();
        Ok(RowsGpu {
            x: gpu.upload(x)?,
            w: gpu.upload(w)?,
            b: gpu.upload(b)?,
            t1: gpu.zeros(n)?,
            t2: gpu.zeros(n)?,
            v1: gpu.zeros(r.rows)?,
            v2: gpu.zeros(r.rows)?,
            v3: gpu.zeros(r.rows)?,
            out_unfused: gpu.zeros(n)?,
            out_fused: gpu.zeros(n)?,
            rows: r.rows,
            cols: r.cols,
            eps: r.eps as f32,
            kind,
            host,
            gpu,
        })
    }
}

impl GpuKernels for RowsGpu {
    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn enqueue(&mut self, variant: Variant) -> Result<()> {
        let n = (self.rows * self.cols) as i64;
        let (cols, rows, eps) = (self.cols as i64, self.rows as i64, self.eps);
        let gpu = self.gpu.clone();
        let per_row = Gpu::per_row(self.rows);
        // SAFETY (launches below): every kernel of rows.cu takes full tensors of n = rows·cols
        // floats, per-row vectors of `rows` floats and per-column vectors of `cols` floats;
        // the buffers are allocated with exactly those sizes.
        // y = step(x, v) elementwise, v indexed per row or per column: (y, x, v, n, cols).
        let step = |name: &'static str, y: &mut CudaSlice<f32>, x: &CudaSlice<f32>, v| {
            let f = gpu.function("rows", name)?;
            launch(&gpu, &f, gpu.grid_for(n as u64), name, |a| {
                a.arg(y).arg(x).arg(v).arg(&n).arg(&cols);
            })
        };
        // out[r] = reduce(x[r, :]), one block per row: (out, x, cols).
        let reduce = |name: &'static str, out: &mut CudaSlice<f32>, x: &CudaSlice<f32>| {
            let f = gpu.function("rows", name)?;
            launch(&gpu, &f, per_row, name, |a| {
                a.arg(out).arg(x).arg(&cols);
            })
        };
        let rsqrt = |out: &mut CudaSlice<f32>, x: &CudaSlice<f32>| {
            let f = gpu.function("rows", "row_rsqrt")?;
            launch(&gpu, &f, gpu.grid_for(self.rows), "row_rsqrt", |a| {
                a.arg(out).arg(x).arg(&eps).arg(&rows);
            })
        };
        let square = |y: &mut CudaSlice<f32>, x: &CudaSlice<f32>| {
            let f = gpu.function("rows", "row_square")?;
            launch(&gpu, &f, gpu.grid_for(n as u64), "row_square", |a| {
                a.arg(y).arg(x).arg(&n);
            })
        };
        let fused = variant == Variant::Fused;
        match (self.kind, fused) {
            (WorkloadKind::Rmsnorm, true) => {
                let f = gpu.function("rows", "rmsnorm_fused")?;
                launch(&gpu, &f, per_row, "rmsnorm_fused", |a| {
                    a.arg(&mut self.out_fused)
                        .arg(&self.x)
                        .arg(&self.w)
                        .arg(&eps)
                        .arg(&cols);
                })
            }
            (WorkloadKind::Layernorm, true) => {
                let f = gpu.function("rows", "layernorm_fused")?;
                launch(&gpu, &f, per_row, "layernorm_fused", |a| {
                    a.arg(&mut self.out_fused)
                        .arg(&self.x)
                        .arg(&self.w)
                        .arg(&self.b)
                        .arg(&eps)
                        .arg(&cols);
                })
            }
            (_, true) => {
                let f = gpu.function("rows", "softmax_fused")?;
                launch(&gpu, &f, per_row, "softmax_fused", |a| {
                    a.arg(&mut self.out_fused).arg(&self.x).arg(&cols);
                })
            }
            (WorkloadKind::Rmsnorm, false) => {
                square(&mut self.t1, &self.x)?;
                reduce("row_mean", &mut self.v1, &self.t1)?;
                rsqrt(&mut self.v2, &self.v1)?;
                step("row_scale_by", &mut self.t2, &self.x, &self.v2)?;
                step("row_mul_weight", &mut self.out_unfused, &self.t2, &self.w)
            }
            (WorkloadKind::Layernorm, false) => {
                reduce("row_mean", &mut self.v1, &self.x)?;
                step("row_sub", &mut self.t1, &self.x, &self.v1)?;
                reduce("row_mean_sq", &mut self.v2, &self.t1)?;
                rsqrt(&mut self.v3, &self.v2)?;
                step("row_scale_by", &mut self.t2, &self.t1, &self.v3)?;
                let f = gpu.function("rows", "row_affine")?;
                launch(&gpu, &f, gpu.grid_for(n as u64), "row_affine", |a| {
                    a.arg(&mut self.out_unfused)
                        .arg(&self.t2)
                        .arg(&self.w)
                        .arg(&self.b)
                        .arg(&n)
                        .arg(&cols);
                })
            }
            (_, false) => {
                reduce("row_max", &mut self.v1, &self.x)?;
                step("row_exp_sub", &mut self.t1, &self.x, &self.v1)?;
                reduce("row_sum", &mut self.v2, &self.t1)?;
                step("row_div", &mut self.out_unfused, &self.t1, &self.v2)
            }
        }
    }

    fn output_buffer(&self, variant: Variant) -> Option<&CudaSlice<f32>> {
        Some(if variant == Variant::Fused {
            &self.out_fused
        } else {
            &self.out_unfused
        })
    }

    fn output_len(&self) -> usize {
        (self.rows * self.cols) as usize
    }

    fn reference(&self, i: usize) -> f64 {
        self.host.reference(i)
    }
}

// ---- GEMM ----

struct GemmGpu {
    gpu: Arc<Gpu>,
    host: gemm::GemmKernels,
    g: crate::spec::Gemm,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c_naive: CudaSlice<f32>,
    c_tiled: CudaSlice<f32>,
}

impl GemmGpu {
    fn new(gpu: Arc<Gpu>, g: &crate::spec::Gemm, seed: u64) -> Result<Self> {
        let host = gemm::GemmKernels::new(g.clone(), seed);
        let (a, b) = host.host_inputs();
        Ok(GemmGpu {
            a: gpu.upload(a)?,
            b: gpu.upload(b)?,
            c_naive: gpu.zeros(g.m * g.n)?,
            c_tiled: gpu.zeros(g.m * g.n)?,
            g: g.clone(),
            host,
            gpu,
        })
    }
}

impl GpuKernels for GemmGpu {
    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn enqueue(&mut self, variant: Variant) -> Result<()> {
        let (m, n, k) = (self.g.m as i32, self.g.n as i32, self.g.k as i32);
        let tiled = variant == Variant::Tiled;
        // naive: one thread per C element in 16×16 blocks; tiled: a 64×64 C tile per 16×16
        // block (each thread a 4×4 register tile), as gemm.cu documents.
        let span = if tiled { 64 } else { 16 };
        let cfg = LaunchConfig {
            grid_dim: ((n as u32).div_ceil(span), (m as u32).div_ceil(span), 1),
            block_dim: (16, 16, 1),
            shared_mem_bytes: 0,
        };
        let name = if tiled { "gemm_tiled" } else { "gemm_naive" };
        let f = self.gpu.function("gemm", name)?;
        let gpu = self.gpu.clone();
        let c = if tiled {
            &mut self.c_tiled
        } else {
            &mut self.c_naive
        };
        // SAFETY (launch): gemm_*(C, A, B, m, n, k): C holds m·n, A m·k, B k·n floats.
        launch(&gpu, &f, cfg, name, |a| {
            a.arg(c).arg(&self.a).arg(&self.b).arg(&m).arg(&n).arg(&k);
        })
    }

    fn output_buffer(&self, variant: Variant) -> Option<&CudaSlice<f32>> {
        Some(if variant == Variant::Tiled {
            &self.c_tiled
        } else {
            &self.c_naive
        })
    }

    fn output_len(&self) -> usize {
        (self.g.m * self.g.n) as usize
    }

    fn reference(&self, i: usize) -> f64 {
        self.host.reference(i)
    }

    fn reference_samples(&self) -> usize {
        self.host.reference_samples()
    }
}

// ---- attention ----

/// The device tensors of an attention case in the kernels' element type (f32, or bf16 bits as
/// u16), and the launches both element types share.
struct AttnBuffers<T> {
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    s: CudaSlice<T>,
    p: CudaSlice<T>,
    o_standard: CudaSlice<T>,
    o_flash: CudaSlice<T>,
}

impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> AttnBuffers<T> {
    /// Uploads Q, K, V and allocates S, P and both outputs.
    fn new(gpu: &Gpu, a: &crate::spec::Attention, q: &[T], k: &[T], v: &[T]) -> Result<Self> {
        let up = |t: &[T]| {
            gpu.stream
                .clone_htod(t)
                .map_err(driver_error("copying inputs to the device"))
        };
        let zeros = |n: u64| {
            gpu.stream
                .alloc_zeros::<T>(n.max(1) as usize)
                .map_err(driver_error("allocating"))
        };
        let t = a.heads_total() * a.seq_len * a.head_dim;
        let nn = a.heads_total() * a.seq_len * a.seq_len;
        Ok(AttnBuffers {
            q: up(q)?,
            k: up(k)?,
            v: up(v)?,
            s: zeros(nn)?,
            p: zeros(nn)?,
            o_standard: zeros(t)?,
            o_flash: zeros(t)?,
        })
    }

    fn output(&self, variant: Variant) -> &CudaSlice<T> {
        if variant == Variant::Flash {
            &self.o_flash
        } else {
            &self.o_standard
        }
    }

    /// Standard attention's three launches — S = Q·Kᵀ·scale, P = softmax(S), O = P·V — of
    /// kernel `family`, whose kernels are named `attn_scores{suffix}` and so on ("" in
    /// attention.cu, "_bf16" in attention_bf16.cu).
    fn enqueue_standard(
        &mut self,
        gpu: &Gpu,
        family: &'static str,
        suffix: &str,
        a: &crate::spec::Attention,
        scale: f32,
    ) -> Result<()> {
        let bh = a.heads_total();
        let (n, d) = (a.seq_len as i32, a.head_dim as i32);
        let causal = a.causal as i32;
        let total_s = (bh * a.seq_len * a.seq_len) as i64;
        let total_o = (bh * a.seq_len * a.head_dim) as i64;
        let (scores, softmax, pv) = (
            format!("attn_scores{suffix}"),
            format!("attn_softmax_rows{suffix}"),
            format!("attn_pv{suffix}"),
        );
        // SAFETY (launches): S and P hold bh·n·n elements, Q, K, V and O bh·n·d, all of the
        // element type the kernels of `family` take.
        launch(
            gpu,
            &gpu.function(family, &scores)?,
            gpu.grid_for(total_s as u64),
            &scores,
            |x| {
                x.arg(&mut self.s)
                    .arg(&self.q)
                    .arg(&self.k)
                    .arg(&n)
                    .arg(&d)
                    .arg(&scale)
                    .arg(&causal)
                    .arg(&total_s);
            },
        )?;
        launch(
            gpu,
            &gpu.function(family, &softmax)?,
            Gpu::per_row(bh * a.seq_len),
            &softmax,
            |x| {
                x.arg(&mut self.p).arg(&self.s).arg(&n);
            },
        )?;
        launch(
            gpu,
            &gpu.function(family, &pv)?,
            gpu.grid_for(total_o as u64),
            &pv,
            |x| {
                x.arg(&mut self.o_standard)
                    .arg(&self.p)
                    .arg(&self.v)
                    .arg(&n)
                    .arg(&d)
                    .arg(&causal)
                    .arg(&total_o);
            },
        )
    }
}

/// One block of 128 threads per (head, `rows` query rows): the flash kernels' grid.
fn flash_grid(a: &crate::spec::Attention, rows: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            a.heads_total() as u32 * (a.seq_len as u32).div_ceil(rows),
            1,
            1,
        ),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    }
}

struct AttentionGpu {
    gpu: Arc<Gpu>,
    host: attention::AttentionKernels,
    a: crate::spec::Attention,
    scale: f32,
    buf: AttnBuffers<f32>,
}

impl AttentionGpu {
    fn new(gpu: Arc<Gpu>, a: &crate::spec::Attention, seed: u64) -> Result<Self> {
        if a.head_dim > 128 || !a.head_dim.is_multiple_of(32) {
            return Err(Error::Backend(format!(
                "the CUDA flash kernel needs head_dim <= 128 and a multiple of 32 (got {})",
                a.head_dim
            )));
        }
        let host = attention::AttentionKernels::new(a.clone(), seed);
        let (q, k, v, scale) = host.host_inputs();
        let buf = AttnBuffers::new(&gpu, a, q, k, v)?;
        Ok(AttentionGpu {
            buf,
            scale,
            a: a.clone(),
            host,
            gpu,
        })
    }
}

impl GpuKernels for AttentionGpu {
    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn enqueue(&mut self, variant: Variant) -> Result<()> {
        let gpu = self.gpu.clone();
        if variant != Variant::Flash {
            return self
                .buf
                .enqueue_standard(&gpu, "attention", "", &self.a, self.scale);
        }
        let (n, d) = (self.a.seq_len as i32, self.a.head_dim as i32);
        let causal = self.a.causal as i32;
        let scale = self.scale;
        let f = gpu.function("attention", "flash_attn_f32")?;
        let b = &mut self.buf;
        // SAFETY (launch): flash_attn_f32(O, Q, K, V, n, d, scale, causal): all four hold
        // bh·n·d floats; d ≤ 128 and d % 32 == 0 were checked when the case was built; one
        // block per (head, 32 query rows), as attention.cu documents.
        launch(&gpu, &f, flash_grid(&self.a, 32), "flash_attn_f32", |x| {
            x.arg(&mut b.o_flash)
                .arg(&b.q)
                .arg(&b.k)
                .arg(&b.v)
                .arg(&n)
                .arg(&d)
                .arg(&scale)
                .arg(&causal);
        })
    }

    fn output_buffer(&self, variant: Variant) -> Option<&CudaSlice<f32>> {
        Some(self.buf.output(variant))
    }

    fn output_len(&self) -> usize {
        (self.a.heads_total() * self.a.seq_len * self.a.head_dim) as usize
    }

    fn reference(&self, i: usize) -> f64 {
        self.host.reference(i)
    }

    fn reference_samples(&self) -> usize {
        self.host.reference_samples()
    }
}

// ---- attention in bf16 on tensor cores ----

/// Attention with bf16 tensors (`attention_bf16.cu`): the standard variant's three kernels keep
/// S and P in bf16; flash runs on tensor cores. Inputs are the CPU backend's, rounded to bf16
/// on the host (so the f64 reference sees the same values); outputs come back as f32.
struct AttentionBf16Gpu {
    gpu: Arc<Gpu>,
    host: attention::AttentionKernels,
    a: crate::spec::Attention,
    scale: f32,
    buf: AttnBuffers<u16>,
}

impl AttentionBf16Gpu {
    fn new(gpu: Arc<Gpu>, a: &crate::spec::Attention, seed: u64) -> Result<Self> {
        if gpu.arch < 80 {
            return Err(Error::Backend(format!(
                "bf16 attention needs tensor cores with bf16 (compute capability 8.0 or newer); this device is sm_{}",
                gpu.arch
            )));
        }
        if a.head_dim != 128 {
            return Err(Error::Backend(format!(
                "the CUDA bf16 flash kernel is built for head_dim 128 (got {})",
                a.head_dim
            )));
        }
        let mut host = attention::AttentionKernels::new(a.clone(), seed);
        host.round_inputs_to_bf16();
        let (q, k, v, scale) = host.host_inputs();
        let bits = |t: &[f32]| -> Vec<u16> { t.iter().map(|&x| bf16_bits(x)).collect() };
        let buf = AttnBuffers::new(&gpu, a, &bits(q), &bits(k), &bits(v))?;
        Ok(AttentionBf16Gpu {
            buf,
            scale,
            a: a.clone(),
            host,
            gpu,
        })
    }
}

impl GpuKernels for AttentionBf16Gpu {
    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn enqueue(&mut self, variant: Variant) -> Result<()> {
        let gpu = self.gpu.clone();
        if variant != Variant::Flash {
            return self
                .buf
                .enqueue_standard(&gpu, "attention_bf16", "_bf16", &self.a, self.scale);
        }
        let n = self.a.seq_len as i32;
        let causal = self.a.causal as i32;
        let scale_log2e = self.scale * std::f32::consts::LOG2_E;
        let f = gpu.function("attention_bf16", "flash_attn_bf16")?;
        let b = &mut self.buf;
        // SAFETY (launch): flash_attn_bf16(O, Q, K, V, n, scale·log2e, causal): all four hold
        // bh·n·128 bf16; head_dim 128 and sm_80+ were checked when the case was built; one
        // block of 4 warps per (head, 64 query rows), as attention_bf16.cu documents.
        launch(&gpu, &f, flash_grid(&self.a, 64), "flash_attn_bf16", |x| {
            x.arg(&mut b.o_flash)
                .arg(&b.q)
                .arg(&b.k)
                .arg(&b.v)
                .arg(&n)
                .arg(&scale_log2e)
                .arg(&causal);
        })
    }

    fn output_buffer(&self, _variant: Variant) -> Option<&CudaSlice<f32>> {
        None
    }

    fn output_host(&self, variant: Variant) -> Result<Vec<f32>> {
        let bits = self
            .gpu
            .stream
            .clone_dtoh(self.buf.output(variant))
            .map_err(driver_error("copying the output to the host"))?;
        Ok(bits.into_iter().map(bf16_value).collect())
    }

    fn output_len(&self) -> usize {
        (self.a.heads_total() * self.a.seq_len * self.a.head_dim) as usize
    }

    fn reference(&self, i: usize) -> f64 {
        self.host.reference(i)
    }

    fn reference_samples(&self) -> usize {
        self.host.reference_samples()
    }
}

// ---- launch chains: eager launches vs one CUDA graph replay ----

struct ChainGpu {
    gpu: Arc<Gpu>,
    host: launch::LaunchKernels,
    n_ops: u64,
    elements: u64,
    x: CudaSlice<f32>,
    t0: CudaSlice<f32>,
    t1: CudaSlice<f32>,
    out_eager: CudaSlice<f32>,
    out_graph: CudaSlice<f32>,
    func: CudaFunction,
    graph: Option<CudaGraph>,
}

impl ChainGpu {
    fn new(gpu: Arc<Gpu>, l: &crate::spec::LaunchChain, seed: u64) -> Result<Self> {
        let host = launch::LaunchKernels::new(l.clone(), seed);
        let x = gpu.upload(host.host_input())?;
        let mut c = ChainGpu {
            func: gpu.function("launch", "chain_affine")?,
            t0: gpu.zeros(l.elements)?,
            t1: gpu.zeros(l.elements)?,
            out_eager: gpu.zeros(l.elements)?,
            out_graph: gpu.zeros(l.elements)?,
            n_ops: l.n_ops,
            elements: l.elements,
            x,
            host,
            gpu,
            graph: None,
        };
        // The graph variant: the very launches of the eager variant (into its own output),
        // captured once; each sample replays it with one launch.
        c.gpu
            .stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver_error("beginning graph capture"))?;
        let captured = c.enqueue_chain(true);
        let graph = c
            .gpu
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(driver_error("ending graph capture"))?;
        captured?;
        c.graph = Some(
            graph.ok_or_else(|| Error::Backend("CUDA graph capture recorded nothing".into()))?,
        );
        Ok(c)
    }

    fn enqueue_chain(&mut self, into_graph_output: bool) -> Result<()> {
        let n = self.elements as i64;
        let cfg = self.gpu.grid_for(self.elements);
        let gpu = self.gpu.clone();
        let ops = self.n_ops;
        for i in 0..ops {
            let (a, b) = launch::coeffs(i);
            let out = if into_graph_output {
                &mut self.out_graph
            } else {
                &mut self.out_eager
            };
            let (src, dst) =
                launch::chain_buffers(i, ops, &self.x, &mut self.t0, &mut self.t1, out);
            // SAFETY (launch): chain_affine(dst, src, a, b, n): both hold n floats.
            launch(&gpu, &self.func, cfg, "chain_affine", |l| {
                l.arg(dst).arg(src).arg(&a).arg(&b).arg(&n);
            })?;
        }
        Ok(())
    }
}

impl GpuKernels for ChainGpu {
    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn enqueue(&mut self, variant: Variant) -> Result<()> {
        if variant == Variant::Graph {
            return self
                .graph
                .as_ref()
                .ok_or_else(|| Error::Backend("the CUDA graph was not captured".into()))?
                .launch()
                .map_err(driver_error("launching the graph"));
        }
        self.enqueue_chain(false)
    }

    fn output_buffer(&self, variant: Variant) -> Option<&CudaSlice<f32>> {
        Some(if variant == Variant::Graph {
            &self.out_graph
        } else {
            &self.out_eager
        })
    }

    fn output_len(&self) -> usize {
        self.elements as usize
    }

    fn reference(&self, i: usize) -> f64 {
        self.host.reference(i)
    }
}
