//! CUDA kernels of the row kinds (`kernels/rows.cu`): RMSNorm, LayerNorm and softmax, one
//! launch per step (unfused) against one block per row (fused).

use super::gpu::{launch, Gpu};
use super::runtime::{CudaKernels, GpuKernels};
use crate::error::Result;
use crate::kinds::rows::{Layernorm, Rmsnorm, RowOp, Softmax};
use crate::kinds::WorkloadKind;
use crate::kinds::{Tensors, Variant};
use cudarc::driver::{CudaSlice, PushKernelArg};
use std::sync::Arc;

/// Device bytes of a row case: x, two full-size intermediates, both outputs, the weight and
/// bias, and three per-row vectors.
fn row_device_bytes(r: &RowOp) -> u64 {
    r.elements() * 4 * 5 + r.cols * 8 + r.rows * 12
}

macro_rules! row_kernels {
    ($($ty:ident => $kind:ident),*) => {$(
        impl CudaKernels for $ty {
            fn device_bytes(&self) -> u64 {
                row_device_bytes(&self.0)
            }
            fn kernels(&self, gpu: Arc<Gpu>, inputs: &Tensors) -> Result<Box<dyn GpuKernels>> {
                Ok(Box::new(RowsGpu::new(gpu, WorkloadKind::$kind, &self.0, inputs)?))
            }
        }
    )*};
}
row_kernels!(Rmsnorm => Rmsnorm, Layernorm => Layernorm, Softmax => Softmax);

struct RowsGpu {
    gpu: Arc<Gpu>,
    kind: WorkloadKind,
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
    fn new(gpu: Arc<Gpu>, kind: WorkloadKind, r: &RowOp, t: &Tensors) -> Result<Self> {
        let n = r.elements();
        Ok(RowsGpu {
            x: gpu.upload(t.get("x"))?,
            w: gpu.upload(t.get("weight"))?,
            b: gpu.upload(t.get("bias"))?,
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
    fn output_buffer_mut(&mut self, variant: Variant) -> Option<&mut CudaSlice<f32>> {
        Some(if variant == Variant::Fused {
            &mut self.out_fused
        } else {
            &mut self.out_unfused
        })
    }
}
