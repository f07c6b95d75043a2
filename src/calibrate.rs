//! `opledger calibrate`: runs unchanged code N times and measures how much each value the gate
//! compares drifts between runs — the after variant's median (raw time) and the median of the
//! pairs' after/before ratios (relative). That drift, not the CI of one run, decides the
//! smallest slowdown a machine can gate: a runner's owner learns in minutes whether it gates at
//! 5% or only at 20%. With `--accept` the N runs become the baseline (its history), so the gate
//! starts with a known spread instead of growing one accept at a time.

use crate::baseline::{self, compared_values, spread_of};
use crate::error::{ExitCode, Result};
use crate::measure::stats::median;
use crate::pipeline::{prepare, run_spec, Prepared, RunOptions};
use crate::results::SpecResult;
use crate::verdict::{Spread, Status};

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
    let (raw, relative) = (spread_of(&raw), spread_of(&rel));
    Some(Calibration {
        name: first.name.clone(),
        max_regression: first.gate.max_regression.0,
        runs_passed: results.iter().filter(|r| r.status == Status::Pass).count(),
        raw_gate: smallest_gated(&raw),
        relative_gate: smallest_gated(&relative),
        raw,
        relative,
    })
}

pub fn calibrate(opts: &RunOptions, runs: usize) -> Result<ExitCode> {
    let Prepared {
        specs,
        backend,
        device,
        mut ceilings,
        baselines,
        progress,
        _lock,
        ..
    } = prepare(opts, runs)?;
    let mut results: Vec<Vec<SpecResult>> = vec![Vec::new(); specs.len()];
    for run in 0..runs {
        if run > 0 {
            // Every gate run probes its ceilings: so does every calibration run.
            ceilings = backend.ceilings(opts.probe_bytes)?;
        }
        for (i, (s, (path, _))) in specs.iter().zip(&baselines).enumerate() {
            progress.start_spec(
                run * specs.len() + i,
                &format!("{} (run {}/{runs})", s.name, run + 1),
                &s.workload.describe(),
            );
            results[i].push(run_spec(
                s,
                backend.as_ref(),
                &ceilings,
                &opts.measure,
                &device,
                None,
                path,
                false,
                &progress,
            ));
        }
    }
    progress.finish();

    println!(
        "\n# opledger calibrate: {runs} runs of unchanged code on {}\n",
        device.key
    );
    println!("Smallest slowdown gated at <= 1% false alarms and >= 95% detection, from the drift of each compared value between runs (the default `compare: both` fails on after/before).\n");
    println!("| spec | runs passed | after time: spread | gates at | after/before: spread | gates at | spec's limit | |");
    println!("|---|--:|--:|--:|--:|--:|--:|---|");
    let mut calibrations = Vec::new();
    for rs in &results {
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
    if opts.accept {
        println!();
        // One timestamp and one git identity for every baseline this calibration records.
        let (recorded_utc, _) = crate::pipeline::utc_now();
        let (git_sha, _) = crate::pipeline::git_info();
        for (rs, (path, old)) in results.iter().zip(&baselines) {
            if rs.iter().any(|r| r.status != Status::Pass) {
                println!("not accepted: {} (a run failed its checks)", path.display());
                continue;
            }
            // The runs become the history, oldest first, carried on from the old baseline's
            // only if none is given (a calibration describes the code as it runs now).
            let mut built = None;
            for r in rs {
                built = baseline::from_result(
                    r,
                    &device,
                    &ceilings,
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
                    if old.is_some() {
                        "; it replaces the old baseline"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    let all_passed = calibrations.iter().all(|c| c.runs_passed == runs);
    Ok(if all_passed {
        ExitCode::Pass
    } else {
        ExitCode::GateFailed
    })
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
}
