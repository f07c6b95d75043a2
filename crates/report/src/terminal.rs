//! The terminal's account of a run: one line per spec (verdict, before → after, the saving with
//! its CI, the gate in a few words), the failed checks under a failed spec, each kind of warning
//! once, and the summary line. Words only: every decision shown was made by the stages below.

use crate as report;
use crate::format::counted;
use crate::results::{BaselineOutcome, BaselineStatus, RunResult, SpecResult};
use crate::verdict::CheckName;
use crate::verdict::{self, Status};
use indicatif::{ProgressBar, ProgressStyle};
use opledger_gate::stats::RegressionState;
use std::io::IsTerminal;
use std::path::Path;

/// Most distinct warnings the terminal lists (all of them are in the report).
const TERMINAL_WARNINGS: usize = 8;
/// Longest warning line on the terminal, in characters.
const TERMINAL_WARNING_CHARS: usize = 240;

/// The terminal's account of a run: one line per spec (verdict, before → after, saving with its
/// CI, gate), a line per failed check under a failed spec, each distinct warning once, and the
/// summary. The report holds the full text.
/// A new shift of a case's level on the default branch, as `run` reports it.
pub fn print_new_shift(
    spec: &str,
    metric: crate::store::series::Metric,
    l: &crate::store::series::Located,
    limit: f64,
) {
    let pct = |r: f64| format!("{:+.1}%", (r - 1.0) * 100.0);
    // A counted series steps exactly: its size has no interval, and it names its flag.
    let (what, interval, flag) = if metric.counted() {
        (
            format!("the {} cycles", metric.name()),
            String::new(),
            " --metric counts-after",
        )
    } else {
        (
            format!("the {} median", metric.name()),
            format!(" ({} .. {})", pct(l.shift.ratio_lo), pct(l.shift.ratio_hi)),
            "",
        )
    };
    println!(
        "shift: {spec}: {what} moved {}{interval}, beyond the ±{} limit, between commit {} (run {}) and commit {} (run {}); `opledger history {spec} --changes{flag}` shows the series",
        pct(l.shift.ratio),
        super::format::trim_float(limit * 100.0) + "%",
        l.last_before.git_sha,
        l.last_before.run_id,
        l.first_after.git_sha,
        l.first_after.run_id
    );
}

pub fn print_summary(run: &RunResult, dir: &Path) {
    println!();
    let width = run
        .specs
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0)
        .min(40);
    for s in &run.specs {
        println!("{}", spec_line(s, width));
        if s.status == Status::Fail {
            for c in s.checks.iter().filter(|c| c.status == Status::Fail) {
                let detail = if c.name == CheckName::Regression {
                    gate_detail(&s.baseline)
                } else {
                    crate::gate::check_detail(s, c)
                };
                println!("    ❌ {}: {detail}", c.name);
            }
            if let Some(cmd) = crate::repro::for_run(run, s) {
                println!("    to reproduce: {cmd}");
            }
        }
    }
    // Each kind of warning once: warnings that differ only in their figures ("the after samples
    // spread ±6.5%" and "±20.1%") are one line, with the range of the first figure and the count.
    let mut kinds: Vec<(String, Vec<f64>, String, usize)> = Vec::new();
    for s in &run.specs {
        let mut mine: Vec<String> = s.warnings.clone();
        mine.extend(
            s.checks
                .iter()
                .filter(|c| c.status == Status::Warn && c.name != CheckName::Regression)
                .map(|c| format!("{}: {}: {}", s.name, c.name, c.detail)),
        );
        mine.dedup();
        for w in mine {
            let (shape, first) = figure_shape(&w);
            match kinds.iter_mut().find(|k| k.0 == shape) {
                Some(k) => {
                    k.1.extend(first);
                    k.3 += 1;
                }
                None => kinds.push((shape, first.into_iter().collect(), w, 1)),
            }
        }
    }
    if !kinds.is_empty() {
        println!("\nwarnings (full text in the report):");
        for (_, figures, example, n) in kinds.iter().take(TERMINAL_WARNINGS) {
            let mut line: String = example.chars().take(TERMINAL_WARNING_CHARS).collect();
            if line.len() < example.len() {
                line.push('…');
            }
            if *n > 1 {
                let lo = figures.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = figures.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if lo < hi {
                    line.push_str(&format!(" ({n} times, figures {lo}..{hi})"));
                } else {
                    line.push_str(&format!(" ({n} times)"));
                }
            }
            println!("  ⚠️ {line}");
        }
        if kinds.len() > TERMINAL_WARNINGS {
            println!("  … and {} more kinds", kinds.len() - TERMINAL_WARNINGS);
        }
    }
    let v = &run.verdict;
    println!(
        "\n{}: {}: {} pass, {} fail, {} inconclusive · {} · {} · {} [{}] · {:.0} s",
        v.status,
        counted(run.specs.len() as u64, "spec", "specs"),
        v.specs_passed,
        v.specs_failed,
        v.inconclusive,
        counted(v.checks_failed as u64, "check failed", "checks failed"),
        counted(v.warnings as u64, "warning", "warnings"),
        run.device.key,
        run.backend,
        run.wall_secs
    );
    println!("report: {}", dir.join(super::output::REPORT).display());
}

/// A warning with its figures masked (what makes two warnings the same kind), and its first
/// figure.
fn figure_shape(w: &str) -> (String, Option<f64>) {
    let mut shape = String::with_capacity(w.len());
    let mut first = None;
    let mut number = String::new();
    let flush = |number: &mut String, shape: &mut String, first: &mut Option<f64>| {
        if !number.is_empty() {
            if first.is_none() {
                *first = number.parse::<f64>().ok();
            }
            shape.push('#');
            number.clear();
        }
    };
    for c in w.chars() {
        if c.is_ascii_digit() || (c == '.' && !number.is_empty()) {
            number.push(c);
        } else {
            flush(&mut number, &mut shape, &mut first);
            shape.push(c);
        }
    }
    flush(&mut number, &mut shape, &mut first);
    (shape, first)
}

/// `PASS  name  before 1.23 ms → after 0.45 ms  saving 63.4% [61.0, 65.2]  gate: …`
fn spec_line(s: &SpecResult, width: usize) -> String {
    let status = s.verdict().word();
    let times = match (&s.before.summary, &s.after.summary, &s.time_saving) {
        (Some(b), Some(a), Some(t)) => format!(
            "{} {} → {} {}  saving {:.1}% [{:.1}, {:.1}]{}",
            s.before.variant.name(),
            short_duration(b.median_secs),
            s.after.variant.name(),
            short_duration(a.median_secs),
            t.point * 100.0,
            t.lo * 100.0,
            t.hi * 100.0,
            if verdict::is_slower(t) {
                format!(
                    "  ⚠️ SLOWER: {} takes longer than {}",
                    s.after.variant.name(),
                    s.before.variant.name()
                )
            } else {
                String::new()
            }
        ),
        // The first line of an error: its detail (a worker's output, say) is under the spec.
        _ => match (&s.error, &s.counts_gate) {
            (Some(e), _) => format!("error: {}", e.lines().next().unwrap_or_default()),
            (None, Some(o)) => counts_saving(s, o),
            (None, None) => "not measured".into(),
        },
    };
    let counts = |o: &crate::results::CountsGateOutcome| {
        format!("{}{}", crate::gate::counts_short(o), counts_against(o))
    };
    let time = gate_short(&s.baseline, s.gate.max_regression.0);
    let gate = match (&s.time_saving, &s.counts_gate) {
        // Counts alone: the counts gate is the gate.
        (None, Some(o)) => counts(o),
        // The time gate could not decide where counts did: set aside, said so.
        // The time gate could not decide where counts did: set aside, said so in a few words
        // (its advice is for a spec that nothing decided).
        (Some(_), Some(o))
            if s.set_aside
                .contains(&opledger_gate::rule::Measurement::Time) =>
        {
            // What kept it from deciding, where the drift guard says so (machine state).
            let why = report::gate::guard_moved(&s.baseline).unwrap_or_else(|| {
                let ratio = s
                    .baseline
                    .ratio
                    .map(|r| format!(" ×{:.3} [{:.3}, {:.3}]", r.point, r.lo, r.hi))
                    .unwrap_or_default();
                let limit = s.gate.max_regression.0;
                // Where the drift between runs is known, the bar a PASS needed lies below the
                // spec's limit: a CI wholly under +10% can still be INCONCLUSIVE, and says why.
                match s.baseline.spread.filter(|sp| sp.drift() > 0.0) {
                    Some(sp) => format!(
                        "inconclusive{ratio}, a PASS needs it below ×{:.3}",
                        sp.pass_limit(limit)
                    ),
                    None => format!("inconclusive{ratio} vs +{:.1}%", limit * 100.0),
                }
            });
            format!(
                "time not judged ({why}: the counts gate decided), counts: {}",
                counts(o)
            )
        }
        (Some(_), Some(o))
            if s.set_aside
                .contains(&opledger_gate::rule::Measurement::Counts) =>
        {
            format!("{time}, counts not judged ({})", counts(o))
        }
        (Some(_), Some(o)) => format!("{time}, counts: {}", counts(o)),
        _ => time,
    };
    format!("{status:<12} {:<width$}  {times}  gate: {gate}", s.name)
}

/// Which counted run the counts gate judged against, when it is not the counts baseline.
fn counts_against(o: &crate::results::CountsGateOutcome) -> String {
    use crate::results::{CountsState, GateReference};
    if matches!(o.state, CountsState::NoBaseline | CountsState::Accepted) {
        return String::new();
    }
    match &o.reference {
        Some(GateReference::MergeBase {
            commit: Some(c), ..
        }) => format!(" · vs the counted run at {}", &c[..c.len().min(10)]),
        Some(GateReference::History { branch, .. }) => format!(
            " · vs the newest counted run of {}",
            branch.as_deref().unwrap_or("every branch")
        ),
        _ => String::new(),
    }
}

/// `counts: unfused 22.4 M cycles → fused 10.6 M cycles  saving 52.8%`.
fn counts_saving(s: &SpecResult, o: &crate::results::CountsGateOutcome) -> String {
    let value = |c: &crate::measure::counts::SideCounts| {
        c.counts().map_or_else(
            || "—".to_string(),
            |c| format!("{:.1} M", c.metric(o.metric) as f64 / 1e6),
        )
    };
    let Some(c) = &s.counts else {
        return "not counted".into();
    };
    format!(
        "counts: {} {} → {} {} {}{}{}",
        c.before_variant,
        value(&c.before),
        c.after_variant,
        value(&c.after),
        o.metric.as_str(),
        o.saving
            .map(|v| format!("  saving {:.1}%", v * 100.0))
            .unwrap_or_default(),
        c.counted_workload
            .as_ref()
            .map(|w| format!(" (counted at {w})"))
            .unwrap_or_default()
    )
}

fn short_duration(secs: f64) -> String {
    if secs >= 1.0 {
        format!("{secs:.3} s")
    } else if secs >= 1e-3 {
        format!("{:.3} ms", secs * 1e3)
    } else {
        format!("{:.2} µs", secs * 1e6)
    }
}

/// The gate's result in a few words: `pass ×0.97`, `REGRESSION ×1.23 > +10%`, `no baseline`,
/// and the smallest slowdown the baseline detects where it is known.
fn gate_short(b: &BaselineOutcome, max_regression: f64) -> String {
    let core = gate_state_short(b, max_regression);
    // Which runs the gate judged against, when they are not the accepted baseline.
    let against = match (&b.reference, b.state) {
        (Some(crate::results::GateReference::History { runs, branch, .. }), Some(_)) => format!(
            " · vs the newest {runs} runs of {}",
            branch.as_deref().unwrap_or("every branch")
        ),
        (
            Some(crate::results::GateReference::MergeBase {
                commit: Some(c),
                runs,
                ..
            }),
            Some(_),
        ) => format!(
            " · vs {} up to {}",
            counted(*runs as u64, "run", "runs"),
            &c[..c.len().min(10)]
        ),
        _ => String::new(),
    };
    format!("{core}{against}")
}

fn gate_state_short(b: &BaselineOutcome, max_regression: f64) -> String {
    let ratio = b
        .ratio
        .map(|r| format!("×{:.3}", r.point))
        .unwrap_or_default();
    let detects = b
        .spread
        .and_then(|sp| sp.detectable(max_regression))
        .map(|d| format!(", detects ≥ +{:.0}%", d * 100.0))
        .unwrap_or_default();
    let note_text = report::gate::note(b);
    // The guard's full advice is the report's; one line per spec says what moved.
    let note = report::gate::guard_short(b)
        .or_else(|| note_text.clone())
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    match (b.status, b.state) {
        (BaselineStatus::Accepted, None) => "accepted (first baseline)".into(),
        (BaselineStatus::Accepted, _) => format!("{} {ratio}, accepted", state_word(b.state)),
        (_, Some(RegressionState::Fail)) => {
            format!("REGRESSION {ratio} > +{:.1}%{detects}", b.threshold * 100.0)
        }
        (_, Some(RegressionState::Inconclusive)) => match b.ratio {
            Some(r) if note_text.is_none() => {
                let mut line = format!(
                    "inconclusive {ratio} [{:.3}, {:.3}] vs +{:.1}%{detects}",
                    r.lo,
                    r.hi,
                    max_regression * 100.0
                );
                if let Some(why) = report::inconclusive_why(b, max_regression) {
                    line.push_str(" — ");
                    line.push_str(&why);
                }
                line
            }
            _ => format!(
                "inconclusive{}{note}",
                if ratio.is_empty() {
                    String::new()
                } else {
                    format!(" {ratio}")
                }
            ),
        },
        (_, Some(state)) => format!("{} {ratio}{detects}", state_word(Some(state))),
        (BaselineStatus::NotComparable, None) => "not comparable".into(),
        _ => match &b.reference {
            Some(crate::results::GateReference::History {
                runs,
                by_default: true,
                ..
            }) => format!(
                "no baseline (history: {runs} of {} runs needed)",
                opledger_gate::stats::POOL_MIN_RUNS
            ),
            _ => "no baseline".into(),
        },
    }
}

fn state_word(s: Option<RegressionState>) -> &'static str {
    s.map_or("", RegressionState::word)
}

/// A failed gate in one sentence: which ratio, its CI, and the threshold it crossed.
fn gate_detail(b: &BaselineOutcome) -> String {
    match b.ratio {
        Some(r) => format!(
            "{} ratio {:.3} (95% CI {:.3} .. {:.3}) against the baseline, threshold +{:.1}%",
            b.basis.as_deref().unwrap_or("after time"),
            r.point,
            r.lo,
            r.hi,
            b.threshold * 100.0
        ),
        None => report::gate::judgement(b),
    }
}

/// The line that says a spec's counts ended, the `k`th of `n` (counts end in any order, side
/// by side), and how long they took; a failure is said with the spec's result.
pub fn counted_line(name: &str, (k, n): (usize, usize), secs: f64, failed: bool) -> String {
    format!(
        "opledger: counted {name} ({k} of {n}) in {secs:.1} s{}",
        if failed { ": failed (below)" } else { "" }
    )
}

/// Progress on stderr: a bar on a terminal; plain lines elsewhere (CI logs, pipes), one per
/// spec, so that a log shows where a run stood without control characters.
pub struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
}

impl Progress {
    pub fn new(total: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total as u64);
            if let Ok(style) =
                ProgressStyle::with_template("[{bar:24}] {pos}/{len} specs {elapsed} {wide_msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        Progress { bar, total }
    }

    /// A line of its own, printed above the bar.
    pub fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub fn start_spec(&self, index: usize, name: &str, desc: &str) {
        match &self.bar {
            Some(b) => {
                b.set_position(index as u64);
                b.set_message(format!("{name} — {desc}"));
            }
            None => eprintln!("opledger: [{}/{}] {name} — {desc}", index + 1, self.total),
        }
    }

    /// The `k`th of `n` specs' counts ended (see [`counted_line`]).
    pub fn counted(&self, name: &str, (k, n): (usize, usize), secs: f64, failed: bool) {
        self.say(&counted_line(name, (k, n), secs, failed));
    }

    pub fn pairs(&self, name: &str, done: usize, max: usize) {
        if let Some(b) = &self.bar {
            b.set_message(format!("{name}: {done}/{max} pairs"));
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_that_differ_in_figures_only_are_one_kind() {
        let (a, fa) = figure_shape("the after samples spread ±6.5% (median)");
        let (b, fb) = figure_shape("the after samples spread ±20.1% (median)");
        assert_eq!(a, b);
        assert_eq!((fa, fb), (Some(6.5), Some(20.1)));
        assert_ne!(
            a,
            figure_shape("the before samples spread ±6.5% (median)").0
        );
        assert_eq!(
            figure_shape("no figure here."),
            ("no figure here.".into(), None)
        );
    }
}
