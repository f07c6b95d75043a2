//! What the charts place, drawn by `svg/` (one way to draw a chart) on the pages and in the
//! run folder's files: the cases a roofline can show and where, and the file name of a sweep's
//! chart. Pure functions of a `RunResult`, so `opledger report` redraws them from an archive.

use crate::error::{Error, Result};
use crate::results::{RunResult, SweepSeries};

/// One case on the roofline: where its before and after variants landed.
#[derive(Debug, Clone, PartialEq)]
pub struct RooflinePoint {
    pub spec: String,
    /// The text beside the point: the spec's name, or for a sweep point the sweep's name and
    /// its parameter value (`flash-attention: seq_len=1024`: two sweeps of one parameter are
    /// told apart at every point).
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
    run.specs
        .iter()
        .filter_map(|s| {
            let label = match &s.sweep {
                Some(pt) => format!("{}: {}", pt.group, pt.label),
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
