//! Inline SVG for the HTML pages: charts a person can hover, focus and read without the page
//! asking any other host for anything. Every data point is an element of its own with a
//! `<title>` (its accessible name and the browser's tooltip) and `tabindex="0"` or a link (so a
//! keyboard reaches it, and the page's script shows the title beside it).
//! The same charts are the run folder's stand-alone `.svg` files ([`standalone`]): one way to
//! draw a chart. (A plotting crate would draw the static files, but writes no element per point
//! with its own title and focus, which the pages need.)//!
//! This file is the kit every chart draws with (axes, the plot frame, points, lines, legends,
//! the stand-alone file); each chart is a file of its own: `roofline`, `sweep`, `samples`,
//! `trend` (and the index's sparkline).

mod roofline;
mod samples;
mod sweep;
mod trend;

pub use roofline::roofline;
#[cfg(test)]
use samples::quantile;
pub use samples::samples;
pub use sweep::{sweep, sweep_file};
pub use trend::{sparkline, trend, TrendPoint, TrendSeries, TrendShift, MARKED_POINTS};

use crate::results::RunResult;
use std::fmt::Write;

/// Escapes text for XML: the pages' one escaping (SVG is inline HTML here).
pub use super::escape::html as esc;

/// One axis: its range, linear or logarithmic, and its label.
#[derive(Debug, Clone)]
pub struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
    pub label: String,
}

impl Axis {
    /// An axis covering `values` (non-finite ones and, on a log axis, non-positive ones left
    /// out), with `pad` of margin: a factor on a log axis, a fraction of the span on a linear one.
    pub fn fit(values: impl IntoIterator<Item = f64>, log: bool, pad: f64, label: &str) -> Axis {
        let (mut lo, mut hi) = values
            .into_iter()
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        if !lo.is_finite() {
            (lo, hi) = if log { (0.1, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            if hi <= lo {
                (lo, hi) = (lo / 2.0, hi * 2.0);
            }
            (lo, hi) = (lo / pad, hi * pad);
        } else {
            if hi <= lo {
                let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
                (lo, hi) = (lo - d, hi + d);
            }
            let span = hi - lo;
            (lo, hi) = (lo - span * pad, hi + span * pad);
        }
        Axis {
            lo,
            hi,
            log,
            label: label.to_string(),
        }
    }

    /// Where `v` lies along the axis, 0 at `lo` and 1 at `hi`.
    pub fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.max(f64::MIN_POSITIVE).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// Tick values: powers of ten (with 2× and 5× between them on a short log axis), or round
    /// steps on a linear one.
    pub fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().ceil() as i32,
                self.hi.log10().floor() as i32,
            );
            let decades: Vec<f64> = (a..=b).map(|e| 10f64.powi(e)).collect();
            if decades.len() >= 3 {
                let step = decades.len().div_ceil(8);
                return decades.into_iter().step_by(step).collect();
            }
            let mut t = Vec::new();
            for e in (a - 1)..=(b + 1) {
                for m in [1.0, 2.0, 5.0] {
                    let v = m * 10f64.powi(e);
                    if v >= self.lo && v <= self.hi {
                        t.push(v);
                    }
                }
            }
            return t;
        }
        let span = self.hi - self.lo;
        let raw = span / 6.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| span / s <= 7.0)
            .unwrap_or(10.0 * mag);
        let mut v = (self.lo / step).ceil() * step;
        let mut t = Vec::new();
        while v <= self.hi + step * 1e-9 && t.len() < 20 {
            t.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
            v += step;
        }
        t
    }
}

/// A tick's label: compact engineering notation.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    let e = a.log10().floor();
    if (1e-2..1e4).contains(&a) {
        let s = format!("{v:.3}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        return s.to_string();
    }
    let m = v / 10f64.powf(e);
    if (m.round() - m).abs() < 1e-6 {
        format!("{}e{}", m.round(), e)
    } else {
        format!("{m:.1}e{e}")
    }
}

/// A plotting area: the picture's size, its margins, and its two axes.
#[derive(Debug, Clone)]
pub struct Frame {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
    pub x: Axis,
    pub y: Axis,
}

impl Frame {
    pub fn new(width: f64, height: f64, x: Axis, y: Axis) -> Frame {
        Frame {
            width,
            height,
            left: 64.0,
            right: 16.0,
            top: 16.0,
            bottom: 46.0,
            x,
            y,
        }
    }

    /// The pixel position of a data point.
    pub fn px(&self, x: f64, y: f64) -> (f64, f64) {
        let w = self.width - self.left - self.right;
        let h = self.height - self.top - self.bottom;
        (
            self.left + self.x.frac(x).clamp(-0.05, 1.05) * w,
            self.top + (1.0 - self.y.frac(y).clamp(-0.05, 1.05)) * h,
        )
    }

    /// Grid, ticks and axis labels.
    pub fn axes(&self, out: &mut String, x_ticks: Option<&[(f64, String)]>) {
        let (x0, x1) = (self.left, self.width - self.right);
        let (y0, y1) = (self.top, self.height - self.bottom);
        let _ = write!(
            out,
            r#"<rect class="plot" x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}"/>"#,
            x1 - x0,
            y1 - y0
        );
        let xt: Vec<(f64, String)> = match x_ticks {
            Some(t) => t.to_vec(),
            None => self
                .x
                .ticks()
                .into_iter()
                .map(|v| (v, tick_label(v)))
                .collect(),
        };
        for (v, label) in xt {
            let (px, _) = self.px(v, self.y.lo);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{px:.1}" y1="{y0:.1}" x2="{px:.1}" y2="{y1:.1}"/><text class="tick" x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                y1 + 14.0,
                esc(&label)
            );
        }
        for v in self.y.ticks() {
            let (_, py) = self.px(self.x.lo, v);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{x0:.1}" y1="{py:.1}" x2="{x1:.1}" y2="{py:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                x0 - 4.0,
                py + 4.0,
                tick_label(v)
            );
        }
        let _ = write!(
            out,
            r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text class="axis" transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            (x0 + x1) / 2.0,
            self.height - 8.0,
            esc(&self.x.label),
            (y0 + y1) / 2.0,
            esc(&self.y.label)
        );
    }
}

/// The opening of a chart: its size, its accessible name and description.
pub fn open(out: &mut String, width: f64, height: f64, class: &str, label: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart {class}" viewBox="0 0 {width:.0} {height:.0}" width="{width:.0}" height="{height:.0}" role="group" aria-label="{}">"#,
        esc(label)
    );
}

/// A data point: a circle with its tooltip (the lines of `tip`), reachable by keyboard.
pub fn point(out: &mut String, (x, y): (f64, f64), r: f64, class: &str, tip: &[String]) {
    // The `<title>` is the point's accessible name, the browser's tooltip, and what the page's
    // script shows beside a focused point: written once.
    let _ = write!(
        out,
        r#"<circle class="pt {class}" cx="{x:.1}" cy="{y:.1}" r="{r:.1}" tabindex="0" role="img"><title>{}</title></circle>"#,
        esc(&tip.join("\n"))
    );
}

/// A line through pixel points.
pub fn polyline(out: &mut String, pts: &[(f64, f64)], class: &str) {
    if pts.len() < 2 {
        return;
    }
    let p: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = write!(
        out,
        r#"<polyline class="{class}" points="{}" fill="none"/>"#,
        p.join(" ")
    );
}

/// A legend row at (x, y): a swatch of `class` and its text, one after another.
pub fn legend(out: &mut String, x: f64, y: f64, items: &[(&str, &str)]) {
    let mut at = x;
    for (class, text) in items {
        let _ = write!(
            out,
            r#"<circle class="sw {class}" cx="{:.1}" cy="{:.1}" r="5"/><text class="legend" x="{:.1}" y="{:.1}">{}</text>"#,
            at + 5.0,
            y - 4.0,
            at + 14.0,
            y,
            esc(text)
        );
        at += 24.0 + 6.5 * text.chars().count() as f64;
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Every chart of a run as the files of its folder, (file name, SVG text): `roofline.svg` and
/// one `sweep-GROUP.svg` a sweep, each a page's chart made [`standalone`], so that a Markdown
/// viewer or a browser shows it without the page.
pub fn files(run: &RunResult) -> crate::error::Result<Vec<(String, String)>> {
    let mut out = vec![("roofline.svg".to_string(), standalone(&roofline(run)))];
    for g in &run.sweeps {
        out.push((
            super::chart::sweep_file_name(g)?,
            standalone(&sweep_file(g)),
        ));
    }
    Ok(out)
}

/// A chart made a file of its own: the pages' chart styles (the style sheet's `svg` rules and
/// its colours) embedded after the opening tag, so that it looks as it does on a page.
pub fn standalone(chart: &str) -> String {
    let css = super::style::STYLE;
    let colours = css
        .lines()
        .find(|l| l.starts_with(":root{"))
        .map(|l| l.replacen(":root", "svg", 1))
        .unwrap_or_default();
    let rules: Vec<&str> = css.lines().filter(|l| l.starts_with("svg")).collect();
    let (open, rest) = chart.split_at(chart.find('>').map_or(0, |i| i + 1));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{open}<style>{colours}\n{}</style>{rest}\n",
        rules.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_roof_is_drawn_only_when_measured() {
        let mut run: RunResult = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/run-fixed/results.json"
        ))
        .expect("the fixed archive parses");
        run.ceilings.tensor_flops_per_sec = None;
        let svg = roofline(&run);
        assert!(
            !svg.contains("mma.sync"),
            "no tensor roof without a measurement"
        );
        run.ceilings.tensor_flops_per_sec = Some(run.ceilings.fma_flops_per_sec * 8.0);
        assert!(roofline(&run).contains("measured roof (bf16 mma.sync)"));
    }

    #[test]
    fn every_sweep_point_is_labelled_with_its_sweep_and_no_label_runs_past_the_edge() {
        let run: RunResult = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/run-fixed/results.json"
        ))
        .expect("the fixed archive parses");
        let mut run = run;
        // A case at the far right of the chart: its label goes on the point's left.
        run.specs[0].after.intensity *= 1e4;
        run.specs[0].name = "tiny-chain-at-the-right-edge".into();
        let svg = roofline(&run);
        assert!(
            svg.contains(r#"text-anchor="end">tiny-chain-at-the-right-edge<"#),
            "{svg}"
        );
        let labels: Vec<&str> = svg
            .split(r#"<text class="label""#)
            .skip(1)
            .map(|t| &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()])
            .collect();
        assert!(
            labels.contains(&"tiny-sweep: rows=16") && labels.contains(&"tiny-sweep: rows=64"),
            "{labels:?}"
        );
        // Every label's extent (6.2 px a character) inside the 880 px chart.
        for t in svg.split(r#"<text class="label" x=""#).skip(1) {
            let x: f64 = t[..t.find('"').unwrap()].parse().unwrap();
            let text = &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()];
            let w = 6.2 * text.chars().count() as f64;
            let (from, to) = if t[..t.find('>').unwrap()].contains("text-anchor=\"end\"") {
                (x - w, x)
            } else {
                (x, x + w)
            };
            assert!(from >= 0.0 && to <= 880.0, "{text}: {from}..{to}");
        }
    }

    #[test]
    fn axes_map_their_ends_and_tick_inside() {
        let a = Axis::fit([1e-3, 1e3], true, 1.0, "x");
        assert!((a.frac(1e-3)).abs() < 1e-12 && (a.frac(1e3) - 1.0).abs() < 1e-12);
        assert!((a.frac(1.0) - 0.5).abs() < 1e-12);
        assert!(a.ticks().iter().all(|t| *t >= a.lo && *t <= a.hi));
        let l = Axis::fit([0.0, 9.0], false, 0.0, "y");
        let t = l.ticks();
        assert!(
            t.len() >= 3 && t.iter().all(|v| *v >= 0.0 && *v <= 9.0),
            "{t:?}"
        );
        // One value still gets a range.
        let one = Axis::fit([5.0], false, 0.0, "y");
        assert!(one.lo < 5.0 && one.hi > 5.0);
        let none = Axis::fit([f64::NAN], true, 1.0, "y");
        assert!(none.lo > 0.0 && none.hi > none.lo);
    }

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(
            esc("<a href=\"x\">&'\u{1b}"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39; "
        );
        let mut o = String::new();
        point(&mut o, (1.0, 2.0), 3.0, "after", &["<script>".into()]);
        assert!(
            !o.contains("<script>") && o.contains("&lt;script&gt;"),
            "{o}"
        );
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(1e9), "1e9");
        assert_eq!(tick_label(2.5e-5), "2.5e-5");
        assert_eq!(tick_label(0.5), "0.5");
        assert_eq!(tick_label(100.0), "100");
        assert_eq!(quantile(&[1.0, 2.0, 3.0], 0.5), 2.0);
    }
}
