//! SVG charts for the run directory (plotters' SVG backend: no system fonts are needed, text is
//! written as SVG `<text>` and laid out by the viewer). The roofline places every case on the
//! measured (and, where known, datasheet) roofs; a sweep chart shows bytes and time against the
//! swept parameter. Both are pure functions of a `RunResult`, so `opledger report` can redraw
//! them from an archive.

use crate::error::{Error, Result};
use crate::results::{RunResult, SweepSeries};
use plotters::prelude::*;

const WIDTH_PX: u32 = 960;
const HEIGHT_PX: u32 = 600;
const BEFORE: RGBColor = RGBColor(90, 110, 140);
const AFTER: RGBColor = RGBColor(220, 110, 20);
const ROOF: RGBColor = RGBColor(20, 20, 20);
const DATASHEET: RGBColor = RGBColor(150, 150, 150);
const TENSOR: RGBColor = RGBColor(40, 120, 60);
/// Approximate width of one character and height of one line of an 11 px label.
const LABEL_CHAR_PX: i32 = 6;
const LABEL_LINE_PX: i32 = 13;

/// One case on the roofline: where its before and after variants landed.
#[derive(Debug, Clone, PartialEq)]
pub struct RooflinePoint {
    pub spec: String,
    /// The text beside the point: the spec's name, or for a sweep point its parameter value
    /// (the sweep's name leads its first point), so a sweep's labels stay short.
    pub label: String,
    /// (arithmetic intensity FLOP/byte, achieved FLOP/s).
    pub before: (f64, f64),
    pub after: (f64, f64),
}

/// The cases that can be placed on a log-log roofline: measured, with FLOPs and bytes > 0.
pub fn roofline_points(run: &RunResult) -> Vec<RooflinePoint> {
    let place = |v: &crate::results::VariantResult| {
        let secs = v.summary.as_ref()?.median_secs;
        let flops_per_sec = v.flops as f64 / secs;
        (v.intensity > 0.0 && v.intensity.is_finite() && flops_per_sec > 0.0 && secs > 0.0)
            .then_some((v.intensity, flops_per_sec))
    };
    let mut groups_seen = std::collections::BTreeSet::new();
    run.specs
        .iter()
        .filter_map(|s| {
            let label = match &s.sweep {
                Some(pt) if groups_seen.insert(pt.group.clone()) => {
                    format!("{}: {}", pt.group, pt.label)
                }
                Some(pt) => pt.label.clone(),
                None => s.name.clone(),
            };
            Some(RooflinePoint {
                spec: s.name.clone(),
                label,
                before: place(&s.before)?,
                after: place(&s.after)?,
            })
        })
        .collect()
}

fn chart_error(e: impl std::fmt::Display) -> Error {
    Error::Chart {
        name: "svg".into(),
        message: e.to_string(),
    }
}

/// A range covering `values` with a margin of `pad`× on each side (log axes).
fn log_range(values: impl Iterator<Item = f64>, pad: f64) -> std::ops::Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() || hi <= 0.0 {
        return 0.1..10.0;
    }
    (lo / pad)..(hi * pad)
}

/// Tick label for log axes: 1e-3 … 1e12 written compactly.
fn sci_label(v: &f64) -> String {
    let e = v.log10().round();
    if (v.log10() - e).abs() < 1e-6 {
        format!("1e{e}")
    } else {
        format!("{v:.2e}")
    }
}

/// The roofline chart of a run as an SVG document: log-log FLOP/s against FLOP/byte, the
/// measured roof (triad bandwidth, FMA peak; the tensor-core peak too when measured), the
/// datasheet roof when the device has one, and
/// each case as two points, before → after, joined by an arrow.
pub fn roofline_svg(run: &RunResult) -> Result<String> {
    let points = roofline_points(run);
    let bw = run.ceilings.triad_bytes_per_sec;
    let peak = run.ceilings.fma_flops_per_sec;
    let ridge = peak / bw;
    let mut roofs = vec![(bw, peak, "measured roof (triad, FMA peak)", ROOF)];
    // bf16 cases are judged against the tensor-core peak: draw that roof too where measured.
    if let Some(tensor) = run.ceilings.tensor_flops_per_sec {
        roofs.push((bw, tensor, "measured roof (tensor cores, bf16)", TENSOR));
    }
    if let Some(d) = &run.datasheet {
        roofs.push((
            d.bytes_per_sec,
            d.fp32_flops_per_sec,
            "datasheet roof (FP32)",
            DATASHEET,
        ));
    }
    let xs = points
        .iter()
        .flat_map(|p| [p.before.0, p.after.0])
        .chain(roofs.iter().map(|r| r.1 / r.0));
    let x_range = log_range(xs, 4.0);
    let ys = points
        .iter()
        .flat_map(|p| [p.before.1, p.after.1])
        .chain(roofs.iter().map(|r| r.1))
        .chain(roofs.iter().map(|r| r.0 * x_range.start));
    let y_range = log_range(ys, 3.0);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Roofline: {} · ridge {ridge:.1} FLOP/B", run.device.name),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range.clone().log_scale(), y_range.clone().log_scale())
            .map_err(chart_error)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity (FLOP/byte)")
            .y_desc("achieved FLOP/s")
            .x_label_formatter(&sci_label)
            .y_label_formatter(&sci_label)
            .draw()
            .map_err(chart_error)?;
        for (roof_bw, roof_peak, label, color) in &roofs {
            let knee = roof_peak / roof_bw;
            let line: Vec<(f64, f64)> = [x_range.start, knee, x_range.end]
                .iter()
                .map(|&x| (x, (roof_bw * x).min(*roof_peak)))
                .collect();
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(2)))
                .map_err(chart_error)?
                .label(*label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        for p in &points {
            chart
                .draw_series(LineSeries::new([p.before, p.after], BEFORE.stroke_width(1)))
                .map_err(chart_error)?;
            // The arrowhead in pixels, so it looks the same at every scale.
            let (bx, by) = chart.backend_coord(&p.before);
            let (ax, ay) = chart.backend_coord(&p.after);
            let (dx, dy) = ((ax - bx) as f64, (ay - by) as f64);
            let len = (dx * dx + dy * dy).sqrt();
            if len > 12.0 {
                let (ux, uy) = (dx / len, dy / len);
                let tip = (ax as f64 - ux * 5.0, ay as f64 - uy * 5.0);
                let base = (tip.0 - ux * 9.0, tip.1 - uy * 9.0);
                let corner = |s: f64| {
                    (
                        (base.0 - uy * 4.0 * s).round() as i32,
                        (base.1 + ux * 4.0 * s).round() as i32,
                    )
                };
                root.draw(&Polygon::new(
                    vec![
                        (tip.0.round() as i32, tip.1.round() as i32),
                        corner(1.0),
                        corner(-1.0),
                    ],
                    BEFORE.filled(),
                ))
                .map_err(chart_error)?;
            }
        }
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Circle::new(p.before, 4, BEFORE.filled())),
            )
            .map_err(chart_error)?
            .label("before")
            .legend(|(x, y)| Circle::new((x + 10, y), 4, BEFORE.filled()));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Circle::new(p.after, 5, AFTER.filled())),
            )
            .map_err(chart_error)?
            .label("after")
            .legend(|(x, y)| Circle::new((x + 10, y), 5, AFTER.filled()));
        // Labels beside their points, each moved down past the labels already placed, so that
        // cases that land close together (sweep points) stay legible.
        let mut placed: Vec<(i32, i32, i32, i32)> = Vec::new();
        for p in &points {
            let (ax, ay) = chart.backend_coord(&p.after);
            let w = LABEL_CHAR_PX * p.label.chars().count() as i32;
            let (x, mut y) = (ax + 7, ay - 14);
            for _ in 0..12 {
                let overlaps = placed.iter().any(|&(px, py, pw, ph)| {
                    x < px + pw && px < x + w && y < py + ph && py < y + LABEL_LINE_PX
                });
                if !overlaps {
                    break;
                }
                y += LABEL_LINE_PX;
            }
            placed.push((x, y, w, LABEL_LINE_PX));
            if y != ay - 14 {
                // Moved away from its point: a thin leader line says whose label it is.
                root.draw(&PathElement::new(
                    vec![(ax, ay), (x - 2, y + LABEL_LINE_PX / 2)],
                    BLACK.mix(0.35).stroke_width(1),
                ))
                .map_err(chart_error)?;
            }
            root.draw(&Text::new(
                p.label.clone(),
                (x, y),
                ("sans-serif", 11).into_font().color(&BLACK),
            ))
            .map_err(chart_error)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(chart_error)?;
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// The file name of a sweep's chart in the run directory. Group names are spec names; one read
/// from a results file is checked again, since a tampered file could name a path
/// (`x/../../victim`).
pub fn sweep_file_name(series: &SweepSeries) -> Result<String> {
    crate::spec::SpecName::try_from(series.group.clone()).map_err(|e| Error::Chart {
        name: "sweep".into(),
        message: format!("sweep group {e}"),
    })?;
    Ok(format!("sweep-{}.svg", series.group))
}

/// A sweep's chart: bytes moved (left) and median time (right) of both variants against the
/// swept parameter, log-log, so O(N²) and O(N) traffic show as slopes 2 and 1.
pub fn sweep_svg(series: &SweepSeries) -> Result<String> {
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH_PX, HEIGHT_PX / 4 * 3)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let root = root
            .titled(
                &format!("Sweep {} over {}", series.group, series.param),
                ("sans-serif", 18),
            )
            .map_err(chart_error)?;
        let panels = root.split_evenly((1, 2));
        let x_range = log_range(series.rows.iter().map(|r| r.x as f64), 1.3);
        type Pick = fn(&crate::results::SweepRow) -> (Option<f64>, Option<f64>);
        let bytes: Pick = |r| (Some(r.before_bytes as f64), Some(r.after_bytes as f64));
        let secs: Pick = |r| (r.before_secs, r.after_secs);
        for (panel, (title, pick)) in panels
            .iter()
            .zip([("bytes moved", bytes), ("median time (s)", secs)])
        {
            let values: Vec<(f64, Option<f64>, Option<f64>)> = series
                .rows
                .iter()
                .map(|r| {
                    let (b, a) = pick(r);
                    (r.x as f64, b, a)
                })
                .collect();
            let y_range = log_range(values.iter().flat_map(|v| [v.1, v.2]).flatten(), 2.0);
            let mut chart = ChartBuilder::on(panel)
                .caption(title, ("sans-serif", 14))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(64)
                .build_cartesian_2d(
                    // A tick at every swept value, the first included.
                    x_range
                        .clone()
                        .log_scale()
                        .with_key_points(series.rows.iter().map(|r| r.x as f64).collect()),
                    y_range.log_scale(),
                )
                .map_err(chart_error)?;
            chart
                .configure_mesh()
                .x_desc(series.param.as_str())
                .x_label_formatter(&|v| format!("{v:.0}"))
                .y_labels(6)
                .y_label_formatter(&sci_label)
                .draw()
                .map_err(chart_error)?;
            for (which, color, label) in [
                (1usize, BEFORE, series.before_variant.name()),
                (2, AFTER, series.after_variant.name()),
            ] {
                let line: Vec<(f64, f64)> = values
                    .iter()
                    .filter_map(|v| {
                        let y = if which == 1 { v.1 } else { v.2 };
                        y.filter(|y| *y > 0.0).map(|y| (v.0, y))
                    })
                    .collect();
                chart
                    .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
                    .map_err(chart_error)?
                    .label(label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(line.into_iter().map(|p| Circle::new(p, 4, color.filled())))
                    .map_err(chart_error)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(chart_error)?;
        }
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// Every chart of a run: (file name, SVG text).
pub fn all(run: &RunResult) -> Result<Vec<(String, String)>> {
    let mut out = vec![("roofline.svg".to_string(), roofline_svg(run)?)];
    for g in &run.sweeps {
        out.push((sweep_file_name(g)?, sweep_svg(g)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed_run() -> RunResult {
        serde_json::from_str(include_str!("../../tests/fixtures/run-fixed/results.json"))
            .expect("the fixed archive parses")
    }

    #[test]
    fn tensor_roof_is_drawn_only_when_measured() {
        let mut run = fixed_run();
        run.ceilings.tensor_flops_per_sec = None;
        let svg = roofline_svg(&run).unwrap();
        assert!(
            !svg.contains("tensor cores"),
            "no tensor roof without a measurement"
        );
        run.ceilings.tensor_flops_per_sec = Some(run.ceilings.fma_flops_per_sec * 8.0);
        let svg = roofline_svg(&run).unwrap();
        assert!(svg.contains("measured roof (tensor cores, bf16)"));
    }
}
