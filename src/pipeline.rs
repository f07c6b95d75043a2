//! The `run` pipeline: specs → ledger → ceilings → measurement → verdicts → baselines → report.
//! Bad input stops the run before anything is measured; a backend error in one spec fails that
//! spec and the run goes on with the others.

use crate::backend::pair::Side;
use crate::backend::{self, Backend, BackendChoice};
use crate::baseline::{self, BaselineFile};
use crate::device::{Ceilings, DeviceInfo};
use crate::error::{Error, ExitCode, Result};
use crate::measure::{self, stats, MeasureConfig};
use crate::report;
use crate::results::*;
use crate::rng::Rng;
use crate::spec::{self, Spec};
use crate::verdict::{self, Check, Correctness, RegressionState, Status};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
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
    check_outputs(opts)?;
    let flush = if opts.measure.cold {
        opts.flush_bytes
    } else {
        Some(0)
    };
    // The host memory the run holds besides the cases: the flush buffer and the three probe
    // arrays (CPU), refused before either is allocated.
    let this_cpu = DeviceInfo::this_cpu();
    let default_host = (2 * this_cpu.llc_bytes).max(64 << 20);
    let host_fixed = if opts.backend == BackendChoice::Cuda {
        0
    } else {
        flush
            .unwrap_or(default_host)
            .saturating_add(opts.probe_bytes.unwrap_or(default_host).saturating_mul(3))
    };
    let available = backend::available_memory_bytes();
    if let Some(avail) = available.filter(|&a| host_fixed > a / 10 * 9) {
        return Err(Error::Usage(format!(
            "the bandwidth probe (3 arrays of {} MiB) and the cold-cache flush buffer ({} MiB) need {:.2} GiB of memory but only {:.2} GiB is available (the least of free memory, `ulimit -v` and the cgroup's limit): lower --probe-mib and --flush-mib",
            opts.probe_bytes.unwrap_or(default_host) >> 20,
            flush.unwrap_or(default_host) >> 20,
            host_fixed as f64 / (1u64 << 30) as f64,
            avail as f64 / (1u64 << 30) as f64
        )));
    }
    let (backend, backend_note) = backend::select(opts.backend, flush)?;
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
                if let Some(note) = found.note {
                    notes.push(note);
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
        _lock: lock,
    })
}

pub fn run(opts: &RunOptions) -> Result<ExitCode> {
    let started = std::time::Instant::now();
    let Prepared {
        specs,
        suite_files,
        backend,
        backend_note,
        device,
        flush_bytes,
        ceilings,
        baselines,
        progress,
        _lock,
    } = prepare(opts, 1)?;
    let (started_utc, stamp) = crate::provenance::utc_now();
    let (git_sha, git_dirty) = crate::provenance::git_info();
    let mut results = Vec::new();
    for (i, (s, (bpath, base))) in specs.iter().zip(&baselines).enumerate() {
        progress.start_spec(i, &s.name, &s.workload.describe());
        let mut r = run_spec(
            s,
            backend.as_ref(),
            &ceilings,
            &opts.measure,
            &device,
            base.as_ref(),
            bpath,
            opts.require_baseline,
            &progress,
        );
        if opts.accept {
            accept(
                &mut r,
                bpath,
                base.as_ref(),
                &device,
                &ceilings,
                &opts.measure,
                &started_utc,
                &git_sha,
                &progress,
            )?;
        }
        results.push(r);
    }
    progress.finish();

    let archived = Archived {
        suite_files: &suite_files,
        backend: backend.as_ref(),
        backend_note,
        device,
        ceilings,
        flush_bytes,
        started_utc,
        stamp,
        git_sha,
        git_dirty,
    };
    let (run, dir) = write_archive(opts, &specs, archived, results, "", started)?;
    if let Some(path) = &opts.junit {
        crate::files::write_atomic(path, report::junit(&run).as_bytes())?;
    }
    if let Some(path) = &opts.summary_to {
        append_summary(path, &run, &dir)?;
    }
    report::terminal::print_summary(&run, &dir);
    Ok(run.verdict.exit_code(opts.fail_on_inconclusive))
}

/// What a run's archive is made of besides its specs' results.
pub(crate) struct Archived<'a> {
    pub suite_files: &'a [(String, String)],
    pub backend: &'a dyn Backend,
    pub backend_note: String,
    pub device: DeviceInfo,
    pub ceilings: Ceilings,
    pub flush_bytes: u64,
    pub started_utc: String,
    /// The UTC time as a folder name (`20261201T101010Z`).
    pub stamp: String,
    pub git_sha: String,
    pub git_dirty: bool,
}

/// Assembles the run's results and writes its archive (`<runs>/<stamp>-<sha><suffix>/`),
/// sealed with its manifest; returns both.
pub(crate) fn write_archive(
    opts: &RunOptions,
    specs: &[Spec],
    a: Archived<'_>,
    results: Vec<SpecResult>,
    suffix: &str,
    started: std::time::Instant,
) -> Result<(RunResult, PathBuf)> {
    // A GPU's datasheet entry comes from the table by its name; the CPU has none.
    let datasheet = a.backend.datasheet().map(Datasheet::from);
    let environment = crate::provenance::environment_manifest(
        &opts.command_line,
        &a.device,
        a.backend.name(),
        specs,
        &a.git_sha,
        a.git_dirty,
    );
    let mut run = RunResult {
        schema_version: SCHEMA_VERSION,
        opledger_version: env!("CARGO_PKG_VERSION").into(),
        run_id: String::new(),
        started_utc: a.started_utc,
        git_sha: a.git_sha.clone(),
        git_dirty: a.git_dirty,
        command_line: opts.command_line.clone(),
        backend: a.backend.name().into(),
        backend_note: a.backend_note,
        device: a.device,
        ceilings: a.ceilings,
        datasheet,
        environment,
        measure: opts.measure,
        flush_bytes: a.flush_bytes,
        checklist: report::checklist(&results),
        sweeps: report::sweeps(&results),
        verdict: RunVerdict::of(&results),
        specs: results,
        wall_secs: 0.0,
    };
    let dir = create_run_dir(
        &opts.runs_dir,
        &format!("{}-{}{suffix}", a.stamp, a.git_sha),
    )?;
    run.run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    run.wall_secs = started.elapsed().as_secs_f64();
    write_run_dir(&dir, &run, a.suite_files, opts.template.as_deref())?;
    // Last: the digests of everything the run wrote (tamper evidence for whoever reads it).
    crate::archive::seal(&dir, "run", Vec::new())?;
    Ok((run, dir))
}

/// Refuses, before anything is measured, a run whose outputs cannot be written: the runs folder
/// (created and written to), the baselines store when accepting, the JUnit and summary files'
/// folders, and a report template that does not compile.
fn check_outputs(opts: &RunOptions) -> Result<()> {
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
    if let Some(t) = &opts.template {
        report::load_template(t)?;
    }
    Ok(())
}

/// Writes results.json, report.md and a copy of every spec file into the run directory.
pub fn write_run_dir(
    dir: &Path,
    run: &RunResult,
    spec_files: &[(String, String)],
    template: Option<&Path>,
) -> Result<()> {
    let spec_dir = dir.join("specs");
    std::fs::create_dir_all(&spec_dir).map_err(|e| Error::io("creating", &spec_dir, e))?;
    // The exact files used, once each (a sweep expands one file into several specs).
    for (name, text) in spec_files {
        crate::files::write_atomic(&spec_dir.join(name), text.as_bytes())?;
    }
    let mut json = serde_json::to_vec_pretty(run)
        .map_err(|e| Error::Usage(format!("cannot serialise results: {e}")))?;
    json.push(b'\n');
    crate::files::write_atomic(&dir.join("results.json"), &json)?;
    let mut env = serde_json::to_vec_pretty(&run.environment)
        .map_err(|e| Error::Usage(format!("cannot serialise the environment: {e}")))?;
    env.push(b'\n');
    crate::files::write_atomic(&dir.join("environment.json"), &env)?;
    for (name, svg) in report::chart::all(run)? {
        crate::files::write_atomic(&dir.join(name), svg.as_bytes())?;
    }
    let md = report::render(run, template)?;
    crate::files::write_atomic(&dir.join("report.md"), md.as_bytes())
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
        .map_err(|e| Error::io("opening summary file", path, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Error::io("appending to", path, e))
}

fn variant_result(v: &crate::ledger::VariantLedger, c: &Ceilings) -> VariantResult {
    VariantResult {
        variant: v.variant,
        implementation: None,
        bytes: v.bytes_moved(),
        flops: v.flops,
        intensity: v.intensity(),
        predicted: verdict::predict(v, c),
        ledger: v.clone(),
        summary: None,
        achieved: None,
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn run_spec(
    s: &Spec,
    backend: &dyn Backend,
    ceilings: &Ceilings,
    cfg: &MeasureConfig,
    device: &DeviceInfo,
    base: Option<&BaselineFile>,
    base_path: &Path,
    require_baseline: bool,
    progress: &Progress,
) -> SpecResult {
    let spec_cfg = effective_config(cfg, &s.measure);
    let cfg = &spec_cfg;
    let dtype_ceilings = ceilings.for_dtype(s.workload.dtype());
    let ceilings = &dtype_ceilings;
    let ledger = s
        .workload
        .ledger(s.variants.before, s.variants.after, &backend.tiling());
    let before = variant_result(&ledger.before, ceilings);
    let after = variant_result(&ledger.after, ceilings);
    let mut r = SpecResult {
        name: s.name.clone(),
        title: s.title.clone(),
        file: s.file.display().to_string(),
        spec_sha256: s.source_sha256.clone(),
        sweep: s.point.clone(),
        workload: s.workload.clone(),
        workload_desc: s.workload.describe(),
        checklist: s.checklist.clone(),
        expect: s.expect.clone(),
        tolerance: s.tolerance(),
        gate: s.gate,
        io_saving: ledger.io_saving(),
        predicted_time_saving: 1.0 - after.predicted.secs / before.predicted.secs,
        max_time_saving: 1.0
            - after.predicted.secs / (before.predicted.compute_secs + before.predicted.memory_secs),
        before,
        after,
        time_saving: None,
        launch_overhead_secs: None,
        samples: None,
        first_pass_pairs: None,
        correctness: None,
        baseline: BaselineOutcome {
            status: BaselineStatus::Missing,
            path: base_path.display().to_string(),
            ratio: None,
            state: None,
            threshold: s.gate.max_regression.0,
            message: String::new(),
            basis: None,
            note: None,
            spread: None,
            guard: None,
        },
        checks: Vec::new(),
        warnings: Vec::new(),
        error: None,
        status: Status::Fail,
        counters: None,
    };
    let fresh = r.clone();
    if let Err(e) = measure_spec(s, backend, ceilings, cfg, &mut r, progress) {
        r.error = Some(e.to_string());
        r.checks
            .push(Check::new("run", Status::Fail, e.to_string()));
        return r;
    }
    let mut regression = regression_check(
        &mut r,
        base,
        base_path,
        device,
        ceilings,
        cfg,
        require_baseline,
    );
    // A FAIL, or an INCONCLUSIVE that a second look could settle, is measured again once with
    // up to twice the samples (1.5 times the time). The evidence of both passes decides
    // together (their pooled samples), and passes that contradict each other give INCONCLUSIVE:
    // never a PASS after a failing pass, never a FAIL on one noisy pass. The drift guard's
    // INCONCLUSIVE is final at once.
    let can_pass = r
        .baseline
        .spread
        .is_none_or(|sp| sp.can_pass(s.gate.max_regression.0));
    let second_pass = match r.baseline.state {
        Some(state) if r.baseline.guard.is_none() => {
            verdict::needs_second_pass(state, can_pass).then_some(state)
        }
        _ => None,
    };
    if let (Some(first), Some(base)) = (second_pass, base) {
        let again_cfg = MeasureConfig {
            min_pairs: cfg.min_pairs * 2,
            max_pairs: cfg.max_pairs * 2,
            time_cap_secs: cfg.time_cap_secs * 1.5,
            ..*cfg
        };
        progress.say(&format!(
            "opledger: {}: regression check {} on the first pass; measuring again",
            s.name,
            if first == RegressionState::Fail {
                "failed"
            } else {
                "inconclusive"
            }
        ));
        let mut second = fresh;
        if measure_spec(s, backend, ceilings, &again_cfg, &mut second, progress).is_ok() {
            // The archive keeps the evidence of both passes: the first pass's pairs, then the
            // second's; the gate judges each and both together (baseline::compare_passes).
            if let (Some(a), Some(b)) = (&r.samples, &mut second.samples) {
                let join = |x: &[f64], y: &[f64]| [x, y].concat();
                b.before_secs = join(&a.before_secs, &b.before_secs);
                b.after_secs = join(&a.after_secs, &b.after_secs);
                b.after_first = [a.after_first.as_slice(), b.after_first.as_slice()].concat();
                second.first_pass_pairs = Some(a.before_secs.len());
            }
            regression = regression_check(
                &mut second,
                Some(base),
                base_path,
                device,
                ceilings,
                cfg,
                require_baseline,
            );
            r = second;
        }
    }
    r.checks.push(regression);
    r.status = if r.checks.iter().any(|c| c.status == Status::Fail) {
        Status::Fail
    } else {
        Status::Pass
    };
    r
}

/// The command line's sampling settings, lowered by the spec's own limits.
fn effective_config(cfg: &MeasureConfig, m: &crate::spec::SpecMeasure) -> MeasureConfig {
    let mut c = *cfg;
    if let Some(v) = m.min_pairs {
        c.min_pairs = c.min_pairs.min(v.0 as usize);
    }
    if let Some(v) = m.max_pairs {
        c.max_pairs = c.max_pairs.min(v.0 as usize).max(c.min_pairs);
    }
    if let Some(v) = m.time_cap_secs {
        c.time_cap_secs = c.time_cap_secs.min(v.0);
    }
    c
}

fn measure_spec(
    s: &Spec,
    backend: &dyn Backend,
    ceilings: &Ceilings,
    cfg: &MeasureConfig,
    r: &mut SpecResult,
    progress: &Progress,
) -> Result<()> {
    let (vb, va) = (s.variants.before, s.variants.after);
    let kind = s.workload.as_kind();
    // The kind's seeded inputs: the backend computes on them, the reference is evaluated on
    // them here, outside any backend.
    let inputs = std::sync::Arc::new(kind.inputs(cfg.seed));
    let ctx = backend::pair::PairContext {
        spec_dir: s.dir(),
        flush_bytes: backend.flush_bytes().max(64 << 20),
    };
    let mut case = backend::pair::prepare(
        backend,
        &s.workload,
        s.variants,
        &s.implementations,
        inputs.clone(),
        &ctx,
    )?;
    let samples = measure::measure_pairs(case.as_mut(), cfg, |n| {
        progress.pairs(&s.name, n, cfg.max_pairs)
    })?;

    // Correctness on the outputs of the last timed runs.
    let tol = &r.tolerance.tolerance();
    case.collect_outputs()?;
    r.before.implementation = case.implementation(Side::Before);
    r.after.implementation = case.implementation(Side::After);
    let out_b = case.output(Side::Before)?;
    let out_a = case.output(Side::After)?;
    let n = kind.output_len() as usize;
    let mut rng = Rng::new(cfg.seed ^ 0xc0ffee);
    let mut idx: Vec<usize> = (0..kind.reference_samples().min(n))
        .map(|_| rng.below(n))
        .collect();
    idx.extend([0, n - 1]);
    let agree = kind.variants_agree();
    // Without an f64 reference (kind custom) the before side is the after side's reference.
    let referenced = kind.has_reference();
    if !referenced {
        idx.clear();
    }
    let guard = [(vb, &out_b), (va, &out_a)]
        .into_iter()
        .filter_map(|(v, out)| verdict::output_guard(v.name(), out))
        .collect();
    let shape = kind.output_shape();
    let cols = shape.last().copied().unwrap_or(1).max(1) as usize;
    let correctness = Correctness {
        guard,
        reference: referenced,
        variants_comparable: agree,
        after_vs_before: if agree {
            verdict::compare(&out_a, |i| out_b[i] as f64, 0..n, tol, cols)
        } else {
            verdict::compare(&out_a, |_| 0.0, 0..0, tol, cols)
        },
        before_vs_reference: verdict::compare(
            &out_b,
            |i| kind.reference(&inputs, vb, i),
            idx.iter().copied(),
            tol,
            cols,
        ),
        after_vs_reference: verdict::compare(
            &out_a,
            |i| kind.reference(&inputs, va, i),
            idx.iter().copied(),
            tol,
            cols,
        ),
        shape,
    };
    drop((out_a, out_b));
    drop(case);

    let res = cfg.bootstrap_resamples;
    let sb = stats::summarize(&samples.before_secs, res, cfg.seed);
    let sa = stats::summarize(&samples.after_secs, res, cfg.seed);
    let ab = verdict::achieved(&r.before.ledger, sb.median_secs, ceilings);
    let aa = verdict::achieved(&r.after.ledger, sa.median_secs, ceilings);
    let saving = stats::paired_saving_ci(&samples.before_secs, &samples.after_secs, res, cfg.seed);
    r.checks.push(correctness.check(tol));
    r.checks.push(verdict::bound_check(
        s.expect.bound,
        &r.after.predicted,
        &aa,
    ));
    r.checks.push(verdict::io_saving_check(
        r.io_saving,
        s.expect.io_saving.as_ref(),
    ));
    let launch_ops = kind.launch_chain_ops();
    let launch_bound = launch_ops.is_some();
    r.checks.push(verdict::time_saving_check(
        &saving,
        s.expect.time_saving.as_ref(),
        r.predicted_time_saving,
        (!launch_bound).then_some(r.max_time_saving),
    ));
    if let Some(n_ops) = launch_ops {
        let diff =
            stats::paired_difference_ci(&samples.before_secs, &samples.after_secs, res, cfg.seed);
        let per = |v: f64| v / (n_ops - 1) as f64;
        let overhead = stats::Estimate {
            point: per(diff.point),
            lo: per(diff.lo),
            hi: per(diff.hi),
        };
        r.checks.push(verdict::launch_overhead_check(
            &overhead,
            n_ops,
            &s.variants,
        ));
        r.launch_overhead_secs = Some(overhead);
    }
    r.warnings.extend(backend.case_warnings(&s.workload));
    r.warnings.extend(verdict::measurement_warnings(
        &sb,
        &sa,
        &aa,
        &ab,
        launch_bound,
    ));
    r.before.summary = Some(sb);
    r.after.summary = Some(sa);
    r.before.achieved = Some(ab);
    r.after.achieved = Some(aa);
    r.time_saving = Some(saving);
    r.correctness = Some(correctness);
    r.samples = Some(samples);
    Ok(())
}

fn regression_check(
    r: &mut SpecResult,
    base: Option<&BaselineFile>,
    base_path: &Path,
    device: &DeviceInfo,
    ceilings: &Ceilings,
    cfg: &MeasureConfig,
    require_baseline: bool,
) -> Check {
    let Some(base) = base else {
        let msg = format!(
            "no baseline for device {} yet (record one with `run --accept`)",
            device.key
        );
        r.baseline.message = msg.clone();
        let status = if require_baseline {
            Status::Fail
        } else {
            Status::Skip
        };
        return Check::new("regression", status, msg);
    };
    let (outcome, warnings) = baseline::compare_passes(
        base,
        base_path,
        r,
        device,
        ceilings,
        cfg.bootstrap_resamples,
        cfg.seed,
    );
    r.warnings.extend(warnings);
    let check = Check::new(
        "regression",
        status_of(&outcome, require_baseline),
        outcome.message.clone(),
    );
    r.baseline = outcome;
    check
}

/// The check status of a gate outcome.
fn status_of(outcome: &BaselineOutcome, require_baseline: bool) -> Status {
    match outcome.state {
        Some(RegressionState::Fail) => Status::Fail,
        Some(RegressionState::Inconclusive) => Status::Inconclusive,
        Some(RegressionState::Pass | RegressionState::Improved) => Status::Pass,
        None if require_baseline => Status::Fail,
        None => Status::Skip,
    }
}

#[allow(clippy::too_many_arguments)]
fn accept(
    r: &mut SpecResult,
    path: &Path,
    old: Option<&BaselineFile>,
    device: &DeviceInfo,
    ceilings: &Ceilings,
    cfg: &MeasureConfig,
    utc: &str,
    git_sha: &str,
    progress: &Progress,
) -> Result<()> {
    if r.status != Status::Pass {
        progress.say(&format!(
            "opledger: {}: not accepted as a baseline: the spec did not pass",
            r.name
        ));
        return Ok(());
    }
    let Some(new) = baseline::from_result(r, device, ceilings, cfg, utc, git_sha, old) else {
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
    progress.say(baseline::summary_diff(path, old, &new).trim_end());
    r.baseline.status = BaselineStatus::Accepted;
    r.baseline.message = match old {
        None => format!(
            "first baseline for device {}: recorded by this run ({} accepted run)",
            device.key,
            new.history.len()
        ),
        Some(_) => format!(
            "{}; accepted: this run joins the baseline ({} accepted runs)",
            r.baseline.message,
            new.history.len()
        ),
    };
    Ok(())
}

/// Progress on stderr: a bar on a terminal; plain lines elsewhere (CI logs, pipes), one per
/// spec, so that a log shows where a run stood without control characters.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
}

impl Progress {
    fn new(total: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total as u64);
            if let Ok(style) =
                ProgressStyle::with_template("[{bar:24}] {pos}/{len} specs {elapsed} {wide_msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        Progress { bar, total }
    }

    /// A line of its own, printed above the bar.
    pub(crate) fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub(crate) fn start_spec(&self, index: usize, name: &str, desc: &str) {
        match &self.bar {
            Some(b) => {
                b.set_position(index as u64);
                b.set_message(format!("{name} — {desc}"));
            }
            None => eprintln!("opledger: [{}/{}] {name} — {desc}", index + 1, self.total),
        }
    }

    fn pairs(&self, name: &str, done: usize, max: usize) {
        if let Some(b) = &self.bar {
            b.set_message(format!("{name}: {done}/{max} pairs"));
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Creates `root/name`, or `root/name-2`, ... if a run of the same second exists.
fn create_run_dir(root: &Path, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(root).map_err(|e| Error::io("creating", root, e))?;
    for k in 1..1000 {
        let dir = if k == 1 {
            root.join(name)
        } else {
            root.join(format!("{name}-{k}"))
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("creating", &dir, e)),
        }
    }
    Err(Error::Usage(format!(
        "{}: too many runs named {name}",
        root.display()
    )))
}
