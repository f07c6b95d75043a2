//! Counts: what a kernel call executes and moves, as Valgrind's cache simulator (Callgrind with
//! `--cache-sim=yes --simulate-wb=yes`) counts it on a fixed cache model. Unlike a time, a count
//! is the same on every run and every x86-64 machine for the same binary, inputs and model, and
//! the lines that miss the model's last level are what the IO ledger predicts.
//!
//! This module is the arithmetic, a file a job: the cache model (`model`), Callgrind's output
//! files read in one place (`callgrind_file`), the counts derived from them (DRAM bytes, estimated
//! cycles: here), what counted (`engine`) and the comparison of a side's DRAM bytes with its
//! ledger (`agreement`). Counting a spec's sides is the measurement its two engines make:
//! [`valgrind`] (the CPU's kernels under the simulator, run by `callgrind`) and [`nsight`] (a
//! GPU's kernels under Nsight Compute). "Counters" (`opledger counters`) are another thing: an
//! Nsight Compute export read against the ledger after the fact.

mod agreement;
pub(crate) mod callgrind_file;
mod engine;

pub mod nsight;
pub mod valgrind;

pub use agreement::{
    agreement, compulsory_bytes, ledger_tiling, LedgerAgreement, REUSE_FLOOR, SMALL_TENSOR_SHARE,
    STREAMING_TOLERANCE, TILED_TOLERANCE,
};
pub use callgrind_file::{functions, Events, FunctionCounts};
pub use engine::{CountsEngine, GpuCounting};
pub use opledger_model::cache::{CacheLevel, CacheModel};

use serde::{Deserialize, Serialize};

/// Of the cases `cases` (an index and the spec at its counted sizes, `None` where that is
/// refused), those to count — the first of each distinct counted spec — and the others, each
/// with the index of the case it copies. Counts of one binary, workload and seed repeat
/// exactly, so sweep points that `measure.counts_sizes` maps to one size are counted once.
/// Only cases whose sides are opledger's own kernels are merged: a worker or a user's kernel
/// is its own process, counted where it runs.
pub fn distinct<S: std::ops::Deref<Target = crate::spec::Spec>>(
    cases: impl IntoIterator<Item = (usize, Option<S>)>,
) -> (Vec<usize>, Vec<(usize, usize)>) {
    // What a counted process's counts follow from, besides the binary and the seed.
    type Key = (
        crate::kinds::Workload,
        crate::kinds::Variant,
        crate::kinds::Variant,
        Option<String>,
    );
    let key = |s: &crate::spec::Spec| -> Option<Key> {
        let own = s.implementations.before.is_none() && s.implementations.after.is_none();
        own.then(|| {
            (
                s.workload.clone(),
                s.variants.before,
                s.variants.after,
                s.measure.counts_cache_model.clone(),
            )
        })
    };
    let mut seen: Vec<(Key, usize)> = Vec::new();
    let (mut jobs, mut copies) = (Vec::new(), Vec::new());
    for (i, s) in cases {
        match s.as_deref().and_then(key) {
            Some(k) => match seen.iter().find(|(other, _)| *other == k) {
                Some(&(_, first)) => copies.push((i, first)),
                None => {
                    seen.push((k, i));
                    jobs.push(i);
                }
            },
            None => jobs.push(i),
        }
    }
    (jobs, copies)
}

/// The files a counted or profiled process leaves each side's counted output in, in its work
/// folder (by `Side as usize`: before, after).
const OUTPUT_FILES: [&str; 2] = ["before.f32", "after.f32"];

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

/// A spec's counts and the outputs of its counted calls (`None` for a side not counted).
#[derive(Clone)]
pub struct Counted {
    pub counts: SpecCounts,
    pub before_output: Option<Vec<f32>>,
    pub after_output: Option<Vec<f32>>,
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
    /// The engine's cache model is the spec's own (`measure.counts_cache_model`): re-running
    /// the spec counts on it without naming it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spec_cache_model: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::VariantLedger;

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
        // A tiled kernel whose tiles fit the last level: held within ±15% both ways, whatever
        // its tensors' sizes — moving as much as an untiled side would does not agree.
        let tiled = VariantLedger::new(
            Variant::Fused,
            vec![mv(1 << 20, 4, 0), mv(1 << 20, 0, 1)],
            0,
            1,
        )
        .with_tile_bytes(1 << 20);
        let of = |r: u64, w: u64| LedgerAgreement::of(&tiled, &counts(r, w), &m);
        assert!(matches!(
            of(4 << 20, 1 << 20),
            LedgerAgreement::Tiled { agrees: true, .. }
        ));
        assert_eq!(of((4 << 20) * 114 / 100, 1 << 20).agrees(), Some(true));
        assert_eq!(of((4 << 20) * 116 / 100, 1 << 20).agrees(), Some(false));
        assert_eq!(of((4 << 20) * 84 / 100, 1 << 20).agrees(), Some(false));
        assert_eq!(of(4 << 20, 3 << 20).agrees(), Some(false));
        // Tiles larger than the last level: the ledger predicts nothing, never agrees.
        let huge = tiled.clone().with_tile_bytes(m.ll.bytes + 1);
        let a = LedgerAgreement::of(&huge, &counts(4 << 20, 1 << 20), &m);
        assert!(
            matches!(a, LedgerAgreement::TilesExceedCache { .. }),
            "{a:?}"
        );
        assert_eq!(a.agrees(), Some(false));
    }

    /// A side not compared because small tensors carry its traffic names the smallest of them.
    #[test]
    fn a_cache_resident_side_names_its_smallest_tensor() {
        use crate::ledger::Movement;
        use crate::values::Variant;
        let mv = |tensor: &str, bytes: u64, reads: u64, writes: u64| Movement {
            tensor: tensor.into(),
            bytes,
            reads,
            writes,
        };
        let named = VariantLedger::new(
            Variant::Fused,
            vec![mv("x", 8 << 20, 1, 0), mv("y", 6 << 20, 0, 1)],
            0,
            1,
        );
        match LedgerAgreement::of(&named, &Counts::default(), &CacheModel::default()) {
            LedgerAgreement::CacheResident {
                smallest_tensor,
                smallest_tensor_bytes,
                ..
            } => assert_eq!(
                (smallest_tensor.as_str(), smallest_tensor_bytes),
                ("y", 6 << 20)
            ),
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn a_gpus_engine_is_keyed_by_its_device_and_gates_dram_bytes_by_default() {
        let cpu = CountsEngine {
            valgrind: "valgrind-3.19.0".into(),
            cache_model: CacheModel::default(),
            simd: "avx2-nofma".into(),
            arch: "x86_64".into(),
            ..CountsEngine::default()
        };
        assert_eq!(
            cpu.key(),
            "counts-x86-64-avx2-nofma-32k8w64-32k8w64-8m16w64"
        );
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
