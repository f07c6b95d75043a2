//! The reference a branch's history gives the gate (`run --against history[:BRANCH]`): the
//! newest runs of this device and this exact spec in the history store, pooled as accepted runs
//! are (their geometric mean the reference, their spread the drift between runs), so the
//! smallest detectable slowdown narrows as the history grows instead of resting on a handful
//! of accepted runs.

use crate::baseline::{BaselineFile, HistoryEntry, BASELINE_SCHEMA_VERSION};
use crate::device::{Ceilings, DeviceInfo};
use crate::gate::stats::POOL_MIN_RUNS;
use crate::measure::stats::Summary;
use crate::measure::MeasureConfig;
use crate::spec::Spec;
use crate::store::Point;

/// Runs of a branch's history the reference rests on, at most.
pub const HISTORY_RUNS: usize = 20;

/// The reference made from `points` (oldest first), as a baseline whose accepted runs are the
/// points: `None` with fewer than [`POOL_MIN_RUNS`] (no drift known: the gate has no history
/// to judge against). It holds no samples, so the comparison is always against the pooled
/// medians, and no ceilings (the store keeps the bandwidth and FMA figures only), so the
/// ceiling drift guard does not apply.
pub fn reference(
    points: &[Point],
    s: &Spec,
    device: &DeviceInfo,
    measure: &MeasureConfig,
) -> Option<BaselineFile> {
    if points.len() < POOL_MIN_RUNS {
        return None;
    }
    let history: Vec<HistoryEntry> = points
        .iter()
        .filter_map(|p| {
            Some(HistoryEntry {
                recorded_utc: p.started_utc.clone(),
                git_sha: p.git_sha.clone(),
                before_median_secs: p.before_median_secs?,
                after_median_secs: p.after_median_secs?,
                relative_median: p.ratio,
            })
        })
        .collect();
    let newest = points.last()?;
    let summary = |secs: f64| Summary {
        n: 1,
        median_secs: secs,
        ci_lo_secs: secs,
        ci_hi_secs: secs,
        min_secs: secs,
        max_secs: secs,
        rel_mad: 0.0,
    };
    Some(BaselineFile {
        schema_version: BASELINE_SCHEMA_VERSION,
        spec: s.name.clone(),
        recorded_utc: newest.started_utc.clone(),
        git_sha: newest.git_sha.clone(),
        opledger_version: env!("CARGO_PKG_VERSION").into(),
        device: device.clone(),
        ceilings: Ceilings {
            copy_bytes_per_sec: 0.0,
            triad_bytes_per_sec: 0.0,
            fma_flops_per_sec: 0.0,
            tensor_flops_per_sec: None,
            threads: 0,
            array_bytes: 0,
        },
        workload: s.workload.clone(),
        measure: *measure,
        before: summary(newest.before_median_secs?),
        after: summary(newest.after_median_secs?),
        time_saving: None,
        before_samples_secs: Vec::new(),
        after_samples_secs: Vec::new(),
        history,
    })
}
