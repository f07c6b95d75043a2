//! The distribution of a spec's samples: dots, quartile box, median and whiskers per variant.

use super::{esc, open, Axis, Frame};
use crate::results::SpecResult;
use std::fmt::Write;

/// The `q` quantile of sorted values (linear between order statistics).
pub(super) fn quantile(sorted: &[f64], q: f64) -> f64 {
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
            esc(&crate::duration(v))
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
                crate::duration(med),
                crate::duration(q1),
                crate::duration(q3)
            ),
            format!(
                "5th–95th percentile {} .. {} · min {} · max {}",
                crate::duration(p5),
                crate::duration(p95),
                crate::duration(sorted[0]),
                crate::duration(sorted[sorted.len() - 1])
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
