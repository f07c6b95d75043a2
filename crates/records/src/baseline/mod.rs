//! Baselines: the archived before/after evidence of each spec on each device, under
//! `baselines/<device-key>/<spec-name>.json`. Written only on `--accept`, atomically (temp file,
//! fsync, rename, fsync of the directory), so a reader or a crash never sees a torn file.
//! This module is the store only: what a baseline file holds, where it lives, reading it,
//! writing it and the lock around writers; judging a run against it is the gate's (`gate/`).

pub mod counts;

use crate::device::{Ceilings, DeviceInfo};
use crate::error::{Error, Result};
use crate::measure::stats::{Estimate, Summary};
use crate::measure::MeasureConfig;
use crate::spec::Workload;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const BASELINE_SCHEMA_VERSION: u32 = 1;

/// The folder of baselines every command reads and writes unless `--baselines` names another.
pub const DEFAULT_DIR: &str = "baselines";

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
    if b.device.kind.has_legacy_key()
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

/// A baseline found for a device: where it is (and where `--accept` writes it), and the file it
/// was read from when that is the folder of the older, coarser CPU key.
pub struct Found {
    pub path: PathBuf,
    pub baseline: Option<BaselineFile>,
    pub legacy: Option<PathBuf>,
}

/// The baseline of `spec` on `device`: `root/<key>/<spec>.json`; failing that, for a CPU, the
/// file in the folder of the older key (`cpu-<model>-<N>c`) when what it recorded (SIMD level,
/// cores, cache) is this machine. A legacy file of another SIMD level or cache is not this
/// device's baseline: none is found, which is neutral.
pub fn find(root: &Path, device: &DeviceInfo, spec: &str) -> Result<Found> {
    let path = path_for(root, &device.key, spec);
    let baseline = load(&path)?;
    if baseline.is_some() || !device.kind.has_legacy_key() {
        return Ok(Found {
            path,
            baseline,
            legacy: None,
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
    Ok(Found {
        path,
        legacy: old.as_ref().map(|_| legacy),
        baseline: old,
    })
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
        std::fs::create_dir_all(root).map_err(|e| Error::write("creating", root, e))?;
        let path = root.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::write("opening lock file", &path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                eprintln!(
                    "opledger: waiting for the lock on {} (another opledger is accepting baselines there)...",
                    path.display()
                );
                file.lock().map_err(|e| Error::write("locking", &path, e))?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::write("locking", &path, e)),
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
