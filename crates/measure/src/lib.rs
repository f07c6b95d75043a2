//! Timing: warm-up, then interleaved before/after pairs in random order until both medians'
//! confidence intervals are tight or a cap is reached, with an optional cache flush before every
//! sample. Raw samples are kept.

pub mod callgrind;
pub mod changes;
pub mod counts;
pub mod ncu;
pub mod stats;

#[cfg(test)]
use opledger_model::values;
// The lower crates' modules, reached as `crate::…` in this crate's files.
use opledger_backend as backend;
use opledger_model::device;
use opledger_model::error;
use opledger_model::files;
use opledger_model::kinds;
use opledger_model::ledger;
use opledger_model::rng;
use opledger_model::settings;
use opledger_model::spec;
use opledger_model::stop;
use opledger_model::untrusted;

use crate::backend::pair::{Pair, Side};
use crate::error::Result;
use crate::kinds::Tensors;
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
            // 2 s: since the cold-cache flush reads at memory speed, a streaming case of the
            // shipped suite takes 20-40 pairs in it (10 in 3 s before; docs/performance.md).
            time_cap_secs: 2.0,
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
    /// The checked pair's times: the first runs on inputs new to both sides, into outputs
    /// filled with NaN, whose outputs are checked. Not among the samples (it pays what is new:
    /// first touches, a worker's set-up); a side whose checked run is far slower than its
    /// samples did its work elsewhere (`verdict::kept_result`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<CheckedPair>,
    /// A second checked pair on a third set of inputs, run only when the first was far slower
    /// than the samples on either side: a kept result is slow again, one unlucky run is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<CheckedPair>,
    /// The pairs right after the confirming one, on the same inputs, each side's fastest of
    /// three: what a run costs at that moment once nothing is new. An honest side
    /// takes about as long (the host's pace, which a virtual machine's host may halve for a
    /// while); a side that kept its result answers it from what it kept, as fast as its samples.
    /// The fastest of a few, so that one run another process preempted is not taken for a slow
    /// host and a kept result let pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated: Option<CheckedPair>,
    /// How each sample's caches were made cold (none: warm, or recorded before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_method: Option<crate::device::FlushMethod>,
}

/// One checked pair's times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckedPair {
    pub before_secs: f64,
    pub after_secs: f64,
}

/// How many times its samples' median a checked run may take before it is confirmed on fresh
/// inputs, and, confirmed, fails as a result kept across calls (docs/workers.md: what an honest
/// first run costs, measured).
pub const KEPT_RESULT_FACTOR: f64 = 3.0;
/// And by at least this much: the first touches of a small case's new buffers cost a few
/// hundred microseconds, whatever its kernel takes.
pub const KEPT_RESULT_MIN_SECS: f64 = 250e-6;
/// How many pairs run on the confirming inputs after the confirming pair, each side's fastest
/// kept ([`PairSamples::repeated`]).
pub const REPEATED_PAIRS: usize = 3;

/// Reads the checked pair's outputs from the case as soon as it ran ([`measure_pairs`]).
pub type CheckNow<'a> = &'a mut dyn FnMut(&dyn Pair) -> Result<()>;

/// Measures `before` and `after` of a prepared case. The checked pair runs on `check_inputs()`
/// (the same tensors, another seed's values), which both sides keep from then on; where either
/// side's checked run took more than [`KEPT_RESULT_FACTOR`] times its median, a second checked
/// pair runs on `confirm_inputs()`. `progress(pairs_done)` is called after each pair.
///
/// The checked inputs are made when the checked pair comes, after the case let go of its own
/// ([`Pair::release_inputs`]): one set of inputs in memory at a time. Their making is not
/// counted against the time cap (it was made before the samples began, and the cap is the
/// samples').
///
/// The checked pair's outputs are read by `check_now` as soon as it ran where the case holds a
/// run's output at once ([`Pair::outputs_at_once`]); otherwise (or without `check_now`) each
/// side keeps them ([`Pair::keep_output`]) for a check after the samples. Checked at once, a
/// case holds no copies of its outputs: on a 256 MiB tensor, half a gigabyte less memory to
/// fault in.
pub fn measure_pairs(
    case: &mut dyn Pair,
    cfg: &MeasureConfig,
    check_inputs: impl FnOnce() -> Arc<Tensors>,
    confirm_inputs: impl FnOnce() -> Arc<Tensors>,
    mut check_now: Option<CheckNow<'_>>,
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
        checked: None,
        confirmed: None,
        repeated: None,
        flush_method: cfg.cold.then(|| case.flush_method()),
    };
    let min_pairs = cfg.min_pairs.max(3);
    let max_pairs = cfg.max_pairs.max(min_pairs);
    // The checked pair runs at a place chosen at random among the pairs that always run.
    let checked_at = Rng::new(cfg.seed ^ 0xc4ec_ced0).below(min_pairs);
    let mut pending = Some(check_inputs);
    let mut checked_inputs = None;
    // Time spent making the checked inputs, left out of the cap's count.
    let mut making = Duration::ZERO;
    while s.before_secs.len() < max_pairs {
        if s.before_secs.len() == checked_at {
            if let Some(make) = pending.take() {
                case.release_inputs();
                let made = Instant::now();
                let inputs = make();
                making = made.elapsed();
                checked_inputs = Some(inputs.clone());
                let check = Checked::Keep(check_now.take());
                s.checked = Some(checked_pair(case, cfg, inputs, &mut rng, check)?);
            }
        }
        let (tb, ta, after_first) = timed_pair(case, cfg, &mut rng)?;
        s.before_secs.push(tb);
        s.after_secs.push(ta);
        s.after_first.push(after_first);
        let n = s.before_secs.len();
        progress(n);
        if n >= min_pairs {
            if start.elapsed().saturating_sub(making).as_secs_f64() >= cfg.time_cap_secs {
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
    if s.checked.is_some_and(|c| slow_checked(&s, &c)) {
        // The checked outputs stay the first pair's: this one only times a second first run.
        s.confirmed = Some(checked_pair(
            case,
            cfg,
            confirm_inputs(),
            &mut rng,
            Checked::TimedOnly,
        )?);
        let mut repeated = CheckedPair {
            before_secs: f64::INFINITY,
            after_secs: f64::INFINITY,
        };
        for _ in 0..REPEATED_PAIRS {
            let (before_secs, after_secs, _) = timed_pair(case, cfg, &mut rng)?;
            repeated.before_secs = repeated.before_secs.min(before_secs);
            repeated.after_secs = repeated.after_secs.min(after_secs);
        }
        s.repeated = Some(repeated);
        // Back on the checked inputs, whose outputs a worker answers from its last run.
        if let Some(inputs) = checked_inputs {
            case.refresh_inputs(inputs)?;
        }
        case.run_timed(Side::Before)?;
        case.run_timed(Side::After)?;
    }
    s.wall_secs = start.elapsed().as_secs_f64();
    Ok(s)
}

/// True when a first run on new inputs (`secs`) was slow against its side's samples' median:
/// more than [`KEPT_RESULT_FACTOR`] times it, and by more than [`KEPT_RESULT_MIN_SECS`]. The
/// one rule that asks for a confirming pair and that the `checked_run` check judges by.
pub fn slow_first_run(secs: f64, median_secs: f64) -> bool {
    secs > KEPT_RESULT_FACTOR * median_secs && secs - median_secs > KEPT_RESULT_MIN_SECS
}

/// True when a second counted call on the same inputs executed fewer than a
/// [`KEPT_RESULT_FACTOR`]th of the first's instructions (`first`, `again`): counts repeat, so an
/// honest function executes what it did (give or take an allocation), and one that kept its
/// result answers from it. The counts-mode twin of [`slow_first_run`].
pub fn kept_result_counted(first: u64, again: u64) -> bool {
    (again as f64) * KEPT_RESULT_FACTOR < first as f64
}

/// True when either side of `c` was slow against its samples ([`slow_first_run`]).
pub fn slow_checked(s: &PairSamples, c: &CheckedPair) -> bool {
    let slow =
        |checked: f64, xs: &[f64]| !xs.is_empty() && slow_first_run(checked, stats::median(xs));
    slow(c.before_secs, &s.before_secs) || slow(c.after_secs, &s.after_secs)
}

/// What a checked pair does with its outputs.
enum Checked<'a> {
    /// They are checked: by the callback at once where the case allows, else kept.
    Keep(Option<CheckNow<'a>>),
    /// Only its times count (a confirming pair: the check read the first one's outputs).
    TimedOnly,
}

/// A pair on `inputs`, new to both sides, into outputs filled with NaN.
fn checked_pair(
    case: &mut dyn Pair,
    cfg: &MeasureConfig,
    inputs: Arc<Tensors>,
    rng: &mut Rng,
    check: Checked<'_>,
) -> Result<CheckedPair> {
    case.refresh_inputs(inputs)?;
    let checked = matches!(check, Checked::Keep(_));
    if checked {
        case.poison_output(Side::Before)?;
        case.poison_output(Side::After)?;
    }
    let (before_secs, after_secs, _) = timed_pair(case, cfg, rng)?;
    match check {
        Checked::Keep(Some(check_now)) if case.outputs_at_once() => check_now(case)?,
        Checked::Keep(_) => {
            case.keep_output(Side::Before)?;
            case.keep_output(Side::After)?;
        }
        Checked::TimedOnly => {}
    }
    Ok(CheckedPair {
        before_secs,
        after_secs,
    })
}

/// One pair in random order, each side from cold caches when `cfg.cold`: (before, after,
/// whether after ran first).
fn timed_pair(case: &mut dyn Pair, cfg: &MeasureConfig, rng: &mut Rng) -> Result<(f64, f64, bool)> {
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
    Ok(if after_first {
        (times[1], times[0], true)
    } else {
        (times[0], times[1], false)
    })
}

/// The seed of the checked pair's inputs: another than the timed runs' before it (a counted
/// call computes on them too).
pub fn checked_seed(seed: u64) -> u64 {
    seed ^ 0x9e37_79b9_7f4a_7c15
}

/// The seed of the confirming checked pair's inputs: new to both sides again.
pub fn confirm_seed(seed: u64) -> u64 {
    seed ^ 0x3c6e_f372_fe94_f82b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A fake case whose timings are scripted, to test the loop's bookkeeping.
    struct Scripted {
        runs: Vec<Side>,
        flushes: usize,
        /// How many runs had been made when the inputs were replaced, and with what, each time.
        refreshed: Vec<(usize, Arc<Tensors>)>,
        /// Runs made since the last poisoning, per side, and whether the one after it is kept.
        poisoned: Vec<Side>,
        kept: Vec<Side>,
        /// A side's first run after new inputs takes ten times its others (a kept result).
        memoizes: bool,
        /// The first run after the confirming pair takes fifty times its others (another
        /// process had the core).
        preempted_once: bool,
        fresh: [bool; 2],
        /// Whether its outputs can be read as soon as a side ran (`Pair::outputs_at_once`).
        at_once: bool,
        /// The inputs' events in order (released, replaced), shared with a test's own.
        events: std::rc::Rc<std::cell::RefCell<Vec<&'static str>>>,
    }

    impl Scripted {
        fn new() -> Self {
            Scripted {
                runs: vec![],
                flushes: 0,
                refreshed: vec![],
                poisoned: vec![],
                kept: vec![],
                memoizes: false,
                preempted_once: false,
                fresh: [false; 2],
                at_once: false,
                events: Default::default(),
            }
        }
        /// The samples' runs: without the untimed ones of the warm-up and the checked pair's
        /// two, made right after the inputs were replaced.
        fn timed(&self, warmup_runs: usize) -> Vec<Side> {
            let mut runs = self.runs.clone();
            if let Some((at, _)) = self.refreshed.first() {
                runs.drain(*at..*at + 2);
            }
            runs.split_off(2 * warmup_runs)
        }
    }

    impl Pair for Scripted {
        fn run_timed(&mut self, side: Side) -> Result<f64> {
            self.runs.push(side);
            let base = if side == Side::Before { 2.0 } else { 1.0 };
            let fresh = std::mem::take(&mut self.fresh[side as usize]);
            // The confirming inputs are the second given; their two fresh runs come first.
            if self.preempted_once && self.refreshed.len() == 2 && !fresh {
                self.preempted_once = false;
                return Ok(50.0 * base);
            }
            Ok(if self.memoizes && fresh {
                10.0 * base
            } else {
                base
            })
        }
        fn flush_caches(&mut self) {
            self.flushes += 1;
        }
        fn flush_method(&self) -> crate::device::FlushMethod {
            crate::device::FlushMethod::Evict
        }
        fn output(&self, _: Side) -> Result<Cow<'_, [f32]>> {
            Ok(Cow::Owned(Vec::new()))
        }
        fn refresh_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()> {
            self.events.borrow_mut().push("replaced");
            self.refreshed.push((self.runs.len(), inputs));
            self.fresh = [true; 2];
            Ok(())
        }
        fn release_inputs(&mut self) {
            self.events.borrow_mut().push("released");
        }
        fn poison_output(&mut self, side: Side) -> Result<()> {
            self.poisoned.push(side);
            Ok(())
        }
        fn keep_output(&mut self, side: Side) -> Result<()> {
            self.kept.push(side);
            Ok(())
        }
        fn outputs_at_once(&self) -> bool {
            self.at_once
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
        let s = measure_pairs(&mut c, &cfg, check_inputs, check_inputs, None, |_| {}).unwrap();
        // Constant timings: the CI is zero-width, so it stops at min_pairs.
        assert_eq!(s.stop_reason, StopReason::Ci);
        assert_eq!(s.before_secs.len(), 8);
        assert!(s.before_secs.iter().all(|&t| t == 2.0));
        assert!(s.after_secs.iter().all(|&t| t == 1.0));
        // Eight pairs and the checked pair, each side from cold caches.
        assert_eq!(c.flushes, 18);
        // Both orders occur, and the recorded order matches the run order.
        assert!(s.after_first.iter().any(|&b| b) && s.after_first.iter().any(|&b| !b));
        let timed = c.timed(cfg.warmup_runs);
        assert_eq!(timed.len(), 16);
        for (i, &af) in s.after_first.iter().enumerate() {
            assert_eq!(timed[2 * i] == Side::After, af);
        }
    }

    /// Where the case holds its outputs at once, the check reads them right after the checked
    /// pair (once, nothing kept); where it does not, or no check is given, they are kept.
    #[test]
    fn the_checked_pair_is_checked_at_once_where_the_case_allows_else_kept() {
        for (at_once, with_check, checks, kept) in
            [(true, true, 1, 0), (false, true, 0, 2), (true, false, 0, 2)]
        {
            let mut c = Scripted::new();
            c.at_once = at_once;
            let cfg = MeasureConfig {
                min_pairs: 6,
                ..MeasureConfig::default()
            };
            let mut seen = 0;
            let mut check = |p: &dyn Pair| -> Result<()> {
                p.output(Side::After)?;
                seen += 1;
                Ok(())
            };
            let check_now: Option<CheckNow> = if with_check { Some(&mut check) } else { None };
            measure_pairs(&mut c, &cfg, check_inputs, check_inputs, check_now, |_| {}).unwrap();
            assert_eq!(seen, checks, "{at_once} {with_check}");
            assert_eq!(c.kept.len(), kept, "{at_once} {with_check}");
            assert_eq!(c.poisoned, [Side::Before, Side::After]);
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
            measure_pairs(&mut c, &cfg, check_inputs, check_inputs, None, |_| {}).unwrap();
            assert_eq!(c.refreshed.len(), 1, "the inputs are replaced once");
            let (at, inputs) = c.refreshed[0].clone();
            assert_eq!(inputs.get("x"), &[2.0; 4]);
            // After the warm-up, on a pair boundary, among the pairs that always run.
            assert!(at >= 2 * cfg.warmup_runs && (at - 2 * cfg.warmup_runs).is_multiple_of(2));
            let pair = (at - 2 * cfg.warmup_runs) / 2;
            assert!(pair < cfg.min_pairs, "seed {seed}: pair {pair}");
            assert_eq!(c.poisoned, [Side::Before, Side::After]);
            assert_eq!(c.kept, [Side::Before, Side::After]);
        }
    }

    /// The case lets go of its inputs before the checked ones are made, and is given them
    /// after: never two sets at once.
    #[test]
    fn the_checked_inputs_are_made_once_the_case_let_go_of_its_own() {
        let mut c = Scripted::new();
        let events = c.events.clone();
        let cfg = MeasureConfig {
            min_pairs: 6,
            ..MeasureConfig::default()
        };
        let make = || {
            events.borrow_mut().push("made");
            check_inputs()
        };
        measure_pairs(&mut c, &cfg, make, check_inputs, None, |_| {}).unwrap();
        assert_eq!(*c.events.borrow(), ["released", "made", "replaced"]);
    }

    #[test]
    fn a_checked_run_far_slower_than_the_others_is_confirmed_on_fresh_inputs() {
        let mut c = Scripted::new();
        let cfg = MeasureConfig {
            min_pairs: 6,
            ..MeasureConfig::default()
        };
        // Honest: the checked pair is timed, not a sample, and not confirmed.
        let s = measure_pairs(&mut c, &cfg, check_inputs, check_inputs, None, |_| {}).unwrap();
        let checked = s.checked.expect("a checked pair");
        assert_eq!((checked.before_secs, checked.after_secs), (2.0, 1.0));
        assert!(s.confirmed.is_none());
        assert!(s.repeated.is_none());
        assert_eq!(s.before_secs.len(), 6);
        // A side that computes only when its inputs change: slow first runs, confirmed on a
        // third set of inputs, then put back on the checked ones (whose outputs are read).
        let mut c = Scripted::new();
        c.memoizes = true;
        let third = || {
            let mut t = Tensors::new();
            t.put("x", crate::kinds::tensors::LineVec::filled(4, 3.0));
            Arc::new(t)
        };
        let s = measure_pairs(&mut c, &cfg, check_inputs, third, None, |_| {}).unwrap();
        assert_eq!(s.checked.unwrap().after_secs, 10.0);
        assert_eq!(s.confirmed.unwrap().after_secs, 10.0);
        // Timed again on the same inputs right after: answered from what it kept.
        assert_eq!(s.repeated.unwrap().after_secs, 1.0);
        assert!(s.after_secs.iter().all(|&t| t == 1.0));
        let given: Vec<f32> = c.refreshed.iter().map(|(_, t)| t.get("x")[0]).collect();
        assert_eq!(given, [2.0, 3.0, 2.0]);
        assert_eq!(
            c.kept.len(),
            2,
            "only the first checked pair's outputs are kept"
        );
        assert_eq!(c.poisoned.len(), 2);
        // One run right after the confirming pair preempted: the fastest of the repeats is
        // still the kept result's.
        let mut c = Scripted::new();
        c.memoizes = true;
        c.preempted_once = true;
        let s = measure_pairs(&mut c, &cfg, check_inputs, third, None, |_| {}).unwrap();
        assert!(!c.preempted_once, "the preempted run was made");
        let r = s.repeated.unwrap();
        assert_eq!((r.before_secs, r.after_secs), (2.0, 1.0));
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
        let s = measure_pairs(&mut c, &cfg, check_inputs, check_inputs, None, |_| {}).unwrap();
        assert_eq!(c.flushes, 0);
        assert_eq!(s.before_secs.len(), 3);
        assert_eq!(s.stop_reason, StopReason::MaxPairs);
    }
}
