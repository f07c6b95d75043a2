//! CUDA kernels of `kind: add_rmsnorm` (`kernels/add_rmsnorm.cu`): an add launch and an RMSNorm
//! launch with one block per row (unfused) against one block per row doing both (fused).

use super::gpu::{launch, Gpu};
use super::runtime::{CudaKernels, GpuKernels};
use crate::error::Result;
use crate::kinds::add_rmsnorm::AddRmsnorm;
use crate::kinds::{Tensors, Variant};
use cudarc::driver::{CudaSlice, PushKernelArg};
use std::sync::Arc;

impl CudaKernels for AddRmsnorm {
    /// x, residual, s, both outputs and the weight.
    fn device_bytes(&self) -> u64 {
        5 * self.0.elements() * 4 + self.0.cols * 4
    }
    fn kernels(&self, gpu: Arc<Gpu>, t: &Tensors) -> Result<Box<dyn GpuKernels>> {
        let n = self.0.elements();
        Ok(Box::new(AddRmsnormGpu {
            x: gpu.upload(t.get("x"))?,
            r: gpu.upload(t.get("residual"))?,
            w: gpu.upload(t.get("weight"))?,
            s: gpu.zeros(n)?,
            y_unfused: gpu.zeros(n)?,
            y_fused: gpu.zeros(n)?,
            rows: self.0.rows,
            cols: self.0.cols,
            eps: self.0.eps as f32,
            gpu,
        }))
    }
}

struct AddRmsnormGpu {
    gpu: Arc<Gpu>,
    x: CudaSlice<f32>,
    r: CudaSlice<f32>,
    w: CudaSlice<f32>,
    s: CudaSlice<f32>,
    y_unfused: CudaSlice<f32>,
    y_fused: CudaSlice<f32>,
    rows: u64,
    cols: u64,
    eps: f32,
}

impl GpuKernels for AddRmsnormGpu {
    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn enqueue(&mut self, variant: Variant) -> Result<()> {
        let gpu = self.gpu.clone();
        let (n, cols, eps) = ((self.rows * self.cols) as i64, self.cols as i64, self.eps);
        let per_row = Gpu::per_row(self.rows);
        if variant == Variant::Fused {
            let f = gpu.function("add_rmsnorm", "add_rmsnorm_fused")?;
            // SAFETY (launch): add_rmsnorm_fused(y, s, x, r, w, eps, cols): y, s, x and r hold
            // rows·cols floats, w holds cols; one block per row.
            return launch(&gpu, &f, per_row, "add_rmsnorm_fused", |a| {
                a.arg(&mut self.y_fused)
                    .arg(&mut self.s)
                    .arg(&self.x)
                    .arg(&self.r)
                    .arg(&self.w)
                    .arg(&eps)
                    .arg(&cols);
            });
        }
        let add = gpu.function("add_rmsnorm", "add_residual")?;
        // SAFETY (launch): add_residual(s, x, r, n): all three hold n floats.
        launch(&gpu, &add, gpu.grid_for(n as u64), "add_residual", |a| {
            a.arg(&mut self.s).arg(&self.x).arg(&self.r).arg(&n);
        })?;
        let norm = gpu.function("add_rmsnorm", "rmsnorm_of_sum")?;
        // SAFETY (launch): rmsnorm_of_sum(y, s, w, eps, cols): y and s hold rows·cols floats, w
        // holds cols; one block per row.
        launch(&gpu, &norm, per_row, "rmsnorm_of_sum", |a| {
            a.arg(&mut self.y_unfused)
                .arg(&self.s)
                .arg(&self.w)
                .arg(&eps)
                .arg(&cols);
        })
    }

    fn output_buffer(&self, variant: Variant) -> Option<&CudaSlice<f32>> {
        Some(if variant == Variant::Fused {
            &self.y_fused
        } else {
            &self.y_unfused
        })
    }
    fn output_buffer_mut(&mut self, variant: Variant) -> Option<&mut CudaSlice<f32>> {
        Some(if variant == Variant::Fused {
            &mut self.y_fused
        } else {
            &mut self.y_unfused
        })
    }
}
