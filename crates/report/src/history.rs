//! The words of `opledger history`: each case's series as a table with a sparkline of its
//! after/before ratio, as CSV, or as JSON.

use crate::store::series::{CaseChanges, Located};
use crate::store::Point;

/// The eight heights of a terminal sparkline.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A sparkline of `values` (low to high over their own range; a flat series is mid-height).
pub fn sparkline(values: &[f64]) -> String {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let (lo, hi) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    values
        .iter()
        .map(|&v| {
            if !v.is_finite() {
                ' '
            } else if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
                BARS[3]
            } else {
                BARS[(((v - lo) / (hi - lo)) * 7.0).round() as usize]
            }
        })
        .collect()
}

use super::format::ms_number as ms;

/// One table per case, newest run last, under a line with its sparkline.
pub fn table(points: &[Point]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < points.len() {
        let spec = &points[i].spec;
        let end = points[i..]
            .iter()
            .position(|p| &p.spec != spec)
            .map_or(points.len(), |k| i + k);
        let series = &points[i..end];
        let ratios: Vec<f64> = series.iter().map(|p| p.ratio.unwrap_or(f64::NAN)).collect();
        out.push_str(&format!(
            "## {}  {}  ({} run{}, after/before)\n\n",
            md(spec),
            sparkline(&ratios),
            series.len(),
            if series.len() == 1 { "" } else { "s" }
        ));
        // Counted runs add the after side's estimated cycles (counts.md): they do not drift.
        let counted = series.iter().any(|p| p.counts.is_some());
        out.push_str(&format!(
            "| run | UTC | commit | branch | device | before ms | after ms | after/before (95% CI) |{} verdict |\n|---|---|---|---|---|--:|--:|--:|{}---|\n",
            if counted { " after cycles |" } else { "" },
            if counted { "--:|" } else { "" }
        ));
        for p in series {
            let cycles = if counted {
                format!(
                    " {} |",
                    p.counts
                        .as_ref()
                        .and_then(|c| c.after_cycles)
                        .map_or("—".to_string(), super::format::thousands)
                )
            } else {
                String::new()
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |{cycles} {} |\n",
                md(&p.run.run_id),
                md(&p.run.started_utc),
                md(&p.run.git_sha),
                md(p.run.branch.as_deref().unwrap_or("—")),
                md(&p.run.device_key),
                ms(p.before_median_secs),
                ms(p.after_median_secs),
                match (p.ratio, p.ratio_lo, p.ratio_hi) {
                    (Some(r), Some(lo), Some(hi)) => format!("{r:.3} ({lo:.3} .. {hi:.3})"),
                    _ => "—".into(),
                },
                md(&p.verdict)
            ));
        }
        out.push('\n');
        i = end;
    }
    if out.is_empty() {
        out.push_str("no runs in the store match\n");
    }
    out
}

/// A text cell of a CSV file, neutralised as the OWASP guidance on CSV injection says: a cell
/// that starts with `=`, `+`, `-`, `@`, a tab or a carriage return (a branch name, a commit
/// subject: anything a spreadsheet would run as a formula) gets a leading `'`. Quoting is the
/// `csv` crate's.
fn text(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    }
}

/// A Markdown table cell: a `|` escaped and line breaks made spaces, so that no value (a branch
/// name with `|` or a newline) can end the cell or the row.
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// CSV text of a header and rows.
fn write_csv(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    // Writing to memory cannot fail; a row of the wrong length is a bug caught by the tests.
    let _ = w.write_record(header);
    for r in rows {
        let _ = w.write_record(&r);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// One CSV row per point, with a header.
pub fn csv(points: &[Point]) -> String {
    let num = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:e}"));
    write_csv(
        &[
            "spec",
            "run_id",
            "started_utc",
            "git_sha",
            "branch",
            "device_key",
            "before_median_secs",
            "after_median_secs",
            "ratio",
            "ratio_lo",
            "ratio_hi",
            "verdict",
            "archive",
            "counts_key",
            "before_cycles",
            "after_cycles",
            "after_instructions",
            "after_dram_bytes",
        ],
        points.iter().map(|p| {
            let c = p.counts.as_ref();
            let count = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
            vec![
                text(&p.spec),
                text(&p.run.run_id),
                text(&p.run.started_utc),
                text(&p.run.git_sha),
                text(p.run.branch.as_deref().unwrap_or("")),
                text(&p.run.device_key),
                num(p.before_median_secs),
                num(p.after_median_secs),
                num(p.ratio),
                num(p.ratio_lo),
                num(p.ratio_hi),
                text(&p.verdict),
                text(&p.run.archive),
                text(c.map_or("", |c| &*c.key)),
                count(c.and_then(|c| c.before_cycles)),
                count(c.and_then(|c| c.after_cycles)),
                count(c.and_then(|c| c.after_instructions)),
                count(c.and_then(|c| c.after_dram_bytes)),
            ]
        }),
    )
}

/// A shift's size in words: `+12.3% (+10.1% .. +14.6%)`.
fn change(l: &Located) -> String {
    let pct = |r: f64| format!("{:+.1}%", (r - 1.0) * 100.0);
    // A counted step is exact: no interval to show.
    if l.shift.ratio_lo == l.shift.ratio_hi {
        return format!("{:+.2}% (exact)", (l.shift.ratio - 1.0) * 100.0);
    }
    format!(
        "{} ({} .. {})",
        pct(l.shift.ratio),
        pct(l.shift.ratio_lo),
        pct(l.shift.ratio_hi)
    )
}

/// Each case's shifts: where the level moved, by how much, between which commits.
pub fn changes_table(found: &[CaseChanges]) -> String {
    let mut out = String::new();
    for c in found {
        out.push_str(&format!(
            "## {} on {}: {} of {} runs\n\n",
            md(&c.spec),
            md(&c.device_key),
            match c.shifts.len() {
                0 if c.metric.counted() => "no change in the counts".to_string(),
                0 => "no shift in the median".to_string(),
                1 => "1 shift".to_string(),
                n => format!("{n} shifts"),
            },
            c.runs
        ));
        if c.shifts.is_empty() {
            continue;
        }
        out.push_str(&if c.metric.counted() {
            format!(
                "| began after → at | runs (before, after) | {} cycles change | p |\n|---|--:|--:|--:|\n",
                c.metric.name()
            )
        } else {
            format!(
                "| began after → at | runs (before, after) | {} median change (95% CI) | p |\n|---|--:|--:|--:|\n",
                c.metric.name()
            )
        });
        for l in &c.shifts {
            out.push_str(&format!(
                "| {} ({}) → {} ({}) | {}, {} | {} | {:.1e} |\n",
                md(&l.last_before.git_sha),
                md(&l.last_before.run_id),
                md(&l.first_after.git_sha),
                md(&l.first_after.run_id),
                l.shift.before.end - l.shift.before.start,
                l.shift.after.end - l.shift.after.start,
                change(l),
                l.shift.p_value
            ));
        }
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("no runs in the store match\n");
    }
    out
}

/// One CSV row per shift, with a header.
pub fn changes_csv(found: &[CaseChanges]) -> String {
    let rows = found.iter().flat_map(|c| {
        c.shifts.iter().map(move |l| {
            vec![
                text(&c.spec),
                text(&c.device_key),
                c.metric.name().to_string(),
                text(&l.last_before.git_sha),
                text(&l.last_before.run_id),
                text(&l.first_after.git_sha),
                text(&l.first_after.run_id),
                (l.shift.before.end - l.shift.before.start).to_string(),
                (l.shift.after.end - l.shift.after.start).to_string(),
                format!("{:e}", l.shift.ratio),
                format!("{:e}", l.shift.ratio_lo),
                format!("{:e}", l.shift.ratio_hi),
                format!("{:e}", l.shift.p_value),
            ]
        })
    });
    write_csv(
        &[
            "spec",
            "device_key",
            "metric",
            "last_before_sha",
            "last_before_run",
            "first_after_sha",
            "first_after_run",
            "runs_before",
            "runs_after",
            "ratio",
            "ratio_lo",
            "ratio_hi",
            "p_value",
        ],
        rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_spans_its_own_range() {
        assert_eq!(sparkline(&[1.0, 2.0, 3.0]), "▁▅█");
        assert_eq!(sparkline(&[0.5, 0.5]), "▄▄");
        assert_eq!(sparkline(&[1.0, f64::NAN, 2.0]), "▁ █");
        assert_eq!(sparkline(&[]), "");
    }
}
