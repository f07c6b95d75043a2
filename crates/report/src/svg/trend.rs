//! A case's values run after run (the dashboard's trend) and the index's sparkline.

use super::{esc, legend, open, point, polyline, Axis, Frame};
use std::fmt::Write;

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
