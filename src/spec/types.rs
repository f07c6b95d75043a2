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

#[derive(Debug, Clone, Copy, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping {before: VARIANT, after: VARIANT}"
)]
pub struct Variants {
    pub before: Variant,
    pub after: Variant,
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

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping {max_regression: FRACTION, compare: both|raw|relative}"
)]
pub struct Gate {
    /// Largest tolerated slowdown of the `after` variant against its baseline (0.10 = 10%).
    #[serde(default = "default_max_regression")]
    pub max_regression: Finite,
    /// What is compared with the baseline: `raw` times of the `after` variant; its time
    /// `relative` to the `before` variant measured in the same interleaved pairs (which cancels
    /// the machine's drift between runs, but not a slowdown that hits both variants alike); or
    /// `both` (the default): FAIL when the relative comparison fails; a raw-only slowdown is
    /// INCONCLUSIVE with the reason (machine drift or a regression of shared code), never FAIL.
    #[serde(default)]
    pub compare: GateCompare,
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
        }
    }
}

/// Per-spec limits of the sampling effort, for expensive cases. They can only lower what the
/// command line asks for (the smaller value wins).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with optional `min_pairs`, `max_pairs`, `time_cap_secs`"
)]
pub struct SpecMeasure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_pairs: Option<Dim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pairs: Option<Dim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_cap_secs: Option<NonNeg>,
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
    pub variants: Variants,
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
            .map_err(|e| (find_key(text, &["workload", e.key]), e.message))?;
        let allowed = workload.variants();
        for (key, v) in [
            ("before", self.variants.before),
            ("after", self.variants.after),
        ] {
            if !allowed.contains(&v) {
                return Err((
                    at(&["variants", key]),
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
        if self.variants.before == self.variants.after {
            return Err((
                at(&["variants"]),
                "variants.before and variants.after are the same: a spec compares two different variants".into(),
            ));
        }
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
        let mr = self.gate.max_regression.0;
        if !(mr > 0.0 && mr <= 10.0) {
            return Err((
                at(&["gate", "max_regression"]),
                format!(
                    "gate.max_regression {mr}: expected a fraction in (0, 10] (0.10 means 10%)"
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
        let mut sweep = Vec::new();
        for (key, values) in &self.sweep {
            if !RawWorkload::SWEEPABLE.contains(&key.as_str()) {
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
            variants: self.variants,
            expect: self.expect,
            gate: self.gate,
            measure: self.measure,
            sweep,
            point: None,
            raw_workload: self.workload,
        })
    }
}

/// SHA-256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    use std::fmt::Write;
    sha2::Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}
