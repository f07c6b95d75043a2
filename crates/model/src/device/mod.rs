//! The device under test: its identity (the key its baselines are kept under), a datasheet table
//! of GPUs, its SIMD level (CPUs) and the shape of the ceilings measured on it. The backends
//! measure the ceilings; this module only describes them.

pub mod ceilings;
pub mod simd;
pub mod state;

pub use ceilings::{default_probe_array_bytes, probe_spans_memory, Ceilings};
pub use state::{ClockLimit, DeviceState};

use serde::{Deserialize, Serialize};

/// The compiler this build was made with (`rustc --version`, recorded by the build script).
pub const RUSTC_VERSION: &str = env!("OPLEDGER_RUSTC");

/// How a cold sample's caches were made cold (recorded with each run's measurement).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FlushMethod {
    /// A buffer larger than the cache read (a CPU's last level twice; a GPU's L2 twice): what
    /// every run recorded before the other way existed.
    #[default]
    Read,
    /// Every cache line of the case's own buffers evicted from every level by address, then
    /// the cores' private caches cleared by a read of twice their size (the CPU backend).
    Evict,
}

/// What sort of device was measured, one per backend: the one enum from which the command
/// line's backend choices, the device kind results and baselines record, the tiling of the IO
/// ledger and each backend's capabilities derive. A new backend is a variant here and a folder
/// under `backend/`; the compiler names every `match` that must learn it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The CPU backend's kernels (always available).
    Cpu,
    /// The CUDA backend's kernels (a driver and a GPU).
    Cuda,
}

/// What counts a device's kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountedBy {
    /// Valgrind's cache simulator on a fixed cache model (the CPU's kernels, x86-64).
    Valgrind,
    /// Nsight Compute reading the GPU's own counters (`ncu`).
    NsightCompute,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 2] = [DeviceKind::Cpu, DeviceKind::Cuda];

    /// `cpu` or `cuda`, as results record it.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        }
    }

    /// The backend in a few words, for the command line's help.
    pub fn describe(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "the CPU backend's kernels (always available)",
            DeviceKind::Cuda => "the CUDA backend's kernels (a driver and a GPU)",
        }
    }

    /// The tile sizes of this backend's tiled kernels, for the IO ledger (before a device
    /// fills in what it knows, such as a GPU's L2).
    pub fn tiling(self) -> crate::ledger::Tiling {
        match self {
            DeviceKind::Cpu => crate::ledger::Tiling::CPU,
            DeviceKind::Cuda => crate::ledger::Tiling::CUDA,
        }
    }

    /// The kind whose kernels a counts engine counted: a GPU's (under Nsight Compute) where the
    /// engine names one, else the CPU's (under Valgrind).
    pub fn counted_on(gpu: bool) -> DeviceKind {
        if gpu {
            DeviceKind::Cuda
        } else {
            DeviceKind::Cpu
        }
    }

    /// The tile sizes a counted side's ledger is taken with on this kind, where the counts
    /// model's last level holds `ll_bytes`: the CPU's kernels with that level as the cache that
    /// serves re-reads (the ledger's reuse cache, as a GPU's L2 is); a GPU's kernels with its L2.
    pub fn counts_tiling(self, ll_bytes: u64) -> crate::ledger::Tiling {
        match self {
            DeviceKind::Cpu => crate::ledger::Tiling {
                reuse_cache_bytes: ll_bytes,
                ..crate::ledger::Tiling::CPU
            },
            // The GPU's L2 (the engine's last level): the ledger its run is timed against.
            DeviceKind::Cuda => crate::ledger::Tiling {
                reuse_cache_bytes: ll_bytes,
                ..crate::ledger::Tiling::CUDA
            },
        }
    }

    /// What counts this device's kernels in counts mode (`--measure counts|both`).
    pub fn counted_by(self) -> CountedBy {
        match self {
            DeviceKind::Cpu => CountedBy::Valgrind,
            DeviceKind::Cuda => CountedBy::NsightCompute,
        }
    }

    /// Whether this device's key is made under the run's caps of the SIMD level
    /// (`OPLEDGER_SIMD`) and the thread count (`--threads`): a CPU's is ([`cpu_key`]), so a
    /// time regression is reproduced under the same caps; a GPU's names the GPU alone.
    pub fn key_has_caps(self) -> bool {
        match self {
            DeviceKind::Cpu => true,
            DeviceKind::Cuda => false,
        }
    }

    /// Whether a profiler reads this device's hardware counters (`run --ncu`, `counters`).
    pub fn has_hardware_counters(self) -> bool {
        match self {
            DeviceKind::Cpu => false,
            DeviceKind::Cuda => true,
        }
    }

    /// How far above the probe's bandwidth a cold-cache run may seem to go before its time is
    /// impossible rather than fast: on a CPU the ledger's re-reads can hit a cache the flush
    /// left warm (4× leaves room for that); on a GPU the L2 is overwritten before every sample
    /// and no kernel beats the memory by half again.
    pub fn impossible_bandwidth_factor(self) -> f64 {
        match self {
            DeviceKind::Cpu => 4.0,
            DeviceKind::Cuda => 1.5,
        }
    }

    /// How far above the probe's bandwidth a side's compulsory bytes (each input read once, the
    /// output written once) may seem to move on a cold cache: no cache holds them after the
    /// flush, so only the probe's own spread and the kernels' better access pattern separate
    /// an honest run from the probe (docs/measurement.md: measured). `None` where the ledger's
    /// bound is already as tight (a GPU's datasheet).
    pub fn impossible_compulsory_factor(self) -> Option<f64> {
        match self {
            DeviceKind::Cpu => Some(2.0),
            DeviceKind::Cuda => None,
        }
    }

    /// Whether a datasheet's memory bandwidth bounds a cold-cache run: a GPU's flushed L2
    /// leaves nothing to beat the memory's peak with; a CPU has no datasheet entry.
    pub fn datasheet_bounds_bandwidth(self) -> bool {
        match self {
            DeviceKind::Cpu => false,
            DeviceKind::Cuda => true,
        }
    }

    /// Whether the bandwidth probe and the cold-cache flush run in host memory, so that their
    /// buffers are checked against it before a run.
    pub fn probes_in_host_memory(self) -> bool {
        match self {
            DeviceKind::Cpu => true,
            DeviceKind::Cuda => false,
        }
    }

    /// Whether the ledger's tiling models a device cache whose size a flag may set
    /// (`ledger --l2-mib`): a GPU's L2.
    pub fn models_l2(self) -> bool {
        match self {
            DeviceKind::Cpu => false,
            DeviceKind::Cuda => true,
        }
    }

    /// Whether baselines of this kind may sit under an older device key (the CPU key before
    /// its SIMD level and cache joined it).
    pub fn has_legacy_key(self) -> bool {
        match self {
            DeviceKind::Cpu => true,
            DeviceKind::Cuda => false,
        }
    }

    /// The kind a run's `backend` field names.
    pub fn from_name(name: &str) -> Option<DeviceKind> {
        DeviceKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Datasheet ceilings of one accelerator. Peaks are dense (no sparsity).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Profile {
    pub key: &'static str,
    pub name: &'static str,
    /// Non-tensor FP32 peak, TFLOP/s.
    pub fp32_tflops: f64,
    /// FP16/BF16 tensor-core peak with FP32 accumulate, dense, TFLOP/s.
    pub tensor_tflops: f64,
    /// Memory bandwidth, GB/s (10^9 bytes/s).
    pub bw_gbps: f64,
    /// Where the figures come from.
    pub source: &'static str,
}

impl Profile {
    /// The peak to use for a dtype: f32 work does not run on fp16 tensor cores.
    pub fn peak_flops_per_sec(&self, dtype_is_f32: bool) -> f64 {
        if dtype_is_f32 {
            self.fp32_tflops * 1e12
        } else {
            self.tensor_tflops * 1e12
        }
    }
    pub fn bw_bytes_per_sec(&self) -> f64 {
        self.bw_gbps * 1e9
    }
}

// Sources (NVIDIA datasheets and architecture whitepapers):
// - L40S: "NVIDIA L40S Datasheet" (2023): FP32 91.6 TFLOPS, FP16 tensor 362.05 TFLOPS dense
//   (733 with sparsity), 864 GB/s GDDR6.
// - A100 SXM 80GB: "NVIDIA A100 Tensor Core GPU Datasheet": FP32 19.5, BF16 tensor 312 dense,
//   2,039 GB/s HBM2e.
// - H100 SXM: "NVIDIA H100 Tensor Core GPU Datasheet": FP32 67, BF16 tensor 989 dense (1,979
//   with sparsity), 3.35 TB/s HBM3.
// - H200 SXM: "NVIDIA H200 Tensor Core GPU Datasheet": FP32 67, BF16 tensor 989 dense, 4.8 TB/s
//   HBM3e.
// - RTX 4090: "NVIDIA Ada GPU Architecture" whitepaper, appendix: FP32 82.6, FP16 tensor with
//   FP32 accumulate 165.2 dense, 1,008 GB/s GDDR6X.
const PROFILES: &[Profile] = &[
    Profile {
        key: "l40s",
        name: "NVIDIA L40S",
        fp32_tflops: 91.6,
        tensor_tflops: 362.05,
        bw_gbps: 864.0,
        source: "NVIDIA L40S datasheet",
    },
    Profile {
        key: "a100-sxm",
        name: "NVIDIA A100-SXM4-80GB",
        fp32_tflops: 19.5,
        tensor_tflops: 312.0,
        bw_gbps: 2039.0,
        source: "NVIDIA A100 datasheet",
    },
    Profile {
        key: "h100-sxm",
        name: "NVIDIA H100 80GB HBM3",
        fp32_tflops: 67.0,
        tensor_tflops: 989.0,
        bw_gbps: 3350.0,
        source: "NVIDIA H100 datasheet",
    },
    Profile {
        key: "h200",
        name: "NVIDIA H200",
        fp32_tflops: 67.0,
        tensor_tflops: 989.0,
        bw_gbps: 4800.0,
        source: "NVIDIA H200 datasheet",
    },
    Profile {
        key: "rtx-4090",
        name: "NVIDIA GeForce RTX 4090",
        fp32_tflops: 82.6,
        tensor_tflops: 165.2,
        bw_gbps: 1008.0,
        source: "NVIDIA Ada architecture whitepaper",
    },
];

pub fn profiles() -> &'static [Profile] {
    PROFILES
}

/// A profile by key (`h100-sxm`) or by a device name as a driver reports it.
pub fn find_profile(name: &str) -> Option<&'static Profile> {
    let n = name.to_ascii_lowercase();
    PROFILES.iter().find(|p| p.key == n).or_else(|| {
        PROFILES.iter().find(|p| {
            n.contains(&p.name.to_ascii_lowercase()) || p.name.to_ascii_lowercase().contains(&n)
        })
    })
}

/// Identity of the machine a run measured: what makes two results comparable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceInfo {
    /// The directory of this device's baselines: `cpu-<model>-<simd>-<cores>c-<llc>m` on the
    /// CPU (everything that changes the code path or the roof: VMs often mask the model name),
    /// `cuda-<name>-sm<cc>-<SMs>sms` on a GPU.
    pub key: String,
    pub kind: DeviceKind,
    pub name: String,
    pub cores: usize,
    pub llc_bytes: u64,
    pub simd: String,
    pub os: String,
    pub kernel: String,
    pub governor: String,
    pub rustc: String,
    /// Total memory of the device: RAM on the CPU backend, device memory on a GPU (0 when
    /// unknown, as in results written before this field existed).
    #[serde(default)]
    pub memory_bytes: u64,
    /// The GPU driver's version (`CUDA 13.0`); empty on the CPU backend.
    #[serde(default)]
    pub driver: String,
}

impl DeviceInfo {
    /// Reads this machine's identity from /proc and /sys (values default to "unknown").
    pub fn this_cpu() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let name = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let os = std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("PRETTY_NAME="))
                    .map(|l| l["PRETTY_NAME=".len()..].trim_matches('"').to_string())
            })
            .unwrap_or_else(|| std::env::consts::OS.to_string());
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        };
        let llc_bytes = last_level_cache_bytes();
        let simd = simd::level().name();
        DeviceInfo {
            // The threads the kernels run on (the cores, unless `--threads` or
            // RAYON_NUM_THREADS says otherwise): timings of another thread count never compare.
            key: cpu_key(&name, simd, rayon::current_num_threads(), llc_bytes),
            kind: DeviceKind::Cpu,
            name,
            cores,
            llc_bytes,
            simd: simd.into(),
            os,
            kernel: read("/proc/sys/kernel/osrelease"),
            governor: read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            rustc: RUSTC_VERSION.to_string(),
            memory_bytes: mem_total_bytes(&read("/proc/meminfo")),
            driver: String::new(),
        }
    }
}

/// The baseline key of a CPU: model, SIMD level, threads (`<N>c`: the cores, unless the run was
/// given another thread count) and last-level cache, the things that change which kernels run or
/// where the roof is. Two machines of one key run the same code
/// against comparable ceilings; a baseline of another key is never compared.
pub fn cpu_key(model: &str, simd: &str, cores: usize, llc_bytes: u64) -> String {
    format!(
        "cpu-{}-{}-{cores}c-{}m",
        slug(model),
        slug(simd),
        llc_bytes.div_ceil(1 << 20)
    )
}

/// The key a CPU had before the SIMD level and the cache were part of it (`cpu-<model>-<N>c`):
/// the folder where older baselines of this machine may still lie.
pub fn legacy_cpu_key(model: &str, cores: usize) -> String {
    format!("cpu-{}-{cores}c", slug(model))
}

impl DeviceInfo {
    /// This identity's key as the current rule computes it from the recorded fields: a CPU
    /// baseline written under the older, coarser key reads as what it is.
    pub fn current_key(&self) -> String {
        if self.kind == DeviceKind::Cpu {
            cpu_key(&self.name, &self.simd, self.cores, self.llc_bytes)
        } else {
            self.key.clone()
        }
    }
}

/// `MemTotal:  24599872 kB` of /proc/meminfo in bytes (0 when absent).
fn mem_total_bytes(meminfo: &str) -> u64 {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// `Intel(R) Xeon(R) Processor` → `intel-xeon-processor`: safe in a file name.
pub fn slug(s: &str) -> String {
    let lower = s
        .to_ascii_lowercase()
        .replace("(r)", "")
        .replace("(tm)", "");
    let mut out = String::new();
    for c in lower.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-');
    let out: String = out.chars().take(48).collect();
    if out.is_empty() {
        "unknown".into()
    } else {
        out
    }
}

/// Size of the largest cache level of cpu0, from sysfs; 32 MiB when it cannot be read.
pub fn last_level_cache_bytes() -> u64 {
    let mut best = 0u64;
    if let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache") {
        for entry in dir.flatten() {
            let size = std::fs::read_to_string(entry.path().join("size")).unwrap_or_default();
            if let Some(bytes) = parse_cache_size(size.trim()) {
                best = best.max(bytes);
            }
        }
    }
    if best == 0 {
        32 << 20
    } else {
        best
    }
}

/// The L2 cache of one core, from the kernel's cache description of CPU 0 (`None` where it
/// gives none: another OS, a container that hides it). Read once.
pub fn l2_cache_bytes() -> Option<u64> {
    static L2: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *L2.get_or_init(|| core_cache_bytes("2"))
}

/// The L1 data cache of one core (32 KiB on Zen 4, 48 KiB on recent Xeons), as
/// [`l2_cache_bytes`] reads the L2. Read once.
pub fn l1d_cache_bytes() -> Option<u64> {
    static L1D: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *L1D.get_or_init(|| core_cache_bytes("1"))
}

/// The size of CPU 0's data (or unified) cache at `level`, from sysfs.
fn core_cache_bytes(level: &str) -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.flatten().find_map(|entry| {
        let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).unwrap_or_default();
        let unified_or_data = matches!(read("type").trim(), "Unified" | "Data");
        (read("level").trim() == level && unified_or_data)
            .then(|| parse_cache_size(read("size").trim()))
            .flatten()
    })
}

fn parse_cache_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the machine reports an L2 and an L1 data cache, they are a core's caches: plausible
    /// sizes, the L1 below the L2 and the L2 no larger than the last level.
    #[test]
    fn the_caches_read_from_the_machine_are_cache_sizes() {
        if let Some(l2) = l2_cache_bytes() {
            assert!((64 << 10..=64 << 20).contains(&l2), "L2 {l2}");
            assert!(l2 <= last_level_cache_bytes(), "L2 {l2}");
        }
        if let Some(l1d) = l1d_cache_bytes() {
            assert!((8 << 10..=1 << 20).contains(&l1d), "L1d {l1d}");
            assert!(l2_cache_bytes().is_none_or(|l2| l1d < l2), "L1d {l1d}");
        }
        assert_eq!(parse_cache_size("2048K"), Some(2 << 20));
    }

    #[test]
    fn profiles_cover_the_seed_devices() {
        let l40s = find_profile("l40s").expect("l40s");
        assert_eq!(l40s.tensor_tflops, 362.05);
        assert_eq!(l40s.bw_gbps, 864.0);
        for k in ["a100-sxm", "h100-sxm", "h200", "rtx-4090"] {
            assert!(find_profile(k).is_some(), "{k}");
        }
        assert_eq!(find_profile("NVIDIA H200").map(|p| p.key), Some("h200"));
        assert!(find_profile("no such gpu").is_none());
    }

    #[test]
    fn slugs_and_cache_sizes() {
        assert_eq!(slug("Intel(R) Xeon(R) Processor"), "intel-xeon-processor");
        assert_eq!(slug("../../etc"), "etc");
        assert_eq!(slug("///"), "unknown");
        assert_eq!(
            cpu_key("AMD EPYC", "avx2+fma", 2, 32 << 20),
            "cpu-amd-epyc-avx2-fma-2c-32m"
        );
        // The SIMD level, the cores and the cache each separate keys.
        let keys = [
            cpu_key("AMD EPYC", "avx512f", 2, 32 << 20),
            cpu_key("AMD EPYC", "avx2+fma", 2, 32 << 20),
            cpu_key("AMD EPYC", "avx2+fma", 4, 32 << 20),
            cpu_key("AMD EPYC", "avx2+fma", 2, 16 << 20),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(legacy_cpu_key("AMD EPYC", 2), "cpu-amd-epyc-2c");
        assert_eq!(parse_cache_size("266240K"), Some(266240 << 10));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn memory_from_meminfo_and_identity_of_old_results() {
        let meminfo = "MemTotal:       24599872 kB\nMemFree:  1 kB\n";
        assert_eq!(mem_total_bytes(meminfo), 24599872 * 1024);
        assert_eq!(mem_total_bytes("garbage"), 0);
        let this = DeviceInfo::this_cpu();
        assert!(this.memory_bytes > 0 && this.driver.is_empty());
        // A device identity written before memory and driver were recorded still reads.
        let mut v = serde_json::to_value(&this).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.remove("memory_bytes");
        obj.remove("driver");
        let old: DeviceInfo = serde_json::from_value(v).unwrap();
        assert_eq!((old.memory_bytes, old.driver.as_str()), (0, ""));
    }
}
