//! Timing: warm-up, then interleaved before/after pairs in random order until both medians'
//! confidence intervals are tight or a cap is reached, with an optional cache flush before every
//! sample. Raw samples are kept.

pub mod callgrind;
pub mod changes;
pub mod counts;
pub mod stats;

use crate::backend::pair::{Pair, Side};
use crate::error::Result;
use crate::kinds::Tensors;
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// How samples are taken. Recorded in every result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MeasureConfig {
    /// Untimed runs of each variant first (page faults, frequency ramp).
    pub warmup_runs: usize,
    pub min_pairs: usize,
    pub max_pairs: usize,
    /// Wall-clock cap of one case's sampling, flushes included.
    pub time_cap_secs: f64,
    /// Stop once both medians' CI half-widths are within this fraction of the median.
    pub target_rel_ci: f64,
    /// Flush caches before every sample (cold) or not (warm).
    pub cold: bool,
    pub bootstrap_resamples: usize,
    pub seed: u64,
}

impl Default for MeasureConfig {
    fn default() -> Self {
        MeasureConfig {
            warmup_runs: 2,
            min_pairs: 10,
            max_pairs: 200,
            time_cap_secs: 3.0,
            target_rel_ci: 0.01,
            cold: true,
            bootstrap_resamples: 2000,
            seed: 0x0_1ed6e7,
        }
    }
}

/// Why sampling stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Both medians' confidence intervals reached the target width.
    Ci,
    /// The most pairs allowed were taken.
    MaxPairs,
    /// The time cap was reached.
    TimeCap,
}

/// Raw samples of a before/after comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairSamples {
    pub before_secs: Vec<f64>,
    pub after_secs: Vec<f64>,
    /// For each pair, whether `after` ran first.
    pub after_first: Vec<bool>,
    /// Why sampling stopped.
    pub stop_reason: StopReason,
    pub wall_secs: f64,
}

/// Measures `before` and `after` of a prepared case. The checked pair runs on `check_inputs`
/// (the same tensors, another seed's values), which both sides keep from then on.
/// `progress(pairs_done)` is called after each pair.
pub fn measure_pairs(
    case: &mut dyn Pair,
    cfg: &MeasureConfig,
    check_inputs: Arc<Tensors>,
    mut progress: impl FnMut(usize),
) -> Result<PairSamples> {
    let start = Instant::now();
    for _ in 0..cfg.warmup_runs.max(1) {
        case.run_timed(Side::Before)?;
        case.run_timed(Side::After)?;
    }
    let mut rng = Rng::new(cfg.seed ^ 0x5eed);
    let mut s = PairSamples {
        before_secs: Vec::new(),
        after_secs: Vec::new(),
        after_first: Vec::new(),
        stop_reason: StopReason::MaxPairs,
        wall_secs: 0.0,
    };
    let min_pairs = cfg.min_pairs.max(3);
    let max_pairs = cfg.max_pairs.max(min_pairs);
    // The output that is checked comes from a timed pair chosen at random (among those that
    // always run), on inputs new to both sides, into outputs filled with NaN just before it: a
    // kernel that writes only on its first launch, or answers with a result of an earlier
    // call, fails the check.
    let checked = Rng::new(cfg.seed ^ 0xc4ec_ced0).below(min_pairs);
    let mut check_inputs = Some(check_inputs);
    while s.before_secs.len() < max_pairs {
        let is_checked = s.before_secs.len() == checked;
        if is_checked {
            if let Some(inputs) = check_inputs.take() {
                case.refresh_inputs(inputs)?;
                // Untimed: what is new (buffers made again, pages touched first) is not timed.
                case.run_timed(Side::Before)?;
                case.run_timed(Side::After)?;
            }
            case.poison_output(Side::Before)?;
            case.poison_output(Side::After)?;
        }
        let after_first = rng.next_u64() & 1 == 1;
        let order = if after_first {
            [Side::After, Side::Before]
        } else {
            [Side::Before, Side::After]
        };
        let mut times = [0.0; 2];
        for (slot, v) in order.iter().enumerate() {
            if cfg.cold {
                case.flush_caches();
            }
            times[slot] = case.run_timed(*v)?;
        }
        if is_checked {
            case.keep_output(Side::Before)?;
            case.keep_output(Side::After)?;
        }
        let (tb, ta) = if after_first {
            (times[1], times[0])
        } else {
            (times[0], times[1])
        };
        s.before_secs.push(tb);
        s.after_secs.push(ta);
        s.after_first.push(after_first);
        let n = s.before_secs.len();
        progress(n);
        if n >= min_pairs {
            if start.elapsed().as_secs_f64() >= cfg.time_cap_secs {
                s.stop_reason = StopReason::TimeCap;
                break;
            }
            // A cheaper bootstrap for the stopping decision; the reported CIs use the full one.
            let tight = |xs: &[f64]| {
                stats::median_ci(xs, 300, cfg.seed).rel_half_width() <= cfg.target_rel_ci
            };
            if tight(&s.before_secs) && tight(&s.after_secs) {
                s.stop_reason = StopReason::Ci;
                break;
            }
        }
    }
    s.wall_secs = start.elapsed().as_secs_f64();
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A fake case whose timings are scripted, to test the loop's bookkeeping.
    struct Scripted {
        runs: Vec<Side>,
        flushes: usize,
        /// How many runs had been made when the inputs were replaced, and with what.
        refreshed: Option<(usize, Arc<Tensors>)>,
        /// Runs made since the last poisoning, per side, and whether the one after it is kept.
        poisoned: Vec<Side>,
        kept: Vec<Side>,
    }

    impl Scripted {
        fn new() -> Self {
            Scripted {
                runs: vec![],
                flushes: 0,
                refreshed: None,
                poisoned: vec![],
                kept: vec![],
            }
        }
        /// The timed runs, without the untimed ones of the warm-up and the two made right
        /// after the inputs were replaced.
        fn timed(&self, warmup_runs: usize) -> Vec<Side> {
            let mut runs = self.runs.clone();
            if let Some((at, _)) = &self.refreshed {
                runs.drain(*at..*at + 2);
            }
            runs.split_off(2 * warmup_runs)
        }
    }

    impl Pair for Scripted {
        fn run_timed(&mut self, side: Side) -> Result<f64> {
            self.runs.push(side);
            Ok(if side == Side::Before { 2.0 } else { 1.0 })
        }
        fn flush_caches(&mut self) {
            self.flushes += 1;
        }
        fn output(&self, _: Side) -> Result<Cow<'_, [f32]>> {
            Ok(Cow::Owned(Vec::new()))
        }
        fn refresh_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()> {
            assert!(self.refreshed.is_none(), "the inputs are replaced once");
            self.refreshed = Some((self.runs.len(), inputs));
            Ok(())
        }
        fn poison_output(&mut self, side: Side) -> Result<()> {
            self.poisoned.push(side);
            Ok(())
        }
        fn keep_output(&mut self, side: Side) -> Result<()> {
            self.kept.push(side);
            Ok(())
        }
    }

    fn check_inputs() -> Arc<Tensors> {
        let mut t = Tensors::new();
        t.put("x", crate::kinds::tensors::LineVec::filled(4, 2.0));
        Arc::new(t)
    }

    #[test]
    fn pairs_are_interleaved_in_random_order_and_stop_on_tight_ci() {
        let mut c = Scripted::new();
        let cfg = MeasureConfig {
            min_pairs: 8,
            ..MeasureConfig::default()
        };
        let s = measure_pairs(&mut c, &cfg, check_inputs(), |_| {}).unwrap();
        // Constant timings: the CI is zero-width, so it stops at min_pairs.
        assert_eq!(s.stop_reason, StopReason::Ci);
        assert_eq!(s.before_secs.len(), 8);
        assert!(s.before_secs.iter().all(|&t| t == 2.0));
        assert!(s.after_secs.iter().all(|&t| t == 1.0));
        assert_eq!(c.flushes, 16);
        // Both orders occur, and the recorded order matches the run order.
        assert!(s.after_first.iter().any(|&b| b) && s.after_first.iter().any(|&b| !b));
        let timed = c.timed(cfg.warmup_runs);
        assert_eq!(timed.len(), 16);
        for (i, &af) in s.after_first.iter().enumerate() {
            assert_eq!(timed[2 * i] == Side::After, af);
        }
    }

    #[test]
    fn the_checked_pair_runs_on_the_new_inputs_into_poisoned_outputs() {
        for seed in 0..20u64 {
            let mut c = Scripted::new();
            let cfg = MeasureConfig {
                min_pairs: 6,
                seed,
                ..MeasureConfig::default()
            };
            measure_pairs(&mut c, &cfg, check_inputs(), |_| {}).unwrap();
            let (at, inputs) = c.refreshed.clone().expect("the inputs were replaced");
            assert_eq!(inputs.get("x"), &[2.0; 4]);
            // After the warm-up, on a pair boundary, among the pairs that always run.
            assert!(at >= 2 * cfg.warmup_runs && (at - 2 * cfg.warmup_runs).is_multiple_of(2));
            let pair = (at - 2 * cfg.warmup_runs) / 2;
            assert!(pair < cfg.min_pairs, "seed {seed}: pair {pair}");
            assert_eq!(c.poisoned, [Side::Before, Side::After]);
            assert_eq!(c.kept, [Side::Before, Side::After]);
        }
    }

    #[test]
    fn warm_mode_does_not_flush_and_max_pairs_caps() {
        let mut c = Scripted::new();
        let cfg = MeasureConfig {
            cold: false,
            min_pairs: 3,
            max_pairs: 3,
            target_rel_ci: -1.0,
            ..MeasureConfig::default()
        };
        let s = measure_pairs(&mut c, &cfg, check_inputs(), |_| {}).unwrap();
        assert_eq!(c.flushes, 0);
        assert_eq!(s.before_secs.len(), 3);
        assert_eq!(s.stop_reason, StopReason::MaxPairs);
    }
}
