//! Verdicts: the checks of a spec other than the regression gate (which is `gate/`), one file a
//! kind of check — correctness, the roofline, the claims, timing plausibility, counts — over
//! the statuses and check names defined here. Pure functions over numbers; every check carries
//! the numbers that decided it.

use serde::{Deserialize, Serialize};

mod claims;
mod correctness;
mod counts;
mod roofline;
mod timing;

pub use claims::*;
pub use correctness::*;
pub use counts::*;
pub use roofline::*;
pub use timing::*;

/// Outcome of one check.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    /// Not evaluated (nothing claimed, no baseline).
    Skip,
    /// Passed, but something deserves a look (suspicious saving, an after side slower than
    /// its before side).
    Warn,
    /// The evidence cannot decide: the CI straddles the claim's bound, or the gate's limit.
    Inconclusive,
    Fail,
}

impl Status {
    /// The status in capitals, as the terminal and error messages print it.
    pub fn word(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Skip => "SKIP",
            Status::Warn => "WARN",
            Status::Inconclusive => "INCONCLUSIVE",
            Status::Fail => "FAIL",
        }
    }

    pub fn mark(self) -> &'static str {
        match self {
            Status::Pass => "✅",
            Status::Skip => "—",
            Status::Warn => "⚠️",
            Status::Inconclusive => "❔",
            Status::Fail => "❌",
        }
    }
}

/// The checks a spec can have: one name each, matched by the compiler wherever a check is
/// looked up (the archive's re-derivation, the report's checklist, the gate), serialized as the
/// words `results.json` has always held.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CheckName {
    /// The spec could not be measured (a backend or worker error).
    Run,
    /// The after side's output against the f64 reference (and the before side's).
    Correctness,
    /// The measured bound against the expected one.
    Bound,
    /// The ledger's IO saving against the claim.
    IoSaving,
    /// The measured time saving against the claim.
    TimeSaving,
    /// The per-launch overhead a launch chain removes.
    LaunchOverhead,
    /// The measured times against what is physically possible.
    Timing,
    /// The regression gate.
    Regression,
    /// Counts mode: each counted side's simulated DRAM bytes against its ledger.
    LedgerCounts,
    /// Counts mode: the counted sides' metric against their counts baseline.
    CountsRegression,
    /// `--measure both`: the outputs of the counted calls against the reference.
    CountedOutput,
    /// Each side's first run on new inputs against its other runs: a result kept across calls.
    CheckedRun,
    /// `--measure both`: the counted saving against the timed one.
    CountsVsTime,
}

impl CheckName {
    /// The word `results.json`, the report and JUnit use.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckName::Run => "run",
            CheckName::Correctness => "correctness",
            CheckName::Bound => "bound",
            CheckName::IoSaving => "io_saving",
            CheckName::TimeSaving => "time_saving",
            CheckName::LaunchOverhead => "launch_overhead",
            CheckName::Timing => "timing",
            CheckName::Regression => "regression",
            CheckName::LedgerCounts => "ledger_counts",
            CheckName::CountsRegression => "counts_regression",
            CheckName::CountedOutput => "counted_output",
            CheckName::CheckedRun => "checked_run",
            CheckName::CountsVsTime => "counts_vs_time",
        }
    }
}

impl std::fmt::Display for CheckName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One check of a spec, with the sentence that explains it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Check {
    pub name: CheckName,
    pub status: Status,
    pub detail: String,
}

impl Check {
    pub fn new(name: CheckName, status: Status, detail: impl Into<String>) -> Self {
        Check {
            name,
            status,
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Ceilings;
    use crate::ledger::VariantLedger;
    use crate::measure::stats::Estimate;
    use crate::spec::{Bound, SavingRange, Tolerance};
    use crate::spec::{Finite, NonNeg};

    /// A tolerance of `r` relative and `a` absolute (the checks' tests share it).
    pub(super) fn tol(r: f64, a: f64) -> Tolerance {
        Tolerance {
            rtol: NonNeg(r),
            atol: NonNeg(a),
        }
    }

    #[test]
    fn a_gpus_datasheet_raises_the_compute_limit_above_its_mma_probe() {
        use crate::device::DeviceKind;
        // An H200: 989 TFLOP/s dense bf16 on its datasheet; an mma.sync loop reads ~660.
        let f = compute_limit_factor(DeviceKind::Cuda, Some(989e12), 660e12);
        assert!((f - 989.0 * 1.1 / 660.0).abs() < 1e-9, "{f}");
        // A cuBLAS-class bf16 GEMM at 790 TFLOP/s (120% of the probe) is possible; 1.2 PFLOP/s
        // is not.
        assert!(790.0 / 660.0 < f && 1200.0 / 660.0 > f);
        // A probe that reads near the datasheet keeps the usual margin; a CPU has no datasheet.
        assert_eq!(
            compute_limit_factor(DeviceKind::Cuda, Some(989e12), 950e12),
            IMPOSSIBLE_COMPUTE_FRACTION
        );
        assert_eq!(
            compute_limit_factor(DeviceKind::Cpu, Some(1e12), 1e11),
            IMPOSSIBLE_COMPUTE_FRACTION
        );
    }

    #[test]
    fn an_impossible_time_fails_the_timing_check_on_a_cold_cache_only() {
        use crate::device::DeviceKind;
        let at = |bw: f64, fl: f64| Achieved {
            bytes_per_sec: 0.0,
            flops_per_sec: 0.0,
            frac_bandwidth: bw,
            frac_compute: fl,
            measured_bound: Bound::Bandwidth,
        };
        let (fast, real) = (at(5.0, 0.1), at(0.9, 0.1));
        let limits = TimingLimits {
            bandwidth_factor: DeviceKind::Cpu.impossible_bandwidth_factor(),
            compulsory_factor: DeviceKind::Cpu.impossible_compulsory_factor(),
            compute_factor: IMPOSSIBLE_COMPUTE_FRACTION,
        };
        fn side<'a>(name: &'a str, achieved: &'a Achieved, f: Option<f64>) -> TimedSide<'a> {
            TimedSide {
                name,
                achieved,
                compulsory_fraction: f,
            }
        }
        let check = |a: &Achieved, b: &Achieved, cold, resident| {
            timing_check(
                [side("a", a, None), side("b", b, None)],
                cold,
                resident,
                limits,
            )
        };
        let c = timing_check(
            [side("unfused", &real, None), side("fused", &fast, None)],
            true,
            false,
            limits,
        );
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("IMPOSSIBLE: fused moved"), "{}", c.detail);
        assert_eq!(check(&real, &real, true, false).status, Status::Pass);
        assert_eq!(check(&real, &fast, false, false).status, Status::Skip);
        assert_eq!(check(&real, &fast, true, true).status, Status::Skip);
        let flops = at(0.5, 2.5);
        assert_eq!(check(&real, &flops, true, false).status, Status::Fail);
        // The compulsory bytes: inside the ledger's bound, above their own, FAIL; at it, PASS.
        let limit = limits.compulsory_factor.unwrap_or(0.0);
        let inputs = |f: f64| {
            timing_check(
                [side("a", &real, Some(0.5)), side("b", &real, Some(f))],
                true,
                false,
                limits,
            )
        };
        let over = inputs(limit * 1.01);
        assert_eq!(over.status, Status::Fail);
        assert!(
            over.detail
                .contains("b read its inputs and wrote its output at"),
            "{}",
            over.detail
        );
        assert_eq!(inputs(limit).status, Status::Pass);
        assert!(inputs(limit)
            .detail
            .contains("inputs and output alone below"));
        // A GPU with a datasheet: its peak (with the margin) over the probe's measure.
        let g = bandwidth_limit_factor(DeviceKind::Cuda, Some(3.0e12), 2.0e12);
        assert!((g - 1.65).abs() < 1e-9, "{g}");
        assert_eq!(bandwidth_limit_factor(DeviceKind::Cuda, None, 2.0e12), 1.5);
        assert_eq!(bandwidth_limit_factor(DeviceKind::Cpu, Some(1.0), 2.0), 4.0);
    }

    #[test]
    fn the_output_guard_refuses_constant_and_non_finite_outputs() {
        assert!(output_guard("fused", &[0.5, -1.0, 2.0]).is_none());
        // A single element cannot be told from a constant: allowed.
        assert!(output_guard("fused", &[0.0]).is_none());
        let zeros = output_guard("fused", &[0.0; 8]).unwrap();
        assert!(
            zeros.contains("fused") && zeros.contains("every one of the 8"),
            "{zeros}"
        );
        assert!(output_guard("fused", &[3.0; 4]).unwrap().contains("is 3"));
        let nan = output_guard("unfused", &[1.0, f32::NAN, f32::INFINITY]).unwrap();
        assert!(
            nan.contains("2 NaN or infinite elements") && nan.contains("index 1"),
            "{nan}"
        );
        // A guard finding fails the check even when every comparison passed.
        let clean = ErrorStats {
            checked: 4,
            ..ErrorStats::empty()
        };
        let mut c = Correctness {
            variants_comparable: true,
            after_vs_before: clean,
            before_vs_reference: clean,
            after_vs_reference: clean,
            guard: Vec::new(),
            reference: true,
            shape: vec![4],
        };
        let tol = Tolerance {
            rtol: crate::spec::NonNeg(1e-5),
            atol: crate::spec::NonNeg(1e-6),
        };
        assert_eq!(c.check(&tol).status, Status::Pass);
        c.guard.push(zeros);
        let check = c.check(&tol);
        assert_eq!(check.status, Status::Fail);
        assert!(
            check.detail.contains("every one of the 8"),
            "{}",
            check.detail
        );
    }

    #[test]
    fn compare_counts_mismatches_and_nans() {
        let actual = [1.0f32, 2.0, f32::NAN, 4.5];
        let s = compare(
            &actual,
            |i| [1.0, 2.0, 3.0, 4.0][i],
            0..4,
            &tol(1e-5, 1e-6),
            4,
        );
        assert_eq!(s.checked, 4);
        assert_eq!(s.nans, 1);
        assert_eq!(s.mismatches, 1);
        assert!(!s.ok());
        assert_eq!(s.max_abs, 0.5);
        let nan_expected = compare(&[1.0], |_| f64::NAN, 0..1, &tol(1.0, 1.0), 1);
        assert!(!nan_expected.ok(), "NaN never passes");
        let good = compare(
            &[1.0, 2.0],
            |i| [1.0, 2.000001][i],
            0..2,
            &tol(1e-5, 0.0),
            2,
        );
        assert!(good.ok());
        assert!(
            !compare(&[], |_| 0.0, 0..0, &tol(1.0, 1.0), 1).ok(),
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
        // Wholly outside: FAIL; across a bound: INCONCLUSIVE, as the gate decides.
        assert_eq!(
            time_saving_check(&e(0.15, 0.1, 0.2), Some(&claim), 0.5, Some(0.5)).status,
            Status::Fail
        );
        let s = time_saving_check(&e(0.3, 0.2, 0.4), Some(&claim), 0.5, Some(0.5));
        assert_eq!(s.status, Status::Inconclusive);
        assert!(s.detail.contains("INCONCLUSIVE"), "{}", s.detail);
        assert_eq!(
            time_saving_check(&e(0.8, 0.7, 0.9), Some(&claim), 0.9, Some(0.9)).status,
            Status::Inconclusive
        );
        // An after side slower than its before side is flagged, claim or no claim.
        let s = time_saving_check(&e(-0.68, -0.98, -0.23), None, 0.5, Some(0.5));
        assert_eq!(s.status, Status::Warn);
        assert!(s.detail.contains("SLOWER"), "{}", s.detail);
        let s = time_saving_check(&e(-0.68, -0.98, -0.23), Some(&claim), 0.5, Some(0.5));
        assert_eq!(s.status, Status::Fail);
        assert!(s.detail.contains("SLOWER"), "{}", s.detail);
        let s = time_saving_check(&e(0.7, 0.68, 0.72), Some(&claim), 0.5, Some(0.5));
        assert_eq!(s.status, Status::Warn);
        assert!(s.detail.contains("SUSPICIOUS"), "{}", s.detail);
        // A CI end just below the claim prints with the digits that show why it failed.
        let min90 = SavingRange {
            min: Some(Finite(0.9)),
            ..claim
        };
        let s = time_saving_check(&e(0.904, 0.8998, 0.906), Some(&min90), 0.95, None);
        assert_eq!(s.status, Status::Fail, "above the max of 75%");
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
    fn the_level_roof_is_the_longest_of_flops_arithmetic_and_memory() {
        let c = Ceilings {
            copy_bytes_per_sec: 20e9,
            triad_bytes_per_sec: 20e9,
            fma_flops_per_sec: 100e9,
            tensor_flops_per_sec: None,
            threads: 2,
            array_bytes: 1 << 20,
            stream_prefetch: None,
        };
        let l = VariantLedger::new(
            crate::values::Variant::Fused,
            vec![crate::ledger::mv("x", 1_000_000_000, 1, 0)],
            1_000_000_000,
            1,
        );
        let e = crate::ledger::Executed {
            level: "avx2+fma".into(),
            lanes: 8,
            flops: 3_000_000_000,
            vector_instructions: 200_000_000,
        };
        // 0.03 s of FLOPs, 0.05 s of memory: bandwidth-bound without a measured arithmetic.
        let o = on_level(e.clone(), None, &l, &c);
        assert_eq!(o.bound, Bound::Bandwidth);
        assert!((o.flops_secs - 0.03).abs() < 1e-12 && (o.secs - 0.05).abs() < 1e-12);
        // Arithmetic measured at 0.08 s: compute-bound, the roof 0.08 s; 0.1 s reaches 80%.
        let o = on_level(e.clone(), Some(0.08), &l, &c).measured(0.1);
        assert_eq!(o.bound, Bound::Compute);
        assert!((o.secs - 0.08).abs() < 1e-12);
        assert!((o.reached.unwrap() - 0.8).abs() < 1e-12);
        // A measured arithmetic shorter than the FLOPs' time does not lower the roof.
        let o = on_level(e, Some(0.01), &l, &c);
        assert!((o.secs - 0.05).abs() < 1e-12);
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
            stream_prefetch: None,
        };
        let l = VariantLedger::new(
            crate::spec::Variant::Fused,
            vec![crate::ledger::Movement {
                tensor: "x".into(),
                bytes: 1_000_000,
                reads: 1,
                writes: 0,
            }],
            1_000_000,
            1,
        );
        let p = predict(&l, &c);
        assert_eq!(p.bound, Bound::Bandwidth);
        // 1e6 bytes in 125 µs = 8 GB/s = 80% of bandwidth; 8 GFLOP/s = 8% of compute.
        let a = achieved(&l, 125e-6, &c);
        assert!((a.frac_bandwidth - 0.8).abs() < 1e-9);
        assert_eq!(bound_check(Bound::Bandwidth, &p, &a).status, Status::Pass);
        assert_eq!(bound_check(Bound::Compute, &p, &a).status, Status::Fail);
    }

    /// A claim the run contradicts only near the ridge warns; beyond it, fails. The first case
    /// is a tiny bandwidth-bound chain's run beside a test suite's parallel runs: the probe read
    /// the FMA peak at a third and put the ridge at 0.98 FLOP/B against the chain's 1.059.
    #[test]
    fn a_bound_contradicted_only_near_the_ridge_warns() {
        use crate::ledger::roofline;
        // 1.059 FLOP/B on a ridge of 0.98 (70.6 GFLOP/s over 72 GB/s).
        let p = roofline(70.6e9, 72.0e9, 1.059e6, 1.0e6);
        assert_eq!(p.bound, Bound::Compute);
        let a = |frac_bandwidth: f64, frac_compute: f64| Achieved {
            bytes_per_sec: 0.0,
            flops_per_sec: 0.0,
            frac_bandwidth,
            frac_compute,
            measured_bound: roofline::wall_of(frac_bandwidth, frac_compute),
        };
        let c = bound_check(Bound::Bandwidth, &p, &a(0.23, 0.243));
        assert_eq!(c.status, Status::Warn, "{}", c.detail);
        assert!(c.detail.contains("near the ridge"), "{}", c.detail);
        // Measured clearly compute-bound: the claim fails whatever the ridge.
        let c = bound_check(Bound::Bandwidth, &p, &a(0.08, 0.30));
        assert_eq!(c.status, Status::Fail, "{}", c.detail);
        // Predicted clearly compute-bound (AI twice the ridge), measured near: fails.
        let far = roofline(70.6e9, 72.0e9, 2.0e6, 1.0e6);
        let c = bound_check(Bound::Bandwidth, &far, &a(0.23, 0.243));
        assert_eq!(c.status, Status::Fail, "{}", c.detail);
        // Both agree with the claim, however near: passes, with no note.
        let c = bound_check(Bound::Compute, &p, &a(0.23, 0.243));
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(!c.detail.contains("near the ridge"));
        // The ridge at 1.5 times the AI is no longer near it.
        let wide = roofline(150.0e9, 100.0e9, 1.0e6, 1.0e6);
        let c = bound_check(Bound::Compute, &wide, &a(0.23, 0.243));
        assert_eq!(c.status, Status::Fail, "{}", c.detail);
    }

    #[test]
    fn failures_are_located_in_the_shape_with_their_pattern() {
        let t = tol(1e-6, 0.0);
        let expected = |_| 1.0;
        // 4 x 8: column 7 wrong.
        let col: Vec<f32> = (0..32)
            .map(|i| if i % 8 == 7 { 2.0 } else { 1.0 })
            .collect();
        let s = compare(&col, expected, 0..32, &t, 8);
        assert_eq!(s.pattern, Some(FailurePattern::Column { column: 7 }));
        assert_eq!(s.first.unwrap().index, 7);
        assert_eq!(shaped_index(31, &[4, 8]), "[3, 7]");
        // Rows 2-3 wrong.
        let rows: Vec<f32> = (0..32).map(|i| if i >= 16 { 2.0 } else { 1.0 }).collect();
        let s = compare(&rows, expected, 0..32, &t, 8);
        assert_eq!(s.pattern, Some(FailurePattern::Rows { first: 2, last: 3 }));
        // Every 3rd element from 1.
        let stride: Vec<f32> = (0..32)
            .map(|i| if i % 3 == 1 { 2.0 } else { 1.0 })
            .collect();
        let s = compare(&stride, expected, 0..32, &t, 8);
        assert_eq!(s.pattern, Some(FailurePattern::Stride { step: 3 }));
        // Scattered: no pattern; the worst is the largest excess.
        let mut scattered = vec![1.0f32; 32];
        scattered[3] = 1.5;
        scattered[20] = 9.0;
        scattered[21] = 1.2;
        let s = compare(&scattered, expected, 0..32, &t, 8);
        assert_eq!(s.pattern, None);
        assert_eq!(s.first.unwrap().index, 3);
        assert_eq!(s.worst.unwrap().index, 20);
        assert_eq!(s.worst.unwrap().got, 9.0);
        // Sampled comparisons name no pattern.
        let s = compare(&col, expected, [7usize, 15, 23], &t, 8);
        assert_eq!(s.pattern, None);
        assert_eq!(ordinal(64), "64th");
        assert_eq!(ordinal(22), "22nd");
        assert_eq!(ordinal(13), "13th");
    }
}
