//! The reference a branch's history gives the gate (`run --against history[:BRANCH]`): the
//! newest runs of this device and this exact spec in the history store, pooled as accepted runs
//! are (their geometric mean the reference, their spread the drift between runs), so the
//! smallest detectable slowdown narrows as the history grows instead of resting on a handful
//! of accepted runs.

use super::judge::Reference;
use crate::baseline::HistoryEntry;
use crate::device::DeviceInfo;
use crate::spec::Spec;
use crate::stats::POOL_MIN_RUNS;
use crate::store::Point;

/// Runs of a branch's history the reference rests on, at most.
pub const HISTORY_RUNS: usize = 20;

/// How many robust standard deviations (1.4826 × the median absolute deviation, of the log
/// values) a run may lie from the series' median before it is left out of a history reference:
/// 3.5, Iglewicz and Hoaglin's bound for the modified z-score.
pub const OUTLIER_Z: f64 = 3.5;
/// Runs a series needs before any is called an outlier: fewer give no spread to trust.
pub const OUTLIER_MIN_RUNS: usize = 8;
/// And an outlier is more than 5% off the median (ln 1.05): a tight series' small wobble is
/// its drift, which the gate must see.
const OUTLIER_MIN_LOG_OFF: f64 = 0.048_790_164_169_432;

/// `points` without the runs whose after median or after/before ratio is an outlier of the
/// series (further than [`OUTLIER_Z`] robust standard deviations from its median, and more than
/// 5% off it), and how many were left out. A series of fewer than [`OUTLIER_MIN_RUNS`] runs, or
/// whose values are all but equal (no spread to measure), keeps all.
pub fn without_outliers(points: Vec<Point>) -> (Vec<Point>, usize) {
    let far = |values: Vec<Option<f64>>| -> Vec<bool> {
        let logs: Vec<f64> = values
            .iter()
            .flatten()
            .filter(|v| **v > 0.0)
            .map(|v| v.ln())
            .collect();
        if logs.len() < OUTLIER_MIN_RUNS {
            return vec![false; values.len()];
        }
        let mid = crate::measure::stats::median(&logs);
        let sd = 1.4826 * crate::measure::stats::mad(&logs);
        values
            .iter()
            .map(|v| match v {
                Some(v) if *v > 0.0 && sd > 0.0 => {
                    let off = (v.ln() - mid).abs();
                    off / sd > OUTLIER_Z && off > OUTLIER_MIN_LOG_OFF
                }
                _ => false,
            })
            .collect()
    };
    let after = far(points.iter().map(|p| p.after_median_secs).collect());
    let ratio = far(points.iter().map(|p| p.ratio).collect());
    let kept: Vec<Point> = points
        .iter()
        .zip(after.iter().zip(&ratio))
        .filter(|(_, (a, r))| !**a && !**r)
        .map(|(p, _)| p.clone())
        .collect();
    let left = points.len() - kept.len();
    (kept, left)
}

/// A stored run of a case as an accepted run's entry (`None` where a side was not measured).
pub fn entry_of(p: &Point) -> Option<HistoryEntry> {
    Some(HistoryEntry {
        recorded_utc: p.run.started_utc.to_string(),
        git_sha: p.run.git_sha.to_string(),
        before_median_secs: p.before_median_secs?,
        after_median_secs: p.after_median_secs?,
        relative_median: p.ratio,
    })
}

/// The reference made from `points` (oldest first): its runs are the points. `None` with fewer
/// than [`POOL_MIN_RUNS`] (no drift known: the gate has no history to judge against). It holds
/// no samples, so the comparison is always against the pooled medians, and no roofs (the store
/// keeps the bandwidth and FMA figures only), so the ceiling drift guard does not apply.
pub fn reference(points: &[Point], s: &Spec, device: &DeviceInfo) -> Option<Reference> {
    if points.len() < POOL_MIN_RUNS {
        return None;
    }
    Some(Reference {
        device: device.clone(),
        workload: s.workload.clone(),
        ceilings: None,
        before_samples_secs: Vec::new(),
        after_samples_secs: Vec::new(),
        before_median_secs: points.last()?.before_median_secs?,
        runs: points.iter().filter_map(entry_of).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(after: f64, ratio: f64) -> Point {
        Point {
            verdict: "pass".into(),
            before_median_secs: Some(after / ratio),
            after_median_secs: Some(after),
            ratio: Some(ratio),
            ..Point::default()
        }
    }

    #[test]
    fn one_noisy_run_is_left_out_of_the_reference_and_a_steady_series_keeps_all() {
        let mut pts: Vec<Point> = [1.00, 1.02, 0.99, 1.01, 1.00, 0.98, 1.01]
            .iter()
            .zip([0.50, 0.51, 0.49, 0.505, 0.50, 0.495, 0.502])
            .map(|(a, r)| point(*a, r))
            .collect();
        let (kept, left) = without_outliers(pts.clone());
        assert_eq!((kept.len(), left), (7, 0));
        // One run on a busy machine: its after/before ratio far off the others'.
        pts.push(point(1.0, 0.9));
        let (kept, left) = without_outliers(pts);
        assert_eq!((kept.len(), left), (7, 1));
        assert!(kept.iter().all(|p| p.ratio < Some(0.6)));
    }
}
