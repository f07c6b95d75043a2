//! The flags of a parsed command checked into the options its file in `commands/` takes: a
//! flag out of range or two that contradict each other are refused here, with the flag named.

use super::RunArgs;
use crate::error::{Error, Result};
use crate::measure::MeasureConfig;
use crate::pipeline::RunOptions;
use std::path::{Path, PathBuf};

/// The `run` flags as the pipeline takes them, checked.
pub(super) fn run_options(a: RunArgs, settings: crate::settings::Settings) -> Result<RunOptions> {
    // Before the pool's threads start and before any case's buffer: a run's large buffers come
    // from the main thread's heap and stay there for the next case.
    crate::backend::cpu::keep_freed_memory();
    if let Some(n) = a.threads {
        set_threads(n)?;
    }
    let measure = measure_config(&a)?;
    let (store, reference_store) = run_stores(&a, &settings)?;
    // A bisection's steps are recorded apart from every branch's series.
    let branch = match (a.bisect, a.branch.as_deref()) {
        (true, None) => Some(crate::store::BISECT_BRANCH.to_string()),
        (_, named) => crate::provenance::git_branch(named),
    };
    let against = a
        .against
        .as_deref()
        .map(|t| crate::spec::Against::parse(t).map_err(|e| Error::Flag(format!("--against {e}"))))
        .transpose()?
        .map(|against| match against {
            // The branch being run, resolved now (every branch when it is not known).
            crate::spec::Against::History { branch: None } => crate::spec::Against::History {
                branch: branch.clone(),
            },
            other => other,
        });
    if a.accept
        && against
            .as_ref()
            .is_some_and(|x| *x != crate::spec::Against::Baselines)
    {
        return Err(Error::Flag(
            "--accept records baselines, and --against judges against the history store instead: use one".into(),
        ));
    }
    let (mode, cache_model) = counts_model(&a)?;
    Ok(RunOptions {
        reference_store,
        mode,
        cache_model,
        store,
        branch,
        default_branch: a
            .default_branch
            .filter(|b| !b.trim().is_empty())
            .or_else(crate::provenance::default_branch),
        against,
        paths: a.paths,
        backend: a.backend,
        accept: a.accept,
        require_baseline: a.require_baseline,
        fail_on_inconclusive: a.fail_on_inconclusive,
        baselines_dir: a.baselines,
        runs_dir: a.runs_dir,
        template: a.template,
        measure,
        probe_bytes: a.probe_mib.map(|m| m << 20),
        flush_bytes: a.flush_mib.map(|m| m << 20),
        command_line: crate::secret::redact_args(std::env::args()),
        summary_to: a.summary_to.filter(|p| !p.as_os_str().is_empty()),
        junit: a.junit,
        shard: a
            .shard
            .as_deref()
            .map(|s| {
                crate::shard::Shard::parse(s, &|k| {
                    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
                })
            })
            .transpose()?,
        cases: a.cases,
        settings,
    })
}

/// The measurement flags of `run`, checked.
fn measure_config(a: &RunArgs) -> Result<MeasureConfig> {
    let measure = MeasureConfig {
        min_pairs: a.min_pairs,
        max_pairs: a.max_pairs,
        time_cap_secs: a.time_cap_secs,
        target_rel_ci: a.target_ci,
        cold: !a.warm,
        seed: a.seed,
        ..MeasureConfig::default()
    };
    if a.min_pairs < 3 || a.max_pairs < a.min_pairs {
        return Err(Error::Flag(format!(
            "--min-pairs must be >= 3 and --max-pairs >= --min-pairs (got {} and {})",
            a.min_pairs, a.max_pairs
        )));
    }
    if !(a.time_cap_secs > 0.0 && a.time_cap_secs.is_finite() && a.target_ci.is_finite()) {
        return Err(Error::Flag(
            "--time-cap-secs must be a positive number and --target-ci finite".into(),
        ));
    }
    Ok(measure)
}

/// The store a run records into (`None` under `--no-store`) and the one its gate may read a
/// reference from. Under --no-store the store is still read for a reference; nothing is
/// recorded. A bad OPLEDGER_STORE is refused only if a spec asks for a reference, a bad
/// --store at once.
fn run_stores(
    a: &RunArgs,
    settings: &crate::settings::Settings,
) -> Result<(
    Option<crate::store::StoreUrl>,
    Option<crate::store::StoreUrl>,
)> {
    Ok(if a.no_store {
        let url = store_url(a.store.as_deref(), settings, &a.runs_dir);
        (
            None,
            if a.store.is_some() {
                Some(url?)
            } else {
                url.ok()
            },
        )
    } else {
        let url = store_url(a.store.as_deref(), settings, &a.runs_dir)?;
        (Some(url.clone()), Some(url))
    })
}

/// What `--measure` asks of every spec (none: each spec's own mode) and the counts' cache model
/// (a model given with `--measure time` is refused).
fn counts_model(
    a: &RunArgs,
) -> Result<(
    Option<crate::spec::MeasureMode>,
    Option<crate::measure::counts::CacheModel>,
)> {
    let mode = a
        .measure_mode
        .as_deref()
        .map(crate::spec::MeasureMode::parse)
        .transpose()
        .map_err(|e| Error::Flag(format!("--measure {e}")))?;
    if mode == Some(crate::spec::MeasureMode::Time) && a.cache_model.is_some() {
        return Err(Error::Flag(
            "--cache-model is the model of the counts: it goes with --measure counts or both"
                .into(),
        ));
    }
    let model = a
        .cache_model
        .as_deref()
        .map(crate::measure::counts::CacheModel::parse)
        .transpose()
        .map_err(|e| Error::Flag(format!("--cache-model {e}")))?;
    Ok((mode, model))
}

/// The history store a command uses: `--store`, else `OPLEDGER_STORE`, else
/// `<runs-dir>/history.sqlite`.
pub(super) fn store_url(
    flag: Option<&str>,
    settings: &crate::settings::Settings,
    runs_dir: &Path,
) -> Result<crate::store::StoreUrl> {
    match flag.or(settings.store.as_deref()) {
        Some(url) => crate::store::StoreUrl::parse(url),
        None => Ok(crate::store::StoreUrl::Sqlite(
            runs_dir.join(crate::store::DEFAULT_FILE),
        )),
    }
}

/// Most threads `--threads` accepts: beyond any machine's cores, so a typo is caught.
const MAX_THREADS: usize = 4096;

/// Sizes the pool every CPU kernel runs on; before anything has used it.
fn set_threads(n: usize) -> Result<()> {
    if !(1..=MAX_THREADS).contains(&n) {
        return Err(Error::Flag(format!(
            "--threads {n}: expected 1 to {MAX_THREADS} threads"
        )));
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .map_err(|e| {
            Error::Flag(format!(
                "--threads {n}: the thread pool could not be set up: {e}"
            ))
        })
}

/// `opledger counts`: the cache model parsed (none given: each spec's own, or the default).
pub(super) fn counts_options(
    paths: Vec<PathBuf>,
    cache_model: Option<&str>,
    seed: u64,
    format: &str,
    settings: crate::settings::Settings,
) -> Result<crate::commands::counts::CountOptions> {
    let model = cache_model
        .map(|m| {
            crate::measure::counts::CacheModel::parse(m)
                .map_err(|e| Error::Flag(format!("--cache-model {e}")))
        })
        .transpose()?;
    Ok(crate::commands::counts::CountOptions {
        paths,
        settings,
        model,
        seed,
        json: format == "json",
    })
}

/// `opledger calibrate`: the run's options, checked for what a calibration cannot do.
pub(super) fn calibrate_options(
    run: RunArgs,
    runs: usize,
    settings: crate::settings::Settings,
) -> Result<RunOptions> {
    use crate::commands::calibrate::{MAX_RUNS, MIN_RUNS};
    if run.ncu {
        return Err(Error::Flag(
            "--ncu profiles one run: use it with `opledger run`, not `calibrate`".into(),
        ));
    }
    if !(MIN_RUNS..=MAX_RUNS).contains(&runs) {
        return Err(Error::Flag(format!(
            "--runs {runs}: expected {MIN_RUNS} to {MAX_RUNS} (the spread between runs needs at least {MIN_RUNS})"
        )));
    }
    run_options(run, settings)
}

/// `opledger compare`'s folders: two (A B), or one (B) with `--base`.
pub(super) fn compare_runs<'a>(
    runs: &'a [PathBuf],
    base: Option<&'a str>,
) -> Result<crate::commands::compare::Versus<'a>> {
    use crate::commands::compare::Versus;
    match (base, runs) {
        (None, [a, b]) => Ok(Versus::Runs(a, b)),
        (Some(base), [b]) => Ok(Versus::Base(base, b)),
        (None, _) => Err(Error::Flag(
            "compare: two run folders (A B), or one (B) with --base merge-base:BRANCH".into(),
        )),
        (Some(_), _) => Err(Error::Flag(
            "compare --base names the reference: give only the later run folder (B)".into(),
        )),
    }
}
