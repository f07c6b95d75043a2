//! The `run` pipeline: specs → ledger → ceilings → measurement → verdicts → baselines → report.
//! Bad input stops the run before anything is measured; a backend error in one spec fails that
//! spec and the run goes on with the others.

mod counting;
mod prepare;
mod shifts;

pub(crate) use prepare::{prepare, Prepared};

use crate::backend::{Backend, BackendChoice};
use crate::baseline::{self, BaselineFile};
use crate::device::{Ceilings, DeviceInfo};
use crate::error::Result;
use crate::gate::stats::RegressionState;
use crate::gate::{self, Gate};
use crate::measure::MeasureConfig;
use crate::report::terminal::Progress;
use crate::results::*;
use crate::spec::Spec;
use crate::verdict::Status;
use crate::{archive, evidence, report};
use std::path::{Path, PathBuf};

/// Everything `run` needs besides the specs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// What `--measure` asks of every spec; `None`: each spec's `measure.mode`.
    pub mode: Option<crate::spec::MeasureMode>,
    /// The cache model counted sides are simulated on (`None`: the default model).
    pub cache_model: Option<crate::measure::counts::CacheModel>,
    pub paths: Vec<PathBuf>,
    pub backend: BackendChoice,
    pub accept: bool,
    pub require_baseline: bool,
    /// An INCONCLUSIVE spec makes the run exit 1.
    pub fail_on_inconclusive: bool,
    pub baselines_dir: PathBuf,
    pub runs_dir: PathBuf,
    pub template: Option<PathBuf>,
    pub measure: MeasureConfig,
    /// Overrides the probe's array size (bytes); default two thirds of the last-level cache.
    pub probe_bytes: Option<u64>,
    /// Overrides the cold-cache flush size (bytes); default twice the last-level cache.
    pub flush_bytes: Option<u64>,
    pub command_line: Vec<String>,
    /// Append the short Markdown summary to this file (a CI job summary).
    pub summary_to: Option<PathBuf>,
    /// Write JUnit XML (one test case per check) to this file.
    pub junit: Option<PathBuf>,
    /// Run only this shard's cases.
    pub shard: Option<crate::shard::Shard>,
    /// Run only these cases (by name; empty: all).
    pub cases: Vec<String>,
    /// What the `OPLEDGER_*` variables asked, read when the command started.
    pub settings: crate::settings::Settings,
    /// The history store the run is recorded into (`None`: `--no-store`).
    pub store: Option<crate::store::StoreUrl>,
    /// The store the gate reads a reference from (`--against history|merge-base`): the run's
    /// store, or under `--no-store` the one it would have been, read and never written.
    pub reference_store: Option<crate::store::StoreUrl>,
    /// The branch the run measured.
    pub branch: Option<String>,
    /// The repository's default branch: its runs are watched for new shifts of level.
    pub default_branch: Option<String>,
    /// What the gate judges every spec against (`--against`); `None`: each spec's own
    /// `gate.against`, else its accepted baselines.
    pub against: Option<crate::spec::Against>,
}

/// `opledger run`: every spec measured and gated, the run archived; returns the run's verdict
/// and the archive's folder.
pub fn run(opts: &RunOptions) -> Result<(RunVerdict, PathBuf)> {
    let started = std::time::Instant::now();
    let p = prepare(opts, 1)?;
    let (started_utc, stamp) = crate::provenance::utc_now();
    let started_unix_ns = crate::provenance::unix_ns();
    let (git_sha, git_dirty) = crate::provenance::git_info();
    let ctx = RunContext {
        backend: p.backend.as_ref(),
        device: &p.device,
        ceilings: &p.ceilings,
        measure: &opts.measure,
        require_baseline: opts.require_baseline,
        progress: &p.progress,
    };
    let mut counted_first = counting::count_all(&p, opts);
    let mut results = Vec::new();
    for (i, (s, base)) in p.specs.iter().zip(&p.baselines).enumerate() {
        let bpath = &base.path;
        p.progress.start_spec(i, &s.name, &s.workload.describe());
        let mode = opts.mode_of(s);
        let counts_base = p.counts_baselines.get(i);
        let counted = s.counted()?;
        // The counts first (counted before any timing, or now): their gate's call tells the
        // time gate whether a second pass could change the verdict.
        let measured = mode
            .counts()
            .then(|| counting::taken(&p, &mut counted_first, i, &counted))
            .flatten();
        let others = counting::calls(measured.as_ref(), &counted, opts.require_baseline);
        let mut r = if mode.times() {
            run_spec(&ctx, s, base.reference.as_ref(), bpath, &others)
        } else {
            let ceilings = ctx.ceilings.for_dtype(s.workload.dtype());
            evidence::planned(s, ctx.backend, &ceilings, bpath)
        };
        r.baseline.reference = p.references.get(i).cloned().flatten();
        if let Some((counter, cb, measured)) = measured {
            let reference = counting::reference(cb, opts.require_baseline);
            gate::decide_counts(
                measured,
                counter.engine.seed,
                &counted,
                &mut r,
                &reference,
                mode.times(),
            );
            // Counted alone, a deliberate slowdown (the gate experiment's) is said as a timed
            // run says it: what was counted is the experiment, not the code as it is.
            if !mode.times() {
                r.warnings
                    .extend(p.backend.case_warnings(&counted.workload));
            }
        }
        if opts.accept {
            if mode.times() {
                accept(
                    &ctx,
                    &mut r,
                    bpath,
                    base.accepted.as_ref(),
                    &started_utc,
                    &git_sha,
                )?;
            }
            if let (Some(cb), true) = (counts_base, mode.counts()) {
                accept_counts(&ctx, &counted, &mut r, &cb.path, &started_utc, &git_sha)?;
            }
        }
        results.push(r);
    }
    p.progress.finish();
    let made = Made {
        when: Provenance {
            started_utc,
            started_unix_ns,
            stamp,
            git_sha,
            git_dirty,
        },
        ceilings: p.ceilings,
        note: String::new(),
        suffix: String::new(),
        started,
    };
    let (run, dir) = write_archive(opts, &p, made, results)?;
    if let Some(path) = &opts.junit {
        crate::files::write_atomic(path, report::output::junit::junit(&run).as_bytes())?;
    }
    if let Some(path) = &opts.summary_to {
        append_summary(path, &run, &dir)?;
    }
    report::terminal::print_summary(&run, &dir);
    let found = shifts::new_shifts(opts, &p.specs, &run, p.store.borrow_mut().as_mut())?;
    for shift in found {
        report::terminal::print_new_shift(&shift.spec, shift.metric, &shift.located, shift.limit);
    }
    Ok((run.verdict, dir))
}

/// When and from which commit a run was made.
pub(crate) struct Provenance {
    pub started_utc: String,
    pub started_unix_ns: i64,
    /// The UTC time as a folder name (`20261201T101010Z`).
    pub stamp: String,
    pub git_sha: String,
    pub git_dirty: bool,
}

/// One run as it is archived: when, on which roofs, and how its folder and note are marked.
pub(crate) struct Made {
    pub when: Provenance,
    /// The ceilings this run measured (a calibration probes them again for each run).
    pub ceilings: Ceilings,
    /// Appended to the backend note (`; calibration run 2/5`).
    pub note: String,
    /// Appended to the folder's name (`-calibrate-2`).
    pub suffix: String,
    pub started: std::time::Instant,
}

/// Assembles the run's results and writes its archive (`<runs>/<stamp>-<sha><suffix>/`) with
/// every output, sealed with its manifest, and records it into the history store; returns both.
pub(crate) fn write_archive(
    opts: &RunOptions,
    p: &Prepared,
    made: Made,
    results: Vec<SpecResult>,
) -> Result<(RunResult, PathBuf)> {
    let when = &made.when;
    let backend = p.backend.as_ref();
    // A GPU's datasheet entry comes from the table by its name; the CPU has none.
    let datasheet = backend.datasheet().map(Datasheet::from);
    let environment = crate::provenance::environment_manifest(
        &opts.command_line,
        &p.device,
        backend.name(),
        &p.specs,
        &when.git_sha,
        when.git_dirty,
    );
    let mut run = RunResult {
        schema_version: SCHEMA_VERSION,
        opledger_version: env!("CARGO_PKG_VERSION").into(),
        run_id: String::new(),
        run_uid: crate::provenance::new_uid(),
        started_utc: when.started_utc.clone(),
        started_unix_ns: Some(when.started_unix_ns),
        git_sha: when.git_sha.clone(),
        git_dirty: when.git_dirty,
        command_line: opts.command_line.clone(),
        backend: backend.name().into(),
        backend_note: format!("{}{}", p.backend_note, made.note),
        device: p.device.clone(),
        ceilings: made.ceilings,
        datasheet,
        environment,
        measure: opts.measure,
        flush_bytes: p.flush_bytes,
        flush_method: p.backend.flush_method(),
        checklist: crate::results::derive::checklist(&results),
        sweeps: crate::results::derive::sweeps(&results),
        verdict: RunVerdict::of(&results),
        specs: results,
        wall_secs: 0.0,
        template: None,
    };
    let dir = archive::create_run_dir(
        &opts.runs_dir,
        &format!("{}-{}{}", when.stamp, when.git_sha, made.suffix),
    )?;
    run.run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    run.wall_secs = made.started.elapsed().as_secs_f64();
    let contents = archive::Contents {
        spec_files: &p.suite_files,
        template: p.template.as_ref(),
        extra: Vec::new(),
    };
    let manifest_sha256 = archive::save(&dir, &mut run, contents, "run", Vec::new())?;
    // Every archived run is remembered: its cases go into the history store.
    if let Some(url) = &opts.store {
        let mut open = p.store.borrow_mut();
        let store = match open.as_mut() {
            Some(store) => store,
            // A new SQLite file, made by the run's first record.
            None => open.insert(crate::store::Store::open(url)?),
        };
        store.record(&run, &dir, &manifest_sha256, opts.branch.as_deref())?;
    }
    Ok((run, dir))
}

/// Appends the short summary to `path` (created if missing), as CI job summaries expect.
fn append_summary(path: &Path, run: &RunResult, dir: &Path) -> Result<()> {
    let text = report::render_summary(run, &dir.join(crate::report::output::REPORT))?;
    crate::files::append(path, text.as_bytes())
}

/// What every spec of a run is measured and judged with.
pub(crate) struct RunContext<'a> {
    pub backend: &'a dyn Backend,
    pub device: &'a DeviceInfo,
    pub ceilings: &'a Ceilings,
    pub measure: &'a MeasureConfig,
    pub require_baseline: bool,
    pub progress: &'a Progress,
}

/// One spec through its stages: planned (ledger, prediction), measured (samples, correctness,
/// claims), gated (against `base`, with a second pass where the gate asks for one, knowing how
/// the spec's other measurements' gates called it: `others`).
pub(crate) fn run_spec(
    ctx: &RunContext<'_>,
    s: &Spec,
    base: Option<&crate::gate::reference::Reference>,
    base_path: &Path,
    others: &[crate::gate::rule::GateCall],
) -> SpecResult {
    let cfg = evidence::effective_config(ctx.measure, &s.measure);
    let ceilings = ctx.ceilings.for_dtype(s.workload.dtype());
    let plan = evidence::planned(s, ctx.backend, &ceilings, base_path);
    let measure = |cfg: &MeasureConfig| {
        evidence::measured(s, ctx.backend, &ceilings, cfg, plan.clone(), |n| {
            ctx.progress.pairs(&s.name, n, cfg.max_pairs)
        })
    };
    let first = measure(&cfg);
    if first.error.is_some() {
        return first;
    }
    let gate = Gate {
        reference: base,
        path: base_path,
        device: ctx.device,
        ceilings: &ceilings,
        resamples: cfg.bootstrap_resamples,
        seed: cfg.seed,
        require_baseline: ctx.require_baseline,
    };
    gate.decide(first, others, |state| {
        ctx.progress.say(&format!(
            "opledger: {}: regression check {} on the first pass; measuring again",
            s.name,
            if state == RegressionState::Fail {
                "failed"
            } else {
                "inconclusive"
            }
        ));
        Some(measure(&gate::second_pass_config(&cfg))).filter(|r| r.error.is_none())
    })
}

impl RunOptions {
    /// What this run measures of `s`: `--measure`, else the spec's own mode, else time.
    pub fn mode_of(&self, s: &Spec) -> crate::spec::MeasureMode {
        self.mode.or(s.measure.mode).unwrap_or_default()
    }
}

/// Records a passing result's counts as its spec's counts baseline.
fn accept_counts(
    ctx: &RunContext<'_>,
    s: &Spec,
    r: &mut SpecResult,
    path: &Path,
    utc: &str,
    git_sha: &str,
) -> Result<()> {
    let Some(now) = r.counts.as_ref() else {
        return Ok(());
    };
    if r.status != Status::Pass {
        ctx.progress.say(&format!(
            "opledger: {}: counts not accepted as a baseline: the spec did not pass",
            r.name
        ));
        return Ok(());
    }
    let Some(new) = gate::counts::baseline_of(now, &s.workload, &s.name, utc, git_sha) else {
        return Ok(());
    };
    baseline::counts::store(path, &new)?;
    ctx.progress
        .say(&format!("opledger: accepted counts {}", path.display()));
    if let Some(o) = r.counts_gate.as_mut() {
        o.state = crate::results::CountsState::Accepted;
    }
    Ok(())
}

/// Records a passing result as its spec's baseline (the store is locked for the whole run).
fn accept(
    ctx: &RunContext<'_>,
    r: &mut SpecResult,
    path: &Path,
    old: Option<&BaselineFile>,
    utc: &str,
    git_sha: &str,
) -> Result<()> {
    let progress = ctx.progress;
    if r.status != Status::Pass {
        progress.say(&format!(
            "opledger: {}: not accepted as a baseline: the spec did not pass",
            r.name
        ));
        return Ok(());
    }
    let Some(new) =
        gate::accept::baseline_of(r, ctx.device, ctx.ceilings, ctx.measure, utc, git_sha, old)
    else {
        return Ok(());
    };
    baseline::store(path, &new)?;
    progress.say(&format!("opledger: accepted {}", path.display()));
    if old.is_some() && r.baseline.state == Some(RegressionState::Improved) {
        progress.say(&format!(
            "opledger: {}: significantly faster than the baseline: its history of accepted runs restarts here",
            r.name
        ));
    }
    progress.say(crate::report::text::baseline_diff(path, old, &new).trim_end());
    gate::accept::mark_accepted(r, ctx.device, old.is_some(), &new);
    Ok(())
}
