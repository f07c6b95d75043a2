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
use super::stats::POOL_MIN_RUNS;
use crate::baseline::counts::CountsBaseline;
use crate::baseline::{self, BaselineFile};
use crate::device::DeviceInfo;
use crate::error::{Error, ReferenceProblem, Result};
use crate::measure::counts::CountsEngine;
use crate::results::{GateReference, LevelChange};
use crate::results::{RunResult, SpecResult};
use crate::spec::{Against, Spec};
use crate::store::series::{current_level_start, Metric};
use crate::store::{Point, Store};
use std::path::{Path, PathBuf};

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

/// What a run's counts are judged against besides the store: the engine that counts them (its
/// key names the baselines' folder and the store's counted runs) and the baselines' folder.
pub struct CountsOptions<'a> {
    pub engine: &'a CountsEngine,
    /// The run's cache model was given on the command line (else a spec's own model decides
    /// its engine: [`CountsEngine::for_spec`]).
    pub model_fixed: bool,
    pub baselines_dir: &'a std::path::Path,
}

/// A spec's counts reference: where its counts baseline is (and `--accept` writes it), what
/// the gate judges against (the counts baseline, or a counted run from the store), the store's
/// run it came from, and which reference it is when it is not the counts baseline.
#[derive(Debug, Clone, Default)]
pub struct CountsBase {
    pub path: PathBuf,
    pub baseline: Option<CountsBaseline>,
    pub history_run: Option<String>,
    pub reference: Option<GateReference>,
}

/// Each spec's references, chosen once by one rule for every measurement it is judged on (see
/// [`against_of`]): its time reference (`None`: its accepted baseline, already in `baselines`;
/// else the store's runs, written into `baselines`) and, where sides are counted (`counts`),
/// its counts reference, found the same way — the counts baseline where the time gate reads
/// the accepted baseline, the branch's newest counted run where it reads the branch's history,
/// the merge-base's counted run where it reads the merge-base's runs.
pub fn references(
    opts: &ReferenceOptions<'_>,
    specs: &[Spec],
    device: &DeviceInfo,
    baselines: &mut [SpecBaseline],
    store: &mut Option<Store>,
    counts: Option<&CountsOptions<'_>>,
) -> Result<(Vec<Option<GateReference>>, Vec<CountsBase>)> {
    let mut out = Vec::new();
    let mut counted = Vec::new();
    let mut bases = MergeBases::default();
    for (s, slot) in specs.iter().zip(baselines.iter_mut()) {
        let against = against_of(opts, s);
        let named = String::from(against.clone());
        let source = match against {
            Against::Baselines if !by_default(opts, s) => Source::Accepted,
            Against::Baselines => Source::History {
                branch: opts.branch.map(str::to_string),
                by_default: true,
            },
            Against::History { branch } => Source::History {
                branch: branch.or_else(|| opts.branch.map(str::to_string)),
                by_default: false,
            },
            Against::MergeBase { branch } => Source::MergeBase { branch },
        };
        if let Some(c) = counts {
            counted.push(counts_reference(
                opts, s, store, c, &source, &named, &mut bases,
            )?);
        }
        let (reference, base) = match source {
            Source::Accepted => {
                out.push(None);
                continue;
            }
            // By default a measurement's accepted baseline, where it has one, comes first.
            Source::History {
                by_default: true, ..
            } if slot.accepted.is_some() => {
                out.push(None);
                continue;
            }
            // No accepted baseline and none asked for: the branch's history, where the store
            // has one (a slowdown on main must not pass for want of a baseline).
            Source::History {
                branch,
                by_default: true,
            } => {
                let Some(store) = open_store_if_there(store, opts)? else {
                    out.push(None);
                    continue;
                };
                let (mut reference, base) = history(store, s, device, branch)?;
                if let GateReference::History { by_default, .. } = &mut reference {
                    *by_default = true;
                }
                (reference, base)
            }
            Source::History { branch, .. } => {
                history(open_store(store, opts, s, &named)?, s, device, branch)?
            }
            Source::MergeBase { branch } => {
                let found = bases
                    .of(&branch)
                    .map_err(|e| merge_base_problem(s, &branch, e))?;
                merge_base(
                    open_store(store, opts, s, &named)?,
                    opts,
                    s,
                    device,
                    &branch,
                    found,
                )?
            }
        };
        (slot.path, slot.reference) = base;
        out.push(Some(reference));
    }
    Ok((out, counted))
}

/// Where a spec's references come from, for every measurement alike.
enum Source {
    /// The accepted baselines (of time, of counts).
    Accepted,
    /// The branch's newest runs (any branch's when `None`); `by_default` where nothing else was
    /// asked for and a measurement has no accepted baseline.
    History {
        branch: Option<String>,
        by_default: bool,
    },
    /// The runs at the merge-base of `HEAD` and the branch.
    MergeBase { branch: String },
}

/// The merge-base of `HEAD` with each branch asked for, and its ancestors, found once a run.
#[derive(Default)]
struct MergeBases(
    std::collections::BTreeMap<String, std::result::Result<(String, Vec<String>), String>>,
);

impl MergeBases {
    fn of(&mut self, branch: &str) -> std::result::Result<(String, Vec<String>), String> {
        self.0
            .entry(branch.to_string())
            .or_insert_with(|| {
                let mb = crate::provenance::merge_base(branch)?;
                let ancestors =
                    crate::provenance::ancestors(&mb, crate::store::series::MAX_ANCESTORS)?;
                Ok((mb, ancestors))
            })
            .clone()
    }
}

fn merge_base_problem(s: &Spec, branch: &str, e: String) -> Error {
    Error::Reference {
        spec: s.name.clone(),
        against: format!("merge-base:{branch}"),
        problem: ReferenceProblem::MergeBase(e),
    }
}

/// A spec's counts reference from `source`: the counts baseline file; the branch's newest
/// counted run (by default only where there is no counts baseline); the newest counted run at
/// the merge-base or its nearest ancestor with one. Counted runs are read from every device:
/// counts of one engine key are the same on every machine (the key names the instruction set,
/// SIMD level and cache model; another Valgrind, compiler or C library makes a rise
/// INCONCLUSIVE, not a FAIL), so a runner of another CPU model finds main's counts. The
/// store's run carries each side's per-function counts where its archive is here (the store
/// keeps totals).
fn counts_reference(
    opts: &ReferenceOptions<'_>,
    s: &Spec,
    store: &mut Option<Store>,
    c: &CountsOptions<'_>,
    source: &Source,
    named: &str,
    bases: &mut MergeBases,
) -> Result<CountsBase> {
    let engine = c.engine.for_spec(s, c.model_fixed);
    let path = crate::baseline::counts::path_for(c.baselines_dir, &engine, &s.name);
    let file = crate::baseline::counts::load(&path)?;
    let key = engine.key();
    let mut base = CountsBase {
        path,
        ..CountsBase::default()
    };
    let (point, reference) = match source {
        Source::Accepted => {
            base.baseline = file;
            return Ok(base);
        }
        Source::History {
            by_default: true, ..
        } if file.is_some() => {
            base.baseline = file;
            return Ok(base);
        }
        Source::History { branch, by_default } => {
            let st = if *by_default {
                match open_store_if_there(store, opts)? {
                    Some(st) => st,
                    None => return Ok(base),
                }
            } else {
                open_store(store, opts, s, named)?
            };
            let p = st.newest_counted(None, &s.name, &s.source_sha256, branch.as_deref(), &key)?;
            let reference = GateReference::History {
                runs: usize::from(p.is_some()),
                branch: branch.clone(),
                change: None,
                by_default: *by_default,
                outliers: 0,
            };
            (p, reference)
        }
        Source::MergeBase { branch } => {
            let (mb, ancestors) = bases
                .of(branch)
                .map_err(|e| merge_base_problem(s, branch, e))?;
            let st = open_store(store, opts, s, named)?;
            let points = st.committed_counted(None, &s.name, &s.source_sha256, &key)?;
            let matched = crate::store::series::at_ancestors(&points, &ancestors);
            let first = matched.first().map(|&(back, p)| (back, p.clone()));
            let reference = GateReference::MergeBase {
                branch: branch.clone(),
                merge_base: mb,
                commit: first.as_ref().map(|(_, p)| p.run.git_sha.to_string()),
                commits_back: first.as_ref().map_or(0, |(back, _)| *back),
                runs: usize::from(first.is_some()),
                change: None,
                samples: false,
            };
            (first.map(|(_, p)| p), reference)
        }
    };
    base.reference = Some(reference);
    let Some(p) = point else {
        return Ok(base);
    };
    let st = store.as_ref().map(|st| st.archive_dir(&p));
    let Ok(counted) = s.counted() else {
        return Ok(base);
    };
    let sides = (s.variants.before.name(), s.variants.after.name());
    base.baseline = st
        .and_then(|dir| archived_counts(&dir, s, &counted.workload, &p, &key, opts))
        .or_else(|| crate::counts::baseline_of_point(&p, sides, &counted.workload));
    base.history_run = base.baseline.as_ref().map(|_| p.run.run_id.to_string());
    Ok(base)
}

/// The counts a stored run archived for `s` (same spec, same engine key), as a baseline with
/// each side's functions: `None` where the archive is not here, does not verify, or holds no
/// such counts.
fn archived_counts(
    archive: &std::path::Path,
    s: &Spec,
    workload: &crate::spec::Workload,
    p: &Point,
    key: &str,
    opts: &ReferenceOptions<'_>,
) -> Option<CountsBaseline> {
    let run = (opts.load_run)(archive)?;
    let case = run
        .specs
        .iter()
        .find(|c| c.name == s.name && c.spec_sha256 == s.source_sha256)?;
    let now = case.counts.as_ref().filter(|c| c.engine.key() == key)?;
    crate::counts::baseline_of(now, workload, &s.name, &p.run.started_utc, &p.run.git_sha)
}

/// True when `s` is judged against its branch's history where a measurement has no accepted
/// baseline: no `--against` or `gate.against`, not accepting, and the branch known and not a
/// bisection's (a detached HEAD or a bisect step has no series of its own), with a store to read.
fn by_default(opts: &ReferenceOptions<'_>, s: &Spec) -> bool {
    !opts.accept
        && opts.against.is_none()
        && s.gate.against.is_none()
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

/// Runs of a case read for its drift, at most: enough to reach back past the runs that follow A
/// (the head's own, a later change of level) to the newest [`HISTORY_RUNS`] up to A.
const RECORDED_READ_RUNS: usize = 200;

/// The runs the history store holds of each of A's cases on A's device, with A's exact spec, on
/// A's branch where the store recorded A (`compare`) (measured, failed ones included: a run that failed a
/// claim measured its medians all the same), as accepted-run entries: the drift between runs a
/// team's history already knows, made as `run`'s history reference is made — the newest
/// [`HISTORY_RUNS`] up to A (runs after it may be another code's), from the newest change of
/// level on, outlier runs left out. A and B themselves are left out (by folder name and start:
/// runs of one folder can start in the same second). None without a store.
pub fn drift_of_runs_up_to(
    store: &mut Store,
    ra: &RunResult,
    rb: &RunResult,
) -> Result<std::collections::BTreeMap<String, Vec<crate::baseline::HistoryEntry>>> {
    let mut out = std::collections::BTreeMap::new();
    let is = |p: &Point, r: &RunResult| {
        *p.run.run_id == *r.run_id && *p.run.started_utc == *r.started_utc
    };
    for s in &ra.specs {
        let points = store.recent(&ra.device.key, &s.name, &s.spec_sha256, RECORDED_READ_RUNS)?;
        let series = drift_runs(points, |p| is(p, ra), |p| is(p, rb));
        let entries = series.iter().filter_map(super::history::entry_of).collect();
        out.insert(s.name.clone(), entries);
    }
    Ok(out)
}

/// Of one case's recorded runs (oldest first), those that give the drift A is judged with:
/// A's branch where A is among them (runs of other branches changed the code, they are not
/// drift), the newest [`HISTORY_RUNS`] up to A, from the newest change of level on, A and B
/// left out, outliers left out.
fn drift_runs(
    points: Vec<Point>,
    is_a: impl Fn(&Point) -> bool,
    is_b: impl Fn(&Point) -> bool,
) -> Vec<Point> {
    let branch = points
        .iter()
        .find(|p| is_a(p))
        .map(|p| p.run.branch.clone());
    let mut series: Vec<Point> = points
        .into_iter()
        .filter(|p| branch.as_ref().is_none_or(|b| &p.run.branch == b))
        .collect();
    if let Some(at) = series.iter().position(&is_a) {
        series.truncate(at + 1);
    }
    let series = series.split_off(series.len().saturating_sub(HISTORY_RUNS));
    let (series, _) = current_level(series);
    let series = series
        .into_iter()
        .filter(|p| !is_a(p) && !is_b(p))
        .collect();
    super::history::without_outliers(series).0
}

/// Where the drift the decision allows for came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    /// The store's history: this many accepted runs (A among them, or joined to them).
    Store(usize),
    /// The history store's runs of this device and spec: this many (A joined to them), where
    /// no baseline holds a history.
    History(usize),
    /// None known: one run (A) as the reference.
    Unknown,
}

/// `compare`'s reference for B's case, and where its drift comes from: A joined to the baselines store's history for this
/// device and spec (as `opledger accept A` would make it), or A alone.
pub fn compare_reference(
    sa: &SpecResult,
    ra: &RunResult,
    device_key: &str,
    store: &Path,
    recorded: &[crate::baseline::HistoryEntry],
) -> Result<Option<(Reference, Drift)>> {
    let stored = if store.is_dir() {
        baseline::find(store, &ra.device, &sa.name)?
            .baseline
            .filter(|b| b.workload == sa.workload && b.device.key == device_key)
    } else {
        None
    };
    // A is one of the accepted runs when an entry of the history is its: the same time, commit
    // and medians (runs a second apart share the time, so the medians tell them apart).
    let a_in = |b: &BaselineFile| {
        let (Some(before), Some(after)) = (sa.before.summary, sa.after.summary) else {
            return false;
        };
        b.history.iter().any(|h| {
            h.recorded_utc == ra.started_utc
                && h.git_sha == ra.git_sha
                && h.before_median_secs == before.median_secs
                && h.after_median_secs == after.median_secs
        })
    };
    let base = match &stored {
        Some(b) if a_in(b) => Some(b.clone()),
        old => super::accept::baseline_of_run(sa, ra, old.as_ref()),
    };
    Ok(base.map(|b| {
        let mut b = Reference::from(&b);
        let drift = if stored.is_some() && b.runs.len() >= POOL_MIN_RUNS {
            Drift::Store(b.runs.len())
        } else {
            // No accepted history: the history store's runs of this case (A and B left out
            // where they were read) give the drift, A joined to them as `run` joins them.
            if join_older(&mut b, recorded.to_vec(), improved(sa)) {
                Drift::History(b.runs.len())
            } else {
                Drift::Unknown
            }
        };
        (b, drift)
    }))
}

/// `compare --base merge-base:BRANCH B`'s base run: the newest archived run on B's device, of
/// one of B's cases with its exact spec, that measured the code's level (its time, or its
/// counts under B's engine key: a run that was only counted is a base for B's counts), at the
/// nearest of `ancestors` (the merge-base first) that has one whose archive is here; with how
/// many commits before the merge-base it is, and its folder.
pub fn base_run(
    store: &mut Store,
    rb: &RunResult,
    ancestors: &[String],
) -> Result<Option<(usize, Point, PathBuf)>> {
    let mut points = Vec::new();
    for s in &rb.specs {
        let key = s.counts.as_ref().map(|c| c.engine.key());
        points.extend(store.committed_measured(
            &rb.device.key,
            &s.name,
            &s.spec_sha256,
            key.as_deref(),
        )?);
    }
    Ok(crate::store::series::at_ancestors(&points, ancestors)
        .into_iter()
        .map(|(back, p)| (back, p.clone(), store.archive_dir(p)))
        .find(|(_, _, dir)| dir.join("results.json").is_file()))
}

/// The runs of `series` (oldest first) from its newest change of level on (of the after median
/// or after/before), and where that change is: runs before it are another code's, not drift.
pub fn current_level(series: Vec<Point>) -> (Vec<Point>, Option<LevelChange>) {
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
    branch: &str,
    (mb, ancestors): (String, Vec<String>),
) -> Result<(GateReference, (PathBuf, Option<Reference>))> {
    let branch = branch.to_string();
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
    let with_samples = base_with_samples(&archive, s, opts, &points);
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
    opts: &ReferenceOptions<'_>,
    points: &[Point],
) -> Option<Reference> {
    let run = &(opts.load_run)(archive)?;
    let sa = run
        .specs
        .iter()
        .find(|c| c.name == s.name && c.spec_sha256 == s.source_sha256)?;
    let older = points[..points.len().saturating_sub(1)].to_vec();
    let mut base = Reference::from(&super::accept::baseline_of_run(sa, run, None)?);
    // Outlier runs left out as `compare` leaves them out of the same series.
    let (older, _) = super::history::without_outliers(older);
    let older = older.iter().filter_map(super::history::entry_of).collect();
    join_older(&mut base, older, improved(sa));
    Some(base)
}

/// Whether a base run measured an improvement over the runs before it (they then describe code
/// that no longer runs).
fn improved(sa: &SpecResult) -> bool {
    sa.baseline.state == Some(super::stats::RegressionState::Improved)
}

/// The one rule by which a base run's reference joins the runs before it, for `run --against
/// merge-base` and for `compare` alike: the older runs pool with it as accepted runs would
/// (the newest [`crate::baseline::MAX_HISTORY`] kept), where together they are enough to know
/// the drift between runs ([`POOL_MIN_RUNS`]), unless the base measured an improvement over
/// them. Returns whether they were joined.
fn join_older(
    base: &mut Reference,
    older: Vec<crate::baseline::HistoryEntry>,
    base_improved: bool,
) -> bool {
    if base_improved || older.len() + base.runs.len() < POOL_MIN_RUNS {
        return false;
    }
    base.runs.splice(0..0, older);
    let max = crate::baseline::MAX_HISTORY;
    if base.runs.len() > max {
        base.runs.drain(..base.runs.len() - max);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Point, PointRun};

    /// A recorded run: its id, branch and after median (before steady at 2 ms).
    fn run(id: usize, branch: &str, after_secs: f64) -> Point {
        // A little spread, as runs have: the drift is not zero.
        let after_secs = after_secs * (1.0 + 0.004 * (id % 3) as f64);
        Point {
            run: std::sync::Arc::new(PointRun {
                run_id: format!("r{id:02}").into(),
                started_utc: format!("2026-01-01T00:00:{id:02}Z").into(),
                git_sha: format!("c{id:02}").into(),
                branch: Some(branch.into()),
                device_key: "cpu-x".into(),
                ..PointRun::default()
            }),
            spec: "s".into(),
            verdict: "pass".into(),
            before_median_secs: Some(0.002),
            after_median_secs: Some(after_secs),
            ratio: Some(after_secs / 0.002),
            ..Point::default()
        }
    }

    fn ids(points: &[Point]) -> Vec<String> {
        points.iter().map(|p| p.run.run_id.to_string()).collect()
    }

    /// Five runs at one level, then four at three times the time (a slowdown landed), with a
    /// run of another branch between them.
    fn recorded() -> Vec<Point> {
        let mut points: Vec<Point> = (0..5).map(|i| run(i, "main", 0.001)).collect();
        points.push(run(5, "feature", 0.0005));
        points.extend((6..10).map(|i| run(i, "main", 0.003)));
        points
    }

    #[test]
    fn the_drift_is_the_runs_up_to_a_at_its_level_without_a_and_b() {
        let is = |id: &'static str| move |p: &Point| &*p.run.run_id == id;
        // A the fourth run, B the fifth: the three runs before A; the slow runs came after A.
        let d = drift_runs(recorded(), is("r03"), is("r04"));
        assert_eq!(ids(&d), ["r00", "r01", "r02"]);
        // A the newest slow run: the slow runs before it, not the fast runs before the change
        // of level, nor the other branch's run, nor B.
        let d = drift_runs(recorded(), is("r09"), is("r04"));
        assert_eq!(ids(&d), ["r06", "r07", "r08"]);
        // A not among them (a run the store never recorded): every branch's runs up to the
        // newest, at the newest level.
        let d = drift_runs(recorded(), is("elsewhere"), is("r09"));
        assert_eq!(ids(&d), ["r06", "r07", "r08"]);
    }
}
