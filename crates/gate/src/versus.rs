//! B against A: each case of an archived run B judged against a reference made from an
//! archived run A, with the gate's own decision ([`super::Gate::judge`]), so that `compare`
//! reaches the verdict `run` would have reached.
//!
//! The drift between runs is what lets the gate tell a regression from noise, and one run (A)
//! knows none. So the reference is what `run` would have gated B against had A been accepted:
//! the baseline store's history of this device and spec with A joined to it (or as it is, when
//! A is one of its accepted runs). With no history in the store, the decision rests on A alone.

use crate::error::Result;
use crate::results::{RunResult, RunStatus, SpecResult};
use std::path::Path;

pub use super::reference::Drift;

/// One case of B against A.
#[derive(Debug, Clone)]
pub struct CaseComparison {
    pub name: String,
    pub base_before_secs: Option<f64>,
    pub base_after_secs: Option<f64>,
    pub head_after_secs: Option<f64>,
    pub outcome: Option<crate::results::BaselineOutcome>,
    /// B's spec's limit (`gate.max_regression`) the outcome was decided at.
    pub limit: f64,
    pub drift: Drift,
    /// B's own verdict for the case (a check that failed in B, other than its regression
    /// gates, fails the case).
    pub head_verdict: RunStatus,
    /// Why it was not compared, when it was not.
    pub not_compared: Option<NotCompared>,
    /// B's counts against A's, where both counted the case under one engine key.
    pub counts: Option<crate::results::CountsGateOutcome>,
}

/// Why a case of B was not compared with A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCompared {
    /// A has no case of that name.
    OnlyInB,
    /// A has the case but no measurement of it (it failed before measuring).
    NotMeasuredInA,
}

impl CaseComparison {
    /// Each gate's call on this case: B's time against A's, B's counts against A's.
    fn calls(&self) -> [(super::rule::Measurement, super::rule::GateCall); 2] {
        use super::rule::{GateCall, Measurement};
        [
            (
                Measurement::Time,
                GateCall::of_time(self.outcome.as_ref().and_then(|o| o.state)),
            ),
            (
                Measurement::Counts,
                self.counts.as_ref().map_or(GateCall::NotJudged, |o| {
                    GateCall::of_status(super::counts::check(o, false).status)
                }),
            ),
        ]
    }

    /// The measurements of this case whose gate could not decide while the other's did.
    pub fn set_aside(&self) -> Vec<super::rule::Measurement> {
        super::rule::set_aside(&self.calls())
    }

    /// The case's decision: FAIL (a regression, or a check failed in B), INCONCLUSIVE, PASS —
    /// time's and counts' gates combined by the one rule `run` follows (`rule::set_aside`).
    pub fn verdict(&self) -> RunStatus {
        let head = super::rule::severity(match self.head_verdict {
            RunStatus::Fail => crate::verdict::Status::Fail,
            RunStatus::Inconclusive => crate::verdict::Status::Inconclusive,
            RunStatus::Pass => crate::verdict::Status::Pass,
        });
        match super::rule::calls_weight(&self.calls(), head) {
            2 => RunStatus::Fail,
            1 => RunStatus::Inconclusive,
            _ => RunStatus::Pass,
        }
    }
}

/// Every case of B against A (`a` is A's folder, `store` the baselines store whose history gives
/// the drift between runs).
pub fn versus(
    ra: &RunResult,
    rb: &RunResult,
    a: &Path,
    store: &Path,
    recorded: &std::collections::BTreeMap<String, Vec<crate::baseline::HistoryEntry>>,
) -> Result<Vec<CaseComparison>> {
    let mut cases = Vec::new();
    for sb in &rb.specs {
        let mut c = CaseComparison {
            name: sb.name.clone(),
            base_before_secs: None,
            base_after_secs: None,
            head_after_secs: sb.after.summary.map(|s| s.median_secs),
            outcome: None,
            limit: sb.gate.max_regression.0,
            drift: Drift::Unknown,
            // B's own checks, but for its regression gates (judged against B's reference;
            // here the gates judge B against A).
            head_verdict: if super::rule::standing(&sb.checks) == super::rule::Standing::Failed {
                RunStatus::Fail
            } else {
                RunStatus::Pass
            },
            not_compared: None,
            counts: None,
        };
        let Some(sa) = ra.specs.iter().find(|s| s.name == sb.name) else {
            c.not_compared = Some(NotCompared::OnlyInB);
            cases.push(c);
            continue;
        };
        c.counts = counts_versus(sa, ra, sb, a);
        c.base_before_secs = sa.before.summary.map(|s| s.median_secs);
        c.base_after_secs = sa.after.summary.map(|s| s.median_secs);
        let history = recorded.get(&sa.name).map_or(&[][..], Vec::as_slice);
        let Some((base, drift)) =
            super::reference::compare_reference(sa, ra, &ra.device.key, store, history)?
        else {
            c.not_compared = Some(NotCompared::NotMeasuredInA);
            cases.push(c);
            continue;
        };
        let gate = super::Gate {
            reference: Some(&base),
            path: a,
            device: &rb.device,
            ceilings: &rb.ceilings,
            resamples: rb.measure.bootstrap_resamples,
            seed: rb.measure.seed,
            require_baseline: false,
        };
        c.outcome = Some(gate.judge(sb).outcome);
        c.drift = drift;
        cases.push(c);
    }
    Ok(cases)
}

/// B's counts of a case against A's as its counts baseline, where both counted it under one
/// engine key (instruction set, SIMD level, cache model), with B's gate settings.
fn counts_versus(
    sa: &SpecResult,
    ra: &RunResult,
    sb: &SpecResult,
    a: &Path,
) -> Option<crate::results::CountsGateOutcome> {
    let (ca, cb) = (sa.counts.as_ref()?, sb.counts.as_ref()?);
    if ca.engine.key() != cb.engine.key() {
        return None;
    }
    let base = super::counts::baseline_of(ca, &sa.workload, &sa.name, &ra.started_utc, &ra.git_sha);
    Some(super::counts::judge_parts(
        &sb.workload,
        super::counts::metric_of(&sb.gate, &cb.engine),
        sb.gate.counts_max_regression.0,
        cb,
        base.as_ref(),
        a,
    ))
}

/// The verdict of a comparison: FAIL when a case fails, else INCONCLUSIVE when one is, else PASS.
pub fn verdict(cases: &[CaseComparison]) -> RunStatus {
    if cases.iter().any(|c| c.verdict() == RunStatus::Fail) {
        RunStatus::Fail
    } else if cases.iter().any(|c| c.verdict() == RunStatus::Inconclusive) {
        RunStatus::Inconclusive
    } else {
        RunStatus::Pass
    }
}
