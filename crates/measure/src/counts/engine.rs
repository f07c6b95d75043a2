//! What counted: the simulator or the profiler, the cache model, the SIMD level; counts compare
//! only under the same engine.

use super::CacheModel;
use serde::{Deserialize, Serialize};

/// What counted: the simulator's version, the cache model, the SIMD level and threads of the
/// counted process. Counts compare only under the same engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CountsEngine {
    /// `valgrind-3.19.0`.
    pub valgrind: String,
    pub cache_model: CacheModel,
    pub simd: String,
    pub threads: usize,
    /// The seed of the inputs.
    pub seed: u64,
    /// The instruction set counted (`x86_64`).
    #[serde(default)]
    pub arch: String,
    /// The compiler that built the counted binary (`rustc 1.91.0 (…)`).
    #[serde(default)]
    pub compiler: String,
    /// The C library the counted process ran on (`glibc 2.36`).
    #[serde(default)]
    pub libc: String,
    /// SHA-256 of the counted binary: counts of one binary repeat exactly.
    #[serde(default)]
    pub binary_sha256: String,
    /// Set where a GPU's kernels were counted by Nsight Compute rather than simulated (then
    /// `valgrind`, `simd` and `libc` are empty, `compiler` is NVRTC's version and the cache
    /// model's last level is the GPU's L2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuCounting>,
}

/// What counted a GPU's kernels: the profiler and the GPU. Counts of one GPU model repeat run
/// after run for the same kernels and inputs (instructions exactly, DRAM bytes within what the
/// hardware's own counting varies by); another GPU model executes and moves otherwise.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuCounting {
    /// `ncu --version`'s last line (`Version 2025.3.1.0 (build …)`).
    pub profiler: String,
    /// The GPU's device key (`cuda-nvidia-h200-sm90-132sms`): the counts baselines' key.
    pub device_key: String,
    /// The GPU's name.
    pub device: String,
    /// The driver's version.
    pub driver: String,
}

impl CountsEngine {
    /// The engine `s`'s sides are counted under: this one with the spec's own cache model
    /// (`measure.counts_cache_model`) where it names one, unless the run's model was given on
    /// the command line (`model_fixed`: it decides for every spec) or a GPU counts (its L2 is
    /// the model). The one rule for the counting, the counts baselines' folder and the
    /// reproducing command.
    pub fn for_spec(
        &self,
        s: &crate::spec::Spec,
        model_fixed: bool,
    ) -> std::borrow::Cow<'_, CountsEngine> {
        match s.counts_cache_model() {
            Some(model) if !model_fixed && self.gpu.is_none() && model != self.cache_model => {
                std::borrow::Cow::Owned(CountsEngine {
                    cache_model: model,
                    ..self.clone()
                })
            }
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// The key counts baselines are filed under: what decides the counts besides the code —
    /// the instruction set, the SIMD level and the cache model; not the runner's CPU model,
    /// cores or load. `counts-x86-64-avx2-nofma-32k8w64-32k8w64-8m16w64`.
    pub fn key(&self) -> String {
        if let Some(g) = &self.gpu {
            // A GPU's counts depend on its model (instruction set, L2), named by its key.
            return format!("counts-{}", g.device_key).to_ascii_lowercase();
        }
        let m = &self.cache_model;
        format!(
            "counts-{}-{}-{}-{}-{}",
            self.arch.replace('_', "-"),
            self.simd,
            m.i1.slug(),
            m.d1.slug(),
            m.ll.slug()
        )
        .to_ascii_lowercase()
    }

    /// What differs between two engines of one key besides the binary, that can move counts
    /// with the same code: the simulator's version, the compiler, the C library. Each as
    /// (what, then, now).
    pub fn differences(&self, then: &CountsEngine) -> Vec<(&'static str, String, String)> {
        let gpu = |e: &CountsEngine, f: fn(&GpuCounting) -> &String| {
            e.gpu.as_ref().map(f).cloned().unwrap_or_default()
        };
        [
            ("Valgrind", then.valgrind.clone(), self.valgrind.clone()),
            ("compiler", then.compiler.clone(), self.compiler.clone()),
            ("C library", then.libc.clone(), self.libc.clone()),
            ("seed", then.seed.to_string(), self.seed.to_string()),
            (
                "Nsight Compute",
                gpu(then, |g| &g.profiler),
                gpu(self, |g| &g.profiler),
            ),
            ("driver", gpu(then, |g| &g.driver), gpu(self, |g| &g.driver)),
        ]
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .collect()
    }

    /// The metric a counts gate compares where the spec names none: the estimated cycles of a
    /// simulation (they weigh instructions and memory alike); a GPU's DRAM bytes (its cycles
    /// are measured, and move with clocks and contention as a time does).
    pub fn default_metric(&self) -> crate::spec::CountsMetric {
        if self.gpu.is_some() {
            crate::spec::CountsMetric::DramBytes
        } else {
            crate::spec::CountsMetric::Cycles
        }
    }
}
