//! CUDA kernels of `kind: elementwise` (`kernels/elementwise.cu`): one `ew_chain` launch per op
//! (unfused) against one launch of the whole chain (fused).

use super::gpu::{launch, Gpu};
use super::runtime::{CudaKernels, GpuKernels};
use crate::error::Result;
use crate::kinds::elementwise::{ChainInputs, ElemOp, Elementwise};
use crate::kinds::launch_chain::chain_buffers;
use crate::kinds::{Tensors, Variant};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, PushKernelArg};
use std::sync::Arc;

impl CudaKernels for Elementwise {
    fn cannot_run(&self) -> Option<String> {
        (self.ops.len() > MAX_CHAIN_OPS).then(|| {
            format!(
                "the CUDA elementwise kernel takes chains of at most {MAX_CHAIN_OPS} ops (this one has {})",
                self.ops.len()
            )
        })
    }
    fn device_bytes(&self) -> u64 {
        let n = self.elements() * 4;
        let operands = self.ops.iter().filter(|o| o.reads_tensor()).count() as u64;
        n * (1 + operands + 4) + self.cols * 4
    }
    fn kernels(&self, gpu: Arc<Gpu>, inputs: &Tensors) -> Result<Box<dyn GpuKernels>> {
        Ok(Box::new(ElementwiseGpu::new(gpu, self, inputs)?))
    }
}

struct ElementwiseGpu {
    gpu: Arc<Gpu>,
    w: Elementwise,
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
    fn new(gpu: Arc<Gpu>, w: &Elementwise, tensors: &Tensors) -> Result<Self> {
        let inputs = ChainInputs::of(w, tensors);
        let n = w.elements();
        let x = gpu.upload(inputs.x)?;
        let bias = gpu.upload(inputs.bias)?;
        let operands = inputs
            .operands
            .iter()
            .map(|o| gpu.upload(o))
            .collect::<Result<Vec<_>>>()?;
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
            let (src, dst) = chain_buffers(
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
    fn output_buffer_mut(&mut self, variant: Variant) -> Option<&mut CudaSlice<f32>> {
        Some(if variant == Variant::Fused {
            &mut self.out_fused
        } else {
            &mut self.out_unfused
        })
    }
}
