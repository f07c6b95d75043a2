//! The result of a run: what `results.json` holds, what baselines are made from, what the report
//! renders and what `compare` and `calibrate` read. Plain data, below the stages that read it
//! (baseline, report, CLI); `schema_version` changes when a field changes meaning. Statuses are
//! enums serialized as the words older files hold, so those files still read.

#[cfg(test)]
use opledger_model::values;
// The lower crates' modules, reached as `crate::…` in this crate's files.
use opledger_measure as measure;
use opledger_model::device;
use opledger_model::error;
use opledger_model::files;
use opledger_model::ledger;
use opledger_model::secret;
use opledger_model::spec;

use crate::device::{Ceilings, DeviceInfo};
use crate::gate::stats::RegressionState;
use crate::ledger::{Roofline, VariantLedger};
use crate::measure::stats::{Estimate, Summary};
use crate::measure::{MeasureConfig, PairSamples};
use crate::spec::{AppliedTolerance, ChecklistItem, Expect, Gate, SweepPoint, Variant, Workload};
use crate::verdict::{Achieved, Check, Correctness, Status};
use serde::{Deserialize, Serialize};

pub mod derive;
pub mod gate;
pub mod verdict;

// The gate's findings are defined beside its statistics; `results.json` holds them.
pub use crate::gate::outcome::{
    Accepted, BaselineOutcome, BaselineStatus, BeforeMoved, CeilingDrift, Comparison, CountsChange,
    CountsGateOutcome, CountsState, EngineDifference, FunctionChange, GateFinding, GateJudgement,
    GateReference, Judged, LevelChange, Passes,
};

/// The version `run` writes. 2: a spec's gates combine by one rule (`set_aside`), a counts
/// gate records the reference it was judged against (`counts_gate.reference`), and an archive's
/// checks are derived again from its own spec file. Version 1 reads through [`upgrade_from_1`].
pub const SCHEMA_VERSION: u32 = 2;

/// The oldest version read (and upgraded when read).
pub const OLDEST_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunResult {
    pub schema_version: u32,
    pub opledger_version: String,
    pub run_id: String,
    /// A random identity of this run: run ids are unique within one runs folder only, and
    /// runners writing into one history store start runs in the same second. Absent in
    /// archives written before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_uid: String,
    pub started_utc: String,
    /// The start in nanoseconds since 1970 (UTC): what orders runs that started in the same
    /// second. Absent in archives written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ns: Option<i64>,
    pub git_sha: String,
    pub git_dirty: bool,
    pub command_line: Vec<String>,
    /// The backend that ran (`cpu`, `cuda`).
    pub backend: String,
    /// How it was chosen, e.g. "cpu (auto: no CUDA driver found ...)".
    pub backend_note: String,
    pub device: DeviceInfo,
    pub ceilings: Ceilings,
    /// The device's datasheet ceilings, shown beside the measured ones (none for CPUs).
    #[serde(default)]
    pub datasheet: Option<Datasheet>,
    /// What ran where: also written alone as `environment.json` in the run directory.
    #[serde(default)]
    pub environment: EnvManifest,
    pub measure: MeasureConfig,
    /// Bytes a read flush streams before each cold sample (0 in warm mode): the backend's own
    /// where `flush_method` is `read`, a worker's process's always.
    pub flush_bytes: u64,
    /// How the backend's own cases started cold (runs recorded before it was kept read).
    #[serde(default)]
    pub flush_method: crate::device::FlushMethod,
    pub specs: Vec<SpecResult>,
    /// Swept specs, one series per sweep.
    #[serde(default)]
    pub sweeps: Vec<SweepSeries>,
    pub checklist: Vec<ChecklistRow>,
    pub verdict: RunVerdict,
    pub wall_secs: f64,
    /// The report template this run was rendered with, as archived inside the run folder
    /// (`template/<name>`); every re-render uses it. Absent: the built-in template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

impl RunResult {
    /// Masks every URL secret in the recorded command lines and environment variables
    /// (`secret::redact_text`); text without one is unchanged.
    pub fn redact_secrets(&mut self) {
        let redact = |v: &mut Vec<String>| {
            for a in v.iter_mut() {
                *a = crate::secret::redact_text(a);
            }
        };
        redact(&mut self.command_line);
        redact(&mut self.environment.command_line);
        for v in self.environment.env_vars.values_mut() {
            *v = crate::secret::redact_text(v);
        }
    }
}

/// Datasheet ceilings of the device under test, in the units of the measured ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Datasheet {
    pub name: String,
    pub bytes_per_sec: f64,
    /// Non-tensor FP32 peak.
    pub fp32_flops_per_sec: f64,
    /// BF16/FP16 tensor-core peak, dense.
    pub tensor_flops_per_sec: f64,
    pub source: String,
}

impl From<&crate::device::Profile> for Datasheet {
    fn from(p: &crate::device::Profile) -> Self {
        Datasheet {
            name: p.name.into(),
            bytes_per_sec: p.bw_bytes_per_sec(),
            fp32_flops_per_sec: p.fp32_tflops * 1e12,
            tensor_flops_per_sec: p.tensor_tflops * 1e12,
            source: p.source.into(),
        }
    }
}

/// The environment manifest of a run: everything that could explain why two runs differ.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EnvManifest {
    pub opledger_version: String,
    pub git_sha: String,
    pub git_dirty: bool,
    pub command_line: Vec<String>,
    pub working_dir: String,
    pub hostname: String,
    pub arch: String,
    pub os: String,
    pub kernel: String,
    pub cpu: String,
    pub cores: usize,
    pub simd: String,
    pub governor: String,
    /// Linux's transparent-huge-page mode (`always [madvise] never`: the bracketed one is in
    /// force). CPU tensors ask for huge pages; without them streaming runs ~10% slower.
    #[serde(default)]
    pub transparent_hugepage: String,
    /// The compiler that built this opledger.
    pub rustc: String,
    pub backend: String,
    /// The CUDA driver found, or why none was.
    pub cuda_driver: String,
    /// Environment variables that change what runs (threads, devices, library paths).
    pub env_vars: std::collections::BTreeMap<String, String>,
    /// Every spec file of the run with its SHA-256.
    pub spec_files: Vec<SpecFile>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpecFile {
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
}

/// The verdict of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum RunStatus {
    Pass,
    Fail,
    /// Nothing failed, but a gate could not decide even after measuring again (exit 0).
    Inconclusive,
}

impl RunStatus {
    pub fn word(self) -> &'static str {
        match self {
            RunStatus::Pass => "PASS",
            RunStatus::Fail => "FAIL",
            RunStatus::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// In lower case: a case's verdict as the store records it and the HTML pages' classes.
    pub fn key(self) -> &'static str {
        match self {
            RunStatus::Pass => "pass",
            RunStatus::Fail => "fail",
            RunStatus::Inconclusive => "inconclusive",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunVerdict {
    pub status: RunStatus,
    pub specs_passed: usize,
    pub specs_failed: usize,
    /// Specs whose regression gate stayed inconclusive after re-measuring (not failures).
    #[serde(default)]
    pub inconclusive: usize,
    pub checks_failed: usize,
    pub warnings: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VariantResult {
    pub variant: Variant,
    /// Who ran this side when it is the user's code (a worker), not the backend's kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    pub ledger: VariantLedger,
    pub bytes: u64,
    pub flops: u64,
    pub intensity: f64,
    /// Roofline prediction on the measured ceilings.
    pub predicted: Roofline,
    pub summary: Option<Summary>,
    pub achieved: Option<Achieved>,
    /// Against what the backend's kernels execute on their SIMD level, where that differs from
    /// the ledger's nominal FLOPs (the bound the kernel really has there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_level: Option<crate::verdict::OnLevel>,
}

impl RunVerdict {
    /// The exit code of this verdict: 1 when a spec failed, or (with `fail_on_inconclusive`)
    /// was INCONCLUSIVE; else 0. `run`, `compare` and `merge` all decide with this.
    pub fn exit_code(&self, fail_on_inconclusive: bool) -> crate::error::ExitCode {
        if self.specs_failed > 0 || (fail_on_inconclusive && self.inconclusive > 0) {
            crate::error::ExitCode::GateFailed
        } else {
            crate::error::ExitCode::Pass
        }
    }

    /// The exit code for `git bisect run`: 0 PASS (good), 1 FAIL (bad), 125 INCONCLUSIVE (skip
    /// the commit: the run could not tell).
    pub fn bisect_code(&self) -> crate::error::ExitCode {
        if self.specs_failed > 0 {
            crate::error::ExitCode::GateFailed
        } else if self.inconclusive > 0 {
            crate::error::ExitCode::BisectSkip
        } else {
            crate::error::ExitCode::Pass
        }
    }

    /// The verdict of a run's specs: the three counts partition them.
    pub fn of(results: &[SpecResult]) -> RunVerdict {
        // The three counts partition the specs: a failed spec is failed whatever its gate said.
        let failed = results.iter().filter(|r| r.status == Status::Fail).count();
        let inconclusive = results
            .iter()
            .filter(|r| r.verdict() == RunStatus::Inconclusive)
            .count();
        // INCONCLUSIVE (the gate could not decide even after re-measuring) is not a failure: the
        // exit code stays 0 and the report says which specs to look at.
        let status = if failed > 0 {
            RunStatus::Fail
        } else if inconclusive > 0 {
            RunStatus::Inconclusive
        } else {
            RunStatus::Pass
        };
        RunVerdict {
            status,
            inconclusive,
            specs_passed: results.len() - failed - inconclusive,
            specs_failed: failed,
            checks_failed: results
                .iter()
                .flat_map(|r| &r.checks)
                .filter(|c| c.status == Status::Fail)
                .count(),
            warnings: results
                .iter()
                .map(|r| {
                    r.warnings.len() + r.checks.iter().filter(|c| c.status == Status::Warn).count()
                })
                .sum(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpecResult {
    pub name: String,
    pub title: String,
    pub file: String,
    /// SHA-256 of the spec file's bytes: which exact spec this result measured.
    #[serde(default)]
    pub spec_sha256: String,
    /// Set when this spec is one point of a sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepPoint>,
    pub workload: Workload,
    pub workload_desc: String,
    pub checklist: Vec<ChecklistItem>,
    pub expect: Expect,
    /// The correctness tolerance applied (the spec's, or the default of its workload). Results
    /// written before it was recorded read it from `expect.tolerance`.
    #[serde(default)]
    pub tolerance: AppliedTolerance,
    pub gate: Gate,
    pub before: VariantResult,
    pub after: VariantResult,
    /// 1 − bytes(after)/bytes(before).
    pub io_saving: f64,
    /// 1 − T_pred(after)/T_pred(before) on the measured ceilings: the most a saving can be.
    pub predicted_time_saving: f64,
    /// The most a time saving can plausibly be: 1 − T_roofline(after) / T(before) — the after
    /// variant at its roofline, against the before variant's measured median or, where that is
    /// shorter, its compute and memory times with no overlap. A measured saving above it (plus
    /// slack) is suspicious: the after variant would beat its roofline.
    #[serde(default)]
    pub max_time_saving: f64,
    /// True when [`Self::max_time_saving`] rests on the before variant's measured median (a
    /// before side slower than its roofline); false in archives written before it could.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub max_time_saving_measured: bool,
    /// Measured 1 − t(after)/t(before), paired bootstrap.
    pub time_saving: Option<Estimate>,
    /// For launch chains: (T_eager − T_graph)/(N − 1), seconds per launch, paired bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_overhead_secs: Option<Estimate>,
    pub samples: Option<PairSamples>,
    /// Set when the gate measured twice: the samples hold the first pass's pairs, this many,
    /// followed by the second's (the summaries above are the second pass's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_pass_pairs: Option<usize>,
    pub correctness: Option<Correctness>,
    pub baseline: BaselineOutcome,
    pub checks: Vec<Check>,
    pub warnings: Vec<String>,
    /// A backend error that stopped this spec (the run went on with the others).
    pub error: Option<String>,
    pub status: Status,
    /// Hardware counters of both variants against their ledgers (`opledger counters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<SpecCounters>,
    /// Both sides counted under Valgrind's cache simulator (`run --measure counts|both`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<crate::measure::counts::SpecCounts>,
    /// The counts gate: the counted sides against their counts baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts_gate: Option<CountsGateOutcome>,
    /// The measurements whose gate could not decide while another measurement's gate decided:
    /// set aside (reported as not judged) by the one rule of how measurements combine
    /// (`gate::rule::set_aside`). Empty in archives written before the rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set_aside: Vec<crate::gate::rule::Measurement>,
    /// The GPU's clocks, power and what limited its clocks while the samples ran (a GPU with
    /// `nvidia-smi`; none on a CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_state: Option<crate::device::DeviceState>,
}

/// A spec's variants as the GPU's counters saw them, beside the ledger (`opledger counters`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpecCounters {
    /// The export the counters came from (file name) and its layout (`raw` or `details`).
    pub source: String,
    pub layout: String,
    pub before: VariantCounters,
    pub after: VariantCounters,
}

/// The sums over one execution of a variant's kernel launches. A metric the export lacks, or
/// gives as `n/a` for any launch, is absent (never zero).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VariantCounters {
    pub launches: u64,
    /// The kernels launched, in order, with how many times each.
    pub kernels: Vec<(String, u64)>,
    /// `dram__bytes_read.sum`.
    pub dram_read_bytes: Option<f64>,
    /// `dram__bytes_write.sum` (reported, not judged: dirty lines are written back after the
    /// profiled range, so it reads low).
    pub dram_write_bytes: Option<f64>,
    /// `lts__t_bytes.sum`: bytes through L2.
    pub l2_bytes: Option<f64>,
    /// `gpu__time_duration.sum`, under the profiler (cache control, serialized launches): not
    /// a timing to compare with the run's.
    pub gpu_time_secs: Option<f64>,
    /// The bytes the ledger says this variant reads from device memory.
    pub ledger_read_bytes: u64,
    /// The bytes the ledger says this variant writes.
    pub ledger_write_bytes: u64,
    /// dram_read_bytes / ledger_read_bytes.
    pub read_ratio: Option<f64>,
    /// Set when the read ratio is below 0.95 or above 1.5 (or cannot be formed): what it means.
    pub finding: Option<String>,
}

impl SpecResult {
    pub fn check(&self, name: crate::verdict::CheckName) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The spec's verdict, the one every command shows: FAIL when a check failed, INCONCLUSIVE
    /// when nothing failed but a claim or a gate could not decide (a gate set aside because
    /// another measurement decided does not hold it open: `gate::rule`), PASS otherwise.
    pub fn verdict(&self) -> RunStatus {
        // The time gate's state holds the spec open as its check does (unless set aside).
        let time_open = self.baseline.state == Some(RegressionState::Inconclusive)
            && !self
                .set_aside
                .contains(&crate::gate::rule::Measurement::Time);
        match crate::gate::rule::verdict_weight(self.status, &self.checks, &self.set_aside) {
            2 => RunStatus::Fail,
            1 => RunStatus::Inconclusive,
            _ if time_open => RunStatus::Inconclusive,
            _ => RunStatus::Pass,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChecklistRow {
    pub key: String,
    pub title: String,
    pub status: Status,
    pub mark: String,
    pub evidence: String,
    pub specs: Vec<String>,
}

/// One point of a sweep series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepRow {
    pub spec: String,
    pub label: String,
    /// Value of the first swept parameter.
    pub x: u64,
    pub before_bytes: u64,
    pub after_bytes: u64,
    pub before_secs: Option<f64>,
    pub after_secs: Option<f64>,
    pub io_saving: f64,
    pub time_saving: Option<f64>,
    /// The point's counted DRAM bytes beside its ledger's, each side, where its sides were
    /// counted at sizes of their own (not one size for every point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<CountedPoint>,
}

/// A sweep point's counts: each side's simulated DRAM bytes against its ledger, and the
/// workload counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CountedPoint {
    /// The workload counted (`measure.counts_sizes` applied).
    pub workload: String,
    pub before: CountedBytes,
    pub after: CountedBytes,
}

/// One counted side's DRAM bytes (read and written) against its ledger's, and whether the side
/// holds up against its ledger (`None`: not compared).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CountedBytes {
    pub dram_bytes: u64,
    pub ledger_bytes: u64,
    pub read_ratio: f64,
    pub write_ratio: f64,
    pub agrees: Option<bool>,
}

/// How a sweep's counted bytes scale against the ledger's: log-log slopes between the first
/// and the last point (bytes ∝ x^slope), under the cache model the points were counted on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CountedScaling {
    /// The model's last level, in bytes.
    pub ll_bytes: u64,
    /// The model is the spec's own (`measure.counts_cache_model`).
    pub spec_cache_model: bool,
    pub before_slope: Option<f64>,
    pub before_ledger_slope: Option<f64>,
    pub after_slope: Option<f64>,
    pub after_ledger_slope: Option<f64>,
}

/// A sweep: how bytes and time scale with the swept parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepSeries {
    pub group: String,
    pub param: String,
    pub before_variant: Variant,
    pub after_variant: Variant,
    pub rows: Vec<SweepRow>,
    /// Log-log slopes between the first and the last point: bytes ∝ x^slope.
    pub before_bytes_slope: Option<f64>,
    pub after_bytes_slope: Option<f64>,
    pub before_time_slope: Option<f64>,
    pub after_time_slope: Option<f64>,
    /// Where every point was counted at sizes of its own: how the counted bytes scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<CountedScaling>,
}

/// Reads `results.json` of a run folder, refusing another schema version; results written
/// before the applied tolerance was recorded get it from their spec.
pub fn load(dir: &std::path::Path) -> crate::error::Result<RunResult> {
    use crate::error::Error;
    let path = dir.join("results.json");
    let bytes = crate::files::read_in(
        dir,
        "results.json",
        crate::files::MAX_RESULTS_BYTES,
        "results file",
    )?;
    let mut run: RunResult = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
        path: path.clone(),
        message: format!("not a valid opledger results file: {e}"),
    })?;
    if !(OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&run.schema_version) {
        return Err(Error::Corrupt {
            path: path.clone(),
            message: format!(
                "results schema version {} is not one this opledger reads ({OLDEST_SCHEMA_VERSION} to {SCHEMA_VERSION}; written by another opledger version?)",
                run.schema_version,
            ),
        });
    }
    // An archive written before secrets were masked at the source may hold a store URL's
    // password in its command line or environment: what is read from it never does.
    run.redact_secrets();
    if run.schema_version == 1 {
        upgrade_from_1(&mut run);
    }
    Ok(run)
}

/// The one step from version 1: what its results left to their spec is filled in (the applied
/// tolerance, where it was not recorded), and nothing is set aside (version 1 held a spec open
/// while any gate could not decide; its verdicts read as they were written). The version read
/// stays in `schema_version`, so that its archive is audited and rendered as written.
fn upgrade_from_1(run: &mut RunResult) {
    for s in &mut run.specs {
        // Results written before the applied tolerance was recorded: the spec named it.
        if s.tolerance.source.is_empty() {
            if let Some(t) = s.expect.tolerance {
                s.tolerance = AppliedTolerance {
                    rtol: t.rtol.0,
                    atol: t.atol.0,
                    source: "from the spec".into(),
                };
            }
        }
        s.set_aside.clear();
    }
}

/// The schema of `results.json` (what `opledger run` writes and `report`/`compare` read).
pub fn schema() -> serde_json::Value {
    let mut root = crate::spec::schema::generator()
        .into_root_schema_for::<RunResult>()
        .to_value();
    root["$id"] = serde_json::json!("https://opledger.dev/schemas/results.schema.json");
    root["title"] = serde_json::json!("opledger results.json");
    root
}
