//! The words of `opledger compare`: the terminal's table of B against A, and the short
//! pull-request comment (`--markdown`) with one verdict, the changed cases and links to both
//! reports.

use crate::results::{RunResult, RunStatus};
use opledger_gate::stats::RegressionState;
use opledger_gate::versus::{CaseComparison, Drift, NotCompared};
use std::path::Path;

/// The run's name in a title: its commit when it has one, its run id otherwise.
fn label(r: &RunResult) -> String {
    if r.git_sha.is_empty() || r.git_sha == "nogit" {
        format!("run {}", r.run_id)
    } else {
        format!("{}{}", r.git_sha, if r.git_dirty { " (dirty)" } else { "" })
    }
}

use super::format::ms_with_unit as ms;

/// The decision in words, for a table cell.
fn decision(c: &CaseComparison) -> String {
    use opledger_gate::rule::Measurement;
    let time = time_decision(c);
    let aside = c.set_aside();
    match &c.counts {
        Some(o) if aside.contains(&Measurement::Time) => format!(
            "time not judged ({time}); counts: {}",
            super::gate::counts_short(o)
        ),
        Some(o) if aside.contains(&Measurement::Counts) => format!(
            "{time}; counts not judged ({})",
            super::gate::counts_short(o)
        ),
        Some(o) => format!("{time}; counts: {}", super::gate::counts_short(o)),
        None => time,
    }
}

/// Whether a case regressed on either measurement.
fn regressed(c: &CaseComparison) -> bool {
    c.outcome
        .as_ref()
        .is_some_and(|o| o.state == Some(RegressionState::Fail))
        || c.counts
            .as_ref()
            .is_some_and(|o| o.state == crate::results::CountsState::Fail)
}

/// The time gate's decision in words.
fn time_decision(c: &CaseComparison) -> String {
    match c.not_compared {
        Some(NotCompared::OnlyInB) => return "only in B".into(),
        Some(NotCompared::NotMeasuredInA) if c.counts.is_some() => {
            return "time not measured".into()
        }
        Some(NotCompared::NotMeasuredInA) => return "not measured in A".into(),
        None => {}
    }
    let Some(o) = &c.outcome else {
        return "not comparable".into();
    };
    let faster = o.ratio.is_some_and(|r| r.hi < 1.0);
    let note = super::gate::note(o);
    let gate = match o.state {
        Some(RegressionState::Fail) => "REGRESSION".to_string(),
        Some(RegressionState::Improved) => "improved".to_string(),
        Some(RegressionState::Inconclusive) => match (o.ratio, &note) {
            (_, Some(n)) => format!("INCONCLUSIVE ({n})"),
            (Some(r), None) if r.lo > 1.0 + o.threshold.max(0.0) => {
                "INCONCLUSIVE (slower beyond the limit, but by no more than the drift allows)"
                    .to_string()
            }
            _ => "INCONCLUSIVE".to_string(),
        },
        // A ratio the before side alone moved says so (the note).
        Some(RegressionState::Pass) if note.is_some() => {
            format!("within the limit ({})", note.unwrap_or_default())
        }
        // A raw-time speedup that the after/before comparison does not confirm is the machine
        // (or code both variants share) being faster.
        Some(RegressionState::Pass) if faster => {
            "within the limit (faster in raw time only: the machine or code both variants share)"
                .to_string()
        }
        Some(RegressionState::Pass) => "within the limit".to_string(),
        None => "not comparable".to_string(),
    };
    if c.head_verdict == RunStatus::Fail {
        format!("{gate}; FAIL in B (a check failed)")
    } else {
        gate
    }
}

/// What would decide each INCONCLUSIVE time decision that has no reason of its own (a
/// conflict between passes, a slowdown both variants share) and that counts did not decide: a
/// list, "- name: why" one a case, under its heading; empty when there is none.
fn next_steps<'a>(cases: impl IntoIterator<Item = &'a CaseComparison>) -> String {
    let steps: String = cases
        .into_iter()
        .filter_map(|c| {
            let o = c.outcome.as_ref()?;
            if o.state != Some(RegressionState::Inconclusive)
                || super::gate::note(o).is_some()
                || c.set_aside()
                    .contains(&opledger_gate::rule::Measurement::Time)
            {
                return None;
            }
            let why = super::inconclusive_why(o, c.limit)?;
            Some(format!("- {}: {why}\n", super::md_escape(&c.name)))
        })
        .collect();
    if steps.is_empty() {
        steps
    } else {
        format!("What would decide it:\n\n{steps}\n")
    }
}

/// The one command that re-runs each regressed case on a reviewer's machine, under its
/// heading; empty when nothing regressed. Counts repeat exactly on any x86-64 machine (the
/// engine's cache model named where it is not the default); time needs both commits measured
/// on one machine, which `--rerecord-base` does against `base` (a branch, or A's commit).
fn reproduce(changed: &[&CaseComparison], rb: &RunResult, base: Option<&str>) -> String {
    let lines: Vec<String> = changed
        .iter()
        .filter(|c| regressed(c))
        .filter_map(|c| {
            let s = rb.specs.iter().find(|s| s.name == c.name)?;
            let counts_failed = c
                .counts
                .as_ref()
                .is_some_and(|o| o.state == crate::results::CountsState::Fail);
            let against = base.map_or(crate::spec::Against::Baselines, |b| {
                crate::spec::Against::MergeBase { branch: b.into() }
            });
            let cmd =
                crate::repro::command(s, rb.device.kind.name(), counts_failed, &against, None);
            let time_failed = c
                .outcome
                .as_ref()
                .is_some_and(|o| o.state == Some(RegressionState::Fail));
            let cmd = if time_failed {
                crate::repro::with_caps(cmd, rb)
            } else {
                cmd
            };
            Some(format!(
                "- {}: {}\n",
                super::md_escape(&c.name),
                crate::escape::command_span(&cmd)
            ))
        })
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "To reproduce on your machine (from the head's checkout; counts repeat exactly on any x86-64 machine, time is measured at both commits on yours):\n\n{}\n",
        lines.concat()
    )
}

fn ratio(c: &CaseComparison) -> String {
    c.outcome
        .as_ref()
        .and_then(|o| o.ratio)
        .map_or("—".into(), |r| {
            format!("{:.3} ({:.3} .. {:.3})", r.point, r.lo, r.hi)
        })
}

fn limit(c: &CaseComparison) -> String {
    c.outcome.as_ref().map_or("—".into(), |o| {
        format!("+{}%", super::format::limit_percent(o.threshold))
    })
}

/// The terminal's table: every case of B.
/// Where `compare --base merge-base:BRANCH` found its reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseCommit {
    pub branch: String,
    /// `git merge-base HEAD branch` (full SHA).
    pub merge_base: String,
    /// The commit of the run used (the merge-base or its nearest ancestor with a run).
    pub commit: String,
    /// Commits between the merge-base and that commit.
    pub commits_back: usize,
    pub run_id: String,
}

/// The base in one sentence.
pub fn base_line(b: &BaseCommit) -> String {
    let mb = super::gate::short_sha(&b.merge_base);
    if b.commits_back == 0 {
        format!(
            "Base: run {} at commit {}, the merge-base of this branch and {}.",
            b.run_id, b.commit, b.branch
        )
    } else {
        format!(
            "Base: run {} at commit {}, {} before the merge-base {mb} of this branch and {} (the nearest with a run).",
            b.run_id,
            b.commit,
            crate::format::counted(b.commits_back as u64, "commit", "commits"),
            b.branch
        )
    }
}

pub fn table(ra: &RunResult, rb: &RunResult, cases: &[CaseComparison], store: &Path) -> String {
    let mut t = format!(
        "# opledger compare\n\n`{}` ({}) → `{}` ({})\n\n",
        ra.run_id,
        label(ra),
        rb.run_id,
        label(rb)
    );
    t.push_str("| spec | before (A) | after (A) | after (B) | compared | B vs A ratio (95% CI) | threshold | decision |\n");
    t.push_str("|---|--:|--:|--:|---|--:|--:|---|\n");
    for c in cases {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            c.name,
            ms(c.base_before_secs),
            ms(c.base_after_secs),
            ms(c.head_after_secs),
            c.outcome
                .as_ref()
                .and_then(|o| o.basis.as_deref())
                .unwrap_or("—"),
            ratio(c),
            limit(c),
            decision(c)
        ));
    }
    t.push('\n');
    t.push_str(&next_steps(cases));
    t.push_str(&drift_sentence(cases, store));
    t.push('\n');
    t
}

/// What the decisions assumed about the drift between runs.
fn drift_sentence(cases: &[CaseComparison], store: &Path) -> String {
    let compared: Vec<&CaseComparison> = cases.iter().filter(|c| c.outcome.is_some()).collect();
    if compared.is_empty() && cases.iter().any(|c| c.counts.is_some()) {
        return "Counts compared: they repeat exactly for one binary, so no drift between runs is allowed for (counts.md).".into();
    }
    let known: Vec<usize> = compared
        .iter()
        .filter_map(|c| match c.drift {
            Drift::Store(n) | Drift::History(n) => Some(n),
            Drift::Unknown => None,
        })
        .collect();
    let from_history = compared
        .iter()
        .all(|c| matches!(c.drift, Drift::History(_)));
    if known.len() == compared.len() && !known.is_empty() && from_history {
        format!(
            "Drift between runs: from the history store's runs of these cases ({} to {} runs with A), as `run` would gate B against history.",
            known.iter().min().unwrap_or(&0),
            known.iter().max().unwrap_or(&0)
        )
    } else if known.len() == compared.len() && !known.is_empty() {
        format!(
            "Drift between runs: from the history in `{}` ({} to {} accepted runs with A), as `run` would gate B.",
            store.display(),
            known.iter().min().unwrap_or(&0),
            known.iter().max().unwrap_or(&0)
        )
    } else if known.is_empty() {
        format!(
            "Drift between runs: none known for this device and these specs in `{}` or the history store: the decisions assume no drift between runs, so they are more confident than a gate with history (record runs of the base branch into the store, or `opledger calibrate --accept`).",
            store.display()
        )
    } else {
        format!(
            "Drift between runs: known from `{}` for {} of {} compared cases; the others assume no drift between runs.",
            store.display(),
            known.len(),
            compared.len()
        )
    }
}

/// The first line of every comment `--markdown` writes: a workflow finds its earlier comment by
/// it and updates that one instead of adding one per push.
pub const COMMENT_MARKER: &str = "<!-- opledger-compare -->";

/// A link to `target` for a comment written at `comment`: under `base` when given (a CI
/// artifact URL), else relative to the comment's folder.
fn link_to(target: &Path, comment: &Path, base: Option<&str>) -> String {
    let abs = crate::files::absolute(target);
    let from = crate::files::absolute(
        comment
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    );
    let rel = pathdiff::diff_paths(&abs, &from).unwrap_or(abs);
    let rel = rel.to_string_lossy().replace('\\', "/");
    match base {
        Some(b) => format!(
            "{}/{}",
            b.trim_end_matches('/'),
            rel.trim_start_matches("./")
        ),
        None => rel,
    }
}

/// A short pull-request comment: one verdict, what was compared, the changed cases with their
/// limit and before → after, the reports.
pub fn comment(
    (a, ra): (&Path, &RunResult),
    (b, rb): (&Path, &RunResult),
    cases: &[CaseComparison],
    at: &Path,
    store: &Path,
    link_base: Option<&str>,
    base: Option<&BaseCommit>,
) -> String {
    use super::md_escape;
    let regressions = cases.iter().filter(|c| regressed(c)).count();
    let verdict = opledger_gate::versus::verdict(cases);
    let mut t = format!("{COMMENT_MARKER}\n");
    let what = match (verdict, regressions) {
        (RunStatus::Fail, 0) => "FAIL".to_string(),
        (RunStatus::Fail, n) => format!("{n} REGRESSION{}", if n == 1 { "" } else { "S" }),
        (RunStatus::Inconclusive, _) => "INCONCLUSIVE".to_string(),
        (RunStatus::Pass, _) => "PASS: no regression".to_string(),
    };
    t.push_str(&format!(
        "### opledger: {what} — {} case{} of {} against {}\n\n",
        cases.len(),
        if cases.len() == 1 { "" } else { "s" },
        md_escape(&label(rb)),
        md_escape(&label(ra)),
    ));
    if let Some(base) = base {
        t.push_str(&format!("{}\n\n", md_escape(&base_line(base))));
    }
    t.push_str(&format!(
        "Device `{}` · checklist of the head: {}\n\n",
        md_escape(&rb.device.key),
        rb.checklist
            .iter()
            .map(|c| format!("{} {}", c.mark, c.key))
            .collect::<Vec<_>>()
            .join(" · ")
    ));
    let changed: Vec<&CaseComparison> = cases
        .iter()
        .filter(|c| {
            c.verdict() != RunStatus::Pass
                || c.outcome
                    .as_ref()
                    .is_some_and(|o| o.state == Some(RegressionState::Improved))
        })
        .collect();
    if changed.is_empty() {
        t.push_str("Every case is within its limit.\n\n");
    } else {
        t.push_str("| spec | after: base → head | ratio (95% CI) | limit | decision |\n|---|--:|--:|--:|---|\n");
        for &c in &changed {
            t.push_str(&format!(
                "| {} | {} → {} | {} | {} | {} |\n",
                md_escape(&c.name),
                ms(c.base_after_secs),
                ms(c.head_after_secs),
                ratio(c),
                limit(c),
                md_escape(&decision(c))
            ));
        }
        t.push('\n');
        // A counts regression says where the work moved, function by function.
        let moved: Vec<String> = changed
            .iter()
            .filter(|c| regressed(c))
            .filter_map(|c| {
                let o = c.counts.as_ref().filter(|o| !o.functions.is_empty())?;
                Some(format!(
                    "- {} counts: {}\n",
                    md_escape(&c.name),
                    md_escape(&super::gate::counts_judgement(o))
                ))
            })
            .collect();
        if !moved.is_empty() {
            t.push_str(&moved.concat());
            t.push('\n');
        }
        t.push_str(&next_steps(changed.iter().copied()));
        t.push_str(&reproduce(
            &changed,
            rb,
            base.map(|b| b.branch.as_str()).or(
                // A commit of A's that HEAD descends from is a merge-base of its own.
                (!ra.git_sha.is_empty() && ra.git_sha != "nogit").then_some(ra.git_sha.as_str()),
            ),
        ));
    }
    t.push_str(&drift_sentence(cases, store));
    t.push_str("\n\n");
    t.push_str(&format!(
        "Reports: [base]({}) · [head]({})\n",
        link_to(&a.join(super::output::REPORT), at, link_base),
        link_to(&b.join(super::output::REPORT), at, link_base)
    ));
    t
}
