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

/// One variant's counters beside its ledger.
pub fn reconcile(t: &Tally, ledger: &crate::ledger::VariantLedger) -> VariantCounters {
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
            before: reconcile(before, &spec.before.ledger),
            after: reconcile(after, &spec.after.ledger),
        };
        findings += [&c.before, &c.after]
            .iter()
            .filter(|v| v.finding.is_some())
            .count();
        spec.counters = Some(c);
    }
    findings
}
