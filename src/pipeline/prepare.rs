//! Preparing a run: everything before the first spec is measured, and everything that can be
//! refused is refused here — the specs and the suite (a shard's share of it), the outputs'
//! folders and template, the host memory, the backend, what it cannot run, the baselines (and
//! the store's lock when accepting), the ceilings.

use super::RunOptions;
use crate::backend::{self, Backend, BackendChoice};
use crate::baseline;
use crate::device::{Ceilings, CountedBy, DeviceInfo};
use crate::error::{CountsRefusal, Error, Result};
use crate::gate::reference::SpecBaseline;
use crate::report;
use crate::report::output::Template;
use crate::report::terminal::Progress;
use crate::spec::{self, Spec};
use std::path::Path;

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
    pub baselines: Vec<SpecBaseline>,
    /// Each spec's reference when it is not the accepted baseline (`--against history`).
    pub references: Vec<Option<crate::results::GateReference>>,
    pub progress: Progress,
    /// The user's report template, compiled before anything was measured.
    pub template: Option<Template>,
    /// The counts engine, when sides are counted (`--measure counts|both`, a spec's mode).
    pub counter: Option<crate::measure::counts::valgrind::Counter>,
    /// Each spec's counts reference under the engine's key, when sides are counted.
    pub counts_baselines: Vec<crate::gate::reference::CountsBase>,
    /// The history store, opened once for the whole run: checked before anything is measured,
    /// read for references, recorded into, read for new shifts. `None` until something needs
    /// it where it could not be opened early (a new SQLite file is made by the first record).
    pub store: std::cell::RefCell<Option<crate::store::Store>>,
    pub _lock: Option<baseline::StoreLock>,
}

/// Everything before the first spec is measured; everything that can be refused is refused
/// here. `passes` is how many times each spec will be measured (the progress bar's length).
pub(crate) fn prepare(opts: &RunOptions, passes: usize) -> Result<Prepared> {
    let Suite {
        specs,
        files: suite_files,
        shard_note,
    } = load_suite(opts)?;
    // Every output is checked before anything is measured or written: a run that cannot archive
    // its evidence must not write baselines first.
    let template = check_outputs(opts)?;
    let flush = if opts.measure.cold {
        opts.flush_bytes
    } else {
        Some(0)
    };
    let available = check_host_memory(opts, flush)?;
    let (backend, backend_note) = backend::select(opts.backend, flush, &opts.settings)?;
    let mut store = check_store(opts)?;
    // Counting is refused before anything is measured where it cannot be done.
    let (counter, counts_note) = counter(opts, &specs, backend.as_ref())?;
    let device = backend.device();
    let lock = accept_lock(opts, &specs, &device.key, counter.as_ref())?;
    let (mut baselines, notes) =
        refuse_and_find_baselines(opts, &specs, backend.as_ref(), available)?;
    // A counted side is refused as a timed one is: before anything is measured, where its
    // counted process's buffers cannot fit.
    if let Some(c) = &counter {
        for s in specs.iter().filter(|s| opts.mode_of(s).counts()) {
            c.refuse_oversized(s, available)?;
        }
    }
    let load_run = |dir: &Path| crate::archive::load(dir).ok().map(|l| l.run);
    let reference_options = crate::gate::reference::ReferenceOptions {
        accept: opts.accept,
        against: opts.against.as_ref(),
        branch: opts.branch.as_deref(),
        store: opts.store.as_ref(),
        reference_store: opts.reference_store.as_ref(),
        load_run: &load_run,
    };
    // Every measurement's reference is chosen here, by one rule, before anything is measured
    // (a damaged counts baseline stops the run here).
    let counts_options = counter
        .as_ref()
        .map(|c| crate::gate::reference::CountsOptions {
            engine: &c.engine,
            model_fixed: c.model_fixed,
            baselines_dir: &opts.baselines_dir,
        });
    let (references, counts_baselines) = crate::gate::reference::references(
        &reference_options,
        &specs,
        &device,
        &mut baselines,
        &mut store,
        counts_options.as_ref(),
    )?;
    let progress = Progress::new(specs.len() * passes);
    progress.say(&format!("opledger: backend {backend_note}"));
    if let Some(why) = counts_note {
        progress.say(&format!(
            "opledger: counts not made ({why}): the specs whose mode is auto are timed only"
        ));
    }
    for line in shard_note.iter().chain(&size_warnings(opts, &device)) {
        progress.say(line);
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
        flush_bytes: backend.flush_bytes(),
        backend,
        backend_note,
        device,
        ceilings,
        baselines,
        references,
        progress,
        template,
        counts_baselines,
        counter,
        store: std::cell::RefCell::new(store),
        _lock: lock,
    })
}

/// The specs of a run and the suite they come from.
struct Suite {
    /// This run's specs (this shard's, when sharded).
    specs: Vec<Spec>,
    /// Every spec file of the suite (name, text): a shard's archive holds them all, so that a
    /// merge knows the whole suite.
    files: Vec<(String, String)>,
    /// The shard's line for the log.
    shard_note: Option<String>,
}

/// The suite of a run, loaded and (when sharded) cut to this shard's specs.
fn load_suite(opts: &RunOptions) -> Result<Suite> {
    let mut specs = spec::load_all(&opts.paths)?;
    let mut suite_files: Vec<(String, String)> = Vec::new();
    for s in &specs {
        let name = spec_file_name(s);
        if !suite_files.iter().any(|(n, _)| *n == name) {
            suite_files.push((name, s.source_text.clone()));
        }
    }
    if !opts.cases.is_empty() {
        if let Some(missing) = opts
            .cases
            .iter()
            .find(|c| !specs.iter().any(|s| s.name == **c))
        {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            return Err(Error::Flag(format!(
                "--case {missing}: no case of that name in the specs given; their cases: {}",
                names.join(", ")
            )));
        }
        specs.retain(|s| opts.cases.contains(&s.name));
    }
    let Some(shard) = &opts.shard else {
        return Ok(Suite {
            specs,
            files: suite_files,
            shard_note: None,
        });
    };
    let all = specs.len();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let mut keep = shard.keeps(&names).into_iter();
    specs.retain(|_| keep.next().unwrap_or(false));
    let note = format!(
        "opledger: {}: {} of {all} cases",
        shard.describe(),
        specs.len()
    );
    Ok(Suite {
        specs,
        files: suite_files,
        shard_note: Some(note),
    })
}

/// Refuses a run whose fixed host buffers (the flush buffer and the three probe arrays, on the
/// CPU) do not fit, before either is allocated; returns the memory available.
fn check_host_memory(opts: &RunOptions, flush: Option<u64>) -> Result<Option<u64>> {
    let this_cpu = DeviceInfo::this_cpu();
    let default_host = (2 * this_cpu.llc_bytes).max(64 << 20);
    let default_probe = crate::device::default_probe_array_bytes(this_cpu.llc_bytes);
    let host_fixed = if opts
        .backend
        .kind()
        .is_some_and(|k| !k.probes_in_host_memory())
    {
        0
    } else {
        flush
            .unwrap_or(default_host)
            .saturating_add(opts.probe_bytes.unwrap_or(default_probe).saturating_mul(3))
    };
    let available = backend::available_memory_bytes();
    if let Some(avail) = available.filter(|&a| host_fixed > a / 10 * 9) {
        return Err(Error::ProbeMemory {
            probe_bytes: opts.probe_bytes.unwrap_or(default_probe),
            flush_bytes: flush.unwrap_or(default_host),
            need_bytes: host_fixed,
            available_bytes: avail,
        });
    }
    Ok(available)
}

/// Buffers inside the last-level cache measure the cache, not memory: allowed (small test runs
/// use them), and said.
fn size_warnings(opts: &RunOptions, device: &DeviceInfo) -> Vec<String> {
    let mut warnings = Vec::new();
    let small_probe = opts
        .probe_bytes
        .filter(|&b| !crate::device::probe_spans_memory(b, device.llc_bytes));
    let small_flush = opts.flush_bytes.filter(|&b| b < device.llc_bytes);
    for (flag, bytes) in [("--probe-mib", small_probe), ("--flush-mib", small_flush)] {
        if let Some(b) = bytes {
            warnings.push(format!(
                "opledger: warning: {flag} {} is smaller than {}the last-level cache ({} MiB): {}",
                b >> 20,
                if flag == "--probe-mib" {
                    "two thirds of "
                } else {
                    ""
                },
                device.llc_bytes.div_ceil(1 << 20),
                if flag == "--probe-mib" {
                    "the ceilings are the cache's, not memory's"
                } else {
                    "caches are not cold between samples"
                }
            ));
        }
    }
    warnings
}

/// Everything that can be refused is refused before any case is allocated or measured: a
/// workload the backend has no kernels for, and a case larger than the memory there is. Then
/// each spec's baseline (where `--accept` writes it, what it holds) and notes for the log.
fn refuse_and_find_baselines(
    opts: &RunOptions,
    specs: &[Spec],
    backend: &dyn Backend,
    available: Option<u64>,
) -> Result<(Vec<SpecBaseline>, Vec<String>)> {
    let device = backend.device();
    let mut baselines = Vec::new();
    let mut notes = Vec::new();
    for s in specs {
        let refused = |message: String| Error::Spec {
            path: s.file.clone(),
            pos: spec::find_key(&s.source_text, &["workload"]),
            message,
        };
        // Asked for by name, a backend that cannot run a spec makes the spec bad input. Picked
        // by `auto`, it fails that spec without measuring it (its reason in the report) and the
        // run goes on: a suite with GPU-only specs still gates its other specs on a CPU runner.
        if let Some(reason) =
            crate::backend::cannot_run_sides(backend.kind(), &s.workload, &s.implementations)
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
        baselines.push(SpecBaseline::accepted(path, loaded));
    }
    Ok((baselines, notes))
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

/// Accepting runs serialize on the baselines store, from reading the baselines to writing them.
fn accept_lock(
    opts: &RunOptions,
    specs: &[Spec],
    device_key: &str,
    counter: Option<&crate::measure::counts::valgrind::Counter>,
) -> Result<Option<baseline::StoreLock>> {
    if !opts.accept {
        return Ok(None);
    }
    let lock = baseline::StoreLock::acquire(&opts.baselines_dir)?;
    // Under the lock no other writer is active: a temp file left in this device's folder is
    // what a killed accept left behind.
    baseline::remove_stale_temp_files(&opts.baselines_dir.join(device_key));
    if let Some(c) = counter {
        baseline::remove_stale_temp_files(&opts.baselines_dir.join(c.engine.key()));
        // A spec's own cache model files its counts under its own key.
        for s in specs {
            let key = c.engine_for(s).key();
            if key != c.engine.key() {
                baseline::remove_stale_temp_files(&opts.baselines_dir.join(key));
            }
        }
    }
    Ok(Some(lock))
}

/// Opens the history store before anything is measured, so that a wrong URL, a server that
/// refuses or a file that is no store costs this message and not the whole run; the run keeps
/// it open. A new SQLite store is only checked to be creatable (`None`): a run refused later
/// leaves no file behind.
fn check_store(opts: &RunOptions) -> Result<Option<crate::store::Store>> {
    match &opts.store {
        Some(crate::store::StoreUrl::Sqlite(path)) if !path.exists() => {
            crate::files::check_writable_dir(
                path.parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new(".")),
                "history store (--store)",
            )?;
            Ok(None)
        }
        Some(url) => crate::store::Store::open(url).map(Some),
        None => Ok(None),
    }
}

/// The name a spec's file is archived under.
fn spec_file_name(s: &Spec) -> String {
    s.file.file_name().map_or_else(
        || format!("{}.yaml", s.name),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The counts engine, where a spec is counted (`--measure counts|both`, a spec's mode): refused
/// on a backend whose kernels the simulator cannot see, without Valgrind, and a cache model
/// given where nothing is counted.
fn counter(
    opts: &RunOptions,
    specs: &[Spec],
    backend: &dyn Backend,
) -> Result<(
    Option<crate::measure::counts::valgrind::Counter>,
    Option<String>,
)> {
    let counting = specs.iter().any(|s| opts.mode_of(s).counts());
    // Only `auto` asks: counts where they can be made, time alone elsewhere.
    let required = specs.iter().any(|s| opts.mode_of(s).counts_required());
    // The CPU's kernels are simulated under Valgrind; a GPU's are read by Nsight Compute.
    let ncu = match backend.kind().counted_by() {
        CountedBy::Valgrind => None,
        CountedBy::NsightCompute => Some(crate::measure::ncu::which("ncu")),
    };
    if counting && !required {
        let why = match &ncu {
            Some(None) => Some("Nsight Compute (`ncu`) is not on PATH".to_string()),
            Some(Some(_)) => None,
            None if cfg!(not(target_arch = "x86_64")) => {
                Some("counts are made on x86-64".to_string())
            }
            None => crate::measure::callgrind::found().err(),
        };
        if let Some(why) = why {
            return Ok((None, Some(why)));
        }
    }
    if !counting {
        if opts.cache_model.is_some() {
            return Err(Error::Counts(CountsRefusal::CacheModelWithoutCounts));
        }
        return Ok((None, None));
    }
    let counter = match ncu {
        Some(None) => return Err(Error::Counts(CountsRefusal::NoProfiler)),
        Some(Some(ncu)) => {
            if opts.cache_model.is_some() {
                return Err(Error::Counts(CountsRefusal::CacheModelOnGpu));
            }
            crate::measure::counts::valgrind::Counter::for_gpu(
                ncu,
                &backend.device(),
                opts.measure.seed,
            )?
        }
        None => crate::measure::counts::valgrind::Counter::new(
            opts.cache_model,
            opts.measure.seed,
            &opts.settings,
        )?,
    };
    Ok((Some(counter), None))
}
