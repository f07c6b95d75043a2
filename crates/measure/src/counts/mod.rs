//! Counts: what a kernel call executes and moves, as Valgrind's cache simulator (Callgrind with
//! `--cache-sim=yes --simulate-wb=yes`) counts it on a fixed cache model. Unlike a time, a count
//! is the same on every run and every x86-64 machine for the same binary, inputs and model, and
//! the lines that miss the model's last level are what the IO ledger predicts.
//!
//! This module is the arithmetic: the cache model, the events of a Callgrind output file, the
//! counts derived from them (DRAM bytes, estimated cycles) and the comparison of a side's DRAM
//! bytes with its ledger. Counting a spec's sides is the measurement its two engines make:
//! [`valgrind`] (the CPU's kernels under the simulator, run by `callgrind`) and [`nsight`] (a
//! GPU's kernels under Nsight Compute). "Counters" (`opledger counters`) are another thing: an
//! Nsight Compute export read against the ledger after the fact.

pub mod nsight;
pub mod valgrind;

use crate::ledger::VariantLedger;
use serde::{Deserialize, Serialize};

/// One simulated cache: size, associativity, line size (Valgrind's `--D1=size,assoc,line`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CacheLevel {
    pub bytes: u64,
    pub ways: u64,
    pub line_bytes: u64,
}

impl CacheLevel {
    /// `32k8w64` (size, ways, line bytes): a folder-name-safe form for a baseline key.
    pub fn slug(&self) -> String {
        let size = if self.bytes.is_multiple_of(1 << 20) {
            format!("{}m", self.bytes >> 20)
        } else if self.bytes.is_multiple_of(1 << 10) {
            format!("{}k", self.bytes >> 10)
        } else {
            self.bytes.to_string()
        };
        format!("{size}{}w{}", self.ways, self.line_bytes)
    }

    /// `size,assoc,line`, as Valgrind takes it.
    pub fn arg(&self) -> String {
        format!("{},{},{}", self.bytes, self.ways, self.line_bytes)
    }
}

/// The caches the simulator models: the same on every machine, so that counts compare across
/// runners (left to itself Valgrind copies the host's last level, which differs from VM to VM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CacheModel {
    pub i1: CacheLevel,
    pub d1: CacheLevel,
    pub ll: CacheLevel,
}

impl Default for CacheModel {
    /// A common desktop-class geometry: 32 KiB 8-way L1s and an 8 MiB 16-way last level, 64-byte
    /// lines.
    fn default() -> Self {
        let l1 = CacheLevel {
            bytes: 32 << 10,
            ways: 8,
            line_bytes: 64,
        };
        CacheModel {
            i1: l1,
            d1: l1,
            ll: CacheLevel {
                bytes: 8 << 20,
                ways: 16,
                line_bytes: 64,
            },
        }
    }
}

impl CacheModel {
    /// `I1=32768,8,64 D1=32768,8,64 LL=8388608,16,64`.
    pub fn describe(&self) -> String {
        format!(
            "I1={} D1={} LL={}",
            self.i1.arg(),
            self.d1.arg(),
            self.ll.arg()
        )
    }

    /// Parses [`CacheModel::describe`]'s form (`LL=…` alone changes the last level only).
    pub fn parse(text: &str) -> Result<CacheModel, String> {
        let mut m = CacheModel::default();
        for part in text.split_whitespace() {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected I1=, D1= or LL=SIZE,WAYS,LINE"))?;
            let nums: Vec<u64> = value
                .split(',')
                .map(|v| v.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|_| format!("{part:?}: expected three whole numbers SIZE,WAYS,LINE"))?;
            let [bytes, ways, line_bytes] = nums[..] else {
                return Err(format!("{part:?}: expected three numbers SIZE,WAYS,LINE"));
            };
            let level = CacheLevel {
                bytes,
                ways,
                line_bytes,
            };
            // Valgrind's own rules (3.19's `parse_cache_opt` and `check_cache`): each number a
            // signed 32-bit int, powers of two for the line and the set count, more than one line.
            // A model it would refuse is bad input here, not a counted side that fails later.
            if [bytes, ways, line_bytes]
                .iter()
                .any(|&v| v > i32::MAX as u64)
            {
                return Err(format!(
                    "{part:?}: Valgrind takes each number up to {} (a last level of at most 1 GiB)",
                    i32::MAX
                ));
            }
            let sets = ways
                .checked_mul(line_bytes)
                .and_then(|set_bytes| bytes.checked_div(set_bytes))
                .unwrap_or(0);
            if ways == 0
                || !line_bytes.is_power_of_two()
                || line_bytes < 16
                || sets == 0
                || !sets.is_power_of_two()
                || sets * ways * line_bytes != bytes
            {
                return Err(format!(
                    "{part:?}: the size must be ways x line x a power-of-two number of sets, the line a power of two of at least 16 bytes"
                ));
            }
            if bytes <= line_bytes {
                return Err(format!(
                    "{part:?}: a cache of one line is refused by Valgrind: give a size above the line"
                ));
            }
            match name {
                "I1" => m.i1 = level,
                "D1" => m.d1 = level,
                "LL" => m.ll = level,
                _ => return Err(format!("{part:?}: expected I1=, D1= or LL=")),
            }
        }
        Ok(m)
    }
}

/// The events Callgrind counted over one interval, by their names in its output file
/// (`Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw` and, with write-back simulation, `I1dmr D1dmr
/// D1dmw ILdmr DLdmr DLdmw`: misses that evicted a dirty line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Events(pub std::collections::BTreeMap<String, u64>);

impl Events {
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// The totals of a Callgrind output file: its `events:` line names the columns of its
    /// `totals:` (or, without one, `summary:`) line.
    pub fn parse(text: &str) -> Result<Events, String> {
        let mut names: Option<Vec<&str>> = None;
        let mut totals: Option<&str> = None;
        let mut summary: Option<&str> = None;
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("events:") {
                names = Some(v.split_whitespace().collect());
            } else if let Some(v) = line.strip_prefix("totals:") {
                totals = Some(v);
            } else if let Some(v) = line.strip_prefix("summary:") {
                summary = Some(v);
            }
        }
        let names = names.ok_or("no `events:` line: not a Callgrind output file")?;
        let values = totals
            .or(summary)
            .ok_or("no `totals:` or `summary:` line: not a Callgrind output file")?;
        let mut out = std::collections::BTreeMap::new();
        for (i, v) in values.split_whitespace().enumerate() {
            let name = names
                .get(i)
                .ok_or("more totals than events: not a Callgrind output file")?;
            let n = v
                .parse::<u64>()
                .map_err(|_| format!("total {v:?} of {name} is not a count"))?;
            out.insert((*name).to_string(), n);
        }
        // A column Callgrind left out at the end of the line is zero.
        for n in names {
            out.entry(n.to_string()).or_insert(0);
        }
        Ok(Events(out))
    }
}

/// One function's own share of a counted call (what it executed itself, not its callees).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FunctionCounts {
    pub function: String,
    pub instructions: u64,
    /// Its last-level misses, reads and writes.
    pub ll_misses: u64,
}

/// The functions of a Callgrind output file by their own instructions, most first, at most
/// `keep` of them: each `fn=` block's cost lines summed, the cost line after a `calls=` line
/// (a callee's inclusive cost) left out. Needs the file's `events:` line.
pub fn functions(text: &str, keep: usize) -> Vec<FunctionCounts> {
    let names: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))
        .map(|v| v.split_whitespace().collect())
        .unwrap_or_default();
    let col = |n: &str| names.iter().position(|x| *x == n);
    let (ir, misses) = (col("Ir"), [col("ILmr"), col("DLmr"), col("DLmw")]);
    let mut by_fn: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    let mut current: Option<String> = None;
    let mut skip_next = false;
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("fn=") {
            // `(id) name`, or `name` without compressed strings.
            let name = match f.split_once(") ") {
                Some((id, n)) if id.starts_with('(') => n,
                _ => f,
            };
            current = Some(name.to_string());
            continue;
        }
        if line.starts_with("calls=") {
            skip_next = true;
            continue;
        }
        let first = line.bytes().next();
        let is_cost = matches!(first, Some(b'0'..=b'9' | b'+' | b'-' | b'*'));
        if !is_cost {
            continue;
        }
        if skip_next {
            skip_next = false;
            continue;
        }
        let Some(f) = &current else { continue };
        // The position column first, then the events in order (missing ones are zero).
        let values: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        let at = |i: Option<usize>| i.and_then(|i| values.get(i)).copied().unwrap_or(0);
        let e = by_fn.entry(f.clone()).or_default();
        e.0 += at(ir);
        e.1 += misses.iter().map(|m| at(*m)).sum::<u64>();
    }
    let mut out: Vec<FunctionCounts> = by_fn
        .into_iter()
        .map(|(function, (instructions, ll_misses))| FunctionCounts {
            function,
            instructions,
            ll_misses,
        })
        .filter(|f| f.instructions > 0)
        .collect();
    out.sort_by(|a, b| {
        b.instructions
            .cmp(&a.instructions)
            .then(a.function.cmp(&b.function))
    });
    out.truncate(keep);
    out
}

/// What one side's kernel call executed and moved on the model, counted by the simulator.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Counts {
    /// Instructions executed (every thread of the process while counting).
    pub instructions: u64,
    /// Data reads and writes (loads and stores of any width).
    pub data_reads: u64,
    pub data_writes: u64,
    /// First-level misses: instruction fetches, data reads, data writes.
    pub i1_misses: u64,
    pub d1_read_misses: u64,
    pub d1_write_misses: u64,
    /// Last-level read misses (instruction and data): lines read from memory.
    pub ll_read_misses: u64,
    /// Last-level write misses: lines filled to be written (write-allocate).
    pub ll_write_misses: u64,
    /// Lines read from memory × line size.
    pub dram_read_bytes: u64,
    /// Dirty lines written back to memory × line size: those evicted during the call, and
    /// those still dirty when it returned (evicted by a flush counted apart).
    pub dram_write_bytes: u64,
    /// `L1 hits + 5 × LL hits + 35 × memory accesses`, the estimate Cachegrind's
    /// documentation and iai-callgrind use (a model, not a machine's cycles).
    pub estimated_cycles: u64,
}

impl Counts {
    /// The counts of a call from the events of its interval (`call`) and of the flush after
    /// it (`flush`, whose dirty evictions are the call's lines still dirty at its end).
    ///
    /// Every sum and product is checked: totals no counted call can reach (a file edited to
    /// 2^58 misses) are an error, never bytes wrapped around to a small number.
    pub fn of(call: &Events, flush: &Events, model: &CacheModel) -> Result<Counts, String> {
        let e = |n: &str| call.get(n);
        let sum = |names: &[&str], ev: &Events| {
            names
                .iter()
                .try_fold(0u64, |acc, n| acc.checked_add(ev.get(n)))
        };
        let too_large = || {
            "its totals overflow 64 bits: no counted call moves that much; the file is not Callgrind's own".to_string()
        };
        let l1_misses = sum(&["I1mr", "D1mr", "D1mw"], call).ok_or_else(too_large)?;
        let ll_misses = sum(&["ILmr", "DLmr", "DLmw"], call).ok_or_else(too_large)?;
        let accesses = sum(&["Ir", "Dr", "Dw"], call).ok_or_else(too_large)?;
        let ll_read_misses = sum(&["ILmr", "DLmr"], call).ok_or_else(too_large)?;
        let dirty = ["ILdmr", "DLdmr", "DLdmw"];
        let dirty_lines = sum(&dirty, call)
            .zip(sum(&dirty, flush))
            .and_then(|(a, b)| a.checked_add(b))
            .ok_or_else(too_large)?;
        let line = model.ll.line_bytes;
        let estimated_cycles = accesses
            .saturating_sub(l1_misses)
            .checked_add(
                l1_misses
                    .saturating_sub(ll_misses)
                    .checked_mul(5)
                    .ok_or_else(too_large)?,
            )
            .and_then(|c| c.checked_add(ll_misses.checked_mul(35)?))
            .ok_or_else(too_large)?;
        Ok(Counts {
            instructions: e("Ir"),
            data_reads: e("Dr"),
            data_writes: e("Dw"),
            i1_misses: e("I1mr"),
            d1_read_misses: e("D1mr"),
            d1_write_misses: e("D1mw"),
            ll_read_misses,
            ll_write_misses: e("DLmw"),
            dram_read_bytes: ll_read_misses.checked_mul(line).ok_or_else(too_large)?,
            dram_write_bytes: dirty_lines.checked_mul(line).ok_or_else(too_large)?,
            estimated_cycles,
        })
    }
}

/// How a side's simulated DRAM traffic stands against its ledger.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LedgerAgreement {
    /// Every tensor moves once and is at least four times the last level: reads and writes
    /// each within ±5% of the ledger (`agrees`), with the measured/ledger ratios.
    Streaming {
        read_ratio: f64,
        write_ratio: f64,
        agrees: bool,
    },
    /// The kernel re-reads a tensor by design (tiles): the ledger must be a lower bound
    /// (measured/ledger ≥ 0.95 for reads and writes); the ratio is the kernel's reuse.
    Reuse {
        read_ratio: f64,
        write_ratio: f64,
        agrees: bool,
    },
    /// A user's implementation (a worker) of the variant whose ledger it is set against: the
    /// ledger is what that variant must move at least (measured/ledger ≥ 0.95 for reads and
    /// writes, `agrees`); above it, the ratio is the traffic the implementation adds
    /// (temporaries, extra passes), which is reported, not failed.
    Implementation {
        read_ratio: f64,
        write_ratio: f64,
        agrees: bool,
    },
    /// Tensors smaller than four times the last level carry more than 1% of the side's
    /// traffic: they may stay in the cache, and the ledger (which assumes they do not) is not
    /// what memory sees.
    CacheResident {
        smallest_tensor_bytes: u64,
        ll_bytes: u64,
    },
}

/// Fraction within which a streaming side's DRAM bytes must match its ledger.
pub const STREAMING_TOLERANCE: f64 = 0.05;
/// Largest share of a side's ledger traffic that tensors small enough to stay cached may have
/// while the side is still judged as streaming.
pub const SMALL_TENSOR_SHARE: f64 = 0.01;
/// Least measured/ledger ratio of a side that re-reads by design.
pub const REUSE_FLOOR: f64 = 0.95;

impl LedgerAgreement {
    /// Whether the side holds up against its ledger (`None`: not compared).
    pub fn agrees(&self) -> Option<bool> {
        match self {
            LedgerAgreement::Streaming { agrees, .. }
            | LedgerAgreement::Reuse { agrees, .. }
            | LedgerAgreement::Implementation { agrees, .. } => Some(*agrees),
            LedgerAgreement::CacheResident { .. } => None,
        }
    }

    /// Compares a user's implementation's counts `c` with the ledger of the variant it
    /// implements: [`LedgerAgreement::of`], where every side that is compared at all has the
    /// ledger as a lower bound.
    pub fn of_implementation(
        ledger: &VariantLedger,
        c: &Counts,
        model: &CacheModel,
    ) -> LedgerAgreement {
        match LedgerAgreement::of(ledger, c, model) {
            LedgerAgreement::Streaming {
                read_ratio,
                write_ratio,
                ..
            }
            | LedgerAgreement::Reuse {
                read_ratio,
                write_ratio,
                ..
            } => {
                let write: u64 = ledger.movements.iter().map(|m| m.bytes * m.writes).sum();
                LedgerAgreement::Implementation {
                    read_ratio,
                    write_ratio,
                    agrees: read_ratio >= REUSE_FLOOR && (write == 0 || write_ratio >= REUSE_FLOOR),
                }
            }
            other => other,
        }
    }

    /// [`LedgerAgreement::of`] judged on the reads alone, for counts whose DRAM writes read
    /// low (a GPU's: dirty lines still in its L2 when a launch ends are written back outside
    /// it). Both ratios are kept.
    pub fn of_reads(ledger: &VariantLedger, c: &Counts, model: &CacheModel) -> LedgerAgreement {
        match LedgerAgreement::of(ledger, c, model) {
            LedgerAgreement::Streaming {
                read_ratio,
                write_ratio,
                ..
            } => LedgerAgreement::Streaming {
                read_ratio,
                write_ratio,
                agrees: (read_ratio - 1.0).abs() <= STREAMING_TOLERANCE,
            },
            LedgerAgreement::Reuse {
                read_ratio,
                write_ratio,
                ..
            } => LedgerAgreement::Reuse {
                read_ratio,
                write_ratio,
                agrees: read_ratio >= REUSE_FLOOR,
            },
            other => other,
        }
    }

    /// Compares `c` with `ledger` on `model`.
    pub fn of(ledger: &VariantLedger, c: &Counts, model: &CacheModel) -> LedgerAgreement {
        let read: u64 = ledger.movements.iter().map(|m| m.bytes * m.reads).sum();
        let write: u64 = ledger.movements.iter().map(|m| m.bytes * m.writes).sum();
        let ratio = |measured: u64, predicted: u64| measured as f64 / predicted.max(1) as f64;
        let (read_ratio, write_ratio) = (
            ratio(c.dram_read_bytes, read),
            ratio(c.dram_write_bytes, write),
        );
        // Tensors under four times the last level may stay in it. Where their traffic is a
        // sliver of the side's (a bias or a norm's weight beside 256 MiB rows), they cannot
        // move the total beyond the tolerance, and the side is still judged as streaming.
        let small = |m: &&crate::ledger::Movement| m.bytes < 4 * model.ll.bytes;
        let small_traffic: u64 = ledger
            .movements
            .iter()
            .filter(small)
            .map(|m| m.traffic_bytes())
            .sum();
        let smallest = ledger.movements.iter().filter(small).map(|m| m.bytes).min();
        // Cache-resident first: re-reads of a tensor that fits are served by the cache.
        if let Some(smallest) = smallest {
            if small_traffic as f64 > SMALL_TENSOR_SHARE * ledger.bytes_moved().max(1) as f64 {
                return LedgerAgreement::CacheResident {
                    smallest_tensor_bytes: smallest,
                    ll_bytes: model.ll.bytes,
                };
            }
        }
        if ledger.movements.iter().any(|m| m.reads > 1 || m.writes > 1) {
            return LedgerAgreement::Reuse {
                read_ratio,
                write_ratio,
                agrees: read_ratio >= REUSE_FLOOR && (write == 0 || write_ratio >= REUSE_FLOOR),
            };
        }
        let near =
            |r: f64, predicted: u64| predicted == 0 || (r - 1.0).abs() <= STREAMING_TOLERANCE;
        LedgerAgreement::Streaming {
            read_ratio,
            write_ratio,
            agrees: near(read_ratio, read) && near(write_ratio, write),
        }
    }
}

/// A spec's counts and the outputs of its counted calls (`None` for a side not counted).
pub struct Counted {
    pub counts: SpecCounts,
    pub before_output: Option<Vec<f32>>,
    pub after_output: Option<Vec<f32>>,
}

/// The tile sizes a counted side's ledger is taken with under `engine`: a GPU's kernels', or
/// the CPU's with the model's last level as the cache that serves re-reads (the ledger's reuse
/// cache, as a GPU's L2 is).
pub fn ledger_tiling(engine: &CountsEngine) -> crate::ledger::Tiling {
    crate::device::DeviceKind::counted_on(engine.gpu.is_some())
        .counts_tiling(engine.cache_model.ll.bytes)
}

/// How a counted side stands against its ledger, the one derivation (a run's, and an
/// archive's audit from the counts it holds): a GPU's counts on their reads, a user's
/// implementation with the ledger as a lower bound, a built-in kernel as [`LedgerAgreement::of`].
pub fn agreement(
    engine: &CountsEngine,
    implemented: bool,
    ledger: &VariantLedger,
    c: &Counts,
) -> LedgerAgreement {
    let model = &engine.cache_model;
    if engine.gpu.is_some() {
        LedgerAgreement::of_reads(ledger, c, model)
    } else if implemented {
        LedgerAgreement::of_implementation(ledger, c, model)
    } else {
        LedgerAgreement::of(ledger, c, model)
    }
}

/// The compulsory traffic of a side whose ledger is `ledger` and whose output is `output`:
/// its inputs (tensors it reads and never writes) read once, its output written once; `None`
/// where a tensor of them fits in the model's last level (it might be judged on a warm cache).
pub fn compulsory_bytes(
    ledger: &VariantLedger,
    output: &str,
    model: &CacheModel,
) -> Option<(u64, u64)> {
    let fits = ledger
        .movements
        .iter()
        .filter(|m| (m.reads > 0 && m.writes == 0) || m.tensor == output)
        .any(|m| m.bytes <= model.ll.bytes);
    if fits {
        return None;
    }
    ledger.compulsory_bytes(output)
}

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
    /// The key counts baselines are filed under: what decides the counts besides the code —
    /// the instruction set, the SIMD level and the cache model; not the runner's CPU model,
    /// cores or load. `counts-x86-64-avx2-32k8w64-32k8w64-8m16w64`.
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

/// The most FLOPs one instruction can do at the counted SIMD level (AVX2): a 256-bit FMA on
/// eight f32 lanes, a multiply and an add each.
pub const MAX_FLOPS_PER_INSTRUCTION: u64 = 16;

impl Counts {
    /// True when the counted instructions could have done `flops` at all: at most
    /// [`MAX_FLOPS_PER_INSTRUCTION`] each. A side below did its work outside the counted call.
    pub fn can_have_done(&self, flops: u64) -> bool {
        self.instructions.saturating_mul(MAX_FLOPS_PER_INSTRUCTION) >= flops
    }

    /// The value of `metric` (DRAM bytes: read and written).
    pub fn metric(&self, metric: crate::spec::CountsMetric) -> u64 {
        use crate::spec::CountsMetric;
        match metric {
            CountsMetric::Instructions => self.instructions,
            CountsMetric::DramBytes => self.dram_read_bytes + self.dram_write_bytes,
            CountsMetric::Cycles => self.estimated_cycles,
        }
    }
}

/// One side of a spec as counted, or why it was not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SideCounts {
    Counted {
        counts: Counts,
        /// Ledger bytes read and written.
        ledger_read_bytes: u64,
        ledger_write_bytes: u64,
        /// The ledger's FLOPs: what the counted instructions must be able to have done.
        #[serde(default)]
        ledger_flops: u64,
        agreement: LedgerAgreement,
        /// The functions that executed most in the call, by their own instructions: where the
        /// work went.
        #[serde(default)]
        functions: Vec<FunctionCounts>,
        /// A worker's side: the instructions of a second counted call on the same inputs. An
        /// honest function does the same work again; one that kept its result does far less.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repeat_instructions: Option<u64>,
        /// What any computation of the output must move from a cold cache, where every tensor
        /// it reads and writes exceeds the last level: each input read once, the output written
        /// once (bytes read, bytes written). Simulated DRAM bytes below either are impossible.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compulsory_bytes: Option<(u64, u64)>,
    },
    /// Counts are not available for this side (a worker or a `cuda:` side), with why.
    NotAvailable { reason: String },
}

impl SideCounts {
    /// The side's agreement with its ledger, where it was counted.
    pub fn agreement(&self) -> Option<&LedgerAgreement> {
        match self {
            SideCounts::Counted { agreement, .. } => Some(agreement),
            SideCounts::NotAvailable { .. } => None,
        }
    }
    /// The side's counts, where it was counted.
    pub fn counts(&self) -> Option<&Counts> {
        match self {
            SideCounts::Counted { counts, .. } => Some(counts),
            SideCounts::NotAvailable { .. } => None,
        }
    }
    /// The functions that executed most, where it was counted.
    pub fn functions(&self) -> &[FunctionCounts] {
        match self {
            SideCounts::Counted { functions, .. } => functions,
            SideCounts::NotAvailable { .. } => &[],
        }
    }
}

/// One spec's counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpecCounts {
    pub name: String,
    pub engine: CountsEngine,
    pub before_variant: String,
    pub after_variant: String,
    pub before: SideCounts,
    pub after: SideCounts,
    /// The workload counted, where the spec's `measure.counts_sizes` made it another than the
    /// timed one (`elementwise 2048x4096 f32 …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_workload: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "version: 1\ncreator: callgrind-3.19.0\npid: 7\ncmd: x\npart: 1\n\npositions: line\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw I1dmr D1dmr D1dmw ILdmr DLdmr DLdmw\nsummary: 100 40 20 1 10 5 1 8 4 0 0 2 0 1 3\n\nfl=(1) a.c\nfn=(1) f\n0 100 40 20\n\ntotals: 100 40 20 1 10 5 1 8 4 0 0 2 0 1 3\n";

    #[test]
    fn callgrind_totals_become_counts() {
        let call = Events::parse(OUT).unwrap();
        assert_eq!(call.get("Ir"), 100);
        assert_eq!(call.get("DLdmw"), 3);
        let flush = Events::parse(&OUT.replace("0 1 3\n", "0 0 6\n")).unwrap();
        let m = CacheModel::default();
        let c = Counts::of(&call, &flush, &m).unwrap();
        assert_eq!(c.instructions, 100);
        assert_eq!(c.ll_read_misses, 9);
        assert_eq!(c.dram_read_bytes, 9 * 64);
        // Dirty evictions of the call (1 + 3) and of the flush (6).
        assert_eq!(c.dram_write_bytes, 10 * 64);
        // 160 accesses, 16 L1 misses of which 13 reached memory.
        assert_eq!(c.estimated_cycles, (160 - 16) + 5 * 3 + 35 * 13);
        // 2^58 LL read misses are 2^64 bytes: an error, not 0 bytes.
        let huge = Events::parse(&OUT.replace(
            "totals: 100 40 20 1 10 5 1 8 4",
            "totals: 100 40 20 1 10 5 0 288230376151711744 4",
        ))
        .unwrap();
        let e = Counts::of(&huge, &flush, &m).unwrap_err();
        assert!(e.contains("overflow"), "{e}");
        assert!(Events::parse("totals: 1 2\n").is_err());
        assert!(Events::parse("events: Ir\ntotals: x\n").is_err());
    }

    #[test]
    fn functions_are_summed_by_their_own_cost_and_callees_left_out() {
        let text = "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\nfn=(1) kernel\n10 100 0 0 0 0 0 0 5 1\n11 50\ncfn=(2) helper\ncalls=3 20\n12 1000 0 0 0 0 0 0 9 9\nfn=(2) helper\n20 300 0 0 0 0 0 0 2\ntotals: 450\n";
        let f = functions(text, 10);
        assert_eq!(f[0].function, "helper");
        assert_eq!((f[0].instructions, f[0].ll_misses), (300, 2));
        assert_eq!(f[1].function, "kernel");
        assert_eq!((f[1].instructions, f[1].ll_misses), (150, 6));
        assert_eq!(functions(text, 1).len(), 1);
    }

    #[test]
    fn sides_are_judged_streaming_reuse_or_cache_resident_by_their_ledger() {
        use crate::ledger::Movement;
        use crate::values::Variant;
        let m = CacheModel::default();
        let mv = |bytes: u64, reads: u64, writes: u64| Movement {
            tensor: "t".into(),
            bytes,
            reads,
            writes,
        };
        let counts = |read: u64, write: u64| Counts {
            dram_read_bytes: read,
            dram_write_bytes: write,
            ..Counts::default()
        };
        let big = 256 << 20;
        // A 32 KiB bias beside 256 MiB rows is still a streaming side, judged within ±5%.
        let l = VariantLedger::new(
            Variant::Fused,
            vec![mv(big, 1, 0), mv(32 << 10, 1, 0), mv(big, 0, 1)],
            0,
            1,
        );
        let a = LedgerAgreement::of(&l, &counts(big + (32 << 10), big), &m);
        assert!(
            matches!(a, LedgerAgreement::Streaming { agrees: true, .. }),
            "{a:?}"
        );
        let a = LedgerAgreement::of(&l, &counts(big * 11 / 10, big), &m);
        assert_eq!(a.agrees(), Some(false), "{a:?}");
        // Small tensors with much of the traffic: not compared.
        let l = VariantLedger::new(Variant::Fused, vec![mv(1 << 20, 1, 0), mv(big, 0, 1)], 0, 1);
        let l2 = VariantLedger::new(
            Variant::Fused,
            vec![mv(8 << 20, 1, 0), mv(8 << 20, 0, 1)],
            0,
            1,
        );
        assert!(matches!(
            LedgerAgreement::of(&l, &counts(0, 0), &m),
            LedgerAgreement::Streaming { .. }
        ));
        assert_eq!(LedgerAgreement::of(&l2, &counts(0, 0), &m).agrees(), None);
        // A re-read tensor: the ledger is a lower bound.
        let l = VariantLedger::new(Variant::Fused, vec![mv(big, 4, 0), mv(big, 0, 1)], 0, 1);
        assert_eq!(
            LedgerAgreement::of(&l, &counts(5 * big, big), &m).agrees(),
            Some(true)
        );
        assert_eq!(
            LedgerAgreement::of(&l, &counts(3 * big, big), &m).agrees(),
            Some(false)
        );
    }

    #[test]
    fn a_gpus_engine_is_keyed_by_its_device_and_gates_dram_bytes_by_default() {
        let cpu = CountsEngine {
            valgrind: "valgrind-3.19.0".into(),
            cache_model: CacheModel::default(),
            simd: "avx2".into(),
            arch: "x86_64".into(),
            ..CountsEngine::default()
        };
        assert_eq!(cpu.key(), "counts-x86-64-avx2-32k8w64-32k8w64-8m16w64");
        assert_eq!(cpu.default_metric(), crate::spec::CountsMetric::Cycles);
        let gpu = |profiler: &str| CountsEngine {
            arch: "cuda".into(),
            gpu: Some(GpuCounting {
                profiler: profiler.into(),
                device_key: "cuda-nvidia-h200-sm90-132sms".into(),
                device: "NVIDIA H200".into(),
                driver: "CUDA 13.0".into(),
            }),
            ..CountsEngine::default()
        };
        let (then, now) = (gpu("Version 2025.3"), gpu("Version 2025.4"));
        assert_eq!(now.key(), "counts-cuda-nvidia-h200-sm90-132sms");
        assert_eq!(now.default_metric(), crate::spec::CountsMetric::DramBytes);
        // Another profiler is flagged, as another Valgrind is.
        assert_eq!(
            now.differences(&then),
            vec![(
                "Nsight Compute",
                "Version 2025.3".to_string(),
                "Version 2025.4".to_string()
            )]
        );
        assert!(now.differences(&now).is_empty());
    }

    #[test]
    fn cache_models_parse_and_refuse_what_valgrind_would() {
        assert_eq!(
            CacheModel::parse("LL=1073741824,16,64").unwrap().ll.bytes,
            1 << 30
        );
        let m = CacheModel::parse("LL=16777216,16,64").unwrap();
        assert_eq!(m.ll.bytes, 16 << 20);
        assert_eq!(m.d1, CacheModel::default().d1);
        assert_eq!(
            CacheModel::parse(&CacheModel::default().describe()).unwrap(),
            CacheModel::default()
        );
        for bad in [
            "LL=1000,16,64",
            "LL=8388608,16,60",
            "L2=32768,8,64",
            "LL=8",
            "LL",
            // Valgrind refuses these (checked against 3.19): a number over 2^31-1, a cache of
            // one line, and a ways x line product that wraps 64 bits.
            "LL=2147483648,16,64",
            "D1=64,1,64",
            "LL=0,4611686018427387904,16",
        ] {
            assert!(CacheModel::parse(bad).is_err(), "{bad}");
        }
    }
}
