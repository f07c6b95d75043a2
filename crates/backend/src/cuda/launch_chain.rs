//! CUDA kernels of `kind: launch_chain` (`kernels/launch.cu`): the chain's `n_ops` launches
//! one by one (eager) against the same launches captured once as a CUDA graph and replayed.

use super::gpu::{driver_error, launch, Gpu};
use super::runtime::{CudaKernels, GpuKernels};
use crate::error::Result;
use crate::kinds::launch_chain::{chain_buffers, coeffs, LaunchChain};
use crate::kinds::{Tensors, Variant};
use crate::BackendError;
use cudarc::driver::{sys, CudaFunction, CudaGraph, CudaSlice, PushKernelArg};
use std::sync::Arc;

impl CudaKernels for LaunchChain {
    fn device_bytes(&self) -> u64 {
        self.elements * 4 * 5
    }
    fn kernels(&self, gpu: Arc<Gpu>, inputs: &Tensors) -> Result<Box<dyn GpuKernels>> {
        Ok(Box::new(ChainGpu::new(gpu, self, inputs)?))
    }
}

struct ChainGpu {
    gpu: Arc<Gpu>,
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
    fn new(gpu: Arc<Gpu>, l: &LaunchChain, t: &Tensors) -> Result<Self> {
        let x = gpu.upload(t.get("x"))?;
        let mut c = ChainGpu {
            func: gpu.function("launch", "chain_affine")?,
            t0: gpu.zeros(l.elements)?,
            t1: gpu.zeros(l.elements)?,
            out_eager: gpu.zeros(l.elements)?,
            out_graph: gpu.zeros(l.elements)?,
            n_ops: l.n_ops,
            elements: l.elements,
            x,
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
        let graph = graph
            .ok_or_else(|| BackendError::Kernel("CUDA graph capture recorded nothing".into()))?;
        // Uploaded now, not by its first replay: the first replay is the checked run, timed
        // like every other (a graph made again for the checked inputs would otherwise carry
        // its upload into that sample).
        graph
            .upload()
            .map_err(driver_error("uploading the graph"))?;
        c.gpu
            .stream
            .synchronize()
            .map_err(driver_error("waiting for the graph's upload"))?;
        c.graph = Some(graph);
        Ok(c)
    }

    fn enqueue_chain(&mut self, into_graph_output: bool) -> Result<()> {
        let n = self.elements as i64;
        let cfg = self.gpu.grid_for(self.elements);
        let gpu = self.gpu.clone();
        let ops = self.n_ops;
        for i in 0..ops {
            let (a, b) = coeffs(i);
            let out = if into_graph_output {
                &mut self.out_graph
            } else {
                &mut self.out_eager
            };
            let (src, dst) = chain_buffers(i, ops, &self.x, &mut self.t0, &mut self.t1, out);
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
                .ok_or_else(|| BackendError::Kernel("the CUDA graph was not captured".into()))?
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
    fn output_buffer_mut(&mut self, variant: Variant) -> Option<&mut CudaSlice<f32>> {
        Some(if variant == Variant::Graph {
            &mut self.out_graph
        } else {
            &mut self.out_eager
        })
    }
}
