//! The gate's statistics: the states a comparison ends in, what the drift of unchanged code
//! between runs does to the FAIL and PASS thresholds, Student's t and chi-square quantiles for
//! few accepted runs (from `statrs`), and how two passes combine. Numbers in, numbers out: the
//! outputs write the sentences, [`super::judge`] applies these to a run and its reference.

use crate::measure::stats::{self, Estimate};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ChiSquared, ContinuousCDF, Normal, StudentsT};

/// Regression decision on the ratio new/baseline of the `after` medians: three states plus
/// inconclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RegressionState {
    Pass,
    Fail,
    Improved,
    Inconclusive,
}

impl RegressionState {
    /// The word the terminal and the report use.
    pub fn word(self) -> &'static str {
        match self {
            RegressionState::Pass => "pass",
            RegressionState::Improved => "improved",
            RegressionState::Fail => "REGRESSION",
            RegressionState::Inconclusive => "inconclusive",
        }
    }
}

/// Accepted runs from which the gate pools its reference and takes the between-run spread; with
/// fewer, the latest baseline's samples are the reference and the drift between runs is unknown.
pub const POOL_MIN_RUNS: usize = 3;
/// One-sided 99% quantile of the normal distribution: an unchanged build crosses the FAIL
/// threshold about once in a hundred runs from between-run drift alone.
pub const Z_99: f64 = 2.326_347_874_040_841;
/// One-sided 95% quantile: a PASS leaves at most a 5% chance that the slowdown reached the
/// spec's limit.
pub const Z_95: f64 = 1.644_853_626_951_472;

/// The one-sided quantile of Student's t with `df` degrees of freedom (at least 1) at the
/// confidence of the normal quantile `z` ([`Z_99`] or [`Z_95`]). With the spread estimated from
/// k runs, a new run's deviation from their mean is t-distributed with k − 1 degrees of freedom:
/// few accepted runs mean wide margins, not false alarms.
pub fn t_quantile(z: f64, df: usize) -> f64 {
    let p = Normal::new(0.0, 1.0).map_or(0.99, |n| n.cdf(z));
    StudentsT::new(0.0, 1.0, df.max(1) as f64).map_or(z, |t| t.inverse_cdf(p))
}

/// What the gate knows of the drift of unchanged code between runs, for one compared value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Spread {
    /// Accepted runs the estimate rests on.
    pub runs: usize,
    /// Standard deviation of the log of the compared value between those runs (0 with fewer
    /// than [`POOL_MIN_RUNS`]: unknown).
    pub log_sd: f64,
    /// How much noisier this run's samples are than the accepted run's (>= 1): the drift is
    /// assumed to grow with it, so a noisy run makes the gate more cautious, never more sure.
    pub noise_factor: f64,
}

impl Spread {
    /// No history: the drift between runs is unknown.
    pub fn unknown() -> Self {
        Spread {
            runs: 0,
            log_sd: 0.0,
            noise_factor: 1.0,
        }
    }

    /// One standard deviation of a new run of unchanged code against the pooled reference (the
    /// mean of k runs): s·√(1 + 1/k), grown by the noise factor. 0 when unknown.
    pub fn drift(&self) -> f64 {
        if self.runs < POOL_MIN_RUNS {
            return 0.0;
        }
        self.log_sd * (1.0 + 1.0 / self.runs as f64).sqrt() * self.noise_factor
    }

    /// The quantile of a new run's deviation: Student's t with k − 1 degrees of freedom.
    fn quantile(&self, z: f64) -> f64 {
        t_quantile(z, self.runs.saturating_sub(1))
    }

    /// The FAIL threshold: the spec's, but never below what the drift implies (an unchanged
    /// build crosses it about 1% of the time).
    pub fn fail_threshold(&self, max_regression: f64) -> f64 {
        max_regression.max((self.quantile(Z_99) * self.drift()).exp() - 1.0)
    }

    /// The largest upper CI end that still PASSes: the spec's limit, less the drift a single run
    /// cannot see in its own CI.
    pub fn pass_limit(&self, max_regression: f64) -> f64 {
        (1.0 + max_regression) / (self.quantile(Z_95) * self.drift()).exp()
    }

    /// How much a PASS widens the CI's upper end for the drift.
    pub fn pass_widening(&self) -> f64 {
        (self.quantile(Z_95) * self.drift()).exp()
    }

    /// Whether a run of unchanged code can PASS at all: false when the drift alone exceeds the
    /// spec's limit (the machine cannot gate at it; a second pass would not help).
    pub fn can_pass(&self, max_regression: f64) -> bool {
        self.pass_limit(max_regression) > 1.0
    }

    /// The smallest slowdown this baseline FAILs in about 95% of runs: beyond the FAIL threshold
    /// by the drift's 95% quantile. `None` while the drift is unknown.
    pub fn detectable(&self, max_regression: f64) -> Option<f64> {
        (self.runs >= POOL_MIN_RUNS)
            .then(|| (1.0 + self.fail_threshold(max_regression)) * self.pass_widening() - 1.0)
    }

    /// 90% confidence interval of the between-run standard deviation (chi-square with k − 1
    /// degrees of freedom): how sure the threshold is.
    pub fn log_sd_interval(&self) -> Option<(f64, f64)> {
        if self.runs < POOL_MIN_RUNS {
            return None;
        }
        let nu = (self.runs - 1) as f64;
        let chi2 = ChiSquared::new(nu).ok()?;
        let p = Normal::new(0.0, 1.0).ok()?.cdf(Z_95);
        let (lo_q, hi_q) = (chi2.inverse_cdf(1.0 - p).max(1e-9), chi2.inverse_cdf(p));
        Some((
            self.log_sd * (nu / hi_q).sqrt(),
            self.log_sd * (nu / lo_q).sqrt(),
        ))
    }

    /// One sentence for the report: what the thresholds rest on.
    pub fn describe(&self, max_regression: f64) -> String {
        match (self.log_sd_interval(), self.detectable(max_regression)) {
            (Some((lo, hi)), Some(d)) => format!(
                "thresholds from {} accepted runs: between-run spread {:.1}% (90% CI {:.1}..{:.1}%){}; PASS needs the CI below x{:.3}; smallest slowdown detected: +{:.1}%",
                self.runs,
                self.log_sd * 100.0,
                lo * 100.0,
                hi * 100.0,
                if self.noise_factor > 1.0 {
                    format!(", x{:.2} for this run's noise", self.noise_factor)
                } else {
                    String::new()
                },
                self.pass_limit(max_regression),
                d * 100.0
            ),
            _ => format!(
                "{} {}: the drift between runs is unknown until {POOL_MIN_RUNS} are accepted (`opledger calibrate --accept` records them at once), so the smallest detectable slowdown is unknown",
                self.runs,
                if self.runs == 1 { "accepted run" } else { "accepted runs" }
            ),
        }
    }
}

/// The gate's decision on a ratio new/reference (with its 95% CI) against the spec's
/// `max_regression`, knowing the drift between runs:
/// - FAIL: the whole CI beyond the FAIL threshold (the spec's, or the drift's 99% quantile);
/// - PASS: the whole CI, widened by the drift's 95% quantile, below the spec's limit — a PASS
///   means a slowdown of that size is unlikely, not merely unproven;
/// - IMPROVED: likewise below 1/(1 + limit);
/// - INCONCLUSIVE otherwise: the run cannot tell (a wide CI, or a machine that drifts more than
///   the limit).
pub fn gate_state(ratio: &Estimate, max_regression: f64, spread: &Spread) -> RegressionState {
    let widen = spread.pass_widening();
    if ratio.lo > 1.0 + spread.fail_threshold(max_regression) {
        RegressionState::Fail
    } else if ratio.hi * widen < 1.0 / (1.0 + max_regression) {
        RegressionState::Improved
    } else if ratio.hi <= spread.pass_limit(max_regression) {
        RegressionState::Pass
    } else {
        RegressionState::Inconclusive
    }
}

/// Why an INCONCLUSIVE decision on a ratio could not decide, which says what would (the
/// outputs name the step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Undecided {
    /// The whole CI lies beyond the limit, but the drift between runs is as large: a
    /// regression is likely, not proven.
    LikelyRegression,
    /// The drift between runs alone takes the whole limit: unchanged code cannot PASS here.
    CannotPass,
    /// The CI reaches past what a PASS allows with the known drift: more pairs narrow it, more
    /// reference runs raise the bar.
    PastPassLimit,
    /// The CI reaches across the limit and no drift between runs is known.
    DriftUnknown,
}

/// Why an INCONCLUSIVE ratio could not decide, knowing the drift between runs (`None`: no
/// reference runs to know it from).
pub fn undecided(ratio: &Estimate, max_regression: f64, spread: Option<&Spread>) -> Undecided {
    match spread.filter(|sp| sp.runs >= POOL_MIN_RUNS) {
        None => Undecided::DriftUnknown,
        Some(_) if ratio.lo > 1.0 + max_regression => Undecided::LikelyRegression,
        Some(sp) if !sp.can_pass(max_regression) => Undecided::CannotPass,
        Some(_) => Undecided::PastPassLimit,
    }
}

/// [`gate_state`] with the drift unknown (two samples compared directly).
pub fn regression_state(ratio: &Estimate, max_regression: f64) -> RegressionState {
    gate_state(ratio, max_regression, &Spread::unknown())
}

/// Whether a first-pass decision is measured again in a fresh pass: a FAIL (final only if the
/// evidence of both passes agrees) and an INCONCLUSIVE that a second look could settle — not one
/// where the drift alone rules a PASS out, which only a quieter machine or more accepted runs
/// can change.
pub fn needs_second_pass(state: RegressionState, can_pass: bool) -> bool {
    match state {
        RegressionState::Fail => true,
        RegressionState::Inconclusive => can_pass,
        RegressionState::Pass | RegressionState::Improved => false,
    }
}

/// The decision of two passes: the pooled samples of both decide, but passes that contradict
/// each other (one FAIL, the other PASS or IMPROVED), or a pooled verdict that one pass
/// contradicts, give INCONCLUSIVE — never a PASS after a failing pass, never a FAIL on one noisy
/// pass. Returns the state and, when the passes disagree, why.
pub fn combine_passes(
    first: RegressionState,
    second: RegressionState,
    pooled: RegressionState,
) -> (RegressionState, Option<PassConflict>) {
    use RegressionState::*;
    let passed = |s| matches!(s, Pass | Improved);
    if (first == Fail && passed(second)) || (second == Fail && passed(first)) {
        return (Inconclusive, Some(PassConflict::Disagree));
    }
    if passed(pooled) && (first == Fail || second == Fail) {
        return (Inconclusive, Some(PassConflict::OneFailedBothPass));
    }
    if pooled == Fail && (passed(first) || passed(second)) {
        return (Inconclusive, Some(PassConflict::OnePassedBothFail));
    }
    (pooled, None)
}

/// How two passes contradict each other (see [`combine_passes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PassConflict {
    /// One pass failed, the other passed.
    Disagree,
    /// A pass failed where both together pass.
    OneFailedBothPass,
    /// A pass passed where both together fail.
    OnePassedBothFail,
}

/// The drift of unchanged code from one value per accepted run (log-sd; unknown with fewer
/// than [`POOL_MIN_RUNS`]).
pub fn spread_of(v: &[f64]) -> Spread {
    if v.len() < POOL_MIN_RUNS {
        return Spread {
            runs: v.len(),
            ..Spread::unknown()
        };
    }
    let k = v.len() as f64;
    let logs: Vec<f64> = v.iter().map(|x| x.ln()).collect();
    let mean = logs.iter().sum::<f64>() / k;
    let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (k - 1.0)).sqrt();
    Spread {
        runs: v.len(),
        log_sd: sd,
        noise_factor: 1.0,
    }
}

/// How much wider this run's spread of compared values is than the baseline's samples' (median
/// absolute deviation of the logs), at least 1 and at most 4.
pub fn noise_factor(new: &[f64], old: &[f64]) -> f64 {
    let mad = |v: &[f64]| {
        let logs: Vec<f64> = v.iter().filter(|x| **x > 0.0).map(|x| x.ln()).collect();
        (logs.len() >= 3).then(|| stats::mad(&logs))
    };
    match (mad(new), mad(old)) {
        (Some(n), Some(o)) if o > 0.0 => (n / o).clamp(1.0, 4.0),
        _ => 1.0,
    }
}

/// The geometric mean of positive values (the pooled reference of accepted runs).
pub fn geometric_mean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fails_and_settleable_inconclusives_are_measured_again() {
        use RegressionState::*;
        assert!(needs_second_pass(Fail, true));
        assert!(needs_second_pass(Fail, false));
        assert!(needs_second_pass(Inconclusive, true));
        assert!(
            !needs_second_pass(Inconclusive, false),
            "drift rules a PASS out"
        );
        assert!(!needs_second_pass(Pass, true));
        assert!(!needs_second_pass(Improved, true));
    }

    #[test]
    fn passes_that_disagree_are_inconclusive_never_a_silent_pass_or_a_lone_fail() {
        use RegressionState::*;
        assert_eq!(combine_passes(Fail, Pass, Pass).0, Inconclusive);
        assert_eq!(combine_passes(Fail, Pass, Fail).0, Inconclusive);
        assert_eq!(combine_passes(Pass, Fail, Fail).0, Inconclusive);
        assert_eq!(combine_passes(Fail, Inconclusive, Pass).0, Inconclusive);
        assert_eq!(combine_passes(Fail, Fail, Fail), (Fail, None));
        assert_eq!(combine_passes(Inconclusive, Fail, Fail), (Fail, None));
        assert_eq!(combine_passes(Inconclusive, Pass, Pass), (Pass, None));
        assert_eq!(
            combine_passes(Inconclusive, Inconclusive, Pass),
            (Pass, None)
        );
    }

    #[test]
    fn a_pass_needs_the_ci_below_the_limit_widened_by_the_drift() {
        let e = |point, lo, hi| Estimate { point, lo, hi };
        use RegressionState::*;
        let quiet = Spread {
            runs: 10,
            log_sd: 0.01,
            noise_factor: 1.0,
        };
        // Unchanged code on a quiet machine passes a 10% gate.
        assert_eq!(gate_state(&e(1.0, 0.98, 1.03), 0.10, &quiet), Pass);
        // A 10% slowdown does not pass: its CI reaches the limit.
        assert_eq!(gate_state(&e(1.10, 1.06, 1.14), 0.10, &quiet), Inconclusive);
        assert_eq!(gate_state(&e(1.16, 1.14, 1.19), 0.10, &quiet), Fail);
        // A machine drifting 8% between runs cannot gate at 10%: no PASS, FAIL only far out.
        let noisy = Spread {
            log_sd: 0.08,
            ..quiet
        };
        assert!(!noisy.can_pass(0.10));
        assert_eq!(gate_state(&e(1.0, 0.99, 1.01), 0.10, &noisy), Inconclusive);
        assert_eq!(gate_state(&e(1.15, 1.13, 1.17), 0.10, &noisy), Inconclusive);
        assert_eq!(gate_state(&e(1.30, 1.28, 1.32), 0.10, &noisy), Fail);
        // A run noisier than the accepted ones grows the drift: the gate grows more cautious.
        let loud = Spread {
            noise_factor: 3.0,
            ..quiet
        };
        assert!(loud.fail_threshold(0.05) > quiet.fail_threshold(0.05));
        assert!(loud.pass_limit(0.05) < quiet.pass_limit(0.05));
        // The smallest detectable slowdown where the drift sets the threshold:
        // exp((t99 + t95)·s·√(1 + 1/k)) − 1 with k − 1 = 9 degrees of freedom (table values).
        let d = quiet.detectable(0.02).unwrap();
        let expected = ((2.821 + 1.833) * 0.01 * 1.1f64.sqrt()).exp() - 1.0;
        assert!((d - expected).abs() < 1e-5, "{d} vs {expected}");
        // Fewer runs, the same spread: wider margins (t with fewer degrees of freedom).
        let few = Spread { runs: 4, ..quiet };
        assert!(few.fail_threshold(0.0) > quiet.fail_threshold(0.0));
        assert!((t_quantile(Z_99, 4) - 3.747).abs() < 1e-3);
        // Many runs: toward the normal quantile.
        assert!(
            (t_quantile(Z_99, 31) - 2.453).abs() < 0.003,
            "{}",
            t_quantile(Z_99, 31)
        );
        assert!((t_quantile(Z_95, 120) - 1.658).abs() < 0.003);
        assert_eq!(Spread::unknown().detectable(0.1), None);
        // How sure: with 10 runs the 90% CI of the spread is about 0.7x..1.6x of it.
        let (lo, hi) = quiet.log_sd_interval().unwrap();
        assert!(
            (0.0065..0.0075).contains(&lo) && (0.015..0.017).contains(&hi),
            "{lo} {hi}"
        );
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
        // Formerly a "suspect pass": a CI reaching beyond the limit is not a PASS.
        assert_eq!(
            regression_state(&e(1.05, 1.14), 0.10),
            RegressionState::Inconclusive
        );
    }
}
