//! `kind: custom` has no CUDA kernels: both sides of such a spec are the user's implementations.

use super::gpu::Gpu;
use super::runtime::{CudaKernels, GpuKernels};
use crate::error::{BackendError, Result};
use crate::kinds::custom::Custom;
use crate::kinds::Tensors;
use std::sync::Arc;

const REASON: &str = "kind custom has no built-in kernels: both sides are implementations";

impl CudaKernels for Custom {
    fn cannot_run(&self) -> Option<String> {
        Some(REASON.into())
    }
    fn device_bytes(&self) -> u64 {
        0
    }
    fn kernels(&self, _: Arc<Gpu>, _: &Tensors) -> Result<Box<dyn GpuKernels>> {
        Err(BackendError::Unsupported {
            backend: "cuda",
            reason: REASON.into(),
        }
        .into())
    }
}
