//! Correctness: each variant's output against the f64 reference, its failures located in the
//! output's shape with their pattern, and the guard against outputs that check nothing.

use super::{Check, CheckName, Status};
use crate::spec::Tolerance;
use serde::{Deserialize, Serialize};

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
pub(super) struct PatternTracker {
    cols: usize,
    count: usize,
    first: usize,
    last: usize,
    gcd: usize,
    same_column: bool,
    increasing: bool,
}

pub(super) fn gcd(a: usize, b: usize) -> usize {
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

pub(super) fn yes() -> bool {
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
pub(super) fn describe_failures(s: &ErrorStats, shape: &[u64]) -> String {
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
pub(super) fn ordinal(n: usize) -> String {
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
