//! The rules a verdict is derived by, each stated once: how much a status weighs, a spec's
//! status from its checks, how the gates of its measurements (time, counts) combine into its
//! verdict, and where a recorded case stands as a reference for later runs. Every command that
//! shows or stores a verdict reaches it through these functions; they sit below the results
//! (which call them) and the store (which records what they decide as codes).

use crate::gate::stats::RegressionState;
use crate::verdict::{Check, CheckName, Status};
use serde::{Deserialize, Serialize};

/// What a spec's side is measured by, each with a gate of its own: time (interleaved pairs)
/// and counts (Valgrind's cache simulator on the CPU, Nsight Compute on a GPU).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Measurement {
    Time,
    Counts,
}

impl Measurement {
    /// The check a measurement's gate decides.
    pub fn check(self) -> CheckName {
        match self {
            Measurement::Time => CheckName::Regression,
            Measurement::Counts => CheckName::CountsRegression,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Measurement::Time => "time",
            Measurement::Counts => "counts",
        }
    }
}

/// What one measurement's gate decided, as the combination rule reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateCall {
    /// It decided: within the limit (or better), or accepted.
    Pass,
    /// It decided: a regression.
    Fail,
    /// It judged and could not decide.
    Undecided,
    /// It did not judge (no reference, not measured, not comparable).
    NotJudged,
}

impl GateCall {
    /// The time gate's state as a call.
    pub fn of_time(state: Option<RegressionState>) -> GateCall {
        match state {
            Some(RegressionState::Pass | RegressionState::Improved) => GateCall::Pass,
            Some(RegressionState::Fail) => GateCall::Fail,
            Some(RegressionState::Inconclusive) => GateCall::Undecided,
            None => GateCall::NotJudged,
        }
    }

    /// A gate's check status as a call (the counts gate's, whose states map one to one).
    pub fn of_status(status: Status) -> GateCall {
        match status {
            Status::Pass => GateCall::Pass,
            Status::Fail => GateCall::Fail,
            Status::Inconclusive => GateCall::Undecided,
            Status::Skip | Status::Warn => GateCall::NotJudged,
        }
    }
}

/// How measurements combine, the one rule: any decisive FAIL fails the spec; a gate that could
/// not decide while another measurement's gate decided is set aside (reported as not judged,
/// with why) — counts repeat exactly, so a decisive counts PASS is not held open by a time gate
/// that the machine's state kept from deciding; INCONCLUSIVE only when no measurement decided.
/// Returns the measurements set aside.
pub fn set_aside(calls: &[(Measurement, GateCall)]) -> Vec<Measurement> {
    let decided = |m: Measurement| {
        calls
            .iter()
            .any(|(o, c)| *o != m && matches!(c, GateCall::Pass | GateCall::Fail))
    };
    calls
        .iter()
        .filter(|(m, c)| *c == GateCall::Undecided && decided(*m))
        .map(|(m, _)| *m)
        .collect()
}

/// Whether the time gate's first pass (`state`) is measured again, knowing how the spec's
/// other measurements' gates called it (`others`). Where none decided, as
/// [`crate::gate::stats::needs_second_pass`] says. Where one passed the spec, an INCONCLUSIVE
/// time gate is set aside ([`set_aside`]) whatever a second pass finds short of a FAIL, so it
/// is measured again only where a FAIL is within reach: its first pass's CI reaches past the
/// FAIL threshold (`fail_in_reach`; pooling narrows the CI around the same median, and a FAIL
/// needs the whole of it past the threshold). Where one failed the spec, nothing a second look
/// finds changes the verdict. A FAIL of the time gate's own is always measured again: never a
/// FAIL on one pass.
pub fn second_pass_needed(
    state: RegressionState,
    can_pass: bool,
    fail_in_reach: bool,
    others: &[GateCall],
) -> bool {
    match state {
        RegressionState::Inconclusive if others.contains(&GateCall::Fail) => false,
        RegressionState::Inconclusive if others.contains(&GateCall::Pass) => {
            can_pass && fail_in_reach
        }
        _ => crate::gate::stats::needs_second_pass(state, can_pass),
    }
}

/// The measurements a spec's checks set aside: each gate's call read from its check.
pub fn set_aside_of(checks: &[Check]) -> Vec<Measurement> {
    let calls: Vec<(Measurement, GateCall)> = [Measurement::Time, Measurement::Counts]
        .into_iter()
        .filter_map(|m| {
            let c = checks.iter().find(|c| c.name == m.check())?;
            Some((m, GateCall::of_status(c.status)))
        })
        .collect();
    set_aside(&calls)
}

/// How much a status weighs in a verdict: FAIL decides, INCONCLUSIVE holds it open, the others
/// let it pass. The one severity order (the audit, `compare` and the verdicts rank by it).
pub fn severity(s: Status) -> u8 {
    match s {
        Status::Fail => 2,
        Status::Inconclusive => 1,
        Status::Pass | Status::Skip | Status::Warn => 0,
    }
}

/// A spec's status from its checks: a failed check fails it.
pub fn spec_status(checks: &[Check]) -> Status {
    if checks.iter().any(|c| c.status == Status::Fail) {
        Status::Fail
    } else {
        Status::Pass
    }
}

/// A spec's verdict from its status, its checks and the measurements set aside: FAIL when a
/// check failed; INCONCLUSIVE when a check (a claim, or a gate not set aside) could not decide;
/// else PASS. Returns the weight of [`severity`]: 2 FAIL, 1 INCONCLUSIVE, 0 PASS.
pub fn verdict_weight(status: Status, checks: &[Check], set_aside: &[Measurement]) -> u8 {
    if status == Status::Fail {
        return 2;
    }
    let open = checks.iter().any(|c| {
        c.status == Status::Inconclusive && !set_aside.iter().any(|m| m.check() == c.name)
    });
    u8::from(open)
}

/// The weight of a verdict from each measurement's gate call (a gate set aside by
/// [`set_aside`] does not hold it open) and the weight of everything else (the other checks):
/// the heavier. `compare`'s cases are decided by it, as a run's specs are by [`verdict_weight`].
pub fn calls_weight(calls: &[(Measurement, GateCall)], others: u8) -> u8 {
    let aside = set_aside(calls);
    calls
        .iter()
        .map(|(m, c)| match c {
            GateCall::Fail => 2,
            GateCall::Undecided if !aside.contains(m) => 1,
            _ => 0,
        })
        .chain([others])
        .max()
        .unwrap_or(0)
}

/// Where a recorded case stands as a reference for later runs (stored as a code): its
/// measurements describe the code's level only when nothing but a regression gate failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Nothing failed: a branch's history may rest on it.
    Kept = 0,
    /// Only a regression gate (time or counts) failed: the measurement is the code's level (a
    /// merge-base that regressed is still the base), but history does not rest on it.
    Regressed = 1,
    /// Another check failed (a wrong output, a broken run, a claim): not a reference.
    Failed = 2,
}

impl Standing {
    pub fn code(self) -> i64 {
        self as i64
    }
}

/// Where a case with these checks stands.
pub fn standing(checks: &[Check]) -> Standing {
    let failed: Vec<CheckName> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.name)
        .collect();
    if failed.is_empty() {
        Standing::Kept
    } else if failed
        .iter()
        .all(|n| matches!(n, CheckName::Regression | CheckName::CountsRegression))
    {
        Standing::Regressed
    } else {
        Standing::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use GateCall::*;
    use Measurement::*;

    #[test]
    fn a_gate_that_could_not_decide_is_set_aside_only_where_another_decided() {
        assert_eq!(set_aside(&[(Time, Undecided), (Counts, Pass)]), vec![Time]);
        assert_eq!(set_aside(&[(Time, Undecided), (Counts, Fail)]), vec![Time]);
        assert_eq!(
            set_aside(&[(Time, Pass), (Counts, Undecided)]),
            vec![Counts]
        );
        assert!(set_aside(&[(Time, Undecided), (Counts, NotJudged)]).is_empty());
        assert!(set_aside(&[(Time, Undecided), (Counts, Undecided)]).is_empty());
        assert!(set_aside(&[(Time, Undecided)]).is_empty());
        assert!(set_aside(&[(Time, Fail), (Counts, Pass)]).is_empty());
    }

    /// A time gate that could not decide is measured again only where a second pass could change
    /// the spec's verdict: alone, as the drift allows; beside a counts PASS, only where its CI
    /// reaches past the FAIL threshold; beside a counts FAIL, never. Its own FAIL always is.
    #[test]
    fn a_second_pass_is_measured_only_where_it_could_change_the_verdict() {
        use RegressionState::{Fail as TimeFail, Improved, Inconclusive, Pass as TimePass};
        for others in [&[][..], &[NotJudged], &[Undecided]] {
            assert!(second_pass_needed(Inconclusive, true, false, others));
            assert!(second_pass_needed(Inconclusive, true, true, others));
            assert!(!second_pass_needed(Inconclusive, false, true, others));
        }
        assert!(!second_pass_needed(Inconclusive, true, false, &[Pass]));
        assert!(second_pass_needed(Inconclusive, true, true, &[Pass]));
        assert!(
            !second_pass_needed(Inconclusive, false, true, &[Pass]),
            "as alone: the drift rules a PASS out, and the first pass stands"
        );
        assert!(!second_pass_needed(Inconclusive, true, true, &[Fail]));
        for others in [&[][..], &[Pass], &[Fail]] {
            assert!(second_pass_needed(TimeFail, true, true, others));
            assert!(second_pass_needed(TimeFail, false, false, others));
            assert!(!second_pass_needed(TimePass, true, true, others));
            assert!(!second_pass_needed(Improved, true, true, others));
        }
    }

    #[test]
    fn the_verdict_holds_open_only_for_what_was_not_set_aside() {
        let checks = |time: Status, counts: Status| {
            vec![
                Check::new(CheckName::Regression, time, ""),
                Check::new(CheckName::CountsRegression, counts, ""),
            ]
        };
        let c = checks(Status::Inconclusive, Status::Pass);
        assert_eq!(verdict_weight(Status::Pass, &c, &[]), 1);
        assert_eq!(verdict_weight(Status::Pass, &c, &[Time]), 0);
        // Setting counts aside does not hide the time gate's INCONCLUSIVE.
        assert_eq!(verdict_weight(Status::Pass, &c, &[Counts]), 1);
        let c = checks(Status::Inconclusive, Status::Fail);
        assert_eq!(verdict_weight(spec_status(&c), &c, &[Time]), 2);
        let mut c = checks(Status::Inconclusive, Status::Pass);
        c.push(Check::new(CheckName::TimeSaving, Status::Inconclusive, ""));
        assert_eq!(verdict_weight(Status::Pass, &c, &[Time]), 1, "a claim");
    }

    #[test]
    fn a_case_stands_as_a_reference_by_what_failed() {
        let fail = |n: CheckName| Check::new(n, Status::Fail, "");
        let pass = |n: CheckName| Check::new(n, Status::Pass, "");
        assert_eq!(standing(&[pass(CheckName::Correctness)]), Standing::Kept);
        assert_eq!(
            standing(&[
                pass(CheckName::Correctness),
                fail(CheckName::CountsRegression)
            ]),
            Standing::Regressed
        );
        assert_eq!(
            standing(&[
                fail(CheckName::Regression),
                fail(CheckName::CountsRegression)
            ]),
            Standing::Regressed
        );
        assert_eq!(
            standing(&[fail(CheckName::Regression), fail(CheckName::Correctness)]),
            Standing::Failed
        );
    }
}
