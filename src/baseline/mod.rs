//! Baselines: the archived before/after evidence of each spec on each device, under
//! `baselines/<device-key>/<spec-name>.json`. Written only on `--accept`, atomically (temp file,
//! fsync, rename, fsync of the directory), so a reader or a crash never sees a torn file.
//! A baseline of another device, or of a changed workload, is never compared on raw time.

use crate::device::{Ceilings, DeviceInfo};
use crate::error::{Error, Result};
use crate::measure::stats::{ratio_ci, Estimate, Summary};
use crate::measure::MeasureConfig;
use crate::results::{BaselineOutcome, BaselineStatus, SpecResult};
use crate::spec::Workload;
use crate::verdict::{gate_state, RegressionState, Spread, POOL_MIN_RUNS};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const BASELINE_SCHEMA_VERSION: u32 = 1;
/// Raw samples kept per variant in a baseline.
pub const MAX_STORED_SAMPLES: usize = 200;
/// Accepted runs remembered (their medians), to know the spread between runs.
pub const MAX_HISTORY: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    pub recorded_utc: String,
    pub git_sha: String,
    pub before_median_secs: f64,
    pub after_median_secs: f64,
    /// Median of that run's per-pair after/before ratios (what relative gates pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_median: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BaselineFile {
    pub schema_version: u32,
    pub spec: String,
    pub recorded_utc: String,
    pub git_sha: String,
    pub opledger_version: String,
    pub device: DeviceInfo,
    pub ceilings: Ceilings,
    pub workload: Workload,
    pub measure: MeasureConfig,
    pub before: Summary,
    pub after: Summary,
    pub time_saving: Option<Estimate>,
    pub before_samples_secs: Vec<f64>,
    pub after_samples_secs: Vec<f64>,
    pub history: Vec<HistoryEntry>,
}

/// `root/<device-key>/<spec>.json`. Both parts were validated to `[a-z0-9-]`.
pub fn path_for(root: &Path, device_key: &str, spec: &str) -> PathBuf {
    root.join(device_key).join(format!("{spec}.json"))
}

/// Loads a baseline; `Ok(None)` when there is none, an error naming the file when it is damaged.
pub fn load(path: &Path) -> Result<Option<BaselineFile>> {
    let bytes = match crate::files::read_regular(path, crate::files::MAX_BASELINE_BYTES, "baseline")
    {
        Ok(b) => b,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let b: BaselineFile = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        message: format!(
            "damaged baseline ({e}); it is left as it is: fix it, delete it, or replace it with `run --accept`"
        ),
    })?;
    let mut b = b;
    // A CPU baseline written under the older key (model and cores only) is keyed by what it
    // recorded: its SIMD level and cache decide which machine it belongs to.
    if b.device.kind == crate::device::DeviceKind::Cpu
        && b.device.key == crate::device::legacy_cpu_key(&b.device.name, b.device.cores)
    {
        b.device.key = b.device.current_key();
    }
    if b.schema_version != BASELINE_SCHEMA_VERSION {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: format!(
                "baseline schema version {} is not the supported {BASELINE_SCHEMA_VERSION}",
                b.schema_version
            ),
        });
    }
    let all = b.before_samples_secs.iter().chain(&b.after_samples_secs);
    if b.after_samples_secs.is_empty()
        || b.before_samples_secs.is_empty()
        || all.clone().any(|t| !(t.is_finite() && *t > 0.0))
    {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: "damaged baseline: samples must be non-empty, finite and positive".into(),
        });
    }
    Ok(Some(b))
}

/// A baseline found for a device: where it is (and where `--accept` writes it) and a note when
/// it was read from the folder of the older, coarser CPU key.
pub struct Found {
    pub path: PathBuf,
    pub baseline: Option<BaselineFile>,
    pub note: Option<String>,
}

/// The baseline of `spec` on `device`: `root/<key>/<spec>.json`; failing that, for a CPU, the
/// file in the folder of the older key (`cpu-<model>-<N>c`) when what it recorded (SIMD level,
/// cores, cache) is this machine. A legacy file of another SIMD level or cache is not this
/// device's baseline: none is found, which is neutral.
pub fn find(root: &Path, device: &DeviceInfo, spec: &str) -> Result<Found> {
    let path = path_for(root, &device.key, spec);
    let baseline = load(&path)?;
    if baseline.is_some() || device.kind != crate::device::DeviceKind::Cpu {
        return Ok(Found {
            path,
            baseline,
            note: None,
        });
    }
    let legacy = path_for(
        root,
        &crate::device::legacy_cpu_key(&device.name, device.cores),
        spec,
    );
    let old = match load(&legacy) {
        Ok(Some(b)) if b.device.key == device.key => Some(b),
        // Another machine's, or damaged: not this device's baseline (the files stay as they are).
        _ => None,
    };
    let note = old.as_ref().map(|_| {
        format!(
            "baseline read from {} (the folder of the older device key); `run --accept` writes it to {}",
            legacy.display(),
            path.display()
        )
    });
    Ok(Found {
        path,
        baseline: old,
        note,
    })
}

/// Compares a fresh result with its baseline; returns the outcome and environment warnings.
pub fn compare(
    base: &BaselineFile,
    path: &Path,
    result: &SpecResult,
    device: &DeviceInfo,
    ceilings: &Ceilings,
    resamples: usize,
    seed: u64,
) -> (BaselineOutcome, Vec<String>) {
    use crate::spec::GateCompare;
    let mode = result.gate.compare;
    let max_regression = result.gate.max_regression.0;
    let mut outcome = BaselineOutcome {
        status: BaselineStatus::NotComparable,
        path: path.display().to_string(),
        ratio: None,
        state: None,
        threshold: threshold(base, max_regression, mode == GateCompare::Relative),
        message: String::new(),
        basis: None,
        note: None,
        spread: None,
        guard: None,
    };
    let mut warnings = Vec::new();
    if base.device.key != device.key {
        outcome.message = format!(
            "baseline was recorded on device {}, this run is on {}: not compared on raw time",
            base.device.key, device.key
        );
        return (outcome, warnings);
    }
    if base.workload != result.workload {
        outcome.message = "the spec's workload changed since the baseline was accepted: not compared; accept a new baseline".into();
        return (outcome, warnings);
    }
    let Some(samples) = &result.samples else {
        outcome.message = "no samples in this run".into();
        return (outcome, warnings);
    };
    for (what, a, b) in [
        ("CPU governor", &base.device.governor, &device.governor),
        ("kernel", &base.device.kernel, &device.kernel),
        ("compiler", &base.device.rustc, &device.rustc),
        ("SIMD level", &base.device.simd, &device.simd),
        ("GPU driver", &base.device.driver, &device.driver),
    ] {
        if a != b {
            warnings.push(format!(
                "{what} differs from the baseline's ({b} now, {a} then): timings may not be comparable"
            ));
        }
    }
    // Baselines written before memory was recorded say 0: nothing to compare.
    // The kernel reserves a little more or less memory from boot to boot: only a difference of
    // more than 1% is another machine's memory.
    let (now, then) = (device.memory_bytes as f64, base.device.memory_bytes as f64);
    if then > 0.0 && (now - then).abs() > 0.01 * then {
        warnings.push(format!(
            "device memory differs from the baseline's ({:.1} GiB now, {:.1} GiB then)",
            now / (1u64 << 30) as f64,
            then / (1u64 << 30) as f64
        ));
    }
    if base.device.cores != device.cores {
        warnings.push(format!(
            "core count differs from the baseline's ({} now, {} then)",
            device.cores, base.device.cores
        ));
    }
    // Ceiling drift guard: when the roof that bounds this spec moved more than the gate can
    // absorb, the machine is not in the state the baseline measured (another SIMD level, a
    // neighbour saturating memory): INCONCLUSIVE at once, without a second pass.
    if let Some(why) = ceiling_drift(base, result, ceilings, device.llc_bytes, max_regression) {
        outcome.status = BaselineStatus::Compared;
        outcome.state = Some(RegressionState::Inconclusive);
        outcome.message = format!("not judged: {why}");
        outcome.note = Some(why.clone());
        outcome.guard = Some(why);
        return (outcome, warnings);
    }
    let judge = |relative| Judgement::of(base, samples, relative, max_regression, resamples, seed);
    let decided = match mode {
        GateCompare::Raw => judge(false),
        GateCompare::Relative => judge(true),
        GateCompare::Both => {
            let (raw, rel) = (judge(false), judge(true));
            match (raw.state, rel.state) {
                // The after variant lost ground against the before variant measured in the same
                // pairs: a regression of the code under test, whatever the machine did.
                (_, RegressionState::Fail) => Judgement {
                    message: format!("{}; raw time: {}", rel.message, raw.message),
                    ..rel
                },
                // Slower in raw time only: both variants slowed alike. The machine drifted, or
                // code both variants share regressed; timing alone cannot tell which.
                (RegressionState::Fail, _) => Judgement {
                    note: Some(
                        "both variants slower alike: machine drift or shared code".into(),
                    ),
                    state: RegressionState::Inconclusive,
                    message: format!(
                        "{}; but {}: both variants are slower than at the baseline alike — the machine drifted, or code both share regressed (a quiet machine or `compare: raw` tells which)",
                        raw.message, rel.message
                    ),
                    ..raw
                },
                // Neither fails: the after/before comparison decides (PASS, IMPROVED or
                // INCONCLUSIVE). Raw time measures the machine as much as the code; its verdict
                // is reported, and a raw-only speedup is never called an improvement (it would
                // restart the baseline's history on drift).
                _ => Judgement {
                    message: format!("{}; raw time: {}", rel.message, raw.message),
                    ..rel
                },
            }
        }
    };
    outcome.status = BaselineStatus::Compared;
    outcome.ratio = Some(decided.ratio);
    outcome.state = Some(decided.state);
    outcome.threshold = decided.threshold;
    outcome.message = decided.message;
    outcome.note = decided.note;
    outcome.spread = Some(decided.spread);
    outcome.basis = Some(
        if decided.relative {
            "after/before"
        } else {
            "after time"
        }
        .into(),
    );
    (outcome, warnings)
}

/// [`compare`] for a result measured in two passes (`first_pass_pairs` set: its samples are the
/// first pass's pairs followed by the second's). Each pass is judged, then both together, and
/// [`crate::verdict::combine_passes`] decides: passes that contradict each other give
/// INCONCLUSIVE with both figures. `opledger compare` judges archives with this too, so it
/// reaches the run's own verdict on the same archive.
pub fn compare_passes(
    base: &BaselineFile,
    path: &Path,
    result: &SpecResult,
    device: &DeviceInfo,
    ceilings: &Ceilings,
    resamples: usize,
    seed: u64,
) -> (BaselineOutcome, Vec<String>) {
    let judge = |r: &SpecResult| compare(base, path, r, device, ceilings, resamples, seed);
    let (Some(n), Some(samples)) = (result.first_pass_pairs, &result.samples) else {
        return judge(result);
    };
    if n == 0 || n >= samples.before_secs.len() {
        return judge(result);
    }
    let part = |range: std::ops::Range<usize>| {
        let mut r = result.clone();
        r.samples = Some(crate::measure::PairSamples {
            before_secs: samples.before_secs[range.clone()].to_vec(),
            after_secs: samples.after_secs[range.clone()].to_vec(),
            after_first: samples.after_first.get(range).unwrap_or_default().to_vec(),
            ..samples.clone()
        });
        r
    };
    let len = samples.before_secs.len();
    let (first, _) = judge(&part(0..n));
    let (second, _) = judge(&part(n..len));
    let (mut both, warnings) = judge(result);
    if both.guard.is_some() {
        return (both, warnings);
    }
    let state = |o: &BaselineOutcome| o.state.unwrap_or(RegressionState::Inconclusive);
    let (decided, why) =
        crate::verdict::combine_passes(state(&first), state(&second), state(&both));
    let show = |o: &BaselineOutcome| {
        o.ratio.map_or("—".into(), |r| {
            format!(
                "{} x{:.3} [{:.3}, {:.3}]",
                state(o).word(),
                r.point,
                r.lo,
                r.hi
            )
        })
    };
    both.message = format!(
        "{}both passes together: {}; first pass: {}; second pass: {}",
        why.map(|w| format!("INCONCLUSIVE: {w}; "))
            .unwrap_or_default(),
        both.message,
        first.message,
        second.message
    );
    if let Some(why) = why {
        both.note = Some(format!(
            "{why}: first {}, second {}",
            show(&first),
            show(&second)
        ));
    }
    both.state = Some(decided);
    (both, warnings)
}

/// One comparison of a run with its baseline: on raw after times or on after/before ratios.
struct Judgement {
    /// True when `ratio` compares after/before ratios, false for raw after times.
    relative: bool,
    ratio: Estimate,
    state: RegressionState,
    threshold: f64,
    message: String,
    /// A short reason for the terminal, where the decision needs one.
    note: Option<String>,
    spread: Spread,
}

impl Judgement {
    fn of(
        base: &BaselineFile,
        samples: &crate::measure::PairSamples,
        relative: bool,
        max_regression: f64,
        resamples: usize,
        seed: u64,
    ) -> Judgement {
        let (new, old) = compared_values(
            relative,
            (&samples.before_secs, &samples.after_secs),
            (&base.before_samples_secs, &base.after_samples_secs),
        );
        let pooled = history_values(base, relative);
        let mut spread = spread_of(&pooled);
        // A run noisier than the accepted one widens the drift the gate allows for.
        spread.noise_factor = noise_factor(&new, &old);
        let ratio = if pooled.len() >= POOL_MIN_RUNS {
            // The reference is the geometric mean of the accepted runs' medians, so one unlucky
            // accept does not move the gate; the between-run spread is in the thresholds, the
            // CI is this run's own.
            let reference = geometric_mean(&pooled);
            let m = crate::measure::stats::median_ci(&new, resamples, seed);
            Estimate {
                point: m.point / reference,
                lo: m.lo / reference,
                hi: m.hi / reference,
            }
        } else {
            ratio_ci(&new, &old, resamples, seed)
        };
        let state = gate_state(&ratio, max_regression, &spread);
        let threshold = spread.fail_threshold(max_regression);
        let message = format!(
            "{} median ratio {:.3} (95% CI {:.3} .. {:.3}){}, FAIL above +{:.1}%, limit +{:.1}%: {} ({})",
            if relative {
                "(after/before)/baseline's"
            } else {
                "after/baseline"
            },
            ratio.point,
            ratio.lo,
            ratio.hi,
            if pooled.len() >= POOL_MIN_RUNS {
                format!(
                    " against the pooled medians of {} accepted runs",
                    pooled.len()
                )
            } else {
                String::new()
            },
            threshold * 100.0,
            max_regression * 100.0,
            match state {
                RegressionState::Pass => "within the limit",
                RegressionState::Fail => "REGRESSION",
                RegressionState::Improved => "improved",
                RegressionState::Inconclusive if !spread.can_pass(max_regression) => {
                    "inconclusive (this machine drifts more between runs than the limit)"
                }
                RegressionState::Inconclusive => "inconclusive (the CI reaches past the limit)",
            },
            spread.describe(max_regression)
        );
        Judgement {
            relative,
            ratio,
            state,
            threshold,
            message,
            note: None,
            spread,
        }
    }
}

/// The drift of unchanged code from one value per accepted run (log-sd; unknown with fewer
/// than [`POOL_MIN_RUNS`]).
pub fn spread_of(v: &[f64]) -> Spread {
    if v.len() < POOL_MIN_RUNS {
        return Spread {
            runs: v.len(),
            ..Spread::unknown()
        };
    }
    let k = v.len() as f64;
    let logs: Vec<f64> = v.iter().map(|x| x.ln()).collect();
    let mean = logs.iter().sum::<f64>() / k;
    let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (k - 1.0)).sqrt();
    Spread {
        runs: v.len(),
        log_sd: sd,
        noise_factor: 1.0,
    }
}

/// How much wider this run's spread of compared values is than the baseline's samples' (median
/// absolute deviation of the logs), at least 1 and at most 4.
fn noise_factor(new: &[f64], old: &[f64]) -> f64 {
    let mad = |v: &[f64]| {
        let logs: Vec<f64> = v.iter().filter(|x| **x > 0.0).map(|x| x.ln()).collect();
        if logs.len() < 3 {
            return None;
        }
        let m = crate::measure::stats::median(&logs);
        let dev: Vec<f64> = logs.iter().map(|l| (l - m).abs()).collect();
        Some(crate::measure::stats::median(&dev))
    };
    match (mad(new), mad(old)) {
        (Some(n), Some(o)) if o > 0.0 => (n / o).clamp(1.0, 4.0),
        _ => 1.0,
    }
}

/// Most the bounding ceiling may move against the baseline's before the gate stops judging: a
/// quiet VM's triad and FMA probes move by about ±10% between runs, a change of SIMD level or a
/// neighbour saturating memory by 2x and more.
pub const CEILING_DRIFT_MIN: f64 = 0.25;

/// Why this run's ceilings are too far from the baseline's to judge it, if they are: the roof
/// that bounds the spec (bandwidth, or the compute peak of its dtype) moved by more than
/// max(25%, 2 x max_regression). Probes smaller than the last-level cache (`--probe-mib`
/// below it, as small test runs use) measure the cache, whose figures swing with any load: no
/// roof to guard, so no guard.
fn ceiling_drift(
    base: &BaselineFile,
    result: &SpecResult,
    now: &Ceilings,
    llc_bytes: u64,
    max_regression: f64,
) -> Option<String> {
    if now.array_bytes < llc_bytes || base.ceilings.array_bytes < llc_bytes {
        return None;
    }
    let dtype = result.workload.dtype();
    let (now, then) = (now.for_dtype(dtype), base.ceilings.for_dtype(dtype));
    let (what, a, b, unit, scale) = match result.expect.bound {
        crate::spec::Bound::Bandwidth => (
            "triad bandwidth",
            now.bandwidth(),
            then.bandwidth(),
            "GB/s",
            1e9,
        ),
        crate::spec::Bound::Compute => (
            "compute peak",
            now.peak_flops(),
            then.peak_flops(),
            "GFLOP/s",
            1e9,
        ),
    };
    if !(a > 0.0 && b > 0.0) {
        return None;
    }
    let allowed = CEILING_DRIFT_MIN.max(2.0 * max_regression);
    let r = a / b;
    (r > 1.0 + allowed || r < 1.0 / (1.0 + allowed)).then(|| {
        format!(
            "the {what} moved from {:.1} {unit} at the baseline to {:.1} {unit} now (x{r:.2}, more than the ±{:.0}% the gate absorbs): the machine is not in the state the baseline measured",
            b / scale,
            a / scale,
            allowed * 100.0
        )
    })
}

/// pair's after/before, so that drift shared by the two members of a pair cancels.
pub fn compared_values(
    relative: bool,
    new: (&[f64], &[f64]),
    base: (&[f64], &[f64]),
) -> (Vec<f64>, Vec<f64>) {
    let paired =
        |(b, a): (&[f64], &[f64])| -> Vec<f64> { a.iter().zip(b).map(|(a, b)| a / b).collect() };
    if relative {
        (paired(new), paired(base))
    } else {
        (new.1.to_vec(), base.1.to_vec())
    }
}

/// One value per accepted run, as the gate compares them: the `after` median, or (relative) the
/// median of the pairs' after/before ratios (after/before of the medians for runs recorded
/// before that was kept).
pub fn history_values(base: &BaselineFile, relative: bool) -> Vec<f64> {
    base.history
        .iter()
        .map(|h| {
            if relative {
                h.relative_median
                    .unwrap_or(h.after_median_secs / h.before_median_secs)
            } else {
                h.after_median_secs
            }
        })
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect()
}

fn geometric_mean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// The FAIL threshold of a baseline before a run is measured: the spec's, but never below what
/// the spread between accepted runs implies ([`Spread::fail_threshold`]).
pub fn threshold(base: &BaselineFile, max_regression: f64, relative: bool) -> f64 {
    implied_threshold(&history_values(base, relative), max_regression)
}

/// [`threshold`] from one value per accepted run.
pub fn implied_threshold(v: &[f64], max_regression: f64) -> f64 {
    spread_of(v).fail_threshold(max_regression)
}

/// Builds the baseline of a passing result, carrying over the history of `old` — unless this
/// run measured a significant improvement over it (gate state `improved`): then the old medians
/// describe code that no longer runs, and pooling them with the new ones would put the
/// reference between the two, letting a regression back to the old speed pass. The history
/// restarts from this run (the next accepts rebuild the pool and its spread).
pub fn from_result(
    r: &SpecResult,
    device: &DeviceInfo,
    ceilings: &Ceilings,
    measure: &MeasureConfig,
    recorded_utc: &str,
    git_sha: &str,
    old: Option<&BaselineFile>,
) -> Option<BaselineFile> {
    let samples = r.samples.as_ref()?;
    let (before, after) = (r.before.summary?, r.after.summary?);
    let cap = |v: &[f64]| v[..v.len().min(MAX_STORED_SAMPLES)].to_vec();
    let improved = r.baseline.state == Some(RegressionState::Improved);
    let mut history: Vec<HistoryEntry> = old
        .filter(|o| o.workload == r.workload && o.device.key == device.key && !improved)
        .map(|o| o.history.clone())
        .unwrap_or_default();
    history.push(HistoryEntry {
        recorded_utc: recorded_utc.into(),
        git_sha: git_sha.into(),
        before_median_secs: before.median_secs,
        after_median_secs: after.median_secs,
        relative_median: Some(crate::measure::stats::median(
            &compared_values(
                true,
                (&samples.before_secs, &samples.after_secs),
                (&[], &[]),
            )
            .0,
        )),
    });
    if history.len() > MAX_HISTORY {
        history.drain(..history.len() - MAX_HISTORY);
    }
    Some(BaselineFile {
        schema_version: BASELINE_SCHEMA_VERSION,
        spec: r.name.clone(),
        recorded_utc: recorded_utc.into(),
        git_sha: git_sha.into(),
        opledger_version: env!("CARGO_PKG_VERSION").into(),
        device: device.clone(),
        ceilings: *ceilings,
        workload: r.workload.clone(),
        measure: *measure,
        before,
        after,
        time_saving: r.time_saving,
        before_samples_secs: cap(&samples.before_secs),
        after_samples_secs: cap(&samples.after_secs),
        history,
    })
}

/// A few lines that say what a baseline claims; diffed when accepting.
pub fn summary_text(b: &BaselineFile) -> String {
    let ms = |s: f64| s * 1e3;
    let mut t = format!(
        "spec: {}\ndevice: {}\nworkload: {}\nrecorded: {} ({})\nbefore median: {:.3} ms (95% CI {:.3} .. {:.3}), n={}\nafter median: {:.3} ms (95% CI {:.3} .. {:.3}), n={}\n",
        b.spec,
        b.device.key,
        serde_json::to_string(&b.workload).unwrap_or_default(),
        b.recorded_utc,
        b.git_sha,
        ms(b.before.median_secs),
        ms(b.before.ci_lo_secs),
        ms(b.before.ci_hi_secs),
        b.before.n,
        ms(b.after.median_secs),
        ms(b.after.ci_lo_secs),
        ms(b.after.ci_hi_secs),
        b.after.n,
    );
    if let Some(s) = b.time_saving {
        t.push_str(&format!(
            "time saving: {:.1}% (95% CI {:.1}% .. {:.1}%)\n",
            s.point * 100.0,
            s.lo * 100.0,
            s.hi * 100.0
        ));
    }
    t.push_str(&format!(
        "ceilings: triad {:.2} GB/s, FMA {:.1} GFLOP/s\n",
        b.ceilings.triad_bytes_per_sec / 1e9,
        b.ceilings.fma_flops_per_sec / 1e9
    ));
    t
}

/// Unified diff of the summaries of the old and new baseline.
pub fn summary_diff(path: &Path, old: Option<&BaselineFile>, new: &BaselineFile) -> String {
    let old_text = old.map(summary_text).unwrap_or_default();
    let new_text = summary_text(new);
    let name = path.display().to_string();
    similar::TextDiff::from_lines(&old_text, &new_text)
        .unified_diff()
        .header(&format!("{name} (old)"), &format!("{name} (new)"))
        .to_string()
}

use crate::files::write_atomic;

/// Removes the temp files a killed writer left in `dir` (`.opledger-*.tmp`). Call it only while
/// holding the store's lock, when no other writer can be between create and rename.
pub fn remove_stale_temp_files(dir: &Path) {
    crate::files::remove_temp_files(dir);
}

/// An exclusive lock on a baselines directory, held while a run with `--accept` reads, compares
/// and writes baselines, so that two such runs never interleave. Released on drop (and by the
/// OS if the process dies).
pub struct StoreLock {
    _file: std::fs::File,
}

impl StoreLock {
    /// Takes `root/.lock`, saying so on stderr while another process holds it.
    pub fn acquire(root: &Path) -> Result<Self> {
        std::fs::create_dir_all(root).map_err(|e| Error::io("creating", root, e))?;
        let path = root.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("opening lock file", &path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                eprintln!(
                    "opledger: waiting for the lock on {} (another opledger is accepting baselines there)...",
                    path.display()
                );
                file.lock().map_err(|e| Error::io("locking", &path, e))?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("locking", &path, e)),
        }
        Ok(StoreLock { _file: file })
    }
}

/// Stores a baseline atomically.
pub fn store(path: &Path, b: &BaselineFile) -> Result<()> {
    let mut json = serde_json::to_vec_pretty(b).map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        message: format!("cannot serialise baseline: {e}"),
    })?;
    json.push(b'\n');
    write_atomic(path, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_comparison_cancels_shared_drift_and_keeps_after_only_slowdowns() {
        let mut rng = crate::rng::Rng::new(8);
        let before: Vec<f64> = (0..40)
            .map(|_| 2.0 * (1.0 + 0.05 * rng.next_f64()))
            .collect();
        let after: Vec<f64> = before
            .iter()
            .map(|b| b * 0.5 * (1.0 + 0.02 * rng.next_f64()))
            .collect();
        // The machine was 30% slower when the baseline was taken: both variants alike.
        let bb: Vec<f64> = before.iter().map(|t| t * 1.3).collect();
        let ba: Vec<f64> = after.iter().map(|t| t * 1.3).collect();
        let (n, o) = compared_values(true, (&before, &after), (&bb, &ba));
        let r = ratio_ci(&n, &o, 500, 1);
        assert!((r.point - 1.0).abs() < 0.03 && r.hi - r.lo < 0.05, "{r:?}");
        let (n, o) = compared_values(false, (&before, &after), (&bb, &ba));
        assert!(
            ratio_ci(&n, &o, 500, 1).hi < 0.8,
            "raw time sees the drift as an improvement"
        );
        // Only the after variant was 10% faster then: relative sees a 10% slowdown.
        let fast_after: Vec<f64> = after.iter().map(|t| t / 1.1).collect();
        let (n, o) = compared_values(true, (&before, &after), (&before, &fast_after));
        let r = ratio_ci(&n, &o, 500, 1);
        assert!((r.point - 1.1).abs() < 0.02, "{r:?}");
    }

    #[test]
    fn implied_threshold_follows_the_spread_of_accepted_runs() {
        // Two runs: too few for a spread; the spec's threshold stands.
        assert_eq!(implied_threshold(&[1.0, 1.2], 0.05), 0.05);
        // Identical runs imply no spread: still the spec's.
        assert_eq!(implied_threshold(&[1.0; 5], 0.05), 0.05);
        // Runs spread by ±10%: sd of the logs ≈ 0.1, implied ≈ e^(t₀.₉₉,₄·0.1·√1.2) − 1
        // = e^(3.747·0.11) − 1 ≈ 51% (Student's t: five runs say little about the spread).
        let t = implied_threshold(&[0.9, 1.0, 1.1, 0.9, 1.1], 0.05);
        assert!((0.48..0.54).contains(&t), "{t}");
        // More runs with the same spread: a little lower (the reference is better known).
        let t10 = implied_threshold(&[0.9, 1.0, 1.1, 0.9, 1.1, 0.9, 1.0, 1.1, 0.9, 1.1], 0.05);
        assert!(t10 < t && t10 > 0.2, "{t10}");
    }

    #[test]
    fn a_roof_that_moved_past_what_the_gate_absorbs_stops_the_comparison() {
        let run: crate::results::RunResult =
            serde_json::from_str(include_str!("../../tests/fixtures/run-fixed/results.json"))
                .unwrap();
        let r = &run.specs[0];
        let mut device = run.device.clone();
        // Probes beyond the cache, as a real run measures them.
        device.llc_bytes = run.ceilings.array_bytes / 2;
        let base = from_result(
            r,
            &device,
            &run.ceilings,
            &run.measure,
            "2026-11-30T00:00:00Z",
            "abc",
            None,
        )
        .unwrap();
        let judge =
            |c: &Ceilings, d: &DeviceInfo| compare(&base, Path::new("b.json"), r, d, c, 200, 1).0;
        // The same roof: compared.
        assert!(judge(&run.ceilings, &device).guard.is_none());
        // The baseline's machine had 4x the bandwidth (the spec is bandwidth-bound).
        let slow = Ceilings {
            triad_bytes_per_sec: run.ceilings.triad_bytes_per_sec / 4.0,
            ..run.ceilings
        };
        let o = judge(&slow, &device);
        assert_eq!(o.state, Some(RegressionState::Inconclusive));
        assert!(
            o.guard
                .as_deref()
                .is_some_and(|g| g.contains("triad bandwidth moved")),
            "{o:?}"
        );
        // +20% is inside what the gate absorbs.
        let drifted = Ceilings {
            triad_bytes_per_sec: run.ceilings.triad_bytes_per_sec * 1.2,
            ..run.ceilings
        };
        assert!(judge(&drifted, &device).guard.is_none());
        // In-cache probes (smaller than the LLC) measure no roof: no guard.
        let mut big_cache = device.clone();
        big_cache.llc_bytes = run.ceilings.array_bytes * 2;
        assert!(judge(&slow, &big_cache).guard.is_none());
    }

    #[test]
    fn missing_is_none_and_damaged_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        assert!(load(&p).unwrap().is_none());
        std::fs::write(&p, b"{\"schema_version\": 1, \"spec\": ").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(
            e.contains("x.json") && e.contains("damaged baseline"),
            "{e}"
        );
        // Never overwritten by loading.
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"{\"schema_version\": 1, \"spec\": "
        );
    }
}
