//! The shifts of level a run makes visible on the default branch: each case's series in the
//! store, with this run, against the same series without it.

use super::RunOptions;
use crate::error::Result;
use crate::spec::Spec;
use crate::store::series::Metric;
use crate::store::{Point, Store};

/// A shift of a case's series on the default branch that this run made visible.
#[derive(Debug, Clone, PartialEq)]
pub struct NewShift {
    pub spec: String,
    pub metric: Metric,
    pub located: crate::store::series::Located,
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
    device_key: &str,
    store: Option<&mut Store>,
) -> Result<Vec<NewShift>> {
    let (Some(store), Some(branch)) = (store, &opts.branch) else {
        return Ok(Vec::new());
    };
    if opts.store.is_none() || opts.default_branch.as_deref() != Some(branch.as_str()) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for s in specs {
        let series = store.measured(device_key, &s.name, &s.source_sha256, branch, SHIFT_RUNS)?;
        let limit = s.gate.max_regression.0;
        for metric in [Metric::After, Metric::Ratio] {
            let all: Vec<&Point> = series.iter().filter(|p| metric.of(p).is_some()).collect();
            if all.len() < 2 {
                continue;
            }
            let before: Vec<usize> = crate::store::series::located(&all[..all.len() - 1], metric)
                .iter()
                .map(|l| l.shift.at)
                .collect();
            for l in crate::store::series::located(&all, metric) {
                let known = before.iter().any(|&at| at.abs_diff(l.shift.at) <= 1);
                let beyond = l.shift.ratio > 1.0 + limit || l.shift.ratio < 1.0 / (1.0 + limit);
                if !known && beyond {
                    out.push(NewShift {
                        spec: s.name.clone(),
                        metric,
                        located: l,
                        limit,
                    });
                }
            }
        }
    }
    Ok(out)
}
