//! A sweep's charts: bytes moved and median time against the swept parameter.

use super::{esc, legend, open, point, polyline, Axis, Frame};
use crate::results::SweepSeries;
use std::fmt::Write;

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
        panel("bytes moved", bytes, crate::bytes),
        panel("median time (s)", secs, crate::duration),
    ]
}
