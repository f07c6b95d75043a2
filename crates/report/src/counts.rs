//! `opledger counts`' table: each side's counts and its DRAM bytes against its ledger, in
//! words. The numbers come from `measure::counts`; nothing is computed here but their display.

use crate::measure::counts::{LedgerAgreement, SideCounts, SpecCounts};

use super::format::mib;

fn ratio(r: f64) -> String {
    format!("{r:.3}")
}

/// What a side's agreement with its ledger says, in a few words.
fn agreement(a: &LedgerAgreement) -> String {
    match a {
        LedgerAgreement::Streaming {
            read_ratio,
            write_ratio,
            agrees,
        } => format!(
            "{} (streaming: read x{}, write x{}; within ±5% expected)",
            if *agrees { "agrees" } else { "DISAGREES" },
            ratio(*read_ratio),
            ratio(*write_ratio)
        ),
        LedgerAgreement::Reuse {
            read_ratio,
            write_ratio,
            agrees,
        } => format!(
            "{} (re-reads by design: reuse read x{}, write x{}; the ledger must be a lower bound)",
            if *agrees { "lower bound holds" } else { "BELOW THE LEDGER" },
            ratio(*read_ratio),
            ratio(*write_ratio)
        ),
        LedgerAgreement::Tiled {
            read_ratio,
            write_ratio,
            agrees,
        } => format!(
            "{} (tiled, the tiles fit the last level: read x{}, write x{}; within ±15% expected)",
            if *agrees { "agrees" } else { "DISAGREES" },
            ratio(*read_ratio),
            ratio(*write_ratio)
        ),
        LedgerAgreement::TilesExceedCache {
            tile_bytes,
            ll_bytes,
            read_ratio,
            write_ratio,
        } => format!(
            "TILES EXCEED THE CACHE (tiles of {} KiB, a last level of {} KiB: read x{}, write x{}; the IO saving is lost)",
            tile_bytes >> 10,
            ll_bytes >> 10,
            ratio(*read_ratio),
            ratio(*write_ratio)
        ),
        LedgerAgreement::Implementation {
            read_ratio,
            write_ratio,
            agrees,
        } => format!(
            "{} (a worker: read x{}, write x{} the variant it implements; the ledger must be a lower bound)",
            if *agrees { "lower bound holds" } else { "BELOW THE LEDGER" },
            ratio(*read_ratio),
            ratio(*write_ratio)
        ),
        LedgerAgreement::NearCache {
            working_set_bytes,
            ll_bytes,
            read_ratio,
            write_ratio,
        } => format!(
            "not compared: tiles and re-read operands of {} KiB near the {} KiB last level (read x{}, write x{})",
            working_set_bytes >> 10,
            ll_bytes >> 10,
            ratio(*read_ratio),
            ratio(*write_ratio)
        ),
        LedgerAgreement::CacheResident {
            smallest_tensor,
            smallest_tensor_bytes,
            ll_bytes,
        } => format!(
            "not compared: {} of {} MiB is under 4x the {} MiB last level (it may stay cached)",
            crate::results::verdict::tensor_words(smallest_tensor),
            mib(*smallest_tensor_bytes),
            mib(*ll_bytes)
        ),
    }
}

/// What counted, in words: the simulator and its cache model, or the profiler and the GPU.
pub fn engine_words(e: &crate::measure::counts::CountsEngine) -> String {
    match &e.gpu {
        Some(g) => format!(
            "Nsight Compute ({}) on {} (driver {}, kernels by {}), the caches flushed before each launch, seed {}; DRAM writes read low (lines left dirty in the L2 are written back after a launch), so each side is judged against its ledger on its reads",
            g.profiler, g.device, g.driver, e.compiler, e.seed
        ),
        None => format!(
            "{} on the cache model {} ({}, {} thread, seed {})",
            e.valgrind,
            e.cache_model.describe(),
            e.simd,
            e.threads,
            e.seed
        ),
    }
}

/// The counts as a Markdown table, one row per side, under a line naming the engine.
pub fn table(specs: &[SpecCounts]) -> String {
    let mut out = String::new();
    let engine = specs.first().map(|s| &s.engine);
    if let Some(e) = engine {
        out.push_str(&format!("Counts by {}\n\n", engine_words(e)));
    }
    // A GPU's counters have no misses of a modelled cache.
    let on_gpu = engine.is_some_and(|e| e.gpu.is_some());
    let misses = |n: u64| {
        if on_gpu {
            "—".to_string()
        } else {
            n.to_string()
        }
    };
    out.push_str("| spec | side | instructions | est. cycles | D1 misses r/w | LL misses r/w | DRAM read MiB (ledger) | DRAM write MiB (ledger) | against the ledger |\n|---|---|--:|--:|--:|--:|--:|--:|---|\n");
    for s in specs {
        for (side, variant, c) in [
            ("before", &s.before_variant, &s.before),
            ("after", &s.after_variant, &s.after),
        ] {
            let mut name = s.name.replace('|', "\\|");
            if let Some(w) = &s.counted_workload {
                name.push_str(&format!(" (counted at {w})"));
            }
            if engine.is_some_and(|e| e.cache_model != s.engine.cache_model) {
                name.push_str(&format!(" (on LL={})", s.engine.cache_model.ll.arg()));
            }
            match c {
                SideCounts::Counted {
                    counts,
                    ledger_read_bytes,
                    ledger_write_bytes,
                    agreement: a,
                    ..
                } => out.push_str(&format!(
                    "| {name} | {side} ({variant}) | {} | {} | {}/{} | {}/{} | {} ({}) | {} ({}) | {} |\n",
                    counts.instructions,
                    counts.estimated_cycles,
                    misses(counts.d1_read_misses),
                    misses(counts.d1_write_misses),
                    misses(counts.ll_read_misses),
                    misses(counts.ll_write_misses),
                    mib(counts.dram_read_bytes),
                    mib(*ledger_read_bytes),
                    mib(counts.dram_write_bytes),
                    mib(*ledger_write_bytes),
                    agreement(a)
                )),
                SideCounts::NotAvailable { reason } => out.push_str(&format!(
                    "| {name} | {side} ({variant}) | — | — | — | — | — | — | {reason} |\n"
                )),
            }
        }
    }
    // Where the work went: each counted side's busiest functions.
    let mut lines = Vec::new();
    for s in specs {
        for (side, c) in [("before", &s.before), ("after", &s.after)] {
            if let SideCounts::Counted {
                counts, functions, ..
            } = c
            {
                let total = counts.instructions.max(1) as f64;
                let top: Vec<String> = functions
                    .iter()
                    .take(5)
                    .map(|f| {
                        format!(
                            "`{}` {:.1}%",
                            f.function,
                            100.0 * f.instructions as f64 / total
                        )
                    })
                    .collect();
                if !top.is_empty() {
                    lines.push(format!("- {} {side}: {}\n", s.name, top.join(", ")));
                }
            }
        }
    }
    if !lines.is_empty() {
        out.push_str(
            "\nWhere the instructions went (each side's functions by their own instructions):\n\n",
        );
        out.extend(lines);
    }
    out
}
