//! Backends run the kernels of a workload's variants. One small trait, two implementations:
//! `cpu` (always available) and `cuda` (cudarc + NVRTC; a build or machine without CUDA gets a
//! polite `BackendUnavailable`, never a panic).
//!
//! Inputs are generated on the host by the workload's kind ([`crate::kinds`]) so that every
//! backend computes on the same numbers and the f64 reference is evaluated on the host, outside
//! any backend. A backend implements each kind's kernels in its own folder, in a table made
//! from the kinds' registry, and says which workloads it cannot run ([`DeviceKind::cannot_run`]).

pub mod conformance;
pub mod counted;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "no_cuda.rs"]
pub mod cuda;
pub mod npy;
pub mod pair;
pub mod worker;

// The lower crates' modules, reached as `crate::…` in this crate's files.
use opledger_model::device;
use opledger_model::error;
use opledger_model::files;
use opledger_model::kinds;
use opledger_model::ledger;
use opledger_model::secret;
use opledger_model::settings;
use opledger_model::spec;
use opledger_model::stop;
use opledger_model::untrusted;

use crate::device::{Ceilings, DeviceInfo, DeviceKind, Profile};
pub use crate::error::BackendError;
#[cfg(feature = "cuda")]
use crate::error::Error;
use crate::error::Result;
use crate::kinds::{Tensors, Variant, Workload};
use std::sync::Arc;

/// Which backend the user asked for: `auto`, or one kind of device ([`DeviceKind`], from which
/// the command line's values derive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// CUDA when a driver and a GPU are present, else the CPU.
    Auto,
    Kind(DeviceKind),
}

/// `auto` and every kind, for the command line.
const CHOICES: [BackendChoice; 1 + DeviceKind::ALL.len()] = {
    let mut all = [BackendChoice::Auto; 1 + DeviceKind::ALL.len()];
    let mut i = 0;
    while i < DeviceKind::ALL.len() {
        all[i + 1] = BackendChoice::Kind(DeviceKind::ALL[i]);
        i += 1;
    }
    all
};

impl clap::ValueEnum for BackendChoice {
    fn value_variants<'a>() -> &'a [Self] {
        &CHOICES
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(match self {
            BackendChoice::Auto => clap::builder::PossibleValue::new("auto")
                .help("CUDA when a driver and a GPU are present, else the CPU"),
            BackendChoice::Kind(k) => {
                clap::builder::PossibleValue::new(k.name()).help(k.describe())
            }
        })
    }
}

impl BackendChoice {
    /// The kind asked for by name, if one was.
    pub fn kind(self) -> Option<DeviceKind> {
        match self {
            BackendChoice::Auto => None,
            BackendChoice::Kind(k) => Some(k),
        }
    }
}

/// Why the backend of `kind` cannot run `w`, if it cannot: its capabilities, known without a
/// device.
pub fn cannot_run(kind: DeviceKind, w: &Workload) -> Option<String> {
    match kind {
        DeviceKind::Cpu => cpu::cannot_run(w),
        DeviceKind::Cuda => cuda::cannot_run(w),
    }
}

/// Why the backend of `kind` cannot run a spec's sides, if it cannot: the built-in kernels a
/// side uses, or a `cuda:` side elsewhere than on the CUDA backend.
pub fn cannot_run_sides(
    kind: DeviceKind,
    w: &Workload,
    implementations: &crate::spec::Implementations,
) -> Option<String> {
    if implementations.uses_builtin_kernels() {
        if let Some(reason) = cannot_run(kind, w) {
            return Some(reason);
        }
    }
    (implementations.uses_cuda_source() && kind != DeviceKind::Cuda)
        .then(|| "a `cuda:` implementation runs on the CUDA backend (--backend cuda)".into())
}

/// A reading of the device's state under way (a `nvidia-smi` query started as a spec's samples
/// start, so that it reads a busy GPU): [`StateReading::finish`] waits for it.
pub struct StateReading {
    child: Option<std::process::Child>,
    /// The query again with the older name of the reasons field, for a driver that refuses
    /// the newer one.
    fallback: Option<std::process::Command>,
}

impl StateReading {
    pub fn new(child: std::process::Child, fallback: std::process::Command) -> StateReading {
        StateReading {
            child: Some(child),
            fallback: Some(fallback),
        }
    }

    /// The state read, or why not (the reader's failure is a warning, never a failed spec).
    pub fn finish(mut self) -> std::result::Result<crate::device::DeviceState, String> {
        let read = |o: std::process::Output| -> std::result::Result<String, String> {
            if o.status.success() {
                Ok(String::from_utf8_lossy(&o.stdout).into_owned())
            } else {
                Err(format!(
                    "nvidia-smi exited with {}: {}",
                    o.status,
                    crate::untrusted::printable(String::from_utf8_lossy(&o.stderr).trim())
                ))
            }
        };
        let first = match self.child.take() {
            Some(c) => c
                .wait_with_output()
                .map_err(|e| e.to_string())
                .and_then(read),
            None => Err("no reading".into()),
        };
        let text = match (first, self.fallback.take()) {
            (Ok(t), _) => t,
            (Err(e), Some(mut cmd)) => cmd
                .output()
                .map_err(|e2| format!("{e}; then {e2}"))
                .and_then(read)
                .map_err(|e2| format!("{e}; then {e2}"))?,
            (Err(e), None) => return Err(e),
        };
        let line = text.lines().next().unwrap_or("");
        crate::device::DeviceState::parse(line).map_err(|e| format!("nvidia-smi: {e}"))
    }
}

pub trait Backend: Send {
    fn kind(&self) -> DeviceKind;
    /// `cpu` or `cuda`.
    fn name(&self) -> &'static str {
        self.kind().name()
    }
    /// The device this backend measures: its key names the baselines directory.
    fn device(&self) -> DeviceInfo;
    /// The compute resources in a few words, for the log (`2 threads, avx512f`, `132 SMs`).
    fn describe_compute(&self) -> String;
    /// The datasheet entry of the device, where the table has one (GPUs).
    fn datasheet(&self) -> Option<&'static Profile> {
        None
    }
    /// Measures the device's ceilings (bandwidth and FMA peak); `probe_bytes` overrides the
    /// probe's array size.
    fn ceilings(&self, probe_bytes: Option<u64>) -> Result<Ceilings>;
    /// Bytes a read flush streams (CPU) or a GPU's flush kernel reads before each cold sample;
    /// 0 in warm mode. A worker's process reads this many before each of its cold samples,
    /// whatever the backend's own cases do ([`Backend::flush_method`]).
    fn flush_bytes(&self) -> u64;
    /// How the backend's own cases start cold.
    fn flush_method(&self) -> crate::device::FlushMethod;
    /// The tile sizes of this backend's tiled kernels, for the IO ledger.
    fn tiling(&self) -> crate::ledger::Tiling {
        self.kind().tiling()
    }
    /// Host bytes a case of `workload` needs (inputs, outputs, the backend's own buffers, and
    /// the checked run's second set of inputs), to refuse cases that cannot fit before
    /// allocating anything.
    fn host_bytes(&self, workload: &Workload) -> u64;
    /// Warnings that every case of `workload` on this backend carries (a deliberate
    /// experiment slowdown).
    fn case_warnings(&self, _workload: &Workload) -> Vec<String> {
        Vec::new()
    }
    /// What the backend's kernels for `variant` of `workload` execute on the level they run
    /// at, where that differs from the ledger's nominal count (`None`: the ledger is the model).
    fn executed(&self, _workload: &Workload, _variant: Variant) -> Option<crate::ledger::Executed> {
        None
    }
    /// Seconds `workload`'s arithmetic alone takes on this backend, its operands in the
    /// nearest cache (measured: the bound the kernels have where the memory is not in the
    /// way); `None` where not measured.
    fn arithmetic_secs(&self, _workload: &Workload) -> Option<f64> {
        None
    }
    /// Marks the launches that follow as `seq`'s in a profiler's export (an empty kernel whose
    /// grid x is `seq` + 1: `opledger run --ncu`); a no-op where no profiler sees kernels.
    fn mark(&self, _seq: u32) -> Result<()> {
        Ok(())
    }
    /// Starts reading the device's state (clocks, power, what limits the clocks) while a
    /// spec's samples run; `None` where the backend has none to read (the CPU) or no reader.
    fn device_state(&self) -> Option<StateReading> {
        None
    }
    /// Readies both variants of `workload` on `inputs` (the kind's seeded tensors).
    fn prepare(&self, workload: &Workload, inputs: Arc<Tensors>) -> Result<Box<dyn Case>>;
    /// Readies the user's own kernel as one side (`variant`'s ledger) on `inputs`.
    fn user_kernel(
        &self,
        _source: &UserSource,
        _workload: &Workload,
        _variant: Variant,
        _inputs: &Tensors,
    ) -> Result<Box<dyn UserKernel>> {
        Err(BackendError::Unsupported {
            backend: self.name(),
            reason: "a `cuda:` implementation runs on the CUDA backend (--backend cuda)".into(),
        }
        .into())
    }
}

/// The user's kernel source of one side, read from its file.
pub struct UserSource {
    pub path: std::path::PathBuf,
    pub text: String,
    pub spec: crate::spec::CudaSource,
}

/// One side that is the user's kernel, run and timed by the backend like its own.
pub trait UserKernel {
    fn run_timed(&mut self) -> Result<f64>;
    fn flush_caches(&mut self);
    fn output(&self) -> Result<std::borrow::Cow<'_, [f32]>>;
    /// Fills the output with NaN, so that what the next run leaves there is what it wrote.
    fn poison_output(&mut self) -> Result<()> {
        Ok(())
    }
    /// Replaces the inputs with `inputs` (the same tensors, another seed's values) in the
    /// buffers the kernel reads, for the checked run: a result kept from earlier launches no
    /// longer matches the reference.
    fn set_inputs(&mut self, inputs: &Tensors) -> Result<()>;
    /// The kernel in a few words, for the report.
    fn describe(&self) -> String;
}

/// One prepared workload: both variants can run on the same inputs.
pub trait Case {
    /// Runs `variant` once and returns its duration in seconds, as the backend times it.
    fn run_timed(&mut self, variant: Variant) -> Result<f64>;
    /// Evicts this case's data from the caches before a cold sample.
    fn flush_caches(&mut self);
    /// How [`Case::flush_caches`] evicts it.
    fn flush_method(&self) -> crate::device::FlushMethod;
    /// Evicts this case's data from the caches before a cold sample by the backend's read
    /// flush (`Backend::flush_bytes`), as a worker's process does before its side's: the two
    /// sides of a pair start cold by the same means.
    fn flush_by_reading(&mut self);
    /// Output of the last run of `variant`, on the host.
    fn output(&self, variant: Variant) -> Result<std::borrow::Cow<'_, [f32]>>;
    /// Fills `variant`'s output with NaN, so that what the next run leaves there is what it
    /// wrote (a kernel that writes only on its first launch leaves NaN). A backend that cannot
    /// leaves it as it is.
    fn poison_output(&mut self, _variant: Variant) -> Result<()> {
        Ok(())
    }
    /// Makes both variants compute on `inputs` from now on (the same tensors, another seed's
    /// values): the checked run's, so that a result kept from earlier runs fails the check.
    fn set_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()>;
    /// Lets go of the inputs and of what the kernels made of them, until [`Case::set_inputs`]
    /// gives new ones: called before the new set is made, so that the host never holds two
    /// sets at once (a streaming case's 256 MiB tensor is memory faulted in once more, which
    /// on a virtual machine costs more than its samples). A backend whose inputs live
    /// elsewhere keeps them.
    fn release_inputs(&mut self) {}
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
pub fn check_memory(
    spec_name: &str,
    need_bytes: u64,
    available: Option<u64>,
) -> Result<(), BackendError> {
    if let Some(avail) = available {
        // Leave a tenth for the OS and everything else.
        if need_bytes > avail / 10 * 9 {
            return Err(BackendError::OutOfMemory {
                spec: spec_name.to_string(),
                need_bytes,
                available_bytes: avail,
            });
        }
    }
    Ok(())
}

/// Resolves the user's choice into a backend; the note says which ran and why. `flush` is the
/// cold-cache flush: None for the backend's default size (twice its last-level cache), Some(0)
/// in warm mode.
pub fn select(
    choice: BackendChoice,
    flush: Option<u64>,
    settings: &crate::settings::Settings,
) -> Result<(Box<dyn Backend>, String)> {
    let cpu = || -> Result<Box<dyn Backend>> {
        let device = DeviceInfo::this_cpu();
        // By default each case's own buffers are evicted; a size given (`--flush-mib`, or 0 in
        // warm mode) is a read of that many bytes.
        let cold = match flush {
            None => cpu::CpuFlush::Evict {
                read_bytes: (2 * device.llc_bytes).max(64 << 20),
            },
            Some(bytes) => cpu::CpuFlush::Read { bytes },
        };
        Ok(Box::new(cpu::CpuBackend::with_device(
            device,
            cold,
            settings.experiment_slowdown,
        )))
    };
    match choice {
        BackendChoice::Kind(DeviceKind::Cpu) => Ok((cpu()?, "cpu (requested)".into())),
        #[cfg(feature = "cuda")]
        BackendChoice::Kind(DeviceKind::Cuda) => {
            let gpu = cuda::runtime::CudaBackend::open(flush)?;
            let note = format!("cuda (requested): {}", gpu.describe());
            Ok((Box::new(gpu), note))
        }
        #[cfg(feature = "cuda")]
        BackendChoice::Auto => match cuda::runtime::CudaBackend::open(flush) {
            Ok(gpu) => {
                let note = format!("cuda (auto): {}", gpu.describe());
                Ok((Box::new(gpu), note))
            }
            Err(Error::BackendUnavailable(why)) => Ok((cpu()?, format!("cpu (auto: {why})"))),
            Err(e) => Ok((cpu()?, format!("cpu (auto: {e})"))),
        },
        #[cfg(not(feature = "cuda"))]
        BackendChoice::Kind(DeviceKind::Cuda) => match cuda::open_backend()? {},
        #[cfg(not(feature = "cuda"))]
        BackendChoice::Auto => Ok((cpu()?, format!("cpu (auto: {})", cuda::NOT_BUILT))),
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
