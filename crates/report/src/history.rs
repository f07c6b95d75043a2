//! The words of `opledger history`: each case's series as a table with a sparkline of its
//! after/before ratio, as CSV, or as JSON. A store of 10 000 runs × 50 cases prints half a
//! million rows (70–830 MB): each is written straight to the output, the rows formatted in
//! chunks on every core and written in their order, instead of the whole text held in memory
//! and formatted on one core (docs/history.md has the timings).

use crate::store::series::{CaseChanges, Located};
use crate::store::Point;
use rayon::prelude::*;
use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::io::{self, Write};

/// The eight heights of a terminal sparkline.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The most bars a series' sparkline draws in the table: a longer series is drawn a bar per
/// span of runs (each bar the median of its span), so that the line fits a terminal whatever
/// the store holds.
pub const SPARK_BARS: usize = 60;

/// Rows formatted at once by one task: large enough that a task's overhead is lost in it,
/// small enough that a batch of them (a few per core) stays a few MiB.
const CHUNK_ROWS: usize = 2048;

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

/// `values` in at most `bars` values, oldest first: each the median of the finite values of a
/// span of `span` consecutive values (the last span may be shorter; a span with none is NaN).
/// Returns them and `span` (1 where `values` fit as they are).
pub fn spans(values: &[f64], bars: usize) -> (Vec<f64>, usize) {
    let span = values.len().div_ceil(bars.max(1)).max(1);
    let medians = values
        .chunks(span)
        .map(|c| {
            let finite: Vec<f64> = c.iter().copied().filter(|v| v.is_finite()).collect();
            // NaN for none.
            crate::measure::stats::median(&finite)
        })
        .collect();
    (medians, span)
}

/// `items` formatted by `f` a chunk at a time on every core and written to `out` in their order,
/// a batch of a few chunks a core at a time (what is held in memory at once).
fn in_order<T: Sync>(
    items: &[T],
    out: &mut dyn Write,
    f: impl Fn(&[T], &mut Vec<u8>) + Sync,
) -> io::Result<()> {
    let batch = CHUNK_ROWS * 4 * rayon::current_num_threads().max(1);
    for part in items.chunks(batch) {
        let texts: Vec<Vec<u8>> = part
            .par_chunks(CHUNK_ROWS)
            .map(|c| {
                let mut text = Vec::with_capacity(c.len() * 160);
                f(c, &mut text);
                text
            })
            .collect();
        for t in &texts {
            out.write_all(t)?;
        }
    }
    Ok(())
}

/// Each case's points: `points` (in case order) cut where the spec changes.
fn cases(points: &[Point]) -> impl Iterator<Item = &[Point]> {
    points.chunk_by(|a, b| a.spec == b.spec)
}

/// One table per case, newest run last, under a line with its sparkline, written to `out`.
pub fn write_table(points: &[Point], out: &mut dyn Write) -> io::Result<()> {
    if points.is_empty() {
        return out.write_all(b"no runs in the store match\n");
    }
    for series in cases(points) {
        let ratios: Vec<f64> = series.iter().map(|p| p.ratio.unwrap_or(f64::NAN)).collect();
        let (bars, span) = spans(&ratios, SPARK_BARS);
        let drawn = if span > 1 {
            format!(", a bar the median of {span} runs")
        } else {
            String::new()
        };
        // Counted runs add the after side's estimated cycles (counts.md): they do not drift.
        let counted = series.iter().any(|p| p.counts.is_some());
        write!(
            out,
            "## {}  {}  ({} run{}, after/before{drawn})\n\n",
            Md(&series[0].spec),
            sparkline(&bars),
            series.len(),
            if series.len() == 1 { "" } else { "s" }
        )?;
        write!(
            out,
            "| run | UTC | commit | branch | device | before ms | after ms | after/before (95% CI) |{} verdict |\n|---|---|---|---|---|--:|--:|--:|{}---|\n",
            if counted { " after cycles |" } else { "" },
            if counted { "--:|" } else { "" }
        )?;
        in_order(series, out, |rows, text| {
            for p in rows {
                // Writing into memory cannot fail.
                let _ = table_row(p, counted, text);
            }
        })?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// One row of a case's table.
fn table_row(p: &Point, counted: bool, text: &mut Vec<u8>) -> io::Result<()> {
    write!(
        text,
        "| {} | {} | {} | {} | {} | {} | {} | ",
        Md(&p.run.run_id),
        Md(&p.run.started_utc),
        Md(&p.run.git_sha),
        Md(p.run.branch.as_deref().unwrap_or("—")),
        Md(&p.run.device_key),
        Ms(p.before_median_secs),
        Ms(p.after_median_secs),
    )?;
    match (p.ratio, p.ratio_lo, p.ratio_hi) {
        (Some(r), Some(lo), Some(hi)) => write!(text, "{r:.3} ({lo:.3} .. {hi:.3}) |")?,
        _ => text.write_all("— |".as_bytes())?,
    }
    if counted {
        match p.counts.as_ref().and_then(|c| c.after_cycles) {
            Some(n) => write!(text, " {} |", Thousands(n))?,
            None => text.write_all(" — |".as_bytes())?,
        }
    }
    writeln!(text, " {} |", Md(&p.verdict))
}

/// The table of [`write_table`] as text.
pub fn table(points: &[Point]) -> String {
    let mut text = Vec::new();
    // Writing into memory cannot fail.
    let _ = write_table(points, &mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// A text cell of a CSV file, neutralised as the OWASP guidance on CSV injection says: a cell
/// that starts with `=`, `+`, `-`, `@`, a tab or a carriage return (a branch name, a commit
/// subject: anything a spreadsheet would run as a formula) gets a leading `'`. Quoting is the
/// `csv` crate's.
fn text(s: &str) -> Cow<'_, str> {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        Cow::Owned(format!("'{s}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// A Markdown table cell: a `|` escaped and line breaks made spaces, so that no value (a branch
/// name with `|` or a newline) can end the cell or the row.
fn md(s: &str) -> String {
    Md(s).to_string()
}

/// [`md`] as it is written, without a copy of the text.
struct Md<'a>(&'a str);

impl fmt::Display for Md<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(['|', '\n', '\r']) {
            f.write_str(&rest[..at])?;
            f.write_str(if rest[at..].starts_with('|') {
                "\\|"
            } else {
                " "
            })?;
            rest = &rest[at + 1..];
        }
        f.write_str(rest)
    }
}

/// A median in milliseconds to three places, or a dash ([`super::format::ms_number`]'s text).
struct Ms(Option<f64>);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(t) => write!(f, "{:.3}", t * 1e3),
            None => f.write_str("—"),
        }
    }
}

/// A count with thousands separated ([`super::format::thousands`]'s text).
struct Thousands(u64);

impl fmt::Display for Thousands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut digits = [0u8; 20];
        let mut n = self.0;
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in (0..len).rev() {
            f.write_char(char::from(digits[i]))?;
            if i > 0 && i % 3 == 0 {
                f.write_char(',')?;
            }
        }
        Ok(())
    }
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

/// The columns of [`write_points_csv`], in order.
const POINT_COLUMNS: [&str; 18] = [
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
];

/// One CSV row per point, with a header, written to `out`.
pub fn write_points_csv(points: &[Point], out: &mut dyn Write) -> io::Result<()> {
    out.write_all(write_csv(&POINT_COLUMNS, []).as_bytes())?;
    in_order(points, out, |rows, text| {
        let mut w = csv::Writer::from_writer(std::mem::take(text));
        let mut num = String::new();
        for p in rows {
            // Writing into memory cannot fail.
            let _ = csv_row(p, &mut w, &mut num);
        }
        *text = w.into_inner().unwrap_or_default();
    })
}

/// One point's CSV row; `num` a buffer for its numbers' text.
fn csv_row(p: &Point, w: &mut csv::Writer<Vec<u8>>, num: &mut String) -> csv::Result<()> {
    let c = p.counts.as_ref();
    for cell in [
        &*p.spec,
        &p.run.run_id,
        &p.run.started_utc,
        &p.run.git_sha,
        p.run.branch.as_deref().unwrap_or(""),
        &p.run.device_key,
    ] {
        w.write_field(text(cell).as_bytes())?;
    }
    for v in [
        p.before_median_secs,
        p.after_median_secs,
        p.ratio,
        p.ratio_lo,
        p.ratio_hi,
    ] {
        num.clear();
        if let Some(x) = v {
            let _ = write!(num, "{x:e}");
        }
        w.write_field(num.as_bytes())?;
    }
    for cell in [&*p.verdict, &p.run.archive, c.map_or("", |c| &*c.key)] {
        w.write_field(text(cell).as_bytes())?;
    }
    for v in [
        c.and_then(|c| c.before_cycles),
        c.and_then(|c| c.after_cycles),
        c.and_then(|c| c.after_instructions),
        c.and_then(|c| c.after_dram_bytes),
    ] {
        num.clear();
        if let Some(x) = v {
            let _ = write!(num, "{x}");
        }
        w.write_field(num.as_bytes())?;
    }
    w.write_record(None::<&[u8]>)
}

/// The CSV of [`write_points_csv`] as text.
pub fn csv(points: &[Point]) -> String {
    let mut text = Vec::new();
    // Writing into memory cannot fail.
    let _ = write_points_csv(points, &mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// Points a task serializes as JSON at once (about 1.7 KiB each with a counts engine).
const JSON_CHUNK: usize = 512;

/// Every point as one pretty JSON array (what `serde_json::to_writer_pretty` writes of the
/// slice, byte for byte), a line break after it: each chunk of points serialized on a core of
/// its own as an array, whose brackets are dropped and whose elements are joined to the
/// neighbouring chunks' by a comma, as one array's are.
pub fn write_points_json(points: &[Point], out: &mut dyn Write) -> io::Result<()> {
    if points.is_empty() {
        return out.write_all(b"[]\n");
    }
    let chunks: Vec<&[Point]> = points.chunks(JSON_CHUNK).collect();
    let mut first = true;
    for batch in chunks.chunks(4 * rayon::current_num_threads().max(1)) {
        let arrays: Vec<serde_json::Result<Vec<u8>>> =
            batch.par_iter().map(serde_json::to_vec_pretty).collect();
        for array in arrays {
            let array = array.map_err(io::Error::other)?;
            // `[` then the elements, each after a line break and the array's indentation and
            // separated by commas, then a line break and `]`: the elements are kept.
            let elements = array
                .get(1..array.len().saturating_sub(2))
                .unwrap_or_default();
            out.write_all(if first { b"[" } else { b"," })?;
            out.write_all(elements)?;
            first = false;
        }
    }
    out.write_all(b"\n]\n")
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
            "## {} on {}: {} of {}\n\n",
            md(&c.spec),
            md(&c.device_key),
            match c.shifts.len() {
                0 if c.metric.counted() => "no change in the counts".to_string(),
                0 => "no shift in the median".to_string(),
                1 => "1 shift".to_string(),
                n => format!("{n} shifts"),
            },
            crate::format::counted(c.runs as u64, "run", "runs")
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
                text(&c.spec).into_owned(),
                text(&c.device_key).into_owned(),
                c.metric.name().to_string(),
                text(&l.last_before.git_sha).into_owned(),
                text(&l.last_before.run_id).into_owned(),
                text(&l.first_after.git_sha).into_owned(),
                text(&l.first_after.run_id).into_owned(),
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

    fn point(i: usize, ratio: f64) -> Point {
        Point {
            run: std::sync::Arc::new(crate::store::PointRun {
                run_id: format!("run-{i}").into(),
                started_utc: format!("2026-01-01T00:00:{:02}Z", i % 60).into(),
                git_sha: format!("{i:07x}").into(),
                branch: Some(
                    if i.is_multiple_of(7) {
                        "-x|y\nz"
                    } else {
                        "main"
                    }
                    .into(),
                ),
                device_key: "cpu-x".into(),
                ..crate::store::PointRun::default()
            }),
            spec: format!("case-{}", i / 5000).into(),
            verdict: "pass".into(),
            before_median_secs: Some(2e-3),
            after_median_secs: (!i.is_multiple_of(11)).then_some(2e-3 * ratio),
            ratio: Some(ratio),
            ratio_lo: Some(ratio * 0.9),
            ratio_hi: Some(ratio * 1.1),
            counts: i.is_multiple_of(3).then(|| {
                Box::new(crate::store::PointCounts {
                    key: "counts-x".into(),
                    after_cycles: Some(1_000_000 + i as u64),
                    ..Default::default()
                })
            }),
            ..Point::default()
        }
    }

    /// More points than a batch of chunks holds on any machine: the chunks' boundaries, each
    /// written in order, as one writer writes them all.
    fn many() -> Vec<Point> {
        (0..CHUNK_ROWS * 4 * (rayon::current_num_threads() + 2) + 17)
            .map(|i| point(i, 0.5 + (i % 13) as f64 * 0.01))
            .collect()
    }

    #[test]
    fn the_json_is_the_whole_arrays_byte_for_byte() {
        for n in [0, 1, 2, JSON_CHUNK, JSON_CHUNK + 1, 3 * JSON_CHUNK - 1] {
            let points: Vec<Point> = (0..n).map(|i| point(i, 0.5)).collect();
            let mut text = Vec::new();
            write_points_json(&points, &mut text).unwrap();
            let mut whole = serde_json::to_vec_pretty(&points).unwrap();
            whole.push(b'\n');
            assert!(text == whole, "{n} points");
        }
        let points = many();
        let mut text = Vec::new();
        write_points_json(&points, &mut text).unwrap();
        let back: Vec<serde_json::Value> = serde_json::from_slice(&text).unwrap();
        assert_eq!(back.len(), points.len());
        assert_eq!(
            back[points.len() - 1]["run_id"],
            format!("run-{}", points.len() - 1)
        );
    }

    #[test]
    fn the_csv_has_a_row_a_point_in_order_with_every_cell() {
        let points = many();
        let text = csv(&points);
        let mut r = ::csv::Reader::from_reader(text.as_bytes());
        assert_eq!(r.headers().unwrap().len(), POINT_COLUMNS.len());
        let rows: Vec<::csv::StringRecord> = r.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), points.len());
        for (i, row) in rows.iter().enumerate().step_by(997) {
            assert_eq!(&row[1], format!("run-{i}"));
            // A branch a spreadsheet would run as a formula is neutralised; quoting is csv's.
            assert_eq!(&row[4], if i % 7 == 0 { "'-x|y\nz" } else { "main" });
            let ratio: f64 = row[8].parse().unwrap();
            assert_eq!(ratio, points[i].ratio.unwrap(), "row {i}");
            assert_eq!(
                row[7].is_empty(),
                i % 11 == 0,
                "row {i}: a missing median is empty"
            );
            assert_eq!(
                &row[15],
                if i % 3 == 0 {
                    format!("{}", 1_000_000 + i)
                } else {
                    String::new()
                }
            );
        }
    }

    #[test]
    fn a_long_series_draws_a_bar_a_span_and_every_row() {
        let points = many();
        let text = table(&points);
        let cases = points.chunk_by(|a, b| a.spec == b.spec).count();
        let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("## ")).collect();
        assert_eq!(headers.len(), cases);
        // 5000 runs a case: 60 bars of 84 runs (the last of 44).
        assert!(
            headers[0].ends_with("(5000 runs, after/before, a bar the median of 84 runs)"),
            "{}",
            headers[0]
        );
        let bars = headers[0].split("  ").nth(1).unwrap();
        assert_eq!(bars.chars().count(), SPARK_BARS);
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| run-")).collect();
        assert_eq!(rows.len(), points.len());
        assert_eq!(
            rows[0],
            "| run-0 | 2026-01-01T00:00:00Z | 0000000 | -x\\|y z | cpu-x | 2.000 | — | 0.500 (0.450 .. 0.550) | 1,000,000 | pass |"
        );
        assert!(
            rows[1].ends_with("| 1.020 | 0.510 (0.459 .. 0.561) | — | pass |"),
            "{}",
            rows[1]
        );
        // A short series is drawn a bar a run, and says nothing of spans.
        let short = table(&points[..3]);
        assert!(short.contains("(3 runs, after/before)\n"), "{short}");
    }

    #[test]
    fn spans_are_medians_of_consecutive_runs() {
        let (bars, span) = spans(&[1.0, 2.0, 3.0], 60);
        assert_eq!((bars, span), (vec![1.0, 2.0, 3.0], 1));
        let (bars, span) = spans(&[1.0, 9.0, 2.0, 4.0, f64::NAN, 5.0, f64::NAN], 3);
        assert_eq!(span, 3);
        assert_eq!(&bars[..2], &[2.0, 4.5]);
        assert!(bars[2].is_nan(), "a span with no value draws none");
        assert_eq!(spans(&[], 60).0, Vec::<f64>::new());
    }

    #[test]
    fn cells_are_written_as_their_text_would_be() {
        assert_eq!(md("a|b\nc\rd"), "a\\|b c d");
        assert_eq!(md("plain"), "plain");
        for n in [0, 7, 999, 1000, 65_536, 1_234_567, u64::MAX] {
            assert_eq!(Thousands(n).to_string(), super::super::format::thousands(n));
        }
        for v in [None, Some(0.0), Some(1.23456e-3), Some(12.0)] {
            assert_eq!(Ms(v).to_string(), super::super::format::ms_number(v));
        }
    }

    #[test]
    fn a_sparkline_spans_its_own_range() {
        assert_eq!(sparkline(&[1.0, 2.0, 3.0]), "▁▅█");
        assert_eq!(sparkline(&[0.5, 0.5]), "▄▄");
        assert_eq!(sparkline(&[1.0, f64::NAN, 2.0]), "▁ █");
        assert_eq!(sparkline(&[]), "");
    }
}
