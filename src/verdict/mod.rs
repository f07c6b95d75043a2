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
    /// The element with the largest excess over its tolerance, if any (flat, row-major).
    pub worst_index: Option<usize>,
    /// The first failing element checked, with both values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<Failure>,
    /// The worst failing element (largest excess over its tolerance), with both values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst: Option<Failure>,
    /// Where the failures lie, when they share a shape (one column, a band of rows, a stride).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<FailurePattern>,
}

/// One element out of tolerance (or NaN): its flat row-major index and both values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Failure {
    pub index: usize,
    pub expected: f64,
    pub got: f64,
}

/// The shape the failing elements of a whole-output comparison share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FailurePattern {
    /// Every failure is in this column (of the last dimension), over several rows.
    Column { column: usize },
    /// Every element of rows `first..=last` fails, and nothing else.
    Rows { first: usize, last: usize },
    /// Failures every `step` elements from the first one to the last, and nothing between.
    Stride { step: usize },
}

impl ErrorStats {
    pub fn ok(&self) -> bool {
        self.mismatches == 0 && self.nans == 0 && self.checked > 0
    }
}

/// Tracks the failing indices of a comparison in constant memory, enough to name the pattern
/// they share.
struct PatternTracker {
    cols: usize,
    count: usize,
    first: usize,
    last: usize,
    gcd: usize,
    same_column: bool,
    increasing: bool,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl PatternTracker {
    fn new(cols: usize) -> Self {
        PatternTracker {
            cols: cols.max(1),
            count: 0,
            first: 0,
            last: 0,
            gcd: 0,
            same_column: true,
            increasing: true,
        }
    }
    fn add(&mut self, i: usize) {
        if self.count == 0 {
            self.first = i;
        } else {
            self.increasing &= i > self.last;
            self.gcd = gcd(self.gcd, i.abs_diff(self.first));
            self.same_column &= i % self.cols == self.first % self.cols;
        }
        self.last = i;
        self.count += 1;
    }
    /// The pattern, for a comparison of every element in order (`total` of them).
    fn pattern(&self, total: usize) -> Option<FailurePattern> {
        if self.count < 2 || !self.increasing || self.count == total {
            return None;
        }
        let rows = total / self.cols;
        if self.same_column && rows > 1 {
            return Some(FailurePattern::Column {
                column: self.first % self.cols,
            });
        }
        let (r0, r1) = (self.first / self.cols, self.last / self.cols);
        if self.first.is_multiple_of(self.cols)
            && self.last % self.cols == self.cols - 1
            && self.count == (r1 - r0 + 1) * self.cols
            && self.cols > 1
        {
            return Some(FailurePattern::Rows {
                first: r0,
                last: r1,
            });
        }
        if self.gcd > 1 && self.count == (self.last - self.first) / self.gcd + 1 {
            return Some(FailurePattern::Stride { step: self.gcd });
        }
        None
    }
}

/// Compares `actual[i]` with `expected(i)` for every `i` in `indices`; `cols` is the length of
/// the output's last dimension (for the pattern of the failures).
pub fn compare(
    actual: &[f32],
    expected: impl Fn(usize) -> f64,
    indices: impl IntoIterator<Item = usize>,
    tol: &Tolerance,
    cols: usize,
) -> ErrorStats {
    let mut s = ErrorStats {
        checked: 0,
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: 0,
        nans: 0,
        worst_index: None,
        first: None,
        worst: None,
        pattern: None,
    };
    let mut tracker = PatternTracker::new(cols);
    let mut worst_excess = 0.0f64;
    for i in indices {
        let a = actual[i] as f64;
        let e = expected(i);
        s.checked += 1;
        let failure = Failure {
            index: i,
            expected: e,
            got: a,
        };
        if a.is_nan() || e.is_nan() {
            s.nans += 1;
            s.worst_index.get_or_insert(i);
            s.worst.get_or_insert(failure);
            s.first.get_or_insert(failure);
            tracker.add(i);
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
                s.worst = Some(failure);
            }
            s.first.get_or_insert(failure);
            tracker.add(i);
        }
    }
    // A pattern says something only of a comparison of every element (not of samples).
    if s.checked == actual.len() {
        s.pattern = tracker.pattern(actual.len());
    }
    s
}

fn yes() -> bool {
    true
}

/// Correctness of a spec: after vs before on every element, and both vs the f64 reference on a
/// sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Correctness {
    /// False when the two variants compute different functions (the probes): then only each
    /// against its own reference is checked.
    #[serde(default = "yes")]
    pub variants_comparable: bool,
    pub after_vs_before: ErrorStats,
    pub before_vs_reference: ErrorStats,
    pub after_vs_reference: ErrorStats,
    /// What the output guard found in either variant's whole output: NaN or Inf, or every
    /// element equal (all zeros, say). Either fails correctness even when the variants agree:
    /// an empty kernel and its reference can agree on nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guard: Vec<String>,
    /// False for kinds without an f64 reference (custom): the before side's output is then
    /// the reference of the after side's, element by element.
    #[serde(default = "yes")]
    pub reference: bool,
    /// The output's shape, to name failing elements by their indices (`[1756, 2047]`); empty
    /// in results written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shape: Vec<u64>,
}

/// A flat row-major index as indices in `shape` (`[1756, 2047]`); the flat index when the shape
/// is unknown.
pub fn shaped_index(i: usize, shape: &[u64]) -> String {
    if shape.is_empty() || shape.iter().product::<u64>() <= i as u64 {
        return format!("[{i}]");
    }
    let mut rest = i as u64;
    let mut out = vec![0u64; shape.len()];
    for (k, d) in shape.iter().enumerate().rev() {
        out[k] = rest % d.max(&1);
        rest /= d.max(&1);
    }
    format!(
        "[{}]",
        out.iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The failures of a comparison in words: the first and the worst element with their values,
/// and the pattern they share.
fn describe_failures(s: &ErrorStats, shape: &[u64]) -> String {
    let at = |f: &Failure| {
        format!(
            "{} expected {:.6e} got {:.6e}",
            shaped_index(f.index, shape),
            f.expected,
            f.got
        )
    };
    let mut parts = Vec::new();
    match (&s.first, &s.worst) {
        (Some(f), Some(w)) if f.index == w.index => {
            parts.push(format!("first and worst at {}", at(f)))
        }
        (Some(f), Some(w)) => {
            parts.push(format!("first at {}", at(f)));
            parts.push(format!("worst at {}", at(w)));
        }
        // Results written before the values were recorded hold the index alone.
        _ => parts.push(format!(
            "first/worst at index {}",
            s.worst_index.map_or("-".into(), |i| i.to_string())
        )),
    }
    let failures = s.mismatches + s.nans;
    let cols = shape.last().copied().unwrap_or(1);
    match s.pattern {
        Some(FailurePattern::Column { column }) => {
            parts.push(format!("all {failures} failures are in column {column}"))
        }
        Some(FailurePattern::Rows { first, last }) => parts.push(format!(
            "every element of rows {first}–{last} fails, and no other ({cols} per row)"
        )),
        Some(FailurePattern::Stride { step }) => parts.push(format!(
            "every {} element fails from the first to the last",
            ordinal(step)
        )),
        None => {}
    }
    parts.join("; ")
}

/// `64th`, `2nd`, `3rd`, `11th`.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The output guard: why `out` cannot be a real result, if it cannot — a NaN or an infinity, or
/// every element the same value (all zeros, an unwritten buffer, a constant).
pub fn output_guard(variant: &str, out: &[f32]) -> Option<String> {
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        let n = out.iter().filter(|v| !v.is_finite()).count();
        return Some(format!(
            "{variant}: the output holds {n} NaN or infinite element{} (the first at index {i}: {})",
            if n == 1 { "" } else { "s" },
            out[i]
        ));
    }
    match out.first() {
        Some(&first) if out.len() > 1 && out.iter().all(|&v| v == first) => Some(format!(
            "{variant}: every one of the {} output elements is {first}: a constant output (an empty kernel, an unwritten buffer) is no result",
            out.len()
        )),
        _ => None,
    }
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
            .filter(|(what, _)| self.reference || !what.ends_with("reference"))
            .filter(|(_, s)| !s.ok())
            .map(|(what, s)| {
                format!(
                    "{what}: {} of {} elements out of tolerance, {} NaN ({})",
                    s.mismatches,
                    s.checked,
                    s.nans,
                    describe_failures(s, &self.shape)
                )
            })
            .chain(self.guard.iter().cloned())
            .collect();
        let summary = if !self.reference {
            format!(
                "no f64 reference for this kind: after checked against before over {} elements, max abs {:.2e}, max rel {:.2e} (rtol {:.2e}, atol {:.2e})",
                self.after_vs_before.checked,
                self.after_vs_before.max_abs,
                self.after_vs_before.max_rel,
                tol.rtol.0,
                tol.atol.0
            )
        } else {
            format!(
                "max abs error {:.2e} / max rel {:.2e} vs reference ({} sampled), after vs before max abs {:.2e} over {} elements (rtol {:.2e}, atol {:.2e})",
                self.after_vs_reference.max_abs.max(self.before_vs_reference.max_abs),
                self.after_vs_reference.max_rel.max(self.before_vs_reference.max_rel),
                self.after_vs_reference.checked,
                self.after_vs_before.max_abs,
                self.after_vs_before.checked,
                tol.rtol.0,
                tol.atol.0
            )
        };
        if failed.is_empty() {
            Check::new(CheckName::Correctness, Status::Pass, summary)
        } else {
            Check::new(
                CheckName::Correctness,
                Status::Fail,
                format!(
                    "{}; {summary}; the outputs checked are those of a timed pair on inputs new to both sides (a second seed), written into outputs filled with NaN before it",
                    failed.join("; ")
                ),
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

/// A variant judged against what its kernels execute on the level they ran at
/// ([`crate::ledger::Executed`]): the time of those FLOPs at the FMA peak, the time the
/// kernels' arithmetic measured alone (operands in L1), the time of the ledger's bytes at the
/// bandwidth ceiling; the longest is the roof the kernel really has there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OnLevel {
    pub executed: crate::ledger::Executed,
    /// The executed FLOPs at the FMA peak.
    pub flops_secs: f64,
    /// The kernels' arithmetic alone on every thread with the operands in L1: where the
    /// instructions' latencies, not their count, set the pace (none where not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arithmetic_secs: Option<f64>,
    /// The ledger's bytes at the bandwidth ceiling.
    pub memory_secs: f64,
    /// The roof on this level: the longest of the three.
    pub secs: f64,
    /// Compute when the FLOPs or the measured arithmetic take longer than the memory.
    pub bound: Bound,
    /// The roof's time over the measured median (1 = at the roof); none before measuring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<f64>,
}

/// The level roofline of a variant whose kernels execute `executed`, their arithmetic alone
/// measured at `arithmetic_secs`.
pub fn on_level(
    executed: crate::ledger::Executed,
    arithmetic_secs: Option<f64>,
    ledger: &VariantLedger,
    c: &Ceilings,
) -> OnLevel {
    let flops_secs = executed.flops as f64 / c.peak_flops();
    let memory_secs = ledger.bytes_moved() as f64 / c.bandwidth();
    let compute_secs = flops_secs.max(arithmetic_secs.unwrap_or(0.0));
    OnLevel {
        executed,
        flops_secs,
        arithmetic_secs,
        memory_secs,
        secs: compute_secs.max(memory_secs),
        bound: Bound::of_times(compute_secs, memory_secs),
        reached: None,
    }
}

impl OnLevel {
    /// With the measured median: the fraction of the roof reached.
    pub fn measured(mut self, median_secs: f64) -> OnLevel {
        self.reached = (median_secs > 0.0).then(|| self.secs / median_secs);
        self
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
        CheckName::Bound,
        if ok { Status::Pass } else { Status::Fail },
        detail,
    )
}

pub fn io_saving_check(io_saving: f64, claim: Option<&SavingRange>) -> Check {
    match claim {
        None => Check::new(
            CheckName::IoSaving,
            Status::Skip,
            format!("{:.1}% (no claim)", io_saving * 100.0),
        ),
        Some(r) => {
            let ok = r.contains(io_saving);
            Check::new(
                CheckName::IoSaving,
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

/// How a CI stands against a claimed range: wholly inside, wholly outside, or across a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    Inside,
    Outside,
    Straddles,
}

/// Where the interval `[lo, hi]` lies against `range`: the one rule of every claim on a
/// measured saving.
pub fn claim_state(lo: f64, hi: f64, range: &SavingRange) -> ClaimState {
    if range.contains(lo) && range.contains(hi) {
        ClaimState::Inside
    } else if range.max().is_some_and(|m| lo > m) || range.min().is_some_and(|m| hi < m) {
        ClaimState::Outside
    } else {
        ClaimState::Straddles
    }
}

/// Whether a measured saving says the after side is slower than the before side: its whole CI
/// below zero.
pub fn is_slower(saving: &Estimate) -> bool {
    saving.hi < 0.0
}

/// The time-saving check, decided as the gate decides: PASS when the whole CI lies in the claim
/// (whose relative ends, `min_of_predicted`, are resolved against `predicted`, the saving the
/// ledger predicts on the ceilings measured in this run), FAIL when it lies wholly outside,
/// INCONCLUSIVE when it straddles a bound. A saving beyond what the ledger allows
/// (`ledger_bound`) is flagged, never passed silently; it is `None` where the saving lies
/// outside the roofline by design (launch overhead). An after side slower than the before side
/// (the whole CI below zero) is flagged whether or not a claim was made. Figures are printed with
/// enough digits to see why a check failed.
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
    let slower = is_slower(saving);
    let slowness = format!(
        "; SLOWER: the after side is slower than the before side (its whole CI is below zero: it takes {:.1}% to {:.1}% longer)",
        -saving.hi * 100.0,
        -saving.lo * 100.0
    );
    match claim {
        None => {
            let mut d = format!("{desc} (no claim)");
            let status = if slower {
                d.push_str(&slowness);
                Status::Warn
            } else if suspicious {
                d.push_str(&suspicion);
                Status::Warn
            } else {
                Status::Skip
            };
            Check::new(CheckName::TimeSaving, status, d)
        }
        Some(claimed) => {
            let r = claimed.resolve(predicted);
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
            let status = match claim_state(saving.lo, saving.hi, &r) {
                ClaimState::Outside => Status::Fail,
                ClaimState::Straddles => {
                    d.push_str("; INCONCLUSIVE: the CI reaches across the claim's bound (measure more pairs, or on a quieter machine)");
                    Status::Inconclusive
                }
                ClaimState::Inside if suspicious => {
                    d.push_str(&suspicion);
                    Status::Warn
                }
                ClaimState::Inside => Status::Pass,
            };
            if slower {
                d.push_str(&slowness);
            }
            Check::new(CheckName::TimeSaving, status, d)
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
    Check::new(CheckName::LaunchOverhead, status, detail)
}

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
/// device's own FMA rate, and no kernel runs its FLOPs twice as fast.
pub const IMPOSSIBLE_COMPUTE_FRACTION: f64 = 2.0;

/// The check that the times are possible at all: with the caches flushed before every sample,
/// neither variant may move the ledger's bytes faster than `factor` × the measured bandwidth,
/// nor its FLOPs faster than [`IMPOSSIBLE_COMPUTE_FRACTION`] × the peak. A timer that
/// under-reports, work done outside the timed region, or a result cached across calls looks like
/// that; a fast kernel does not. Skipped on a warm cache and for workloads meant to stay in cache.
pub fn timing_check(
    variants: [(&str, &Achieved); 2],
    cold: bool,
    cache_resident: bool,
    factor: f64,
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
    let mut broken = Vec::new();
    for (name, a) in variants {
        if a.frac_bandwidth > factor {
            broken.push(format!(
                "{name} moved its ledger's bytes at {:.0}% of the measured bandwidth, more than the {:.0}% any run with flushed caches can reach",
                a.frac_bandwidth * 100.0,
                factor * 100.0
            ));
        }
        if a.frac_compute > IMPOSSIBLE_COMPUTE_FRACTION {
            broken.push(format!(
                "{name} ran its FLOPs at {:.0}% of the measured peak, more than the {:.0}% any run can reach",
                a.frac_compute * 100.0,
                IMPOSSIBLE_COMPUTE_FRACTION * 100.0
            ));
        }
    }
    if broken.is_empty() {
        return Check::new(
            CheckName::Timing,
            Status::Pass,
            format!(
                "possible: both variants below {:.0}% of the measured bandwidth and {:.0}% of the peak",
                factor * 100.0,
                IMPOSSIBLE_COMPUTE_FRACTION * 100.0
            ),
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
        if a.frac_bandwidth > CACHED_BANDWIDTH_FRACTION && !cache_resident {
            w.push(format!(
                "the {name} variant moved {:.0}% of the probe's bandwidth ceiling: its data likely stayed in cache (is the workload larger than the last-level cache?)",
                a.frac_bandwidth * 100.0
            ));
        }
    }
    w
}

/// Each counted side's simulated DRAM bytes against its ledger (`run --measure both`): FAIL
/// where a streaming side is off by more than 5% or a re-reading side reads less than its
/// ledger's lower bound, SKIP where no side could be compared (cache-resident sizes, workers).
pub fn counts_check(c: &crate::measure::counts::SpecCounts) -> Check {
    use crate::measure::counts::{LedgerAgreement, SideCounts};
    let mut status = Status::Skip;
    let mut words = Vec::new();
    for (name, side) in [("before", &c.before), ("after", &c.after)] {
        match side {
            SideCounts::Counted {
                counts,
                ledger_read_bytes,
                ledger_write_bytes,
                agreement,
                ..
            } => {
                let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
                let how = match agreement {
                    LedgerAgreement::Streaming { agrees: true, .. } => "within 5% of the ledger",
                    LedgerAgreement::Streaming { agrees: false, .. } => {
                        "more than 5% off the ledger"
                    }
                    LedgerAgreement::Reuse { agrees: true, .. } => "the ledger is a lower bound",
                    LedgerAgreement::Reuse { agrees: false, .. } => "below the ledger",
                    LedgerAgreement::CacheResident { .. } => {
                        "not compared: a tensor may stay in the last level"
                    }
                };
                match agreement.agrees() {
                    Some(false) => status = Status::Fail,
                    Some(true) if status != Status::Fail => status = Status::Pass,
                    _ => {}
                }
                words.push(format!(
                    "{name}: DRAM read {:.2} MiB (ledger {:.2}), write {:.2} MiB (ledger {:.2}): {how}",
                    mib(counts.dram_read_bytes),
                    mib(*ledger_read_bytes),
                    mib(counts.dram_write_bytes),
                    mib(*ledger_write_bytes)
                ));
            }
            SideCounts::NotAvailable { reason } => words.push(format!("{name}: {reason}")),
        }
    }
    Check::new(CheckName::LedgerCounts, status, words.join("; "))
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
        let f = DeviceKind::Cpu.impossible_bandwidth_factor();
        let c = timing_check([("unfused", &real), ("fused", &fast)], true, false, f);
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("IMPOSSIBLE: fused moved"), "{}", c.detail);
        assert_eq!(
            timing_check([("a", &real), ("b", &real)], true, false, f).status,
            Status::Pass
        );
        assert_eq!(
            timing_check([("a", &real), ("b", &fast)], false, false, f).status,
            Status::Skip
        );
        assert_eq!(
            timing_check([("a", &real), ("b", &fast)], true, true, f).status,
            Status::Skip
        );
        let flops = at(0.5, 2.5);
        assert_eq!(
            timing_check([("a", &real), ("b", &flops)], true, false, f).status,
            Status::Fail
        );
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
            max_abs: 0.0,
            max_rel: 0.0,
            mismatches: 0,
            nans: 0,
            worst_index: None,
            first: None,
            worst: None,
            pattern: None,
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
