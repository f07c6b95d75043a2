//! The report: the Markdown rendering of a run with minijinja (`crates/report/templates/report.md.j2` is compiled in; `--template FILE` overrides it).

pub mod chart;
pub mod comment;
pub mod conformance;
pub mod counts;
pub mod dashboard;
pub mod escape;
pub mod format;
pub mod gate;
pub mod history;
pub mod html;
pub mod output;
pub mod repro;
pub mod style;
pub mod svg;
pub mod terminal;
pub mod text;

// The lower crates' modules, reached as `crate::…` in this crate's files.
use opledger_backend as backend;
use opledger_measure as measure;
use opledger_model::device;
use opledger_model::error;
use opledger_model::files;
use opledger_model::ledger;
use opledger_model::spec;
use opledger_model::untrusted;
use opledger_records::baseline;
use opledger_records::store;
use opledger_results as results;
use opledger_results::verdict;

use crate::error::{Error, Result};
use crate::results::{BaselineOutcome, BaselineStatus, RunResult, SpecResult};
use crate::verdict::Status;
pub use escape::{is_bidi_control, markdown as md_escape};
use format::{bytes, duration, rate};
use minijinja::{Environment, Value};
use std::path::Path;

/// The built-in template.
pub const DEFAULT_TEMPLATE: &str = include_str!("../templates/report.md.j2");
/// The short form for CI job summaries (`--summary-to`, `$GITHUB_STEP_SUMMARY`).
pub const SUMMARY_TEMPLATE: &str = include_str!("../templates/summary.md.j2");

fn num(v: f64, digits: Option<usize>) -> String {
    format!("{:.*}", digits.unwrap_or(2), v)
}

fn status_mark(v: Value) -> String {
    let s: Option<Status> = serde_json::to_value(&v)
        .ok()
        .and_then(|j| serde_json::from_value(j).ok());
    s.map_or("?".into(), |s| s.mark().into())
}

/// The minijinja environment with opledger's filters:
/// `num(d)`, `dur` (seconds), `bytes`, `gbps` (bytes/s), `flops` (FLOP/s), `pct`, `sci`, `mark`.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    // Every string rendered is escaped for Markdown: titles, descriptions, paths and messages
    // come from spec files and results files, which may be hostile.
    env.set_formatter(|out, state, value| match value.as_str() {
        // Made safe by a filter (`code`): written as it is.
        Some(s) if value.is_safe() => out.write_str(s).map_err(minijinja::Error::from),
        Some(s) => out.write_str(&md_escape(s)).map_err(minijinja::Error::from),
        None => minijinja::escape_formatter(out, state, value),
    });
    // A template that loops without end (nested loops over a long list) runs out of fuel and
    // fails with an error instead of holding the run.
    env.set_fuel(Some(TEMPLATE_FUEL));
    add_filters(&mut env);
    // `{{ name|code }}`: a code span that shows the name exactly (`<`, backticks and all).
    env.add_filter("code", |v: minijinja::Value| {
        minijinja::Value::from_safe_string(escape::code_span(&v.to_string()))
    });
    // `{{ line|command }}`: a command to copy, outside a table.
    env.add_filter("command", |v: minijinja::Value| {
        minijinja::Value::from_safe_string(escape::command_span(&v.to_string()))
    });
    env
}

/// The number filters every template has, Markdown or HTML.
fn add_filters(env: &mut Environment<'static>) {
    env.add_filter("num", num);
    env.add_filter("dur", duration);
    env.add_filter("bytes", bytes);
    env.add_filter("gbps", |v: f64| rate(v, "B/s"));
    env.add_filter("flops", |v: f64| rate(v, "FLOP/s"));
    env.add_filter("pct", |v: f64| format!("{:.1}%", v * 100.0));
    env.add_filter("sci", |v: f64| format!("{v:.3e}"));
    env.add_filter("mark", status_mark);
    env.add_filter("gpu_state", gpu_state);
    env.add_filter("counted_mark", counted_mark);
    // `{{ n|thousands }}`: 18,448,948; `{{ n|delta }}`: +3,149,952 or -1,024. Anything but a
    // whole number (a field an older archive lacks) is written as it is, not an error.
    env.add_filter("thousands", |v: Value| match i64::try_from(v.clone()) {
        Ok(n) if n < 0 => format!("-{}", format::thousands(n.unsigned_abs())),
        Ok(n) => format::thousands(n.unsigned_abs()),
        Err(_) => v.to_string(),
    });
    env.add_filter("delta", |v: Value| match i64::try_from(v.clone()) {
        Ok(n) => format::delta(n.into()),
        Err(_) => v.to_string(),
    });
    // `{{ n|counted("spec", "specs") }}`: the count with its noun, singular for one.
    env.add_filter("counted", |n: u64, one: String, many: String| {
        format::counted(n, &one, &many)
    });
}

/// A counted sweep point's side against its ledger: `✅ read ×1.004, write ×1.006`, `❌ …`, or
/// `not compared` (a tensor may stay in the cache).
fn counted_mark(v: Value) -> String {
    let Some(c) = serde_json::to_value(&v)
        .ok()
        .and_then(|j| serde_json::from_value::<crate::results::CountedBytes>(j).ok())
    else {
        return String::new();
    };
    let ratios = format!("read ×{:.3}, write ×{:.3}", c.read_ratio, c.write_ratio);
    match c.agrees {
        Some(true) => format!("✅ {ratios}"),
        Some(false) => format!("❌ {ratios}"),
        None => format!("not compared ({ratios})"),
    }
}

/// ` · GPU while sampling: SM clock 1755 of 1980 MHz, 698 W, 71 °C, clocks limited by:
/// sw_power_cap`, or nothing where no state was read (a CPU, an older archive).
fn gpu_state(v: Value) -> String {
    let Some(s) = serde_json::to_value(&v)
        .ok()
        .and_then(|j| serde_json::from_value::<crate::device::DeviceState>(j).ok())
    else {
        return String::new();
    };
    let mut parts = s.figures();
    let limits: Vec<&str> = s.clock_limits.iter().map(|r| r.name()).collect();
    parts.push(format!(
        "clocks limited by: {}",
        if limits.is_empty() {
            "nothing".into()
        } else {
            limits.join(", ")
        }
    ));
    format!(" · GPU while sampling: {}", parts.join(", "))
}

/// Instructions a template may execute: the built-in report of a hundred specs needs well under
/// a tenth of it.
pub const TEMPLATE_FUEL: u64 = 50_000_000;

/// Renders the short summary of a run; `report_path` is where its report.md lies, as the reader
/// of the summary (a CI job page, a shell in the working directory) can open it.
pub fn render_summary(run: &RunResult, report_path: &Path) -> Result<String> {
    let name = "summary.md.j2 (built in)";
    let terr = |e: minijinja::Error| template_error(name, e);
    let mut env = environment();
    env.add_template("summary", SUMMARY_TEMPLATE)
        .map_err(terr)?;
    let ctx = minijinja::context! {
        report_path => report_path.display().to_string(),
        ..context(run)
    };
    env.get_template("summary")
        .map_err(terr)?
        .render(ctx)
        .map_err(terr)
}

/// Reads a user's template (bounded, regular files only) and compiles it, so that a broken one
/// is refused before a run measures anything.
pub fn load_template(p: &Path) -> Result<output::Template> {
    let bytes = crate::files::read_regular(p, crate::files::MAX_TEMPLATE_BYTES, "template")?;
    let name = p.display().to_string();
    let source = String::from_utf8(bytes).map_err(|e| Error::Template {
        name: name.clone(),
        message: format!(
            "not valid UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ),
    })?;
    let mut env = environment();
    env.add_template_owned("report", source.clone())
        .map_err(|e| template_error(&name, e))?;
    Ok(output::Template { name, source })
}

/// Renders a run with the built-in template or the one at `template`.
pub fn render(run: &RunResult, template: Option<&Path>) -> Result<String> {
    match template {
        Some(p) => render_with(run, Some(&load_template(p)?)),
        None => render_with(run, None),
    }
}

/// Renders a run with a loaded template, or the built-in one.
pub fn render_with(run: &RunResult, template: Option<&output::Template>) -> Result<String> {
    match template {
        Some(t) => render_source(run, &t.name, t.source.clone()),
        None => render_source(run, "report.md.j2 (built in)", DEFAULT_TEMPLATE.to_string()),
    }
}

fn template_error(name: &str, e: minijinja::Error) -> Error {
    Error::Template {
        name: name.to_string(),
        message: match e.line() {
            Some(l) => format!("line {l}: {e}"),
            None => e.to_string(),
        },
    }
}

fn render_source(run: &RunResult, name: &str, source: String) -> Result<String> {
    let terr = |e: minijinja::Error| template_error(name, e);
    let mut env = environment();
    env.add_template_owned("report", source).map_err(terr)?;
    let tmpl = env.get_template("report").map_err(terr)?;
    tmpl.render(context(run)).map_err(terr)
}

/// What an INCONCLUSIVE gate does know, in words, and the next step that would decide it: the
/// gate's own account ([`Undecided`](opledger_gate::stats::Undecided)), or for an archive written
/// before the gate recorded one, what its outputs said then (a CI beyond the limit, a runner
/// that cannot PASS; nothing otherwise), so that its report renders as written.
pub fn inconclusive_why(b: &BaselineOutcome, max_regression: f64) -> Option<String> {
    inconclusive_words(b, max_regression, true)
}

/// [`inconclusive_why`] without the next step: what the gate knows only. Where another
/// measurement's gate decided the spec (the time gate set aside by the counts gate), the steps
/// that would decide this one are not needed, and each spec of a run would repeat them.
pub fn inconclusive_reason(b: &BaselineOutcome, max_regression: f64) -> Option<String> {
    inconclusive_words(b, max_regression, false)
}

fn inconclusive_words(b: &BaselineOutcome, max_regression: f64, advice: bool) -> Option<String> {
    use opledger_gate::stats::Undecided;
    let r = b.ratio?;
    let spread = b.spread.as_ref();
    let undecided = match b.undecided {
        Some(u) => u,
        // The gate's own decision, where older outputs had words for it (an INCONCLUSIVE whose
        // whole CI is beyond the limit has a known drift: unknown, it would be a FAIL).
        None => match opledger_gate::stats::undecided(&r, max_regression, spread) {
            u @ (Undecided::LikelyRegression | Undecided::CannotPass) => u,
            Undecided::PastPassLimit | Undecided::DriftUnknown => return None,
        },
    };
    let (reason, next) = undecided_parts(undecided, &r, max_regression, spread);
    Some(if advice { reason + &next } else { reason })
}

/// An [`Undecided`](opledger_gate::stats::Undecided) in words, with the numbers it rests on, in
/// two parts: what the gate knows, and the next step that would decide it (with its leading
/// separator).
fn undecided_parts(
    undecided: opledger_gate::stats::Undecided,
    r: &crate::measure::stats::Estimate,
    max_regression: f64,
    spread: Option<&opledger_gate::stats::Spread>,
) -> (String, String) {
    use opledger_gate::stats::{Spread, Undecided};
    const COUNTS: &str =
        "on counts (`--measure counts`, the CPU backend's kernels), which do not drift";
    let unknown = Spread::unknown();
    let sp = spread.unwrap_or(&unknown);
    let limit = format::limit_percent(max_regression);
    let drift = sp.drift() * 100.0;
    let better = match sp.detectable(0.0) {
        Some(d) => format!(
            "gate on a quieter runner, with more history, at a limit of +{:.0}% or more (the smallest this runner can gate, as `opledger calibrate` measures it), or {COUNTS}",
            d * 100.0
        ),
        None => format!("gate on a quieter runner, with more history, or {COUNTS}"),
    };
    match undecided {
        Undecided::LikelyRegression => (
            format!(
                "slower by {:.0}–{:.0}% (CI), beyond the +{limit}% limit; this runner's run-to-run drift (±{drift:.1}%) is as large, so a regression is likely but not proven at ≤ 1% false alarms",
                (r.lo - 1.0) * 100.0,
                (r.hi - 1.0) * 100.0,
            ),
            format!(": {better}"),
        ),
        Undecided::CannotPass => (
            format!(
                "cannot PASS at +{limit}% on this runner: its run-to-run drift (±{drift:.1}%) eats the whole limit (PASS needs the CI below ×{:.3})",
                sp.pass_limit(max_regression)
            ),
            format!("; {better}"),
        ),
        Undecided::PastPassLimit => (
            format!(
                "the CI reaches ×{:.3}, past the ×{:.3} a PASS needs with this runner's drift (±{drift:.1}% between {} reference runs)",
                r.hi,
                sp.pass_limit(max_regression),
                sp.runs
            ),
            format!(": more pairs (`--min-pairs`) narrow the CI, more reference runs (history, or `opledger calibrate --accept`) raise what a PASS may reach, or gate {COUNTS}"),
        ),
        Undecided::DriftUnknown => (
            format!(
                "the CI (×{:.3} .. ×{:.3}) reaches across the +{limit}% limit and the drift between runs is not known",
                r.lo,
                r.hi
            ),
            format!(": measure more pairs (`--min-pairs`), record more runs to judge against (history, or `opledger calibrate --accept`), or gate {COUNTS}"),
        ),
    }
}

/// The gate's outcome of a spec as a small table: (what, value) rows.
pub fn baseline_rows(s: &SpecResult) -> Vec<(String, String)> {
    use opledger_gate::stats::RegressionState;
    let b = &s.baseline;
    let limit = s.gate.max_regression.0;
    let mut rows = vec![(
        "status".to_string(),
        match b.status {
            BaselineStatus::Missing if b.reference.is_some() => {
                "not enough history yet for this spec on this device"
            }
            BaselineStatus::Missing => {
                "no baseline for this device yet (record one with `run --accept`)"
            }
            BaselineStatus::Compared => "compared",
            BaselineStatus::NotComparable => "not comparable",
            BaselineStatus::Accepted => "accepted: this run is (part of) the baseline now",
        }
        .to_string(),
    )];
    if let Some(r) = gate::reference(b) {
        rows.push(("reference".into(), r));
    }
    let message = gate::message(b);
    if b.status == BaselineStatus::Accepted && !message.is_empty() {
        rows.push(("recorded".into(), message.clone()));
    }
    if let Some(basis) = &b.basis {
        rows.push(("compared".into(), basis.clone()));
    }
    if let Some(r) = b.ratio {
        rows.push((
            "ratio to the baseline (95% CI)".into(),
            format!("×{:.3} ({:.3} .. {:.3})", r.point, r.lo, r.hi),
        ));
    }
    if b.status == BaselineStatus::Compared || b.ratio.is_some() {
        rows.push((
            "limit".into(),
            if gate::threshold_raised(limit, b.threshold) {
                format!(
                    "+{:.1}% (FAIL above +{:.1}%)",
                    limit * 100.0,
                    b.threshold * 100.0
                )
            } else {
                format!("+{:.1}%", limit * 100.0)
            },
        ));
    }
    if let Some(sp) = &b.spread {
        rows.push(("drift between runs".into(), sp.describe(limit)));
    }
    if let Some(g) = gate::guard(b) {
        rows.push(("not judged".into(), g));
    }
    let note = gate::note(b);
    if let Some(state) = b.state {
        let mut d = state.word().to_string();
        if let Some(n) = &note {
            d.push_str(&format!(" ({n})"));
        }
        // The next step is left out where the counts gate decided the spec.
        let aside = s
            .set_aside
            .contains(&opledger_gate::rule::Measurement::Time);
        let why = (state == RegressionState::Inconclusive && note.is_none())
            .then(|| {
                if aside {
                    inconclusive_reason(b, limit)
                } else {
                    inconclusive_why(b, limit)
                }
            })
            .flatten();
        if let Some(why) = why {
            d.push_str(": ");
            d.push_str(&why);
        }
        rows.push(("decision".into(), d));
    } else if b.status == BaselineStatus::NotComparable && !message.is_empty() {
        rows.push(("why".into(), message));
    }
    rows
}

/// What a template sees: the run's results, and `verdict_mark`, each spec's verdict (the one
/// [`SpecResult::verdict`] decides) as its mark, by spec name.
fn context(run: &RunResult) -> Value {
    let mut v = serde_json::to_value(run).unwrap_or(serde_json::Value::Null);
    // The regression check's sentence is written here, from the gate's finding; `set_aside`
    // where the check's gate was set aside because another measurement's gate decided.
    if let Some(specs) = v.get_mut("specs").and_then(|s| s.as_array_mut()) {
        for (sv, s) in specs.iter_mut().zip(&run.specs) {
            let Some(checks) = sv.get_mut("checks").and_then(|c| c.as_array_mut()) else {
                continue;
            };
            for (cv, c) in checks.iter_mut().zip(&s.checks) {
                cv["detail"] = serde_json::Value::from(gate::check_detail(s, c));
                if let Some(words) = gate::set_aside(s, c) {
                    cv["set_aside"] = serde_json::Value::from(words);
                }
            }
        }
    }
    let marks: serde_json::Map<String, serde_json::Value> = run
        .specs
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                serde_json::Value::from(verdict_mark(s.verdict())),
            )
        })
        .collect();
    let gate_rows: serde_json::Map<String, serde_json::Value> = run
        .specs
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                serde_json::to_value(baseline_rows(s)).unwrap_or_default(),
            )
        })
        .collect();
    // The gate's full computation, a clause a line (it runs to thousands of characters).
    let gate_detail: serde_json::Map<String, serde_json::Value> = run
        .specs
        .iter()
        .map(|s| {
            let parts: Vec<serde_json::Value> = clauses(&gate::message(&s.baseline))
                .into_iter()
                .map(serde_json::Value::from)
                .collect();
            (s.name.clone(), serde_json::Value::Array(parts))
        })
        .collect();
    // The counts gate's sentence, where the sides were counted.
    let counts_gate: serde_json::Map<String, serde_json::Value> = run
        .specs
        .iter()
        .filter_map(|s| {
            let o = s.counts_gate.as_ref()?;
            Some((
                s.name.clone(),
                serde_json::Value::from(gate::counts_judgement(o)),
            ))
        })
        .collect();
    // The command that reproduces a regressed case.
    let repro: serde_json::Map<String, serde_json::Value> = run
        .specs
        .iter()
        .filter_map(|s| {
            Some((
                s.name.clone(),
                serde_json::Value::from(repro::for_run(run, s)?),
            ))
        })
        .collect();
    // The specs whose pairs read the read flush where the run's own cases evicted theirs (a
    // worker's side: its process reads, and the built-in side beside it too; a case too large
    // to evict sooner than it reads).
    let read_flush_specs: Vec<serde_json::Value> = run
        .specs
        .iter()
        .filter(|s| {
            run.flush_method == crate::device::FlushMethod::Evict
                && s.samples.as_ref().and_then(|p| p.flush_method)
                    == Some(crate::device::FlushMethod::Read)
        })
        .map(|s| serde_json::Value::from(s.name.clone()))
        .collect();
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "read_flush_specs".into(),
            serde_json::Value::Array(read_flush_specs),
        );
        o.insert("repro".into(), serde_json::Value::Object(repro));
        o.insert("counts_gate".into(), serde_json::Value::Object(counts_gate));
        o.insert("verdict_mark".into(), serde_json::Value::Object(marks));
        o.insert("gate_rows".into(), serde_json::Value::Object(gate_rows));
        o.insert("gate_detail".into(), serde_json::Value::Object(gate_detail));
    }
    Value::from_serialize(v)
}

/// The clauses of a sentence joined by `; ` outside parentheses, one per line of a list.
fn clauses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ';' if depth <= 0 && chars.peek() == Some(&' ') => {
                chars.next();
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

/// The mark of a verdict: ✅ PASS, ❔ INCONCLUSIVE, ❌ FAIL.
pub fn verdict_mark(v: crate::results::RunStatus) -> &'static str {
    match v {
        crate::results::RunStatus::Pass => Status::Pass.mark(),
        crate::results::RunStatus::Inconclusive => Status::Inconclusive.mark(),
        crate::results::RunStatus::Fail => Status::Fail.mark(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_filters() {
        assert_eq!(duration(2.5), "2.500 s");
        assert_eq!(duration(0.0123), "12.300 ms");
        assert_eq!(duration(12.5e-6), "12.50 µs");
        assert_eq!(bytes(268_451_840.0), "256.0 MiB");
        assert_eq!(bytes(100.0), "100 B");
        assert_eq!(rate(12.34e9, "B/s"), "12.34 GB/s");
        assert_eq!(num(1.23456, Some(3)), "1.235");
    }

    #[test]
    fn count_filters_separate_thousands_and_name_one_in_the_singular() {
        let env = environment();
        let out = env
            .render_str(
                "{{ 18448948|thousands }} {{ -1024|thousands }} {{ 3149952|delta }} {{ -8|delta }} [{{ missing|thousands }}] {{ 1|counted('spec', 'specs') }}, {{ 0|counted('check failed', 'checks failed') }}",
                minijinja::context! {},
            )
            .unwrap();
        assert_eq!(
            out,
            "18,448,948 -1,024 +3,149,952 -8 [] 1 spec, 0 checks failed"
        );
    }

    #[test]
    fn markdown_escaping_neutralises_html_newlines_and_links() {
        assert_eq!(
            md_escape("a\n# h <script>x</script> [c](http://e) | \u{1b}[31m"),
            "a # h &lt;script>x&lt;/script> [c]\\(http://e) \\|  [31m"
        );
        assert_eq!(md_escape("# title"), "\\# title");
        assert_eq!(
            md_escape("a\u{202E}b\u{2066}c\u{2069}"),
            "a[U+202E]b[U+2066]c[U+2069]"
        );
        assert_eq!(
            md_escape("[bias_add -> gelu] 95% CI"),
            "[bias_add -> gelu] 95% CI"
        );
        assert_eq!(md_escape("[a](#spec-a)"), "[a](#spec-a)");
    }

    #[test]
    fn a_template_that_loops_without_end_runs_out_of_fuel() {
        let mut env = environment();
        env.add_template_owned(
            "t",
            "{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}{% endfor %}"
                .to_string(),
        )
        .unwrap();
        let e = env.get_template("t").unwrap().render(()).unwrap_err();
        assert!(e.to_string().contains("fuel"), "{e}");
    }

    #[test]
    fn an_inconclusive_gate_says_what_it_knows_and_what_would_decide_it() {
        use crate::measure::stats::Estimate;
        use opledger_gate::stats::{undecided, Spread, Undecided};
        let outcome = |ratio: Estimate, spread: Option<Spread>, recorded: bool| {
            let mut o = BaselineOutcome::missing(String::new(), 0.10);
            o.state = Some(opledger_gate::stats::RegressionState::Inconclusive);
            o.ratio = Some(ratio);
            o.spread = spread;
            o.undecided = recorded.then(|| undecided(&ratio, 0.10, spread.as_ref()));
            o
        };
        // Five runs drifting 6%: the FAIL threshold sits far above +10%.
        let sp = Spread {
            runs: 5,
            log_sd: 0.06,
            noise_factor: 1.0,
        };
        let slow = Estimate {
            point: 1.274,
            lo: 1.160,
            hi: 1.405,
        };
        assert_eq!(
            undecided(&slow, 0.10, Some(&sp)),
            Undecided::LikelyRegression
        );
        let why = inconclusive_why(&outcome(slow, Some(sp), true), 0.10).unwrap();
        assert!(
            why.contains("slower by 16–40% (CI), beyond the +10% limit")
                && why.contains("a regression is likely but not proven"),
            "{why}"
        );
        // Unchanged code on that runner cannot PASS at +10%: the line says why and what would do.
        let same = Estimate {
            point: 0.95,
            lo: 0.90,
            hi: 1.0,
        };
        assert_eq!(undecided(&same, 0.10, Some(&sp)), Undecided::CannotPass);
        let why = inconclusive_why(&outcome(same, Some(sp), true), 0.10).unwrap();
        assert!(
            why.contains("cannot PASS at +10% on this runner")
                && why.contains("the smallest this runner can gate"),
            "{why}"
        );
        // A CI that reaches past what a PASS allows: more pairs, more reference runs, counts.
        let near = Estimate {
            point: 1.014,
            lo: 0.999,
            hi: 1.029,
        };
        let calm = Spread {
            runs: 4,
            log_sd: 0.034,
            noise_factor: 1.0,
        };
        assert_eq!(
            undecided(&near, 0.10, Some(&calm)),
            Undecided::PastPassLimit
        );
        let why = inconclusive_why(&outcome(near, Some(calm), true), 0.10).unwrap();
        assert!(
            why.contains("the CI reaches ×1.029, past the ×")
                && why.contains("between 4 reference runs")
                && why.contains("--min-pairs")
                && why.contains("--measure counts"),
            "{why}"
        );
        // Without a known drift: more pairs, more runs to judge against, counts.
        for sp in [None, Some(Spread::unknown())] {
            assert_eq!(undecided(&near, 0.10, sp.as_ref()), Undecided::DriftUnknown);
            let why = inconclusive_why(&outcome(near, sp, true), 0.10).unwrap();
            assert!(
                why.contains("reaches across the +10% limit")
                    && why.contains("drift between runs is not known")
                    && why.contains("--min-pairs"),
                "{why}"
            );
        }
        // An archive written before the gate recorded its account says what its outputs said
        // then: the first two, and nothing for the others.
        assert!(inconclusive_why(&outcome(slow, Some(sp), false), 0.10)
            .unwrap()
            .contains("likely but not proven"));
        assert!(inconclusive_why(&outcome(same, Some(sp), false), 0.10)
            .unwrap()
            .contains("cannot PASS"));
        assert_eq!(
            inconclusive_why(&outcome(near, Some(calm), false), 0.10),
            None
        );
        assert_eq!(inconclusive_why(&outcome(near, None, false), 0.10), None);
    }
}
