//! Change points of a series of runs (a case's medians, oldest first): where its level moved,
//! by how much (with a 95% CI), and the runs on each side.
//!
//! The method is binary segmentation confirmed by a t-test, as Hunter (now Apache Otava) does
//! on performance histories, with its proposals made by circular binary segmentation (Olshen
//! et al.): in each segment, the interval whose mean differs most from the rest's (weighted by
//! their sizes: the likelihood ratio of a mean shift in normal noise) is proposed, so that a
//! step up and back down is one change and not hidden in the whole's average; a two-sided Welch
//! t-test on the logs of the interval against the rest confirms it, and the pieces are searched
//! again. Then every change point is tested again between its neighbours, the weakest dropped
//! until all that remain stand. E-divisive means (the energy statistic Hunter uses to propose
//! splits) is kept as an alternative: on synthetic series it found fewer steps (the study is in
//! docs/history.md, `cargo bench --bench history -- changes`).
//!
//! Logs, because a slowdown is a ratio. The best of many candidates is tested, so the level
//! asked of its p-value is divided by the number of candidates (Bonferroni): a flat series of
//! any length raises a false shift with probability at most about `alpha`, not `alpha` per
//! candidate. Outliers (a runner's bad minute) are clipped to three robust standard deviations
//! of the series' noise (from the median absolute difference of successive runs, which a step
//! does not inflate) around the median of their neighbours, so that one wild run neither makes
//! nor hides a shift.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// What detection needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Runs on each side of a change point, at least.
    pub min_runs: usize,
    /// A split is confirmed when the t-test's two-sided p-value is below this (divided by the
    /// candidates it was chosen from).
    pub alpha: f64,
    /// How the split of a segment is proposed.
    pub split: Split,
}

/// How the split of a segment is proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Where the two sides' means differ most, weighted by their sizes (the likelihood ratio of
    /// one mean shift in normal noise): the default, the more exact place of a step.
    Mean,
    /// Where the energy statistic (E-divisive means) is largest: sensitive to any change of
    /// distribution, but placing a step less exactly in noise (docs/history.md has the study).
    Energy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_runs: 3,
            alpha: 0.01,
            split: Split::Mean,
        }
    }
}

/// The runs of one level: `start..end` (indices of the series), their geometric mean.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Level {
    pub start: usize,
    pub end: usize,
    pub geo_mean: f64,
}

/// One change of level.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Shift {
    /// The index of the first run at the new level.
    pub at: usize,
    pub before: Level,
    pub after: Level,
    /// New level over old (geometric means of the clipped values), with its 95% CI.
    pub ratio: f64,
    pub ratio_lo: f64,
    pub ratio_hi: f64,
    /// The t-test's two-sided p-value.
    pub p_value: f64,
}

/// The change points of `values` (positive numbers, oldest first), oldest first. A value that
/// is not a positive finite number is a caller's error: such series are cleaned before.
pub fn detect(values: &[f64], cfg: &Config) -> Vec<Shift> {
    let logs: Vec<f64> = values
        .iter()
        .map(|v| v.max(f64::MIN_POSITIVE).ln())
        .collect();
    let m = cfg.min_runs.max(2);
    if logs.len() < 2 * m {
        return Vec::new();
    }
    let y = clipped(&logs, 3.0 * noise_sd(&logs));
    let propose = Proposer::new(&y, cfg.split);
    // A point's level: alpha over the candidates its split was chosen from.
    let level = |a: usize, b: usize| cfg.alpha / (b - a + 1).saturating_sub(2 * m).max(1) as f64;
    let mut points: Vec<usize> = Vec::new();
    let mut todo = vec![(0, y.len())];
    while let Some((a, b)) = todo.pop() {
        let Some(Proposal {
            start,
            end,
            candidates,
        }) = propose.best(a, b, m)
        else {
            continue;
        };
        let inside = &y[start..end];
        let outside: Vec<f64> = y[a..start].iter().chain(&y[end..b]).copied().collect();
        if welch(&outside, inside).p_value < cfg.alpha / candidates as f64 {
            let mut cuts = vec![a];
            cuts.extend([start, end].into_iter().filter(|&c| c > a && c < b));
            cuts.push(b);
            points.extend(&cuts[1..cuts.len() - 1]);
            todo.extend(cuts.windows(2).map(|w| (w[0], w[1])));
        }
    }
    points.sort_unstable();
    // Each point again between its neighbours: a split confirmed inside a long segment may not
    // stand once the segment is cut elsewhere.
    loop {
        let bounds = |k: usize| {
            let lo = if k == 0 { 0 } else { points[k - 1] };
            (lo, points.get(k + 1).copied().unwrap_or(y.len()))
        };
        let tests: Vec<Welch> = (0..points.len())
            .map(|k| {
                let (lo, hi) = bounds(k);
                welch(&y[lo..points[k]], &y[points[k]..hi])
            })
            .collect();
        // The weakest point that no longer stands: the largest p-value against its level.
        let weakest = tests
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let (lo, hi) = bounds(k);
                (k, w.p_value / level(lo, hi))
            })
            .filter(|&(_, excess)| excess >= 1.0)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(k, _)| k);
        match weakest {
            Some(k) => {
                points.remove(k);
            }
            None => {
                return points
                    .iter()
                    .zip(tests)
                    .enumerate()
                    .map(|(k, (&at, w))| {
                        let (lo, hi) = bounds(k);
                        Shift {
                            at,
                            before: Level {
                                start: lo,
                                end: at,
                                geo_mean: w.mean_a.exp(),
                            },
                            after: Level {
                                start: at,
                                end: hi,
                                geo_mean: w.mean_b.exp(),
                            },
                            ratio: w.diff.exp(),
                            ratio_lo: (w.diff - w.half_width).exp(),
                            ratio_hi: (w.diff + w.half_width).exp(),
                            p_value: w.p_value,
                        }
                    })
                    .collect();
            }
        }
    }
}

/// Proposes the split of a segment.
enum Proposer {
    Mean { prefix: Vec<f64> },
    Energy(Distances),
}

impl Proposer {
    fn new(y: &[f64], split: Split) -> Proposer {
        match split {
            Split::Mean => {
                let mut prefix = vec![0.0; y.len() + 1];
                for (i, v) in y.iter().enumerate() {
                    prefix[i + 1] = prefix[i] + v;
                }
                Proposer::Mean { prefix }
            }
            Split::Energy => Proposer::Energy(Distances::new(y)),
        }
    }

    /// The best proposal for `a..b`, each piece at least `m` long: an interval against the
    /// rest of the segment (circular binary segmentation, so that a step up and back down is
    /// seen as one change, not hidden in the average of the whole), or for the energy
    /// statistic a split in two.
    fn best(&self, a: usize, b: usize, m: usize) -> Option<Proposal> {
        if b - a < 2 * m {
            return None;
        }
        match self {
            Proposer::Mean { prefix } => {
                // Every interval `start..end` of at least `m` runs with at least `m` outside it
                // (not the whole segment), in the order start, then end: for each start, the
                // ends that leave `m` or more after it, then the segment's end where `m` or
                // more lie before the start. Each interval's score is its mean's distance from
                // the rest's, times sqrt(n_in · n_out / n); the first of the highest wins.
                let len = b - a;
                let n = len as f64;
                let total = prefix[b] - prefix[a];
                // The weight depends on the interval's length only: once a length, not once
                // an interval (the same operations, the same values).
                let weight: Vec<f64> = (0..=len)
                    .map(|k| (k as f64 * (len - k) as f64 / n).sqrt())
                    .collect();
                let score = |start: usize, end: usize| {
                    let k = end - start;
                    let (n_in, n_out) = (k as f64, (len - k) as f64);
                    let sum_in = prefix[end] - prefix[start];
                    let diff = sum_in / n_in - (total - sum_in) / n_out;
                    diff.abs() * weight[k]
                };
                let mut scores = vec![0.0; len];
                let mut best: Option<(f64, usize, usize)> = None;
                let mut candidates = 0usize;
                for start in (a..=b - m).filter(|&s| s == a || s - a >= m) {
                    // Ends inside the segment: a plain loop over a slice, which the compiler
                    // runs several ends at a time; the highest is then looked for.
                    let (lo, hi) = (start + m, b - m);
                    if lo <= hi {
                        let row = &mut scores[..=hi - lo];
                        for (j, out) in row.iter_mut().enumerate() {
                            *out = score(start, lo + j);
                        }
                        candidates += row.len();
                        // Only a row whose highest beats the best so far is searched for where
                        // that highest first is (a rare event after the first rows).
                        let highest = highest(row);
                        if best.is_none_or(|(s, _, _)| highest > s) {
                            if let Some(j) = row.iter().position(|&sc| sc == highest) {
                                best = Some((highest, start, lo + j));
                            }
                        }
                    }
                    if start - a >= m {
                        candidates += 1;
                        let sc = score(start, b);
                        if best.is_none_or(|(s, _, _)| sc > s) {
                            best = Some((sc, start, b));
                        }
                    }
                }
                best.map(|(_, start, end)| Proposal {
                    start,
                    end,
                    candidates,
                })
            }
            Proposer::Energy(d) => {
                let score = |t: usize| -> f64 {
                    let (n1, n2) = ((t - a) as f64, (b - t) as f64);
                    let between = 2.0 * d.sum(a, t, t, b) / (n1 * n2);
                    // Over ordered pairs (each unordered pair twice) of a side with itself.
                    let within_a = d.sum(a, t, a, t) / (n1 * (n1 - 1.0));
                    let within_b = d.sum(t, b, t, b) / (n2 * (n2 - 1.0));
                    n1 * n2 / (n1 + n2) * (between - within_a - within_b)
                };
                (a + m..=b - m)
                    .max_by(|&s, &t| score(s).total_cmp(&score(t)).then(t.cmp(&s)))
                    .map(|t| Proposal {
                        start: t,
                        end: b,
                        candidates: b + 1 - a - 2 * m,
                    })
            }
        }
    }
}

/// The highest of `values` (none NaN; negative infinity for none), eight lanes at a time so that
/// the compiler can keep them in vector registers.
fn highest(values: &[f64]) -> f64 {
    let mut lanes = [f64::NEG_INFINITY; 8];
    let chunks = values.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = if v > *lane { v } else { *lane };
        }
    }
    lanes
        .into_iter()
        .chain(rest.iter().copied())
        .fold(f64::NEG_INFINITY, |m, v| if v > m { v } else { m })
}

/// A proposed change: the interval `start..end` differs from the rest of its segment (a split
/// in two when it reaches an end), chosen from `candidates`.
struct Proposal {
    start: usize,
    end: usize,
    candidates: usize,
}

/// Sums of |y_i − y_j| over rectangles of index pairs, in constant time each (a 2-D prefix sum).
struct Distances {
    n: usize,
    /// `prefix[i * (n + 1) + j]` = Σ_{p < i, q < j} |y_p − y_q|.
    prefix: Vec<f64>,
}

impl Distances {
    fn new(y: &[f64]) -> Distances {
        let n = y.len();
        let w = n + 1;
        let mut prefix = vec![0.0; w * w];
        for i in 0..n {
            let mut row = 0.0;
            for j in 0..n {
                row += (y[i] - y[j]).abs();
                prefix[(i + 1) * w + j + 1] = prefix[i * w + j + 1] + row;
            }
        }
        Distances { n, prefix }
    }

    /// Σ |y_p − y_q| for p in `p0..p1`, q in `q0..q1`.
    fn sum(&self, p0: usize, p1: usize, q0: usize, q1: usize) -> f64 {
        let w = self.n + 1;
        let at = |i: usize, j: usize| self.prefix[i * w + j];
        at(p1, q1) - at(p0, q1) - at(p1, q0) + at(p0, q0)
    }
}

/// Welch's t-test of two samples of logs (outliers clipped): their means, the difference with
/// the half-width of its 95% CI, and the two-sided p-value.
#[derive(Debug, Clone, Copy)]
struct Welch {
    mean_a: f64,
    mean_b: f64,
    diff: f64,
    half_width: f64,
    p_value: f64,
}

fn welch(a: &[f64], b: &[f64]) -> Welch {
    let (ma, va) = mean_var(a);
    let (mb, vb) = mean_var(b);
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let se2 = va / na + vb / nb;
    let diff = mb - ma;
    // Below a millionth the difference is rounding (the same value summed in another order),
    // not a shift.
    if diff.abs() < 1e-6 {
        return Welch {
            mean_a: ma,
            mean_b: mb,
            diff,
            half_width: 0.0,
            p_value: 1.0,
        };
    }
    if se2 <= 0.0 {
        // Both sides constant: a shift is certain when the levels differ, absent when not.
        return Welch {
            mean_a: ma,
            mean_b: mb,
            diff,
            half_width: 0.0,
            p_value: if diff == 0.0 { 1.0 } else { 0.0 },
        };
    }
    let se = se2.sqrt();
    let df = se2 * se2
        / ((va / na).powi(2) / (na - 1.0).max(1.0) + (vb / nb).powi(2) / (nb - 1.0).max(1.0));
    let (p_value, t975) = match StudentsT::new(0.0, 1.0, df.max(1.0)) {
        Ok(t) => (2.0 * (1.0 - t.cdf((diff / se).abs())), t.inverse_cdf(0.975)),
        Err(_) => (1.0, f64::INFINITY),
    };
    Welch {
        mean_a: ma,
        mean_b: mb,
        diff,
        half_width: t975 * se,
        p_value,
    }
}

/// The run-to-run noise of a series of logs, robust to steps and outliers: the median absolute
/// difference of successive values, scaled to a normal standard deviation (1.4826 / √2).
fn noise_sd(y: &[f64]) -> f64 {
    let d: Vec<f64> = y.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    super::stats::median(&d) * 1.4826 / std::f64::consts::SQRT_2
}

/// The values clipped to the median of their five neighbours (themselves included) ± `bound`:
/// an outlier is cut down to the noise, a step (which moves the neighbours' median with it) is
/// left as it is. Unchanged when the bound is zero.
fn clipped(xs: &[f64], bound: f64) -> Vec<f64> {
    if bound <= 0.0 {
        return xs.to_vec();
    }
    (0..xs.len())
        .map(|i| {
            let window = &xs[i.saturating_sub(2)..(i + 3).min(xs.len())];
            let med = super::stats::median(window);
            xs[i].clamp(med - bound, med + bound)
        })
        .collect()
}

fn mean_var(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 {
        xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn noisy(levels: &[(usize, f64)], noise: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        levels
            .iter()
            .flat_map(|&(n, level)| std::iter::repeat_n(level, n))
            .map(|l| l * (1.0 + noise * rng.normal()))
            .collect()
    }

    /// The proposal as first written: every pair of ends tried and filtered one by one.
    fn best_interval_by_every_pair(
        y: &[f64],
        a: usize,
        b: usize,
        m: usize,
    ) -> (usize, usize, usize) {
        let mut prefix = vec![0.0; y.len() + 1];
        for (i, v) in y.iter().enumerate() {
            prefix[i + 1] = prefix[i] + v;
        }
        let n = (b - a) as f64;
        let total = prefix[b] - prefix[a];
        let mut best: Option<(f64, usize, usize)> = None;
        let mut candidates = 0usize;
        for start in a..=b - m {
            if start > a && start - a < m {
                continue;
            }
            for end in start + m..=b {
                let outer = (start - a) + (b - end);
                if outer < m || (end < b && b - end < m) || (start == a && end == b) {
                    continue;
                }
                candidates += 1;
                let n_in = (end - start) as f64;
                let n_out = n - n_in;
                let sum_in = prefix[end] - prefix[start];
                let diff = sum_in / n_in - (total - sum_in) / n_out;
                let score = diff.abs() * (n_in * n_out / n).sqrt();
                if best.is_none_or(|(s, _, _)| score > s) {
                    best = Some((score, start, end));
                }
            }
        }
        let (_, start, end) = best.unwrap();
        (start, end, candidates)
    }

    #[test]
    fn the_proposal_is_the_one_every_pair_finds() {
        let mut rng = Rng::new(11);
        for seed in 0..40 {
            let len = 6 + (seed * 7) % 90;
            let mut y: Vec<f64> = (0..len).map(|_| rng.normal()).collect();
            // Steps, a spike and runs of equal values (ties) among them.
            if seed % 3 == 0 {
                y[len / 3..].iter_mut().for_each(|v| *v += 2.0);
            }
            if seed % 4 == 1 {
                y.iter_mut().take(len / 2).for_each(|v| *v = 0.5);
            }
            let proposer = Proposer::new(&y, Split::Mean);
            for m in [2, 3, 5] {
                for (a, b) in [(0, len), (1, len), (len / 4, len - len / 5)] {
                    let Some(p) = proposer.best(a, b, m) else {
                        assert!(b - a < 2 * m, "seed {seed} m {m} {a}..{b}");
                        continue;
                    };
                    assert_eq!(
                        (p.start, p.end, p.candidates),
                        best_interval_by_every_pair(&y, a, b, m),
                        "seed {seed} m {m} {a}..{b}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_flat_series_has_no_change_point() {
        for seed in 0..20 {
            let s = noisy(&[(60, 1.0)], 0.03, seed);
            assert!(detect(&s, &Config::default()).is_empty(), "seed {seed}");
        }
    }

    #[test]
    fn a_step_is_found_where_it_is_with_its_size() {
        let s = noisy(&[(30, 1.0), (30, 1.10)], 0.02, 7);
        let found = detect(&s, &Config::default());
        assert_eq!(found.len(), 1, "{found:?}");
        let f = found[0];
        assert!((29..=31).contains(&f.at), "{f:?}");
        assert!(f.ratio_lo < 1.10 && 1.10 < f.ratio_hi, "{f:?}");
        assert_eq!((f.before.start, f.after.end), (0, 60));
    }

    #[test]
    fn two_steps_and_an_outlier() {
        let mut s = noisy(&[(25, 1.0), (25, 0.8), (25, 1.2)], 0.02, 3);
        s[10] *= 3.0; // one run on a busy machine
        let found = detect(&s, &Config::default());
        let at: Vec<usize> = found.iter().map(|f| f.at).collect();
        assert_eq!(at.len(), 2, "{found:?}");
        assert!(
            (24..=26).contains(&at[0]) && (49..=51).contains(&at[1]),
            "{at:?}"
        );
        assert!(found[0].ratio < 1.0 && found[1].ratio > 1.0);
    }

    #[test]
    fn short_and_constant_series() {
        assert!(detect(&[1.0, 2.0, 3.0], &Config::default()).is_empty());
        // The same value many times: rounding in the sums is no shift.
        assert!(detect(&[0.000167392; 300], &Config::default()).is_empty());
        let f = detect(&[1.0, 1.0, 1.0, 2.0, 2.0, 2.0], &Config::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].at, 3);
        assert_eq!(f[0].ratio, 2.0);
    }
}
