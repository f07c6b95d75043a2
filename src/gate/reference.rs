//! The gate's reference when it is not the accepted baseline, read from the history store:
//! the newest runs of a branch (`history[:BRANCH]`), or the runs at the merge-base of `HEAD` and
//! a branch (`merge-base:BRANCH`: the commit the pull request forked from, else its nearest
//! ancestor with runs). Runs from before the newest change of level in the series are left out
//! (`store::series`): a reference spanning two codes would sit between them.
//!
//! Which one a spec gets: `run --against`, else the spec's `gate.against`, else the baselines;
//! chosen here, in one place, with the store opened once for all the specs that need it.

use super::history::HISTORY_RUNS;
pub use super::judge::Reference;
use crate::baseline::BaselineFile;
use crate::device::DeviceInfo;
use crate::error::{Error, ReferenceProblem, Result};
use crate::results::RunResult;
use crate::results::{GateReference, LevelChange};
use crate::spec::{Against, Spec};
use crate::store::series::{current_level_start, Metric};
use crate::store::{Point, Store};
use std::path::PathBuf;

/// A spec's reference as a run holds it: where it is (the baseline file, where `--accept` writes,
/// or the store, or the base run's archive), the accepted baseline there (what `--accept`
/// extends), and what the gate judges against.
#[derive(Debug, Clone, Default)]
pub struct SpecBaseline {
    pub path: PathBuf,
    pub accepted: Option<BaselineFile>,
    pub reference: Option<Reference>,
}

impl SpecBaseline {
    /// The accepted baseline at `path` (if any), judged against as it is.
    pub fn accepted(path: PathBuf, accepted: Option<BaselineFile>) -> Self {
        SpecBaseline {
            path,
            reference: accepted.as_ref().map(Reference::from),
            accepted,
        }
    }
}

/// What choosing a reference needs of a run's options.
pub struct ReferenceOptions<'a> {
    /// `run --accept`: judged against the accepted baselines it extends.
    pub accept: bool,
    /// `run --against`, over each spec's `gate.against`.
    pub against: Option<&'a Against>,
    /// The branch the run measures (`history` without a branch means this one).
    pub branch: Option<&'a str>,
    /// The store the run records into (`None`: `--no-store`).
    pub store: Option<&'a crate::store::StoreUrl>,
    /// The store a reference is read from (under `--no-store`, read and never written).
    pub reference_store: Option<&'a crate::store::StoreUrl>,
    /// Reads an archived run: the base run's own samples, for `merge-base`. The archive sits
    /// above the gate, so the caller lends its reader.
    pub load_run: &'a dyn Fn(&std::path::Path) -> Option<RunResult>,
}

/// What the gate judges each spec against (baselines when `None`).
pub fn against_of(opts: &ReferenceOptions<'_>, s: &Spec) -> Against {
    if opts.accept {
        // Accepting is the explicit sign-off: judged against the accepted baselines it extends.
        return Against::Baselines;
    }
    opts.against
        .cloned()
        .or_else(|| s.gate.against.clone())
        .unwrap_or_default()
}

/// Each spec's reference from the store in place of its accepted baseline, where it asks for
/// one; `None` for the specs judged against their baselines.
pub fn references(
    opts: &ReferenceOptions<'_>,
    specs: &[Spec],
    device: &DeviceInfo,
    baselines: &mut [SpecBaseline],
    store: &mut Option<Store>,
) -> Result<Vec<Option<GateReference>>> {
    let mut out = Vec::new();
    for (s, slot) in specs.iter().zip(baselines.iter_mut()) {
        let against = against_of(opts, s);
        let named = String::from(against.clone());
        let (reference, base) = match against {
            Against::Baselines if !by_default(opts, s, slot) => {
                out.push(None);
                continue;
            }
            // No accepted baseline and none asked for: the branch's history, where the store
            // has one (a slowdown on main must not pass for want of a baseline).
            Against::Baselines => {
                let Some(store) = open_store_if_there(store, opts)? else {
                    out.push(None);
                    continue;
                };
                let (mut reference, base) =
                    history(store, s, device, opts.branch.map(str::to_string))?;
                if let GateReference::History { by_default, .. } = &mut reference {
                    *by_default = true;
                }
                (reference, base)
            }
            Against::History { branch } => history(
                open_store(store, opts, s, &named)?,
                s,
                device,
                branch.or_else(|| opts.branch.map(str::to_string)),
            )?,
            Against::MergeBase { branch } => {
                merge_base(open_store(store, opts, s, &named)?, opts, s, device, branch)?
            }
        };
        (slot.path, slot.reference) = base;
        out.push(Some(reference));
    }
    Ok(out)
}

/// True when `s` is judged against its branch's history for want of anything else: no accepted
/// baseline, no `--against` or `gate.against`, not accepting, and the branch known and not a
/// bisection's (a detached HEAD or a bisect step has no series of its own).
fn by_default(opts: &ReferenceOptions<'_>, s: &Spec, slot: &SpecBaseline) -> bool {
    !opts.accept
        && opts.against.is_none()
        && s.gate.against.is_none()
        && slot.accepted.is_none()
        && opts
            .branch
            .is_some_and(|b| b != crate::store::BISECT_BRANCH)
        && opts.reference_store.is_some()
}

/// The store for a reference by default: `None` where there is none to read (under
/// `--no-store`, an SQLite file that does not exist), never an error for its absence.
fn open_store_if_there<'a>(
    store: &'a mut Option<Store>,
    opts: &ReferenceOptions<'_>,
) -> Result<Option<&'a mut Store>> {
    if store.is_none() {
        *store = open_existing(opts.store, opts.reference_store)?;
    }
    Ok(store.as_mut())
}

/// The store a reference is read from (`reference_store`), where there is one to read: `None`
/// without one, or for an SQLite file that does not exist yet. Opened as the run records into
/// it (`store`), or under `--no-store` read as it is.
pub fn open_existing(
    store: Option<&crate::store::StoreUrl>,
    reference_store: Option<&crate::store::StoreUrl>,
) -> Result<Option<Store>> {
    let Some(url) = reference_store else {
        return Ok(None);
    };
    if let crate::store::StoreUrl::Sqlite(path) = url {
        if !path.exists() {
            return Ok(None);
        }
    }
    Ok(Some(match store {
        Some(_) => Store::open(url)?,
        None => Store::open_reading(url)?,
    }))
}

/// The store, opened by the first spec that needs it: as the run records into it, or under
/// `--no-store` read as it is (an SQLite file that does not exist is not made).
fn open_store<'a>(
    store: &'a mut Option<Store>,
    opts: &ReferenceOptions<'_>,
    s: &Spec,
    named: &str,
) -> Result<&'a mut Store> {
    if let Some(open) = store {
        return Ok(open);
    }
    let problem = |problem| Error::Reference {
        spec: s.name.clone(),
        against: named.to_string(),
        problem,
    };
    let Some(url) = opts.reference_store else {
        return Err(problem(ReferenceProblem::NoStore));
    };
    let opened = match (opts.store, url) {
        (Some(_), _) => Store::open(url)?,
        (None, crate::store::StoreUrl::Sqlite(path)) if !path.exists() => {
            return Err(problem(ReferenceProblem::StoreMissing(path.clone())))
        }
        (None, _) => Store::open_reading(url)?,
    };
    Ok(store.insert(opened))
}

/// The runs of `series` (oldest first) from its newest change of level on (of the after median
/// or after/before), and where that change is: runs before it are another code's, not drift.
pub(crate) fn current_level(series: Vec<Point>) -> (Vec<Point>, Option<LevelChange>) {
    let start = current_level_start(&series, &[Metric::After, Metric::Ratio]);
    if start == 0 {
        return (series, None);
    }
    let change = LevelChange {
        since_commit: series[start].run.git_sha.to_string(),
        left_out: start,
    };
    (series[start..].to_vec(), Some(change))
}

/// `history[:BRANCH]`: the newest runs of the branch on this device with this exact spec.
fn history(
    store: &mut Store,
    s: &Spec,
    device: &DeviceInfo,
    branch: Option<String>,
) -> Result<(GateReference, (PathBuf, Option<Reference>))> {
    let points = store.reference(
        &device.key,
        &s.name,
        &s.source_sha256,
        branch.as_deref(),
        HISTORY_RUNS,
    )?;
    let (points, change) = current_level(points);
    let (points, outliers) = super::history::without_outliers(points);
    let base = super::history::reference(&points, s, device);
    Ok((
        GateReference::History {
            runs: points.len(),
            branch,
            change,
            by_default: false,
            outliers,
        },
        (PathBuf::from(store.url().display()), base),
    ))
}

/// `merge-base:BRANCH`: the runs at the merge-base (else its nearest ancestor with runs) and
/// before it, back to the newest change of level; the base run's own samples when its archive
/// is here.
fn merge_base(
    store: &mut Store,
    opts: &ReferenceOptions<'_>,
    s: &Spec,
    device: &DeviceInfo,
    branch: String,
) -> Result<(GateReference, (PathBuf, Option<Reference>))> {
    let flag = |e: String| Error::Reference {
        spec: s.name.clone(),
        against: format!("merge-base:{branch}"),
        problem: ReferenceProblem::MergeBase(e),
    };
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
    let base = with_samples.or_else(|| super::history::reference(&points, s, device));
    let reference = GateReference::MergeBase {
        branch,
        merge_base: mb,
        commit: Some(first.run.git_sha.to_string()),
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
    opts: &ReferenceOptions<'_>,
    points: &[Point],
) -> Option<Reference> {
    let run = &(opts.load_run)(archive)?;
    let sa = run
        .specs
        .iter()
        .find(|c| c.name == s.name && c.spec_sha256 == s.source_sha256)?;
    let older = &points[..points.len().saturating_sub(1)];
    let mut base = Reference::from(&super::accept::baseline_of_run(sa, run, None)?);
    // The older runs pool with it as accepted runs would, unless it measured an improvement
    // over them (they describe code that no longer runs).
    let improved = sa.baseline.state == Some(super::stats::RegressionState::Improved);
    if let Some(old) = super::history::reference(older, s, device).filter(|_| !improved) {
        base.runs.splice(0..0, old.runs);
        let max = crate::baseline::MAX_HISTORY;
        if base.runs.len() > max {
            base.runs.drain(..base.runs.len() - max);
        }
    }
    Some(base)
}
