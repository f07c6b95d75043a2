//! Counts mode: each counted side's simulated DRAM bytes against its ledger.

use super::{Check, CheckName, Status};

/// Each counted side's simulated DRAM bytes against its ledger (`run --measure both`): FAIL
/// where a streaming side is off by more than 5% or a re-reading side reads less than its
/// ledger's lower bound, SKIP where no side could be compared (cache-resident sizes, workers).
pub fn counts_check(c: &crate::measure::counts::SpecCounts) -> Check {
    use crate::measure::counts::{LedgerAgreement, SideCounts};
    let mut status = Status::Skip;
    let mut words = Vec::new();
    for (name, side) in [("before", &c.before), ("after", &c.after)] {
        match side {
            SideCounts::Counted {
                counts,
                ledger_read_bytes,
                ledger_write_bytes,
                agreement,
                ..
            } => {
                let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
                let how = match agreement {
                    LedgerAgreement::Streaming { agrees: true, .. } => "within 5% of the ledger",
                    LedgerAgreement::Streaming { agrees: false, .. } => {
                        "more than 5% off the ledger"
                    }
                    LedgerAgreement::Reuse { agrees: true, .. } => "the ledger is a lower bound",
                    LedgerAgreement::Reuse { agrees: false, .. } => "below the ledger",
                    LedgerAgreement::CacheResident { .. } => {
                        "not compared: a tensor may stay in the last level"
                    }
                };
                match agreement.agrees() {
                    Some(false) => status = Status::Fail,
                    Some(true) if status != Status::Fail => status = Status::Pass,
                    _ => {}
                }
                words.push(format!(
                    "{name}: DRAM read {:.2} MiB (ledger {:.2}), write {:.2} MiB (ledger {:.2}): {how}",
                    mib(counts.dram_read_bytes),
                    mib(*ledger_read_bytes),
                    mib(counts.dram_write_bytes),
                    mib(*ledger_write_bytes)
                ));
            }
            SideCounts::NotAvailable { reason } => words.push(format!("{name}: {reason}")),
        }
    }
    Check::new(CheckName::LedgerCounts, status, words.join("; "))
}
