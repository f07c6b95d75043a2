//! The spec's types: the raw shapes serde reads, and the validated `Spec` the pipeline uses.

use super::find_key;
use crate::error::Position;
pub use crate::kinds::{
    Attention, DType, ElemOp, Elementwise, Gemm, LaunchChain, ProbeWorkload, RawWorkload, RowOp,
    Variant, Workload, WorkloadKind,
};
pub use crate::ledger::Bound;
use crate::values::{checked_deserialize, newtype_schema};
pub use crate::values::{Dim, Finite, NonNeg};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

type Invalid = (Option<Position>, String);

/// A spec name: `[a-z0-9-]+`, 1–64 characters, not starting with `-`. Names become file names
/// under `baselines/`, so nothing that could escape that directory is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecName(pub String);

impl TryFrom<String> for SpecName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let ok_chars = s
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if s.is_empty() || s.len() > 64 || !ok_chars || s.starts_with('-') {
            return Err(format!(
                "invalid spec name {s:?}: expected 1-64 characters from [a-z0-9-], not starting with '-' (the name is used as a file name)"
            ));
        }
        Ok(SpecName(s))
    }
}

checked_deserialize!(SpecName, "a spec name of [a-z0-9-]", deserialize_str, [
    visit_str: &str => |v: &str| v.to_string()
]);
newtype_schema!(SpecName, "SpecName", {
    "type": "string",
    "pattern": "^[a-z0-9][a-z0-9-]{0,63}$",
    "description": "1-64 characters from [a-z0-9-], not starting with '-' (used as a file name)"
});
/// The five items of the seed's delivery checklist.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChecklistItem {
    /// AI and ridge computed, bottleneck type confirmed.
    Roofline,
    /// Bandwidth-bound work fused.
    Fusion,
    /// Long-sequence attention takes a FlashAttention-class IO path.
    FlashAttention,
    /// Decode-like small-kernel chains use graph replay.
    GraphReplay,
    /// Measured before/after and archived as a baseline.
    Baseline,
}

impl ChecklistItem {
    pub const ALL: [ChecklistItem; 5] = [
        ChecklistItem::Roofline,
        ChecklistItem::Fusion,
        ChecklistItem::FlashAttention,
        ChecklistItem::GraphReplay,
        ChecklistItem::Baseline,
    ];
    pub fn key(self) -> &'static str {
        match self {
            ChecklistItem::Roofline => "roofline",
            ChecklistItem::Fusion => "fusion",
            ChecklistItem::FlashAttention => "flash_attention",
            ChecklistItem::GraphReplay => "graph_replay",
            ChecklistItem::Baseline => "baseline",
        }
    }
    pub fn title(self) -> &'static str {
        match self {
            ChecklistItem::Roofline => {
                "AI and ridge point computed; bottleneck type confirmed (predicted and measured bound agree)"
            }
            ChecklistItem::Fusion => "Bandwidth-bound intermediates fused (IO and time saving within the claim)",
            ChecklistItem::FlashAttention => "Long-sequence attention takes a FlashAttention-class IO path",
            ChecklistItem::GraphReplay => "Decode-like small-kernel chains use graph replay",
            ChecklistItem::Baseline => "Measured before/after and archived as an acceptance baseline",
        }
    }
}

/// The variants a spec compares, by the ledger each follows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Variants {
    pub before: Variant,
    pub after: Variant,
}

/// `variants:` as written: each side a built-in variant's name or an implementation of one.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping {before: VARIANT, after: VARIANT}"
)]
pub struct RawVariants {
    pub before: RawVariant,
    pub after: RawVariant,
}

/// One side of `variants:`: a built-in variant (`fused`), or the user's implementation of one
/// (`{implements: fused, command: [python3, fused.py]}`).
#[derive(Debug, Clone, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum RawVariant {
    Builtin(Variant),
    Implementation(Box<RawImplementation>),
}

/// Read by hand so that a bad name or key is reported where serde stands on it (an untagged
/// enum would only say that nothing matched).
impl<'de> Deserialize<'de> for RawVariant {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawVariant;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a variant name, or a mapping {implements: VARIANT, command: [PROGRAM, ARGS...]}")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawVariant, E> {
                Variant::deserialize(serde::de::value::StrDeserializer::<E>::new(v))
                    .map(RawVariant::Builtin)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<RawVariant, A::Error> {
                RawImplementation::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(|i| RawVariant::Implementation(Box::new(i)))
            }
        }
        d.deserialize_any(V)
    }
}

/// The user's implementation of a variant, run by a worker process (see docs/workers.md).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping {implements: VARIANT, command: [PROGRAM, ARGS...]}"
)]
pub struct RawImplementation {
    /// The built-in variant whose IO ledger this implementation follows (one of the kind's
    /// variants): what its bytes and FLOPs are counted as.
    pub implements: Variant,
    /// The worker: a program and its arguments, started in the spec file's folder.
    pub command: Option<Vec<String>>,
    /// Or a CUDA C++ kernel of the user's, compiled by NVRTC for the device (CUDA backend).
    pub cuda: Option<RawCudaSource>,
    /// The name the worker registered the function under (default: the `implements` name).
    pub function: Option<String>,
    /// Seconds the worker may take to answer one run or output request (default 60; setting up
    /// may take ten times as long: compilers, autotuners).
    pub timeout_secs: Option<Finite>,
}

/// A CUDA kernel of the user's as written.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping {source: FILE.cu, entry: NAME, block: [EXPR], grid: [EXPR], args: [NAME, ...]}"
)]
pub struct RawCudaSource {
    /// The `.cu` file, relative to the spec file.
    pub source: String,
    /// The `extern "C" __global__` function to launch.
    pub entry: String,
    /// Threads per block: 1 to 3 dimensions, numbers or expressions over the workload's keys.
    pub block: Vec<crate::kinds::custom::ExprText>,
    /// Blocks per grid: 1 to 3 dimensions, numbers or expressions over the workload's keys.
    pub grid: Vec<crate::kinds::custom::ExprText>,
    /// The kernel's arguments in order: tensor names of the kind's ledger (device pointers) and
    /// workload keys (passed as the parameter's type: int, long long, float…).
    pub args: Vec<String>,
    /// Dynamic shared memory per block, bytes (default 0).
    pub smem_bytes: Option<crate::kinds::custom::ExprText>,
    /// Extra NVRTC options (`-DTILE=64`).
    #[serde(default)]
    pub options: Vec<String>,
}

/// A CUDA kernel of the user's, checked against the spec (its file is read when the spec is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CudaSource {
    /// The `.cu` file as written (relative to the spec file).
    pub source: String,
    pub entry: String,
    pub block: Vec<String>,
    pub grid: Vec<String>,
    pub args: Vec<String>,
    pub smem_bytes: String,
    pub options: Vec<String>,
}

impl CudaSource {
    pub fn describe(&self) -> String {
        format!("{} (entry {})", self.source, self.entry)
    }
}

/// The user's implementation of one side.
#[derive(Debug, Clone, PartialEq)]
pub enum Implementation {
    Worker(WorkerCommand),
    Cuda(CudaSource),
}

/// A variant the user's worker process runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkerCommand {
    /// Program and arguments, run in the spec file's folder.
    pub command: Vec<String>,
    /// The function the worker registered.
    pub function: String,
    /// Per-request limit of runs and outputs, seconds (setup: ten times as long).
    pub timeout_secs: f64,
}

impl WorkerCommand {
    /// `python3 bench.py (function fused)`, for logs and the report.
    pub fn describe(&self) -> String {
        format!("{} (function {})", self.command.join(" "), self.function)
    }
}

/// Which sides of a spec are the user's implementations (None: the backend's built-in kernels).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Implementations {
    pub before: Option<Implementation>,
    pub after: Option<Implementation>,
}

impl Implementations {
    pub fn any(&self) -> bool {
        self.before.is_some() || self.after.is_some()
    }
    /// Whether a side runs the backend's own kernels.
    pub fn uses_builtin_kernels(&self) -> bool {
        self.before.is_none() || self.after.is_none()
    }
    /// Whether a side is a CUDA source (it runs on the CUDA backend only).
    pub fn uses_cuda_source(&self) -> bool {
        [&self.before, &self.after]
            .iter()
            .any(|i| matches!(i, Some(Implementation::Cuda(_))))
    }
}

/// Default per-request limit of a worker, seconds.
pub const WORKER_TIMEOUT_SECS: f64 = 60.0;

impl RawVariant {
    fn variant(&self) -> Variant {
        match self {
            RawVariant::Builtin(v) => *v,
            RawVariant::Implementation(i) => i.implements,
        }
    }

    /// The implementation of a side, checked; None for a built-in variant.
    fn implementation(
        &self,
        side: &'static str,
    ) -> Result<Option<Implementation>, (&'static str, String)> {
        let RawVariant::Implementation(i) = self else {
            return Ok(None);
        };
        if let Some(c) = &i.cuda {
            if i.command.is_some() || i.function.is_some() || i.timeout_secs.is_some() {
                return Err((
                    "cuda",
                    format!("variants.{side}: `cuda` and `command` (with `function`, `timeout_secs`) are two kinds of implementation: give one"),
                ));
            }
            for (key, dims) in [("block", &c.block), ("grid", &c.grid)] {
                if dims.is_empty() || dims.len() > 3 {
                    return Err((
                        "cuda",
                        format!("variants.{side}.cuda.{key}: expected 1 to 3 dimensions"),
                    ));
                }
            }
            if !c.source.ends_with(".cu") && !c.source.ends_with(".cuh") {
                return Err((
                    "cuda",
                    format!(
                        "variants.{side}.cuda.source {:?}: expected a .cu file",
                        c.source
                    ),
                ));
            }
            return Ok(Some(Implementation::Cuda(CudaSource {
                source: c.source.clone(),
                entry: c.entry.clone(),
                block: c.block.iter().map(|e| e.0.clone()).collect(),
                grid: c.grid.iter().map(|e| e.0.clone()).collect(),
                args: c.args.clone(),
                smem_bytes: c.smem_bytes.as_ref().map_or("0".into(), |e| e.0.clone()),
                options: c.options.clone(),
            })));
        }
        let command = i.command.clone().unwrap_or_default();
        if command.is_empty() || command[0].trim().is_empty() {
            return Err((
                "command",
                format!("variants.{side}: an implementation needs `command` (the worker's program and its arguments, e.g. [python3, bench.py]) or `cuda` (a kernel source)"),
            ));
        }
        if command[0].starts_with('-') {
            return Err((
                "command",
                format!("variants.{side}.command: the program {:?} starts with `-`: give the program first (a path such as ./worker), its options after it", command[0]),
            ));
        }
        if command.iter().any(|a| a.contains('\0')) {
            return Err((
                "command",
                format!("variants.{side}.command: an argument holds a NUL character"),
            ));
        }
        let function = i
            .function
            .clone()
            .unwrap_or_else(|| i.implements.name().to_string());
        let ok = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
        if function.is_empty() || function.len() > 64 || !function.chars().all(ok) {
            return Err((
                "function",
                format!("variants.{side}.function {function:?}: expected 1-64 characters from [A-Za-z0-9_.-]"),
            ));
        }
        let timeout_secs = i.timeout_secs.map_or(WORKER_TIMEOUT_SECS, |t| t.0);
        if !(timeout_secs > 0.0 && timeout_secs <= 86_400.0) {
            return Err((
                "timeout_secs",
                format!(
                    "variants.{side}.timeout_secs {timeout_secs}: expected seconds in (0, 86400]"
                ),
            ));
        }
        Ok(Some(Implementation::Worker(WorkerCommand {
            command,
            function,
            timeout_secs,
        })))
    }
}

/// A claimed interval of a saving (fractions: 0.4 is 40%). Either end may be open. A time saving
/// may also be claimed in units of the roofline's prediction (`min_of_predicted: 0.6`: at least
/// 60% of the saving the ledger predicts on the ceilings measured in the same run), which
/// travels between machines where a fixed number holds on one only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with `min`, `max` (fractions, 0.4 = 40%) or, for time_saving, `min_of_predicted`, `max_of_predicted`"
)]
pub struct SavingRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Finite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Finite>,
    /// Lower end as a fraction of the predicted saving (time savings only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_of_predicted: Option<Finite>,
    /// Upper end as a multiple of the predicted saving (time savings only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_of_predicted: Option<Finite>,
}

impl SavingRange {
    pub fn min(&self) -> Option<f64> {
        self.min.map(|v| v.0)
    }
    pub fn max(&self) -> Option<f64> {
        self.max.map(|v| v.0)
    }
    /// True when an end is given relative to the prediction.
    pub fn is_relative(&self) -> bool {
        self.min_of_predicted.is_some() || self.max_of_predicted.is_some()
    }
    /// The interval in absolute fractions, given the predicted saving: where both a fixed and
    /// a relative end are given, the stricter one holds.
    pub fn resolve(&self, predicted: f64) -> SavingRange {
        let lo = [self.min(), self.min_of_predicted.map(|f| f.0 * predicted)]
            .into_iter()
            .flatten()
            .reduce(f64::max);
        let hi = [self.max(), self.max_of_predicted.map(|f| f.0 * predicted)]
            .into_iter()
            .flatten()
            .reduce(f64::min);
        SavingRange {
            min: lo.map(Finite),
            max: hi.map(Finite),
            min_of_predicted: None,
            max_of_predicted: None,
        }
    }
    pub fn contains(&self, v: f64) -> bool {
        self.min().is_none_or(|m| v >= m) && self.max().is_none_or(|m| v <= m)
    }
    pub fn describe(&self) -> String {
        let pct = |v: f64| format!("{:.1}%", v * 100.0);
        match (self.min(), self.max()) {
            (Some(a), Some(b)) => format!("[{}, {}]", pct(a), pct(b)),
            (Some(a), None) => format!(">= {}", pct(a)),
            (None, Some(b)) => format!("<= {}", pct(b)),
            (None, None) => "any".into(),
        }
    }
    /// The claim as written, relative ends included (`>= 0.6 x predicted`).
    pub fn describe_claim(&self) -> String {
        let mut parts = Vec::new();
        if let Some(a) = self.min() {
            parts.push(format!(">= {:.1}%", a * 100.0));
        }
        if let Some(f) = self.min_of_predicted {
            parts.push(format!(">= {} x predicted", f.0));
        }
        if let Some(b) = self.max() {
            parts.push(format!("<= {:.1}%", b * 100.0));
        }
        if let Some(f) = self.max_of_predicted {
            parts.push(format!("<= {} x predicted", f.0));
        }
        if parts.is_empty() {
            "any".into()
        } else {
            parts.join(", ")
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping {rtol: NUMBER, atol: NUMBER}"
)]
pub struct Tolerance {
    pub rtol: NonNeg,
    pub atol: NonNeg,
}

/// The tolerance a correctness check applied, and where it came from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppliedTolerance {
    pub rtol: f64,
    pub atol: f64,
    /// `from the spec`, or the rule that derived it (`default for f32, reduction length 768`).
    pub source: String,
}

impl AppliedTolerance {
    pub fn tolerance(&self) -> Tolerance {
        Tolerance {
            rtol: NonNeg(self.rtol),
            atol: NonNeg(self.atol),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with `bound` and optional `io_saving`, `time_saving`, `tolerance`, `points`"
)]
pub struct Expect {
    /// The bound of the `after` variant on the device under test.
    pub bound: Bound,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_saving: Option<SavingRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_saving: Option<SavingRange>,
    /// Correctness tolerance; by default derived from the dtype and the reduction length of the
    /// workload ([`Workload::default_tolerance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<Tolerance>,
    /// Claims for single points of a sweep, keyed `param=value` (e.g. `seq_len=4096`); they
    /// replace the claims above at that point.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub points: std::collections::BTreeMap<String, PointExpect>,
}

/// Claims at one point of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with optional `bound`, `io_saving`, `time_saving`"
)]
pub struct PointExpect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<Bound>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_saving: Option<SavingRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_saving: Option<SavingRange>,
}

/// Where an expanded spec sits in its sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepPoint {
    /// The name of the spec that declared the sweep.
    pub group: String,
    /// The swept parameters and their values at this point.
    pub params: Vec<(String, u64)>,
    /// `seq_len=1024` (several joined by `,`).
    pub label: String,
}

fn default_max_regression() -> Finite {
    Finite(0.10)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping {max_regression: FRACTION, compare: both|raw|relative, against: baselines|history|history:BRANCH|merge-base:BRANCH, metric: instructions|dram_bytes|cycles, counts_max_regression: FRACTION}"
)]
pub struct Gate {
    /// Largest tolerated slowdown of the `after` variant against its baseline (0.10 = 10%).
    #[serde(default = "default_max_regression")]
    pub max_regression: Finite,
    /// What is compared with the baseline: `raw` times of the `after` variant; its time
    /// `relative` to the `before` variant measured in the same interleaved pairs (which cancels
    /// the machine's drift between runs, but not a slowdown that hits both variants alike); or
    /// `both` (the default): FAIL when the relative comparison fails, unless the before side
    /// alone moved the ratio (ran faster while the after side's time held: INCONCLUSIVE); a
    /// raw-only slowdown is INCONCLUSIVE with the reason (machine drift or a regression of
    /// shared code), never FAIL.
    #[serde(default)]
    pub compare: GateCompare,
    /// What the gate judges this spec against when `run --against` does not say: the accepted
    /// `baselines` (the default), the branch's `history` in the store (`history:BRANCH` for
    /// another branch's), or the store's run at `merge-base:BRANCH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub against: Option<Against>,
    /// What the counts gate compares when the sides are counted (`measure.mode: counts|both`):
    /// `instructions`, `dram_bytes` (read and written) or `cycles`. Unset, the simulator's
    /// estimated `cycles` (which weigh both) on the CPU, and `dram_bytes` on a GPU (whose
    /// cycles are measured and move with its clocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<CountsMetric>,
    /// Largest tolerated increase of either side's counted metric against its counts baseline
    /// (0.01 = 1%). Counts repeat exactly, so no noise model widens it.
    #[serde(default = "default_counts_max_regression")]
    pub counts_max_regression: Finite,
}

fn default_counts_max_regression() -> Finite {
    Finite(0.01)
}

/// The counted quantity a counts gate compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CountsMetric {
    /// Instructions executed.
    Instructions,
    /// Simulated DRAM bytes, read and written.
    DramBytes,
    /// The estimated cycles: L1 hits, last-level hits and memory accesses weighed 1, 5, 35 (on
    /// a GPU: the cycles Nsight Compute measured).
    Cycles,
}

impl CountsMetric {
    /// The word specs and outputs use.
    pub fn as_str(self) -> &'static str {
        match self {
            CountsMetric::Instructions => "instructions",
            CountsMetric::DramBytes => "dram_bytes",
            CountsMetric::Cycles => "cycles",
        }
    }
}

/// What a run measures of a spec: its `time` (interleaved pairs on the backend), its `counts`
/// (each side once under Valgrind's cache simulator), or `both`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MeasureMode {
    #[default]
    Time,
    Counts,
    Both,
    /// Time, and counts too where they can be made (Valgrind installed, x86-64, the CPU
    /// backend): what a spec that must run on any machine asks for.
    Auto,
}

impl MeasureMode {
    pub fn times(self) -> bool {
        self != MeasureMode::Counts
    }
    /// Whether counts are wanted (made where they can be, for `auto`).
    pub fn counts(self) -> bool {
        self != MeasureMode::Time
    }
    /// Whether counts that cannot be made stop the run (all but `auto`).
    pub fn counts_required(self) -> bool {
        matches!(self, MeasureMode::Counts | MeasureMode::Both)
    }
    /// `time`, `counts`, `both` or `auto`.
    pub fn parse(text: &str) -> Result<MeasureMode, String> {
        match text {
            "time" => Ok(MeasureMode::Time),
            "counts" => Ok(MeasureMode::Counts),
            "both" => Ok(MeasureMode::Both),
            "auto" => Ok(MeasureMode::Auto),
            _ => Err(format!("`{text}`: expected time, counts, both or auto")),
        }
    }
}

/// What the gate judges a spec against (`gate.against`, `run --against`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Against {
    /// The accepted baselines.
    #[default]
    Baselines,
    /// The newest runs of a branch in the history store; `None`: the branch being run (every
    /// branch when that is not known).
    History { branch: Option<String> },
    /// The store's runs at the merge-base of `HEAD` and this branch (else its nearest ancestor
    /// with one).
    MergeBase { branch: String },
}

impl Against {
    /// `baselines`, `history`, `history:BRANCH` or `merge-base:BRANCH`.
    pub fn parse(text: &str) -> Result<Against, String> {
        let text = text.trim();
        let branch = |b: &str| Some(b.to_string()).filter(|b| !b.is_empty());
        match text.split_once(':') {
            None if text == "baselines" => Ok(Against::Baselines),
            None if text == "history" => Ok(Against::History { branch: None }),
            Some(("history", b)) if branch(b).is_some() => {
                Ok(Against::History { branch: branch(b) })
            }
            Some(("merge-base", b)) if branch(b).is_some() => Ok(Against::MergeBase {
                branch: b.to_string(),
            }),
            _ => Err(format!(
                "`{text}`: expected baselines, history, history:BRANCH or merge-base:BRANCH"
            )),
        }
    }
}

impl TryFrom<String> for Against {
    type Error = String;
    fn try_from(s: String) -> Result<Against, String> {
        Against::parse(&s)
    }
}

impl From<Against> for String {
    fn from(a: Against) -> String {
        match a {
            Against::Baselines => "baselines".into(),
            Against::History { branch: None } => "history".into(),
            Against::History { branch: Some(b) } => format!("history:{b}"),
            Against::MergeBase { branch } => format!("merge-base:{branch}"),
        }
    }
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GateCompare {
    Raw,
    Relative,
    #[default]
    Both,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            max_regression: default_max_regression(),
            compare: GateCompare::Both,
            against: None,
            metric: None,
            counts_max_regression: default_counts_max_regression(),
        }
    }
}

/// Per-spec limits of the sampling effort, for expensive cases. They can only lower what the
/// command line asks for (the smaller value wins).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with optional `mode` (time|counts|both|auto), `min_pairs`, `max_pairs`, `time_cap_secs`, `counts_sizes`, `counts_cache_model`"
)]
pub struct SpecMeasure {
    /// What a run measures of this spec when `run --measure` does not say (default `time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<MeasureMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_pairs: Option<Dim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pairs: Option<Dim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_cap_secs: Option<NonNeg>,
    /// Workload sizes the sides are counted at, in place of the workload's (the simulator runs a
    /// kernel 20 to 100 times slower than the machine): whole-number workload keys, the ones a
    /// sweep may vary. The counts, their baseline and their gate are of that workload.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub counts_sizes: std::collections::BTreeMap<String, Dim>,
    /// The cache model this spec's sides are counted on, in place of the run's default, in
    /// `--cache-model`'s form (`LL=1048576,16,64`: a 1 MiB last level): a tiled kernel's ledger
    /// is checked where its tiles fit the last level and the tensors it keeps out of memory do
    /// not (docs/counts.md). A run's `--cache-model` still decides for every spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts_cache_model: Option<String>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a spec: a mapping with keys name, title, workload, variants, expect"
)]
pub struct RawSpec {
    pub name: SpecName,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub checklist: Vec<ChecklistItem>,
    pub workload: RawWorkload,
    pub variants: RawVariants,
    pub expect: Expect,
    #[serde(default)]
    pub gate: Gate,
    #[serde(default)]
    pub measure: SpecMeasure,
    /// Workload parameters to sweep: each combination of values is a case of its own.
    #[serde(default)]
    pub sweep: std::collections::BTreeMap<String, Vec<Dim>>,
}

/// A validated spec, ready for the ledger and the backends.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub title: String,
    pub description: Option<String>,
    pub file: PathBuf,
    /// The file's text, kept for locating keys in later messages and for the evidence archive.
    pub source_text: String,
    /// SHA-256 of the file's bytes (hex): names the exact spec a result was measured with.
    pub source_sha256: String,
    pub checklist: Vec<ChecklistItem>,
    pub workload: Workload,
    pub variants: Variants,
    /// The sides the user's code implements (workers); the others run the backend's kernels.
    pub implementations: Implementations,
    pub expect: Expect,
    pub gate: Gate,
    pub measure: SpecMeasure,
    /// The sweep as declared (empty: none). Expanded specs have it empty and `point` set.
    pub sweep: Vec<(String, Vec<u64>)>,
    pub point: Option<SweepPoint>,
    /// The workload as written, to re-validate at each sweep point.
    pub raw_workload: RawWorkload,
}

impl Spec {
    /// The cache model of `measure.counts_cache_model` (checked when the spec was loaded),
    /// `None` where the spec names none.
    pub fn counts_cache_model(&self) -> Option<crate::cache::CacheModel> {
        self.measure
            .counts_cache_model
            .as_deref()
            .and_then(|m| crate::cache::CacheModel::parse(m).ok())
    }

    /// The spec as its sides are counted: its workload at `measure.counts_sizes` (at its sweep
    /// point's values for the keys those do not name), itself where none are given.
    pub fn counted(&self) -> crate::error::Result<std::borrow::Cow<'_, Spec>> {
        if self.measure.counts_sizes.is_empty() {
            return Ok(std::borrow::Cow::Borrowed(self));
        }
        let mut raw = self.raw_workload.clone();
        for (k, v) in self.point.iter().flat_map(|p| &p.params) {
            raw.set(k, *v);
        }
        for (k, v) in &self.measure.counts_sizes {
            raw.set(k, v.0);
        }
        let workload = raw.validate().map_err(|e| crate::error::Error::Spec {
            path: self.file.clone(),
            pos: find_key(&self.source_text, &["measure", "counts_sizes"]),
            message: format!("measure.counts_sizes: {}", e.message),
        })?;
        let mut s = self.clone();
        s.workload = workload;
        Ok(std::borrow::Cow::Owned(s))
    }

    /// The folder the spec's relative paths (kernel sources, worker commands) start from: the
    /// spec file's folder, `.` for a bare file name (whose parent is the empty path).
    pub fn dir(&self) -> &std::path::Path {
        self.file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."))
    }

    /// The spec's tolerance, or the default of its workload (dtype and reduction length).
    pub fn tolerance(&self) -> AppliedTolerance {
        match self.expect.tolerance {
            Some(t) => AppliedTolerance {
                rtol: t.rtol.0,
                atol: t.atol.0,
                source: "from the spec".into(),
            },
            None => {
                let (rtol, atol) = self.workload.default_tolerance();
                AppliedTolerance {
                    rtol,
                    atol,
                    source: format!(
                        "default for {}, reduction length {}",
                        self.workload.dtype().name(),
                        self.workload.reduction_len()
                    ),
                }
            }
        }
    }
}

impl RawSpec {
    /// Checks that span several fields; the error carries the position of the key at fault.
    pub fn validate(self, text: &str) -> Result<Spec, Invalid> {
        let at = |path: &[&str]| find_key(text, path);
        if self.title.trim().is_empty() {
            return Err((at(&["title"]), "title must not be empty".into()));
        }
        let workload = self
            .workload
            .validate()
            .map_err(|e| (find_key(text, &e.key_path()), e.message))?;
        let (variants, implementations) = self.validate_variants(&workload, text)?;
        self.validate_expect(text)?;
        self.validate_gate_and_measure(text)?;
        let sweep = self.validate_sweep(text)?;
        let mut checklist = self.checklist.clone();
        checklist.sort();
        checklist.dedup();
        Ok(Spec {
            name: self.name.0,
            title: self.title,
            description: self.description,
            file: PathBuf::new(),
            source_text: text.to_string(),
            source_sha256: sha256_hex(text.as_bytes()),
            checklist,
            workload,
            variants,
            implementations,
            expect: self.expect,
            gate: self.gate.clone(),
            measure: self.measure,
            sweep,
            point: None,
            raw_workload: self.workload,
        })
    }

    /// The two sides: each a variant of the workload's kind, or an implementation of one; a
    /// kind without built-in kernels takes implementations on both sides; never one built-in
    /// variant against itself.
    fn validate_variants(
        &self,
        workload: &Workload,
        text: &str,
    ) -> Result<(Variants, Implementations), Invalid> {
        let at = |path: &[&str]| find_key(text, path);
        let allowed = workload.variants();
        let mut implementations = Implementations::default();
        for (key, raw) in [
            ("before", &self.variants.before),
            ("after", &self.variants.after),
        ] {
            let worker = raw
                .implementation(key)
                .map_err(|(field, message)| (at(&["variants", key, field]), message))?;
            match key {
                "before" => implementations.before = worker,
                _ => implementations.after = worker,
            }
            let v = raw.variant();
            if !allowed.contains(&v) {
                let path: &[&str] = match raw {
                    RawVariant::Builtin(_) => &["variants", key],
                    RawVariant::Implementation(_) => &["variants", key, "implements"],
                };
                return Err((
                    at(path),
                    format!(
                        "variant `{}` does not apply to workload kind {}; expected one of: {}",
                        v.name(),
                        workload.kind().name(),
                        allowed
                            .iter()
                            .map(|v| v.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let variants = Variants {
            before: self.variants.before.variant(),
            after: self.variants.after.variant(),
        };
        // A kind without built-in kernels (custom) runs the user's code on both sides.
        if !workload.kind().builtin_kernels() {
            for (key, side) in [
                ("before", &implementations.before),
                ("after", &implementations.after),
            ] {
                if side.is_none() {
                    return Err((
                    at(&["variants", key]),
                    format!("variants.{key}: kind {} has no built-in kernels: both sides must be implementations ({{implements: VARIANT, command: [...]}})", workload.kind().name()),
                ));
                }
            }
        }
        // Two implementations of one ledger are a fair comparison (the user's fused kernel
        // against the built-in one); one built-in variant against itself is not.
        if variants.before == variants.after && !implementations.any() {
            return Err((
            at(&["variants"]),
            "variants.before and variants.after are the same: a spec compares two different variants".into(),
        ));
        }
        Ok((variants, implementations))
    }

    /// The claims: each range has a bound, its bounds are savings in order, relative bounds
    /// only on the time saving.
    fn validate_expect(&self, text: &str) -> Result<(), Invalid> {
        let at = |path: &[&str]| find_key(text, path);
        for (key, range) in [
            ("io_saving", &self.expect.io_saving),
            ("time_saving", &self.expect.time_saving),
        ] {
            if let Some(r) = range {
                if key == "io_saving" && r.is_relative() {
                    return Err((
                        at(&["expect", key]),
                        "expect.io_saving: `min_of_predicted`/`max_of_predicted` apply to time_saving only (the IO saving is the ledger's own figure); expected `min`, `max` or both".into(),
                    ));
                }
                if r.min.is_none() && r.max.is_none() && !r.is_relative() {
                    return Err((
                        at(&["expect", key]),
                        format!("expect.{key} needs `min`, `max` or both (time_saving also takes `min_of_predicted`, `max_of_predicted`)"),
                    ));
                }
                for (what, f) in [
                    ("min_of_predicted", r.min_of_predicted),
                    ("max_of_predicted", r.max_of_predicted),
                ] {
                    if let Some(f) = f {
                        if !(f.0 > 0.0 && f.0 <= 2.0) {
                            return Err((
                                at(&["expect", key, what]),
                                format!("expect.{key}.{what}: {}: expected a factor in (0, 2] of the predicted saving (0.6 means 60% of it)", f.0),
                            ));
                        }
                    }
                }
                if let (Some(a), Some(b)) = (r.min_of_predicted, r.max_of_predicted) {
                    if a.0 > b.0 {
                        return Err((
                            at(&["expect", key]),
                            format!("expect.{key}: min_of_predicted {} is greater than max_of_predicted {}", a.0, b.0),
                        ));
                    }
                }
                for v in [r.min(), r.max()].into_iter().flatten() {
                    if !(-100.0..1.0).contains(&v) {
                        return Err((
                            at(&["expect", key]),
                            format!("expect.{key}: {v} is not a saving; expected a fraction below 1 (0.4 means 40%)"),
                        ));
                    }
                }
                if let (Some(a), Some(b)) = (r.min(), r.max()) {
                    if a > b {
                        return Err((
                            at(&["expect", key]),
                            format!("expect.{key}: min {a} is greater than max {b}"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The gate's limit and the spec's own sampling limits.
    fn validate_gate_and_measure(&self, text: &str) -> Result<(), Invalid> {
        let at = |path: &[&str]| find_key(text, path);
        let mr = self.gate.max_regression.0;
        if !(mr > 0.0 && mr <= 10.0) {
            return Err((
                at(&["gate", "max_regression"]),
                format!(
                    "gate.max_regression {mr}: expected a fraction in (0, 10] (0.10 means 10%)"
                ),
            ));
        }
        let cr = self.gate.counts_max_regression.0;
        if !(cr > 0.0 && cr <= 10.0) {
            return Err((
                at(&["gate", "counts_max_regression"]),
                format!(
                    "gate.counts_max_regression {cr}: expected a fraction in (0, 10] (0.01 means 1%)"
                ),
            ));
        }
        if let (Some(a), Some(b)) = (self.measure.min_pairs, self.measure.max_pairs) {
            if a.0 < 3 || b.0 < a.0 {
                return Err((
                    at(&["measure"]),
                    format!("measure: min_pairs must be >= 3 and max_pairs >= min_pairs (got {} and {})", a.0, b.0),
                ));
            }
        }
        if self.measure.min_pairs.is_some_and(|a| a.0 < 3) {
            return Err((
                at(&["measure", "min_pairs"]),
                "measure.min_pairs must be >= 3".into(),
            ));
        }
        if self.measure.time_cap_secs.is_some_and(|t| t.0 <= 0.0) {
            return Err((
                at(&["measure", "time_cap_secs"]),
                "measure.time_cap_secs must be > 0".into(),
            ));
        }
        if let Some(model) = &self.measure.counts_cache_model {
            crate::cache::CacheModel::parse(model).map_err(|e| {
                (
                    at(&["measure", "counts_cache_model"]),
                    format!("measure.counts_cache_model: {e}"),
                )
            })?;
        }
        if !self.measure.counts_sizes.is_empty() {
            let mut raw = self.workload.clone();
            for (key, value) in &self.measure.counts_sizes {
                if !raw.sweepable(key) {
                    return Err((
                        at(&["measure", "counts_sizes", key]),
                        format!(
                            "measure.counts_sizes.{key}: not a size of this workload; expected one of: {}",
                            RawWorkload::SWEEPABLE.join(", ")
                        ),
                    ));
                }
                raw.set(key, value.0);
            }
            raw.validate().map_err(|e| {
                (
                    at(&["measure", "counts_sizes"]),
                    format!("measure.counts_sizes: {}", e.message),
                )
            })?;
        }
        Ok(())
    }

    /// The sweep (sweepable keys, at most 64 values each and 256 points) and the points its
    /// claims name.
    fn validate_sweep(&self, text: &str) -> Result<Vec<(String, Vec<u64>)>, Invalid> {
        let at = |path: &[&str]| find_key(text, path);
        let mut sweep = Vec::new();
        for (key, values) in &self.sweep {
            if !self.workload.sweepable(key) {
                return Err((
                    at(&["sweep", key]),
                    format!(
                        "sweep.{key}: not a sweepable workload parameter; expected one of: {}",
                        RawWorkload::SWEEPABLE.join(", ")
                    ),
                ));
            }
            if values.is_empty() || values.len() > 64 {
                return Err((
                    at(&["sweep", key]),
                    format!("sweep.{key}: expected a list of 1 to 64 values"),
                ));
            }
            sweep.push((
                key.clone(),
                values.iter().map(|d| d.0).collect::<Vec<u64>>(),
            ));
        }
        if sweep.iter().map(|(_, v)| v.len()).product::<usize>() > 256 {
            return Err((at(&["sweep"]), "sweep: more than 256 points".into()));
        }
        for label in self.expect.points.keys() {
            if sweep.is_empty() {
                return Err((
                    at(&["expect", "points"]),
                    "expect.points needs a `sweep`".into(),
                ));
            }
            let ok = label.split(',').all(|kv| {
                kv.split_once('=').is_some_and(|(k, v)| {
                    sweep.iter().any(|(sk, vals)| {
                        sk == k && v.parse::<u64>().is_ok_and(|v| vals.contains(&v))
                    })
                })
            });
            if !ok {
                return Err((
                    at(&["expect", "points"]),
                    format!("expect.points: `{label}` is not a point of the sweep (expected e.g. `{}={}`)", sweep[0].0, sweep[0].1[0]),
                ));
            }
        }
        Ok(sweep)
    }
}

/// SHA-256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
