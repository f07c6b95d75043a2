//! A case's series read from the store, as numbers: which value of each run a series follows,
//! and where its level changed (`measure::changes`), each shift placed between two runs and
//! their commits. Pure: the points come from the store, the words from `report::history`.

use super::{Point, Text};
use crate::measure::changes::{self, Shift};
use rayon::prelude::*;

/// Ancestors of a merge-base searched for a run, at most.
pub const MAX_ANCESTORS: usize = 5000;

/// The value of each run a series follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// The `after` variant's median time: the kernel the branch ships.
    #[default]
    After,
    /// The `before` variant's median time.
    Before,
    /// after/before from the same interleaved pairs (cancels the runner's drift).
    Ratio,
    /// The `after` side's estimated cycles under the cache simulator (counted runs, one counts
    /// key a series): exact, so every step is a change of the code.
    CountsAfter,
    /// The `before` side's estimated cycles under the cache simulator.
    CountsBefore,
}

impl Metric {
    pub fn of(self, p: &Point) -> Option<f64> {
        let cycles = |side: fn(&super::PointCounts) -> Option<u64>| {
            p.counts.as_deref().and_then(side).map(|c| c as f64)
        };
        match self {
            Metric::After => p.after_median_secs,
            Metric::Before => p.before_median_secs,
            Metric::Ratio => p.ratio,
            Metric::CountsAfter => cycles(|c| c.after_cycles),
            Metric::CountsBefore => cycles(|c| c.before_cycles),
        }
        .filter(|v| v.is_finite() && *v > 0.0)
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::After => "after",
            Metric::Before => "before",
            Metric::Ratio => "ratio",
            Metric::CountsAfter => "counts after",
            Metric::CountsBefore => "counts before",
        }
    }

    /// Whether the metric is counted (exact) rather than timed (noisy).
    pub fn counted(self) -> bool {
        matches!(self, Metric::CountsAfter | Metric::CountsBefore)
    }
}

/// The smallest step of a counted series that is a change: counts of one binary repeat
/// exactly, and between builds that differ outside the kernels they move by well under 1%
/// (docs/counts.md); a tenth of a percent is a change of what the kernel executes or moves.
pub const COUNTS_STEP: f64 = 0.001;

/// A run on one side of a shift.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunRef {
    pub run_id: String,
    pub git_sha: String,
    pub started_utc: String,
}

impl RunRef {
    fn of(p: &Point) -> RunRef {
        RunRef {
            run_id: p.run.run_id.to_string(),
            git_sha: p.run.git_sha.to_string(),
            started_utc: p.run.started_utc.to_string(),
        }
    }
}

/// A shift placed in the series: the last run at the old level and the first at the new (the
/// change began in a commit after the first's and up to the second's).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Located {
    #[serde(flatten)]
    pub shift: Shift,
    pub last_before: RunRef,
    pub first_after: RunRef,
}

/// The shifts of one case on one device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CaseChanges {
    pub spec: String,
    pub device_key: String,
    pub metric: Metric,
    /// Runs with the metric's value (detection reads the newest [`MAX_SERIES_RUNS`]).
    pub runs: usize,
    pub shifts: Vec<Located>,
}

/// The change points of each case and device in `points` (cases in name order, each oldest
/// first, as the store returns them).
pub fn changes(points: &[Point], metric: Metric) -> Vec<CaseChanges> {
    // A counted series is of one counts key (cache model, SIMD level): counts of two models are
    // two series.
    let counts_key = |p: &Point| {
        if metric.counted() {
            p.counts.as_ref().map(|c| c.key.clone()).unwrap_or_default()
        } else {
            Text::default()
        }
    };
    // Each series' points gathered in one pass over the store's (one pass a series took 25
    // million comparisons over 10 000 runs × 50 cases), in the points' order; the series in key
    // order, each detected on a core of its own.
    let mut series: std::collections::BTreeMap<(&str, &str, Text), Vec<&Point>> =
        std::collections::BTreeMap::new();
    for p in points.iter().filter(|p| metric.of(p).is_some()) {
        series
            .entry((&*p.spec, &*p.run.device_key, counts_key(p)))
            .or_default()
            .push(p);
    }
    let series: Vec<_> = series.into_iter().collect();
    series
        .into_par_iter()
        .map(|((spec, device, _), series)| CaseChanges {
            spec: spec.to_string(),
            device_key: device.to_string(),
            metric,
            runs: series.len(),
            shifts: located(&series, metric),
        })
        .collect()
}

/// Runs of a series change detection reads, at most (the newest): its memory grows with the
/// square of the runs (32 MiB at this many).
pub const MAX_SERIES_RUNS: usize = 2000;

/// The shifts of one series of points (each with the metric's value), placed between runs; of
/// its newest [`MAX_SERIES_RUNS`] runs when it is longer.
pub fn located(series: &[&Point], metric: Metric) -> Vec<Located> {
    let series = &series[series.len().saturating_sub(MAX_SERIES_RUNS)..];
    let values: Vec<f64> = series.iter().filter_map(|p| metric.of(p)).collect();
    if values.len() != series.len() {
        return Vec::new();
    }
    let shifts = if metric.counted() {
        exact_steps(&values)
    } else {
        changes::detect(&values, &changes::Config::default())
    };
    shifts
        .into_iter()
        .map(|shift| Located {
            last_before: RunRef::of(series[shift.at - 1]),
            first_after: RunRef::of(series[shift.at]),
            shift,
        })
        .collect()
}

/// The steps of an exact series: every place where a value differs from the one before by
/// more than [`COUNTS_STEP`], each level's value its first run's (no noise to average), the
/// ratio exact and its p-value 0.
pub fn exact_steps(values: &[f64]) -> Vec<Shift> {
    let at: Vec<usize> = (1..values.len())
        .filter(|&i| (values[i] / values[i - 1] - 1.0).abs() > COUNTS_STEP)
        .collect();
    let level = |start: usize, end: usize| changes::Level {
        start,
        end,
        geo_mean: values[start],
    };
    at.iter()
        .enumerate()
        .map(|(k, &i)| {
            let start = if k == 0 { 0 } else { at[k - 1] };
            let end = at.get(k + 1).copied().unwrap_or(values.len());
            let ratio = values[i] / values[i - 1];
            Shift {
                at: i,
                before: level(start, i),
                after: level(i, end),
                ratio,
                ratio_lo: ratio,
                ratio_hi: ratio,
                p_value: 0.0,
            }
        })
        .collect()
}

/// Where the newest level of a reference begins: the index of the first point after the last
/// shift of any of `metrics` (0 when none). A reference of runs from before a change would put
/// the gate's level between two codes.
pub fn current_level_start(series: &[Point], metrics: &[Metric]) -> usize {
    let refs: Vec<&Point> = series.iter().collect();
    metrics
        .iter()
        .filter(|m| refs.iter().all(|p| m.of(p).is_some()))
        .filter_map(|&m| located(&refs, m).last().map(|l| l.shift.at))
        .max()
        .unwrap_or(0)
}

/// The points at commits of `ancestors` (nearest first), nearest commit first and newest run
/// first within a commit, each with its commit's distance from the first ancestor. A store keeps
/// short SHAs: a point matches the ancestor its SHA begins.
pub fn at_ancestors<'a>(points: &'a [Point], ancestors: &[String]) -> Vec<(usize, &'a Point)> {
    let mut matched: Vec<(usize, usize, &Point)> = points
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.run.git_sha.len() >= 4 && p.run.git_sha.chars().all(|c| c.is_ascii_hexdigit())
        })
        .filter_map(|(i, p)| {
            ancestors
                .iter()
                .position(|a| a.starts_with(&*p.run.git_sha))
                .map(|k| (k, i, p))
        })
        .collect();
    // The store's order is oldest first: the newest run of a commit is the one read last.
    matched.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let matched: Vec<(usize, &Point)> = matched.into_iter().map(|(k, _, p)| (k, p)).collect();
    matched
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(i: usize, after: f64) -> Point {
        Point {
            run: std::sync::Arc::new(crate::store::PointRun {
                run_id: format!("r{i}").into(),
                started_utc: format!("2026-01-01T00:00:{i:02}Z").into(),
                git_sha: format!("c{i}").into(),
                git_dirty: false,
                branch: Some("main".into()),
                device_key: "cpu-x".into(),
                ..crate::store::PointRun::default()
            }),
            spec: "s".into(),
            verdict: "pass".into(),
            before_median_secs: Some(2.0),
            after_median_secs: Some(after),
            ratio: Some(after / 2.0),
            ..Point::default()
        }
    }

    #[test]
    fn a_step_is_placed_between_two_commits_and_cuts_the_reference() {
        let points: Vec<Point> = (0..12)
            .map(|i| {
                point(
                    i,
                    if i < 6 { 1.0 } else { 1.2 } * (1.0 + 0.001 * (i % 3) as f64),
                )
            })
            .collect();
        let c = changes(&points, Metric::After);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].runs, 12);
        assert_eq!(c[0].shifts.len(), 1, "{c:?}");
        let s = &c[0].shifts[0];
        assert_eq!(
            (
                s.last_before.git_sha.as_str(),
                s.first_after.git_sha.as_str()
            ),
            ("c5", "c6")
        );
        assert_eq!(
            current_level_start(&points, &[Metric::After, Metric::Ratio]),
            6
        );
        // The before variant did not move.
        assert!(changes(&points, Metric::Before)[0].shifts.is_empty());
    }

    fn at(sha: &str, t: &str) -> Point {
        let p = point(0, 1.0);
        Point {
            run: std::sync::Arc::new(crate::store::PointRun {
                git_sha: sha.into(),
                started_utc: t.into(),
                ..(*p.run).clone()
            }),
            ..p
        }
    }

    #[test]
    fn a_counted_series_steps_exactly_where_its_counts_moved() {
        let counted = |i: usize, after: u64| Point {
            counts: Some(Box::new(crate::store::PointCounts {
                key: "counts-x".into(),
                after_cycles: Some(after),
                before_cycles: Some(1_000_000),
                ..Default::default()
            })),
            ..point(i, 1.0)
        };
        // Flat, +2% at run 3, +0.05% (a build's drift, not a change) at run 5, back at run 7.
        let values = [
            1_000_000, 1_000_000, 1_000_000, 1_020_000, 1_020_000, 1_020_510, 1_020_000, 1_000_000,
        ];
        let points: Vec<Point> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| counted(i, v))
            .collect();
        let c = changes(&points, Metric::CountsAfter);
        assert_eq!(c.len(), 1);
        let at: Vec<(usize, &str, &str)> = c[0]
            .shifts
            .iter()
            .map(|l| {
                (
                    l.shift.at,
                    l.last_before.git_sha.as_str(),
                    l.first_after.git_sha.as_str(),
                )
            })
            .collect();
        assert_eq!(at, vec![(3, "c2", "c3"), (7, "c6", "c7")], "{c:?}");
        assert!((c[0].shifts[0].shift.ratio - 1.02).abs() < 1e-12);
        assert_eq!(c[0].shifts[0].shift.p_value, 0.0);
        // The before side did not move; time series of the same points are not counted ones.
        assert!(changes(&points, Metric::CountsBefore)[0].shifts.is_empty());
    }

    /// Each (spec, device) its own series, in key order, whatever order the devices' runs
    /// interleave in: the points are gathered in one pass, the series detected apart.
    #[test]
    fn each_spec_and_device_is_a_series_of_its_own() {
        let on = |spec: &str, device: &str, i: usize, after: f64| {
            let p = point(i, after);
            Point {
                run: std::sync::Arc::new(crate::store::PointRun {
                    device_key: device.into(),
                    ..(*p.run).clone()
                }),
                spec: spec.into(),
                ..p
            }
        };
        let mut points = Vec::new();
        for i in 0..24 {
            // Device y steps up by 20% halfway; x stays level. The devices alternate.
            let (device, after) = if i % 2 == 0 {
                ("cpu-y", if i < 12 { 1.0 } else { 1.2 })
            } else {
                ("cpu-x", 1.0)
            };
            points.push(on("a", device, i, after * (1.0 + 0.001 * (i % 3) as f64)));
        }
        points.extend((0..5).map(|i| on("b", "cpu-x", 30 + i, 1.0)));
        let c = changes(&points, Metric::After);
        let found: Vec<(&str, &str, usize, usize)> = c
            .iter()
            .map(|c| (&*c.spec, &*c.device_key, c.runs, c.shifts.len()))
            .collect();
        assert_eq!(
            found,
            [
                ("a", "cpu-x", 12, 0),
                ("a", "cpu-y", 12, 1),
                ("b", "cpu-x", 5, 0)
            ]
        );
        let s = &c[1].shifts[0];
        assert_eq!(
            (
                s.last_before.git_sha.as_str(),
                s.first_after.git_sha.as_str()
            ),
            ("c10", "c12")
        );
    }

    #[test]
    fn the_nearest_ancestor_with_runs_comes_first_newest_run_first() {
        let ancestors: Vec<String> = ["aaaa1111", "bbbb2222", "cccc3333"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let points = [
            at("cccc333", "1"),
            at("bbbb222", "2"),
            at("bbbb222", "3"),
            at("dddd444", "4"), // not an ancestor: another branch's
            at("nogit", "5"),
        ];
        let m = at_ancestors(&points, &ancestors);
        let got: Vec<(usize, &str)> = m.iter().map(|(k, p)| (*k, &*p.run.started_utc)).collect();
        assert_eq!(got, vec![(1, "3"), (1, "2"), (2, "1")]);
    }
}
