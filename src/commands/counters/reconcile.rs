//! Reconciliation: one variant's counters judged against its ledger (the read side only),
//! and the counters attached to a run's results.

use super::METRICS;
use crate::measure::ncu::{Layout, Tally};
use crate::results::{RunResult, SpecCounters, VariantCounters};
use std::path::Path;

/// Below this read ratio (measured / ledger) the ledger counts bytes the GPU did not read.
pub const READ_RATIO_MIN: f64 = 0.95;
/// Above this the GPU read bytes the ledger does not count.
pub const READ_RATIO_MAX: f64 = 1.5;

/// One variant's counters beside its ledger, on a GPU whose L2 is `l2_bytes`. A tiled
/// kernel's reads (a ledger that names its tiles) are judged as counts judge them: within
/// ±15% of its ledger where its tiles fit the L2 (`LedgerAgreement::of_reads`); any other's
/// between 0.95× and 1.5× of it.
pub fn reconcile(
    t: &Tally,
    ledger: &crate::ledger::VariantLedger,
    l2_bytes: u64,
) -> VariantCounters {
    let sum_of = |f: fn(&crate::ledger::Movement) -> u64| {
        ledger
            .movements
            .iter()
            .map(f)
            .fold(0u64, u64::saturating_add)
    };
    let ledger_read_bytes = sum_of(|m| m.bytes.saturating_mul(m.reads));
    let ledger_write_bytes = sum_of(|m| m.bytes.saturating_mul(m.writes));
    let dram_read_bytes = t.sum(METRICS[0]);
    let read_ratio = dram_read_bytes
        .filter(|_| ledger_read_bytes > 0)
        .map(|r| r / ledger_read_bytes as f64);
    let finding = if t.launches == 0 {
        Some("no kernel launches between this variant's marker and the next".to_string())
    } else {
        match read_ratio {
            None if dram_read_bytes.is_none() => {
                Some(format!("{} missing (absent or n/a) for a launch: not judged", METRICS[0]))
            }
            None => Some("the ledger counts no read bytes: not judged".to_string()),
            Some(r) if ledger.tile_bytes.is_some() => {
                tiled_finding(ledger, dram_read_bytes.unwrap_or(0.0), r, l2_bytes)
            }
            Some(r) if r < READ_RATIO_MIN => Some(format!(
                "DRAM read {r:.2}× the ledger's: below {READ_RATIO_MIN}×, the ledger counts bytes the GPU did not read from memory (served by a cache, or a wrong model)"
            )),
            Some(r) if r > READ_RATIO_MAX => Some(format!(
                "DRAM read {r:.2}× the ledger's: above {READ_RATIO_MAX}×, the GPU read bytes the ledger does not count"
            )),
            Some(_) => None,
        }
    };
    VariantCounters {
        launches: t.launches,
        kernels: t.kernels.clone(),
        dram_read_bytes,
        dram_write_bytes: t.sum(METRICS[1]),
        l2_bytes: t.sum(METRICS[2]),
        gpu_time_secs: t.sum(METRICS[3]),
        ledger_read_bytes,
        ledger_write_bytes,
        read_ratio,
        finding,
    }
}

/// A tiled kernel's finding, where its DRAM reads (`dram_read_bytes`, `read_ratio` × its
/// ledger's) do not hold to its ledger by the counts' rule on a last level of `l2_bytes`.
fn tiled_finding(
    ledger: &crate::ledger::VariantLedger,
    dram_read_bytes: f64,
    read_ratio: f64,
    l2_bytes: u64,
) -> Option<String> {
    use crate::measure::counts::{Counts, LedgerAgreement, TILED_TOLERANCE};
    let counts = Counts {
        dram_read_bytes: dram_read_bytes.round() as u64,
        ..Counts::default()
    };
    let model = crate::measure::counts::CacheModel::of_gpu(l2_bytes);
    match LedgerAgreement::of_reads(ledger, &counts, &model) {
        LedgerAgreement::TilesExceedCache { tile_bytes, ll_bytes, .. } => Some(format!(
            "DRAM read {read_ratio:.2}× the ledger's: the tiles ({} KiB) exceed the L2 ({} KiB), so the ledger predicts nothing",
            tile_bytes >> 10,
            ll_bytes >> 10
        )),
        LedgerAgreement::Tiled { agrees: false, .. } => Some(format!(
            "DRAM read {read_ratio:.2}× the tiled ledger's: outside ±{:.0}%, the kernel's re-reads are not what its tiles and the L2 predict",
            100.0 * TILED_TOLERANCE
        )),
        _ => None,
    }
}

/// Attaches the tallies of an export (`[case][before, after]`) to every spec of a run; returns
/// how many findings.
pub fn attach_tallies(
    run: &mut RunResult,
    layout: Layout,
    segs: &[[Tally; 2]],
    csv_path: &Path,
) -> usize {
    let source = csv_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| csv_path.display().to_string());
    let mut findings = 0;
    for (spec, [before, after]) in run.specs.iter_mut().zip(segs) {
        let c = SpecCounters {
            source: source.clone(),
            layout: layout.name().to_string(),
            before: reconcile(before, &spec.before.ledger, run.device.llc_bytes),
            after: reconcile(after, &spec.after.ledger, run.device.llc_bytes),
        };
        findings += [&c.before, &c.after]
            .iter()
            .filter(|v| v.finding.is_some())
            .count();
        spec.counters = Some(c);
    }
    findings
}
