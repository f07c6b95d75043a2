//! The pages of the history dashboard (`opledger site`), from the store's series: an index of
//! every case per device (a sparkline, the latest verdict, the shifts found) and a page per case
//! with its trend (both medians with their CIs, the after/before ratio with its CI, the runs
//! that became baselines ringed, the detected change points marked, each run linked to its page
//! and its commit). Pure: points and links in, (path, HTML) out; `site` reads and writes.

use super::html::{self, slug};
use super::svg::{self, TrendPoint, TrendSeries, TrendShift};
use crate::error::Result;
use crate::store::series::{self, Located, Metric};
use crate::store::Point;
use minijinja::Value;
use std::collections::BTreeMap;

/// What the pages are drawn from.
pub struct Input<'a> {
    /// The store's series (cases in name order, each oldest first).
    pub points: &'a [Point],
    /// Each point's run page relative to the site's root (`runs/…/report.html`), where its
    /// archive was there to draw one.
    pub run_pages: &'a [Option<String>],
    /// `https://…/commit/{sha}`: where a commit is shown.
    pub commit_url: Option<&'a str>,
    /// The store, as its address is shown (passwords left out).
    pub store: String,
    /// When the site was made (UTC).
    pub generated_utc: String,
}

/// The path of a case's page inside the site: one page per (device, case), never shared —
/// where the slug had to replace a character (`a/b` and `a_b` both slug to `a_b`), a digest
/// of the name keeps the two apart.
pub fn case_page(device_key: &str, spec: &str) -> String {
    format!("cases/{}/{}.html", file_slug(device_key), file_slug(spec))
}

/// [`slug`], made one-to-one: a name the slug changes gets 8 hex digits of its SHA-256.
fn file_slug(s: &str) -> String {
    let plain = slug(s);
    if plain == s {
        plain
    } else {
        format!("{plain}-{}", &crate::spec::sha256_hex(s.as_bytes())[..8])
    }
}

/// A commit's link, when a URL template is given and the text is a commit id.
fn commit_href(template: Option<&str>, sha: &str) -> Option<String> {
    let t = template?;
    let hex = (4..=64).contains(&sha.len()) && sha.chars().all(|c| c.is_ascii_hexdigit());
    hex.then(|| t.replace("{sha}", sha))
}

fn short(sha: &str) -> &str {
    super::gate::short_sha(sha)
}

/// One case on one device: its points (indexes into the input, oldest first).
struct Case {
    device_key: String,
    spec: String,
    at: Vec<usize>,
}

fn cases(points: &[Point]) -> Vec<Case> {
    let mut by: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, p) in points.iter().enumerate() {
        by.entry((p.run.device_key.to_string(), p.spec.to_string()))
            .or_default()
            .push(i);
    }
    by.into_iter()
        .map(|((device_key, spec), at)| Case {
            device_key,
            spec,
            at,
        })
        .collect()
}

/// The shifts of a case's series of `metric`, each with the index (in the case's runs) of the
/// first run at the new level.
fn shifts(points: &[Point], case: &Case, metric: Metric) -> Vec<(usize, Located)> {
    let with: Vec<&Point> = case
        .at
        .iter()
        .map(|&i| &points[i])
        .filter(|p| metric.of(p).is_some())
        .collect();
    series::located(&with, metric)
        .into_iter()
        .filter_map(|l| {
            let k = case.at.iter().position(|&i| {
                *points[i].run.run_id == *l.first_after.run_id
                    && *points[i].run.started_utc == *l.first_after.started_utc
            })?;
            Some((k, l))
        })
        .collect()
}

use super::format::duration_or_dash as ms;

fn change_words(l: &Located) -> String {
    // A counted step is exact: no interval to show.
    if l.shift.ratio_lo == l.shift.ratio_hi {
        return format!("{:+.2}% (exact)", (l.shift.ratio - 1.0) * 100.0);
    }
    format!(
        "{:+.1}% (95% CI {:+.1}% .. {:+.1}%)",
        (l.shift.ratio - 1.0) * 100.0,
        (l.shift.ratio_lo - 1.0) * 100.0,
        (l.shift.ratio_hi - 1.0) * 100.0
    )
}

fn shift_marks(found: &[(usize, Located)], what: &str) -> Vec<TrendShift> {
    found
        .iter()
        .map(|(k, l)| TrendShift {
            at: *k,
            label: format!("{:+.0}%", (l.shift.ratio - 1.0) * 100.0),
            tip: vec![
                format!("{what} changed by {}", change_words(l)),
                format!(
                    "began after {} (run {}), seen from {} (run {})",
                    short(&l.last_before.git_sha),
                    l.last_before.run_id,
                    short(&l.first_after.git_sha),
                    l.first_after.run_id
                ),
                format!("p = {:.1e}", l.shift.p_value),
            ],
        })
        .collect()
}

/// The x ticks of a trend: the first run at each commit, thinned to about eight, by the
/// commit's short SHA.
fn x_labels(points: &[&Point]) -> Vec<(usize, String)> {
    let starts: Vec<usize> = (0..points.len())
        .filter(|&i| i == 0 || points[i].run.git_sha != points[i - 1].run.git_sha)
        .collect();
    let step = starts.len().div_ceil(8).max(1);
    starts
        .into_iter()
        .step_by(step)
        .map(|i| (i, short(&points[i].run.git_sha).to_string()))
        .collect()
}

fn tip_of(p: &Point, what: &str, value: String) -> Vec<String> {
    vec![
        format!("{what}: {value}"),
        format!(
            "run {} · {} · commit {}{}",
            p.run.run_id,
            p.run.started_utc,
            short(&p.run.git_sha),
            if p.run.git_dirty { " (dirty)" } else { "" }
        ),
        format!(
            "{}verdict {}{}",
            p.run
                .branch
                .as_ref()
                .map_or(String::new(), |b| format!("branch {b} · ")),
            p.verdict,
            if p.accepted {
                " · accepted as baseline"
            } else {
                ""
            }
        ),
    ]
}

/// The page of one case, and what the index says of it.
fn case_page_html(input: &Input<'_>, case: &Case) -> Result<(Vec<(String, String)>, Value)> {
    let pts: Vec<&Point> = case.at.iter().map(|&i| &input.points[i]).collect();
    let page = case_page(&case.device_key, &case.spec);
    let up = "../../";
    let after_shifts = shifts(input.points, case, Metric::After);
    let before_shifts = shifts(input.points, case, Metric::Before);
    let ratio_shifts = shifts(input.points, case, Metric::Ratio);
    let median_series = |class, name, side| median_trend(input, case, &pts, class, name, side);
    let mut marks = shift_marks(&after_shifts, "after median");
    marks.extend(shift_marks(&before_shifts, "before median"));
    let medians = svg::trend(
        &format!(
            "{} on {}: both medians over {}",
            case.spec,
            case.device_key,
            crate::format::counted(pts.len() as u64, "run", "runs")
        ),
        "median time (ms)",
        &[
            median_series("before", "before median", Metric::Before),
            median_series("after", "after median", Metric::After),
        ],
        &x_labels(&pts),
        &marks,
        None,
    );
    let ratio_series = ratio_trend(input, case, &pts);
    let ratio = svg::trend(
        &format!(
            "{} on {}: after/before over {}",
            case.spec,
            case.device_key,
            crate::format::counted(pts.len() as u64, "run", "runs")
        ),
        "after / before",
        &[ratio_series],
        &x_labels(&pts),
        &shift_marks(&ratio_shifts, "after/before"),
        Some(1.0),
    );
    let counts_shifts = shifts(input.points, case, Metric::CountsAfter);
    let counts = counts_chart(input, case, &pts, &counts_shifts);
    let rows = run_rows(input, case, &pts, up, 0..ROWS_ON_PAGE);
    let older = older_pages(input, case, &page, &pts)?;
    let runs_pages = runs_pages_nav(&page, older.len(), 1);
    let shift_rows: Vec<Value> = [
        ("after median", &after_shifts),
        ("before median", &before_shifts),
        ("after/before", &ratio_shifts),
        ("counted after cycles", &counts_shifts),
    ]
    .iter()
    .flat_map(|(what, found)| {
        found.iter().map(move |(k, l)| {
            minijinja::context! {
                metric => *what,
                index => k + 1,
                change => change_words(l),
                from_sha => short(&l.last_before.git_sha).to_string(),
                from_href => commit_href(input.commit_url, &l.last_before.git_sha),
                to_sha => short(&l.first_after.git_sha).to_string(),
                to_href => commit_href(input.commit_url, &l.first_after.git_sha),
                from_run => l.last_before.run_id.clone(),
                to_run => l.first_after.run_id.clone(),
                p_value => format!("{:.1e}", l.shift.p_value),
            }
        })
    })
    .collect();
    let shifts_found =
        after_shifts.len() + ratio_shifts.len() + before_shifts.len() + counts_shifts.len();
    let summary = case_summary(input, case, &pts, &page, shifts_found);
    let html = html::render_page(
        "case.html",
        minijinja::context! {
            spec => case.spec.clone(),
            device_key => case.device_key.clone(),
            home => format!("{up}index.html"),
            runs => pts.len(),
            medians => Value::from_safe_string(medians),
            ratio => Value::from_safe_string(ratio),
            counts => Value::from_safe_string(counts),
            rows => rows,
            runs_pages => runs_pages,
            marked => svg::MARKED_POINTS,
            shift_rows => shift_rows,
            accepted => pts.iter().filter(|p| p.accepted).count(),
            store => input.store.clone(),
            generated_utc => input.generated_utc.clone(),
        },
    )?;
    let mut out = vec![(page, html)];
    out.extend(older);
    Ok((out, summary))
}

/// Runs a case page lists itself, newest first; older ones are on pages of their own
/// ([`OLDER_ROWS_PER_PAGE`] each), so that a case with a thousand runs stays a small page.
pub const ROWS_ON_PAGE: usize = 100;
/// Runs on each page of a case's older runs.
pub const OLDER_ROWS_PER_PAGE: usize = 300;

/// The page of a case's older runs number `n` (2, 3, …): beside the case page, in a folder of
/// its name.
fn older_page(page: &str, n: usize) -> String {
    format!("{}/runs-{n}.html", page.trim_end_matches(".html"))
}

/// Links between a case's pages of runs: (label, href from page `from`, current).
fn runs_pages_nav(page: &str, older: usize, from: usize) -> Vec<Value> {
    if older == 0 {
        return Vec::new();
    }
    let name = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let stem = name(page.trim_end_matches(".html"));
    (1..=older + 1)
        .map(|n| {
            let (first, last) = if n == 1 {
                (1, ROWS_ON_PAGE)
            } else {
                let first = ROWS_ON_PAGE + (n - 2) * OLDER_ROWS_PER_PAGE + 1;
                (first, first + OLDER_ROWS_PER_PAGE - 1)
            };
            let href = match (from, n) {
                (1, 1) => name(page),
                (1, n) => format!("{stem}/runs-{n}.html"),
                (_, 1) => format!("../{}", name(page)),
                (_, n) => format!("runs-{n}.html"),
            };
            minijinja::context! {
                label => format!("newest {first}–{last}"),
                href => href,
                current => n == from,
            }
        })
        .collect()
}

/// The pages of a case's older runs: its runs past the newest [`ROWS_ON_PAGE`], newest first.
fn older_pages(
    input: &Input<'_>,
    case: &Case,
    page: &str,
    pts: &[&Point],
) -> Result<Vec<(String, String)>> {
    // The rows' run links lead up one more folder from these pages.
    let rows = run_rows(input, case, pts, "../../../", ROWS_ON_PAGE..usize::MAX);
    let older = rows.len().div_ceil(OLDER_ROWS_PER_PAGE);
    let mut out = Vec::new();
    for (i, chunk) in rows.chunks(OLDER_ROWS_PER_PAGE).enumerate() {
        let n = i + 2;
        let html = html::render_page(
            "case.html",
            minijinja::context! {
                older => true,
                spec => case.spec.clone(),
                device_key => case.device_key.clone(),
                home => "../../../index.html",
                case_href => format!("../{}", page.rsplit('/').next().unwrap_or(page)),
                runs => case.at.len(),
                rows => chunk.to_vec(),
                runs_pages => runs_pages_nav(page, older, n),
                marked => svg::MARKED_POINTS,
                shift_rows => Vec::<Value>::new(),
                accepted => case.at.iter().filter(|&&i| input.points[i].accepted).count(),
                store => input.store.clone(),
                generated_utc => input.generated_utc.clone(),
            },
        )?;
        out.push((older_page(page, n), html));
    }
    Ok(out)
}

/// A run's page from a case's page, for its `k`-th point (none where its archive was missing).
fn run_href(input: &Input<'_>, case: &Case, k: usize) -> Option<String> {
    input.run_pages[case.at[k]]
        .as_ref()
        .map(|r| format!("../../{r}"))
}

/// One side's medians over the runs, in milliseconds with their CIs.
fn median_trend(
    input: &Input<'_>,
    case: &Case,
    pts: &[&Point],
    class: &'static str,
    name: &str,
    side: Metric,
) -> TrendSeries {
    let href = |k: usize| run_href(input, case, k);
    TrendSeries {
        class,
        name: name.to_string(),
        points: pts
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let (v, lo, hi) = match side {
                    Metric::Before => (
                        p.before_median_secs,
                        p.before_ci_lo_secs,
                        p.before_ci_hi_secs,
                    ),
                    _ => (p.after_median_secs, p.after_ci_lo_secs, p.after_ci_hi_secs),
                };
                let v = v.filter(|v| v.is_finite())?;
                let ci = lo.zip(hi);
                Some(TrendPoint {
                    value: v * 1e3,
                    ci: ci.map(|(a, b)| (a * 1e3, b * 1e3)),
                    tip: tip_of(
                        p,
                        name,
                        match ci {
                            Some((a, b)) => format!(
                                "{} (95% CI {} .. {})",
                                super::format::duration(v),
                                super::format::duration(a),
                                super::format::duration(b)
                            ),
                            None => super::format::duration(v),
                        },
                    ),
                    href: href(k),
                    accepted: p.accepted && side == Metric::After,
                })
            })
            .collect(),
    }
}

/// Both sides' counted cycles over the runs that counted, with the after side's steps; empty
/// where no run of the case counted.
fn counts_chart(
    input: &Input<'_>,
    case: &Case,
    pts: &[&Point],
    steps: &[(usize, Located)],
) -> String {
    if !pts.iter().any(|p| Metric::CountsAfter.of(p).is_some()) {
        return String::new();
    }
    let series = |class: &'static str, name: &str, metric: Metric| TrendSeries {
        class,
        name: name.to_string(),
        points: pts
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let v = metric.of(p)?;
                Some(TrendPoint {
                    value: v / 1e6,
                    ci: None,
                    tip: tip_of(p, name, format!("{v:.0} cycles")),
                    href: run_href(input, case, k),
                    accepted: false,
                })
            })
            .collect(),
    };
    svg::trend(
        &format!(
            "{} on {}: counted cycles over {}",
            case.spec,
            case.device_key,
            crate::format::counted(pts.len() as u64, "run", "runs")
        ),
        "estimated cycles (millions)",
        &[
            series("before", "before cycles", Metric::CountsBefore),
            series("after", "after cycles", Metric::CountsAfter),
        ],
        &x_labels(pts),
        &shift_marks(steps, "counted after cycles"),
        None,
    )
}

/// The after/before ratio over the runs, with its CIs.
fn ratio_trend(input: &Input<'_>, case: &Case, pts: &[&Point]) -> TrendSeries {
    let href = |k: usize| run_href(input, case, k);
    TrendSeries {
        class: "ratio",
        name: "after/before".into(),
        points: pts
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let v = p.ratio.filter(|v| v.is_finite())?;
                let ci = p.ratio_lo.zip(p.ratio_hi);
                Some(TrendPoint {
                    value: v,
                    ci,
                    tip: tip_of(
                        p,
                        "after/before",
                        match ci {
                            Some((a, b)) => format!("×{v:.3} (95% CI {a:.3} .. {b:.3})"),
                            None => format!("×{v:.3}"),
                        },
                    ),
                    href: href(k),
                    accepted: p.accepted,
                })
            })
            .collect(),
    }
}

/// The rows `newest` of a case's runs table (0 the newest), newest first; `up` leads from the
/// page to the site's top.
fn run_rows(
    input: &Input<'_>,
    case: &Case,
    pts: &[&Point],
    up: &str,
    newest: std::ops::Range<usize>,
) -> Vec<Value> {
    let href = |k: usize| {
        input.run_pages[case.at[k]]
            .as_ref()
            .map(|r| format!("{up}{r}"))
    };
    pts.iter()
        .enumerate()
        .rev()
        .skip(newest.start)
        .take(newest.len())
        .map(|(k, p)| {
            minijinja::context! {
                index => k + 1,
                run_id => p.run.run_id.clone(),
                started_utc => p.run.started_utc.clone(),
                sha => short(&p.run.git_sha).to_string(),
                commit_href => commit_href(input.commit_url, &p.run.git_sha),
                dirty => p.run.git_dirty,
                branch => p.run.branch.clone(),
                verdict => p.verdict.clone(),
                before => ms(p.before_median_secs),
                before_secs => p.before_median_secs,
                after => ms(p.after_median_secs),
                after_secs => p.after_median_secs,
                ratio => p.ratio.map(|r| format!("×{r:.3}")),
                ratio_value => p.ratio,
                ratio_ci => p.ratio_lo.zip(p.ratio_hi).map(|(a, b)| format!("{a:.3} .. {b:.3}")),
                accepted => p.accepted,
                run_href => href(k),
            }
        })
        .collect()
}

/// A case's row on the index: its latest run, its sparkline and how many shifts it had.
fn case_summary(
    input: &Input<'_>,
    case: &Case,
    pts: &[&Point],
    page: &str,
    shifts_found: usize,
) -> Value {
    // The main line leads: the newest run of `main` (or `master`) where the case has one, else
    // the newest of any branch, whose branch is then named.
    let latest_k = pts
        .iter()
        .rposition(|p| matches!(p.run.branch.as_deref(), Some("main" | "master")))
        .or_else(|| pts.len().checked_sub(1));
    let latest = latest_k.map(|k| pts[k]);
    let spark_values: Vec<f64> = pts
        .iter()
        .map(|p| p.after_median_secs.unwrap_or(f64::NAN))
        .collect();
    minijinja::context! {
        spec => case.spec.clone(),
        href => page.to_string(),
        runs => pts.len(),
        spark => Value::from_safe_string(svg::sparkline(
            &spark_values,
            &format!(
                "after median of {} over {}",
                case.spec,
                crate::format::counted(pts.len() as u64, "run", "runs")
            ),
        )),
        verdict => latest.map(|p| p.verdict.clone()),
        after => ms(latest.and_then(|p| p.after_median_secs)),
        after_secs => latest.and_then(|p| p.after_median_secs),
        ratio => latest.and_then(|p| p.ratio).map(|r| format!("×{r:.3}")),
        ratio_value => latest.and_then(|p| p.ratio),
        shifts => shifts_found,
        last_utc => latest.map(|p| p.run.started_utc.clone()),
        last_sha => latest.map(|p| short(&p.run.git_sha).to_string()),
        last_branch => latest.and_then(|p| p.run.branch.clone()),
        last_href => latest_k.and_then(|k| case.at.get(k)).and_then(|&i| input.run_pages[i].clone()),
    }
}

/// Every page but the runs': the index and one page per case and device.
pub fn pages(input: &Input<'_>) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut devices: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let all = cases(input.points);
    let case_count = all.len();
    // Cases are drawn in parallel (their change points are most of the work), then kept in
    // name order.
    use rayon::prelude::*;
    let drawn: Vec<(Vec<(String, String)>, Value)> = all
        .par_iter()
        .map(|case| case_page_html(input, case))
        .collect::<Result<_>>()?;
    for (case, (case_pages, summary)) in all.iter().zip(drawn) {
        out.extend(case_pages);
        devices
            .entry(case.device_key.clone())
            .or_default()
            .push(summary);
    }
    let runs: std::collections::BTreeSet<(&str, &str)> = input
        .points
        .iter()
        .map(|p| (&*p.run.run_id, &*p.run.started_utc))
        .collect();
    let index = html::render_page(
        "index.html",
        minijinja::context! {
            devices => devices
                .into_iter()
                .map(|(key, cases)| minijinja::context! { key => key, cases => cases })
                .collect::<Vec<_>>(),
            runs => runs.len(),
            cases => case_count,
            pages => input.run_pages.iter().flatten().collect::<std::collections::BTreeSet<_>>().len(),
            store => input.store.clone(),
            generated_utc => input.generated_utc.clone(),
        },
    )?;
    out.insert(0, ("index.html".into(), index));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_link_only_when_they_are_commit_ids() {
        let t = Some("https://example.org/r/commit/{sha}");
        assert_eq!(
            commit_href(t, "deb3d30"),
            Some("https://example.org/r/commit/deb3d30".into())
        );
        assert_eq!(commit_href(t, "nogit"), None);
        assert_eq!(commit_href(t, "a\" onclick=\"x"), None);
        assert_eq!(commit_href(None, "deb3d30"), None);
    }

    #[test]
    fn case_pages_have_safe_paths() {
        let p = case_page("cpu-x/../y", "a b");
        let parts: Vec<&str> = p.split('/').collect();
        assert_eq!(parts.len(), 3, "{p}");
        assert!(
            parts[1].starts_with("cpu-x_.._y-") && parts[2].starts_with("a_b-"),
            "{p}"
        );
        // A name the slug keeps is its own page name.
        assert_eq!(
            case_page("cpu-x", "fuse-gelu"),
            "cases/cpu-x/fuse-gelu.html"
        );
    }

    /// A case with more runs than its page lists: the newest on the page, the older on pages of
    /// their own a folder deeper (linked both ways, every run once), dots for the newest only.
    #[test]
    fn a_long_case_keeps_a_small_page_and_pages_its_older_runs() {
        let n = ROWS_ON_PAGE + OLDER_ROWS_PER_PAGE + 7;
        let points: Vec<Point> = (0..n)
            .map(|i| Point {
                run: std::sync::Arc::new(crate::store::PointRun {
                    run_id: format!("run-{i:04}").into(),
                    started_utc: format!(
                        "2026-01-{:02}T{:02}:{:02}:00Z",
                        1 + i / 1440,
                        i / 60 % 24,
                        i % 60
                    )
                    .into(),
                    git_sha: format!("{i:07x}").into(),
                    branch: Some("main".into()),
                    device_key: "cpu-x".into(),
                    ..crate::store::PointRun::default()
                }),
                spec: "s".into(),
                verdict: "pass".into(),
                before_median_secs: Some(2e-3),
                after_median_secs: Some(1e-3),
                ratio: Some(0.5),
                ratio_lo: Some(0.45),
                ratio_hi: Some(0.55),
                ..Point::default()
            })
            .collect();
        let run_pages = vec![None; n];
        let input = Input {
            points: &points,
            run_pages: &run_pages,
            commit_url: None,
            store: "history.sqlite".into(),
            generated_utc: "2026-12-04T00:00:00Z".into(),
        };
        let pages: BTreeMap<String, String> = pages(&input).unwrap().into_iter().collect();
        let names: Vec<&String> = pages.keys().collect();
        assert_eq!(
            names,
            [
                "cases/cpu-x/s.html",
                "cases/cpu-x/s/runs-2.html",
                "cases/cpu-x/s/runs-3.html",
                "index.html"
            ],
            "{names:?}"
        );
        let rows = |page: &str| pages[page].matches("<tr class=\"run ").count();
        assert_eq!(rows("cases/cpu-x/s.html"), ROWS_ON_PAGE);
        assert_eq!(rows("cases/cpu-x/s/runs-2.html"), OLDER_ROWS_PER_PAGE);
        assert_eq!(rows("cases/cpu-x/s/runs-3.html"), 7);
        // Newest first: the case page ends where the next page begins.
        let main = &pages["cases/cpu-x/s.html"];
        assert!(main.contains(&format!("data-run=\"run-{:04}\"", n - 1)));
        assert!(!main.contains(&format!("data-run=\"run-{:04}\"", n - 1 - ROWS_ON_PAGE)));
        assert!(pages["cases/cpu-x/s/runs-2.html"]
            .contains(&format!("data-run=\"run-{:04}\"", n - 1 - ROWS_ON_PAGE)));
        assert!(pages["cases/cpu-x/s/runs-3.html"].contains("data-run=\"run-0000\""));
        // Linked both ways, relative to each page.
        assert!(main.contains("href=\"s/runs-2.html\"") && main.contains("href=\"s/runs-3.html\""));
        let older = &pages["cases/cpu-x/s/runs-3.html"];
        assert!(older.contains("href=\"../s.html\"") && older.contains("href=\"runs-2.html\""));
        assert!(older.contains("href=\"../../../index.html\""));
        assert!(
            !older.contains("<svg"),
            "the charts are on the case page only"
        );
        // Dots (with their tooltips) for the newest runs only, in each chart's every series.
        assert_eq!(
            main.matches("<circle class=\"pt ").count(),
            svg::MARKED_POINTS * 3,
            "before, after and after/before"
        );
        // The index counts cases, not pages.
        assert!(
            pages["index.html"].contains("data-runs=\""),
            "{}",
            pages["index.html"]
        );
    }

    #[test]
    fn names_that_slug_alike_get_pages_of_their_own() {
        assert_ne!(case_page("cpu/a", "s"), case_page("cpu_a", "s"));
        assert_ne!(case_page("cpu/a", "s"), case_page("cpu:a", "s"));
        assert_ne!(case_page("d", "x/y"), case_page("d", "x_y"));
    }
}
