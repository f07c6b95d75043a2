//! What the gate found, as data: where a spec stands against its reference, the figures of each
//! comparison, the passes, the reference itself and an acceptance. `results.json` holds these
//! (re-exported by `results`); the outputs write their sentences.

use super::stats::{PassConflict, RegressionState, Spread, Undecided};
use crate::measure::stats::Estimate;
use serde::{Deserialize, Serialize};

/// Where a spec stands against its stored baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BaselineStatus {
    /// No baseline for this device yet.
    Missing,
    /// Compared; the gate decided (`state`).
    Compared,
    /// A baseline exists but measured something else (another workload or device).
    NotComparable,
    /// This run was recorded as the baseline.
    Accepted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BaselineOutcome {
    pub status: BaselineStatus,
    pub path: String,
    /// new/baseline ratio of the `after` medians.
    pub ratio: Option<Estimate>,
    pub state: Option<RegressionState>,
    pub threshold: f64,
    /// What the gate found, in numbers: the outputs write its sentences. Absent in archives
    /// written before the finding was recorded (their `message` holds the sentence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<GateFinding>,
    /// Set when this run was accepted into the baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<Accepted>,
    /// What the gate judged against, when it was not the accepted baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<GateReference>,
    /// What the deciding ratio compares: `after time` (raw) or `after/before` (relative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
    /// What the thresholds rest on: accepted runs, the spread between them, this run's noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
    /// Why an INCONCLUSIVE decision on a ratio could not decide (what would). Absent in
    /// archives written before it was recorded (their outputs say what those did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undecided: Option<Undecided>,
    /// The sentence an older archive stored; read, never written (outputs derive the words
    /// from `finding`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// An older archive's short reason; read, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// An older archive's drift-guard sentence; read, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
}

impl BaselineOutcome {
    /// The outcome before the gate looked: no baseline judged yet.
    pub fn missing(path: String, threshold: f64) -> Self {
        BaselineOutcome {
            status: BaselineStatus::Missing,
            path,
            ratio: None,
            state: None,
            threshold,
            finding: None,
            accepted: None,
            reference: None,
            basis: None,
            spread: None,
            undecided: None,
            message: String::new(),
            note: None,
            guard: None,
        }
    }

    /// True when the ceiling drift guard decided (INCONCLUSIVE, no second pass).
    pub fn guarded(&self) -> bool {
        self.guard.is_some() || matches!(self.finding, Some(GateFinding::CeilingDrift(_)))
    }
}

/// What the gate found for one spec: why it did not compare, or the figures it decided on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateFinding {
    /// No baseline of this spec for this device.
    NoBaseline { device_key: String },
    /// The baseline was recorded on another device: never compared on raw time.
    OtherDevice {
        baseline_device_key: String,
        device_key: String,
    },
    /// The spec's workload changed since the baseline was accepted.
    WorkloadChanged,
    /// The run holds no samples to compare.
    NoSamples,
    /// The roof that bounds the spec moved more than the gate absorbs: not judged.
    CeilingDrift(CeilingDrift),
    /// Compared: the figures of the decision.
    Judged(Box<GateJudgement>),
}

/// The ceiling drift guard's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CeilingDrift {
    pub bound: crate::spec::Bound,
    /// The bounding roof at the baseline and now (bytes/s for bandwidth, FLOP/s for compute).
    pub baseline_per_sec: f64,
    pub now_per_sec: f64,
    /// The most the roof may move (a fraction: 0.25 = ±25%).
    pub allowed: f64,
}

/// One comparison of a run with its baseline, on one basis.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// True: after/before ratios compared; false: raw after times.
    pub relative: bool,
    pub ratio: Estimate,
    pub state: RegressionState,
    /// The FAIL threshold applied (a fraction).
    pub threshold: f64,
    /// The spec's limit (a fraction).
    pub limit: f64,
    /// Accepted runs whose medians were pooled into the reference (0: the baseline's samples).
    pub pooled_runs: usize,
    pub spread: Spread,
}

/// The decision on one set of samples: the deciding comparison, and under `compare: both` the
/// comparison on the other basis beside it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Judged {
    pub decided: Comparison,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other: Option<Comparison>,
    /// Raw time failed but the after/before comparison did not: both variants slowed alike
    /// (machine drift, or code both share), so the decision is INCONCLUSIVE.
    #[serde(default)]
    pub slowed_alike: bool,
    /// Where raw time failed: the before side's median against the reference's — whether it
    /// moved with the after side (alike) or held (the after side alone regressed). Where the
    /// after/before comparison failed or improved and the before side moved the ratio
    /// (`before_moved`), that move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_ratio: Option<f64>,
    /// The after/before comparison moved because the before side did, while the after side's
    /// own time did not move with it (see [`BeforeMoved`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_moved: Option<BeforeMoved>,
}

/// How the before side alone moved an after/before comparison under `compare: both`: it ran
/// faster or slower than at the reference by at least half as much as the ratio moved the
/// other way, while the after side's raw time did not fail (or improve) with it. The ratio
/// then says more of the before side than of the after side: on a virtual machine the
/// unfused side's large buffers sometimes moved far faster than in other runs while the fused
/// side's time held, and its ratio rose by a quarter on unchanged code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BeforeMoved {
    /// The ratio failed because the before side ran faster: INCONCLUSIVE (one run cannot tell
    /// a machine that sped up both sides, hiding a slower after side, from one that sped up the
    /// before side alone), never a FAIL the after side's time does not show.
    Faster,
    /// The ratio improved because the before side ran slower: the after side's raw decision
    /// (PASS, else INCONCLUSIVE), never an improvement that would restart the baseline's
    /// history.
    Slower,
}

impl Judged {
    /// The state this judgement decides.
    pub fn state(&self) -> RegressionState {
        match self.before_moved {
            _ if self.slowed_alike => RegressionState::Inconclusive,
            Some(BeforeMoved::Faster) => RegressionState::Inconclusive,
            Some(BeforeMoved::Slower) => match self.other.map(|raw| raw.state) {
                Some(RegressionState::Pass) => RegressionState::Pass,
                _ => RegressionState::Inconclusive,
            },
            None => self.decided.state,
        }
    }
}

/// The gate's judgement: all samples together, and each pass where there were two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GateJudgement {
    pub all: Judged,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passes: Option<Passes>,
}

/// The two passes of a spec measured again, judged one by one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Passes {
    pub first: Judged,
    pub second: Judged,
    /// Set when the passes contradict each other or the pooled decision (INCONCLUSIVE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<PassConflict>,
}

/// A reference other than the accepted baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateReference {
    /// The newest runs of a branch (any branch when `None`) in the history store.
    History {
        runs: usize,
        branch: Option<String>,
        /// Newer runs left out because they came before a change of level in the series.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        change: Option<LevelChange>,
        /// Chosen because the spec has no accepted baseline and asked for none in particular:
        /// the branch's history is the gate's reference by default.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        by_default: bool,
        /// Runs left out as outliers of the series (one noisy run must not widen the drift the
        /// gate allows for); `runs` does not count them.
        #[serde(default, skip_serializing_if = "is_zero")]
        outliers: usize,
    },
    /// The store's runs at the merge-base of `HEAD` and `branch`, or at its nearest ancestor
    /// that has any.
    MergeBase {
        branch: String,
        /// `git merge-base HEAD branch` (full SHA).
        merge_base: String,
        /// The commit whose runs the reference rests on (`None`: no ancestor within reach has one).
        commit: Option<String>,
        /// How many commits before the merge-base that commit is (0: the merge-base itself).
        commits_back: usize,
        /// Runs of the reference: the base commit's, then its nearest ancestors', back to the
        /// newest change of level.
        runs: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        change: Option<LevelChange>,
        /// The reference holds the base run's own samples (its archive was found).
        #[serde(default)]
        samples: bool,
    },
}

/// Where the reference's series changed level: runs from before it are left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LevelChange {
    /// The commit of the first run at the current level.
    pub since_commit: String,
    /// Runs left out (from before the change).
    pub left_out: usize,
}

/// A run accepted into the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Accepted {
    pub device_key: String,
    /// Accepted runs the baseline holds now.
    pub runs: usize,
    /// True when this run is the device's first baseline of the spec.
    pub first: bool,
}

/// Where a spec's counts stand against its counts baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CountsState {
    /// No counts baseline under this engine's key yet.
    NoBaseline,
    /// The baseline counted another workload or other variants.
    NotComparable,
    /// Every counted side within the limit.
    Pass,
    /// Every counted side lower by more than the limit.
    Improved,
    /// A side's metric rose by more than the limit.
    Fail,
    /// A side rose by more than the limit, but the baseline was counted by another Valgrind,
    /// compiler or C library: the code may not be what moved.
    Inconclusive,
    /// This run's counts were accepted as the baseline.
    Accepted,
}

/// One side's metric, now and in the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CountsChange {
    pub now: u64,
    pub baseline: u64,
}

impl CountsChange {
    /// now/baseline − 1 (0 when both are 0; +∞ from 0 to more).
    pub fn change(&self) -> f64 {
        if self.baseline == 0 {
            return if self.now == 0 { 0.0 } else { f64::INFINITY };
        }
        self.now as f64 / self.baseline as f64 - 1.0
    }
}

/// Something besides the code that differs between the baseline's engine and this run's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EngineDifference {
    pub what: String,
    pub baseline: String,
    pub now: String,
}

/// A function whose own instructions changed most between two countings of one side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FunctionChange {
    pub function: String,
    pub instructions_then: u64,
    pub instructions_now: u64,
}

/// What the counts gate found for one spec: each counted side's metric against its counts
/// baseline, the after side's saving on the metric against the before side's, and what else
/// differs between the two countings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CountsGateOutcome {
    pub state: CountsState,
    pub metric: crate::spec::CountsMetric,
    /// Largest tolerated increase (0.01 = 1%).
    pub limit: f64,
    /// The counts baseline's file (where `--accept` writes it).
    pub path: String,
    /// The commit the baseline was counted at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_git_sha: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<CountsChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<CountsChange>,
    /// 1 − after/before on the metric, this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saving: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<EngineDifference>,
    /// Where the work moved against the baseline: the functions whose own instructions changed
    /// most, of the side that rose most.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<FunctionChange>,
    /// Which side `functions` are of (`before` or `after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions_side: Option<String>,
    /// Where the reference is the branch's newest counted run in the history store (no counts
    /// baseline): that run's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_run: Option<String>,
    /// Which reference the counts were judged against when it is not the counts baseline (the
    /// one the time gate of the same spec reads: the branch's history, the merge-base's runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<GateReference>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
