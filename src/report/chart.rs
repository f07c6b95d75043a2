//! The charts of a run's folder: `roofline.svg` (every case on the measured, and where known the
//! tensor-core and datasheet, roofs) and `sweep-GROUP.svg` (bytes and time against the swept
//! parameter). They are the HTML report's charts (`svg.rs`, one way to draw a chart) made
//! stand-alone: the page's chart styles embedded, so a Markdown viewer or a browser shows them
//! without the page. Pure functions of a `RunResult`, so `opledger report` redraws them from an
//! archive.

use crate::error::{Error, Result};
use crate::results::{RunResult, SweepSeries};

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

/// The roofline of a run, as a stand-alone SVG file.
pub fn roofline_svg(run: &RunResult) -> Result<String> {
    Ok(super::svg::standalone(&super::svg::roofline(run)))
}

/// A sweep's chart as a stand-alone SVG file: bytes moved (left) and median time (right) of
/// both variants against the swept parameter, log-log, so O(N²) and O(N) traffic show as slopes
/// 2 and 1.
pub fn sweep_svg(series: &SweepSeries) -> Result<String> {
    Ok(super::svg::standalone(&super::svg::sweep_file(series)))
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
