//! Backends run the kernels of a workload's variants. One small trait, two implementations:
//! `cpu` (always available) and `cuda` (cudarc + NVRTC; a build or machine without CUDA gets a
//! polite `BackendUnavailable`, never a panic).
//!
//! Inputs are generated on the host from a seed ([`inputs`]) so that every backend computes on
//! the same numbers and the f64 reference can be evaluated on the host.

pub mod cpu;
pub mod cuda;
pub mod inputs;

use crate::device::{Ceilings, DeviceInfo};
use crate::error::{Error, Result};
use crate::spec::{Variant, Workload};
use serde::{Deserialize, Serialize};

/// Which backend the user asked for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// CUDA when a driver and a GPU are present, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

pub trait Backend: Send {
    /// `cpu` or `cuda`.
    fn name(&self) -> &'static str;
    /// The device this backend measures: its key names the baselines directory.
    fn device(&self) -> DeviceInfo;
    /// Measures the device's ceilings (bandwidth and FMA peak); `probe_bytes` overrides the
    /// probe's array size.
    fn ceilings(&self, probe_bytes: Option<u64>) -> Result<Ceilings>;
    /// Bytes streamed (CPU) or written (GPU L2) before each cold sample; 0 in warm mode.
    fn flush_bytes(&self) -> u64;
    /// The tile sizes of this backend's tiled kernels, for the IO ledger.
    fn tiling(&self) -> crate::ledger::Tiling {
        crate::ledger::Tiling::CPU
    }
    /// Host bytes a case of `workload` needs (inputs, outputs, intermediates), to refuse cases
    /// that cannot fit before allocating anything.
    fn required_bytes(&self, workload: &Workload) -> u64;
    /// Allocates and fills the inputs of `workload` from `seed` and readies both variants.
    fn prepare(&self, workload: &Workload, seed: u64) -> Result<Box<dyn Case>>;
}

/// One prepared workload: both variants can run on the same inputs.
pub trait Case {
    /// Runs `variant` once and returns its duration in seconds, as the backend times it.
    fn run_timed(&mut self, variant: Variant) -> Result<f64>;
    /// Evicts this case's data from the caches before a cold sample.
    fn flush_caches(&mut self);
    /// Output of the last run of `variant`, on the host.
    fn output(&self, variant: Variant) -> Result<std::borrow::Cow<'_, [f32]>>;
    /// Number of output elements.
    fn output_len(&self) -> usize;
    /// The f64 reference value of output element `index`, computed from the inputs.
    fn reference(&self, index: usize) -> f64;
    /// How many sampled output elements to check against the reference.
    fn reference_samples(&self) -> usize;
    /// The reference of `variant` at `index`, for kinds whose variants compute different
    /// functions (the probes); the same for both variants otherwise.
    fn reference_of(&self, _variant: Variant, index: usize) -> f64 {
        self.reference(index)
    }
    /// Whether both variants compute the same output (then they are compared element by element).
    fn variants_agree(&self) -> bool {
        true
    }
}

/// Bytes this process may still allocate, if known: the least of the OS's MemAvailable, the
/// address-space limit (`ulimit -v`, RLIMIT_AS) less what the process already maps, and the
/// cgroup's `memory.max` less its current use. Any of them can be the one that ends a run with
/// an abort, so a case is checked against the smallest.
pub fn available_memory_bytes() -> Option<u64> {
    let kib_field = |text: &str, key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    };
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut limits: Vec<u64> = Vec::new();
    if let Some(avail) = read("/proc/meminfo").and_then(|t| kib_field(&t, "MemAvailable:")) {
        limits.push(avail);
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed by a valid, exclusive pointer.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0;
    if ok && lim.rlim_cur != libc::RLIM_INFINITY {
        let mapped = read("/proc/self/status")
            .and_then(|t| kib_field(&t, "VmSize:"))
            .unwrap_or(0);
        limits.push(lim.rlim_cur.saturating_sub(mapped));
    }
    // cgroup v2, then v1; "max" (no limit) does not parse and is skipped.
    for (max, current) in [
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ] {
        if let Some(limit) = read(max).and_then(|t| t.trim().parse::<u64>().ok()) {
            let used = read(current)
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(0);
            limits.push(limit.saturating_sub(used));
            break;
        }
    }
    limits.into_iter().min()
}

/// Refuses a case whose memory need exceeds what is available, saying how much it needs.
pub fn check_memory(spec_name: &str, need_bytes: u64, available: Option<u64>) -> Result<()> {
    if let Some(avail) = available {
        // Leave a tenth for the OS and everything else.
        if need_bytes > avail / 10 * 9 {
            return Err(Error::Backend(format!(
                "{spec_name}: the case needs {:.2} GiB of memory but only {:.2} GiB is available; reduce the workload size",
                need_bytes as f64 / (1u64 << 30) as f64,
                avail as f64 / (1u64 << 30) as f64
            )));
        }
    }
    Ok(())
}

/// Resolves the user's choice into a backend; the note says which ran and why. `flush` is the
/// cold-cache flush: None for the backend's default size (twice its last-level cache), Some(0)
/// in warm mode.
pub fn select(choice: BackendChoice, flush: Option<u64>) -> Result<(Box<dyn Backend>, String)> {
    let cpu = || -> Box<dyn Backend> {
        let device = DeviceInfo::this_cpu();
        let bytes = flush.unwrap_or((2 * device.llc_bytes).max(64 << 20));
        Box::new(cpu::CpuBackend::with_device(device, bytes))
    };
    match choice {
        BackendChoice::Cpu => Ok((cpu(), "cpu (requested)".into())),
        BackendChoice::Cuda => {
            let gpu = cuda::runtime::CudaBackend::open(flush)?;
            let note = format!("cuda (requested): {}", gpu.describe());
            Ok((Box::new(gpu), note))
        }
        BackendChoice::Auto => match cuda::runtime::CudaBackend::open(flush) {
            Ok(gpu) => {
                let note = format!("cuda (auto): {}", gpu.describe());
                Ok((Box::new(gpu), note))
            }
            Err(e) => Ok((
                cpu(),
                format!(
                    "cpu (auto: {})",
                    e.to_string().trim_start_matches("backend unavailable: ")
                ),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_check_refuses_and_says_how_much() {
        assert!(check_memory("a", 1 << 30, Some(8 << 30)).is_ok());
        assert!(check_memory("a", 1 << 40, None).is_ok());
        let e = check_memory("big", 20 << 30, Some(8 << 30))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("big") && e.contains("20.00 GiB") && e.contains("8.00 GiB"),
            "{e}"
        );
    }
}
