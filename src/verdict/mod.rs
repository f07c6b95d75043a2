//! Verdicts: correctness between variants and against the f64 reference, the bound (predicted
//! and measured), the IO and time savings against the claim, and regression against a baseline.
//! Pure functions over numbers; every check carries the numbers that decided it.

use crate::device::Ceilings;
use crate::ledger::{roofline, Roofline, VariantLedger};
use crate::measure::stats::{Estimate, Summary};
use crate::spec::{Bound, SavingRange, Tolerance};
use serde::{Deserialize, Serialize};

/// Outcome of one check.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    /// Not evaluated (nothing claimed, no baseline).
    Skip,
    /// Passed, but something deserves a look (suspicious saving, wide CI).
    Warn,
    Fail,
}

impl Status {
    pub fn mark(self) -> &'static str {
        match self {
            Status::Pass => "✅",
            Status::Skip => "—",
            Status::Warn => "⚠️",
            Status::Fail => "❌",
        }
    }
}

/// One check of a spec, with the sentence that explains it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
}

impl Check {
    pub fn new(name: &str, status: Status, detail: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status,
            detail: detail.into(),
        }
    }
}

/// Errors of `actual` against `expected` over a set of elements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorStats {
    pub checked: usize,
    pub max_abs: f64,
    pub max_rel: f64,
    /// Elements outside `atol + rtol·|expected|`.
    pub mismatches: usize,
    /// Elements where either side is NaN (never within tolerance).
    pub nans: usize,
    /// The element with the largest excess over its tolerance, if any.
    pub worst_index: Option<usize>,
}

impl ErrorStats {
    pub fn ok(&self) -> bool {
        self.mismatches == 0 && self.nans == 0 && self.checked > 0
    }
}

/// Compares `actual[i]` with `expected(i)` for every `i` in `indices`.
pub fn compare(
    actual: &[f32],
    expected: impl Fn(usize) -> f64,
    indices: impl IntoIterator<Item = usize>,
    tol: &Tolerance,
) -> ErrorStats {
    let mut s = ErrorStats {
        checked: 0,
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: 0,
        nans: 0,
        worst_index: None,
    };
    let mut worst_excess = 0.0f64;
    for i in indices {
        let a = actual[i] as f64;
        let e = expected(i);
        s.checked += 1;
        if a.is_nan() || e.is_nan() {
            s.nans += 1;
            s.worst_index.get_or_insert(i);
            continue;
        }
        let abs = (a - e).abs();
        let allowed = tol.atol.0 + tol.rtol.0 * e.abs();
        s.max_abs = s.max_abs.max(abs);
        if e != 0.0 {
            s.max_rel = s.max_rel.max(abs / e.abs());
        }
        // Written so that a NaN difference (inf − inf) counts as out of tolerance.
        let within = abs <= allowed;
        if !within {
            s.mismatches += 1;
            let excess = if abs.is_finite() {
                abs - allowed
            } else {
                f64::INFINITY
            };
            if s.worst_index.is_none() || excess > worst_excess {
                worst_excess = excess;
                s.worst_index = Some(i);
            }
        }
    }
    s
}

fn yes() -> bool {
    true
}

/// Correctness of a spec: after vs before on every element, and both vs the f64 reference on a
/// sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Correctness {
    /// False when the two variants compute different functions (the probes): then only each
    /// against its own reference is checked.
    #[serde(default = "yes")]
    pub variants_comparable: bool,
    pub after_vs_before: ErrorStats,
    pub before_vs_reference: ErrorStats,
    pub after_vs_reference: ErrorStats,
}

impl Correctness {
    pub fn check(&self, tol: &Tolerance) -> Check {
        let parts = [
            ("after vs before", &self.after_vs_before),
            ("before vs f64 reference", &self.before_vs_reference),
            ("after vs f64 reference", &self.after_vs_reference),
        ];
        let failed: Vec<String> = parts
            .iter()
            .filter(|(what, _)| self.variants_comparable || *what != "after vs before")
            .filter(|(_, s)| !s.ok())
            .map(|(what, s)| {
                format!(
                    "{what}: {} of {} elements out of tolerance, {} NaN (first/worst at index {})",
                    s.mismatches,
                    s.checked,
                    s.nans,
                    s.worst_index.map_or("-".into(), |i| i.to_string())
                )
            })
            .collect();
        let summary = format!(
            "max abs error {:.2e} / max rel {:.2e} vs reference ({} sampled), after vs before max abs {:.2e} over {} elements (rtol {:.2e}, atol {:.2e})",
            self.after_vs_reference.max_abs.max(self.before_vs_reference.max_abs),
            self.after_vs_reference.max_rel.max(self.before_vs_reference.max_rel),
            self.after_vs_reference.checked,
            self.after_vs_before.max_abs,
            self.after_vs_before.checked,
            tol.rtol.0,
            tol.atol.0
        );
        if failed.is_empty() {
            Check::new("correctness", Status::Pass, summary)
        } else {
            Check::new(
                "correctness",
                Status::Fail,
                format!("{}; {summary}", failed.join("; ")),
            )
        }
    }
}

/// Achieved rates of one variant against the measured ceilings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Achieved {
    pub bytes_per_sec: f64,
    pub flops_per_sec: f64,
    /// Fraction of the bandwidth ceiling (triad).
    pub frac_bandwidth: f64,
    /// Fraction of the compute ceiling (FMA peak).
    pub frac_compute: f64,
    /// The wall the variant is closest to: the larger fraction.
    pub measured_bound: Bound,
}

pub fn achieved(ledger: &VariantLedger, median_secs: f64, c: &Ceilings) -> Achieved {
    let bytes_per_sec = ledger.bytes_moved() as f64 / median_secs;
    let flops_per_sec = ledger.flops as f64 / median_secs;
    let frac_bandwidth = bytes_per_sec / c.bandwidth();
    let frac_compute = flops_per_sec / c.peak_flops();
    Achieved {
        bytes_per_sec,
        flops_per_sec,
        frac_bandwidth,
        frac_compute,
        measured_bound: if frac_compute > frac_bandwidth {
            Bound::Compute
        } else {
            Bound::Bandwidth
        },
    }
}

/// Prediction of a variant on the measured ceilings.
pub fn predict(ledger: &VariantLedger, c: &Ceilings) -> Roofline {
    roofline(
        c.peak_flops(),
        c.bandwidth(),
        ledger.flops as f64,
        ledger.bytes_moved() as f64,
    )
}

/// The bound check: predicted (AI vs ridge) and measured (larger fraction of a ceiling) must both
/// be the expected bound.
pub fn bound_check(expected: Bound, predicted: &Roofline, measured: &Achieved) -> Check {
    let detail = format!(
        "expected {}; predicted {} (AI {:.3} FLOP/B vs ridge {:.2} FLOP/B); measured {} ({:.0}% of bandwidth ceiling, {:.1}% of compute ceiling)",
        expected.name(),
        predicted.bound.name(),
        predicted.intensity,
        predicted.ridge,
        measured.measured_bound.name(),
        measured.frac_bandwidth * 100.0,
        measured.frac_compute * 100.0
    );
    let ok = predicted.bound == expected && measured.measured_bound == expected;
    Check::new(
        "bound",
        if ok { Status::Pass } else { Status::Fail },
        detail,
    )
}

pub fn io_saving_check(io_saving: f64, claim: Option<&SavingRange>) -> Check {
    match claim {
        None => Check::new(
            "io_saving",
            Status::Skip,
            format!("{:.1}% (no claim)", io_saving * 100.0),
        ),
        Some(r) => {
            let ok = r.contains(io_saving);
            Check::new(
                "io_saving",
                if ok { Status::Pass } else { Status::Fail },
                format!(
                    "ledger saving {} vs claim {}",
                    pct_fine(io_saving),
                    describe_fine(r)
                ),
            )
        }
    }
}

/// Slack above the ledger's predicted time saving before a measured saving is called
/// suspicious. CPU caches add write-allocate reads the ledger does not count, which lets a real
/// saving exceed the prediction by a few points.
pub const SUSPICIOUS_SLACK: f64 = 0.05;

/// The time-saving check: the whole CI must lie in the claim, whose relative ends
/// (`min_of_predicted`) are resolved against `predicted`, the saving the ledger predicts on the
/// ceilings measured in this run. A saving beyond what the ledger allows (`ledger_bound`) is
/// flagged, never passed silently; it is `None` where the saving lies outside the roofline by
/// design (launch overhead). Figures are printed with enough digits to see why a check failed.
pub fn time_saving_check(
    saving: &Estimate,
    claim: Option<&SavingRange>,
    predicted: f64,
    ledger_bound: Option<f64>,
) -> Check {
    let desc = format!(
        "measured {} (95% CI {} .. {})",
        pct_fine(saving.point),
        pct_fine(saving.lo),
        pct_fine(saving.hi)
    );
    let suspicious = ledger_bound.is_some_and(|b| saving.lo > b + SUSPICIOUS_SLACK);
    let suspicion = format!(
        "; SUSPICIOUS: above the {:.1}% the ledger allows on these ceilings (+{:.0} points slack) — check that both variants do the same work and that the after variant is not faster than its roofline",
        ledger_bound.unwrap_or(0.0) * 100.0,
        SUSPICIOUS_SLACK * 100.0
    );
    match claim {
        None => {
            let status = if suspicious {
                Status::Warn
            } else {
                Status::Skip
            };
            let mut d = format!("{desc} (no claim)");
            if suspicious {
                d.push_str(&suspicion);
            }
            Check::new("time_saving", status, d)
        }
        Some(claimed) => {
            let r = claimed.resolve(predicted);
            let inside = r.contains(saving.lo) && r.contains(saving.hi);
            let mut d = if claimed.is_relative() {
                format!(
                    "{desc} vs claim {} = {} of the predicted {}",
                    claimed.describe_claim(),
                    describe_fine(&r),
                    pct_fine(predicted)
                )
            } else {
                format!("{desc} vs claim {}", describe_fine(&r))
            };
            let status = if !inside {
                Status::Fail
            } else if suspicious {
                d.push_str(&suspicion);
                Status::Warn
            } else {
                Status::Pass
            };
            Check::new("time_saving", status, d)
        }
    }
}

/// A fraction as a percentage with two decimals: a CI end of 89.98% must not print as the
/// 90% claim it failed.
fn pct_fine(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

fn describe_fine(r: &SavingRange) -> String {
    match (r.min(), r.max()) {
        (Some(a), Some(b)) => format!("[{}, {}]", pct_fine(a), pct_fine(b)),
        (Some(a), None) => format!(">= {}", pct_fine(a)),
        (None, Some(b)) => format!("<= {}", pct_fine(b)),
        (None, None) => "any".into(),
    }
}

/// The launch-overhead check of a launch chain: replaying the chain must remove a positive,
/// measurable overhead per launch — the whole CI of (T_before − T_after)/(N − 1) above zero.
pub fn launch_overhead_check(
    per_launch: &Estimate,
    n_ops: u64,
    variants: &crate::spec::Variants,
) -> Check {
    let us = |s: f64| s * 1e6;
    let detail = format!(
        "per-launch overhead removed by {} vs {}: {:.2} µs (95% CI {:.2} .. {:.2} µs) = (T_{} − T_{})/({} − 1)",
        variants.after.name(),
        variants.before.name(),
        us(per_launch.point),
        us(per_launch.lo),
        us(per_launch.hi),
        variants.before.name(),
        variants.after.name(),
        n_ops
    );
    let status = if per_launch.lo > 0.0 {
        Status::Pass
    } else {
        Status::Fail
    };
    Check::new("launch_overhead", status, detail)
}

/// Regression decision on the ratio new/baseline of the `after` medians (issue: three states
/// plus inconclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RegressionState {
    Pass,
    Fail,
    Improved,
    Inconclusive,
}

pub fn regression_state(ratio: &Estimate, threshold: f64) -> RegressionState {
    if ratio.lo > 1.0 + threshold {
        RegressionState::Fail
    } else if ratio.hi < 1.0 / (1.0 + threshold) {
        RegressionState::Improved
    } else if ratio.hi - ratio.lo > threshold {
        RegressionState::Inconclusive
    } else {
        RegressionState::Pass
    }
}

/// Whether a first-pass regression decision needs a fresh pass before it is final: a FAIL (a
/// FAIL is final only if a fresh pass agrees), an INCONCLUSIVE, and a *suspect* PASS — one whose
/// point estimate is beyond the threshold although its CI reaches below it. The suspect case is
/// where a real regression most often hides on a drifting machine (the run's drift pulled the
/// CI's lower end under the threshold); an unchanged build rarely lands there (its point
/// estimate would have to drift by the whole threshold), and even then its fresh pass must FAIL
/// outright.
pub fn needs_second_pass(state: RegressionState, ratio: &Estimate, threshold: f64) -> bool {
    match state {
        RegressionState::Fail | RegressionState::Inconclusive => true,
        RegressionState::Pass => ratio.point > 1.0 + threshold,
        RegressionState::Improved => false,
    }
}

/// Relative spread used to flag a noisy machine.
pub const NOISY_REL_MAD: f64 = 0.05;

/// Warnings about the measurement itself.
/// `cache_resident` marks workloads meant to live in cache (launch chains): no warning for
/// bandwidth above the memory ceiling there.
pub fn measurement_warnings(
    before: &Summary,
    after: &Summary,
    after_achieved: &Achieved,
    before_achieved: &Achieved,
    cache_resident: bool,
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
    for (name, a) in [("before", before_achieved), ("after", after_achieved)] {
        if a.frac_bandwidth > 1.1 && !cache_resident {
            w.push(format!(
                "the {name} variant moved {:.0}% of the probe's bandwidth ceiling: its data likely stayed in cache (is the workload larger than the last-level cache?)",
                a.frac_bandwidth * 100.0
            ));
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Finite, NonNeg};

    fn tol(r: f64, a: f64) -> Tolerance {
        Tolerance {
            rtol: NonNeg(r),
            atol: NonNeg(a),
        }
    }

    #[test]
    fn compare_counts_mismatches_and_nans() {
        let actual = [1.0f32, 2.0, f32::NAN, 4.5];
        let s = compare(&actual, |i| [1.0, 2.0, 3.0, 4.0][i], 0..4, &tol(1e-5, 1e-6));
        assert_eq!(s.checked, 4);
        assert_eq!(s.nans, 1);
        assert_eq!(s.mismatches, 1);
        assert!(!s.ok());
        assert_eq!(s.max_abs, 0.5);
        let nan_expected = compare(&[1.0], |_| f64::NAN, 0..1, &tol(1.0, 1.0));
        assert!(!nan_expected.ok(), "NaN never passes");
        let good = compare(&[1.0, 2.0], |i| [1.0, 2.000001][i], 0..2, &tol(1e-5, 0.0));
        assert!(good.ok());
        assert!(
            !compare(&[], |_| 0.0, 0..0, &tol(1.0, 1.0)).ok(),
            "nothing checked is not a pass"
        );
    }

    #[test]
    fn time_saving_needs_whole_ci_in_claim_and_flags_the_impossible() {
        let claim = SavingRange {
            min: Some(Finite(0.25)),
            max: Some(Finite(0.75)),
            min_of_predicted: None,
            max_of_predicted: None,
        };
        let e = |p, lo, hi| Estimate { point: p, lo, hi };
        assert_eq!(
            time_saving_check(&e(0.5, 0.45, 0.55), Some(&claim), 0.5, Some(0.5)).status,
            Status::Pass
        );
        assert_eq!(
            time_saving_check(&e(0.3, 0.2, 0.4), Some(&claim), 0.5, Some(0.5)).status,
            Status::Fail
        );
        let s = time_saving_check(&e(0.7, 0.68, 0.72), Some(&claim), 0.5, Some(0.5));
        assert_eq!(s.status, Status::Warn);
        assert!(s.detail.contains("SUSPICIOUS"), "{}", s.detail);
        // A CI end just below the claim prints with the digits that show why it failed.
        let min90 = SavingRange {
            min: Some(Finite(0.9)),
            ..claim
        };
        let s = time_saving_check(&e(0.904, 0.8998, 0.906), Some(&min90), 0.95, None);
        assert_eq!(s.status, Status::Fail);
        assert!(s.detail.contains("89.98%"), "{}", s.detail);
    }

    #[test]
    fn time_saving_in_units_of_the_prediction() {
        let rel = SavingRange {
            min: None,
            max: None,
            min_of_predicted: Some(Finite(0.6)),
            max_of_predicted: None,
        };
        let e = |p, lo, hi| Estimate { point: p, lo, hi };
        // Predicted 50%: the claim is >= 30%.
        let ok = time_saving_check(&e(0.4, 0.35, 0.45), Some(&rel), 0.5, Some(0.5));
        assert_eq!(ok.status, Status::Pass, "{}", ok.detail);
        assert!(
            ok.detail
                .contains(">= 0.6 x predicted = >= 30.00% of the predicted 50.00%"),
            "{}",
            ok.detail
        );
        // The same measurement against a higher prediction (a machine with another roof).
        let s = time_saving_check(&e(0.4, 0.35, 0.45), Some(&rel), 0.9, Some(0.9));
        assert_eq!(s.status, Status::Fail, "{}", s.detail);
        // A fixed and a relative end together: the stricter holds.
        let both = SavingRange {
            min: Some(Finite(0.4)),
            ..rel
        };
        assert_eq!(both.resolve(0.5).min(), Some(0.4));
        assert_eq!(both.resolve(0.9).min(), Some(0.6 * 0.9));
    }

    #[test]
    fn suspect_passes_fails_and_inconclusives_are_measured_again() {
        let e = |point, lo, hi| Estimate { point, lo, hi };
        use RegressionState::*;
        assert!(needs_second_pass(Fail, &e(1.2, 1.15, 1.25), 0.1));
        assert!(needs_second_pass(Inconclusive, &e(1.0, 0.8, 1.2), 0.1));
        // PASS with the point estimate beyond the threshold: suspect.
        let suspect = e(1.12, 1.05, 1.14);
        assert_eq!(regression_state(&suspect, 0.1), Pass);
        assert!(needs_second_pass(Pass, &suspect, 0.1));
        // An ordinary PASS and an IMPROVED are final.
        assert!(!needs_second_pass(Pass, &e(1.03, 0.99, 1.06), 0.1));
        assert!(!needs_second_pass(Improved, &e(0.8, 0.78, 0.82), 0.1));
    }

    #[test]
    fn regression_states() {
        let e = |lo, hi| Estimate {
            point: (lo + hi) / 2.0,
            lo,
            hi,
        };
        assert_eq!(
            regression_state(&e(1.12, 1.15), 0.10),
            RegressionState::Fail
        );
        assert_eq!(
            regression_state(&e(0.98, 1.03), 0.10),
            RegressionState::Pass
        );
        assert_eq!(
            regression_state(&e(0.80, 0.85), 0.10),
            RegressionState::Improved
        );
        assert_eq!(
            regression_state(&e(0.95, 1.20), 0.10),
            RegressionState::Inconclusive
        );
    }

    #[test]
    fn bound_check_needs_both_to_agree() {
        let c = Ceilings {
            copy_bytes_per_sec: 10e9,
            triad_bytes_per_sec: 10e9,
            fma_flops_per_sec: 100e9,
            tensor_flops_per_sec: None,
            threads: 2,
            array_bytes: 1,
        };
        let l = VariantLedger {
            variant: crate::spec::Variant::Fused,
            movements: vec![crate::ledger::Movement {
                tensor: "x".into(),
                bytes: 1_000_000,
                reads: 1,
                writes: 0,
            }],
            flops: 1_000_000,
            launches: 1,
        };
        let p = predict(&l, &c);
        assert_eq!(p.bound, Bound::Bandwidth);
        // 1e6 bytes in 125 µs = 8 GB/s = 80% of bandwidth; 8 GFLOP/s = 8% of compute.
        let a = achieved(&l, 125e-6, &c);
        assert!((a.frac_bandwidth - 0.8).abs() < 1e-9);
        assert_eq!(bound_check(Bound::Bandwidth, &p, &a).status, Status::Pass);
        assert_eq!(bound_check(Bound::Compute, &p, &a).status, Status::Fail);
    }
}
