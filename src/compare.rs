//! `opledger compare A B`: two archived runs side by side, run A playing the baseline of run B
//! with the live gate's own comparison, as a Markdown table.

use crate::error::{Error, ExitCode, Result};
use std::path::Path;

/// `opledger compare A B`: run A plays the baseline of run B, spec by spec, with the same
/// comparison as the live gate (device and workload must match, ratio of medians with a
/// bootstrap CI, the spec's threshold). Exit 1 when a spec regressed.
pub fn compare_runs(a: &Path, b: &Path, markdown: Option<&Path>) -> Result<ExitCode> {
    use crate::verdict::RegressionState;
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
    println!(
        "# opledger compare\n\n`{}` ({}) → `{}` ({})\n",
        ra.run_id, ra.git_sha, rb.run_id, rb.git_sha
    );
    println!(
        "| spec | before (A) | after (A) | after (B) | compared | B vs A ratio (95% CI) | threshold | decision |"
    );
    println!("|---|--:|--:|--:|---|--:|--:|---|");
    let mut regressed = 0;
    // The rows a pull-request comment shows: the cases whose decision is not "within threshold".
    let mut changed: Vec<String> = Vec::new();
    for sb in &rb.specs {
        let Some(sa) = ra.specs.iter().find(|s| s.name == sb.name) else {
            println!("| {} | — | — | — | — | — | — | only in B |", sb.name);
            continue;
        };
        let base = crate::baseline::from_result(
            sa,
            &ra.device,
            &ra.ceilings,
            &ra.measure,
            &ra.started_utc,
            &ra.git_sha,
            None,
        );
        let Some(base) = base else {
            println!(
                "| {} | — | — | — | — | — | — | not measured in A |",
                sb.name
            );
            continue;
        };
        let (outcome, _) = crate::baseline::compare_passes(
            &base,
            a,
            sb,
            &rb.device,
            &rb.ceilings,
            rb.measure.bootstrap_resamples,
            rb.measure.seed,
        );
        let ms = |v: Option<f64>| v.map_or("—".to_string(), |t| format!("{:.3} ms", t * 1e3));
        // The decision says what the ratio shows: a raw-time speedup that the after/before
        // comparison does not confirm is the machine (or shared code) being faster.
        let faster = outcome.ratio.is_some_and(|r| r.hi < 1.0);
        let decision = match outcome.state {
            Some(RegressionState::Fail) => {
                regressed += 1;
                "REGRESSION"
            }
            Some(RegressionState::Improved) => "improved",
            Some(RegressionState::Inconclusive) => "inconclusive",
            Some(RegressionState::Pass) if faster => {
                "within threshold (faster in raw time only: the machine or code both variants share)"
            }
            Some(RegressionState::Pass) => "within threshold",
            None => "not comparable",
        };
        let ratio = outcome.ratio.map_or("—".into(), |r| {
            format!("{:.3} ({:.3} .. {:.3})", r.point, r.lo, r.hi)
        });
        if !decision.starts_with("within threshold") {
            changed.push(format!(
                "| {} | {} | {} | {ratio} | {decision} |",
                crate::report::md_escape(&sb.name),
                ms(sa.after.summary.map(|s| s.median_secs)),
                ms(sb.after.summary.map(|s| s.median_secs)),
            ));
        }
        println!(
            "| {} | {} | {} | {} | {} | {ratio} | +{:.0}% | {decision} |",
            sb.name,
            ms(sa.before.summary.map(|s| s.median_secs)),
            ms(sa.after.summary.map(|s| s.median_secs)),
            ms(sb.after.summary.map(|s| s.median_secs)),
            outcome.basis.as_deref().unwrap_or("—"),
            outcome.threshold * 100.0
        );
    }
    if let Some(path) = markdown {
        let text = comment(a, b, &ra, &rb, regressed, &changed);
        crate::files::write_atomic(path, text.as_bytes())?;
    }
    Ok(if regressed == 0 {
        ExitCode::Pass
    } else {
        ExitCode::GateFailed
    })
}

/// The first line of every comment `--markdown` writes: a workflow finds its earlier comment by
/// it and updates that one instead of adding one per push.
pub const COMMENT_MARKER: &str = "<!-- opledger-compare -->";

/// A short pull-request comment: the verdict, B's checklist, the changed cases, the reports.
fn comment(
    a: &Path,
    b: &Path,
    ra: &crate::results::RunResult,
    rb: &crate::results::RunResult,
    regressed: usize,
    changed: &[String],
) -> String {
    let mut t = format!("{COMMENT_MARKER}\n");
    t.push_str(&format!(
        "### opledger: {} — {} spec{} of `{}` against `{}`\n\n",
        if regressed > 0 {
            format!(
                "{regressed} REGRESSION{}",
                if regressed == 1 { "" } else { "S" }
            )
        } else {
            "no regression".into()
        },
        rb.specs.len(),
        if rb.specs.len() == 1 { "" } else { "s" },
        crate::report::md_escape(&rb.git_sha),
        crate::report::md_escape(&ra.git_sha),
    ));
    t.push_str(&format!(
        "Device `{}` · run verdict {} · checklist: {}\n\n",
        crate::report::md_escape(&rb.device.key),
        rb.verdict.status,
        rb.checklist
            .iter()
            .map(|c| format!("{} {}", c.mark, c.key))
            .collect::<Vec<_>>()
            .join(" · ")
    ));
    if changed.is_empty() {
        t.push_str("Every case is within its threshold.\n\n");
    } else {
        t.push_str("| spec | after (base) | after (head) | ratio (95% CI) | decision |\n|---|--:|--:|--:|---|\n");
        for row in changed {
            t.push_str(row);
            t.push('\n');
        }
        t.push('\n');
    }
    t.push_str(&format!(
        "Reports: base `{}`, head `{}`\n",
        a.join("report.md").display(),
        b.join("report.md").display()
    ));
    t
}
