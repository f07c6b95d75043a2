//! The CPU backend: multithreaded (rayon), vectorized kernels with runtime CPU-feature dispatch,
//! timed with the monotonic clock, and a cold-cache flush that streams a buffer larger than the
//! last-level cache between samples.

pub mod elementwise;
pub mod math;
pub mod simd;

use super::inputs::ElementwiseInputs;
use super::{Backend, Case};
use crate::error::Result;
use crate::spec::{Elementwise, Variant, Workload};
use rayon::prelude::*;
use std::borrow::Cow;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

pub struct CpuBackend {
    flush: Arc<FlushBuffer>,
}

impl CpuBackend {
    /// A backend whose cold-cache flush streams `flush_bytes` (0 disables flushing).
    pub fn new(flush_bytes: u64) -> Self {
        CpuBackend {
            flush: Arc::new(FlushBuffer::new(flush_bytes)),
        }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn required_bytes(&self, workload: &Workload) -> u64 {
        match workload {
            Workload::Elementwise(w) => {
                let t = w.elements() * 4;
                ElementwiseInputs::bytes_for(w) + t * (2 + elementwise::tmp_buffers(w) as u64)
            }
        }
    }

    fn prepare(&self, workload: &Workload, seed: u64) -> Result<Box<dyn Case>> {
        // Streaming stores pay off once one tensor is a sizeable part of the cache.
        let llc = crate::device::last_level_cache_bytes();
        match workload {
            Workload::Elementwise(w) => {
                let stream = w.elements() * 4 >= llc / 4;
                Ok(Box::new(ElementwiseCase::new(
                    w.clone(),
                    seed,
                    self.flush.clone(),
                    stream,
                )))
            }
        }
    }
}

/// A read-only stream over a large buffer: it evicts the case's data, and since it writes
/// nothing, no dirty lines of its own are written back during the next timed run.
pub struct FlushBuffer {
    data: Vec<f32>,
}

impl FlushBuffer {
    pub fn new(bytes: u64) -> Self {
        let n = (bytes / 4) as usize;
        let mut data = vec![0f32; n];
        data.par_chunks_mut(1 << 16).for_each(|c| c.fill(1.0));
        FlushBuffer { data }
    }
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64 * 4
    }
    pub fn flush(&self) {
        let s: f32 = self
            .data
            .par_chunks(1 << 16)
            .map(|c| c.iter().sum::<f32>())
            .sum();
        black_box(s);
    }
}

struct ElementwiseCase {
    w: Elementwise,
    inputs: ElementwiseInputs,
    tmp: Vec<Vec<f32>>,
    y_unfused: Vec<f32>,
    y_fused: Vec<f32>,
    flush: Arc<FlushBuffer>,
    stream: bool,
}

impl ElementwiseCase {
    fn new(w: Elementwise, seed: u64, flush: Arc<FlushBuffer>, stream: bool) -> Self {
        let n = w.elements() as usize;
        let inputs = ElementwiseInputs::generate(&w, seed);
        let tmp = (0..elementwise::tmp_buffers(&w))
            .map(|_| vec![0f32; n])
            .collect();
        ElementwiseCase {
            inputs,
            tmp,
            // NaN-filled, so an output element a kernel forgot to write fails the check.
            y_unfused: vec![f32::NAN; n],
            y_fused: vec![f32::NAN; n],
            flush,
            stream,
            w,
        }
    }
}

impl Case for ElementwiseCase {
    fn run_timed(&mut self, variant: Variant) -> Result<f64> {
        let t = Instant::now();
        match variant {
            Variant::Unfused => elementwise::run_unfused(
                &self.w,
                &self.inputs,
                &mut self.tmp,
                &mut self.y_unfused,
                self.stream,
            ),
            Variant::Fused => {
                elementwise::run_fused(&self.w, &self.inputs, &mut self.y_fused, self.stream)
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }

    fn flush_caches(&mut self) {
        self.flush.flush();
    }

    fn output(&self, variant: Variant) -> Result<Cow<'_, [f32]>> {
        Ok(Cow::Borrowed(match variant {
            Variant::Unfused => &self.y_unfused,
            Variant::Fused => &self.y_fused,
        }))
    }

    fn output_len(&self) -> usize {
        self.y_fused.len()
    }

    fn reference(&self, index: usize) -> f64 {
        self.inputs.reference(&self.w, index)
    }
}
