//! The roofline chart: every case of a run on the measured roof, before to after.

use super::{esc, legend, open, pct, point, polyline, Axis, Frame};
use crate::results::{RunResult, SpecResult};
use std::fmt::Write;

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
        roofs.push((bw, t, "roof tensor", "measured roof (bf16 mma.sync)"));
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
    let cases: Vec<(&SpecResult, crate::chart::RooflinePoint)> = crate::chart::roofline_points(run)
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
                    crate::bytes(v.bytes as f64),
                    v.flops as f64,
                    p.0
                ),
                format!(
                    "median {} · {}",
                    v.summary
                        .map_or("—".into(), |m| crate::duration(m.median_secs)),
                    crate::rate(p.1, "FLOP/s")
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
        // The label beside the after point — on its left where the right would run past the
        // chart's edge — moved down past labels already placed.
        let label = &p.label;
        let w = 6.2 * label.chars().count() as f64;
        let left = ax + 8.0 + w > f.width - 2.0;
        let (start, anchor) = if left {
            (ax - 8.0 - w, r#" text-anchor="end""#)
        } else {
            (ax + 8.0, "")
        };
        let mut ly = ay - 8.0;
        for _ in 0..12 {
            if !labels
                .iter()
                .any(|&(px, py, pw)| start < px + pw && px < start + w && (ly - py).abs() < 12.0)
            {
                break;
            }
            ly += 12.0;
        }
        labels.push((start, ly, w));
        let x = if left { start + w } else { start };
        let _ = write!(
            o,
            r#"<text class="label" x="{x:.1}" y="{ly:.1}"{anchor}>{}</text></g>"#,
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
