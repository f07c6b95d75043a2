//! CUDA kernels of `kind: attention` (`kernels/attention.cu`, `kernels/attention_bf16.cu`):
//! standard attention's three launches (S, P and O through memory) against one flash kernel;
//! in bf16 the flash kernel runs on tensor cores.

use super::gpu::{driver_error, launch, Gpu};
use super::runtime::{CudaKernels, GpuKernels};
use crate::error::Result;
use crate::kinds::attention::Attention;
use crate::kinds::tensors::{bf16_bits, bf16_value};
use crate::kinds::{DType, Tensors, Variant};
use crate::BackendError;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use std::sync::Arc;

impl CudaKernels for Attention {
    fn cannot_run(&self) -> Option<String> {
        match self.dtype {
            DType::Bf16 if self.head_dim != 128 => Some(format!(
                "the CUDA bf16 flash kernel is built for head_dim 128 (got {})",
                self.head_dim
            )),
            DType::F32 if self.head_dim > 128 || !self.head_dim.is_multiple_of(32) => {
                Some(format!(
                    "the CUDA flash kernel needs head_dim <= 128 and a multiple of 32 (got {})",
                    self.head_dim
                ))
            }
            _ => None,
        }
    }
    fn device_bytes(&self) -> u64 {
        let elem = self.dtype.bytes();
        5 * self.qkv_elements() * elem + 2 * self.score_elements() * elem
    }
    fn kernels(&self, gpu: Arc<Gpu>, inputs: &Tensors) -> Result<Box<dyn GpuKernels>> {
        Ok(match self.dtype {
            DType::Bf16 => Box::new(AttentionBf16Gpu::new(gpu, self, inputs)?),
            DType::F32 => Box::new(AttentionGpu::new(gpu, self, inputs)?),
        })
    }
}

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
    fn new(gpu: &Gpu, a: &Attention, q: &[T], k: &[T], v: &[T]) -> Result<Self> {
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

    fn output_mut(&mut self, variant: Variant) -> &mut CudaSlice<T> {
        if variant == Variant::Flash {
            &mut self.o_flash
        } else {
            &mut self.o_standard
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
        a: &Attention,
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
fn flash_grid(a: &Attention, rows: u32) -> LaunchConfig {
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
    a: Attention,
    scale: f32,
    buf: AttnBuffers<f32>,
}

impl AttentionGpu {
    fn new(gpu: Arc<Gpu>, a: &Attention, t: &Tensors) -> Result<Self> {
        let buf = AttnBuffers::new(&gpu, a, t.get("Q"), t.get("K"), t.get("V"))?;
        Ok(AttentionGpu {
            buf,
            scale: a.softmax_scale(),
            a: a.clone(),
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
    fn output_buffer_mut(&mut self, variant: Variant) -> Option<&mut CudaSlice<f32>> {
        Some(self.buf.output_mut(variant))
    }
}

/// Attention with bf16 tensors (`attention_bf16.cu`): the standard variant's three kernels keep
/// S and P in bf16; flash runs on tensor cores. Inputs are the kind's, rounded to bf16 on
/// the host (so the f64 reference sees the same values); outputs come back as f32.
struct AttentionBf16Gpu {
    gpu: Arc<Gpu>,
    a: Attention,
    scale: f32,
    buf: AttnBuffers<u16>,
}

impl AttentionBf16Gpu {
    fn new(gpu: Arc<Gpu>, a: &Attention, t: &Tensors) -> Result<Self> {
        if gpu.arch < 80 {
            return Err(BackendError::Unsupported {
                backend: "cuda",
                reason: format!(
                    "bf16 attention needs tensor cores with bf16 (compute capability 8.0 or newer); this device is sm_{}",
                    gpu.arch
                ),
            }
            .into());
        }
        // The kind rounded its inputs to bf16 values: the bit patterns are exact.
        let bits = |t: &[f32]| -> Vec<u16> { t.iter().map(|&x| bf16_bits(x)).collect() };
        let buf = AttnBuffers::new(
            &gpu,
            a,
            &bits(t.get("Q")),
            &bits(t.get("K")),
            &bits(t.get("V")),
        )?;
        Ok(AttentionBf16Gpu {
            buf,
            scale: a.softmax_scale(),
            a: a.clone(),
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

    fn poison_output(&mut self, variant: Variant) -> Result<()> {
        let gpu = self.gpu.clone();
        let buf = self.buf.output_mut(variant);
        let nan = vec![bf16_bits(f32::NAN); buf.len()];
        gpu.stream
            .memcpy_htod(&nan, buf)
            .map_err(driver_error("poisoning the output"))?;
        Ok(())
    }

    fn output_host(&self, variant: Variant) -> Result<Vec<f32>> {
        let bits = self
            .gpu
            .stream
            .clone_dtoh(self.buf.output(variant))
            .map_err(driver_error("copying the output to the host"))?;
        Ok(bits.into_iter().map(bf16_value).collect())
    }
}
