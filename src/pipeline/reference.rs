//! The gate's reference when it is not the accepted baseline, read from the history store:
//! the newest runs of a branch (`history[:BRANCH]`), or the runs at the merge-base of `HEAD` and
//! a branch (`merge-base:BRANCH`: the commit the pull request forked from, else its nearest
//! ancestor with runs). Runs from before the newest change of level in the series are left out
//! (`store::series`): a reference spanning two codes would sit between them.
//!
//! Which one a spec gets: `run --against`, else the spec's `gate.against`, else the baselines.

use super::RunOptions;
use crate::baseline::BaselineFile;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::gate::history::HISTORY_RUNS;
use crate::results::{GateReference, LevelChange};
use crate::spec::{Against, Spec};
use crate::store::series::{current_level_start, Metric};
use crate::store::{Point, Store};
use std::path::PathBuf;

/// A spec's baseline: where `--accept` writes it, and what it holds (if anything).
pub(crate) type SpecBaseline = (PathBuf, Option<BaselineFile>);

/// What the gate judges each spec against (baselines when `None`).
pub(crate) fn against_of(opts: &RunOptions, s: &Spec) -> Against {
    if opts.accept {
        // Accepting is the explicit sign-off: judged against the accepted baselines it extends.
        return Against::Baselines;
    }
    opts.against
        .clone()
        .or_else(|| s.gate.against.clone())
        .unwrap_or_default()
}

/// Each spec's reference from the store in place of its accepted baseline, where it asks for
/// one; `None` for the specs judged against their baselines.
pub(crate) fn references(
    opts: &RunOptions,
    specs: &[Spec],
    device: &DeviceInfo,
    baselines: &mut [SpecBaseline],
) -> Result<Vec<Option<GateReference>>> {
    let mut store: Option<Store> = None;
    let mut out = Vec::new();
    for (s, slot) in specs.iter().zip(baselines.iter_mut()) {
        let against = against_of(opts, s);
        let named = String::from(against.clone());
        let (reference, base) = match against {
            Against::Baselines => {
                out.push(None);
                continue;
            }
            Against::History { branch } => history(
                open_store(&mut store, opts, s, &named)?,
                opts,
                s,
                device,
                branch.or_else(|| opts.branch.clone()),
            )?,
            Against::MergeBase { branch } => merge_base(
                open_store(&mut store, opts, s, &named)?,
                opts,
                s,
                device,
                branch,
            )?,
        };
        *slot = base;
        out.push(Some(reference));
    }
    Ok(out)
}

/// The store, opened by the first spec that needs it: as the run records into it, or under
/// `--no-store` read as it is (an SQLite file that does not exist is not made).
fn open_store<'a>(
    store: &'a mut Option<Store>,
    opts: &RunOptions,
    s: &Spec,
    named: &str,
) -> Result<&'a mut Store> {
    if let Some(open) = store {
        return Ok(open);
    }
    let Some(url) = &opts.reference_store else {
        return Err(Error::Flag(format!(
            "{}: the gate judges against `{named}` from the history store, and none is named: set --store or OPLEDGER_STORE",
            s.name
        )));
    };
    let opened = match (&opts.store, url) {
        (Some(_), _) => Store::open(url)?,
        (None, crate::store::StoreUrl::Sqlite(path)) if !path.exists() => {
            return Err(Error::Flag(format!(
                "{}: the gate judges against `{named}`, but the history store {} does not exist (--no-store reads a store, it never makes one)",
                s.name,
                path.display()
            )))
        }
        (None, _) => Store::open_reading(url)?,
    };
    Ok(store.insert(opened))
}

fn current_level(series: Vec<Point>) -> (Vec<Point>, Option<LevelChange>) {
    let start = current_level_start(&series, &[Metric::After, Metric::Ratio]);
    if start == 0 {
        return (series, None);
    }
    let change = LevelChange {
        since_commit: series[start].git_sha.clone(),
        left_out: start,
    };
    (series[start..].to_vec(), Some(change))
}

/// `history[:BRANCH]`: the newest runs of the branch on this device with this exact spec.
fn history(
    store: &mut Store,
    opts: &RunOptions,
    s: &Spec,
    device: &DeviceInfo,
    branch: Option<String>,
) -> Result<(GateReference, SpecBaseline)> {
    let points = store.reference(
        &device.key,
        &s.name,
        &s.source_sha256,
        branch.as_deref(),
        HISTORY_RUNS,
    )?;
    let (points, change) = current_level(points);
    let base = crate::gate::history::reference(&points, s, device, &opts.measure);
    Ok((
        GateReference::History {
            runs: points.len(),
            branch,
            change,
        },
        (PathBuf::from(store.url().display()), base),
    ))
}

/// `merge-base:BRANCH`: the runs at the merge-base (else its nearest ancestor with runs) and
/// before it, back to the newest change of level; the base run's own samples when its archive
/// is here.
fn merge_base(
    store: &mut Store,
    opts: &RunOptions,
    s: &Spec,
    device: &DeviceInfo,
    branch: String,
) -> Result<(GateReference, SpecBaseline)> {
    let flag = |e: String| Error::Flag(format!("{}: --against merge-base:{branch}: {e}", s.name));
    let mb = crate::provenance::merge_base(&branch).map_err(flag)?;
    let ancestors =
        crate::provenance::ancestors(&mb, crate::store::series::MAX_ANCESTORS).map_err(flag)?;
    let committed = store.committed(&device.key, &s.name, &s.source_sha256)?;
    let matched = crate::store::series::at_ancestors(&committed, &ancestors);
    let Some(&(back, first)) = matched.first() else {
        let none = GateReference::MergeBase {
            branch,
            merge_base: mb,
            commit: None,
            commits_back: 0,
            runs: 0,
            change: None,
            samples: false,
        };
        return Ok((none, (PathBuf::from(store.url().display()), None)));
    };
    let mut chosen: Vec<Point> = matched
        .iter()
        .take(HISTORY_RUNS)
        .map(|(_, p)| (*p).clone())
        .collect();
    chosen.reverse();
    let (points, change) = current_level(chosen);
    // The base run is the newest at the base commit: `first`, the last of `points` (a level
    // change leaves the newest runs in).
    let archive = store.archive_dir(first);
    let with_samples = base_with_samples(&archive, s, device, opts, &points);
    let samples = with_samples.is_some();
    let base =
        with_samples.or_else(|| crate::gate::history::reference(&points, s, device, &opts.measure));
    let reference = GateReference::MergeBase {
        branch,
        merge_base: mb,
        commit: Some(first.git_sha.clone()),
        commits_back: back,
        runs: points.len(),
        change,
        samples,
    };
    let path = if samples {
        archive
    } else {
        PathBuf::from(store.url().display())
    };
    Ok((reference, (path, base)))
}

/// The base run's case from its archive, as a baseline with its samples, the older points its
/// history: `None` when the archive is not here (a CI runner's) or holds no samples of it.
fn base_with_samples(
    archive: &std::path::Path,
    s: &Spec,
    device: &DeviceInfo,
    opts: &RunOptions,
    points: &[Point],
) -> Option<crate::baseline::BaselineFile> {
    let loaded = crate::archive::load(archive).ok()?;
    let run = &loaded.run;
    let sa = run
        .specs
        .iter()
        .find(|c| c.name == s.name && c.spec_sha256 == s.source_sha256)?;
    let older = &points[..points.len().saturating_sub(1)];
    let old = crate::gate::history::reference(older, s, device, &opts.measure);
    crate::gate::accept::baseline_of(
        sa,
        &run.device,
        &run.ceilings,
        &run.measure,
        &run.started_utc,
        &run.git_sha,
        old.as_ref(),
    )
}

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
) -> Result<Vec<NewShift>> {
    let (Some(url), Some(branch)) = (&opts.store, &opts.branch) else {
        return Ok(Vec::new());
    };
    if opts.default_branch.as_deref() != Some(branch.as_str()) {
        return Ok(Vec::new());
    }
    let mut store = Store::open(url)?;
    let mut out = Vec::new();
    for s in specs {
        let series = store.reference(
            device_key,
            &s.name,
            &s.source_sha256,
            Some(branch),
            SHIFT_RUNS,
        )?;
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
