//! The archive of a run: a folder whose every file is listed, with its SHA-256, in a manifest
//! (`manifest.json`) written last. Loading an archive goes through here: the manifest is
//! verified (a file edited, removed or added after the run is refused), every string of
//! `results.json` that becomes a path component elsewhere (device keys, spec and case names,
//! sweep groups) passes one rule, and the stored verdict is re-derived from the checks and
//! measurements the archive holds, so a hand-edited `status` cannot pass for a result.
//!
//! What the manifest proves: that no file changed since the command that wrote it (an
//! accidental or naive edit, a truncated copy, a file slipped into the folder), and which
//! archive a report came from (the manifest's own digest). What it does not prove: that a
//! forger did not recompute the digests after editing; the name rule and the verdict audit
//! hold without the digests, so a recomputed manifest still cannot write outside a folder or
//! turn a failed check into a baseline.
//!
//! The layout is written here too, and only here: [`save`] writes a run folder or a merged one
//! (the spec files under `specs/`, the report template under `template/`, every output of the
//! registry in `report::output`, any extra files, then the manifest), [`rerender`] writes every
//! output again from changed results (counters imported, a report re-rendered) with the
//! template the run recorded, and [`create_run_dir`] names a new run's folder.

use crate::error::{Error, Result};
use crate::gate::stats::RegressionState;
use crate::report::output::{self, Rendering, Template};
use crate::results::{RunResult, RunVerdict, SpecResult};
use crate::verdict::CheckName;
use crate::verdict::{self, Check, Status};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The manifest's file name inside an archive.
pub const MANIFEST: &str = "manifest.json";
/// The manifest format this opledger writes and reads.
pub const MANIFEST_FORMAT: &str = "opledger-manifest/1";
/// Largest manifest read (a line per file: a few KiB for a suite).
const MAX_MANIFEST_BYTES: u64 = 16 << 20;
/// Most files an archive may list (a run holds tens).
const MAX_FILES: usize = 100_000;

/// The digest of one file of an archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    pub sha256: String,
    pub bytes: u64,
}

/// An input a derived archive was made from (a shard of a merge, the export `counters`
/// imported, the manifest an archive had before a command added to it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRecord {
    /// What it was: `shard`, `ncu export`, `previous manifest`.
    pub what: String,
    /// Its path as given on the command line.
    pub path: String,
    /// SHA-256 of the file (of its manifest, for a shard).
    pub sha256: String,
    /// The run it held, where it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `manifest.json`: every file of the archive with its digest, and what the archive was made
/// from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    /// The command that wrote this manifest (`run`, `merge`, `counters`, `report`).
    pub written_by: String,
    pub opledger_version: String,
    /// Path relative to the archive (`/`-separated) → digest.
    pub files: BTreeMap<String, FileDigest>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<ReadRecord>,
}

/// Why a file of an archive does not match its manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Its bytes differ from the digest recorded.
    Edited,
    /// Listed, but not there.
    Missing,
    /// There, but not listed.
    Added,
    /// Not a regular file (a link, a FIFO, a device) where the archive holds only files.
    NotAFile,
}

impl Mismatch {
    pub fn words(self) -> &'static str {
        match self {
            Mismatch::Edited => "edited after the run (its SHA-256 differs from the manifest's)",
            Mismatch::Missing => "removed after the run (the manifest lists it)",
            Mismatch::Added => "added after the run (the manifest does not list it)",
            Mismatch::NotAFile => "not a regular file (an archive holds only regular files)",
        }
    }
}

/// What verifying an archive found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verification {
    /// The manifest, when the archive has one.
    pub manifest: Option<Manifest>,
    /// SHA-256 of `manifest.json` itself: which archive this is.
    pub manifest_sha256: Option<String>,
    /// Each file that does not match, with why.
    pub mismatches: Vec<(String, Mismatch)>,
}

/// An archive read and checked.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub run: RunResult,
    pub verification: Verification,
}

/// Hex SHA-256 of a file, read in chunks (any size, constant memory).
fn file_sha256(path: &Path) -> Result<(String, u64)> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io("reading", path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        let k = f
            .read(&mut buf)
            .map_err(|e| Error::io("reading", path, e))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((hex::encode(h.finalize()), n))
}

pub use crate::spec::sha256_hex;

/// Every entry under `dir` (relative `/`-separated path, whether it is a regular file), links
/// not followed; the manifest itself left out.
fn entries(dir: &Path) -> Result<Vec<(String, bool)>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| Error::io("listing", &d, e))?;
        for e in rd {
            let e = e.map_err(|e| Error::io("listing", &d, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let t = e
                .file_type()
                .map_err(|x| Error::io("reading", e.path(), x))?;
            if t.is_dir() {
                stack.push((e.path(), rel));
            } else if rel != MANIFEST {
                out.push((rel, t.is_file()));
            }
            if out.len() > MAX_FILES {
                return Err(Error::Refused {
                    path: dir.to_path_buf(),
                    message: format!("more than {MAX_FILES} files: not a run archive"),
                });
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A manifest path is relative, `/`-separated, of plain components: never `..`, absolute, or
/// empty, so verifying cannot read outside the archive.
fn manifest_path_ok(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && p.split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
}

/// Writes the manifest of `dir` (every file under it, with its digest), last, atomically.
/// `written_by` names the command; `read` lists what the archive was made from.
pub fn seal(dir: &Path, written_by: &str, read: Vec<ReadRecord>) -> Result<Sealed> {
    let mut files = BTreeMap::new();
    for (rel, is_file) in entries(dir)? {
        let path = dir.join(&rel);
        if !is_file {
            return Err(Error::Refused {
                path,
                message: "not a regular file: an archive holds only regular files".into(),
            });
        }
        let (sha256, bytes) = file_sha256(&path)?;
        files.insert(rel, FileDigest { sha256, bytes });
    }
    let m = Manifest {
        format: MANIFEST_FORMAT.into(),
        written_by: written_by.into(),
        opledger_version: env!("CARGO_PKG_VERSION").into(),
        files,
        read,
    };
    let mut json = serde_json::to_vec_pretty(&m).map_err(|e| Error::Corrupt {
        path: dir.join(MANIFEST),
        message: format!("cannot serialise the manifest: {e}"),
    })?;
    json.push(b'\n');
    crate::files::write_atomic(&dir.join(MANIFEST), &json)?;
    Ok(Sealed {
        sha256: hex::encode(Sha256::digest(&json)),
        manifest: m,
    })
}

/// A sealed archive: its manifest, and the SHA-256 of the manifest file (what names this exact
/// archive: a store's record, a derived archive's `read`).
pub struct Sealed {
    pub manifest: Manifest,
    pub sha256: String,
}

/// Any JSON value whose objects, at every depth, name each key once (deserializing one fails
/// on the first key given twice).
struct UniqueKeys;

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<UniqueKeys, A::Error> {
                let mut seen = std::collections::BTreeSet::new();
                while let Some(k) = map.next_key::<String>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "the key `{k}` is given twice"
                        )));
                    }
                    map.next_value::<UniqueKeys>()?;
                }
                Ok(UniqueKeys)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<UniqueKeys, A::Error> {
                while seq.next_element::<UniqueKeys>()?.is_some() {}
                Ok(UniqueKeys)
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys)
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys)
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys)
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys)
            }
            fn visit_str<E>(self, _: &str) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys)
            }
            fn visit_unit<E>(self) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys)
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads the manifest of `dir`, if it has one.
fn read_manifest(dir: &Path) -> Result<Option<(Manifest, String)>> {
    let path = dir.join(MANIFEST);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading", &path, e)),
        Ok(m) if !m.is_file() => {
            return Err(Error::Corrupt {
                path,
                message: "not a regular file: an archive's manifest is one".into(),
            })
        }
        Ok(_) => {}
    }
    let bytes = crate::files::read_in(dir, MANIFEST, MAX_MANIFEST_BYTES, "manifest")?;
    // A key given twice would let a second entry silently win over the first one a reader
    // checked by eye: refused.
    if let Err(e) = serde_json::from_slice::<UniqueKeys>(&bytes) {
        return Err(Error::Corrupt {
            path,
            message: format!("not an opledger manifest: {e}"),
        });
    }
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
        path: path.clone(),
        message: format!("not an opledger manifest: {e}"),
    })?;
    if m.format != MANIFEST_FORMAT {
        return Err(Error::Corrupt {
            path,
            message: format!(
                "manifest format `{}` is not the supported `{MANIFEST_FORMAT}`",
                m.format
            ),
        });
    }
    if let Some(bad) = m.files.keys().find(|p| !manifest_path_ok(p)) {
        return Err(Error::Corrupt {
            path,
            message: format!("lists `{bad}`, which is not a path inside the archive"),
        });
    }
    Ok(Some((m, sha256_hex(&bytes))))
}

/// Checks every file of `dir` against its manifest: edited, removed, added and non-regular
/// files are all listed (an archive without a manifest has none to list).
pub fn verify(dir: &Path) -> Result<Verification> {
    if !dir.is_dir() {
        return Err(Error::Refused {
            path: dir.to_path_buf(),
            message: "not a folder: expected a run archive (a folder holding results.json)".into(),
        });
    }
    let Some((manifest, digest)) = read_manifest(dir)? else {
        return Ok(Verification {
            manifest: None,
            manifest_sha256: None,
            mismatches: Vec::new(),
        });
    };
    let mut mismatches = Vec::new();
    let present: BTreeMap<String, bool> = entries(dir)?.into_iter().collect();
    for (rel, want) in &manifest.files {
        match present.get(rel) {
            None => mismatches.push((rel.clone(), Mismatch::Missing)),
            Some(false) => mismatches.push((rel.clone(), Mismatch::NotAFile)),
            Some(true) => {
                let (sha, bytes) = file_sha256(&dir.join(rel))?;
                if sha != want.sha256 || bytes != want.bytes {
                    mismatches.push((rel.clone(), Mismatch::Edited));
                }
            }
        }
    }
    for (rel, is_file) in &present {
        if !manifest.files.contains_key(rel) {
            let why = if *is_file {
                Mismatch::Added
            } else {
                Mismatch::NotAFile
            };
            mismatches.push((rel.clone(), why));
        }
    }
    Ok(Verification {
        manifest: Some(manifest),
        manifest_sha256: Some(digest),
        mismatches,
    })
}

/// The rule every string that becomes a path component obeys: 1–128 characters of
/// `[a-z0-9-]`, not starting with `-` (so never `..`, `/`, absolute or empty).
pub fn path_component_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A run id: the name of its folder (`20261130T101010Z-abc1234`): letters, digits, `.`, `_`,
/// `-`, not starting with `.`.
fn run_id_ok(s: &str) -> bool {
    s.len() <= 200
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Every string of a run that becomes a path component elsewhere, checked by one rule; the
/// error names the field.
pub fn check_names(run: &RunResult, path: &Path) -> Result<()> {
    let bad = |field: String, value: &str| {
        Error::Corrupt {
        path: path.to_path_buf(),
        message: format!(
            "{field} {value:?} is not a valid name (expected 1-128 characters from [a-z0-9-], not starting with '-'): the archive was edited, or is not opledger's"
        ),
    }
    };
    if !path_component_ok(&run.device.key) {
        return Err(bad("device.key".into(), &run.device.key));
    }
    if !run_id_ok(&run.run_id) {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: format!(
                "run_id {:?} is not a run folder's name (letters, digits, '.', '_', '-')",
                run.run_id
            ),
        });
    }
    // The commit is said in titles (the pull-request comment's, the report's run line): only
    // what git writes passes, not a mention, a link or markup.
    let sha_ok = |g: &str| {
        g.is_empty()
            || g == "nogit"
            || ((7..=64).contains(&g.len()) && g.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if !sha_ok(&run.git_sha) {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: format!(
                "git_sha {:?} is not a commit (expected 7-64 hexadecimal digits, or \"nogit\"): the archive was edited, or is not opledger's",
                run.git_sha
            ),
        });
    }
    for (i, s) in run.specs.iter().enumerate() {
        if !path_component_ok(&s.name) {
            return Err(bad(format!("specs[{i}].name"), &s.name));
        }
        if let Some(p) = &s.sweep {
            if !path_component_ok(&p.group) {
                return Err(bad(format!("specs[{i}].sweep.group"), &p.group));
            }
        }
    }
    for (i, sw) in run.sweeps.iter().enumerate() {
        if !path_component_ok(&sw.group) {
            return Err(bad(format!("sweeps[{i}].group"), &sw.group));
        }
        for (j, r) in sw.rows.iter().enumerate() {
            if !path_component_ok(&r.spec) {
                return Err(bad(format!("sweeps[{i}].rows[{j}].spec"), &r.spec));
            }
        }
    }
    Ok(())
}

/// The status a stored check must have, re-derived from the numbers beside it; `None` for a
/// check that cannot be re-derived (a backend error's `run` check is what it says).
fn derived_status(s: &SpecResult, c: &Check, spec: Option<&crate::spec::Spec>) -> Option<Status> {
    // Archives written before claims and the gate had an INCONCLUSIVE state of their own said
    // WARN for the gate's; a claim's INCONCLUSIVE was a FAIL then.
    if c.name == CheckName::Regression
        && c.status == Status::Warn
        && s.baseline.state == Some(RegressionState::Inconclusive)
    {
        return Some(Status::Warn);
    }
    let d = match c.name {
        CheckName::IoSaving => verdict::io_saving_check(s.io_saving, s.expect.io_saving.as_ref()),
        CheckName::TimeSaving => verdict::time_saving_check(
            s.time_saving.as_ref()?,
            s.expect.time_saving.as_ref(),
            s.predicted_time_saving,
            s.launch_overhead_secs
                .is_none()
                .then_some(s.max_time_saving),
        ),
        CheckName::Bound => verdict::bound_check(
            s.expect.bound,
            &s.after.predicted,
            s.after.achieved.as_ref()?,
        ),
        CheckName::LaunchOverhead => {
            let n_ops = s.workload.as_kind().launch_chain_ops()?;
            verdict::launch_overhead_check(s.launch_overhead_secs.as_ref()?, n_ops, &variants(s))
        }
        CheckName::Correctness => s.correctness.as_ref()?.check(&s.tolerance.tolerance()),
        // From the counts against the ledger of the spec the archive holds (an agreement
        // edited beside them does not pass), and from the agreement stored (the worse of the
        // two: an edit to a worse agreement the report shows is one too).
        CheckName::LedgerCounts => {
            let counts = s.counts.as_ref()?;
            let stored = verdict::counts_check(counts);
            let derived = verdict::counts_check(&against_ledger(counts, spec));
            if severity(derived.status) > severity(stored.status) {
                derived
            } else {
                stored
            }
        }
        CheckName::CountsVsTime => verdict::counts_vs_time_check(
            s.counts_gate.as_ref()?.saving,
            s.time_saving.as_ref(),
            s.counts_gate.as_ref()?.metric.as_str(),
            s.counts_gate.as_ref()?.limit,
        )?,
        CheckName::CheckedRun => verdict::checked_run_check(
            s.samples.as_ref()?,
            (s.before.variant.name(), s.before.implementation.is_some()),
            (s.after.variant.name(), s.after.implementation.is_some()),
        )?,
        // Without a baseline the check is skipped, or failed under --require-baseline.
        CheckName::Regression => {
            return Some(crate::gate::status(
                s.baseline.state,
                c.status == Status::Fail,
            ))
        }
        // At the spec's own limit, never the one stored beside the numbers.
        CheckName::CountsRegression => {
            let mut o = s.counts_gate.clone()?;
            if let Some(spec) = spec {
                o.limit = spec.gate.counts_max_regression.0;
            }
            return Some(crate::gate::counts::check(&o, c.status == Status::Fail).status);
        }
        CheckName::Run | CheckName::Timing | CheckName::CountedOutput => return None,
    };
    Some(d.status)
}

/// `counts` with each counted side's ledger and agreement derived again from its counts and the
/// ledger of `spec` (the archive's copy of the spec, its counted sizes), as the run derived them;
/// as stored where the archive holds no copy of the spec.
fn against_ledger(
    counts: &crate::measure::counts::SpecCounts,
    spec: Option<&crate::spec::Spec>,
) -> crate::measure::counts::SpecCounts {
    use crate::measure::counts::SideCounts;
    let mut out = counts.clone();
    let Some(counted) = spec.and_then(|s| s.counted().ok()) else {
        return out;
    };
    let tiling = crate::measure::counts::ledger_tiling(&counts.engine);
    let ledger = counted
        .workload
        .ledger(counted.variants.before, counted.variants.after, &tiling);
    let sides = [
        (
            &mut out.before,
            &ledger.before,
            counted.implementations.before.is_some(),
        ),
        (
            &mut out.after,
            &ledger.after,
            counted.implementations.after.is_some(),
        ),
    ];
    for (side, ledger, implemented) in sides {
        if let SideCounts::Counted {
            counts: c,
            ledger_read_bytes,
            ledger_write_bytes,
            agreement,
            ..
        } = side
        {
            *ledger_read_bytes = ledger.movements.iter().map(|m| m.bytes * m.reads).sum();
            *ledger_write_bytes = ledger.movements.iter().map(|m| m.bytes * m.writes).sum();
            *agreement = crate::measure::counts::agreement(&counts.engine, implemented, ledger, c);
        }
    }
    out
}

/// The spec a result was run from, parsed from the archive's own copy of its file (`specs/`),
/// its sweep point's where it is one: where the audit takes the gate's limits and the ledger
/// from, never from the results' copy of them. `None` where the archive holds no copy of it
/// (archives written before they kept their spec files) or the copy is another text.
fn archived_spec(dir: &Path, s: &SpecResult) -> Option<crate::spec::Spec> {
    let name = Path::new(&s.file).file_name()?;
    let path = dir.join("specs").join(name);
    let bytes = crate::files::read_regular(&path, crate::files::MAX_SPEC_BYTES, "spec").ok()?;
    let spec = crate::spec::parse(&path, &bytes).ok()?;
    if spec.source_sha256 != s.spec_sha256 {
        return None;
    }
    crate::spec::expand(spec)
        .ok()?
        .into_iter()
        .find(|p| p.name == s.name)
}

/// Where a stored counts gate's figures disagree with what they rest on: its limit with the
/// spec's, each side's "now" with the counts the archive holds.
fn counts_gate_edit(s: &SpecResult, spec: Option<&crate::spec::Spec>) -> Option<(String, String)> {
    let o = s.counts_gate.as_ref()?;
    if let Some(spec) = spec {
        let limit = spec.gate.counts_max_regression.0;
        if o.limit != limit {
            return Some((
                "counts_gate.limit".into(),
                format!(
                    "says {} but the archived spec's gate.counts_max_regression is {limit}",
                    o.limit
                ),
            ));
        }
    }
    let counts = s.counts.as_ref()?;
    for (name, change, side) in [
        ("before", o.before, &counts.before),
        ("after", o.after, &counts.after),
    ] {
        let (Some(change), Some(c)) = (change, side.counts()) else {
            continue;
        };
        if change.now != c.metric(o.metric) {
            return Some((
                format!("counts_gate.{name}.now"),
                format!(
                    "says {} but the side's counts give {} {}",
                    change.now,
                    c.metric(o.metric),
                    o.metric.as_str()
                ),
            ));
        }
    }
    None
}

fn variants(s: &SpecResult) -> crate::spec::Variants {
    crate::spec::Variants {
        before: s.before.variant,
        after: s.after.variant,
    }
}

use crate::gate::rule::severity;

/// The checks every measured spec holds: one missing means the archive was cut.
const MEASURED_CHECKS: [CheckName; 5] = [
    CheckName::Correctness,
    CheckName::Bound,
    CheckName::IoSaving,
    CheckName::TimeSaving,
    CheckName::Regression,
];

/// Re-derives each spec's checks, each spec's status and the run's verdict from the numbers the
/// archive holds; the first disagreement is an error naming the field.
pub fn audit(run: &RunResult, path: &Path) -> Result<()> {
    let damaged = |field: String, detail: String| Error::Corrupt {
        path: path.to_path_buf(),
        message: format!("damaged: {field} {detail}; the archive was edited after the run"),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    for (i, s) in run.specs.iter().enumerate() {
        let spec = archived_spec(dir, s);
        if let Some(spec) = spec.as_ref().filter(|spec| spec.gate != s.gate) {
            return Err(damaged(
                format!("specs[{i}].gate ({})", s.name),
                format!(
                    "differs from the gate settings of the spec file it holds ({}: max_regression {}, counts_max_regression {})",
                    spec.file.display(),
                    spec.gate.max_regression.0,
                    spec.gate.counts_max_regression.0
                ),
            ));
        }
        if let Some((field, detail)) = counts_gate_edit(s, spec.as_ref()) {
            return Err(damaged(format!("specs[{i}].{field} ({})", s.name), detail));
        }
        for (j, c) in s.checks.iter().enumerate() {
            if let Some(d) = derived_status(s, c, spec.as_ref()) {
                // Stored better than derived is an edit; stored worse is an archive decided
                // under an older, stricter rule (a claim's CI across its bound used to FAIL),
                // and a warning more or less never changes a verdict.
                if severity(c.status) < severity(d) {
                    return Err(damaged(
                        format!("specs[{i}].checks[{j}].status (`{}` of {})", c.name, s.name),
                        format!(
                            "says {} but the measurements it holds give {}",
                            c.status.word(),
                            d.word()
                        ),
                    ));
                }
            }
        }
        if s.time_saving.is_some() {
            if let Some(missing) = MEASURED_CHECKS
                .iter()
                .find(|n| !s.checks.iter().any(|c| c.name == **n))
            {
                return Err(damaged(
                    format!("specs[{i}].checks ({})", s.name),
                    format!("lacks the `{missing}` check that every measured spec holds"),
                ));
            }
        } else if s.counts.is_none() && !s.checks.iter().any(|c| c.status == Status::Fail) {
            return Err(damaged(
                format!("specs[{i}] ({})", s.name),
                "holds no measurement and no failed check".into(),
            ));
        }
        // A gate set aside must be one the rule sets aside: an edit cannot hide an INCONCLUSIVE.
        let derived = crate::gate::rule::set_aside_of(&s.checks);
        if let Some(m) = s.set_aside.iter().find(|m| !derived.contains(m)) {
            return Err(damaged(
                format!("specs[{i}].set_aside ({})", s.name),
                format!(
                    "sets the {} gate aside, but no other measurement's gate decided",
                    m.word()
                ),
            ));
        }
        let status = crate::gate::rule::spec_status(&s.checks);
        if s.status != status {
            return Err(damaged(
                format!("specs[{i}].status ({})", s.name),
                format!(
                    "says {} but its checks give {}",
                    s.status.word(),
                    status.word()
                ),
            ));
        }
    }
    let v = RunVerdict::of(&run.specs);
    if v != run.verdict {
        return Err(damaged(
            "verdict".into(),
            format!(
                "says {} ({} passed, {} failed, {} inconclusive) but its specs give {} ({} passed, {} failed, {} inconclusive)",
                run.verdict.status,
                run.verdict.specs_passed,
                run.verdict.specs_failed,
                run.verdict.inconclusive,
                v.status,
                v.specs_passed,
                v.specs_failed,
                v.inconclusive
            ),
        ));
    }
    Ok(())
}

/// Reads the archive in `dir`: its manifest verified (any mismatch refused, naming the file),
/// `results.json` loaded, its names checked and its verdict audited. An archive without a
/// manifest (written before opledger sealed its archives) loads with a warning.
pub fn load(dir: &Path) -> Result<Loaded> {
    load_allowing(dir, None)
}

/// [`load`], with one file inside the archive that may have been added since it was sealed
/// (the export `run --ncu` writes into the run folder before importing it).
pub fn load_allowing(dir: &Path, added: Option<&Path>) -> Result<Loaded> {
    let mut verification = verify(dir)?;
    if let Some(a) = added {
        let a = crate::files::absolute(a);
        verification.mismatches.retain(|(f, why)| {
            !(*why == Mismatch::Added && crate::files::absolute(&dir.join(f)) == a)
        });
    }
    if let Some((file, why)) = verification.mismatches.first() {
        return Err(Error::Corrupt {
            path: dir.join(file),
            message: format!(
                "{}{}; refusing the archive (`opledger verify {}` lists every file)",
                why.words(),
                if verification.mismatches.len() > 1 {
                    format!(
                        ", and {} more {}",
                        verification.mismatches.len() - 1,
                        if verification.mismatches.len() == 2 {
                            "file differs"
                        } else {
                            "files differ"
                        }
                    )
                } else {
                    String::new()
                },
                dir.display()
            ),
        });
    }
    if verification.manifest.is_none() {
        eprintln!(
            "opledger: warning: {} is unverified: it has no {MANIFEST}, so its files cannot be checked against the run that wrote them",
            dir.display()
        );
    }
    let run = crate::results::load(dir)?;
    let results = dir.join("results.json");
    check_names(&run, &results)?;
    audit(&run, &results)?;
    Ok(Loaded { run, verification })
}

/// The record of an archive read to make another (a merge's shard).
pub fn read_record(what: &str, dir: &Path, loaded: &Loaded) -> ReadRecord {
    let sha256 = loaded
        .verification
        .manifest_sha256
        .clone()
        .unwrap_or_else(|| {
            file_sha256(&dir.join("results.json"))
                .map(|(s, _)| s)
                .unwrap_or_default()
        });
    ReadRecord {
        what: what.into(),
        path: dir.display().to_string(),
        sha256,
        run_id: Some(loaded.run.run_id.clone()),
    }
}

/// The record of a plain file read (an export).
pub fn file_record(what: &str, path: &Path) -> Result<ReadRecord> {
    Ok(ReadRecord {
        what: what.into(),
        path: path.display().to_string(),
        sha256: file_sha256(path)?.0,
        run_id: None,
    })
}

/// The folder the archived report template lies in.
pub const TEMPLATE_DIR: &str = "template";

/// What an archive holds besides its outputs: the spec files (name, text), the report template
/// the run was rendered with, and files of its own kind (a merged archive's shard manifests).
pub struct Contents<'a> {
    pub spec_files: &'a [(String, String)],
    pub template: Option<&'a Template>,
    pub extra: Vec<(String, Vec<u8>)>,
}

/// Writes the archive of `run` into `dir` (which exists): its specs, its template, every output
/// and `contents.extra`, then seals it with its manifest. Records the template's archived name
/// in `run.template`. Returns the manifest's SHA-256.
pub fn save(
    dir: &Path,
    run: &mut RunResult,
    contents: Contents<'_>,
    written_by: &str,
    read: Vec<ReadRecord>,
) -> Result<String> {
    let spec_dir = dir.join("specs");
    std::fs::create_dir_all(&spec_dir).map_err(|e| Error::write("creating", &spec_dir, e))?;
    // The exact files used, once each (a sweep expands one file into several specs).
    for (name, text) in contents.spec_files {
        crate::files::write_atomic(&spec_dir.join(name), text.as_bytes())?;
    }
    run.template = contents
        .template
        .map(|t| archive_template(dir, t))
        .transpose()?;
    write_outputs(dir, run, contents.template)?;
    for (name, bytes) in &contents.extra {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::write("creating", parent, e))?;
        }
        crate::files::write_atomic(&path, bytes)?;
    }
    // Last: the digests of everything written (tamper evidence for whoever reads it).
    Ok(seal(dir, written_by, read)?.sha256)
}

/// Writes every output of an archive loaded from `dir` again from `run` (its results changed,
/// or its report is rendered anew) and seals it anew: the manifest records the one it replaces
/// and `read` (what the change was made from). The template is the one the run recorded, or
/// `template`, which is then archived and recorded in its place.
/// Refuses to write into (and seal) an archive without a manifest: its files cannot be checked,
/// and a fresh manifest over them would make `verify` call them intact with no trace that they
/// never were checked.
pub fn refuse_unverified(dir: &Path, v: &Verification, command: &str) -> Result<()> {
    if v.manifest.is_some() {
        return Ok(());
    }
    Err(Error::Refused {
        path: dir.join(MANIFEST),
        message: format!(
            "the archive has no manifest, so its files cannot be checked: `{command}` will not seal them as if they had been (measure again for a sealed archive)"
        ),
    })
}

pub fn rerender(
    dir: &Path,
    loaded: &Verification,
    run: &mut RunResult,
    template: Option<Template>,
    written_by: &str,
    mut read: Vec<ReadRecord>,
) -> Result<()> {
    refuse_unverified(dir, loaded, written_by)?;
    if let Some(sha256) = &loaded.manifest_sha256 {
        read.insert(
            0,
            ReadRecord {
                what: "previous manifest".into(),
                path: dir.join(MANIFEST).display().to_string(),
                sha256: sha256.clone(),
                run_id: Some(run.run_id.clone()),
            },
        );
    }
    let template = match template {
        Some(t) => {
            run.template = Some(archive_template(dir, &t)?);
            Some(t)
        }
        None => recorded_template(dir, run)?,
    };
    write_outputs(dir, run, template.as_ref())?;
    seal(dir, written_by, read)?;
    Ok(())
}

/// Copies a template into the archive; returns its archived name (`template/<name>`).
fn archive_template(dir: &Path, t: &Template) -> Result<String> {
    let name = template_file_name(&t.name);
    let tdir = dir.join(TEMPLATE_DIR);
    std::fs::create_dir_all(&tdir).map_err(|e| Error::write("creating", &tdir, e))?;
    crate::files::write_atomic(&tdir.join(&name), t.source.as_bytes())?;
    Ok(format!("{TEMPLATE_DIR}/{name}"))
}

/// The report template a run recorded, read from its archive.
pub fn recorded_template(dir: &Path, run: &RunResult) -> Result<Option<Template>> {
    let Some(rel) = &run.template else {
        return Ok(None);
    };
    let name = rel.strip_prefix(&format!("{TEMPLATE_DIR}/")).unwrap_or("");
    if !template_name_ok(name) {
        return Err(Error::Corrupt {
            path: dir.join("results.json"),
            message: format!(
                "damaged: template `{rel}` is not a file of the archive's {TEMPLATE_DIR}/ folder"
            ),
        });
    }
    let path = dir.join(TEMPLATE_DIR).join(name);
    let bytes = crate::files::read_in(
        dir,
        &format!("{TEMPLATE_DIR}/{name}"),
        crate::files::MAX_TEMPLATE_BYTES,
        "template",
    )?;
    let source = String::from_utf8(bytes).map_err(|_| Error::Corrupt {
        path: path.clone(),
        message: "damaged: the archived template is not UTF-8".into(),
    })?;
    Ok(Some(Template {
        name: path.display().to_string(),
        source,
    }))
}

fn write_outputs(dir: &Path, run: &RunResult, template: Option<&Template>) -> Result<()> {
    let files = output::render_all(&Rendering { run, template })?;
    for (name, bytes) in files {
        crate::files::write_atomic(&dir.join(name), &bytes)?;
    }
    Ok(())
}

/// The name a template is archived under: its file name where that is a plain one, else
/// `report.md.j2`.
fn template_file_name(name: &str) -> String {
    Path::new(name)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| template_name_ok(n))
        .unwrap_or_else(|| "report.md.j2".into())
}

/// A template's archived name: one plain component of letters, digits, `.`, `-` and `_`.
fn template_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 128
        && !n.starts_with('.')
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// Creates `root/name`, or `root/name-2`, ... if a run of the same second exists.
pub fn create_run_dir(root: &Path, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(root).map_err(|e| Error::write("creating", root, e))?;
    for k in 1..1000 {
        let dir = if k == 1 {
            root.join(name)
        } else {
            root.join(format!("{name}-{k}"))
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::write("creating", &dir, e)),
        }
    }
    Err(Error::Refused {
        path: root.to_path_buf(),
        message: format!("too many runs named {name} (999): clear the runs folder"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_a_folder_are_refused() {
        for bad in ["", "..", "../x", "/abs", "a/b", "-x", "A", "x.y", "é"] {
            assert!(!path_component_ok(bad), "{bad:?}");
        }
        for good in ["cpu-intel-xeon-avx512-2c-480m", "fuse-bias-gelu", "0"] {
            assert!(path_component_ok(good), "{good:?}");
        }
        assert!(!manifest_path_ok("../x") && !manifest_path_ok("a//b") && !manifest_path_ok("/x"));
        assert!(manifest_path_ok("specs/a.yaml"));
    }

    #[test]
    fn a_sealed_folder_verifies_and_every_change_is_named() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("specs")).unwrap();
        std::fs::write(d.path().join("results.json"), b"{}").unwrap();
        std::fs::write(d.path().join("specs/a.yaml"), b"a").unwrap();
        std::fs::write(d.path().join("gone.txt"), b"x").unwrap();
        seal(d.path(), "run", Vec::new()).unwrap();
        assert!(verify(d.path()).unwrap().mismatches.is_empty());
        std::fs::write(d.path().join("specs/a.yaml"), b"b").unwrap();
        std::fs::remove_file(d.path().join("gone.txt")).unwrap();
        std::fs::write(d.path().join("new.txt"), b"n").unwrap();
        let v = verify(d.path()).unwrap();
        assert_eq!(
            v.mismatches,
            vec![
                ("gone.txt".to_string(), Mismatch::Missing),
                ("specs/a.yaml".to_string(), Mismatch::Edited),
                ("new.txt".to_string(), Mismatch::Added),
            ]
        );
    }
}
