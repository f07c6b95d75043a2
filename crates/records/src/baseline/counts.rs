//! Counts baselines: each spec's accepted counts, under `baselines/<engine-key>/<spec>.json`,
//! where the key is what decides counts besides the code (instruction set, SIMD level, cache
//! model — `CountsEngine::key`), so that a baseline accepted on one x86-64 machine gates on any
//! other, whatever its CPU model or load. Written only on `--accept`, atomically.

use crate::error::{Error, Result};
use crate::measure::counts::{Counts, CountsEngine, FunctionCounts};
use crate::spec::Workload;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const COUNTS_BASELINE_SCHEMA_VERSION: u32 = 1;

/// One side's accepted counts and where its work went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CountsSide {
    pub variant: String,
    pub counts: Counts,
    #[serde(default)]
    pub functions: Vec<FunctionCounts>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CountsBaseline {
    pub schema_version: u32,
    pub spec: String,
    pub recorded_utc: String,
    pub git_sha: String,
    pub opledger_version: String,
    pub engine: CountsEngine,
    pub workload: Workload,
    /// A side that was not counted (a worker's) has none.
    pub before: Option<CountsSide>,
    pub after: Option<CountsSide>,
}

/// `root/<engine-key>/<spec>.json`. Both parts are `[a-z0-9-]`.
pub fn path_for(root: &Path, engine: &CountsEngine, spec: &str) -> PathBuf {
    root.join(engine.key()).join(format!("{spec}.json"))
}

/// Loads a counts baseline; `Ok(None)` when there is none, an error naming the file when it is
/// damaged (the file is left as it is).
pub fn load(path: &Path) -> Result<Option<CountsBaseline>> {
    let bytes =
        match crate::files::read_regular(path, crate::files::MAX_BASELINE_BYTES, "counts baseline")
        {
            Ok(b) => b,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
    let damaged = |message: String| Error::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    let b: CountsBaseline = serde_json::from_slice(&bytes).map_err(|e| {
        damaged(format!(
            "damaged counts baseline ({e}); it is left as it is: fix it, delete it, or replace it with `run --measure counts --accept`"
        ))
    })?;
    if b.schema_version != COUNTS_BASELINE_SCHEMA_VERSION {
        return Err(damaged(format!(
            "counts baseline schema version {} is not the supported {COUNTS_BASELINE_SCHEMA_VERSION}",
            b.schema_version
        )));
    }
    if b.before.is_none() && b.after.is_none() {
        return Err(damaged(
            "damaged counts baseline: neither side has counts".into(),
        ));
    }
    Ok(Some(b))
}

/// Stores a counts baseline atomically.
pub fn store(path: &Path, b: &CountsBaseline) -> Result<()> {
    let mut json = serde_json::to_vec_pretty(b).map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        message: format!("cannot serialise counts baseline: {e}"),
    })?;
    json.push(b'\n');
    crate::files::write_atomic(path, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_is_none_and_damaged_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.json");
        assert!(load(&p).unwrap().is_none());
        std::fs::write(&p, b"{\"schema_version\": 1").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(
            e.contains("c.json") && e.contains("damaged counts baseline"),
            "{e}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"schema_version\": 1");
    }
}
