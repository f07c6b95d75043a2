//! The shifts of level a run makes visible on the default branch: each case's series in the
//! store, with this run, against the same series without it — its time series (the after
//! median and after/before) and, where it was counted, its counted series of the same counts
//! key (exact: a step is a change of the code).

use super::RunOptions;
use crate::error::Result;
use crate::results::RunResult;
use crate::spec::Spec;
use crate::store::series::{located, Located, Metric};
use crate::store::{Point, Store};

/// A shift of a case's series on the default branch that this run made visible.
#[derive(Debug, Clone, PartialEq)]
pub struct NewShift {
    pub spec: String,
    pub metric: Metric,
    pub located: Located,
    /// The spec's limit (`gate.max_regression`) the shift is beyond.
    pub limit: f64,
}

/// Runs of a case's series read for new shifts, at most.
const SHIFT_RUNS: usize = 200;

/// On the default branch, the shifts of each case's series (the store's runs of this device
/// and spec on the branch, this run included) that were not there without this run and exceed
/// the spec's limit either way. Nothing on other branches, without a store or outside git.
pub(crate) fn new_shifts(
    opts: &RunOptions,
    specs: &[Spec],
    run: &RunResult,
    store: Option<&mut Store>,
) -> Result<Vec<NewShift>> {
    let (Some(store), Some(branch)) = (store, &opts.branch) else {
        return Ok(Vec::new());
    };
    if opts.store.is_none() || opts.default_branch.as_deref() != Some(branch.as_str()) {
        return Ok(Vec::new());
    }
    let device_key = &run.device.key;
    let mut out = Vec::new();
    for s in specs {
        let timed = store.measured(device_key, &s.name, &s.source_sha256, branch, SHIFT_RUNS)?;
        // This run's counts key: a counted series is of one (cache model, SIMD level).
        let key = run
            .specs
            .iter()
            .find(|r| r.name == s.name)
            .and_then(|r| r.counts.as_ref())
            .map(|c| c.engine.key());
        let counted = match &key {
            Some(key) => store.counted_levels(
                device_key,
                &s.name,
                &s.source_sha256,
                branch,
                key,
                SHIFT_RUNS,
            )?,
            None => Vec::new(),
        };
        for (metric, series, limit) in [
            (Metric::After, &timed, s.gate.max_regression.0),
            (Metric::Ratio, &timed, s.gate.max_regression.0),
            (
                Metric::CountsAfter,
                &counted,
                s.gate.counts_max_regression.0,
            ),
        ] {
            out.extend(
                shifts_made(series, metric, limit)
                    .into_iter()
                    .map(|located| NewShift {
                        spec: s.name.clone(),
                        metric,
                        located,
                        limit,
                    }),
            );
        }
    }
    Ok(out)
}

/// The shifts of `series` (oldest first, this run the newest) on `metric` beyond `limit` either
/// way that the series without its newest run did not have.
fn shifts_made(series: &[Point], metric: Metric, limit: f64) -> Vec<Located> {
    let all: Vec<&Point> = series.iter().filter(|p| metric.of(p).is_some()).collect();
    if all.len() < 2 {
        return Vec::new();
    }
    let before: Vec<usize> = located(&all[..all.len() - 1], metric)
        .iter()
        .map(|l| l.shift.at)
        .collect();
    located(&all, metric)
        .into_iter()
        .filter(|l| {
            // A timed shift is placed within the noise (a run either way); a counted one exactly.
            let near = usize::from(!metric.counted());
            let known = before.iter().any(|&at| at.abs_diff(l.shift.at) <= near);
            let beyond = l.shift.ratio > 1.0 + limit || l.shift.ratio < 1.0 / (1.0 + limit);
            !known && beyond
        })
        .collect()
}
