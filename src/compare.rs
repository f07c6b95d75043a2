//! `opledger compare A B`: two archived runs side by side, B judged against A with the live
//! gate's own decision (`gate::Gate::judge`), as a Markdown table and, with `--markdown`,
//! a pull-request comment.
//!
//! The drift between runs is what lets the gate tell a regression from noise, and one run (A)
//! knows none. So the reference is what `run` would have gated B against had A been accepted:
//! the baseline store's history of this device and spec (`--baselines`) with A joined to it (or
//! as it is, when A is one of its accepted runs). With no history in the store, the decision
//! rests on A alone and says that it assumes no drift between runs.

use crate::baseline::{self, BaselineFile};
use crate::error::{Error, ExitCode, Result};
use crate::results::{RunResult, RunStatus, SpecResult};
use crate::verdict::{RegressionState, POOL_MIN_RUNS};
use std::path::{Path, PathBuf};

/// What `compare` is told besides the two runs.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    /// A pull-request comment to write.
    pub markdown: Option<PathBuf>,
    /// The baselines store whose history gives the drift between runs.
    pub baselines: PathBuf,
    /// An INCONCLUSIVE case exits 1.
    pub fail_on_inconclusive: bool,
    /// Links in the comment start here (a CI artifact URL) instead of being relative to it.
    pub link_base: Option<String>,
}

/// Where the drift the decision allows for came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    /// The store's history: this many accepted runs (A among them, or joined to them).
    Store(usize),
    /// None known: one run (A) as the reference.
    Unknown,
}

/// One case of B against A.
#[derive(Debug, Clone)]
pub struct CaseComparison {
    pub name: String,
    pub base_before_secs: Option<f64>,
    pub base_after_secs: Option<f64>,
    pub head_after_secs: Option<f64>,
    pub outcome: Option<crate::results::BaselineOutcome>,
    pub drift: Drift,
    /// B's own verdict for the case (a check that failed in B fails the case).
    pub head_verdict: RunStatus,
    /// Why it was not compared, when it was not.
    pub not_compared: Option<&'static str>,
}

impl CaseComparison {
    /// The case's decision: FAIL (a regression, or a check failed in B), INCONCLUSIVE, PASS.
    pub fn verdict(&self) -> RunStatus {
        let gate = match self.outcome.as_ref().and_then(|o| o.state) {
            Some(RegressionState::Fail) => RunStatus::Fail,
            Some(RegressionState::Inconclusive) => RunStatus::Inconclusive,
            _ => RunStatus::Pass,
        };
        [gate, self.head_verdict]
            .into_iter()
            .max_by_key(|v| match v {
                RunStatus::Pass => 0,
                RunStatus::Inconclusive => 1,
                RunStatus::Fail => 2,
            })
            .unwrap_or(RunStatus::Pass)
    }
}

/// The baseline B's case is judged against: A joined to the store's history for this device
/// and spec (as `opledger accept A` would make it), or A alone.
fn reference(
    sa: &SpecResult,
    ra: &RunResult,
    device_key: &str,
    store: &Path,
) -> Result<Option<(BaselineFile, Drift)>> {
    let stored = if store.is_dir() {
        baseline::find(store, &ra.device, &sa.name)?
            .baseline
            .filter(|b| b.workload == sa.workload && b.device.key == device_key)
    } else {
        None
    };
    // A is one of the accepted runs when an entry of the history is its: the same time, commit
    // and medians (runs a second apart share the time, so the medians tell them apart).
    let a_in = |b: &BaselineFile| {
        let (Some(before), Some(after)) = (sa.before.summary, sa.after.summary) else {
            return false;
        };
        b.history.iter().any(|h| {
            h.recorded_utc == ra.started_utc
                && h.git_sha == ra.git_sha
                && h.before_median_secs == before.median_secs
                && h.after_median_secs == after.median_secs
        })
    };
    let base = match &stored {
        Some(b) if a_in(b) => Some(b.clone()),
        old => crate::gate::accept::baseline_of(
            sa,
            &ra.device,
            &ra.ceilings,
            &ra.measure,
            &ra.started_utc,
            &ra.git_sha,
            old.as_ref(),
        ),
    };
    Ok(base.map(|b| {
        let drift = if stored.is_some() && b.history.len() >= POOL_MIN_RUNS {
            Drift::Store(b.history.len())
        } else {
            Drift::Unknown
        };
        (b, drift)
    }))
}

/// `opledger compare A B`: B against A, case by case, with the gate's decision. Exit 1 when a
/// case regressed (or, with `fail_on_inconclusive`, could not be decided).
pub fn compare_runs(a: &Path, b: &Path, opts: &CompareOptions) -> Result<ExitCode> {
    let (ra, rb) = (crate::archive::load(a)?.run, crate::archive::load(b)?.run);
    if !rb
        .specs
        .iter()
        .any(|sb| ra.specs.iter().any(|sa| sa.name == sb.name))
    {
        return Err(Error::Usage(format!(
            "{} and {} have no spec in common: nothing to compare",
            a.display(),
            b.display()
        )));
    }
    let mut cases = Vec::new();
    for sb in &rb.specs {
        let mut c = CaseComparison {
            name: sb.name.clone(),
            base_before_secs: None,
            base_after_secs: None,
            head_after_secs: sb.after.summary.map(|s| s.median_secs),
            outcome: None,
            drift: Drift::Unknown,
            head_verdict: if sb.status == crate::verdict::Status::Fail {
                RunStatus::Fail
            } else {
                RunStatus::Pass
            },
            not_compared: None,
        };
        let Some(sa) = ra.specs.iter().find(|s| s.name == sb.name) else {
            c.not_compared = Some("only in B");
            cases.push(c);
            continue;
        };
        c.base_before_secs = sa.before.summary.map(|s| s.median_secs);
        c.base_after_secs = sa.after.summary.map(|s| s.median_secs);
        let Some((base, drift)) = reference(sa, &ra, &ra.device.key, &opts.baselines)? else {
            c.not_compared = Some("not measured in A");
            cases.push(c);
            continue;
        };
        let gate = crate::gate::Gate {
            baseline: Some(&base),
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
    print!("{}", table(&ra, &rb, &cases, &opts.baselines));
    if let Some(path) = &opts.markdown {
        let text = comment(
            (a, &ra),
            (b, &rb),
            &cases,
            path,
            &opts.baselines,
            opts.link_base.as_deref(),
        );
        crate::files::write_atomic(path, text.as_bytes())?;
    }
    let failed = cases.iter().any(|c| c.verdict() == RunStatus::Fail);
    let undecided = cases.iter().any(|c| c.verdict() == RunStatus::Inconclusive);
    Ok(if failed || (opts.fail_on_inconclusive && undecided) {
        ExitCode::GateFailed
    } else {
        ExitCode::Pass
    })
}

/// The run's name in a title: its commit when it has one, its run id otherwise.
fn label(r: &RunResult) -> String {
    if r.git_sha.is_empty() || r.git_sha == "nogit" {
        format!("run {}", r.run_id)
    } else {
        format!("{}{}", r.git_sha, if r.git_dirty { " (dirty)" } else { "" })
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or("—".to_string(), |t| format!("{:.3} ms", t * 1e3))
}

/// The decision in words, for a table cell.
fn decision(c: &CaseComparison) -> String {
    if let Some(why) = c.not_compared {
        return why.to_string();
    }
    let Some(o) = &c.outcome else {
        return "not comparable".into();
    };
    let faster = o.ratio.is_some_and(|r| r.hi < 1.0);
    let gate = match o.state {
        Some(RegressionState::Fail) => "REGRESSION".to_string(),
        Some(RegressionState::Improved) => "improved".to_string(),
        Some(RegressionState::Inconclusive) => match (o.ratio, &crate::report::gate::note(o)) {
            (_, Some(n)) => format!("INCONCLUSIVE ({n})"),
            (Some(r), None) if r.lo > 1.0 + o.threshold.max(0.0) => {
                "INCONCLUSIVE (slower beyond the limit, but by no more than the drift allows)"
                    .to_string()
            }
            _ => "INCONCLUSIVE".to_string(),
        },
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

fn ratio(c: &CaseComparison) -> String {
    c.outcome
        .as_ref()
        .and_then(|o| o.ratio)
        .map_or("—".into(), |r| {
            format!("{:.3} ({:.3} .. {:.3})", r.point, r.lo, r.hi)
        })
}

fn limit(c: &CaseComparison) -> String {
    c.outcome
        .as_ref()
        .map_or("—".into(), |o| format!("+{:.0}%", o.threshold * 100.0))
}

/// The terminal's table: every case of B.
fn table(ra: &RunResult, rb: &RunResult, cases: &[CaseComparison], store: &Path) -> String {
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
    t.push_str(&drift_sentence(cases, store));
    t.push('\n');
    t
}

/// What the decisions assumed about the drift between runs.
fn drift_sentence(cases: &[CaseComparison], store: &Path) -> String {
    let compared: Vec<&CaseComparison> = cases.iter().filter(|c| c.outcome.is_some()).collect();
    let known: Vec<usize> = compared
        .iter()
        .filter_map(|c| match c.drift {
            Drift::Store(n) => Some(n),
            Drift::Unknown => None,
        })
        .collect();
    if known.len() == compared.len() && !known.is_empty() {
        format!(
            "Drift between runs: from the history in `{}` ({} to {} accepted runs with A), as `run` would gate B.",
            store.display(),
            known.iter().min().unwrap_or(&0),
            known.iter().max().unwrap_or(&0)
        )
    } else if known.is_empty() {
        format!(
            "Drift between runs: none known for this device and these specs in `{}`: the decisions assume no drift between runs, so they are more confident than a gate with history (record it with `opledger calibrate --accept`, or pass `--baselines DIR`).",
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
    let abs = crate::archive::absolute(target);
    let from = crate::archive::absolute(
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
fn comment(
    (a, ra): (&Path, &RunResult),
    (b, rb): (&Path, &RunResult),
    cases: &[CaseComparison],
    at: &Path,
    store: &Path,
    link_base: Option<&str>,
) -> String {
    use crate::report::md_escape;
    let regressions = cases
        .iter()
        .filter(|c| {
            c.outcome
                .as_ref()
                .is_some_and(|o| o.state == Some(RegressionState::Fail))
        })
        .count();
    let verdict = if cases.iter().any(|c| c.verdict() == RunStatus::Fail) {
        RunStatus::Fail
    } else if cases.iter().any(|c| c.verdict() == RunStatus::Inconclusive) {
        RunStatus::Inconclusive
    } else {
        RunStatus::Pass
    };
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
        for c in changed {
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
    }
    t.push_str(&drift_sentence(cases, store));
    t.push_str("\n\n");
    t.push_str(&format!(
        "Reports: [base]({}) · [head]({})\n",
        link_to(&a.join("report.md"), at, link_base),
        link_to(&b.join("report.md"), at, link_base)
    ));
    t
}
