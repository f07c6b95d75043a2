//! Accepting a result into the baseline: what its history becomes (carried over, or restarted
//! after a significant improvement) and what the outcome records of it.

use crate::baseline::{
    BaselineFile, HistoryEntry, BASELINE_SCHEMA_VERSION, MAX_HISTORY, MAX_STORED_SAMPLES,
};
use crate::device::{Ceilings, DeviceInfo};
use crate::measure::MeasureConfig;
use crate::results::{Accepted, BaselineStatus, SpecResult};
use crate::stats::RegressionState;

/// [`baseline_of`] for a result of an archived run, on that run's own device, ceilings,
/// measurement and provenance (`accept`, `compare`, a merge-base's archived run).
pub fn baseline_of_run(
    r: &SpecResult,
    run: &crate::results::RunResult,
    old: Option<&BaselineFile>,
) -> Option<BaselineFile> {
    baseline_of(
        r,
        &run.device,
        &run.ceilings,
        &run.measure,
        &run.started_utc,
        &run.git_sha,
        old,
    )
}

/// Builds the baseline of a passing result, carrying over the history of `old` — unless this
/// run measured a significant improvement over it (gate state `improved`): then the old medians
/// describe code that no longer runs, and pooling them with the new ones would put the
/// reference between the two, letting a regression back to the old speed pass. The history
/// restarts from this run (the next accepts rebuild the pool and its spread).
pub fn baseline_of(
    r: &SpecResult,
    device: &DeviceInfo,
    ceilings: &Ceilings,
    measure: &MeasureConfig,
    recorded_utc: &str,
    git_sha: &str,
    old: Option<&BaselineFile>,
) -> Option<BaselineFile> {
    let samples = r.samples.as_ref()?;
    let (before, after) = (r.before.summary?, r.after.summary?);
    let cap = |v: &[f64]| v[..v.len().min(MAX_STORED_SAMPLES)].to_vec();
    let improved = r.baseline.state == Some(RegressionState::Improved);
    let mut history: Vec<HistoryEntry> = old
        .filter(|o| o.workload == r.workload && o.device.key == device.key && !improved)
        .map(|o| o.history.clone())
        .unwrap_or_default();
    history.push(HistoryEntry {
        recorded_utc: recorded_utc.into(),
        git_sha: git_sha.into(),
        before_median_secs: before.median_secs,
        after_median_secs: after.median_secs,
        relative_median: Some(crate::measure::stats::median(
            &super::compared_values(
                true,
                (&samples.before_secs, &samples.after_secs),
                (&[], &[]),
            )
            .0,
        )),
    });
    if history.len() > MAX_HISTORY {
        history.drain(..history.len() - MAX_HISTORY);
    }
    Some(BaselineFile {
        schema_version: BASELINE_SCHEMA_VERSION,
        spec: r.name.clone(),
        recorded_utc: recorded_utc.into(),
        git_sha: git_sha.into(),
        opledger_version: env!("CARGO_PKG_VERSION").into(),
        device: device.clone(),
        ceilings: *ceilings,
        workload: r.workload.clone(),
        measure: *measure,
        before,
        after,
        time_saving: r.time_saving,
        before_samples_secs: cap(&samples.before_secs),
        after_samples_secs: cap(&samples.after_secs),
        history,
    })
}

/// Records in `r`'s outcome that it was accepted as `new` (over `old`, if there was one).
pub fn mark_accepted(r: &mut SpecResult, device: &DeviceInfo, old: bool, new: &BaselineFile) {
    r.baseline.status = BaselineStatus::Accepted;
    r.baseline.accepted = Some(Accepted {
        device_key: device.key.clone(),
        runs: new.history.len(),
        first: !old,
    });
}
