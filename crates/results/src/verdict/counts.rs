//! Counts mode: each counted side's simulated DRAM bytes against its ledger.

use super::{Check, CheckName, Status};

/// Each counted side's simulated DRAM bytes against its ledger (`run --measure both`): FAIL
/// where a streaming side is off by more than 5% or a re-reading side reads less than its
/// ledger's lower bound, SKIP where no side could be compared (cache-resident sizes, workers).
pub fn counts_check(c: &crate::measure::counts::SpecCounts) -> Check {
    use crate::measure::counts::SideCounts;
    let mut status = Status::Skip;
    // A worker that moves more than the variant it implements: a finding on the worker, worth
    // a look, not a failure.
    let mut warn = false;
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
                let impossible = impossible_findings(name, side);
                if !impossible.is_empty() {
                    status = Status::Fail;
                    words.extend(impossible);
                }
                let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
                let (how, extra, warned) = agreement_words(agreement, mib);
                warn |= warned;
                match agreement.agrees() {
                    Some(false) => status = Status::Fail,
                    Some(true) if status != Status::Fail => status = Status::Pass,
                    _ => {}
                }
                words.push(format!(
                    "{name}: DRAM read {:.2} MiB (ledger {:.2}), write {:.2} MiB (ledger {:.2}): {how}{extra}",
                    mib(counts.dram_read_bytes),
                    mib(*ledger_read_bytes),
                    mib(counts.dram_write_bytes),
                    mib(*ledger_write_bytes)
                ));
            }
            SideCounts::NotAvailable { reason } => words.push(format!("{name}: {reason}")),
        }
    }
    if warn && status == Status::Pass {
        status = Status::Warn;
    }
    Check::new(CheckName::LedgerCounts, status, words.join("; "))
}

/// A side's agreement with its ledger in words: how it stands, what follows it, and whether it
/// is worth a warning (a worker above the variant it implements).
fn agreement_words(
    agreement: &crate::measure::counts::LedgerAgreement,
    mib: impl Fn(u64) -> f64,
) -> (&'static str, String, bool) {
    use crate::measure::counts::LedgerAgreement;
    let mut extra = String::new();
    let mut warned = false;
    let how = match agreement {
        LedgerAgreement::Streaming { agrees: true, .. } => "within 5% of the ledger",
        LedgerAgreement::Streaming { agrees: false, .. } => "more than 5% off the ledger",
        LedgerAgreement::Tiled {
            agrees,
            read_ratio,
            write_ratio,
        } => {
            extra = format!(
                            " (reads x{read_ratio:.2}, writes x{write_ratio:.2}; the tiles fit the last level, so the ledger predicts the re-reads)"
                        );
            if *agrees {
                "within 15% of the tiled ledger"
            } else {
                "more than 15% off the tiled ledger"
            }
        }
        LedgerAgreement::TilesExceedCache {
            tile_bytes,
            ll_bytes,
            read_ratio,
            ..
        } => {
            extra = format!(
                            ": the tiles ({} KiB) exceed the cache model's last level ({} KiB), so every tile re-reads from memory (reads x{read_ratio:.2} the ledger) and the IO saving the ledger predicts is lost",
                            tile_bytes >> 10,
                            ll_bytes >> 10
                        );
            "not as the ledger"
        }
        LedgerAgreement::Reuse { agrees: true, .. } => "the ledger is a lower bound",
        LedgerAgreement::Reuse { agrees: false, .. } => "below the ledger",
        LedgerAgreement::Implementation { agrees: false, .. } => {
            "below the ledger of the variant it implements: less than that variant must move"
        }
        LedgerAgreement::Implementation {
            read_ratio,
            write_ratio,
            ..
        } if read_ratio.max(*write_ratio) > 1.0 + crate::measure::counts::STREAMING_TOLERANCE => {
            warned = true;
            extra = format!(
                            ": it moves x{read_ratio:.2} the reads and x{write_ratio:.2} the writes of the variant it implements (temporaries or passes that variant does not make)"
                        );
            "above the ledger"
        }
        LedgerAgreement::Implementation { .. } => {
            "within 5% of the ledger of the variant it implements"
        }
        LedgerAgreement::NearCache {
            working_set_bytes,
            ll_bytes,
            read_ratio,
            write_ratio,
        } => {
            extra = format!(
                ": its tiles and the operands they re-read ({} KiB) come within a quarter of the cache model's {} KiB last level, where whether the re-reads hit is up to the cache's replacement (reads x{read_ratio:.2}, writes x{write_ratio:.2} the ledger; a last level of twice the working set, or a size whose working set exceeds it, compares the side)",
                working_set_bytes >> 10,
                ll_bytes >> 10
            );
            "not compared"
        }
        LedgerAgreement::CacheResident {
            smallest_tensor,
            smallest_tensor_bytes,
            ll_bytes,
        } => {
            extra = format!(
                ": {} of {:.2} MiB is under 4x the {:.2} MiB last level of the cache model and may stay in it (`measure.counts_sizes` with every tensor above 4x the last level compares the side)",
                tensor_words(smallest_tensor),
                mib(*smallest_tensor_bytes),
                mib(*ll_bytes)
            );
            "not compared"
        }
    };
    (how, extra, warned)
}

/// A tensor by its ledger name ("tensor `B`"), or "a tensor" where results recorded none.
pub fn tensor_words(name: &str) -> String {
    if name.is_empty() {
        "a tensor".into()
    } else {
        format!("tensor `{name}`")
    }
}

/// What makes a counted side's counts impossible for the work it claims, each in words: fewer
/// DRAM bytes than its inputs and output hold (where every tensor exceeds the last level), a
/// second call on the same inputs doing a fraction of the first's work, fewer instructions than
/// the ledger's FLOPs need. Exact, so no margin.
fn impossible_findings(name: &str, side: &crate::measure::counts::SideCounts) -> Vec<String> {
    let crate::measure::counts::SideCounts::Counted {
        counts,
        ledger_flops,
        repeat_instructions,
        compulsory_bytes,
        ..
    } = side
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // From a cold cache every input line must be read and every output line written back at
    // least once: fewer simulated bytes cannot have computed the output.
    if let Some((read, write)) = compulsory_bytes {
        for (what, moved, least, of) in [
            ("read", counts.dram_read_bytes, *read, "its inputs hold"),
            ("wrote", counts.dram_write_bytes, *write, "its output holds"),
        ] {
            if moved < least {
                out.push(format!(
                    "{name}: IMPOSSIBLE counts: it {what} {moved} bytes of DRAM, fewer than the {least} {of}, each moved once from a cold cache: the work was done outside the counted call"
                ));
            }
        }
    }
    if let Some(again) = repeat_instructions {
        if crate::measure::kept_result_counted(counts.instructions, *again) {
            out.push(format!(
                "{name}: result kept across calls: its counted call on inputs new to it executed {} instructions, a second call on the same inputs {} (×{:.1} fewer, at most ×{}): it computes when the inputs change and answers from what it kept otherwise",
                counts.instructions,
                again,
                counts.instructions as f64 / (*again).max(1) as f64,
                crate::measure::KEPT_RESULT_FACTOR
            ));
        }
    }
    // Exact, so no margin: fewer instructions than the ledger's FLOPs need cannot have
    // computed the output in the counted call.
    if !counts.can_have_done(*ledger_flops) {
        out.push(format!(
            "{name}: IMPOSSIBLE counts: {} instructions do at most {} FLOPs at AVX2 ({} a 256-bit FMA), the ledger needs {}: the work was done outside the counted call",
            counts.instructions,
            counts
                .instructions
                .saturating_mul(crate::measure::counts::MAX_FLOPS_PER_INSTRUCTION),
            crate::measure::counts::MAX_FLOPS_PER_INSTRUCTION,
            ledger_flops
        ));
    }
    out
}

/// `--measure both`: the counted saving against the timed one. A side that does less work
/// under the simulator than natively (a process can tell that it runs under Valgrind) must not
/// win on counts alone: where the counts say the after side is cheaper by more than
/// `limit` while the native pairs say, with 95% confidence, that it is slower, the check is
/// INCONCLUSIVE with both numbers; otherwise PASS. `None` where either saving is missing.
pub fn counts_vs_time_check(
    counts_saving: Option<f64>,
    time_saving: Option<&crate::measure::stats::Estimate>,
    metric: &str,
    limit: f64,
) -> Option<Check> {
    let (c, t) = (counts_saving?, time_saving?);
    let words = format!(
        "counted {:.1}% cheaper on {metric}, timed saving {:.1}% [{:.1}, {:.1}]",
        c * 100.0,
        t.point * 100.0,
        t.lo * 100.0,
        t.hi * 100.0
    );
    Some(if c > limit && t.hi < 0.0 {
        Check::new(
            CheckName::CountsVsTime,
            Status::Inconclusive,
            format!("{words}: the counts and the native time disagree — a side that does less under the simulator than natively would look like this"),
        )
    } else {
        Check::new(CheckName::CountsVsTime, Status::Pass, words)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::counts::*;

    #[test]
    fn fewer_instructions_than_the_flops_need_are_impossible_without_a_margin() {
        let side = |instructions: u64, ledger_flops: u64| SideCounts::Counted {
            counts: Counts {
                instructions,
                ..Counts::default()
            },
            ledger_read_bytes: 0,
            ledger_write_bytes: 0,
            ledger_flops,
            agreement: LedgerAgreement::CacheResident {
                smallest_tensor: "bias".into(),
                smallest_tensor_bytes: 1,
                ll_bytes: 1,
            },
            functions: Vec::new(),
            repeat_instructions: None,
            compulsory_bytes: None,
        };
        let spec = |after: SideCounts| SpecCounts {
            counted_workload: None,
            spec_cache_model: false,
            name: "x".into(),
            engine: CountsEngine::default(),
            before_variant: "naive".into(),
            after_variant: "tiled".into(),
            before: side(1_000_000, 1_000_000),
            after,
        };
        // 1000 instructions can do 16 000 FLOPs at most: exactly enough passes.
        assert_eq!(counts_check(&spec(side(1000, 16_000))).status, Status::Skip);
        let c = counts_check(&spec(side(1000, 16_001)));
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("IMPOSSIBLE counts"), "{}", c.detail);
    }

    #[test]
    fn a_repeat_that_executes_a_third_of_the_first_call_kept_its_result() {
        let side = |first: u64, again: Option<u64>| SideCounts::Counted {
            counts: Counts {
                instructions: first,
                ..Counts::default()
            },
            ledger_read_bytes: 0,
            ledger_write_bytes: 0,
            ledger_flops: 0,
            agreement: LedgerAgreement::CacheResident {
                smallest_tensor: "bias".into(),
                smallest_tensor_bytes: 1,
                ll_bytes: 1,
            },
            functions: Vec::new(),
            repeat_instructions: again,
            compulsory_bytes: None,
        };
        let spec = |after: SideCounts| SpecCounts {
            counted_workload: None,
            spec_cache_model: false,
            name: "x".into(),
            engine: CountsEngine::default(),
            before_variant: "naive".into(),
            after_variant: "tiled".into(),
            before: side(1_000_000, None),
            after,
        };
        // Exactly a third passes; one instruction fewer is a kept result.
        assert_eq!(
            counts_check(&spec(side(3_000_000, Some(1_000_000)))).status,
            Status::Skip
        );
        let c = counts_check(&spec(side(3_000_000, Some(999_999))));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.detail.contains("after: result kept across calls"),
            "{}",
            c.detail
        );
        assert!(c.detail.contains("3000000 instructions"), "{}", c.detail);
        // A built-in side is counted once: nothing to compare.
        assert_eq!(
            counts_check(&spec(side(3_000_000, None))).status,
            Status::Skip
        );
    }

    #[test]
    fn fewer_dram_bytes_than_the_inputs_and_output_hold_are_impossible() {
        let side = |read: u64, write: u64, compulsory: Option<(u64, u64)>| SideCounts::Counted {
            counts: Counts {
                instructions: 1_000_000,
                dram_read_bytes: read,
                dram_write_bytes: write,
                ..Counts::default()
            },
            ledger_read_bytes: 0,
            ledger_write_bytes: 0,
            ledger_flops: 0,
            agreement: LedgerAgreement::CacheResident {
                smallest_tensor: "bias".into(),
                smallest_tensor_bytes: 1,
                ll_bytes: 1,
            },
            functions: Vec::new(),
            repeat_instructions: None,
            compulsory_bytes: compulsory,
        };
        let spec = |after: SideCounts| SpecCounts {
            counted_workload: None,
            spec_cache_model: false,
            name: "x".into(),
            engine: CountsEngine::default(),
            before_variant: "unfused".into(),
            after_variant: "fused".into(),
            before: side(100, 100, None),
            after,
        };
        // Exactly the compulsory bytes are possible; one byte fewer is not, either way.
        let c = counts_check(&spec(side(64 << 20, 32 << 20, Some((64 << 20, 32 << 20)))));
        assert_ne!(c.status, Status::Fail, "{}", c.detail);
        let c = counts_check(&spec(side(
            (64 << 20) - 1,
            32 << 20,
            Some((64 << 20, 32 << 20)),
        )));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.detail
                .contains("after: IMPOSSIBLE counts: it read 67108863 bytes"),
            "{}",
            c.detail
        );
        let c = counts_check(&spec(side(64 << 20, 0, Some((64 << 20, 32 << 20)))));
        assert!(
            c.detail
                .contains("it wrote 0 bytes of DRAM, fewer than the 33554432 its output holds"),
            "{}",
            c.detail
        );
        // Not judged where a tensor fits in the last level.
        assert_ne!(counts_check(&spec(side(0, 0, None))).status, Status::Fail);
    }

    #[test]
    fn a_counted_win_that_native_time_contradicts_is_never_a_silent_pass() {
        use crate::measure::stats::Estimate;
        let slower = Estimate {
            point: -0.2,
            lo: -0.25,
            hi: -0.15,
        };
        let faster = Estimate {
            point: 0.4,
            lo: 0.35,
            hi: 0.45,
        };
        let check = |c, t| counts_vs_time_check(Some(c), Some(t), "cycles", 0.01).unwrap();
        assert_eq!(check(0.5, &slower).status, Status::Inconclusive);
        assert_eq!(check(0.5, &faster).status, Status::Pass);
        // Both say the after side loses: they agree.
        assert_eq!(check(-0.1, &slower).status, Status::Pass);
        assert!(counts_vs_time_check(None, Some(&faster), "cycles", 0.01).is_none());
    }
}
