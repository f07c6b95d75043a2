//! `opledger calibrate`: runs unchanged code N times and measures how much each value the gate
//! compares drifts between runs — the after variant's median (raw time) and the median of the
//! pairs' after/before ratios (relative). That drift, not the CI of one run, decides the
//! smallest slowdown a machine can gate: a runner's owner learns in minutes whether it gates at
//! 5% or only at 20%. With `--accept` the N runs become the baseline (its history), so the gate
//! starts with a known spread instead of growing one accept at a time.

use crate::baseline;
use crate::device::Ceilings;
use crate::error::{ExitCode, Result};
use crate::gate::stats::Spread;
use crate::gate::{compared_values, spread_of};
use crate::measure::stats::{median, median_ceilings};
use crate::pipeline::{prepare, run_spec, Made, Prepared, Provenance, RunContext, RunOptions};
use crate::results::SpecResult;
use crate::verdict::Status;
use std::path::PathBuf;

pub const DEFAULT_RUNS: usize = 5;
/// The spread between runs needs three at least.
pub const MIN_RUNS: usize = 3;
pub const MAX_RUNS: usize = 50;

/// What N runs of one spec say about gating it on this machine.
#[derive(Debug, Clone)]
pub struct Calibration {
    pub name: String,
    pub max_regression: f64,
    pub runs_passed: usize,
    pub raw: Spread,
    pub relative: Spread,
    /// The smallest slowdown gated at <= 1% false alarms and >= 95% detection, by comparison.
    pub raw_gate: f64,
    pub relative_gate: f64,
    /// A run left out of the spread (and the baseline) as an outlier: its index among the runs,
    /// the compared value it was an outlier of, its ratio to the others' median and its
    /// robust z-score.
    pub outlier: Option<Outlier>,
}

/// One run of a calibration far from the others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outlier {
    pub run: usize,
    /// `after time` or `after/before`.
    pub value: &'static str,
    /// Its value over the median of the other runs'.
    pub ratio: f64,
    pub z: f64,
}

/// Robust z-score above which one run is an outlier (Iglewicz and Hoaglin's 3.5, on the logs,
/// with the median absolute deviation scaled to a standard deviation).
pub const OUTLIER_Z: f64 = 3.5;
/// Runs needed before one may be called an outlier: of three, none can be told from the rest.
pub const OUTLIER_MIN_RUNS: usize = 4;

/// The run most unlike the others in `v`, if it is an outlier by the rule: at least
/// [`OUTLIER_MIN_RUNS`] runs, and |log v − median(log v)| / (1.4826 · MAD(log v)) above
/// [`OUTLIER_Z`]. When the others agree exactly (MAD 0), a run 1% or more off is one.
pub fn outlier_of(v: &[f64]) -> Option<(usize, f64, f64)> {
    if v.len() < OUTLIER_MIN_RUNS || v.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return None;
    }
    let logs: Vec<f64> = v.iter().map(|x| x.ln()).collect();
    let m = median(&logs);
    let mad = crate::measure::stats::mad(&logs) * 1.4826;
    let (i, dev) = logs
        .iter()
        .map(|l| (l - m).abs())
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let z = if mad > 0.0 {
        dev / mad
    } else if dev > 0.01 {
        f64::INFINITY
    } else {
        0.0
    };
    if z <= OUTLIER_Z {
        return None;
    }
    let others: Vec<f64> = v
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != i)
        .map(|(_, x)| *x)
        .collect();
    Some((i, v[i] / median(&others), z))
}

/// The smallest slowdown a spread lets the gate catch at <= 1% false alarms and >= 95%
/// detection: exp((t₀.₉₉ + t₀.₉₅)·s·√(1 + 1/k)) − 1, t with k − 1 degrees of freedom (the
/// threshold it would need, and detection beyond it).
pub fn smallest_gated(spread: &Spread) -> f64 {
    spread.detectable(0.0).unwrap_or(0.0)
}

/// The calibration of one spec from its N results.
pub fn calibration(results: &[SpecResult]) -> Option<Calibration> {
    let first = results.first()?;
    let mut raw = Vec::new();
    let mut rel = Vec::new();
    for r in results {
        let (Some(s), Some(summary)) = (&r.samples, &r.after.summary) else {
            continue;
        };
        raw.push(summary.median_secs);
        rel.push(median(
            &compared_values(true, (&s.before_secs, &s.after_secs), (&[], &[])).0,
        ));
    }
    // One run unlike the others (a neighbour's burst, a frequency drop) would make the whole
    // spread, and the gate with it, useless: it is named and left out.
    let outlier = [("after/before", &rel), ("after time", &raw)]
        .into_iter()
        .filter_map(|(what, v)| {
            outlier_of(v).map(|(run, ratio, z)| Outlier {
                run,
                value: what,
                ratio,
                z,
            })
        })
        .max_by(|a, b| a.z.total_cmp(&b.z));
    let without = |v: &[f64]| -> Vec<f64> {
        v.iter()
            .enumerate()
            .filter(|(k, _)| outlier.is_none_or(|o| o.run != *k))
            .map(|(_, x)| *x)
            .collect()
    };
    let (raw, relative) = (spread_of(&without(&raw)), spread_of(&without(&rel)));
    Some(Calibration {
        name: first.name.clone(),
        max_regression: first.gate.max_regression.0,
        runs_passed: results.iter().filter(|r| r.status == Status::Pass).count(),
        raw_gate: smallest_gated(&raw),
        relative_gate: smallest_gated(&relative),
        raw,
        relative,
        outlier,
    })
}

/// Calibrates `runs` runs of the specs; with `--accept` they become the baseline — its whole
/// history, or with `keep_history` the newest part of the history it had.
pub fn calibrate(opts: &RunOptions, runs: usize, keep_history: bool) -> Result<ExitCode> {
    let p = prepare(opts, runs)?;
    // `--measure counts`: nothing is timed, the counts alone are calibrated.
    let timed = p.specs.iter().any(|s| opts.mode_of(s).times());
    let mut all_passed = true;
    if timed {
        let (results, archives, ceilings) = measure_runs(opts, &p, runs)?;
        p.progress.finish();
        for (n, dir) in archives.iter().enumerate() {
            println!("run {}: {}", n + 1, dir.display());
        }
        let calibrations = print_calibrations(opts, &p, &results, &archives);
        if opts.accept {
            accept_runs(opts, &p, &results, &calibrations, &ceilings, keep_history)?;
        }
        all_passed = calibrations.iter().all(|c| c.runs_passed == runs);
    }
    if let Some(counter) = &p.counter {
        let counted: Vec<CountsCalibration> = p
            .specs
            .iter()
            .filter(|s| opts.mode_of(s).counts())
            .map(|s| {
                p.progress.say(&format!(
                    "opledger: {}: counting both sides {runs} times",
                    s.name
                ));
                counts_calibration(counter, s, runs)
            })
            .collect::<Result<_>>()?;
        p.progress.finish();
        print_counts_calibrations(counter, &counted, runs);
        all_passed &= counted.iter().all(|c| c.spread <= c.limit);
    }
    Ok(if all_passed {
        ExitCode::Pass
    } else {
        ExitCode::GateFailed
    })
}

/// What N counts of one spec's sides say about gating it on counts.
#[derive(Debug, Clone)]
pub struct CountsCalibration {
    pub name: String,
    pub metric: crate::spec::CountsMetric,
    pub limit: f64,
    /// Each run's metric, before and after (`None`: a side not counted).
    pub values: Vec<[Option<u64>; 2]>,
    /// The largest relative difference between two runs of one side: the smallest change the
    /// counts can tell from their own spread (0 where they repeat exactly).
    pub spread: f64,
}

/// Counts `s`'s sides `runs` times, as a counted run counts them.
fn counts_calibration(
    counter: &crate::measure::counts::valgrind::Counter,
    s: &crate::spec::Spec,
    runs: usize,
) -> Result<CountsCalibration> {
    let counted = s.counted()?;
    let metric = crate::gate::counts::metric_of(&s.gate, &counter.engine_for(s));
    // The runs count side by side up to the machine's cores: a counted process's counts do not
    // depend on what runs beside it.
    let repeats = vec![counted.into_owned(); runs];
    let mut values = Vec::new();
    for c in counter.count_many(&repeats, counter.at_once(&repeats), &|_, _, _, _| {}) {
        let c = c?.counts;
        let side = |x: &crate::measure::counts::SideCounts| x.counts().map(|c| c.metric(metric));
        values.push([side(&c.before), side(&c.after)]);
    }
    let spread = (0..2)
        .filter_map(|k| {
            let v: Vec<u64> = values.iter().filter_map(|r| r[k]).collect();
            let (lo, hi) = (v.iter().min()?, v.iter().max()?);
            Some(*hi as f64 / (*lo).max(1) as f64 - 1.0)
        })
        .fold(0.0, f64::max);
    Ok(CountsCalibration {
        name: s.name.clone(),
        metric,
        limit: s.gate.counts_max_regression.0,
        values,
        spread,
    })
}

/// The table of the counts' spread between runs, and what it lets the counts gate detect.
fn print_counts_calibrations(
    counter: &crate::measure::counts::valgrind::Counter,
    found: &[CountsCalibration],
    runs: usize,
) {
    let e = &counter.engine;
    println!(
        "\n# opledger calibrate: {runs} counts of each side by {}\n",
        crate::report::counts::engine_words(e)
    );
    println!("| spec | metric | before | after | spread between runs | smallest change detected | spec's limit | |");
    println!("|---|---|--:|--:|--:|--:|--:|---|");
    let show = |v: Option<u64>| v.map_or("not counted".to_string(), |v| v.to_string());
    for c in found {
        let first = c.values.first().copied().unwrap_or([None, None]);
        let (spread, detected) = if c.spread == 0.0 {
            ("0 (identical)".to_string(), "any change".to_string())
        } else {
            (
                format!("{:.4}%", c.spread * 100.0),
                format!("> {:.4}%", c.spread * 100.0),
            )
        };
        println!(
            "| {} | {} | {} | {} | {spread} | {detected} | +{:.0}% | {} |",
            c.name,
            c.metric.as_str(),
            show(first[0]),
            show(first[1]),
            c.limit * 100.0,
            if c.spread <= c.limit {
                "gates at the limit"
            } else {
                "cannot gate at the limit: the counts moved between runs of one binary"
            }
        );
    }
}

/// Runs of unchanged code, each measured as `run` measures (its ceilings probed again) and
/// archived as `run` archives one; returns every spec's results by run, the archives and each
/// roof's median over the runs' probes ([`median_ceilings`]: one probe that read low does
/// not become the baseline's machine state).
fn measure_runs(
    opts: &RunOptions,
    p: &Prepared,
    runs: usize,
) -> Result<(Vec<Vec<SpecResult>>, Vec<PathBuf>, Ceilings)> {
    let (specs, baselines, progress, device) = (&p.specs, &p.baselines, &p.progress, &p.device);
    let mut ceilings = p.ceilings;
    let mut results: Vec<Vec<SpecResult>> = vec![Vec::new(); specs.len()];
    let (git_sha, git_dirty) = crate::provenance::git_info();
    let mut archives = Vec::new();
    let mut probed = Vec::with_capacity(runs);
    for run in 0..runs {
        let started = std::time::Instant::now();
        let (started_utc, stamp) = crate::provenance::utc_now();
        let started_unix_ns = crate::provenance::unix_ns();
        if run > 0 {
            // Every gate run probes its ceilings: so does every calibration run.
            ceilings = p.backend.ceilings(opts.probe_bytes)?;
        }
        probed.push(ceilings);
        let ctx = RunContext {
            backend: p.backend.as_ref(),
            device,
            ceilings: &ceilings,
            measure: &opts.measure,
            require_baseline: false,
            progress,
        };
        for (i, (s, base)) in specs.iter().zip(baselines).enumerate() {
            let path = &base.path;
            progress.start_spec(
                run * specs.len() + i,
                &format!("{} (run {}/{runs})", s.name, run + 1),
                &s.workload.describe(),
            );
            results[i].push(run_spec(&ctx, s, None, path, &[]));
        }
        // Each run is archived as `run` archives one: inspect it, compare it, merge it.
        let made = Made {
            when: Provenance {
                started_utc,
                started_unix_ns,
                stamp,
                git_sha: git_sha.clone(),
                git_dirty,
            },
            ceilings,
            note: format!("; calibration run {}/{runs}", run + 1),
            suffix: format!("-calibrate-{}", run + 1),
            started,
        };
        let this_run: Vec<SpecResult> = results.iter().filter_map(|r| r.last().cloned()).collect();
        // Recorded into the history store too: runs of unchanged code are history.
        let (_, dir) = crate::pipeline::write_archive(opts, p, made, this_run)?;
        archives.push(dir);
    }
    let ceilings = median_ceilings(&probed).unwrap_or(ceilings);
    Ok((results, archives, ceilings))
}

/// The table of what each spec's drift between runs lets the gate detect, and the outliers.
fn print_calibrations(
    opts: &RunOptions,
    p: &Prepared,
    results: &[Vec<SpecResult>],
    archives: &[PathBuf],
) -> Vec<Calibration> {
    let (runs, device) = (archives.len(), &p.device);
    println!(
        "\n# opledger calibrate: {runs} runs of unchanged code on {}\n",
        device.key
    );
    println!("Smallest slowdown gated at <= 1% false alarms and >= 95% detection, from the drift of each compared value between runs (the default `compare: both` fails on after/before).\n");
    println!("| spec | runs passed | after time: spread | gates at | after/before: spread | gates at | spec's limit | |");
    println!("|---|--:|--:|--:|--:|--:|--:|---|");
    let mut calibrations = Vec::new();
    for rs in results {
        let Some(c) = calibration(rs) else { continue };
        let verdict = if c.runs_passed < runs {
            "a run failed its checks: fix it before gating".to_string()
        } else if c.relative_gate <= c.max_regression {
            "gates at the limit".to_string()
        } else {
            format!(
                "cannot gate at the limit: raise max_regression to {:.0}% or quiet the machine",
                (c.relative_gate * 100.0).ceil()
            )
        };
        println!(
            "| {} | {}/{runs} | {:.2}% | +{:.1}% | {:.2}% | +{:.1}% | +{:.0}% | {verdict} |",
            c.name,
            c.runs_passed,
            c.raw.log_sd * 100.0,
            c.raw_gate * 100.0,
            c.relative.log_sd * 100.0,
            c.relative_gate * 100.0,
            c.max_regression * 100.0,
        );
        calibrations.push(c);
    }
    for c in &calibrations {
        if let Some(o) = c.outlier {
            println!(
                "\n⚠️ {}: run {} of {runs} is an outlier ({} {:.2}x the other runs' median, robust z {:.1} > {OUTLIER_Z}): left out of the spread{} ({})",
                c.name,
                o.run + 1,
                o.value,
                o.ratio,
                o.z,
                if opts.accept { " and the baseline" } else { "" },
                archives
                    .get(o.run)
                    .map_or(String::new(), |d| d.display().to_string())
            );
        }
    }
    calibrations
}

/// Records each spec's runs as its baseline's history (a run that failed stops its spec; an
/// outlier is left out).
fn accept_runs(
    opts: &RunOptions,
    p: &Prepared,
    results: &[Vec<SpecResult>],
    calibrations: &[Calibration],
    ceilings: &Ceilings,
    keep_history: bool,
) -> Result<()> {
    let (baselines, device) = (&p.baselines, &p.device);
    println!();
    // One timestamp and one git identity for every baseline this calibration records.
    let (recorded_utc, _) = crate::provenance::utc_now();
    let (git_sha, _) = crate::provenance::git_info();
    for ((rs, base), c) in results.iter().zip(baselines).zip(calibrations) {
        let (path, old) = (&base.path, &base.accepted);
        if rs.iter().any(|r| r.status != Status::Pass) {
            println!("not accepted: {} (a run failed its checks)", path.display());
            continue;
        }
        let outlier = c.outlier.map(|o| o.run);
        // The runs become the history, oldest first: a calibration describes the code as it
        // runs now. With `keep_history` they join the old baseline's (calibrations of several
        // sittings make one spread; a sitting alone misses a VM's slower and faster hours).
        let mut built = if keep_history { old.clone() } else { None };
        for (_, r) in rs.iter().enumerate().filter(|(k, _)| Some(*k) != outlier) {
            built = crate::gate::accept::baseline_of(
                r,
                device,
                ceilings,
                &opts.measure,
                &recorded_utc,
                &git_sha,
                built.as_ref(),
            );
        }
        if let Some(b) = built {
            baseline::store(path, &b)?;
            println!(
                "accepted {} ({} runs of history{})",
                path.display(),
                b.history.len(),
                match (old.is_some(), keep_history) {
                    (true, true) => "; the old baseline's carried on",
                    (true, false) => "; it replaces the old baseline",
                    (false, _) => "",
                }
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_gated_slowdown_follows_the_drift() {
        let s = Spread {
            runs: 10,
            log_sd: 0.02,
            noise_factor: 1.0,
        };
        let d = smallest_gated(&s);
        // (2.821 + 1.833) * 0.02 * sqrt(1.1) = 0.0976 -> +10.3%
        assert!((d - 0.1025).abs() < 0.001, "{d}");
        assert_eq!(smallest_gated(&Spread::unknown()), 0.0);
    }

    #[test]
    fn one_run_far_from_the_others_is_named_and_left_out() {
        // Four runs, the third 11x the others: an outlier at any spread of the rest.
        let (i, ratio, z) = outlier_of(&[1.0, 1.01, 11.5, 0.99]).unwrap();
        assert_eq!(i, 2);
        assert!((ratio - 11.5).abs() < 0.01 && z > OUTLIER_Z, "{ratio} {z}");
        // Ordinary drift is not an outlier; three runs never name one.
        assert_eq!(outlier_of(&[1.0, 1.03, 0.97, 1.05, 0.99]), None);
        assert_eq!(outlier_of(&[1.0, 1.0, 11.0]), None);
        // Without the outlier the spread is that of the others.
        let with = spread_of(&[1.0, 1.01, 11.5, 0.99]);
        let without = spread_of(&[1.0, 1.01, 0.99]);
        assert!(with.log_sd > 50.0 * without.log_sd);
    }
}
