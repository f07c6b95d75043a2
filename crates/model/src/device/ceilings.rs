//! The ceilings a device is judged against: its measured bandwidth and compute peaks.

use serde::{Deserialize, Serialize};

/// Measured ceilings. Bandwidths count bytes as STREAM does (copy: 2 arrays, triad: 3).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ceilings {
    pub copy_bytes_per_sec: f64,
    pub triad_bytes_per_sec: f64,
    pub fma_flops_per_sec: f64,
    /// Tensor-core peak (bf16 inputs, f32 accumulation), on GPUs that have one; the compute
    /// ceiling of bf16 workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_flops_per_sec: Option<f64>,
    pub threads: usize,
    /// Size of each probe array.
    pub array_bytes: u64,
    /// Whether the CPU's streaming kernels of light arithmetic (the triad, chains without a
    /// GELU or SiLU) prefetched their inputs in software in this run: the faster form of the
    /// probe's triad, decided by the run's first probe whose arrays span memory. `None` where
    /// no such probe decided it (the kernels then prefetch) and on GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_prefetch: Option<bool>,
}

/// The bandwidth probe's default array size for a last-level cache of `llc_bytes`: two thirds
/// of it each (at least 64 MiB), so that the triad's three arrays span twice the cache and no
/// repetition finds the last one's lines in it. Larger arrays read the same (44.1 GB/s at
/// 960 MiB, 44.9 at 256 MiB on a 480 MiB LLC) and, on a VM whose fresh memory is slow to touch,
/// cost seconds to allocate (docs/measurement.md).
pub fn default_probe_array_bytes(llc_bytes: u64) -> u64 {
    (2 * llc_bytes / 3).max(64 << 20)
}

/// Whether probe arrays of `array_bytes` measure memory on a last-level cache of `llc_bytes`:
/// the triad's three arrays span at least twice the cache. Smaller probes measure the cache.
pub fn probe_spans_memory(array_bytes: u64, llc_bytes: u64) -> bool {
    3 * array_bytes >= 2 * llc_bytes
}

impl Ceilings {
    /// The bandwidth ceiling the verdicts use: the triad's.
    pub fn bandwidth(&self) -> f64 {
        self.triad_bytes_per_sec
    }
    /// The compute ceiling the verdicts use: the FMA peak.
    pub fn peak_flops(&self) -> f64 {
        self.fma_flops_per_sec
    }
    /// The ceilings that judge a workload in `dtype`: for bf16 the compute ceiling is the
    /// tensor-core peak where the device has one (FP32 FMA throughput would make a tensor-core
    /// kernel look several times "faster than peak").
    pub fn for_dtype(&self, dtype: crate::kinds::DType) -> Ceilings {
        match (dtype, self.tensor_flops_per_sec) {
            (crate::kinds::DType::Bf16, Some(t)) => Ceilings {
                fma_flops_per_sec: t,
                ..*self
            },
            _ => *self,
        }
    }
    /// The higher of each roof of two probes of one device: a probe slowed by a neighbour
    /// reads low, never high, so the higher reading is the nearer to the device's roof.
    pub fn max_with(&self, other: &Ceilings) -> Ceilings {
        Ceilings {
            copy_bytes_per_sec: self.copy_bytes_per_sec.max(other.copy_bytes_per_sec),
            triad_bytes_per_sec: self.triad_bytes_per_sec.max(other.triad_bytes_per_sec),
            fma_flops_per_sec: self.fma_flops_per_sec.max(other.fma_flops_per_sec),
            tensor_flops_per_sec: match (self.tensor_flops_per_sec, other.tensor_flops_per_sec) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
            ..*self
        }
    }
    /// Ridge point, FLOP/byte.
    pub fn ridge(&self) -> f64 {
        self.peak_flops() / self.bandwidth()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_work_is_judged_against_the_tensor_peak_when_there_is_one() {
        use crate::kinds::DType;
        let c = Ceilings {
            copy_bytes_per_sec: 4e12,
            triad_bytes_per_sec: 4e12,
            fma_flops_per_sec: 60e12,
            tensor_flops_per_sec: Some(600e12),
            threads: 132,
            array_bytes: 1 << 30,
            stream_prefetch: None,
        };
        assert_eq!(c.for_dtype(DType::F32), c);
        assert_eq!(c.for_dtype(DType::Bf16).peak_flops(), 600e12);
        assert_eq!(c.for_dtype(DType::Bf16).bandwidth(), 4e12);
        let cpu = Ceilings {
            tensor_flops_per_sec: None,
            ..c
        };
        assert_eq!(cpu.for_dtype(DType::Bf16), cpu);
    }
}
