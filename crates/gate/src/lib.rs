//! The regression gate, the one module every measurement enters: time through [`Gate`] (its
//! judgement against the reference, a second pass where it asks for one), counts through
//! [`decide_counts`], each against the reference chosen for the spec once, by one rule, in
//! [`reference`]; then [`combine`] derives the spec's status and the measurements set aside by
//! the one rule of how measurements combine ([`rule`]). `run` and `calibrate` (through the
//! pipeline) and `compare` (through [`versus`]) reach their verdicts here. It holds the
//! judgement of a result against its baseline ([`judge`]: raw or relative comparison, pooled
//! history, the ceiling drift guard, two passes judged apart and together), the second-pass
//! policy, the mapping of a gate state to the `regression` check's status, and what accepting a
//! result into the baseline makes of its history ([`accept`]). The store of baselines is
//! `baseline/`; the gate's words are written by the outputs.

pub mod accept;
pub mod counts;
pub mod history;
pub mod judge;
pub mod reference;
pub mod versus;

// The lower crates' modules, reached as `crate::…` in this crate's files.
use opledger_measure as measure;
use opledger_model::device;
use opledger_model::error;
use opledger_records::baseline;
use opledger_records::evidence;
use opledger_records::provenance;
use opledger_results as results;

#[cfg(test)]
use opledger_model::rng;
use opledger_model::spec;
use opledger_records::store;
use opledger_results::verdict;
// The gate's vocabulary lives below the results that hold it.
pub use opledger_results::gate::{outcome, rule, stats};

use crate::device::{Ceilings, DeviceInfo};
use crate::measure::MeasureConfig;
use crate::results::{BaselineOutcome, GateFinding, SpecResult};
use crate::verdict::CheckName;
use crate::verdict::{Check, Status};
use stats::RegressionState;
use std::path::Path;

pub use judge::{compared_values, implied_threshold, CEILING_DRIFT_MIN};
pub use stats::spread_of;

/// The gate of one spec: its reference (if any) and the run it judges.
#[derive(Clone, Copy)]
pub struct Gate<'a> {
    pub reference: Option<&'a reference::Reference>,
    /// Where the reference is (or where an accepted baseline would be written).
    pub path: &'a Path,
    pub device: &'a DeviceInfo,
    /// The roofs of the spec's dtype, as this run measured them.
    pub ceilings: &'a Ceilings,
    pub resamples: usize,
    pub seed: u64,
    /// No baseline fails the check instead of skipping it.
    pub require_baseline: bool,
}

/// What the gate decided for one result.
#[derive(Debug, Clone)]
pub struct Decision {
    pub outcome: BaselineOutcome,
    /// The `regression` check (its words are written by the outputs from `outcome`).
    pub check: Check,
    /// Differences of the machine against the baseline's (kept with the result when the gate
    /// failed: they may explain the regression).
    pub warnings: Vec<String>,
}

impl Gate<'_> {
    /// Judges a result whose samples are final: one pass, or two as `first_pass_pairs` says.
    pub fn judge(&self, r: &SpecResult) -> Decision {
        let Some(reference) = self.reference else {
            let mut outcome =
                BaselineOutcome::missing(self.path.display().to_string(), r.gate.max_regression.0);
            outcome.finding = Some(GateFinding::NoBaseline {
                device_key: self.device.key.clone(),
            });
            return Decision {
                check: Check::new(
                    CheckName::Regression,
                    status(None, self.require_baseline),
                    "",
                ),
                outcome,
                warnings: Vec::new(),
            };
        };
        let against = judge::Against {
            reference,
            path: self.path,
            device: self.device,
            ceilings: self.ceilings,
            resamples: self.resamples,
            seed: self.seed,
        };
        let (mut outcome, warnings) = judge::judge(&against, r);
        if outcome.state == Some(RegressionState::Inconclusive) && !outcome.guarded() {
            outcome.undecided = outcome.ratio.map(|ratio| {
                stats::undecided(&ratio, r.gate.max_regression.0, outcome.spread.as_ref())
            });
        }
        Decision {
            check: Check::new(
                CheckName::Regression,
                status(outcome.state, self.require_baseline),
                "",
            ),
            outcome,
            warnings,
        }
    }

    /// The whole gate of a freshly measured result: judged; a FAIL, or an INCONCLUSIVE that a
    /// second look could settle into another verdict (`others`: how the spec's other
    /// measurements' gates called it, [`rule::second_pass_needed`]), is measured again once by
    /// `again` (with [`second_pass_config`]) and the evidence of both passes decides together
    /// (their pooled samples): passes that contradict each other give INCONCLUSIVE — never a
    /// PASS after a failing pass, never a FAIL on one noisy pass. The drift guard's INCONCLUSIVE
    /// is final at once. Returns the result with its regression check, warnings and status.
    pub fn decide(
        &self,
        first: SpecResult,
        others: &[rule::GateCall],
        again: impl FnOnce(RegressionState) -> Option<SpecResult>,
    ) -> SpecResult {
        let d = self.judge(&first);
        let wanted = self
            .reference
            .and_then(|_| second_pass_wanted(&d.outcome, &first, others));
        let (mut r, d) = match wanted.and_then(again) {
            Some(mut second) => {
                join_passes(&first, &mut second);
                let d = self.judge(&second);
                (second, d)
            }
            None => (first, d),
        };
        // A difference of the machine against the baseline's (another kernel build, another
        // governor) is something a user can act on only when it may explain a regression: a
        // pass or an inconclusive on every spec of a fresh clone would repeat it as noise.
        if d.outcome.state == Some(RegressionState::Fail) {
            r.warnings.extend(d.warnings);
        }
        r.baseline = d.outcome;
        r.checks.push(d.check);
        combine(&mut r);
        r
    }
}

/// The counts gate's decision on what counting `s`'s sides gave (`counted`, on the inputs of
/// `seed`'s checked seed), added to its result: the counts, the check of their DRAM bytes
/// against the ledger, the counts gate's finding and check, and the counted calls' outputs
/// checked against the reference — as the spec's `correctness` where time was not measured
/// (`timed` false), as `counted_output` beside the timed runs' otherwise. A side that could not
/// be counted fails the `ledger_counts` check with the reason. The spec's status and the
/// measurements set aside are derived again ([`combine`]).
pub fn decide_counts(
    counted: crate::error::Result<crate::measure::counts::Counted>,
    seed: u64,
    s: &crate::spec::Spec,
    r: &mut crate::results::SpecResult,
    reference: &counts::CountsReference<'_>,
    timed: bool,
) {
    match counted {
        Ok(c) => {
            r.checks.push(crate::verdict::counts_check(&c.counts));
            let tol = r.tolerance.tolerance();
            match (&c.before_output, &c.after_output) {
                (Some(b), Some(a)) => {
                    let inputs = s
                        .workload
                        .as_kind()
                        .inputs(crate::evidence::checked_seed(seed));
                    let correctness = crate::evidence::correctness(s, &inputs, (b, a), &tol, seed);
                    let mut check = correctness.check(&tol);
                    if timed {
                        check.name = CheckName::CountedOutput;
                    } else {
                        r.correctness = Some(correctness);
                    }
                    r.checks.push(check);
                }
                _ if timed => {}
                _ => r.checks.push(Check::new(
                    CheckName::Correctness,
                    Status::Skip,
                    "not checked: a side was not counted, and time was not measured",
                )),
            }
            let outcome = counts_outcome(s, &c.counts, reference);
            if timed {
                r.checks.extend(crate::verdict::counts_vs_time_check(
                    outcome.saving,
                    r.time_saving.as_ref(),
                    outcome.metric.as_str(),
                    outcome.limit,
                ));
            }
            r.checks
                .push(counts::check(&outcome, reference.require_baseline));
            r.counts_gate = Some(outcome);
            r.counts = Some(c.counts);
        }
        Err(e) => r.checks.push(Check::new(
            CheckName::LedgerCounts,
            Status::Fail,
            e.to_string(),
        )),
    }
    combine(r);
}

/// The counts gate's finding on `counts` against its reference: the one judgement
/// [`decide_counts`] records and [`counts_call`] reads.
fn counts_outcome(
    s: &crate::spec::Spec,
    counts: &crate::measure::counts::SpecCounts,
    reference: &counts::CountsReference<'_>,
) -> crate::results::CountsGateOutcome {
    let mut outcome = counts::judge(s, counts, reference.baseline, reference.path);
    outcome.history_run = reference.history_run.map(str::to_string);
    outcome.reference = reference.reference.cloned();
    outcome
}

/// How the counts gate calls what counting `s`'s sides gave, before it is recorded
/// ([`decide_counts`] records the same call): for the time gate, whose second pass it can make
/// needless ([`rule::second_pass_needed`]). A spec that could not be counted has no call.
pub fn counts_call(
    counted: &crate::error::Result<crate::measure::counts::Counted>,
    s: &crate::spec::Spec,
    reference: &counts::CountsReference<'_>,
) -> rule::GateCall {
    match counted {
        Ok(c) => rule::GateCall::of_status(
            counts::check(
                &counts_outcome(s, &c.counts, reference),
                reference.require_baseline,
            )
            .status,
        ),
        Err(_) => rule::GateCall::NotJudged,
    }
}

/// The state of a first pass that calls for a second one, if it does (`others`: how the spec's
/// other measurements' gates called it).
pub fn second_pass_wanted(
    o: &BaselineOutcome,
    r: &SpecResult,
    others: &[rule::GateCall],
) -> Option<RegressionState> {
    if o.guarded() {
        return None;
    }
    let state = o.state?;
    let can_pass = o
        .spread
        .is_none_or(|sp| sp.can_pass(r.gate.max_regression.0));
    // The FAIL threshold the judgement used (`gate_state`): the whole CI must pass it.
    let fail_in_reach = o.ratio.is_some_and(|ci| ci.hi > 1.0 + o.threshold);
    rule::second_pass_needed(state, can_pass, fail_in_reach, others).then_some(state)
}

/// The sampling of a second pass: up to twice the pairs, 1.5 times the time.
pub fn second_pass_config(cfg: &MeasureConfig) -> MeasureConfig {
    MeasureConfig {
        min_pairs: cfg.min_pairs * 2,
        max_pairs: cfg.max_pairs * 2,
        time_cap_secs: cfg.time_cap_secs * 1.5,
        ..*cfg
    }
}

/// The archive keeps the evidence of both passes: the first pass's pairs, then the second's
/// (`first_pass_pairs` says where the second begins); the gate judges each and both together.
pub fn join_passes(first: &SpecResult, second: &mut SpecResult) {
    if let (Some(a), Some(b)) = (&first.samples, &mut second.samples) {
        let join = |x: &[f64], y: &[f64]| [x, y].concat();
        b.before_secs = join(&a.before_secs, &b.before_secs);
        b.after_secs = join(&a.after_secs, &b.after_secs);
        b.after_first = [a.after_first.as_slice(), b.after_first.as_slice()].concat();
        second.first_pass_pairs = Some(a.before_secs.len());
        // The checked runs are the second pass's, against the samples of both passes.
        let joined = crate::verdict::checked_run_check(
            b,
            (
                second.before.variant.name(),
                second.before.implementation.is_some(),
            ),
            (
                second.after.variant.name(),
                second.after.implementation.is_some(),
            ),
        );
        if let Some(new) = joined {
            for c in second
                .checks
                .iter_mut()
                .filter(|c| c.name == CheckName::CheckedRun)
            {
                *c = new.clone();
            }
        }
        second.status = spec_status(&second.checks);
    }
}

/// The `regression` check's status for a gate state: FAIL and INCONCLUSIVE as they are, PASS
/// and IMPROVED pass; without a decision (no baseline, not comparable) the check is skipped,
/// or failed when a baseline is required.
pub fn status(state: Option<RegressionState>, require_baseline: bool) -> Status {
    match state {
        Some(RegressionState::Fail) => Status::Fail,
        Some(RegressionState::Inconclusive) => Status::Inconclusive,
        Some(RegressionState::Pass | RegressionState::Improved) => Status::Pass,
        None if require_baseline => Status::Fail,
        None => Status::Skip,
    }
}

pub use rule::spec_status;

/// Where a spec's gates leave it, once every measurement it asked for was judged: its status
/// from its checks, and the measurements whose gate could not decide while another's did (set
/// aside by [`rule::set_aside`], the one rule for how measurements combine). Every path that
/// judges a spec ends here.
pub fn combine(r: &mut SpecResult) {
    r.status = spec_status(&r.checks);
    r.set_aside = rule::set_aside_of(&r.checks);
}
