//! The CPU backend: multithreaded (rayon), vectorized kernels with runtime CPU-feature dispatch,
//! timed with the monotonic clock, and a cold-cache flush that streams a buffer larger than the
//! last-level cache between samples.
//!
//! Each workload kind implements [`Kernels`] (its inputs, its two variants, its f64 reference);
//! [`CpuCase`] adds what is common: the outputs of both variants, timing and the flush.

pub mod attention;
pub mod elementwise;
pub mod gemm;
pub mod launch;
pub mod math;
pub mod probe_kernels;
pub mod rows;
pub mod simd;
pub mod vector;

use super::inputs::ElementwiseInputs;
use super::{Backend, Case};
use crate::error::{Error, Result};
use crate::spec::{Variant, Workload};
use rayon::prelude::*;
use simd::LineVec;
use std::borrow::Cow;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// One workload kind's kernels on the CPU.
pub trait Kernels: Send {
    /// Elements of the output.
    fn output_len(&self) -> usize;
    /// Runs `variant`, writing every element of `out`.
    fn run(&mut self, variant: Variant, out: &mut [f32]);
    /// The f64 reference of output element `i`.
    fn reference(&self, i: usize) -> f64;
    /// How many output elements to check against the reference (fewer when each is costly).
    fn reference_samples(&self) -> usize {
        4096
    }
    /// The reference of a given variant (for kinds whose variants differ, the probes).
    fn reference_of(&self, _variant: Variant, i: usize) -> f64 {
        self.reference(i)
    }
    /// Whether both variants compute the same output.
    fn variants_agree(&self) -> bool {
        true
    }
}

pub struct CpuBackend {
    device: crate::device::DeviceInfo,
    flush: Arc<FlushBuffer>,
}

impl CpuBackend {
    /// A backend whose cold-cache flush streams `flush_bytes` (0 disables flushing).
    pub fn new(flush_bytes: u64) -> Self {
        Self::with_device(crate::device::DeviceInfo::this_cpu(), flush_bytes)
    }
    pub fn with_device(device: crate::device::DeviceInfo, flush_bytes: u64) -> Self {
        CpuBackend {
            device,
            flush: Arc::new(FlushBuffer::new(flush_bytes)),
        }
    }
}

/// Streaming (non-temporal) stores pay off once an output is a sizeable part of the cache.
fn streams(output_bytes: u64) -> bool {
    output_bytes >= crate::device::last_level_cache_bytes() / 4
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn device(&self) -> crate::device::DeviceInfo {
        self.device.clone()
    }

    fn ceilings(&self, probe_bytes: Option<u64>) -> Result<crate::device::Ceilings> {
        let default = crate::device::ProbeConfig::for_llc(self.device.llc_bytes);
        let cfg = match probe_bytes {
            Some(b) => crate::device::ProbeConfig {
                array_bytes: b,
                ..default
            },
            None => default,
        };
        Ok(crate::device::probe_cpu(&cfg))
    }

    fn flush_bytes(&self) -> u64 {
        self.flush.bytes()
    }

    fn required_bytes(&self, workload: &Workload) -> u64 {
        match workload {
            Workload::Elementwise(w) => {
                let t = w.elements() * 4;
                ElementwiseInputs::bytes_for(w) + t * (2 + elementwise::tmp_buffers(w) as u64)
            }
            Workload::Rmsnorm(r) | Workload::Layernorm(r) | Workload::Softmax(r) => {
                r.elements() * 4 * 5 + r.cols * 8 + r.rows * 16
            }
            Workload::Gemm(g) => 4 * (g.m * g.k + g.k * g.n + 2 * g.m * g.n),
            Workload::Attention(a) => attention::required_bytes(a),
            Workload::LaunchChain(l) => l.elements * 4 * 6,
            Workload::Probe(p) => p.elements * 4 * 5,
        }
    }

    fn prepare(&self, workload: &Workload, seed: u64) -> Result<Box<dyn Case>> {
        let flush = self.flush.clone();
        let case: Box<dyn Case> = match workload {
            Workload::Elementwise(w) => {
                let k = elementwise::ElementwiseKernels::new(
                    w.clone(),
                    seed,
                    streams(w.elements() * 4),
                )
                .with_slowdown(elementwise::experiment_slowdown()?);
                Box::new(CpuCase::new(k, flush))
            }
            Workload::Rmsnorm(r) | Workload::Layernorm(r) | Workload::Softmax(r) => {
                let k = rows::RowKernels::new(
                    workload.kind(),
                    r.clone(),
                    seed,
                    streams(r.elements() * 4),
                );
                Box::new(CpuCase::new(k, flush))
            }
            Workload::Gemm(g) => {
                Box::new(CpuCase::new(gemm::GemmKernels::new(g.clone(), seed), flush))
            }
            Workload::Attention(a) if a.dtype == crate::spec::DType::Bf16 => {
                return Err(Error::Backend(
                    "dtype bf16 runs on the CUDA backend (tensor cores); the CPU backend computes attention in f32 only: use dtype f32 here, or --backend cuda".into(),
                ))
            }
            Workload::Attention(a) => Box::new(CpuCase::new(
                attention::AttentionKernels::new(a.clone(), seed),
                flush,
            )),
            Workload::LaunchChain(l) => Box::new(CpuCase::new(
                launch::LaunchKernels::new(l.clone(), seed),
                flush,
            )),
            Workload::Probe(p) => Box::new(CpuCase::new(
                probe_kernels::ProbeKernels::new(p.clone(), seed),
                flush,
            )),
        };
        Ok(case)
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

/// A prepared case: the kernels, one output per variant that ran, and the flush buffer.
pub struct CpuCase<K: Kernels> {
    kernels: K,
    outputs: Vec<(Variant, LineVec)>,
    flush: Arc<FlushBuffer>,
}

impl<K: Kernels> CpuCase<K> {
    pub fn new(kernels: K, flush: Arc<FlushBuffer>) -> Self {
        CpuCase {
            kernels,
            outputs: Vec::new(),
            flush,
        }
    }
}

impl<K: Kernels> Case for CpuCase<K> {
    fn run_timed(&mut self, variant: Variant) -> Result<f64> {
        let idx = match self.outputs.iter().position(|(v, _)| *v == variant) {
            Some(i) => i,
            None => {
                // NaN-filled, so an output element a kernel forgot to write fails the check.
                self.outputs.push((
                    variant,
                    LineVec::filled(self.kernels.output_len(), f32::NAN),
                ));
                self.outputs.len() - 1
            }
        };
        let out = &mut self.outputs[idx].1;
        let t = Instant::now();
        self.kernels.run(variant, out);
        Ok(t.elapsed().as_secs_f64())
    }

    fn flush_caches(&mut self) {
        self.flush.flush();
    }

    fn output(&self, variant: Variant) -> Result<Cow<'_, [f32]>> {
        self.outputs
            .iter()
            .find(|(v, _)| *v == variant)
            .map(|(_, o)| Cow::Borrowed(&o[..]))
            .ok_or_else(|| Error::Backend(format!("variant {} has not run", variant.name())))
    }

    fn output_len(&self) -> usize {
        self.kernels.output_len()
    }

    fn reference(&self, index: usize) -> f64 {
        self.kernels.reference(index)
    }

    fn reference_samples(&self) -> usize {
        self.kernels.reference_samples()
    }

    fn reference_of(&self, variant: Variant, index: usize) -> f64 {
        self.kernels.reference_of(variant, index)
    }

    fn variants_agree(&self) -> bool {
        self.kernels.variants_agree()
    }
}
