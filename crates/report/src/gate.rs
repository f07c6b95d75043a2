//! The gate's words: the sentences every output (report, terminal, JUnit, PR comment) writes
//! from the numbers of a [`BaselineOutcome`]. Archives written before the gate recorded its
//! finding as data carry their sentences; those are shown as they are.

use crate::results::{
    BaselineOutcome, BeforeMoved, Comparison, GateFinding, GateReference, Judged, SpecResult,
};
use crate::spec::Bound;
use crate::verdict::Check;
use crate::verdict::CheckName;
use opledger_gate::stats::{PassConflict, RegressionState};

/// The sentence of the `regression` check: what the gate compared and decided.
pub fn judgement(b: &BaselineOutcome) -> String {
    let text = judgement_words(b);
    // A reference from the history store is made of recorded runs, not accepted ones.
    match &b.reference {
        Some(_) => text.replace("accepted run", "reference run"),
        None => text,
    }
}

fn judgement_words(b: &BaselineOutcome) -> String {
    match &b.finding {
        None => b.message.clone(),
        Some(GateFinding::NoBaseline { device_key }) => match &b.reference {
            Some(GateReference::History { runs, branch, change, by_default, .. }) => format!(
                "{}the history store holds {} of this spec on device {device_key}{}{}: the gate judges against history from {} runs{}",
                if *by_default { "no accepted baseline, and " } else { "" },
                crate::format::counted(*runs as u64, "run", "runs"),
                branch.as_deref().map(|b| format!(" on branch {b}")).unwrap_or_default(),
                change.as_ref().map(|c| format!(" since its level changed at commit {}", c.since_commit)).unwrap_or_default(),
                opledger_gate::stats::POOL_MIN_RUNS,
                if *by_default {
                    format!(
                        " ({} more on this branch, or `run --accept`)",
                        crate::format::counted(
                            opledger_gate::stats::POOL_MIN_RUNS.saturating_sub(*runs) as u64,
                            "run",
                            "runs"
                        )
                    )
                } else {
                    String::new()
                }
            ),
            Some(GateReference::MergeBase { branch, merge_base, commit: None, .. }) => format!(
                "no run of this spec on device {device_key} in the history store at the merge-base {} of HEAD and {branch} or any of its ancestors: not compared (record the base branch's runs)",
                short_sha(merge_base)
            ),
            Some(r @ GateReference::MergeBase { .. }) => format!(
                "{}: the gate judges against history from {} runs, or one run with its samples (its archive was not found)",
                reference_words(r),
                opledger_gate::stats::POOL_MIN_RUNS
            ),
            None => {
                format!("no baseline for device {device_key} yet (record one with `run --accept`)")
            }
        },
        Some(GateFinding::OtherDevice {
            baseline_device_key,
            device_key,
        }) => format!(
            "baseline was recorded on device {baseline_device_key}, this run is on {device_key}: not compared on raw time"
        ),
        Some(GateFinding::WorkloadChanged) => "the spec's workload changed since the baseline was accepted: not compared; accept a new baseline".into(),
        Some(GateFinding::NoSamples) => "no samples in this run".into(),
        Some(GateFinding::CeilingDrift(_)) => {
            format!("not judged: {}", guard(b).unwrap_or_default())
        }
        // What the thresholds rest on (the reference's drift between runs) is said once, at
        // the end: every comparison of a judgement is against the same reference runs.
        Some(GateFinding::Judged(j)) => match &j.passes {
            None => format!("{} ({})", judged(&j.all), drift(&j.all.decided)),
            Some(p) => format!(
                "{}both passes together: {}; first pass: {}; second pass: {} ({})",
                p.conflict
                    .map(|c| format!("INCONCLUSIVE: {}; ", conflict(c)))
                    .unwrap_or_default(),
                judged(&j.all),
                pass(&p.first),
                pass(&p.second),
                drift(&j.all.decided)
            ),
        },
    }
}

/// [`judgement`], and what accepting the run made of the baseline.
pub fn message(b: &BaselineOutcome) -> String {
    let Some(a) = &b.accepted else {
        return judgement(b);
    };
    if a.first {
        format!(
            "first baseline for device {}: recorded by this run ({} accepted run)",
            a.device_key, a.runs
        )
    } else {
        format!(
            "{}; accepted: this run joins the baseline ({} accepted runs)",
            judgement(b),
            a.runs
        )
    }
}

/// The short reason a decision needs, where it needs one (an INCONCLUSIVE from drift, from
/// passes that disagree, from both variants slowing alike).
pub fn note(b: &BaselineOutcome) -> Option<String> {
    match &b.finding {
        None => b.note.clone(),
        Some(GateFinding::CeilingDrift(_)) => guard(b),
        Some(GateFinding::Judged(j)) => match &j.passes {
            Some(p) if p.conflict.is_some() => Some(format!(
                "{}: first {}, second {}",
                p.conflict.map(conflict).unwrap_or_default(),
                short(&p.first),
                short(&p.second)
            )),
            _ => match (j.all.before_moved, j.all.other) {
                (Some(moved), Some(raw)) => Some(format!(
                    "{} (before ×{:.3}, after ×{:.3}): the after/before ratio moved with the before side",
                    before_moved_words(moved),
                    j.all.before_ratio.unwrap_or(f64::NAN),
                    raw.ratio.point
                )),
                _ => j.all.slowed_alike.then(|| match j.all.before_ratio {
                    Some(b) => format!(
                        "both variants slower alike (before ×{b:.3}, after ×{:.3}): machine drift or shared code",
                        j.all.decided.ratio.point
                    ),
                    None => "both variants slower alike: machine drift or shared code".into(),
                }),
            },
        },
        Some(_) => None,
    }
}

/// The ceiling the drift guard watches for a bound, and its unit.
fn ceiling_words(bound: Bound) -> (&'static str, &'static str) {
    match bound {
        Bound::Bandwidth => ("triad bandwidth", "GB/s"),
        Bound::Compute => ("compute peak", "GFLOP/s"),
    }
}

/// [`guard`] in a few words, for a terminal line: what moved and by how much (the report
/// says what to do).
pub fn guard_short(b: &BaselineOutcome) -> Option<String> {
    guard_moved(b).map(|m| format!("{m}; the report says what to do"))
}

/// What moved, where the ceiling drift guard stopped the comparison: `machine state: the triad
/// bandwidth ×1.54 the baseline's, beyond the ±25% the gate absorbs`.
pub fn guard_moved(b: &BaselineOutcome) -> Option<String> {
    let Some(GateFinding::CeilingDrift(d)) = &b.finding else {
        return None;
    };
    let (what, _) = ceiling_words(d.bound);
    Some(format!(
        "machine state: the {what} ×{:.2} the baseline's, beyond the ±{:.0}% the gate absorbs",
        d.now_per_sec / d.baseline_per_sec,
        d.allowed * 100.0
    ))
}

/// Why the ceiling drift guard stopped the comparison, when it did.
pub fn guard(b: &BaselineOutcome) -> Option<String> {
    let Some(GateFinding::CeilingDrift(d)) = &b.finding else {
        return b.guard.clone();
    };
    let (what, unit) = ceiling_words(d.bound);
    // Against a merge-base, the base itself can be measured again in the same job.
    let again = match &b.reference {
        Some(GateReference::MergeBase { .. }) => {
            "measure the merge-base again in this job (`--rerecord-base`) or on a quiet machine"
        }
        _ => "measure again on a quiet machine",
    };
    Some(format!(
        "the {what} moved from {:.1} {unit} at the baseline to {:.1} {unit} now (x{:.2}, more than the ±{:.0}% the gate absorbs): the machine is not in the state the baseline measured; next: {again}, or record this machine's state as the baseline (`run --accept`), or gate on counts (`--measure counts`, the CPU backend's kernels), which no machine state moves",
        d.baseline_per_sec / 1e9,
        d.now_per_sec / 1e9,
        d.now_per_sec / d.baseline_per_sec,
        d.allowed * 100.0
    ))
}

/// What the gate judged against, in words, when it was not the accepted baseline.
pub fn reference(b: &BaselineOutcome) -> Option<String> {
    b.reference.as_ref().map(reference_words)
}

/// A commit's short form (a store keeps short SHAs; `git merge-base` gives full ones).
pub fn short_sha(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

fn reference_words(r: &GateReference) -> String {
    let since = |c: &Option<crate::results::LevelChange>| {
        c.as_ref()
            .map(|c| {
                format!(
                    " since its level changed at commit {} ({} left out)",
                    c.since_commit,
                    crate::format::counted(c.left_out as u64, "older run", "older runs")
                )
            })
            .unwrap_or_default()
    };
    match r {
        GateReference::History {
            runs,
            branch,
            change,
            by_default,
            outliers,
        } => format!(
            "the newest {} of {} on this device in the history store{}{}{}",
            crate::format::counted(*runs as u64, "run", "runs"),
            branch
                .as_deref()
                .map(|b| format!("branch {b}"))
                .unwrap_or_else(|| "every branch".into()),
            since(change),
            if *outliers > 0 {
                format!(
                    ", {} left out (beyond {} robust standard deviations of the series)",
                    crate::format::counted(*outliers as u64, "noisy run", "noisy runs"),
                    opledger_gate::history::OUTLIER_Z
                )
            } else {
                String::new()
            },
            if *by_default {
                " (no accepted baseline: the branch's history by default)"
            } else {
                ""
            }
        ),
        GateReference::MergeBase {
            branch,
            merge_base,
            commit,
            commits_back,
            runs,
            change,
            samples,
        } => match commit {
            None => format!(
                "the merge-base {} of HEAD and {branch}: no run of it or its ancestors in the history store",
                short_sha(merge_base)
            ),
            Some(c) => format!(
                "the merge-base {} of HEAD and {branch}: {} in the history store from commit {c}{}{}{}",
                short_sha(merge_base),
                crate::format::counted(*runs as u64, "run", "runs"),
                if *commits_back == 0 {
                    " (the merge-base itself)".to_string()
                } else {
                    format!(
                        " ({} before it, the nearest with a run) and earlier",
                        crate::format::counted(*commits_back as u64, "commit", "commits")
                    )
                },
                since(change),
                if *samples { ", the base run with its samples" } else { "" }
            ),
        },
    }
}

/// A check's sentence as the outputs write it: the `regression` check's from the gate's
/// finding, every other check's as the verdict wrote it.
pub fn check_detail(s: &SpecResult, c: &Check) -> String {
    let detail = match (c.name, &s.counts_gate) {
        (CheckName::Regression, _) if s.baseline.finding.is_some() => judgement(&s.baseline),
        (CheckName::CountsRegression, Some(o)) => counts_judgement(o),
        _ => c.detail.clone(),
    };
    match set_aside(s, c) {
        Some(words) => format!("{words} ({detail})"),
        None => detail,
    }
}

/// Where a check's gate was set aside because another measurement's gate decided
/// (`gate::rule`): `not judged: the time gate could not decide, and the counts gate decided the
/// spec`. The report writes this alone, the gate's own line being beside it; every other output
/// adds the gate's sentence ([`check_detail`]).
pub fn set_aside(s: &SpecResult, c: &Check) -> Option<String> {
    let m = s.set_aside.iter().find(|m| m.check() == c.name)?;
    Some(format!(
        "not judged: the {} gate could not decide, and the {} gate decided the spec",
        m.word(),
        match m {
            opledger_gate::rule::Measurement::Time => "counts",
            opledger_gate::rule::Measurement::Counts => "time",
        }
    ))
}

/// The counts gate in a few words: `pass +0.00% cycles`, `REGRESSION +2.02% cycles`,
/// `pass, after -67.86% cycles`, `no baseline`. A failing (or undecided) gate shows the side
/// that rose most; a passing one the side that moved most, named where it is not the worst —
/// a fix that cut the after side by two thirds is not shown as the before side's 0.00%.
pub fn counts_short(o: &crate::results::CountsGateOutcome) -> String {
    use crate::results::CountsState;
    let sides = [("before", o.before), ("after", o.after)];
    let changes = sides
        .iter()
        .filter_map(|(n, c)| Some((*n, c.as_ref()?.change())));
    let worst = changes.clone().max_by(|a, b| a.1.total_cmp(&b.1));
    let most = changes.max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()));
    let metric = o.metric.as_str();
    let rose = worst
        .map(|(_, w)| format!(" {:+.2}% {metric}", w * 100.0))
        .unwrap_or_default();
    let moved = match (worst, most) {
        (Some(w), Some((side, m))) if m.abs() > o.limit && side != w.0 => {
            format!(", {side} {:+.2}% {metric}", m * 100.0)
        }
        _ => rose.clone(),
    };
    match o.state {
        CountsState::NoBaseline => "no counts baseline".into(),
        CountsState::NotComparable => "counts baseline not comparable".into(),
        CountsState::Accepted => "counts accepted".into(),
        CountsState::Pass => format!("pass{moved}"),
        CountsState::Improved => format!("improved{moved}"),
        CountsState::Fail => format!("REGRESSION{rose}"),
        CountsState::Inconclusive => format!("inconclusive{rose} (another engine)"),
    }
}

/// The counts gate's finding in a sentence: `after +2.04% cycles (1,234 → 1,259), before
/// +0.00%: above the 1% limit against the counts baseline of abc1234`.
pub fn counts_judgement(o: &crate::results::CountsGateOutcome) -> String {
    use crate::results::CountsState;
    let metric = o.metric.as_str();
    let limit = format!("{}%", super::format::trim_float(o.limit * 100.0));
    let sides: Vec<String> = [("before", o.before), ("after", o.after)]
        .into_iter()
        .filter_map(|(n, c)| {
            let c = c?;
            Some(format!(
                "{n} {:+.2}% {metric} ({} → {})",
                c.change() * 100.0,
                super::format::thousands(c.baseline),
                super::format::thousands(c.now)
            ))
        })
        .collect();
    let sides = sides.join(", ");
    let commit = o
        .baseline_git_sha
        .as_deref()
        // Recorded outside a repository: no commit to name.
        .filter(|g| !g.is_empty() && *g != "nogit")
        .map(|g| format!(" of {}", &g[..g.len().min(10)]))
        .unwrap_or_default();
    let against = counts_against(o, &commit);
    let differences: Vec<String> = o
        .differences
        .iter()
        .map(|d| format!("{} {} then, {} now", d.what, d.baseline, d.now))
        .collect();
    let moved: Vec<String> = o
        .functions
        .iter()
        .take(3)
        .map(|f| {
            // A generic's full path can run to hundreds of characters: its head names it.
            let name: String = f.function.chars().take(60).collect();
            let cut = if name.len() < f.function.len() {
                "…"
            } else {
                ""
            };
            format!(
                "{name}{cut} {} instructions",
                crate::format::delta(
                    i128::from(f.instructions_now) - i128::from(f.instructions_then)
                )
            )
        })
        .collect();
    let moved =
        if moved.is_empty() || !matches!(o.state, CountsState::Fail | CountsState::Inconclusive) {
            String::new()
        } else {
            format!(
                "; where the {} side's instructions moved: {}",
                o.functions_side.as_deref().unwrap_or("?"),
                moved.join(", ")
            )
        };
    match o.state {
        CountsState::NoBaseline => match &o.reference {
            Some(crate::results::GateReference::MergeBase { branch, merge_base, .. }) => format!(
                "no counted run of this engine at the merge-base with {branch} ({}) or its ancestors in the history store: a run of {branch} that counts this spec makes the base",
                short_sha(merge_base)
            ),
            _ => format!(
                "no counts baseline for this engine yet ({}), and no counted run of this branch in the history store; record one with `run --measure counts --accept`, or count again: this run becomes the branch's reference",
                o.path
            ),
        },
        CountsState::NotComparable => format!(
            "the counts baseline {} counted another workload or other variants: not compared",
            o.path
        ),
        CountsState::Accepted => format!("counts accepted as the baseline ({})", o.path),
        CountsState::Pass => format!("{sides}: within the {limit} limit against {against}"),
        CountsState::Improved => format!("{sides}: below {against} by more than {limit}"),
        CountsState::Fail => format!("{sides}: above the {limit} limit against {against}{moved}"),
        CountsState::Inconclusive => format!(
            "{sides}: above the {limit} limit against {against}, but it was counted under another engine ({}): the code may not be what moved; accept the counts again under this engine{moved}",
            differences.join("; ")
        ),
    }
}

/// Which counts the gate judged against, in words: the counts baseline, the branch's newest
/// counted run, or the counted run at the merge-base (`commit`: ` of abc1234`, or empty).
fn counts_against(o: &crate::results::CountsGateOutcome, commit: &str) -> String {
    match (&o.history_run, &o.reference) {
        (
            Some(run),
            Some(crate::results::GateReference::MergeBase {
                branch,
                commits_back,
                ..
            }),
        ) => format!(
            "the counted run {run}{commit} at the merge-base with {branch}{}",
            if *commits_back > 0 {
                format!(
                    " ({} before it)",
                    crate::format::counted(*commits_back as u64, "commit", "commits")
                )
            } else {
                String::new()
            }
        ),
        // No counts baseline: the branch's newest counted run in the history store.
        (Some(run), _) => {
            format!("the branch's newest counted run {run}{commit} (no counts baseline)")
        }
        (None, _) => format!("the counts baseline{commit}"),
    }
}

fn conflict(c: PassConflict) -> &'static str {
    match c {
        PassConflict::Disagree => "the two passes disagree",
        PassConflict::OneFailedBothPass => "a pass failed where both together pass",
        PassConflict::OnePassedBothFail => "a pass passed where both together fail",
    }
}

/// A pass in a few words: `FAIL x1.234 [1.200, 1.270]`.
fn short(j: &Judged) -> String {
    let r = j.decided.ratio;
    format!(
        "{} x{:.3} [{:.3}, {:.3}]",
        j.state().word(),
        r.point,
        r.lo,
        r.hi
    )
}

/// One pass in a few words, with its other comparison's figures beside: `REGRESSION x1.458
/// [1.435, 1.519], raw time x1.541 [1.461, 1.592]`.
fn pass(j: &Judged) -> String {
    match j.other {
        None => short(j),
        Some(o) => format!(
            "{}, {} {} x{:.3} [{:.3}, {:.3}]",
            short(j),
            if o.relative {
                "after/before"
            } else {
                "raw time"
            },
            o.state.word(),
            o.ratio.point,
            o.ratio.lo,
            o.ratio.hi
        ),
    }
}

/// One judgement: the deciding comparison, and under `compare: both` the other beside it (with
/// its drift where it is not the deciding one's, which the caller writes).
fn judged(j: &Judged) -> String {
    let other = |c: &Comparison| {
        let own = drift(c);
        if own == drift(&j.decided) {
            comparison(c)
        } else {
            format!("{} ({own})", comparison(c))
        }
    };
    match (j.other, j.slowed_alike) {
        (None, _) => comparison(&j.decided),
        (Some(raw), false) if j.before_moved.is_some() => {
            let b = j.before_ratio.unwrap_or(f64::NAN);
            let head = format!("{}; but {}: the before side ran at ×{b:.3} its reference while the after side's own time did not", comparison(&j.decided), other(&raw));
            match j.before_moved {
                Some(BeforeMoved::Slower) => format!(
                    "{head} improve — the ratio fell with the before side, not an improvement of the after side"
                ),
                _ => format!(
                    "{head} fail — the ratio rose with the before side (a machine that sped up the before side alone, or one that sped up both and hides a slower after side: one run cannot tell; run again, or gate with `compare: raw` on a quiet machine)"
                ),
            }
        }
        (Some(rel), true) => format!(
            "{}; but {}: both variants are slower than at the baseline alike{} — the machine drifted, or code both share regressed (a quiet machine or `compare: raw` tells which)",
            comparison(&j.decided),
            other(&rel),
            j.before_ratio
                .map(|b| format!(" (before ×{b:.3}, after ×{:.3})", j.decided.ratio.point))
                .unwrap_or_default()
        ),
        (Some(rel), false) if !j.decided.relative && j.before_ratio.is_some() => format!(
            "{}; the before side held at ×{:.3} its reference, so the after side alone is slower (its after/before comparison, {}, is blurred by the reference's spread)",
            comparison(&j.decided),
            j.before_ratio.unwrap_or(1.0),
            other(&rel)
        ),
        (Some(raw), false) => format!("{}; raw time: {}", comparison(&j.decided), other(&raw)),
    }
}

/// The before side's move, in two words.
fn before_moved_words(moved: BeforeMoved) -> &'static str {
    match moved {
        BeforeMoved::Faster => "before side faster",
        BeforeMoved::Slower => "before side slower",
    }
}

/// What a comparison's thresholds rest on: the reference's drift between runs.
fn drift(c: &Comparison) -> String {
    c.spread.describe(c.limit)
}

/// Whether the reference's drift raised the FAIL threshold above the spec's limit, at the
/// 0.1% the outputs write them: only then is the threshold named beside the limit.
pub fn threshold_raised(limit: f64, threshold: f64) -> bool {
    format!("{:.1}", threshold * 100.0) != format!("{:.1}", limit * 100.0)
}

/// A comparison's ratio, CI, limit and decision. The FAIL threshold is named only where the
/// reference's drift raised it above the limit.
fn comparison(c: &Comparison) -> String {
    let sp = &c.spread;
    let limit = if !threshold_raised(c.limit, c.threshold) {
        format!("limit +{:.1}%", c.limit * 100.0)
    } else {
        format!(
            "FAIL above +{:.1}% (the limit +{:.1}%, raised for the drift)",
            c.threshold * 100.0,
            c.limit * 100.0
        )
    };
    format!(
        "{} median ratio {:.3} (95% CI {:.3} .. {:.3}){}, {limit}: {}",
        if c.relative {
            "(after/before)/baseline's"
        } else {
            "after/baseline"
        },
        c.ratio.point,
        c.ratio.lo,
        c.ratio.hi,
        if c.pooled_runs > 0 {
            format!(
                " against the pooled medians of {} accepted runs",
                c.pooled_runs
            )
        } else {
            String::new()
        },
        match c.state {
            RegressionState::Pass => "within the limit",
            RegressionState::Fail => "REGRESSION",
            RegressionState::Improved => "improved",
            RegressionState::Inconclusive if !sp.can_pass(c.limit) => {
                "inconclusive (this machine drifts more between runs than the limit)"
            }
            RegressionState::Inconclusive => "inconclusive (the CI reaches past the limit)",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::stats::Estimate;
    use crate::results::{BaselineStatus, CeilingDrift, GateJudgement, Passes};
    use opledger_gate::stats::Spread;

    fn comparison(relative: bool, point: f64, state: RegressionState) -> Comparison {
        Comparison {
            relative,
            ratio: Estimate {
                point,
                lo: point - 0.034,
                hi: point + 0.036,
            },
            state,
            threshold: 0.1,
            limit: 0.1,
            pooled_runs: 0,
            spread: Spread {
                runs: 1,
                ..Spread::unknown()
            },
        }
    }

    fn outcome(finding: GateFinding) -> BaselineOutcome {
        let mut o = BaselineOutcome::missing("b.json".into(), 0.1);
        o.status = BaselineStatus::Compared;
        o.finding = Some(finding);
        o
    }

    #[test]
    fn the_counts_gate_in_a_few_words_names_the_side_that_moved() {
        use crate::results::{CountsChange, CountsGateOutcome, CountsState};
        let o = |state, before: (u64, u64), after: (u64, u64)| CountsGateOutcome {
            state,
            metric: crate::spec::CountsMetric::Cycles,
            limit: 0.01,
            path: "b.json".into(),
            baseline_git_sha: None,
            before: Some(CountsChange {
                now: before.0,
                baseline: before.1,
            }),
            after: Some(CountsChange {
                now: after.0,
                baseline: after.1,
            }),
            saving: None,
            differences: Vec::new(),
            functions: Vec::new(),
            functions_side: None,
            history_run: None,
            reference: None,
        };
        // A fix: the after side fell by two thirds, the before side held.
        let fix = o(
            CountsState::Pass,
            (2_934_195, 2_934_245),
            (1_809_387, 5_629_130),
        );
        assert_eq!(counts_short(&fix), "pass, after -67.86% cycles");
        // Both held: the worst side, as always.
        let held = o(CountsState::Pass, (1000, 1000), (1005, 1000));
        assert_eq!(counts_short(&held), "pass +0.50% cycles");
        // A regression shows the side that rose, whatever fell elsewhere.
        let fail = o(CountsState::Fail, (500, 1000), (1100, 1000));
        assert_eq!(counts_short(&fail), "REGRESSION +10.00% cycles");
    }

    const UNKNOWN: &str = "1 accepted run: the drift between runs is unknown until 3 are accepted (`opledger calibrate --accept` records them at once), so the smallest detectable slowdown is unknown";

    #[test]
    fn a_judgement_reads_as_the_gate_always_wrote_it() {
        let fail = comparison(true, 1.234, RegressionState::Fail);
        let raw = comparison(false, 1.02, RegressionState::Pass);
        let one = Judged {
            decided: fail,
            other: Some(raw),
            slowed_alike: false,
            before_ratio: None,
            before_moved: None,
        };
        let o = outcome(GateFinding::Judged(Box::new(GateJudgement {
            all: one,
            passes: None,
        })));
        assert_eq!(
            judgement(&o),
            format!("(after/before)/baseline's median ratio 1.234 (95% CI 1.200 .. 1.270), limit +10.0%: REGRESSION; raw time: after/baseline median ratio 1.020 (95% CI 0.986 .. 1.056), limit +10.0%: within the limit ({UNKNOWN})")
        );
        assert_eq!(note(&o), None);

        // Raw time failed alone: both variants slowed alike, INCONCLUSIVE with its reason.
        let alike = Judged {
            decided: comparison(false, 1.3, RegressionState::Fail),
            other: Some(comparison(true, 1.0, RegressionState::Pass)),
            slowed_alike: true,
            before_ratio: None,
            before_moved: None,
        };
        assert_eq!(alike.state(), RegressionState::Inconclusive);
        let o = outcome(GateFinding::Judged(Box::new(GateJudgement {
            all: alike,
            passes: None,
        })));
        assert!(judgement(&o).contains("; but (after/before)/baseline's median ratio 1.000"));
        assert!(judgement(&o).ends_with(&format!("both variants are slower than at the baseline alike — the machine drifted, or code both share regressed (a quiet machine or `compare: raw` tells which) ({UNKNOWN})")));
        // The drift is said once, however many comparisons the judgement holds.
        assert_eq!(judgement(&o).matches("accepted run").count(), 1);
        assert_eq!(
            note(&o).as_deref(),
            Some("both variants slower alike: machine drift or shared code")
        );

        // Raw time failed and the before side held: the after side alone regressed, and the
        // sentence says so with the numbers it rests on.
        let alone = Judged {
            decided: comparison(false, 1.63, RegressionState::Fail),
            other: Some(comparison(true, 1.4, RegressionState::Inconclusive)),
            slowed_alike: false,
            before_ratio: Some(1.01),
            before_moved: None,
        };
        assert_eq!(alone.state(), RegressionState::Fail);
        let o = outcome(GateFinding::Judged(Box::new(GateJudgement {
            all: alone,
            passes: None,
        })));
        assert!(
            judgement(&o).contains(
                "the before side held at ×1.010 its reference, so the after side alone is slower"
            ),
            "{}",
            judgement(&o)
        );
        assert_eq!(note(&o), None);

        // The ratio failed because the before side ran faster, the after side's time held:
        // INCONCLUSIVE, and both sides' moves said.
        let before_faster = Judged {
            decided: comparison(true, 1.25, RegressionState::Fail),
            other: Some(comparison(false, 0.86, RegressionState::Pass)),
            slowed_alike: false,
            before_ratio: Some(0.69),
            before_moved: Some(BeforeMoved::Faster),
        };
        assert_eq!(before_faster.state(), RegressionState::Inconclusive);
        let o = outcome(GateFinding::Judged(Box::new(GateJudgement {
            all: before_faster,
            passes: None,
        })));
        assert!(
            judgement(&o).contains("the before side ran at ×0.690 its reference while the after side's own time did not fail — the ratio rose with the before side"),
            "{}",
            judgement(&o)
        );
        assert_eq!(
            note(&o).as_deref(),
            Some("before side faster (before ×0.690, after ×0.860): the after/before ratio moved with the before side")
        );
        // The ratio improved because the before side ran slower: the after side's raw PASS.
        let before_slower = Judged {
            decided: comparison(true, 0.55, RegressionState::Improved),
            other: Some(comparison(false, 1.0, RegressionState::Pass)),
            slowed_alike: false,
            before_ratio: Some(1.8),
            before_moved: Some(BeforeMoved::Slower),
        };
        assert_eq!(before_slower.state(), RegressionState::Pass);
        let raw_unsure = Judged {
            other: Some(comparison(false, 1.05, RegressionState::Inconclusive)),
            ..before_slower
        };
        assert_eq!(raw_unsure.state(), RegressionState::Inconclusive);
    }

    #[test]
    fn a_fail_threshold_raised_by_the_drift_is_named_beside_the_limit() {
        let mut c = comparison(true, 1.15, RegressionState::Inconclusive);
        c.threshold = 0.123;
        assert_eq!(
            super::comparison(&c),
            "(after/before)/baseline's median ratio 1.150 (95% CI 1.116 .. 1.186), FAIL above +12.3% (the limit +10.0%, raised for the drift): inconclusive (the CI reaches past the limit)"
        );
    }

    #[test]
    fn passes_that_disagree_name_both_and_the_drift_guard_names_the_roof() {
        let pass = Judged {
            decided: comparison(true, 1.0, RegressionState::Pass),
            other: None,
            slowed_alike: false,
            before_ratio: None,
            before_moved: None,
        };
        let fail = Judged {
            decided: comparison(true, 1.234, RegressionState::Fail),
            ..pass
        };
        let mut o = outcome(GateFinding::Judged(Box::new(GateJudgement {
            all: pass,
            passes: Some(Passes {
                first: fail,
                second: pass,
                conflict: Some(PassConflict::Disagree),
            }),
        })));
        o.state = Some(RegressionState::Inconclusive);
        assert!(judgement(&o).starts_with(
            "INCONCLUSIVE: the two passes disagree; both passes together: (after/before)/baseline's median ratio 1.000"
        ));
        assert!(
            judgement(&o).ends_with(&format!(
                "; first pass: REGRESSION x1.234 [1.200, 1.270]; second pass: pass x1.000 [0.966, 1.036] ({UNKNOWN})"
            )),
            "{}",
            judgement(&o)
        );
        assert_eq!(
            note(&o).as_deref(),
            Some("the two passes disagree: first REGRESSION x1.234 [1.200, 1.270], second pass x1.000 [0.966, 1.036]")
        );

        let o = outcome(GateFinding::CeilingDrift(CeilingDrift {
            bound: Bound::Bandwidth,
            baseline_per_sec: 40e9,
            now_per_sec: 10e9,
            allowed: 0.25,
        }));
        let why = "the triad bandwidth moved from 40.0 GB/s at the baseline to 10.0 GB/s now (x0.25, more than the ±25% the gate absorbs): the machine is not in the state the baseline measured; next: measure again on a quiet machine, or record this machine's state as the baseline (`run --accept`), or gate on counts (`--measure counts`, the CPU backend's kernels), which no machine state moves";
        assert_eq!(guard(&o).as_deref(), Some(why));
        assert_eq!(note(&o).as_deref(), Some(why));
        assert_eq!(judgement(&o), format!("not judged: {why}"));
    }

    #[test]
    fn an_archive_without_a_finding_shows_the_sentences_it_stored() {
        let mut o = BaselineOutcome::missing("b.json".into(), 0.1);
        o.message = "as written then".into();
        o.note = Some("short".into());
        assert_eq!(judgement(&o), "as written then");
        assert_eq!(note(&o).as_deref(), Some("short"));
        assert_eq!(guard(&o), None);
    }
}
