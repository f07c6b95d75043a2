//! Timing plausibility: a time faster than the device can go fails, and the measurement's own
//! warnings (a noisy machine, data that stayed in cache).

use super::{Achieved, Check, CheckName, Status};
use crate::measure::stats::Summary;

/// How far above a GPU's datasheet bandwidth a cold-cache run may seem to go: the datasheet is
/// the memory's peak, and no kernel that reads it through a flushed L2 beats it.
pub const DATASHEET_BANDWIDTH_MARGIN: f64 = 1.1;

/// The factor of the measured bandwidth above which a cold-cache time is impossible: for a GPU
/// with a datasheet entry, its datasheet peak (with [`DATASHEET_BANDWIDTH_MARGIN`]) over the
/// probe's measure; else the kind's [`impossible_bandwidth_factor`].
///
/// [`impossible_bandwidth_factor`]: crate::device::DeviceKind::impossible_bandwidth_factor
pub fn bandwidth_limit_factor(
    kind: crate::device::DeviceKind,
    datasheet_bytes_per_sec: Option<f64>,
    measured_bytes_per_sec: f64,
) -> f64 {
    match datasheet_bytes_per_sec {
        Some(d) if kind.datasheet_bounds_bandwidth() && measured_bytes_per_sec > 0.0 => {
            d * DATASHEET_BANDWIDTH_MARGIN / measured_bytes_per_sec
        }
        _ => kind.impossible_bandwidth_factor(),
    }
}

/// Above this fraction of the measured compute peak a time is impossible: the probe is the
/// device's own FMA rate, and no kernel runs faster. The margin is the probe's own spread
/// between runs on an idle machine with room to spare (docs/measurement.md); a run above it is
/// judged again against a second probe, so one probe slowed by a neighbour fails nothing.
pub const IMPOSSIBLE_COMPUTE_FRACTION: f64 = 1.25;

/// How far above a GPU's datasheet compute peak a run may seem to go (clocks above the
/// datasheet's boost, as [`DATASHEET_BANDWIDTH_MARGIN`] for memory).
pub const DATASHEET_COMPUTE_MARGIN: f64 = 1.1;

/// The factor of the measured compute peak above which a time is impossible: at least
/// [`IMPOSSIBLE_COMPUTE_FRACTION`]; for a GPU with a datasheet entry, its datasheet peak for
/// the workload's type (with [`DATASHEET_COMPUTE_MARGIN`]) over the probe's where that is
/// higher. A GPU's bf16 probe is an `mma.sync` loop, the older tensor-core instruction: Hopper's
/// `wgmma`, which cuBLAS-class GEMMs use, runs well above it, so a real bf16 GEMM may read over
/// 100% of the probed roof and must not be judged impossible for it.
pub fn compute_limit_factor(
    kind: crate::device::DeviceKind,
    datasheet_flops_per_sec: Option<f64>,
    measured_flops_per_sec: f64,
) -> f64 {
    match datasheet_flops_per_sec {
        Some(d) if kind.datasheet_bounds_bandwidth() && measured_flops_per_sec > 0.0 => {
            (d * DATASHEET_COMPUTE_MARGIN / measured_flops_per_sec).max(IMPOSSIBLE_COMPUTE_FRACTION)
        }
        _ => IMPOSSIBLE_COMPUTE_FRACTION,
    }
}

/// One side as the timing check reads it.
#[derive(Debug, Clone, Copy)]
pub struct TimedSide<'a> {
    pub name: &'a str,
    pub achieved: &'a Achieved,
    /// Its compulsory bytes ([`crate::ledger::VariantLedger::compulsory_bytes`]) per median
    /// second over the measured bandwidth; `None` where they are not judged (a flush smaller
    /// than the last-level cache may leave them in it).
    pub compulsory_fraction: Option<f64>,
}

/// The bounds of the timing check: the ledger's bytes at most `bandwidth_factor` × the measured
/// bandwidth ([`bandwidth_limit_factor`]), the compulsory bytes at most `compulsory_factor` ×
/// ([`crate::device::DeviceKind::impossible_compulsory_factor`]).
#[derive(Debug, Clone, Copy)]
pub struct TimingLimits {
    pub bandwidth_factor: f64,
    pub compulsory_factor: Option<f64>,
    /// [`compute_limit_factor`].
    pub compute_factor: f64,
}

/// The check that the times are possible at all: with the caches flushed before every sample,
/// neither variant may move the ledger's bytes faster than the limits' factor × the measured
/// bandwidth, nor its compulsory bytes (which no flushed cache holds) faster than the tighter
/// compulsory factor ×, nor its FLOPs faster than [`IMPOSSIBLE_COMPUTE_FRACTION`] × the peak.
/// A timer that under-reports, work done outside the timed region, or a result cached across
/// calls looks like that; a fast kernel does not. Skipped on a warm cache and for workloads
/// meant to stay in cache.
pub fn timing_check(
    variants: [TimedSide<'_>; 2],
    cold: bool,
    cache_resident: bool,
    limits: TimingLimits,
) -> Check {
    if !cold || cache_resident {
        return Check::new(
            CheckName::Timing,
            Status::Skip,
            if cache_resident {
                "not judged: the workload is meant to stay in cache"
            } else {
                "not judged on a warm cache"
            },
        );
    }
    let factor = limits.bandwidth_factor;
    let mut broken = Vec::new();
    for side in variants {
        let (name, a) = (side.name, side.achieved);
        // The compulsory bytes first: the tighter bound, and the one no cache explains.
        let compulsory = side
            .compulsory_fraction
            .zip(limits.compulsory_factor)
            .filter(|(f, limit)| f > limit);
        if let Some((f, limit)) = compulsory {
            broken.push(format!(
                "{name} read its inputs and wrote its output at {:.0}% of the measured bandwidth, more than the {:.0}% any run from flushed caches can reach",
                f * 100.0,
                limit * 100.0
            ));
        } else if a.frac_bandwidth > factor {
            broken.push(format!(
                "{name} moved its ledger's bytes at {:.0}% of the measured bandwidth, more than the {:.0}% any run with flushed caches can reach",
                a.frac_bandwidth * 100.0,
                factor * 100.0
            ));
        }
        if a.frac_compute > limits.compute_factor {
            broken.push(format!(
                "{name} ran its FLOPs at {:.0}% of the measured peak, more than the {:.0}% any run can reach",
                a.frac_compute * 100.0,
                limits.compute_factor * 100.0
            ));
        }
    }
    if broken.is_empty() {
        return Check::new(
            CheckName::Timing,
            Status::Pass,
            match limits.compulsory_factor.filter(|_| {
                variants.iter().any(|v| v.compulsory_fraction.is_some())
            }) {
                Some(c) => format!(
                    "possible: both variants below {:.0}% of the measured bandwidth (their inputs and output alone below {:.0}%) and {:.0}% of the peak",
                    factor * 100.0,
                    c * 100.0,
                    limits.compute_factor * 100.0
                ),
                None => format!(
                    "possible: both variants below {:.0}% of the measured bandwidth and {:.0}% of the peak",
                    factor * 100.0,
                    limits.compute_factor * 100.0
                ),
            },
        );
    }
    Check::new(
        CheckName::Timing,
        Status::Fail,
        format!(
            "IMPOSSIBLE: {}; its timer does not time the work (work done outside the timed run, a result cached across calls, a clock that under-reports)",
            broken.join("; ")
        ),
    )
}

/// Relative spread used to flag a noisy machine.
pub const NOISY_REL_MAD: f64 = 0.05;

/// Fraction of the probe's bandwidth above which a workload larger than the cache is said to
/// have stayed in it. Well above 1: a shared machine's triad moves by tens of percent between
/// the probe and the kernels (docs/measurement.md), and a warning that fires on every noisy
/// run is one nobody can act on.
pub const CACHED_BANDWIDTH_FRACTION: f64 = 1.5;

/// Warnings about the measurement itself.
/// `cache_resident` marks workloads meant to live in cache (launch chains): no warning for
/// bandwidth above the memory ceiling there. `beyond_cache` (before, after): a side whose
/// traffic no cache can serve (its tensors larger than the last level, the flush emptying it),
/// which moving more than the probe measured did not stay in cache.
pub fn measurement_warnings(
    before: &Summary,
    after: &Summary,
    after_achieved: &Achieved,
    before_achieved: &Achieved,
    cache_resident: bool,
    beyond_cache: [bool; 2],
) -> Vec<String> {
    let mut w = Vec::new();
    for (name, s) in [("before", before), ("after", after)] {
        if s.rel_mad > NOISY_REL_MAD {
            w.push(format!(
                "noisy machine: the {name} samples spread ±{:.1}% (median absolute deviation); medians and CIs stay valid but are wider",
                s.rel_mad * 100.0
            ));
        }
    }
    let sides = [
        ("before", before_achieved, beyond_cache[0]),
        ("after", after_achieved, beyond_cache[1]),
    ];
    for (name, a, beyond) in sides {
        if a.frac_bandwidth > CACHED_BANDWIDTH_FRACTION && !cache_resident {
            w.push(if beyond {
                format!(
                    "the {name} variant moved {:.0}% of the probe's bandwidth ceiling with tensors larger than the last-level cache, emptied before each run: its memory moved faster than the probe's arrays did (a virtual machine's host may back them unevenly), so its fractions of the roof read high",
                    a.frac_bandwidth * 100.0
                )
            } else {
                format!(
                    "the {name} variant moved {:.0}% of the probe's bandwidth ceiling: its data likely stayed in cache (is the workload larger than the last-level cache?)",
                    a.frac_bandwidth * 100.0
                )
            });
        }
    }
    w
}

/// The checked runs against the samples: each side's first run on inputs new to it (the
/// checked pair) may take at most `KEPT_RESULT_FACTOR` times its samples' median; where one took
/// more, a second pair on fresh inputs confirms it, and a side slow both times FAILs — its
/// samples answered from a result it computed when the inputs changed and kept across calls.
/// The second is measured against the slower of the samples' median and the fastest of the
/// runs right after it on the same inputs (`repeated`): where the host itself slowed down, an
/// honest side's repeats slowed with it, while a kept result answers them as fast as its
/// samples.
/// One unlucky checked run, not confirmed, passes and says so. `None` without a checked pair
/// (an archive from before it was timed).
pub fn checked_run_check(
    s: &crate::measure::PairSamples,
    (before, before_user): (&str, bool),
    (after, after_user): (&str, bool),
) -> Option<Check> {
    use crate::measure::{slow_first_run, stats::median, KEPT_RESULT_FACTOR};
    let checked = s.checked?;
    let (confirmed, repeated) = (s.confirmed, s.repeated);
    let sides = [
        (
            before,
            before_user,
            checked.before_secs,
            confirmed.map(|c| c.before_secs),
            repeated.map(|c| c.before_secs),
            &s.before_secs,
        ),
        (
            after,
            after_user,
            checked.after_secs,
            confirmed.map(|c| c.after_secs),
            repeated.map(|c| c.after_secs),
            &s.after_secs,
        ),
    ];
    let mut status = Status::Pass;
    let mut words = Vec::new();
    for (name, user, first, again, repeat, xs) in sides {
        let m = median(xs);
        let ratio = |t: f64| if m > 0.0 { t / m } else { f64::INFINITY };
        let r1 = ratio(first);
        // The confirming run's yardstick: the host's pace right after it, where slower.
        let pace = repeat.map_or(m, |r| r.max(m));
        match again.map(|t| (t, ratio(t))) {
            // opledger's own kernels are made again on the new inputs (new buffers, first
            // touched by the checked run) and keep nothing: reported, never failed.
            Some((_, r2)) if !user && slow_first_run(first, m) => words.push(format!(
                "{name}: checked run ×{r1:.2} its median, ×{r2:.2} again (opledger's own kernel: its buffers are made again on new inputs)"
            )),
            Some((t2, r2)) if slow_first_run(first, m) && slow_first_run(t2, pace) => {
                status = Status::Fail;
                words.push(format!(
                    "{name}: result kept across calls: its runs on inputs new to it took ×{r1:.1} and ×{r2:.1} its median of {:.3} ms (at most ×{KEPT_RESULT_FACTOR}): it computes when the inputs change and answers from what it kept otherwise",
                    m * 1e3
                ));
            }
            Some((t2, r2)) if r1 > KEPT_RESULT_FACTOR && pace > m && t2 > KEPT_RESULT_FACTOR * m => {
                words.push(format!(
                    "{name}: checked run ×{r1:.2} its median, ×{r2:.2} again on fresh inputs and ×{:.2} once more on those (the host slower then, not a kept result)",
                    pace / m
                ))
            }
            Some((_, r2)) if r1 > KEPT_RESULT_FACTOR => words.push(format!(
                "{name}: checked run ×{r1:.2} its median, ×{r2:.2} again on fresh inputs: one slow run"
            )),
            _ => words.push(format!("{name}: checked run ×{r1:.2} its median")),
        }
    }
    Some(Check::new(CheckName::CheckedRun, status, words.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{CheckedPair, PairSamples, StopReason};

    /// Samples of 10 ms on both sides, with the given checked, confirming and repeated runs of
    /// the after side (the before side's all 10 ms).
    fn samples(checked: f64, confirmed: Option<f64>, repeated: Option<f64>) -> PairSamples {
        let pair = |after_secs: f64| CheckedPair {
            before_secs: 0.010,
            after_secs,
        };
        PairSamples {
            before_secs: vec![0.010; 9],
            after_secs: vec![0.010; 9],
            after_first: vec![false; 9],
            stop_reason: StopReason::MaxPairs,
            wall_secs: 1.0,
            checked: Some(pair(checked)),
            confirmed: confirmed.map(pair),
            repeated: repeated.map(pair),
            flush_method: None,
        }
    }

    fn check(s: &PairSamples) -> Check {
        checked_run_check(s, ("naive", false), ("mine", true)).expect("a checked pair")
    }

    #[test]
    fn a_side_slow_on_every_new_input_and_fast_on_a_repeat_kept_its_result() {
        let c = check(&samples(0.120, Some(0.110), Some(0.010)));
        assert_eq!(c.status, Status::Fail, "{}", c.detail);
        assert!(
            c.detail.contains("mine: result kept across calls"),
            "{}",
            c.detail
        );
        // An archive from before the repeat was timed: judged against the median alone.
        let c = check(&samples(0.120, Some(0.110), None));
        assert_eq!(c.status, Status::Fail, "{}", c.detail);
    }

    #[test]
    fn a_host_slower_for_a_while_is_not_a_kept_result() {
        // Both runs on new inputs ×3.1 and ×3.2 the median, and the repeat right after on the
        // same inputs ×2.5: the host ran slower, the side kept nothing.
        let c = check(&samples(0.031, Some(0.032), Some(0.025)));
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(c.detail.contains("the host slower then"), "{}", c.detail);
        // One slow run, not confirmed.
        let c = check(&samples(0.031, Some(0.011), Some(0.010)));
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(c.detail.contains("one slow run"), "{}", c.detail);
        // No confirming pair: the checked run was within the factor.
        let c = check(&samples(0.020, None, None));
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(
            c.detail.contains("mine: checked run ×2.00 its median"),
            "{}",
            c.detail
        );
    }

    /// A side faster than the probed memory: in cache where it could be, else the probe's
    /// arrays were slower than its memory — said as such, not as a cache it cannot fit.
    #[test]
    fn a_side_above_the_probed_bandwidth_is_said_to_be_cached_only_where_it_could_be() {
        let summary = crate::measure::stats::Summary {
            n: 9,
            median_secs: 0.02,
            ci_lo_secs: 0.02,
            ci_hi_secs: 0.02,
            min_secs: 0.02,
            max_secs: 0.02,
            rel_mad: 0.01,
        };
        let achieved = |frac_bandwidth: f64| Achieved {
            bytes_per_sec: frac_bandwidth * 40e9,
            flops_per_sec: 1e9,
            frac_bandwidth,
            frac_compute: 0.01,
            measured_bound: crate::ledger::Bound::Bandwidth,
        };
        let (fast, usual) = (achieved(1.84), achieved(1.17));
        let w = measurement_warnings(&summary, &summary, &usual, &fast, false, [true, true]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("the before variant moved 184%"), "{w:?}");
        assert!(w[0].contains("faster than the probe's arrays"), "{w:?}");
        assert!(!w[0].contains("stayed in cache"), "{w:?}");
        let w = measurement_warnings(&summary, &summary, &usual, &fast, false, [false, true]);
        assert!(w[0].contains("its data likely stayed in cache"), "{w:?}");
        // Meant to live in cache: nothing to say.
        let w = measurement_warnings(&summary, &summary, &usual, &fast, true, [true, true]);
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn opledgers_own_kernels_slow_on_new_inputs_are_reported_never_failed() {
        let mut s = samples(0.010, Some(0.010), Some(0.010));
        s.checked = Some(CheckedPair {
            before_secs: 0.120,
            after_secs: 0.010,
        });
        s.confirmed = Some(CheckedPair {
            before_secs: 0.110,
            after_secs: 0.010,
        });
        let c = check(&s);
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(
            c.detail.contains(
                "naive: checked run ×12.00 its median, ×11.00 again (opledger's own kernel"
            ),
            "{}",
            c.detail
        );
    }
}
