//! The claims: the IO saving against the ledger, the measured time saving decided as the gate
//! decides (inside, outside, across an end; above what the ledger allows), a launch chain's
//! per-launch overhead.

use super::{Check, CheckName, Status};
use crate::measure::stats::Estimate;
use crate::spec::SavingRange;

pub fn io_saving_check(io_saving: f64, claim: Option<&SavingRange>) -> Check {
    match claim {
        None => Check::new(
            CheckName::IoSaving,
            Status::Skip,
            format!("{:.1}% (no claim)", io_saving * 100.0),
        ),
        Some(r) => {
            let ok = r.contains(io_saving);
            Check::new(
                CheckName::IoSaving,
                if ok { Status::Pass } else { Status::Fail },
                format!(
                    "ledger saving {} vs claim {}",
                    pct_fine(io_saving),
                    describe_fine(r)
                ),
            )
        }
    }
}

/// Slack above the ledger's predicted time saving before a measured saving is called
/// suspicious. CPU caches add write-allocate reads the ledger does not count, which lets a real
/// saving exceed the prediction by a few points.
pub const SUSPICIOUS_SLACK: f64 = 0.05;

/// How a CI stands against a claimed range: wholly inside, wholly outside, or across a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    Inside,
    Outside,
    Straddles,
}

/// Where the interval `[lo, hi]` lies against `range`: the one rule of every claim on a
/// measured saving.
pub fn claim_state(lo: f64, hi: f64, range: &SavingRange) -> ClaimState {
    if range.contains(lo) && range.contains(hi) {
        ClaimState::Inside
    } else if range.max().is_some_and(|m| lo > m) || range.min().is_some_and(|m| hi < m) {
        ClaimState::Outside
    } else {
        ClaimState::Straddles
    }
}

/// Whether a measured saving says the after side is slower than the before side: its whole CI
/// below zero.
pub fn is_slower(saving: &Estimate) -> bool {
    saving.hi < 0.0
}

/// The time-saving check, decided as the gate decides: PASS when the whole CI lies in the claim
/// (whose relative ends, `min_of_predicted`, are resolved against `predicted`, the saving the
/// ledger predicts on the ceilings measured in this run), FAIL when it lies wholly outside,
/// INCONCLUSIVE when it straddles a bound. A saving beyond what the ledger allows
/// (`ledger_bound`) is flagged, never passed silently; it is `None` where the saving lies
/// outside the roofline by design (launch overhead). An after side slower than the before side
/// (the whole CI below zero) is flagged whether or not a claim was made. Figures are printed with
/// enough digits to see why a check failed.
pub fn time_saving_check(
    saving: &Estimate,
    claim: Option<&SavingRange>,
    predicted: f64,
    ledger_bound: Option<f64>,
) -> Check {
    let desc = format!(
        "measured {} (95% CI {} .. {})",
        pct_fine(saving.point),
        pct_fine(saving.lo),
        pct_fine(saving.hi)
    );
    let suspicious = ledger_bound.is_some_and(|b| saving.lo > b + SUSPICIOUS_SLACK);
    let suspicion = format!(
        "; SUSPICIOUS: above the {:.1}% the ledger allows on these ceilings (+{:.0} points slack) — check that both variants do the same work and that the after variant is not faster than its roofline",
        ledger_bound.unwrap_or(0.0) * 100.0,
        SUSPICIOUS_SLACK * 100.0
    );
    let slower = is_slower(saving);
    let slowness = format!(
        "; SLOWER: the after side is slower than the before side (its whole CI is below zero: it takes {:.1}% to {:.1}% longer)",
        -saving.hi * 100.0,
        -saving.lo * 100.0
    );
    match claim {
        None => {
            let mut d = format!("{desc} (no claim)");
            let status = if slower {
                d.push_str(&slowness);
                Status::Warn
            } else if suspicious {
                d.push_str(&suspicion);
                Status::Warn
            } else {
                Status::Skip
            };
            Check::new(CheckName::TimeSaving, status, d)
        }
        Some(claimed) => {
            let r = claimed.resolve(predicted);
            let mut d = if claimed.is_relative() {
                format!(
                    "{desc} vs claim {} = {} of the predicted {}",
                    claimed.describe_claim(),
                    describe_fine(&r),
                    pct_fine(predicted)
                )
            } else {
                format!("{desc} vs claim {}", describe_fine(&r))
            };
            let status = match claim_state(saving.lo, saving.hi, &r) {
                ClaimState::Outside => Status::Fail,
                ClaimState::Straddles => {
                    d.push_str("; INCONCLUSIVE: the CI reaches across the claim's bound (measure more pairs, or on a quieter machine)");
                    Status::Inconclusive
                }
                ClaimState::Inside if suspicious => {
                    d.push_str(&suspicion);
                    Status::Warn
                }
                ClaimState::Inside => Status::Pass,
            };
            if slower {
                d.push_str(&slowness);
            }
            Check::new(CheckName::TimeSaving, status, d)
        }
    }
}

/// A fraction as a percentage with two decimals: a CI end of 89.98% must not print as the
/// 90% claim it failed.
pub(super) fn pct_fine(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

pub(super) fn describe_fine(r: &SavingRange) -> String {
    match (r.min(), r.max()) {
        (Some(a), Some(b)) => format!("[{}, {}]", pct_fine(a), pct_fine(b)),
        (Some(a), None) => format!(">= {}", pct_fine(a)),
        (None, Some(b)) => format!("<= {}", pct_fine(b)),
        (None, None) => "any".into(),
    }
}

/// The launch-overhead check of a launch chain: replaying the chain must remove a positive,
/// measurable overhead per launch — the whole CI of (T_before − T_after)/(N − 1) above zero.
pub fn launch_overhead_check(
    per_launch: &Estimate,
    n_ops: u64,
    variants: &crate::spec::Variants,
) -> Check {
    let us = |s: f64| s * 1e6;
    let detail = format!(
        "per-launch overhead removed by {} vs {}: {:.2} µs (95% CI {:.2} .. {:.2} µs) = (T_{} − T_{})/({} − 1)",
        variants.after.name(),
        variants.before.name(),
        us(per_launch.point),
        us(per_launch.lo),
        us(per_launch.hi),
        variants.before.name(),
        variants.after.name(),
        n_ops
    );
    let status = if per_launch.lo > 0.0 {
        Status::Pass
    } else {
        Status::Fail
    };
    Check::new(CheckName::LaunchOverhead, status, detail)
}
