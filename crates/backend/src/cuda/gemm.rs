//! CUDA kernels of `kind: gemm` (`kernels/gemm.cu`): one thread per C element (naive) against
//! 64×64 C tiles with 4×4 register tiles per thread (tiled).

use super::gpu::{launch, Gpu};
use super::runtime::{CudaKernels, GpuKernels};
use crate::error::Result;
use crate::kinds::gemm::Gemm;
use crate::kinds::{Tensors, Variant};
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use std::sync::Arc;

impl CudaKernels for Gemm {
    fn device_bytes(&self) -> u64 {
        4 * (self.m * self.k + self.k * self.n + 2 * self.m * self.n)
    }
    fn kernels(&self, gpu: Arc<Gpu>, inputs: &Tensors) -> Result<Box<dyn GpuKernels>> {
        Ok(Box::new(GemmGpu::new(gpu, self, inputs)?))
    }
}

struct GemmGpu {
    gpu: Arc<Gpu>,
    g: Gemm,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c_naive: CudaSlice<f32>,
    c_tiled: CudaSlice<f32>,
}

impl GemmGpu {
    fn new(gpu: Arc<Gpu>, g: &Gemm, t: &Tensors) -> Result<Self> {
        Ok(GemmGpu {
            a: gpu.upload(t.get("A"))?,
            b: gpu.upload(t.get("B"))?,
            c_naive: gpu.zeros(g.m * g.n)?,
            c_tiled: gpu.zeros(g.m * g.n)?,
            g: g.clone(),
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
    fn output_buffer_mut(&mut self, variant: Variant) -> Option<&mut CudaSlice<f32>> {
        Some(if variant == Variant::Tiled {
            &mut self.c_tiled
        } else {
            &mut self.c_naive
        })
    }
}
