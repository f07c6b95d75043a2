//! Statistics of timing samples: medians, percentile-bootstrap confidence intervals (fixed seed,
//! so a result file always re-derives to the same numbers), paired ratios for savings and
//! independent ratios for baseline comparisons.

use crate::device::Ceilings;
use crate::rng::Rng;
use serde::{Deserialize, Serialize};

/// Confidence level of every interval opledger reports.
pub const CONFIDENCE: f64 = 0.95;

/// Median of a non-empty slice (mean of the two middle values for even lengths).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    median_in_place(&mut v)
}

fn median_in_place(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Each roof's median over several probes of one device (`None` for none): the machine state
/// of runs taken together, as a calibration's baseline records it. One probe that read a roof
/// half as high (seen on a virtual machine) or a triad far above the others' does not become
/// that state; the last probe could.
pub fn median_ceilings(all: &[Ceilings]) -> Option<Ceilings> {
    let first = all.first()?;
    let of = |f: &dyn Fn(&Ceilings) -> Option<f64>| {
        let v: Vec<f64> = all.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| median(&v))
    };
    Some(Ceilings {
        copy_bytes_per_sec: of(&|c| Some(c.copy_bytes_per_sec))?,
        triad_bytes_per_sec: of(&|c| Some(c.triad_bytes_per_sec))?,
        fma_flops_per_sec: of(&|c| Some(c.fma_flops_per_sec))?,
        tensor_flops_per_sec: of(&|c| c.tensor_flops_per_sec),
        ..*first
    })
}

/// Linear-interpolated quantile of sorted data.
fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let pos = q * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// A point estimate with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Estimate {
    pub point: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Estimate {
    /// Half the interval's width relative to the point (0.01 = ±1%).
    pub fn rel_half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0 / self.point.abs().max(f64::MIN_POSITIVE)
    }
}

fn percentile_interval(mut stats: Vec<f64>, point: f64) -> Estimate {
    stats.sort_by(f64::total_cmp);
    let alpha = (1.0 - CONFIDENCE) / 2.0;
    Estimate {
        point,
        lo: quantile_sorted(&stats, alpha),
        hi: quantile_sorted(&stats, 1.0 - alpha),
    }
}

/// Bootstrap CI of the median of `xs`.
pub fn median_ci(xs: &[f64], resamples: usize, seed: u64) -> Estimate {
    let mut rng = Rng::new(seed);
    let mut buf = vec![0.0; xs.len()];
    let stats = (0..resamples)
        .map(|_| {
            for b in buf.iter_mut() {
                *b = xs[rng.below(xs.len())];
            }
            median_in_place(&mut buf)
        })
        .collect();
    percentile_interval(stats, median(xs))
}

/// A statistic of the two medians over interleaved pairs, with a paired bootstrap CI: pairs are
/// resampled together, so drift shared by both members of a pair cancels.
fn paired_ci(
    before: &[f64],
    after: &[f64],
    resamples: usize,
    seed: u64,
    stat: impl Fn(f64, f64) -> f64,
) -> Estimate {
    let n = before.len().min(after.len());
    let mut rng = Rng::new(seed);
    let (mut b, mut a) = (vec![0.0; n], vec![0.0; n]);
    let stats = (0..resamples)
        .map(|_| {
            for j in 0..n {
                let i = rng.below(n);
                b[j] = before[i];
                a[j] = after[i];
            }
            stat(median_in_place(&mut b), median_in_place(&mut a))
        })
        .collect();
    percentile_interval(stats, stat(median(&before[..n]), median(&after[..n])))
}

/// Saving 1 − median(after)/median(before) over interleaved pairs, paired bootstrap CI.
pub fn paired_saving_ci(before: &[f64], after: &[f64], resamples: usize, seed: u64) -> Estimate {
    paired_ci(before, after, resamples, seed, |b, a| 1.0 - a / b)
}

/// Difference median(before) − median(after) over interleaved pairs, paired bootstrap CI.
pub fn paired_difference_ci(
    before: &[f64],
    after: &[f64],
    resamples: usize,
    seed: u64,
) -> Estimate {
    paired_ci(before, after, resamples, seed, |b, a| b - a)
}

/// Ratio median(new)/median(base) of two independent sample sets, with a bootstrap CI.
pub fn ratio_ci(new: &[f64], base: &[f64], resamples: usize, seed: u64) -> Estimate {
    let mut rng = Rng::new(seed);
    let (mut n, mut b) = (vec![0.0; new.len()], vec![0.0; base.len()]);
    let stats = (0..resamples)
        .map(|_| {
            for x in n.iter_mut() {
                *x = new[rng.below(new.len())];
            }
            for x in b.iter_mut() {
                *x = base[rng.below(base.len())];
            }
            median_in_place(&mut n) / median_in_place(&mut b)
        })
        .collect();
    percentile_interval(stats, median(new) / median(base))
}

/// Summary of one variant's samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    pub n: usize,
    pub median_secs: f64,
    pub ci_lo_secs: f64,
    pub ci_hi_secs: f64,
    pub min_secs: f64,
    pub max_secs: f64,
    /// Median absolute deviation relative to the median: the noise of the machine.
    pub rel_mad: f64,
}

/// The median absolute deviation around the median (unscaled): the robust spread every noise
/// figure of the tool is built on.
pub fn mad(xs: &[f64]) -> f64 {
    let m = median(xs);
    median(&xs.iter().map(|x| (x - m).abs()).collect::<Vec<_>>())
}

pub fn summarize(xs: &[f64], resamples: usize, seed: u64) -> Summary {
    let ci = median_ci(xs, resamples, seed);
    Summary {
        n: xs.len(),
        median_secs: ci.point,
        ci_lo_secs: ci.lo,
        ci_hi_secs: ci.hi,
        min_secs: xs.iter().copied().fold(f64::INFINITY, f64::min),
        max_secs: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        rel_mad: mad(xs) / ci.point,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_quantiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(quantile_sorted(&[0.0, 10.0], 0.25), 2.5);
    }

    #[test]
    fn median_ci_brackets_the_median_and_is_reproducible() {
        let mut r = Rng::new(3);
        let xs: Vec<f64> = (0..101).map(|_| 1.0 + r.next_f64()).collect();
        let e = median_ci(&xs, 500, 1);
        assert!(e.lo <= e.point && e.point <= e.hi, "{e:?}");
        assert!(e.hi - e.lo < 0.3);
        assert_eq!(e, median_ci(&xs, 500, 1));
    }

    #[test]
    fn paired_saving_of_half_speed_is_half() {
        let mut r = Rng::new(5);
        let before: Vec<f64> = (0..60).map(|_| 2.0 + 0.1 * r.next_f64()).collect();
        // Shared drift per pair: the paired CI stays tight.
        let after: Vec<f64> = before.iter().map(|b| b * 0.5).collect();
        let s = paired_saving_ci(&before, &after, 400, 2);
        assert!(
            (s.point - 0.5).abs() < 1e-12
                && (s.lo - 0.5).abs() < 1e-12
                && (s.hi - 0.5).abs() < 1e-12,
            "{s:?}"
        );
    }

    #[test]
    fn ratio_ci_detects_a_slowdown() {
        let mut r = Rng::new(9);
        let base: Vec<f64> = (0..50).map(|_| 1.0 + 0.02 * r.next_f64()).collect();
        let new: Vec<f64> = (0..50).map(|_| 1.2 + 0.02 * r.next_f64()).collect();
        let e = ratio_ci(&new, &base, 500, 4);
        assert!(e.lo > 1.15 && e.hi < 1.25, "{e:?}");
    }

    #[test]
    fn summary_fields() {
        let s = summarize(&[1.0, 2.0, 3.0, 4.0, 100.0], 200, 1);
        assert_eq!(s.n, 5);
        assert_eq!(s.median_secs, 3.0);
        assert_eq!(s.min_secs, 1.0);
        assert_eq!(s.max_secs, 100.0);
        assert!((s.rel_mad - 1.0 / 3.0).abs() < 1e-12);
    }

    /// Five calibration runs' probes, the last of which read half the FMA peak: the baseline's
    /// machine state is each roof's median, not the last probe's.
    #[test]
    fn the_median_of_several_probes_is_each_roofs_median() {
        let probe = |triad_gbps: f64, fma_gflops: f64| Ceilings {
            copy_bytes_per_sec: 45e9,
            triad_bytes_per_sec: triad_gbps * 1e9,
            fma_flops_per_sec: fma_gflops * 1e9,
            tensor_flops_per_sec: None,
            threads: 2,
            array_bytes: 64 << 20,
            stream_prefetch: None,
        };
        let runs = [
            probe(36.9, 226.7),
            probe(34.9, 229.2),
            probe(51.6, 230.0),
            probe(36.5, 228.8),
            probe(36.8, 117.3),
        ];
        let m = median_ceilings(&runs).unwrap();
        assert_eq!(m.fma_flops_per_sec, 228.8e9);
        assert_eq!(m.triad_bytes_per_sec, 36.8e9);
        assert_eq!(m.tensor_flops_per_sec, None);
        assert_eq!((m.threads, m.array_bytes), (2, 64 << 20));
        assert_eq!(
            median_ceilings(&runs[..2]).unwrap().fma_flops_per_sec,
            227.95e9
        );
        assert!(median_ceilings(&[]).is_none());
    }
}
