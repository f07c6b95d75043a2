//! HTML pages: the report of a run (`report.html`, the same content as `report.md` with charts a
//! person can hover) and the pages of the history dashboard (`opledger site`). One minijinja
//! environment with HTML auto-escaping renders them all from templates compiled into the binary
//! (`crates/report/templates/html/`); the CSS and the small script are inlined, and every page carries a
//! Content-Security-Policy that forbids loading anything, so that a page opened from a CI
//! artifact or `file://` asks no host for anything even if a value in it was hostile.

use crate::error::{Error, Result};
use crate::results::RunResult;
use minijinja::{AutoEscape, Environment, Value};

/// The templates, by name: the page frame, the report, the dashboard's index and case pages,
/// the index of a merged run of several devices.
const TEMPLATES: [(&str, &str); 5] = [
    ("base.html", include_str!("../templates/html/base.html.j2")),
    (
        "report.html",
        include_str!("../templates/html/report.html.j2"),
    ),
    (
        "index.html",
        include_str!("../templates/html/index.html.j2"),
    ),
    ("case.html", include_str!("../templates/html/case.html.j2")),
    (
        "merged.html",
        include_str!("../templates/html/merged.html.j2"),
    ),
];
/// The script every page inlines: tooltips for focused or hovered chart points, sortable tables.
pub const SCRIPT: &str = include_str!("../templates/html/page.js");

/// The file name of the HTML report inside an archive.
pub const REPORT_HTML: &str = "report.html";

pub use super::escape::html as escape;

/// A status as a small badge: a sign and its word (the page needs no emoji font).
pub fn badge(status: &str) -> String {
    let (sign, word) = match status.to_ascii_lowercase().as_str() {
        "pass" => ("✓", "pass"),
        "fail" => ("✗", "fail"),
        "inconclusive" => ("?", "inconclusive"),
        "warn" => ("!", "warn"),
        _ => ("–", "skip"),
    };
    format!("<span class=\"m {word}\" title=\"{word}\">{sign}<span class=\"word\"> {word}</span></span>")
}

/// The marks the Markdown sentences carry, as badges.
const MARKS: [(&str, &str); 5] = [
    ("✅", "pass"),
    ("❌", "fail"),
    ("❔", "inconclusive"),
    ("⚠\u{FE0F}", "warn"),
    ("⚠", "warn"),
];

/// A sentence of the report as HTML: escaped, with its two pieces of Markdown the outputs write
/// turned into elements: `` `code` `` and links to the report's own sections `[name](#spec-…)`.
/// Nothing else can become markup.
pub fn inline(text: &str) -> String {
    let mut o = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(i) = rest.find(['`', '[', '✅', '❌', '❔', '⚠']) {
        if let Some((mark, word)) = MARKS.iter().find(|(m, _)| rest[i..].starts_with(m)) {
            o.push_str(&escape(&rest[..i]));
            o.push_str(&badge(word));
            rest = &rest[i + mark.len()..];
            continue;
        }
        o.push_str(&escape(&rest[..i]));
        let tail = &rest[i..];
        let first = tail.chars().next().map_or(1, char::len_utf8);
        if let Some(body) = tail.strip_prefix('`') {
            if let Some(end) = body.find('`') {
                o.push_str(&format!("<code>{}</code>", escape(&body[..end])));
                rest = &body[end + 1..];
                continue;
            }
        } else if let Some((label, after)) =
            tail.strip_prefix('[').and_then(|t| t.split_once("](#"))
        {
            if let Some((anchor, after)) = after.split_once(')') {
                let ok = !label.contains(['[', ']'])
                    && !anchor.is_empty()
                    && anchor
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
                if ok {
                    o.push_str(&format!(
                        "<a href=\"#{}\">{}</a>",
                        escape(anchor),
                        escape(label)
                    ));
                    rest = after;
                    continue;
                }
            }
        }
        o.push_str(&escape(&tail[..first]));
        rest = &tail[first..];
    }
    o.push_str(&escape(rest));
    o
}

/// [`environment`], made once per process: a dashboard renders hundreds of pages, and parsing
/// the templates again for each cost more than drawing it.
fn shared_environment() -> Result<&'static Environment<'static>> {
    static ENV: std::sync::OnceLock<Environment<'static>> = std::sync::OnceLock::new();
    if let Some(env) = ENV.get() {
        return Ok(env);
    }
    let env = environment()?;
    Ok(ENV.get_or_init(|| env))
}

/// The environment every HTML page renders in: auto-escaping, the report's number filters, and
/// `inline` (a sentence with its code spans and section links).
pub fn environment() -> Result<Environment<'static>> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_formatter(|out, state, value| {
        if !value.is_safe() {
            if let Some(s) = value.as_str() {
                return out.write_str(&escape(s)).map_err(minijinja::Error::from);
            }
        }
        minijinja::escape_formatter(out, state, value)
    });
    env.set_fuel(Some(super::TEMPLATE_FUEL));
    super::add_filters(&mut env);
    env.add_filter("inline", |s: String| Value::from_safe_string(inline(&s)));
    env.add_filter("slug", |s: String| slug(&s));
    env.add_filter("badge", |s: String| Value::from_safe_string(badge(&s)));
    for (name, source) in TEMPLATES {
        env.add_template(name, source)
            .map_err(|e| template_error(name, e))?;
    }
    Ok(env)
}

/// A name as an HTML id or a file name: letters, digits, `-`, `_` and `.`; anything else `_`.
/// A name never starts with `.` (so that no slug is `.` or `..`) and is never empty.
pub fn slug(s: &str) -> String {
    let out: String = s
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if c.is_ascii_alphanumeric() || "-_".contains(c) || (c == '.' && i > 0) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "_".into()
    } else {
        out
    }
}

fn template_error(name: &str, e: minijinja::Error) -> Error {
    Error::Template {
        name: format!("{name} (built in)"),
        message: match e.line() {
            Some(l) => format!("line {l}: {e}"),
            None => e.to_string(),
        },
    }
}

/// Renders one of the built-in pages with `ctx`, the style sheet and script added.
pub fn render_page(name: &str, ctx: Value) -> Result<String> {
    let env = shared_environment()?;
    let ctx = minijinja::context! {
        style => Value::from_safe_string(super::style::STYLE.to_string()),
        script => Value::from_safe_string(SCRIPT.to_string()),
        generator_version => env!("CARGO_PKG_VERSION"),
        ..ctx
    };
    env.get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|e| template_error(name, e))
}

/// Where a report page sits: in its archive (nothing around it), or in a dashboard, with the
/// link back to the dashboard's index and to the case pages of its specs.
#[derive(Debug, Clone, Default)]
pub struct Place {
    /// The index of the dashboard, relative to the page.
    pub home: Option<String>,
    /// The dashboard's page of each spec of the run (by spec name), relative to the page.
    pub case_pages: std::collections::BTreeMap<String, String>,
    /// The archive had no manifest: its files could not be checked against the run that
    /// wrote them, and the page says so.
    pub unverified: bool,
}

/// The HTML report of a run: what the Markdown report says, with the roofline, the sweeps and
/// every spec's sample distribution drawn as inline SVG.
pub fn report(run: &RunResult, place: &Place) -> Result<String> {
    let sweeps: Vec<Value> = run
        .sweeps
        .iter()
        .map(|g| {
            let [b, t] = super::svg::sweep(g);
            Value::from_iter([Value::from_safe_string(b), Value::from_safe_string(t)])
        })
        .collect();
    let samples: std::collections::BTreeMap<String, Value> = run
        .specs
        .iter()
        .filter_map(|s| {
            super::svg::samples(s).map(|svg| (s.name.clone(), Value::from_safe_string(svg)))
        })
        .collect();
    // The chart's text alternative: the very points it places.
    let points: Vec<Value> = super::chart::roofline_points(run)
        .into_iter()
        .filter_map(|p| Some((run.specs.iter().find(|s| s.name == p.spec)?, p)))
        .flat_map(|(s, p)| {
            [
                ("before", &s.before, p.before),
                ("after", &s.after, p.after),
            ]
            .map(|(side, v, (intensity, flops_per_sec))| {
                minijinja::context! {
                    spec => s.name.clone(),
                    side => side,
                    variant => v.variant.name(),
                    intensity => intensity,
                    flops_per_sec => flops_per_sec,
                    roof => v.achieved.as_ref().map(|a| a.frac_bandwidth.max(a.frac_compute)),
                }
            })
        })
        .collect();
    let ctx = minijinja::context! {
        roofline => Value::from_safe_string(super::svg::roofline(run)),
        roofline_points => points,
        sweep_charts => sweeps,
        sample_charts => samples,
        spec_verdict => run
            .specs
            .iter()
            .map(|s| (s.name.clone(), s.verdict().key()))
            .collect::<std::collections::BTreeMap<_, _>>(),
        home => place.home.clone(),
        case_pages => place.case_pages.clone(),
        unverified => place.unverified,
        ..super::context(run)
    };
    render_page("report.html", ctx)
}

/// One device of a merged run of several devices, as its index lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MergedDevice {
    pub key: String,
    pub shards: usize,
    pub specs: usize,
    /// `PASS`, `FAIL` or `INCONCLUSIVE`.
    pub verdict: String,
}

/// The index page of a merged run of several devices: each device's archive and verdict.
pub fn merged_index(devices: &[MergedDevice], verdict: &str) -> Result<String> {
    render_page(
        "merged.html",
        minijinja::context! { devices => devices, verdict => verdict },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_markdown_becomes_code_and_section_links_only() {
        assert_eq!(
            inline("see [a](#spec-a) and `run --accept` <b>"),
            "see <a href=\"#spec-a\">a</a> and <code>run --accept</code> &lt;b&gt;"
        );
        // A link anywhere but the page itself stays text.
        assert_eq!(
            inline("[x](http://evil) [y](#a\" onclick=\"z)"),
            "[x](http://evil) [y](#a&quot; onclick=&quot;z)"
        );
        assert_eq!(inline("a ` b"), "a ` b");
        assert_eq!(inline("\u{202E}x"), "[U+202E]x");
        assert_eq!(
            inline("a ✅ b ⚠ c ⚠\u{FE0F}"),
            format!(
                "a {} b {} c {}",
                badge("pass"),
                badge("warn"),
                badge("warn")
            )
        );
        assert_eq!(inline("[é"), "[é");
        assert_eq!(slug(".."), "_.");
        assert_eq!(slug(""), "_");
        assert_eq!(slug("cpu-a.b/c"), "cpu-a.b_c");
    }

    #[test]
    fn the_report_renders_from_the_fixed_results_and_escapes_what_it_is_given() {
        let mut run: RunResult = serde_json::from_str(include_str!(
            "../../../tests/fixtures/run-fixed/results.json"
        ))
        .unwrap();
        run.specs[0].title = "<script>alert(1)</script>".into();
        let html = report(&run, &Place::default()).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..40]);
        assert!(!html.contains("<script>alert"), "a title is escaped");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        for s in &run.specs {
            assert!(
                html.contains(&format!("id=\"spec-{}\"", s.name)),
                "{}",
                s.name
            );
        }
        assert!(html.contains("Content-Security-Policy"));
    }
}
