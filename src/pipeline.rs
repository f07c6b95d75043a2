//! The `run` pipeline: specs → ledger → ceilings → measurement → verdicts → baselines → report.
//! Bad input stops the run before anything is measured; a backend error in one spec fails that
//! spec and the run goes on with the others.

use crate::backend::{self, Backend, BackendChoice};
use crate::baseline::{self, BaselineFile};
use crate::device::{Ceilings, DeviceInfo};
use crate::error::{Error, ExitCode, Result};
use crate::gate::{self, Gate};
use crate::measure::MeasureConfig;
use crate::report::output::Template;
use crate::report::terminal::Progress;
use crate::results::*;
use crate::spec::{self, Spec};
use crate::verdict::{RegressionState, Status};
use crate::{archive, evidence, report};
use std::path::{Path, PathBuf};

/// Everything `run` needs besides the specs.
#[derive(Debug, Clone)]
pub struct RunOptions {
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
    /// Overrides the probe's array size (bytes); default twice the last-level cache.
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
    /// What the `OPLEDGER_*` variables asked, read when the command started.
    pub settings: crate::settings::Settings,
}

/// A run made ready: specs loaded, outputs and memory checked, backend opened, baselines read
/// (and locked when accepting), ceilings measured.
pub(crate) struct Prepared {
    pub specs: Vec<Spec>,
    /// Every spec file of the suite (a shard's archive holds them all, so that a merge knows
    /// which cases the whole suite has): (file name, text).
    pub suite_files: Vec<(String, String)>,
    pub backend: Box<dyn Backend>,
    pub backend_note: String,
    pub device: DeviceInfo,
    pub flush_bytes: u64,
    pub ceilings: Ceilings,
    pub baselines: Vec<(PathBuf, Option<BaselineFile>)>,
    pub progress: Progress,
    /// The user's report template, compiled before anything was measured.
    pub template: Option<Template>,
    pub _lock: Option<baseline::StoreLock>,
}

/// Everything before the first spec is measured; everything that can be refused is refused
/// here. `passes` is how many times each spec will be measured (the progress bar's length).
pub(crate) fn prepare(opts: &RunOptions, passes: usize) -> Result<Prepared> {
    let mut specs = spec::load_all(&opts.paths)?;
    let mut suite_files: Vec<(String, String)> = Vec::new();
    for s in &specs {
        let name = spec_file_name(s);
        if !suite_files.iter().any(|(n, _)| *n == name) {
            suite_files.push((name, s.source_text.clone()));
        }
    }
    let mut shard_note = None;
    if let Some(shard) = &opts.shard {
        let all = specs.len();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let keep = shard.keeps(&names);
        let mut k = keep.into_iter();
        specs.retain(|_| k.next().unwrap_or(false));
        shard_note = Some(format!(
            "opledger: {}: {} of {all} cases",
            shard.describe(),
            specs.len()
        ));
    }
    // Every output is checked before anything is measured or written: a run that cannot archive
    // its evidence must not write baselines first.
    let template = check_outputs(opts)?;
    let flush = if opts.measure.cold {
        opts.flush_bytes
    } else {
        Some(0)
    };
    // The host memory the run holds besides the cases: the flush buffer and the three probe
    // arrays (CPU), refused before either is allocated.
    let this_cpu = DeviceInfo::this_cpu();
    let default_host = (2 * this_cpu.llc_bytes).max(64 << 20);
    let host_fixed = if opts.backend.kind() == Some(crate::device::DeviceKind::Cuda) {
        0
    } else {
        flush
            .unwrap_or(default_host)
            .saturating_add(opts.probe_bytes.unwrap_or(default_host).saturating_mul(3))
    };
    let available = backend::available_memory_bytes();
    if let Some(avail) = available.filter(|&a| host_fixed > a / 10 * 9) {
        return Err(Error::Flag(format!(
            "the bandwidth probe (3 arrays of {} MiB) and the cold-cache flush buffer ({} MiB) need {:.2} GiB of memory but only {:.2} GiB is available (the least of free memory, `ulimit -v` and the cgroup's limit): lower --probe-mib and --flush-mib",
            opts.probe_bytes.unwrap_or(default_host) >> 20,
            flush.unwrap_or(default_host) >> 20,
            host_fixed as f64 / (1u64 << 30) as f64,
            avail as f64 / (1u64 << 30) as f64
        )));
    }
    let (backend, backend_note) = backend::select(opts.backend, flush, &opts.settings)?;
    let device = backend.device();
    let flush_bytes = backend.flush_bytes();
    // Buffers inside the last-level cache measure the cache, not memory: allowed (small test
    // runs use them), and said.
    let mut size_warnings = Vec::new();
    for (flag, bytes) in [
        ("--probe-mib", opts.probe_bytes),
        ("--flush-mib", opts.flush_bytes),
    ] {
        if let Some(b) = bytes.filter(|&b| b < device.llc_bytes) {
            size_warnings.push(format!(
                "opledger: warning: {flag} {} is smaller than the last-level cache ({} MiB): {}",
                b >> 20,
                device.llc_bytes.div_ceil(1 << 20),
                if flag == "--probe-mib" {
                    "the ceilings are the cache's, not memory's"
                } else {
                    "caches are not cold between samples"
                }
            ));
        }
    }

    // Accepting runs serialize on the store, from reading the baselines to writing them.
    let lock = if opts.accept {
        let lock = baseline::StoreLock::acquire(&opts.baselines_dir)?;
        // Under the lock no other writer is active: a temp file left in this device's folder is
        // what a killed accept left behind.
        baseline::remove_stale_temp_files(&opts.baselines_dir.join(&device.key));
        Some(lock)
    } else {
        None
    };
    // Everything that can be refused is refused before any case is allocated or measured:
    // a workload the backend has no kernels for, and a case larger than the memory there is.
    let mut baselines: Vec<(PathBuf, Option<BaselineFile>)> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for s in &specs {
        let refused = |message: String| Error::Spec {
            path: s.file.clone(),
            pos: spec::find_key(&s.source_text, &["workload"]),
            message,
        };
        // Asked for by name, a backend that cannot run a spec makes the spec bad input. Picked
        // by `auto`, it fails that spec without measuring it (its reason in the report) and the
        // run goes on: a suite with GPU-only specs still gates its other specs on a CPU runner.
        if let Some(reason) = backend
            .kind()
            .cannot_run_sides(&s.workload, &s.implementations)
        {
            if opts.backend != BackendChoice::Auto {
                return Err(refused(format!(
                    "{}: the {} backend cannot run this workload: {reason}",
                    s.name,
                    backend.name()
                )));
            }
        }
        let need = backend.host_bytes(&s.workload);
        backend::check_memory(&s.name, need, available).map_err(|e| refused(e.to_string()))?;
        let path = baseline::path_for(&opts.baselines_dir, &device.key, &s.name);
        let loaded = match baseline::find(&opts.baselines_dir, &device, &s.name) {
            Ok(found) => {
                if let Some(legacy) = &found.legacy {
                    notes.push(format!(
                        "baseline read from {} (the folder of the older device key); `run --accept` writes it to {}",
                        legacy.display(),
                        found.path.display()
                    ));
                }
                found.baseline
            }
            Err(e) if opts.accept => {
                eprintln!("warning: {e}\n  (--accept will replace it if the spec passes)");
                None
            }
            Err(e) => return Err(e),
        };
        baselines.push((path, loaded));
    }

    let progress = Progress::new(specs.len() * passes);
    progress.say(&format!("opledger: backend {backend_note}"));
    if let Some(n) = &shard_note {
        progress.say(n);
    }
    for w in &size_warnings {
        progress.say(w);
    }
    for n in &notes {
        progress.say(&format!("opledger: {n}"));
    }
    progress.say(&format!(
        "opledger: probing ceilings of {} ({}, baselines `{}`)...",
        device.name,
        backend.describe_compute(),
        device.key
    ));
    let ceilings = backend.ceilings(opts.probe_bytes)?;
    progress.say(&format!(
        "opledger: triad {:.2} GB/s, copy {:.2} GB/s, FMA peak {:.1} GFLOP/s, ridge {:.1} FLOP/B",
        ceilings.triad_bytes_per_sec / 1e9,
        ceilings.copy_bytes_per_sec / 1e9,
        ceilings.fma_flops_per_sec / 1e9,
        ceilings.ridge()
    ));

    Ok(Prepared {
        specs,
        suite_files,
        backend,
        backend_note,
        device,
        flush_bytes,
        ceilings,
        baselines,
        progress,
        template,
        _lock: lock,
    })
}

/// `opledger run`: every spec measured and gated, the run archived; returns the exit code and
/// the archive's folder.
pub fn run(opts: &RunOptions) -> Result<(ExitCode, PathBuf)> {
    let started = std::time::Instant::now();
    let p = prepare(opts, 1)?;
    let (started_utc, stamp) = crate::provenance::utc_now();
    let (git_sha, git_dirty) = crate::provenance::git_info();
    let ctx = RunContext {
        backend: p.backend.as_ref(),
        device: &p.device,
        ceilings: &p.ceilings,
        measure: &opts.measure,
        require_baseline: opts.require_baseline,
        progress: &p.progress,
    };
    let mut results = Vec::new();
    for (i, (s, (bpath, base))) in p.specs.iter().zip(&p.baselines).enumerate() {
        p.progress.start_spec(i, &s.name, &s.workload.describe());
        let mut r = run_spec(&ctx, s, base.as_ref(), bpath);
        if opts.accept {
            accept(&ctx, &mut r, bpath, base.as_ref(), &started_utc, &git_sha)?;
        }
        results.push(r);
    }
    p.progress.finish();
    let made = Made {
        when: Provenance {
            started_utc,
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
        crate::files::write_atomic(path, report::junit(&run).as_bytes())?;
    }
    if let Some(path) = &opts.summary_to {
        append_summary(path, &run, &dir)?;
    }
    report::terminal::print_summary(&run, &dir);
    Ok((run.verdict.exit_code(opts.fail_on_inconclusive), dir))
}

/// When and from which commit a run was made.
pub(crate) struct Provenance {
    pub started_utc: String,
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
/// every output, sealed with its manifest; returns both.
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
        started_utc: when.started_utc.clone(),
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
        checklist: report::checklist(&results),
        sweeps: report::sweeps(&results),
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
    archive::save(&dir, &mut run, contents, "run", Vec::new())?;
    Ok((run, dir))
}

/// Refuses, before anything is measured, a run whose outputs cannot be written: the runs folder
/// (created and written to), the baselines store when accepting, the JUnit and summary files'
/// folders, and a report template that does not compile (returned, compiled).
fn check_outputs(opts: &RunOptions) -> Result<Option<Template>> {
    crate::files::check_writable_dir(&opts.runs_dir, "runs folder (--runs-dir)")?;
    if opts.accept {
        crate::files::check_writable_dir(&opts.baselines_dir, "baselines store (--baselines)")?;
    }
    if let Some(p) = &opts.junit {
        crate::files::check_writable_file(p, "JUnit file (--junit)")?;
    }
    if let Some(p) = &opts.summary_to {
        crate::files::check_writable_file(p, "summary file (--summary-to)")?;
    }
    opts.template
        .as_deref()
        .map(report::load_template)
        .transpose()
}

/// The name a spec's file is archived under.
pub fn spec_file_name(s: &Spec) -> String {
    s.file.file_name().map_or_else(
        || format!("{}.yaml", s.name),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Appends the short summary to `path` (created if missing), as CI job summaries expect.
fn append_summary(path: &Path, run: &RunResult, dir: &Path) -> Result<()> {
    use std::io::Write;
    let text = report::render_summary(run, &dir.join("report.md"))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::write("opening summary file", path, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Error::write("appending to", path, e))
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
/// claims), gated (against `base`, with a second pass where the gate asks for one).
pub(crate) fn run_spec(
    ctx: &RunContext<'_>,
    s: &Spec,
    base: Option<&BaselineFile>,
    base_path: &Path,
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
        baseline: base,
        path: base_path,
        device: ctx.device,
        ceilings: &ceilings,
        resamples: cfg.bootstrap_resamples,
        seed: cfg.seed,
        require_baseline: ctx.require_baseline,
    };
    gate.decide(first, |state| {
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
