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
#[derive(Debug, Clone, Copy)]
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

    /// The tracker of this one's indices followed by `later`'s (every one of them above this
    /// one's), as if `later`'s had been added here one by one: `later`'s differences are from
    /// its own first index, which lies `d` past this one's, and the gcd of d + x over x (x = 0
    /// among them) is gcd(d, the gcd of the x).
    fn then(self, later: PatternTracker) -> PatternTracker {
        if self.count == 0 {
            return later;
        }
        if later.count == 0 {
            return self;
        }
        let d = later.first.abs_diff(self.first);
        PatternTracker {
            cols: self.cols,
            count: self.count + later.count,
            first: self.first,
            last: later.last,
            gcd: gcd(self.gcd, gcd(d, later.gcd)),
            same_column: self.same_column
                && later.same_column
                && later.first % self.cols == self.first % self.cols,
            increasing: self.increasing && later.increasing && later.first > self.last,
        }
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
    compared(actual, expected, indices, tol, cols).stats(actual.len())
}

/// Elements of a whole-output comparison one task compares ([`compare_all`]).
const ALL_CHUNK: usize = 1 << 20;

/// [`compare`] of every element of `actual` against `expected` (the other variant's output, as
/// long), with the same result: a large output's elements compared in chunks on the pool's
/// threads, each chunk first in one branch-free sweep (the largest errors, whether anything
/// failed) and only a chunk where something failed again element by element, the chunks then
/// joined in order. Compared element by element on one core, the check of two large outputs
/// was a large share of a streaming spec's run (docs/performance.md).
pub fn compare_all(actual: &[f32], expected: &[f32], tol: &Tolerance, cols: usize) -> ErrorStats {
    compare_all_in(actual, expected, tol, cols, ALL_CHUNK)
}

fn compare_all_in(
    actual: &[f32],
    expected: &[f32],
    tol: &Tolerance,
    cols: usize,
    chunk: usize,
) -> ErrorStats {
    use rayon::prelude::*;
    let n = actual.len();
    let expected = &expected[..n];
    let chunk = chunk.max(1);
    let parts: Vec<Compared> = (0..n.div_ceil(chunk))
        .into_par_iter()
        .map(|c| {
            let range = c * chunk..((c + 1) * chunk).min(n);
            let (a, e) = (&actual[range.clone()], &expected[range.clone()]);
            let (max_abs, max_rel, failed) = sweep(a, e, tol);
            if failed {
                compared(actual, |i| f64::from(expected[i]), range, tol, cols)
            } else {
                Compared {
                    stats: ErrorStats {
                        checked: range.len(),
                        max_abs,
                        max_rel,
                        ..ErrorStats::empty()
                    },
                    ..Compared::empty(cols)
                }
            }
        })
        .collect();
    parts
        .into_iter()
        .fold(Compared::empty(cols), Compared::then)
        .stats(n)
}

/// One sweep over `a` against `e` without a branch: the largest absolute and relative errors
/// (as [`compared`] finds them: NaN differences left out of both, no relative error where
/// e = 0) and whether any element is out of tolerance or NaN. In LANES independent maxima, so
/// that the compiler keeps them in vectors: the maximum of a set is the same whatever the
/// order it is taken in, and `if x > m { x } else { m }` leaves a NaN out as `f64::max` does.
fn sweep(a: &[f32], e: &[f32], tol: &Tolerance) -> (f64, f64, bool) {
    const LANES: usize = 4;
    let (atol, rtol) = (tol.atol.0, tol.rtol.0);
    let (mut max_abs, mut max_rel) = ([0.0f64; LANES], [0.0f64; LANES]);
    let mut failed = [0u64; LANES];
    let mut lane = |l: usize, a: f32, e: f32| {
        let (a, e) = (f64::from(a), f64::from(e));
        let abs = (a - e).abs();
        let allowed = atol + rtol * e.abs();
        max_abs[l] = if abs > max_abs[l] { abs } else { max_abs[l] };
        let rel = if e != 0.0 { abs / e.abs() } else { 0.0 };
        max_rel[l] = if rel > max_rel[l] { rel } else { max_rel[l] };
        // Written so that a NaN difference counts as out of tolerance, as in `compared`.
        let within = abs <= allowed;
        failed[l] |= u64::from(!within);
    };
    let (ca, ce) = (a.chunks_exact(LANES), e.chunks_exact(LANES));
    for (k, (&x, &y)) in ca.remainder().iter().zip(ce.remainder()).enumerate() {
        lane(k, x, y);
    }
    for (x, y) in ca.zip(ce) {
        for l in 0..LANES {
            lane(l, x[l], y[l]);
        }
    }
    let max = |v: [f64; LANES]| v.into_iter().fold(0.0, f64::max);
    (max(max_abs), max(max_rel), failed.iter().any(|&f| f != 0))
}

/// A comparison of some elements, before its pattern is named: what joins with the comparison
/// of the elements after them.
struct Compared {
    stats: ErrorStats,
    tracker: PatternTracker,
    /// The worst failure's excess over its tolerance (0 while none is out of tolerance).
    worst_excess: f64,
}

impl Compared {
    fn empty(cols: usize) -> Compared {
        Compared {
            stats: ErrorStats::empty(),
            tracker: PatternTracker::new(cols),
            worst_excess: 0.0,
        }
    }

    /// This comparison followed by `later`'s, of elements after this one's: what comparing
    /// them all in order finds. The worst failure is this one's unless `later` has one of
    /// larger excess (a NaN there replaces nothing once a failure is known, as in order), or
    /// this one has none.
    fn then(self, later: Compared) -> Compared {
        let (a, b) = (self.stats, later.stats);
        let later_worse = a.worst_index.is_none() || later.worst_excess > self.worst_excess;
        let (worst_index, worst, worst_excess) = if later_worse && b.worst_index.is_some() {
            (b.worst_index, b.worst, later.worst_excess)
        } else {
            (a.worst_index, a.worst, self.worst_excess)
        };
        Compared {
            stats: ErrorStats {
                checked: a.checked + b.checked,
                max_abs: a.max_abs.max(b.max_abs),
                max_rel: a.max_rel.max(b.max_rel),
                mismatches: a.mismatches + b.mismatches,
                nans: a.nans + b.nans,
                worst_index,
                first: a.first.or(b.first),
                worst,
                pattern: None,
            },
            tracker: self.tracker.then(later.tracker),
            worst_excess,
        }
    }

    /// The comparison's statistics, its pattern named where it checked every one of an
    /// output's `total` elements (a pattern says something only of such a comparison).
    fn stats(self, total: usize) -> ErrorStats {
        let mut s = self.stats;
        if s.checked == total {
            s.pattern = self.tracker.pattern(total);
        }
        s
    }
}

impl ErrorStats {
    /// Nothing compared yet.
    pub(super) fn empty() -> ErrorStats {
        ErrorStats {
            checked: 0,
            max_abs: 0.0,
            max_rel: 0.0,
            mismatches: 0,
            nans: 0,
            worst_index: None,
            first: None,
            worst: None,
            pattern: None,
        }
    }
}

/// [`compare`] without the pattern named: the elements' statistics and their tracker.
fn compared(
    actual: &[f32],
    expected: impl Fn(usize) -> f64,
    indices: impl IntoIterator<Item = usize>,
    tol: &Tolerance,
    cols: usize,
) -> Compared {
    let mut s = ErrorStats::empty();
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
    Compared {
        stats: s,
        tracker,
        worst_excess,
    }
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
    use rayon::prelude::*;
    // Both questions asked of a large output on the pool's threads at once, in one sweep (two
    // sweeps on one core before: docs/performance.md), the details only where one fails.
    let (finite, constant) = match out.first() {
        Some(&first) => out
            .par_chunks(1 << 16)
            .map(|c| {
                (
                    c.iter().all(|v| v.is_finite()),
                    c.iter().all(|&v| v == first),
                )
            })
            .reduce(|| (true, true), |x, y| (x.0 && y.0, x.1 && y.1)),
        None => (true, false),
    };
    if finite && !constant {
        return None;
    }
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

#[cfg(test)]
mod tests {
    use super::super::tests::tol;
    use super::*;

    /// Outputs of 1 000 elements that agree but where `bad` says, with the values `bad` gives.
    fn outputs(bad: impl Fn(usize) -> Option<(f32, f32)>) -> (Vec<f32>, Vec<f32>) {
        (0..1000)
            .map(|i| {
                // Zeros among the expected values: no relative error there.
                let v = if i % 97 == 0 {
                    0.0
                } else {
                    (i as f32 * 0.37).sin()
                };
                bad(i).unwrap_or((v + v * 1e-7, v))
            })
            .unzip()
    }

    /// Chunked on the pool's threads, the whole-output comparison finds what the comparison in
    /// order finds — counts, largest errors, the first and the worst failure (ties: the first
    /// of them; a NaN before the worst), the pattern — whatever the chunks' size, where failures
    /// straddle chunks or fall in one.
    #[test]
    fn the_chunked_comparison_finds_what_the_comparison_in_order_finds() {
        type Bad = Box<dyn Fn(usize) -> Option<(f32, f32)>>;
        let cases: Vec<(&str, Bad)> = vec![
            ("none", Box::new(|_| None)),
            ("one", Box::new(|i| (i == 613).then_some((2.0, 1.0)))),
            ("column", Box::new(|i| (i % 50 == 7).then_some((3.0, 1.0)))),
            (
                "rows",
                Box::new(|i| (300..450).contains(&i).then_some((1.0 + i as f32, 0.5))),
            ),
            (
                "stride",
                Box::new(|i| (i % 30 == 11).then_some((5.0, -1.0))),
            ),
            (
                "ties",
                Box::new(|i| [100, 400, 900].contains(&i).then_some((4.0, 1.0))),
            ),
            (
                "nan first, worse later",
                Box::new(|i| match i {
                    20 => Some((f32::NAN, 1.0)),
                    500 => Some((1.5, 1.0)),
                    800 => Some((9.0, 1.0)),
                    _ => None,
                }),
            ),
            (
                "nan after the worst",
                Box::new(|i| match i {
                    20 => Some((9.0, 1.0)),
                    700 => Some((1.0, f32::NAN)),
                    _ => None,
                }),
            ),
            (
                "nan only",
                Box::new(|i| (i == 333 || i == 999).then_some((f32::NAN, 0.0))),
            ),
            (
                "infinities",
                Box::new(|i| match i {
                    10 => Some((f32::INFINITY, f32::INFINITY)),
                    600 => Some((f32::INFINITY, 1.0)),
                    _ => None,
                }),
            ),
            (
                "scattered",
                Box::new(|i| (i * i % 37 == 3).then_some((2.0, 1.5))),
            ),
        ];
        for (name, bad) in &cases {
            let (actual, expected) = outputs(bad);
            for cols in [50, 1000, 7] {
                let t = tol(1e-5, 1e-6);
                let in_order = compare(&actual, |i| f64::from(expected[i]), 0..1000, &t, cols);
                let named = match (*name, cols) {
                    ("column", 50) => Some(FailurePattern::Column { column: 7 }),
                    ("rows", 50) => Some(FailurePattern::Rows { first: 6, last: 8 }),
                    ("stride", _) => Some(FailurePattern::Stride { step: 30 }),
                    _ => in_order.pattern,
                };
                assert_eq!(in_order.pattern, named, "{name}, cols {cols}");
                // As printed: a failure holding a NaN is not equal to itself.
                let in_order = format!("{in_order:?}");
                for chunk in [1, 3, 64, 100, 333, 1000, 4096] {
                    let chunked = compare_all_in(&actual, &expected, &t, cols, chunk);
                    assert_eq!(
                        format!("{chunked:?}"),
                        in_order,
                        "{name}, cols {cols}, chunks of {chunk}"
                    );
                }
                let whole = compare_all(&actual, &expected, &t, cols);
                assert_eq!(format!("{whole:?}"), in_order, "{name}");
            }
        }
    }

    /// The guard reads a large output on several threads: a NaN deep inside one, or every
    /// element equal, is still found, and a real output passes.
    #[test]
    fn the_guard_finds_a_nan_or_a_constant_deep_in_a_large_output() {
        let n = 300_000;
        let mut out: Vec<f32> = (0..n).map(|i| (i as f32 * 0.01).cos()).collect();
        assert_eq!(output_guard("fused", &out), None);
        out[250_001] = f32::NAN;
        let nan = output_guard("fused", &out).expect("a NaN");
        assert!(
            nan.contains("holds 1 NaN") && nan.contains("250001"),
            "{nan}"
        );
        let mut constant = vec![0.25f32; n];
        let found = output_guard("fused", &constant).expect("a constant");
        assert!(found.contains("every one of the 300000"), "{found}");
        constant[n - 1] = 0.5;
        assert_eq!(output_guard("fused", &constant), None);
    }
}
