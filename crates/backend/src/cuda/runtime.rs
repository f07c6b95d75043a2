//! The CUDA runtime backend: opens the GPU ([`super::gpu`]) and measures each kind with the
//! launches of its own file beside this one (`gemm.rs` for `kind: gemm`), behind
//! [`CudaKernels`], in a table made from the registry; inputs are the kind's seeded host tensors,
//! uploaded, so the kind's f64 reference applies unchanged. A user's CUDA source runs through
//! [`super::user`].

use super::gpu::{driver_error, Gpu};
use crate::device::DeviceKind;
use crate::device::{slug, Ceilings, DeviceInfo};
use crate::error::Result;
use crate::kinds::{Kind, Tensors, Variant, Workload};
use crate::{Backend, BackendError, Case};
use cudarc::driver::CudaSlice;
use std::borrow::Cow;
use std::sync::Arc;

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

/// What the CUDA backend runs of a kind: implemented by every kind, in the kind's file here.
pub trait CudaKernels: Kind {
    /// Why the CUDA kernels cannot run this workload, if they cannot (known without a device).
    fn cannot_run(&self) -> Option<String> {
        None
    }
    /// Device bytes of a case: inputs, both outputs and every intermediate.
    fn device_bytes(&self) -> u64;
    /// Uploads `inputs` and readies both variants.
    fn kernels(&self, gpu: Arc<Gpu>, inputs: &Tensors) -> Result<Box<dyn GpuKernels>>;
}

/// The CUDA kernel table: every kind of the registry, through its [`CudaKernels`].
macro_rules! cuda_table {
    ($($variant:ident($name:literal) => $module:ident :: $ty:ident),* $(,)?) => {
        fn kernels_of(w: &Workload) -> &dyn CudaKernels {
            match w {
                $(Workload::$variant(k) => k),*
            }
        }
    };
}
crate::kinds::registry!(cuda_table);

/// Why the CUDA backend cannot run `w`, if it cannot.
pub fn cannot_run(w: &Workload) -> Option<String> {
    kernels_of(w).cannot_run()
}

impl Backend for CudaBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cuda
    }

    fn device(&self) -> DeviceInfo {
        let host = DeviceInfo::this_cpu();
        let g = &self.gpu;
        DeviceInfo {
            // Name, architecture and SM count (a MIG slice or a cut-down part has fewer SMs):
            // what makes two GPUs' timings comparable. Memory and driver are recorded and
            // compared with a warning, not keyed: a driver update should not orphan baselines.
            key: format!("cuda-{}-sm{}-{}sms", slug(&g.name), g.arch, g.sms),
            kind: crate::device::DeviceKind::Cuda,
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

    fn describe_compute(&self) -> String {
        format!("{} SMs", self.gpu.sms)
    }

    fn mark(&self, seq: u32) -> Result<()> {
        self.gpu.mark(seq)
    }

    fn device_state(&self) -> Option<crate::StateReading> {
        let smi = crate::files::program_on_path("nvidia-smi")?;
        let query = |reasons: &str| {
            let mut c = std::process::Command::new(&smi);
            c.arg(format!("--id={}", self.gpu.pci_bus_id))
                .arg(format!(
                    "--query-gpu={},{reasons}",
                    crate::device::state::QUERY_FIELDS.join(",")
                ))
                .arg("--format=csv,noheader,nounits")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c
        };
        let child = query("clocks_event_reasons.active").spawn().ok()?;
        Some(crate::StateReading::new(
            child,
            query("clocks_throttle_reasons.active"),
        ))
    }

    fn datasheet(&self) -> Option<&'static crate::device::Profile> {
        crate::device::find_profile(&self.gpu.name)
    }

    fn ceilings(&self, probe_bytes: Option<u64>) -> Result<Ceilings> {
        self.gpu.probe(probe_bytes)
    }

    fn flush_method(&self) -> crate::device::FlushMethod {
        // A kernel reads a buffer twice the L2 (`gpu.rs`).
        crate::device::FlushMethod::Read
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

    fn user_kernel(
        &self,
        source: &crate::UserSource,
        workload: &Workload,
        variant: Variant,
        inputs: &Tensors,
    ) -> Result<Box<dyn crate::UserKernel>> {
        Ok(Box::new(super::user::UserKernelGpu::new(
            self.gpu.clone(),
            source,
            workload,
            variant,
            inputs,
        )?))
    }

    /// The host holds the inputs and both outputs once copied back.
    fn host_bytes(&self, workload: &Workload) -> u64 {
        let k = kernels_of(workload);
        // The inputs twice on the host: a confirming pair's set is made while the checked
        // run's is still held (the first set is uploaded and let go before the checked one is
        // made).
        2 * k.input_bytes() + 2 * k.output_len() * 4
    }

    fn prepare(&self, workload: &Workload, inputs: Arc<Tensors>) -> Result<Box<dyn Case>> {
        super::gpu::refuse_if_lost()?;
        let k = kernels_of(workload);
        if let Some(reason) = k.cannot_run() {
            return Err(BackendError::Unsupported {
                backend: "cuda",
                reason,
            }
            .into());
        }
        check_device_room(&self.gpu, k.device_bytes(), "device memory")?;
        let kernels = k.kernels(self.gpu.clone(), &inputs)?;
        self.gpu.warm_up()?;
        Ok(Box::new(GpuCase {
            k: kernels,
            workload: workload.clone(),
            output_len: k.output_len() as usize,
            ran: Vec::new(),
        }))
    }
}

/// Refuses `need_bytes` of device memory where the device reports less free (a tenth kept for
/// the driver and the flush buffer), naming `what` they are for.
fn check_device_room(gpu: &Gpu, need_bytes: u64, what: &str) -> Result<()> {
    match gpu.free_bytes() {
        Some(free) if need_bytes > free / 10 * 9 => Err(BackendError::OutOfMemory {
            spec: what.into(),
            need_bytes,
            available_bytes: free,
        }
        .into()),
        _ => Ok(()),
    }
}

/// One workload kind's kernels on the GPU: enqueue a variant, give its output.
pub trait GpuKernels {
    fn gpu(&self) -> &Arc<Gpu>;
    /// Enqueues `variant` on the stream (no synchronisation).
    fn enqueue(&mut self, variant: Variant) -> Result<()>;
    /// The f32 output buffer of `variant`; kernels that store another type return None and
    /// override [`Self::output_host`].
    fn output_buffer(&self, variant: Variant) -> Option<&CudaSlice<f32>>;
    /// The same buffer, to fill with NaN before the checked run (None: not an f32 buffer, left
    /// as it is).
    fn output_buffer_mut(&mut self, _variant: Variant) -> Option<&mut CudaSlice<f32>> {
        None
    }
    /// Fills `variant`'s output with NaN before the checked run: the f32 buffer by default;
    /// kernels that store another type override this.
    fn poison_output(&mut self, variant: Variant) -> Result<()> {
        let gpu = self.gpu().clone();
        if let Some(buf) = self.output_buffer_mut(variant) {
            let nan = vec![f32::NAN; buf.len()];
            gpu.stream
                .memcpy_htod(&nan, buf)
                .map_err(driver_error("poisoning the output"))?;
        }
        Ok(())
    }
    /// The output of `variant` on the host, as f32.
    fn output_host(&self, variant: Variant) -> Result<Vec<f32>> {
        let buf = self.output_buffer(variant).ok_or_else(|| {
            BackendError::Kernel(format!(
                "no f32 output buffer for variant {}",
                variant.name()
            ))
        })?;
        self.gpu()
            .stream
            .clone_dtoh(buf)
            .map_err(driver_error("copying the output to the host"))
    }
}

struct GpuCase {
    k: Box<dyn GpuKernels>,
    /// What the kernels were made of, to make them again on other inputs.
    workload: Workload,
    output_len: usize,
    ran: Vec<Variant>,
}

impl Case for GpuCase {
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

    fn flush_method(&self) -> crate::device::FlushMethod {
        crate::device::FlushMethod::Read
    }

    fn flush_by_reading(&mut self) {
        // The GPU's flush is a read already.
        self.flush_caches();
    }

    fn poison_output(&mut self, variant: Variant) -> Result<()> {
        self.k.poison_output(variant)
    }

    fn set_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()> {
        // Made again as for a new case (uploads, bf16 copies, operand tables from the new
        // inputs); both sets of device buffers live for a moment, so the room is checked.
        let gpu = self.k.gpu().clone();
        let k = kernels_of(&self.workload);
        check_device_room(
            &gpu,
            k.device_bytes(),
            "device memory for the checked run's second set of inputs",
        )?;
        self.k = k.kernels(gpu, &inputs)?;
        Ok(())
    }

    fn output(&self, variant: Variant) -> Result<Cow<'_, [f32]>> {
        if !self.ran.contains(&variant) {
            return Err(BackendError::NotRun {
                variant: variant.name(),
            }
            .into());
        }
        let mut host = self.k.output_host(variant)?;
        host.truncate(self.output_len);
        Ok(Cow::Owned(host))
    }
}
