//! The judgement of one result against its baseline: the comparison on raw after times or on
//! after/before ratios, against the baseline's samples or the pooled medians of its accepted
//! runs, the ceiling drift guard, and the two passes judged one by one and together. Numbers
//! in, a [`GateFinding`] out; the outputs write its sentences.

use super::stats::{
    gate_state, geometric_mean, noise_factor, spread_of, RegressionState, POOL_MIN_RUNS,
};
use crate::baseline::{BaselineFile, HistoryEntry};
use crate::device::{Ceilings, DeviceInfo};
use crate::measure::stats::{ratio_ci, Estimate};
use crate::measure::PairSamples;
use crate::results::{
    BaselineOutcome, BaselineStatus, BeforeMoved, CeilingDrift, Comparison, GateFinding,
    GateJudgement, Judged, Passes, SpecResult,
};
use crate::spec::GateCompare;
use std::path::Path;

/// What the gate judges a result against, whichever way it was chosen: an accepted baseline,
/// a branch's newest runs in the store, or the runs at a merge-base (with the base run's own
/// samples where its archive is here). The judgement reads only this.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// The machine it was measured on (another one's times are not compared).
    pub device: DeviceInfo,
    pub workload: crate::spec::Workload,
    /// The roofs it was measured under; `None` for runs read from the store, which keeps no
    /// roofs, so that the drift guard has nothing to compare.
    pub ceilings: Option<Ceilings>,
    /// The samples of the one run it compares with pair by pair (empty: the pooled runs only).
    pub before_samples_secs: Vec<f64>,
    pub after_samples_secs: Vec<f64>,
    /// The before median of its newest run, where neither pooled runs nor samples say more.
    pub before_median_secs: f64,
    /// One entry per run it pools, oldest first: the accepted runs, or the store's.
    pub runs: Vec<HistoryEntry>,
}

impl From<&BaselineFile> for Reference {
    fn from(b: &BaselineFile) -> Self {
        Reference {
            device: b.device.clone(),
            workload: b.workload.clone(),
            ceilings: Some(b.ceilings),
            before_samples_secs: b.before_samples_secs.clone(),
            after_samples_secs: b.after_samples_secs.clone(),
            before_median_secs: b.before.median_secs,
            runs: b.history.clone(),
        }
    }
}

/// What a judgement needs besides the result: the reference, and the device and roofs of the
/// run being judged.
#[derive(Clone, Copy)]
pub struct Against<'a> {
    pub reference: &'a Reference,
    pub path: &'a Path,
    pub device: &'a DeviceInfo,
    pub ceilings: &'a Ceilings,
    pub resamples: usize,
    pub seed: u64,
}

/// Judges a result on all its samples at once; returns the outcome and environment warnings.
pub fn judge_once(a: &Against<'_>, result: &SpecResult) -> (BaselineOutcome, Vec<String>) {
    let base = a.reference;
    let mode = result.gate.compare;
    let max_regression = result.gate.max_regression.0;
    let mut outcome = BaselineOutcome::missing(
        a.path.display().to_string(),
        threshold(base, max_regression, mode == GateCompare::Relative),
    );
    outcome.status = BaselineStatus::NotComparable;
    if base.device.key != a.device.key {
        outcome.finding = Some(GateFinding::OtherDevice {
            baseline_device_key: base.device.key.clone(),
            device_key: a.device.key.clone(),
        });
        return (outcome, Vec::new());
    }
    if base.workload != result.workload {
        outcome.finding = Some(GateFinding::WorkloadChanged);
        return (outcome, Vec::new());
    }
    let Some(samples) = &result.samples else {
        outcome.finding = Some(GateFinding::NoSamples);
        return (outcome, Vec::new());
    };
    let warnings = environment_warnings(base, a.device);
    // Ceiling drift guard: when the roof that bounds this spec moved more than the gate can
    // absorb, the machine is not in the state the baseline measured (another SIMD level, a
    // neighbour saturating memory): INCONCLUSIVE at once, without a second pass.
    if let Some(drift) = ceiling_drift(base, result, a.ceilings, a.device.llc_bytes, max_regression)
    {
        outcome.status = BaselineStatus::Compared;
        outcome.state = Some(RegressionState::Inconclusive);
        outcome.finding = Some(GateFinding::CeilingDrift(drift));
        return (outcome, warnings);
    }
    let judged = judged(a, result, samples);
    let d = judged.decided;
    outcome.status = BaselineStatus::Compared;
    outcome.ratio = Some(d.ratio);
    outcome.state = Some(judged.state());
    outcome.threshold = d.threshold;
    outcome.spread = Some(d.spread);
    outcome.basis = Some(basis(d.relative).into());
    outcome.finding = Some(GateFinding::Judged(Box::new(GateJudgement {
        all: judged,
        passes: None,
    })));
    (outcome, warnings)
}

/// The name of a comparison's basis, as results record it.
pub fn basis(relative: bool) -> &'static str {
    if relative {
        "after/before"
    } else {
        "after time"
    }
}

/// The decision of the spec's `compare` mode on a set of samples.
fn judged(a: &Against<'_>, result: &SpecResult, samples: &PairSamples) -> Judged {
    let max_regression = result.gate.max_regression.0;
    let one = |relative| comparison(a, samples, relative, max_regression);
    match result.gate.compare {
        GateCompare::Raw => Judged {
            decided: one(false),
            other: None,
            slowed_alike: false,
            before_ratio: None,
            before_moved: None,
        },
        GateCompare::Relative => Judged {
            decided: one(true),
            other: None,
            slowed_alike: false,
            before_ratio: None,
            before_moved: None,
        },
        GateCompare::Both => {
            let (raw, rel) = (one(false), one(true));
            match (raw.state, rel.state) {
                // The after variant lost ground against the before variant measured in the same
                // pairs: a regression of the code under test, whatever the machine did — unless
                // the after side's own time did not fail and the before side ran faster by at
                // least half as much as the ratio rose: then the ratio rose with the before side
                // (`BeforeMoved::Faster`).
                (raw_state, RegressionState::Fail) => {
                    let before_ratio = before_ratio(a, samples);
                    let faster = raw_state != RegressionState::Fail
                        && before_ratio.is_some_and(|b| {
                            b > 0.0 && 1.0 / b - 1.0 >= (rel.ratio.point - 1.0) / 2.0
                        });
                    Judged {
                        decided: rel,
                        other: Some(raw),
                        slowed_alike: false,
                        before_ratio: before_ratio.filter(|_| faster),
                        before_moved: faster.then_some(BeforeMoved::Faster),
                    }
                }
                // Slower in raw time, and the after/before comparison did not fail. Where the
                // before side moved with the after side (by at least half as much), both slowed
                // alike: the machine drifted, or code both share regressed, and timing alone
                // cannot tell which. Where the before side held, the after side alone regressed
                // (its relative comparison blurred by the reference's spread): FAIL on raw time.
                (RegressionState::Fail, _) => {
                    let before_ratio = before_ratio(a, samples);
                    let alike =
                        before_ratio.is_none_or(|b| b - 1.0 >= (raw.ratio.point - 1.0) / 2.0);
                    Judged {
                        decided: raw,
                        other: Some(rel),
                        slowed_alike: alike,
                        before_ratio,
                        before_moved: None,
                    }
                }
                // Neither fails: the after/before comparison decides (PASS, IMPROVED or
                // INCONCLUSIVE). Raw time measures the machine as much as the code; its verdict
                // is reported, and a raw-only speedup is never called an improvement (it would
                // restart the baseline's history on drift). A relative improvement the after
                // side's time does not share, where the before side ran slower by at least half
                // as much as the ratio fell, is the before side's (`BeforeMoved::Slower`).
                _ => {
                    let slower = rel.state == RegressionState::Improved
                        && raw.state != RegressionState::Improved
                        && rel.ratio.point > 0.0;
                    let before_ratio = slower
                        .then(|| before_ratio(a, samples))
                        .flatten()
                        .filter(|b| b - 1.0 >= (1.0 / rel.ratio.point - 1.0) / 2.0);
                    Judged {
                        decided: rel,
                        other: Some(raw),
                        slowed_alike: false,
                        before_ratio,
                        before_moved: before_ratio.map(|_| BeforeMoved::Slower),
                    }
                }
            }
        }
    }
}

/// The before side's median now against the reference's (the pooled accepted runs' geometric
/// mean where there are enough, else the baseline's samples or median): how far the side the
/// change did not touch moved. `None` without a reference figure.
fn before_ratio(a: &Against<'_>, samples: &PairSamples) -> Option<f64> {
    let base = a.reference;
    if samples.before_secs.is_empty() {
        return None;
    }
    let now = crate::measure::stats::median(&samples.before_secs);
    let pooled: Vec<f64> = base.runs.iter().map(|h| h.before_median_secs).collect();
    let reference = if pooled.len() >= POOL_MIN_RUNS {
        geometric_mean(&pooled)
    } else if !base.before_samples_secs.is_empty() {
        crate::measure::stats::median(&base.before_samples_secs)
    } else {
        base.before_median_secs
    };
    (reference > 0.0 && now.is_finite()).then(|| now / reference)
}

/// Differences of the machine against the baseline's that make timings less comparable.
fn environment_warnings(base: &Reference, device: &DeviceInfo) -> Vec<String> {
    let mut warnings = Vec::new();
    for (what, a, b) in [
        ("CPU governor", &base.device.governor, &device.governor),
        ("kernel", &base.device.kernel, &device.kernel),
        ("compiler", &base.device.rustc, &device.rustc),
        ("SIMD level", &base.device.simd, &device.simd),
        ("GPU driver", &base.device.driver, &device.driver),
    ] {
        if a != b {
            warnings.push(format!(
                "{what} differs from the baseline's ({b} now, {a} then): timings may not be comparable"
            ));
        }
    }
    // Baselines written before memory was recorded say 0: nothing to compare.
    // The kernel reserves a little more or less memory from boot to boot: only a difference of
    // more than 1% is another machine's memory.
    let (now, then) = (device.memory_bytes as f64, base.device.memory_bytes as f64);
    if then > 0.0 && (now - then).abs() > 0.01 * then {
        warnings.push(format!(
            "device memory differs from the baseline's ({:.1} GiB now, {:.1} GiB then)",
            now / (1u64 << 30) as f64,
            then / (1u64 << 30) as f64
        ));
    }
    if base.device.cores != device.cores {
        warnings.push(format!(
            "core count differs from the baseline's ({} now, {} then)",
            device.cores, base.device.cores
        ));
    }
    warnings
}

/// [`judge_once`] for a result measured in two passes (`first_pass_pairs` set: its samples are
/// the first pass's pairs followed by the second's). Each pass is judged, then both together,
/// and [`crate::stats::combine_passes`] decides: passes that contradict each other give
/// INCONCLUSIVE.
pub fn judge(a: &Against<'_>, result: &SpecResult) -> (BaselineOutcome, Vec<String>) {
    let (Some(n), Some(samples)) = (result.first_pass_pairs, &result.samples) else {
        return judge_once(a, result);
    };
    if n == 0 || n >= samples.before_secs.len() {
        return judge_once(a, result);
    }
    let part = |range: std::ops::Range<usize>| {
        let mut r = result.clone();
        r.samples = Some(PairSamples {
            before_secs: samples.before_secs[range.clone()].to_vec(),
            after_secs: samples.after_secs[range.clone()].to_vec(),
            after_first: samples.after_first.get(range).unwrap_or_default().to_vec(),
            ..samples.clone()
        });
        r
    };
    let len = samples.before_secs.len();
    let (first, _) = judge_once(a, &part(0..n));
    let (second, _) = judge_once(a, &part(n..len));
    let (mut both, warnings) = judge_once(a, result);
    let judged_of = |o: &BaselineOutcome| match &o.finding {
        Some(GateFinding::Judged(j)) => Some(j.all),
        _ => None,
    };
    let (Some(f), Some(s)) = (judged_of(&first), judged_of(&second)) else {
        return (both, warnings);
    };
    let Some(GateFinding::Judged(all)) = &mut both.finding else {
        return (both, warnings);
    };
    let (decided, conflict) = crate::stats::combine_passes(f.state(), s.state(), all.all.state());
    all.passes = Some(Passes {
        first: f,
        second: s,
        conflict,
    });
    both.state = Some(decided);
    (both, warnings)
}

/// One comparison of a run's samples with its baseline: on raw after times or on after/before
/// ratios.
fn comparison(
    a: &Against<'_>,
    samples: &PairSamples,
    relative: bool,
    max_regression: f64,
) -> Comparison {
    let base = a.reference;
    let (new, old) = compared_values(
        relative,
        (&samples.before_secs, &samples.after_secs),
        (&base.before_samples_secs, &base.after_samples_secs),
    );
    let pooled = history_values(base, relative);
    let mut spread = spread_of(&pooled);
    // A run noisier than the accepted one widens the drift the gate allows for.
    spread.noise_factor = noise_factor(&new, &old);
    let pooled_runs = if pooled.len() >= POOL_MIN_RUNS {
        pooled.len()
    } else {
        0
    };
    let ratio = if pooled_runs > 0 {
        // The reference is the geometric mean of the accepted runs' medians, so one unlucky
        // accept does not move the gate; the between-run spread is in the thresholds, the
        // CI is this run's own.
        let reference = geometric_mean(&pooled);
        let m = crate::measure::stats::median_ci(&new, a.resamples, a.seed);
        Estimate {
            point: m.point / reference,
            lo: m.lo / reference,
            hi: m.hi / reference,
        }
    } else {
        ratio_ci(&new, &old, a.resamples, a.seed)
    };
    Comparison {
        relative,
        ratio,
        state: gate_state(&ratio, max_regression, &spread),
        threshold: spread.fail_threshold(max_regression),
        limit: max_regression,
        pooled_runs,
        spread,
    }
}

/// Most the bounding ceiling may move against the baseline's before the gate stops judging: a
/// quiet VM's triad and FMA probes move by about ±10% between runs, a change of SIMD level or a
/// neighbour saturating memory by 2x and more.
pub const CEILING_DRIFT_MIN: f64 = 0.25;

/// The drift of the roof that bounds the spec (bandwidth, or the compute peak of its dtype)
/// when it moved by more than max(25%, 2 x max_regression). Probes whose arrays do not span
/// twice the last-level cache (`--probe-mib` below two thirds of it, as small test runs use)
/// measure the cache, whose figures swing with any load: no roof to guard, so no guard.
fn ceiling_drift(
    base: &Reference,
    result: &SpecResult,
    now: &Ceilings,
    llc_bytes: u64,
    max_regression: f64,
) -> Option<CeilingDrift> {
    let then = base.ceilings.as_ref()?;
    let spans = |c: &Ceilings| crate::device::probe_spans_memory(c.array_bytes, llc_bytes);
    if !spans(now) || !spans(then) {
        return None;
    }
    let dtype = result.workload.dtype();
    let (now, then) = (now.for_dtype(dtype), then.for_dtype(dtype));
    let bound = result.expect.bound;
    let (a, b) = match bound {
        crate::spec::Bound::Bandwidth => (now.bandwidth(), then.bandwidth()),
        crate::spec::Bound::Compute => (now.peak_flops(), then.peak_flops()),
    };
    if !(a > 0.0 && b > 0.0) {
        return None;
    }
    let allowed = CEILING_DRIFT_MIN.max(2.0 * max_regression);
    let r = a / b;
    (r > 1.0 + allowed || r < 1.0 / (1.0 + allowed)).then_some(CeilingDrift {
        bound,
        baseline_per_sec: b,
        now_per_sec: a,
        allowed,
    })
}

/// The values the gate compares: raw `after` times, or (relative) each pair's after/before, so
/// that drift shared by the two members of a pair cancels.
pub fn compared_values(
    relative: bool,
    new: (&[f64], &[f64]),
    base: (&[f64], &[f64]),
) -> (Vec<f64>, Vec<f64>) {
    let paired =
        |(b, a): (&[f64], &[f64])| -> Vec<f64> { a.iter().zip(b).map(|(a, b)| a / b).collect() };
    if relative {
        (paired(new), paired(base))
    } else {
        (new.1.to_vec(), base.1.to_vec())
    }
}

/// One value per accepted run, as the gate compares them: the `after` median, or (relative) the
/// median of the pairs' after/before ratios (after/before of the medians for runs recorded
/// before that was kept).
pub fn history_values(base: &Reference, relative: bool) -> Vec<f64> {
    base.runs
        .iter()
        .map(|h| {
            if relative {
                h.relative_median
                    .unwrap_or(h.after_median_secs / h.before_median_secs)
            } else {
                h.after_median_secs
            }
        })
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect()
}

/// The FAIL threshold of a baseline before a run is measured: the spec's, but never below what
/// the spread between accepted runs implies ([`Spread::fail_threshold`]).
pub fn threshold(base: &Reference, max_regression: f64, relative: bool) -> f64 {
    implied_threshold(&history_values(base, relative), max_regression)
}

/// [`threshold`] from one value per accepted run.
pub fn implied_threshold(v: &[f64], max_regression: f64) -> f64 {
    spread_of(v).fail_threshold(max_regression)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::RegressionState;

    #[test]
    fn relative_comparison_cancels_shared_drift_and_keeps_after_only_slowdowns() {
        let mut rng = crate::rng::Rng::new(8);
        let before: Vec<f64> = (0..40)
            .map(|_| 2.0 * (1.0 + 0.05 * rng.next_f64()))
            .collect();
        let after: Vec<f64> = before
            .iter()
            .map(|b| b * 0.5 * (1.0 + 0.02 * rng.next_f64()))
            .collect();
        // The machine was 30% slower when the baseline was taken: both variants alike.
        let bb: Vec<f64> = before.iter().map(|t| t * 1.3).collect();
        let ba: Vec<f64> = after.iter().map(|t| t * 1.3).collect();
        let (n, o) = compared_values(true, (&before, &after), (&bb, &ba));
        let r = ratio_ci(&n, &o, 500, 1);
        assert!((r.point - 1.0).abs() < 0.03 && r.hi - r.lo < 0.05, "{r:?}");
        let (n, o) = compared_values(false, (&before, &after), (&bb, &ba));
        assert!(
            ratio_ci(&n, &o, 500, 1).hi < 0.8,
            "raw time sees the drift as an improvement"
        );
        // Only the after variant was 10% faster then: relative sees a 10% slowdown.
        let fast_after: Vec<f64> = after.iter().map(|t| t / 1.1).collect();
        let (n, o) = compared_values(true, (&before, &after), (&before, &fast_after));
        let r = ratio_ci(&n, &o, 500, 1);
        assert!((r.point - 1.1).abs() < 0.02, "{r:?}");
    }

    /// A virtual machine's runs of the fused scale-add-ReLU-multiply chain (unchanged code):
    /// four reference runs at before 29.9–30.3 ms, after 15.7–16.1 ms (ratio 0.52–0.54), then a
    /// run whose unfused side's buffers moved far faster: before 20.1 ms, after 13.1 ms.
    #[test]
    fn a_ratio_raised_by_the_before_side_alone_is_inconclusive_and_a_slower_after_side_fails() {
        let run: crate::results::RunResult = serde_json::from_str(include_str!(
            "../../../tests/fixtures/run-fixed/results.json"
        ))
        .unwrap();
        let mut r = run.specs[0].clone();
        r.first_pass_pairs = None;
        let reference = Reference {
            device: run.device.clone(),
            workload: r.workload.clone(),
            ceilings: None,
            before_samples_secs: Vec::new(),
            after_samples_secs: Vec::new(),
            before_median_secs: 30.0e-3,
            runs: [(29.9, 15.9), (30.3, 16.1), (30.0, 15.7), (30.1, 16.0)]
                .iter()
                .map(|&(b, a)| HistoryEntry {
                    recorded_utc: "2026-12-07T17:56:40Z".into(),
                    git_sha: "962a181".into(),
                    before_median_secs: b * 1e-3,
                    after_median_secs: a * 1e-3,
                    relative_median: Some(a / b),
                })
                .collect(),
        };
        let judge = |compare: GateCompare, before_ms: f64, after_ms: f64| {
            let mut r = r.clone();
            r.gate.compare = compare;
            r.gate.max_regression = crate::spec::Finite(0.10);
            let jitter = [1.0, 1.004, 0.997, 1.002, 0.999, 1.003, 0.998, 1.001];
            let samples = r.samples.as_mut().unwrap();
            samples.before_secs = jitter.iter().map(|j| before_ms * 1e-3 * j).collect();
            samples.after_secs = jitter.iter().rev().map(|j| after_ms * 1e-3 * j).collect();
            samples.after_first = vec![false; jitter.len()];
            let (o, _) = judge_once(
                &Against {
                    reference: &reference,
                    path: Path::new("b.json"),
                    device: &run.device,
                    ceilings: &run.ceilings,
                    resamples: 300,
                    seed: 1,
                },
                &r,
            );
            let Some(GateFinding::Judged(j)) = o.finding else {
                panic!("not judged: {o:?}")
            };
            (o.state, j.all)
        };
        // The before side faster (×0.67), the after side too (×0.83): the ratio ×1.24 is the
        // before side's.
        let (state, j) = judge(GateCompare::Both, 20.1, 13.1);
        assert_eq!(j.decided.state, RegressionState::Fail, "{j:?}");
        assert_eq!(j.before_moved, Some(BeforeMoved::Faster), "{j:?}");
        assert!(
            j.before_ratio.is_some_and(|b| (0.66..0.68).contains(&b)),
            "{j:?}"
        );
        assert_eq!(state, Some(RegressionState::Inconclusive));
        // `compare: relative` gates the ratio as it is.
        let (state, _) = judge(GateCompare::Relative, 20.1, 13.1);
        assert_eq!(state, Some(RegressionState::Fail));
        // The before side held, the after side 20% slower: FAIL.
        let (state, j) = judge(GateCompare::Both, 30.0, 19.1);
        assert_eq!((state, j.before_moved), (Some(RegressionState::Fail), None));
        // The before side a little faster (×0.97) and the after side 16% slower: the before
        // side's move is not half the ratio's rise: FAIL.
        let (state, j) = judge(GateCompare::Both, 29.1, 18.4);
        assert_eq!((state, j.before_moved), (Some(RegressionState::Fail), None));
        // The before side slower (×1.5), the after side held: the ratio's improvement is the
        // before side's; the after side's time decides.
        let (state, j) = judge(GateCompare::Both, 45.0, 15.9);
        assert_eq!(j.decided.state, RegressionState::Improved, "{j:?}");
        assert_eq!(j.before_moved, Some(BeforeMoved::Slower), "{j:?}");
        assert_eq!(j.other.map(|raw| raw.state), Some(RegressionState::Pass));
        assert_eq!(state, Some(RegressionState::Pass));
        // The after side faster, the before side held: a real improvement.
        let (state, j) = judge(GateCompare::Both, 30.0, 11.0);
        assert_eq!(
            (state, j.before_moved),
            (Some(RegressionState::Improved), None)
        );
    }

    #[test]
    fn implied_threshold_follows_the_spread_of_accepted_runs() {
        // Two runs: too few for a spread; the spec's threshold stands.
        assert_eq!(implied_threshold(&[1.0, 1.2], 0.05), 0.05);
        // Identical runs imply no spread: still the spec's.
        assert_eq!(implied_threshold(&[1.0; 5], 0.05), 0.05);
        // Runs spread by ±10%: sd of the logs ≈ 0.1, implied ≈ e^(t₀.₉₉,₄·0.1·√1.2) − 1
        // = e^(3.747·0.11) − 1 ≈ 51% (Student's t: five runs say little about the spread).
        let t = implied_threshold(&[0.9, 1.0, 1.1, 0.9, 1.1], 0.05);
        assert!((0.48..0.54).contains(&t), "{t}");
        // More runs with the same spread: a little lower (the reference is better known).
        let t10 = implied_threshold(&[0.9, 1.0, 1.1, 0.9, 1.1, 0.9, 1.0, 1.1, 0.9, 1.1], 0.05);
        assert!(t10 < t && t10 > 0.2, "{t10}");
    }

    #[test]
    fn a_roof_that_moved_past_what_the_gate_absorbs_stops_the_comparison() {
        let run: crate::results::RunResult = serde_json::from_str(include_str!(
            "../../../tests/fixtures/run-fixed/results.json"
        ))
        .unwrap();
        let r = &run.specs[0];
        let mut device = run.device.clone();
        // Probes beyond the cache, as a real run measures them.
        device.llc_bytes = run.ceilings.array_bytes / 2;
        let base = super::super::accept::baseline_of(
            r,
            &device,
            &run.ceilings,
            &run.measure,
            "2026-11-30T00:00:00Z",
            "abc",
            None,
        )
        .unwrap();
        let base = Reference::from(&base);
        let judge = |c: &Ceilings, d: &DeviceInfo| {
            judge_once(
                &Against {
                    reference: &base,
                    path: Path::new("b.json"),
                    device: d,
                    ceilings: c,
                    resamples: 200,
                    seed: 1,
                },
                r,
            )
            .0
        };
        // The same roof: compared.
        assert!(!judge(&run.ceilings, &device).guarded());
        // The baseline's machine had 4x the bandwidth (the spec is bandwidth-bound).
        let slow = Ceilings {
            triad_bytes_per_sec: run.ceilings.triad_bytes_per_sec / 4.0,
            ..run.ceilings
        };
        let o = judge(&slow, &device);
        assert_eq!(o.state, Some(RegressionState::Inconclusive));
        assert!(
            matches!(o.finding, Some(GateFinding::CeilingDrift(d)) if d.now_per_sec < d.baseline_per_sec),
            "{o:?}"
        );
        // +20% is inside what the gate absorbs.
        let drifted = Ceilings {
            triad_bytes_per_sec: run.ceilings.triad_bytes_per_sec * 1.2,
            ..run.ceilings
        };
        assert!(!judge(&drifted, &device).guarded());
        // In-cache probes (smaller than the LLC) measure no roof: no guard.
        let mut big_cache = device.clone();
        big_cache.llc_bytes = run.ceilings.array_bytes * 2;
        assert!(!judge(&slow, &big_cache).guarded());
    }
}
