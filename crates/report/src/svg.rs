//! Inline SVG for the HTML pages: charts a person can hover, focus and read without the page
//! asking any other host for anything. Every data point is an element of its own with a
//! `<title>` (its accessible name and the browser's tooltip) and `tabindex="0"` or a link (so a
//! keyboard reaches it, and the page's script shows the title beside it).
//! The same charts are the run folder's stand-alone `.svg` files ([`standalone`]): one way to
//! draw a chart. (A plotting crate would draw the static files, but writes no element per point
//! with its own title and focus, which the pages need.)

use crate::results::{RunResult, SpecResult, SweepSeries};
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

/// The roofline of a run: every case's before and after variants on the measured roof (and the
/// tensor-core and datasheet roofs where known), an arrow from before to after.
#[expect(
    clippy::too_many_lines,
    reason = "one interactive chart, element by element: every statement writes an element, in the order the page stacks them"
)]
pub fn roofline(run: &RunResult) -> String {
    let bw = run.ceilings.triad_bytes_per_sec;
    let peak = run.ceilings.fma_flops_per_sec;
    let mut roofs = vec![(bw, peak, "roof", "measured roof (triad, FMA peak)")];
    if let Some(t) = run.ceilings.tensor_flops_per_sec {
        roofs.push((bw, t, "roof tensor", "measured roof (tensor cores, bf16)"));
    }
    if let Some(d) = &run.datasheet {
        roofs.push((
            d.bytes_per_sec,
            d.fp32_flops_per_sec,
            "roof datasheet",
            "datasheet roof (FP32)",
        ));
    }
    // The cases the roofline file places (same rule, same labels), each with its spec.
    let cases: Vec<(&SpecResult, super::chart::RooflinePoint)> = super::chart::roofline_points(run)
        .into_iter()
        .filter_map(|p| Some((run.specs.iter().find(|s| s.name == p.spec)?, p)))
        .collect();
    let x = Axis::fit(
        cases
            .iter()
            .flat_map(|c| [c.1.before.0, c.1.after.0])
            .chain(roofs.iter().map(|r| r.1 / r.0)),
        true,
        4.0,
        "arithmetic intensity (FLOP/byte)",
    );
    let y = Axis::fit(
        cases
            .iter()
            .flat_map(|c| [c.1.before.1, c.1.after.1])
            .chain(roofs.iter().map(|r| r.1))
            .chain(roofs.iter().map(|r| r.0 * x.lo)),
        true,
        3.0,
        "achieved FLOP/s",
    );
    let f = Frame::new(880.0, 520.0, x, y);
    let mut o = String::new();
    open(
        &mut o,
        f.width,
        f.height + 24.0,
        "roofline",
        &format!(
            "Roofline of {}: {} cases, before and after, on the measured roof",
            run.device.name,
            cases.len()
        ),
    );
    o.push_str(r#"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>"#);
    f.axes(&mut o, None);
    for (rbw, rpeak, class, label) in &roofs {
        let knee = rpeak / rbw;
        let pts: Vec<(f64, f64)> = [f.x.lo, knee, f.x.hi]
            .iter()
            .filter(|v| **v >= f.x.lo && **v <= f.x.hi)
            .map(|&v| f.px(v, (rbw * v).min(*rpeak)))
            .collect();
        let _ = write!(o, r#"<g class="{class}"><title>{}</title>"#, esc(label));
        polyline(&mut o, &pts, class);
        o.push_str("</g>");
    }
    let mut labels: Vec<(f64, f64, f64)> = Vec::new();
    for (s, p) in &cases {
        let (b, a) = (&p.before, &p.after);
        let (bx, by) = f.px(b.0, b.1);
        let (ax, ay) = f.px(a.0, a.1);
        let _ = write!(o, r#"<g class="case" data-spec="{}">"#, esc(&s.name));
        let (dx, dy) = (ax - bx, ay - by);
        let len = (dx * dx + dy * dy).sqrt();
        if len > 14.0 {
            // Stop the arrow at the after point's edge so its head stays visible.
            let (ex, ey) = (ax - dx / len * 6.0, ay - dy / len * 6.0);
            let _ = write!(
                o,
                r#"<line class="move" x1="{bx:.1}" y1="{by:.1}" x2="{ex:.1}" y2="{ey:.1}" marker-end="url(#arrow)"/>"#
            );
        }
        for (v, side, r, p, pxy) in [
            (&s.before, "before", 4.5, b, (bx, by)),
            (&s.after, "after", 5.5, a, (ax, ay)),
        ] {
            let mut tip = vec![
                format!("{} · {} ({})", s.name, side, v.variant.name()),
                format!(
                    "{} moved · {:.3e} FLOPs · AI {:.3} FLOP/B",
                    super::bytes(v.bytes as f64),
                    v.flops as f64,
                    p.0
                ),
                format!(
                    "median {} · {}",
                    v.summary
                        .map_or("—".into(), |m| super::duration(m.median_secs)),
                    super::rate(p.1, "FLOP/s")
                ),
            ];
            if let Some(ac) = &v.achieved {
                tip.push(format!(
                    "{} of the roof ({} of triad bandwidth, {} of FMA peak)",
                    pct(ac.frac_bandwidth.max(ac.frac_compute)),
                    pct(ac.frac_bandwidth),
                    pct(ac.frac_compute)
                ));
            }
            point(&mut o, pxy, r, side, &tip);
        }
        // The label beside the after point, moved down past labels already placed.
        let label = &p.label;
        let w = 6.2 * label.chars().count() as f64;
        let (lx, mut ly) = (ax + 8.0, ay - 8.0);
        for _ in 0..12 {
            if !labels
                .iter()
                .any(|&(px, py, pw)| lx < px + pw && px < lx + w && (ly - py).abs() < 12.0)
            {
                break;
            }
            ly += 12.0;
        }
        labels.push((lx, ly, w));
        let _ = write!(
            o,
            r#"<text class="label" x="{lx:.1}" y="{ly:.1}">{}</text></g>"#,
            esc(label)
        );
    }
    let mut items = vec![("before", "before"), ("after", "after")];
    for (_, _, class, label) in &roofs {
        items.push((class, label));
    }
    legend(&mut o, f.left, f.height + 14.0, &items);
    o.push_str("</svg>");
    o
}

/// The size of one of a sweep's panels, its legend included.
const SWEEP_PANEL: (f64, f64) = (440.0, 354.0);

/// A sweep's two panels side by side under its title: the run folder's `sweep-GROUP.svg`.
pub fn sweep_file(series: &SweepSeries) -> String {
    let title = format!("Sweep {} over {}", series.group, series.param);
    let top = 28.0;
    let mut o = String::new();
    open(
        &mut o,
        2.0 * SWEEP_PANEL.0,
        SWEEP_PANEL.1 + top,
        "sweep",
        &title,
    );
    let _ = write!(
        o,
        r#"<text class="axis" x="{:.1}" y="18" text-anchor="middle">{}</text>"#,
        SWEEP_PANEL.0,
        esc(&title)
    );
    for (i, panel) in sweep(series).iter().enumerate() {
        let _ = write!(
            o,
            r#"<g transform="translate({:.0} {top:.0})">{panel}</g>"#,
            i as f64 * SWEEP_PANEL.0
        );
    }
    o.push_str("</svg>");
    o
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

/// A sweep's two charts: bytes moved and median time of both variants against the swept
/// parameter, log-log, so that O(N²) and O(N) traffic show as slopes 2 and 1.
pub fn sweep(series: &SweepSeries) -> [String; 2] {
    type Pick = fn(&crate::results::SweepRow) -> (Option<f64>, Option<f64>);
    let bytes: Pick = |r| (Some(r.before_bytes as f64), Some(r.after_bytes as f64));
    let secs: Pick = |r| (r.before_secs, r.after_secs);
    let panel = |title: &str, pick: Pick, fmt: fn(f64) -> String| {
        let x = Axis::fit(
            series.rows.iter().map(|r| r.x as f64),
            true,
            1.3,
            &series.param,
        );
        let y = Axis::fit(
            series
                .rows
                .iter()
                .flat_map(|r| {
                    let (b, a) = pick(r);
                    [b, a]
                })
                .flatten(),
            true,
            2.0,
            title,
        );
        let f = Frame::new(SWEEP_PANEL.0, SWEEP_PANEL.1 - 24.0, x, y);
        let mut o = String::new();
        open(
            &mut o,
            f.width,
            f.height + 24.0,
            "sweep",
            &format!("Sweep {}: {title} against {}", series.group, series.param),
        );
        let ticks: Vec<(f64, String)> = series
            .rows
            .iter()
            .map(|r| (r.x as f64, r.x.to_string()))
            .collect();
        f.axes(&mut o, Some(&ticks));
        for (which, side, variant) in [
            (0, "before", series.before_variant.name()),
            (1, "after", series.after_variant.name()),
        ] {
            let pts: Vec<(f64, f64, &crate::results::SweepRow)> = series
                .rows
                .iter()
                .filter_map(|r| {
                    let (b, a) = pick(r);
                    let v = if which == 0 { b } else { a };
                    v.filter(|v| *v > 0.0).map(|v| (r.x as f64, v, r))
                })
                .collect();
            let px: Vec<(f64, f64)> = pts.iter().map(|p| f.px(p.0, p.1)).collect();
            polyline(&mut o, &px, &format!("series {side}"));
            for (p, xy) in pts.iter().zip(&px) {
                point(
                    &mut o,
                    *xy,
                    4.5,
                    side,
                    &[
                        format!("{} · {side} ({variant})", p.2.spec),
                        format!("{} = {}", series.param, p.2.x),
                        format!("{title}: {}", fmt(p.1)),
                    ],
                );
            }
        }
        legend(
            &mut o,
            f.left,
            f.height + 14.0,
            &[
                ("before", series.before_variant.name()),
                ("after", series.after_variant.name()),
            ],
        );
        o.push_str("</svg>");
        o
    };
    [
        panel("bytes moved", bytes, super::bytes),
        panel("median time", secs, super::duration),
    ]
}

/// The `q` quantile of sorted values (linear between order statistics).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = q * (sorted.len() - 1) as f64;
    let (i, t) = (at.floor() as usize, at.fract());
    let j = (i + 1).min(sorted.len() - 1);
    sorted[i] * (1.0 - t) + sorted[j] * t
}

/// Most sample dots one row of a distribution draws (the box is computed from all of them).
const MAX_DOTS: usize = 400;

/// The distribution of a spec's samples, one row per variant: every sample as a dot (up to
/// [`MAX_DOTS`], evenly chosen), the quartile box, the median, and the 5th–95th percentile
/// whiskers, on one time axis.
#[expect(
    clippy::too_many_lines,
    reason = "one interactive chart, element by element: every statement writes an element, in the order the page stacks them"
)]
pub fn samples(s: &SpecResult) -> Option<String> {
    let p = s.samples.as_ref()?;
    if p.before_secs.is_empty() && p.after_secs.is_empty() {
        return None;
    }
    let rows = [
        ("before", s.before.variant.name(), &p.before_secs),
        ("after", s.after.variant.name(), &p.after_secs),
    ];
    let all: Vec<f64> = rows.iter().flat_map(|r| r.2.iter().copied()).collect();
    let (lo, hi) = all
        .iter()
        .filter(|v| v.is_finite() && **v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
    // A wide spread (a slow outlier) reads better on a log axis.
    let log = lo.is_finite() && hi / lo > 8.0;
    let x = Axis::fit(
        all.iter().copied(),
        log,
        if log { 1.15 } else { 0.06 },
        "time per execution",
    );
    let y = Axis {
        lo: 0.0,
        hi: 2.0,
        log: false,
        label: String::new(),
    };
    let mut f = Frame::new(880.0, 170.0, x, y);
    f.left = 86.0;
    f.bottom = 40.0;
    let mut o = String::new();
    open(
        &mut o,
        f.width,
        f.height,
        "samples",
        &format!(
            "{}: the time of every sample, {} and {}",
            s.name,
            s.before.variant.name(),
            s.after.variant.name()
        ),
    );
    let (x0, x1) = (f.left, f.width - f.right);
    let _ = write!(
        o,
        r#"<rect class="plot" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}"/>"#,
        f.top,
        x1 - x0,
        f.height - f.top - f.bottom
    );
    for v in f.x.ticks() {
        let (px, _) = f.px(v, 0.0);
        let _ = write!(
            o,
            r#"<line class="grid" x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}"/><text class="tick" x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            f.top,
            f.height - f.bottom,
            f.height - f.bottom + 14.0,
            esc(&super::duration(v))
        );
    }
    let _ = write!(
        o,
        r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        f.height - 6.0,
        esc(&f.x.label)
    );
    for (i, (side, variant, xs)) in rows.iter().enumerate() {
        let cy = 1.5 - i as f64;
        let (_, py) = f.px(f.x.lo, cy);
        let _ = write!(
            o,
            r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            x0 - 6.0,
            py + 4.0,
            esc(variant)
        );
        let mut sorted: Vec<f64> = xs.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            continue;
        }
        let stride = sorted.len().div_ceil(MAX_DOTS);
        let _ = write!(o, r#"<g class="dots {side}">"#);
        for (k, v) in xs.iter().enumerate().step_by(stride) {
            // A fixed jitter by the sample's index: the same picture every render.
            let jitter = ((k as u64).wrapping_mul(2654435761) % 1000) as f64 / 1000.0 - 0.5;
            let (px, py) = f.px(*v, cy + jitter * 0.5);
            let _ = write!(o, r#"<circle cx="{px:.1}" cy="{py:.1}" r="2"/>"#);
        }
        o.push_str("</g>");
        let q = |p: f64| quantile(&sorted, p);
        let (p5, q1, med, q3, p95) = (q(0.05), q(0.25), q(0.5), q(0.75), q(0.95));
        let (a, top) = f.px(q1, cy + 0.3);
        let (b, bottom) = f.px(q3, cy - 0.3);
        let (w0, mid) = f.px(p5, cy);
        let (w1, _) = f.px(p95, cy);
        let (m, _) = f.px(med, cy);
        let tip = [
            format!("{} · {side} ({variant}): {} samples", s.name, sorted.len()),
            format!(
                "median {} · quartiles {} .. {}",
                super::duration(med),
                super::duration(q1),
                super::duration(q3)
            ),
            format!(
                "5th–95th percentile {} .. {} · min {} · max {}",
                super::duration(p5),
                super::duration(p95),
                super::duration(sorted[0]),
                super::duration(sorted[sorted.len() - 1])
            ),
        ];
        let text = tip.join("\n");
        let _ = write!(
            o,
            r#"<g class="box {side}" tabindex="0" role="img"><title>{}</title><line class="whisker" x1="{w0:.1}" y1="{mid:.1}" x2="{w1:.1}" y2="{mid:.1}"/><rect x="{a:.1}" y="{top:.1}" width="{:.1}" height="{:.1}"/><line class="median" x1="{m:.1}" y1="{top:.1}" x2="{m:.1}" y2="{bottom:.1}"/></g>"#,
            esc(&text),
            (b - a).max(1.0),
            bottom - top
        );
    }
    o.push_str("</svg>");
    Some(o)
}

/// One run's value in a trend: the value with its 95% CI, the tooltip's lines, the page of the
/// run (when its archive was there to draw one), and whether it became a baseline.
#[derive(Debug, Clone)]
pub struct TrendPoint {
    pub value: f64,
    pub ci: Option<(f64, f64)>,
    pub tip: Vec<String>,
    pub href: Option<String>,
    pub accepted: bool,
}

/// One line of a trend: a class (`before`, `after`, `ratio`), its legend's name, and a value
/// (or none) for each run, in run order.
#[derive(Debug, Clone)]
pub struct TrendSeries {
    pub class: &'static str,
    pub name: String,
    pub points: Vec<Option<TrendPoint>>,
}

/// A change point: where a new level began (between runs `at - 1` and `at`), its label and its
/// tooltip.
#[derive(Debug, Clone)]
pub struct TrendShift {
    pub at: usize,
    pub label: String,
    pub tip: Vec<String>,
}

/// How many of a trend's newest runs get a dot with a tooltip and a link.
pub const MARKED_POINTS: usize = 50;

/// A trend over runs: each series' values with CI whiskers, the runs that became baselines
/// ringed, detected change points as dashed lines, x ticks at a few runs (`x_labels`: run index,
/// label), and a dotted line at `reference` (1 for a ratio). The newest [`MARKED_POINTS`] runs
/// are dots with their CI, tooltip and link; older runs are the line alone.
#[expect(
    clippy::too_many_lines,
    reason = "one interactive chart, element by element: every statement writes an element, in the order the page stacks them"
)]
pub fn trend(
    label: &str,
    y_label: &str,
    series: &[TrendSeries],
    x_labels: &[(usize, String)],
    shifts: &[TrendShift],
    reference: Option<f64>,
) -> String {
    let n = series.iter().map(|s| s.points.len()).max().unwrap_or(0);
    let values = series
        .iter()
        .flat_map(|s| s.points.iter().flatten())
        .flat_map(|p| [Some(p.value), p.ci.map(|c| c.0), p.ci.map(|c| c.1)])
        .flatten()
        .chain(reference);
    let y = Axis::fit(values, false, 0.08, y_label);
    let x = Axis {
        lo: -0.5,
        hi: n.max(1) as f64 - 0.5,
        log: false,
        label: "run (oldest → newest)".into(),
    };
    let mut f = Frame::new(960.0, 340.0, x, y);
    f.left = 72.0;
    let mut o = String::new();
    open(&mut o, f.width, f.height + 24.0, "trend", label);
    let ticks: Vec<(f64, String)> = x_labels
        .iter()
        .map(|(i, l)| (*i as f64, l.clone()))
        .collect();
    f.axes(&mut o, Some(&ticks));
    if let Some(r) = reference {
        let (x0, y0) = f.px(f.x.lo, r);
        let (x1, _) = f.px(f.x.hi, r);
        let _ = write!(
            o,
            r#"<line class="one" x1="{x0:.1}" y1="{y0:.1}" x2="{x1:.1}" y2="{y0:.1}"/>"#
        );
    }
    for sh in shifts {
        let (px, _) = f.px(sh.at as f64 - 0.5, f.y.lo);
        let text = sh.tip.join("\n");
        let _ = write!(
            o,
            r#"<g class="shift-mark" tabindex="0" role="img"><title>{}</title><line class="shift" x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}"/><text class="shift-label" x="{:.1}" y="{:.1}">{}</text></g>"#,
            esc(&text),
            f.top,
            f.height - f.bottom,
            px + 3.0,
            f.top + 12.0,
            esc(&sh.label)
        );
    }
    // Dots shrink as runs crowd, so that two thousand runs still read as a line.
    let r = if n > 400 {
        2.0
    } else if n > 100 {
        3.0
    } else {
        4.5
    };
    // Only the newest runs get a dot, a CI bar and a tooltip: older ones are the line (a
    // thousand dots of a pixel each say nothing a line does not, and weigh a megabyte).
    let marked_from = n.saturating_sub(MARKED_POINTS);
    for s in series {
        let pts: Vec<(usize, &TrendPoint)> = s
            .points
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i, p)))
            .collect();
        let line: Vec<(f64, f64)> = pts.iter().map(|(i, p)| f.px(*i as f64, p.value)).collect();
        let _ = write!(o, r#"<g class="series-{}">"#, s.class);
        polyline(&mut o, &line, &format!("series {}", s.class));
        let ring = |o: &mut String, xy: &(f64, f64)| {
            let _ = write!(
                o,
                r#"<circle class="accepted" cx="{:.1}" cy="{:.1}" r="{:.1}"/>"#,
                xy.0,
                xy.1,
                r + 3.5
            );
        };
        for ((i, p), xy) in pts.iter().zip(&line) {
            if *i < marked_from {
                if p.accepted {
                    ring(&mut o, xy);
                }
                continue;
            }
            if let Some((lo, hi)) = p.ci {
                let (_, a) = f.px(*i as f64, lo);
                let (_, b) = f.px(*i as f64, hi);
                let _ = write!(
                    o,
                    r#"<line class="ci {}" x1="{:.1}" y1="{a:.1}" x2="{:.1}" y2="{b:.1}"/>"#,
                    s.class, xy.0, xy.0
                );
            }
            if p.accepted {
                ring(&mut o, xy);
            }
            match &p.href {
                Some(h) => {
                    let _ = write!(
                        o,
                        r#"<a href="{}" class="pt-link"><circle class="pt {}" cx="{:.1}" cy="{:.1}" r="{r:.1}"><title>{}</title></circle></a>"#,
                        esc(h),
                        s.class,
                        xy.0,
                        xy.1,
                        esc(&p.tip.join("\n"))
                    );
                }
                None => point(&mut o, *xy, r, s.class, &p.tip),
            }
        }
        o.push_str("</g>");
    }
    let mut items: Vec<(&str, &str)> = series.iter().map(|s| (s.class, s.name.as_str())).collect();
    if series
        .iter()
        .any(|s| s.points.iter().flatten().any(|p| p.accepted))
    {
        items.push(("accepted", "accepted as baseline"));
    }
    if !shifts.is_empty() {
        items.push(("shift", "change point"));
    }
    legend(&mut o, f.left, f.height + 14.0, &items);
    o.push_str("</svg>");
    o
}

/// A small line of `values` (its own range), the newest value dotted, for the index's tables.
pub fn sparkline(values: &[f64], label: &str) -> String {
    let (w, h, pad) = (120.0, 26.0, 3.0);
    let finite: Vec<(usize, f64)> = values
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .collect();
    let (lo, hi) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, v)| {
            (a.min(*v), b.max(*v))
        });
    let span = if hi > lo { hi - lo } else { 1.0 };
    let n = values.len().max(2) as f64 - 1.0;
    let pts: Vec<(f64, f64)> = finite
        .iter()
        .map(|(i, v)| {
            let y = if hi > lo { (v - lo) / span } else { 0.5 };
            (
                pad + *i as f64 / n * (w - 2.0 * pad),
                h - pad - y * (h - 2.0 * pad),
            )
        })
        .collect();
    let mut o = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{}">"#,
        esc(label)
    );
    polyline(&mut o, &pts, "spark");
    if let Some((x, y)) = pts.last() {
        let _ = write!(o, r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5"/>"#);
    }
    o.push_str("</svg>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_roof_is_drawn_only_when_measured() {
        let mut run: RunResult = serde_json::from_str(include_str!(
            "../../../tests/fixtures/run-fixed/results.json"
        ))
        .expect("the fixed archive parses");
        run.ceilings.tensor_flops_per_sec = None;
        let svg = roofline(&run);
        assert!(
            !svg.contains("tensor cores"),
            "no tensor roof without a measurement"
        );
        run.ceilings.tensor_flops_per_sec = Some(run.ceilings.fma_flops_per_sec * 8.0);
        assert!(roofline(&run).contains("measured roof (tensor cores, bf16)"));
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
