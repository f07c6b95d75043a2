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
    // Every point is an obstacle a label must not cover; placed labels are added as they go.
    let mut taken: Vec<Box2> = cases
        .iter()
        .flat_map(|(_, p)| [f.px(p.before.0, p.before.1), f.px(p.after.0, p.after.1)])
        .map(|(x, y)| Box2 {
            x0: x - 6.0,
            x1: x + 6.0,
            y0: y - 6.0,
            y1: y + 6.0,
        })
        .collect();
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
        // The label beside the after point, where it covers no point and no label placed
        // before it and stays inside the chart; displaced from the point, a leader line joins
        // them.
        let label = &p.label;
        let w = 6.2 * label.chars().count() as f64;
        let (lx, ly, left) = label_place(&f, (ax, ay), w, &taken);
        taken.push(text_box(lx, ly, w, left));
        let anchor = if left { r#" text-anchor="end""# } else { "" };
        if (ly - (ay - 8.0)).abs() > 1.0 {
            // From the point's edge to the label's near end, at the text's middle height.
            let (tx, ty) = (lx, ly - 4.0);
            let (dx, dy) = (tx - ax, ty - ay);
            let d = (dx * dx + dy * dy).sqrt().max(1.0);
            let _ = write!(
                o,
                r#"<line class="leader" x1="{:.1}" y1="{:.1}" x2="{tx:.1}" y2="{ty:.1}"/>"#,
                ax + dx / d * 6.0,
                ay + dy / d * 6.0
            );
        }
        let _ = write!(
            o,
            r#"<text class="label" x="{lx:.1}" y="{ly:.1}"{anchor}>{}</text></g>"#,
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

/// A box on the chart, in pixels.
#[derive(Clone, Copy)]
struct Box2 {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Box2 {
    fn overlaps(&self, o: &Box2) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
}

/// The box of a label of width `w` whose anchor is (`x`, baseline `y`), 11 px type.
fn text_box(x: f64, y: f64, w: f64, left: bool) -> Box2 {
    let x0 = if left { x - w } else { x };
    Box2 {
        x0,
        x1: x0 + w,
        y0: y - 10.0,
        y1: y + 3.0,
    }
}

/// Where a label of width `w` goes for the point `(ax, ay)`: its anchor x, baseline y, and
/// whether it is right-aligned (on the point's left). Beside the point on the right, else on
/// the left, a line above it first, then ever further above and below; the first place inside
/// the plotting area that covers nothing `taken`. Where every place is taken, the first inside
/// the plotting area (a crowded chart overlaps rather than drops a label).
fn label_place(f: &super::Frame, (ax, ay): (f64, f64), w: f64, taken: &[Box2]) -> (f64, f64, bool) {
    // Inside the plotting area (the frame's lines and the axes' labels outside it stay clear);
    // a label may reach into the right margin, as far as the chart's edge.
    let inside = |b: &Box2| {
        b.x0 >= f.left + 2.0
            && b.x1 <= f.width - 2.0
            && b.y0 >= f.top + 2.0
            && b.y1 <= f.height - f.bottom - 2.0
    };
    let mut first_inside = None;
    for step in 0..24 {
        // -8 (a line above the point), +14, -20, +26, …: alternately above and below.
        let off = if step % 2 == 0 {
            -8.0 - 12.0 * (step / 2) as f64
        } else {
            14.0 + 12.0 * (step / 2) as f64
        };
        for left in [false, true] {
            let x = if left { ax - 8.0 } else { ax + 8.0 };
            let b = text_box(x, ay + off, w, left);
            if !inside(&b) {
                continue;
            }
            if !taken.iter().any(|t| t.overlaps(&b)) {
                return (x, ay + off, left);
            }
            first_inside.get_or_insert((x, ay + off, left));
        }
    }
    first_inside.unwrap_or((ax - 8.0, ay - 8.0, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A label as drawn: anchor x, baseline y, right-aligned, text.
    type Label = (f64, f64, bool, String);

    /// The labels of a roofline and its points.
    fn parts(svg: &str) -> (Vec<Label>, Vec<(f64, f64)>) {
        let attr = |t: &str, name: &str| -> f64 {
            let at = t.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            t[at..at + t[at..].find('"').unwrap()].parse().unwrap()
        };
        let labels = svg
            .split("<text class=\"label\"")
            .skip(1)
            .map(|t| {
                let head = &t[..t.find('>').unwrap()];
                (
                    attr(head, "x"),
                    attr(head, "y"),
                    head.contains("text-anchor=\"end\""),
                    t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()].to_string(),
                )
            })
            .collect();
        let points = svg
            .split("<circle class=\"pt ")
            .skip(1)
            .map(|t| (attr(t, "cx"), attr(t, "cy")))
            .collect();
        (labels, points)
    }

    #[test]
    fn labels_cover_no_point_and_no_label_and_a_moved_one_has_its_leader() {
        let fixed: RunResult = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/run-fixed/results.json"
        ))
        .expect("the fixed archive parses");
        // As shipped, and crowded: every case's after point within a few pixels of the first's.
        let mut crowded = fixed.clone();
        let first = crowded.specs[0].after.clone();
        for (i, s) in crowded.specs.iter_mut().enumerate() {
            let by = 1.0 + 0.01 * i as f64;
            s.after.intensity = first.intensity * by;
            s.after.flops = first.flops;
            s.after.summary = first.summary.map(|mut m| {
                m.median_secs /= by;
                m
            });
        }
        for run in [&fixed, &crowded] {
            let svg = roofline(run);
            let (labels, points) = parts(&svg);
            assert!(labels.len() >= 2, "{svg}");
            let boxes: Vec<Box2> = labels
                .iter()
                .map(|(x, y, left, t)| text_box(*x, *y, 6.2 * t.chars().count() as f64, *left))
                .collect();
            for (i, b) in boxes.iter().enumerate() {
                assert!(
                    b.x0 >= 0.0 && b.x1 <= 880.0 && b.y0 >= 0.0,
                    "{}",
                    labels[i].3
                );
                for (j, o) in boxes.iter().enumerate().skip(i + 1) {
                    assert!(!b.overlaps(o), "{} over {}", labels[i].3, labels[j].3);
                }
                for &(x, y) in &points {
                    let pt = Box2 {
                        x0: x - 6.0,
                        x1: x + 6.0,
                        y0: y - 6.0,
                        y1: y + 6.0,
                    };
                    assert!(
                        !b.overlaps(&pt),
                        "{} over the point at {x},{y}",
                        labels[i].3
                    );
                }
            }
            let moved = svg.matches("<line class=\"leader\"").count();
            if std::ptr::eq(run, &crowded) {
                assert!(
                    moved >= labels.len() - 2,
                    "crowded labels are joined to their points: {svg}"
                );
            }
        }
    }
}
