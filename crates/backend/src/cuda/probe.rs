//! `kind: probe` has no CUDA kernels: on a GPU the run's own copy and FMA probes
//! ([`super::runtime`]) measure the ceilings, so a probe spec is refused before it runs.

use super::gpu::Gpu;
use super::runtime::{CudaKernels, GpuKernels};
use crate::error::Result;
use crate::kinds::probe::ProbeWorkload;
use crate::kinds::Tensors;
use crate::BackendError;
use std::sync::Arc;

const REASON: &str = "the probe kind runs on the CPU backend; on a GPU the run's own copy and FMA probes measure the ceilings";

impl CudaKernels for ProbeWorkload {
    fn cannot_run(&self) -> Option<String> {
        Some(REASON.into())
    }
    fn device_bytes(&self) -> u64 {
        self.elements * 4 * 3
    }
    fn kernels(&self, _gpu: Arc<Gpu>, _inputs: &Tensors) -> Result<Box<dyn GpuKernels>> {
        Err(BackendError::Unsupported {
            backend: "cuda",
            reason: REASON.into(),
        }
        .into())
    }
}
