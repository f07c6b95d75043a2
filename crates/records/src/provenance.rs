//! Provenance: what a run's archive records of where and when it ran — the git commit and
//! whether the tree was dirty, the UTC time, the environment manifest (machine, compiler,
//! variables that change a run, the spec files with their SHA-256). Read once per run, by the
//! command that writes the archive.

use crate::device::DeviceInfo;
use crate::results::{EnvManifest, SpecFile};
use crate::spec::Spec;
use std::path::{Path, PathBuf};

/// The short git sha of the working directory and whether it has uncommitted changes;
/// ("nogit", false) outside a repository or without git.
pub fn git_info() -> (String, bool) {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let sha = String::from_utf8_lossy(&o.stdout).trim().to_string();
            let dirty = std::process::Command::new("git")
                .args(["status", "--porcelain", "--untracked-files=no"])
                .stderr(std::process::Stdio::null())
                .output()
                .map(|o| !o.stdout.is_empty())
                .unwrap_or(false);
            if sha.chars().all(|c| c.is_ascii_hexdigit()) && !sha.is_empty() {
                (sha, dirty)
            } else {
                ("nogit".into(), false)
            }
        }
        _ => ("nogit".into(), false),
    }
}

/// A new random identity (32 hex digits): the clock to the nanosecond, the process and the
/// thread, mixed by the standard library's randomly keyed hasher.
pub fn new_uid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let half = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        h.write_u64(salt);
        h.finish()
    };
    format!("{:016x}{:016x}", half(1), half(2))
}

/// The branch a run measured: `explicit` (`--branch`), else a GitHub pull request's own ref,
/// else git's current branch, else on a detached HEAD (how CI checks out a commit) the CI's own
/// variables: GitHub Actions (`GITHUB_REF_NAME`), GitLab CI (`CI_COMMIT_REF_NAME`), Buildkite
/// (`BUILDKITE_BRANCH`). `None` outside git and CI.
pub fn git_branch(explicit: Option<&str>) -> Option<String> {
    if let Some(b) = explicit.filter(|b| !b.trim().is_empty()) {
        return Some(b.trim().to_string());
    }
    // A pull request's run is named by what its event proves, its own ref
    // (`refs/pull/7/merge`), never by its head branch's name: a fork's branch may be called
    // `main`, and recorded as main it would become main's history.
    if let Some(pr) = pull_request_ref() {
        return Some(pr);
    }
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--abbrev-ref", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|b| !b.is_empty() && b != "HEAD");
    head.or_else(|| {
        ["GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILDKITE_BRANCH"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|b| !b.trim().is_empty()))
    })
}

/// On a GitHub Actions pull-request event, the pull request's ref (`refs/pull/N/merge`, from
/// `GITHUB_REF`, or `GITHUB_REF_NAME`'s `N/merge`); `None` for every other event.
fn pull_request_ref() -> Option<String> {
    let event = std::env::var("GITHUB_EVENT_NAME").unwrap_or_default();
    if !event.starts_with("pull_request") {
        return None;
    }
    let named = std::env::var("GITHUB_REF")
        .ok()
        .filter(|r| r.starts_with("refs/pull/"))
        .or_else(|| {
            std::env::var("GITHUB_REF_NAME")
                .ok()
                .filter(|n| !n.trim().is_empty())
                .map(|n| format!("refs/pull/{}", n.trim()))
        });
    Some(named.unwrap_or_else(|| "refs/pull/unknown".into()))
}

/// `git` with these arguments in the current folder: its trimmed standard output, or why it
/// failed (its standard error).
fn git(args: &[&str]) -> std::result::Result<String, String> {
    let o = std::process::Command::new("git")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
    }
}

/// `git merge-base HEAD branch`: the full SHA of the commit this checkout forked from.
pub fn merge_base(branch: &str) -> std::result::Result<String, String> {
    if branch.starts_with('-') {
        return Err(format!("{branch}: not a branch name"));
    }
    git(&["merge-base", "HEAD", branch])
        .map_err(|e| format!("git merge-base HEAD {branch}: {e}"))
        .and_then(|sha| {
            if sha.is_empty() {
                Err(format!("git merge-base HEAD {branch}: no common ancestor"))
            } else {
                Ok(sha)
            }
        })
}

/// The top folder of the git checkout the current folder is in.
pub fn toplevel() -> std::result::Result<PathBuf, String> {
    git(&["rev-parse", "--show-toplevel"]).map(PathBuf::from)
}

/// `git worktree add --detach dir commit`: a second checkout of `commit` at `dir`.
pub fn worktree_add(dir: &Path, commit: &str) -> std::result::Result<(), String> {
    let dir = dir.to_string_lossy();
    git(&["worktree", "add", "--quiet", "--detach", &dir, commit]).map(|_| ())
}

/// `git worktree remove --force dir`, and the checkout's record pruned.
pub fn worktree_remove(dir: &Path) -> std::result::Result<(), String> {
    let dir = dir.to_string_lossy();
    git(&["worktree", "remove", "--force", &dir]).map(|_| ())
}

/// The local name of a remote-tracking branch (`origin/main` → `main`); a local branch's
/// name as it is.
pub fn local_branch_name(branch: &str) -> String {
    match branch.split_once('/') {
        Some((_, local))
            if git(&[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/remotes/{branch}"),
            ])
            .is_ok() =>
        {
            local.to_string()
        }
        _ => branch.to_string(),
    }
}

/// The full SHAs of `commit` and its ancestors, nearest first (first parents before merged
/// history), at most `max`.
pub fn ancestors(commit: &str, max: usize) -> std::result::Result<Vec<String>, String> {
    git(&["rev-list", &format!("--max-count={max}"), commit])
        .map(|out| out.lines().map(str::to_string).collect())
}

/// The repository's default branch: the remote's `HEAD` (`origin/main` → `main`) when it is
/// known, else `main` or `master`, whichever exists. `None` outside git.
pub fn default_branch() -> Option<String> {
    if let Ok(r) = git(&["symbolic-ref", "--short", "refs/remotes/origin/HEAD"]) {
        if let Some((_, b)) = r.split_once('/') {
            return Some(b.to_string());
        }
    }
    ["main", "master"]
        .into_iter()
        .find(|b| {
            git(&[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{b}"),
            ])
            .is_ok()
        })
        .map(str::to_string)
}

/// Environment variables recorded in the manifest: the ones that change what runs or how fast.
const MANIFEST_ENV_VARS: &[&str] = &[
    "RAYON_NUM_THREADS",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "CI",
    "GITHUB_SHA",
    "GITHUB_RUN_ID",
];

/// The environment manifest: who ran what, where, with which specs (hashed).
pub fn environment_manifest(
    command_line: &[String],
    device: &DeviceInfo,
    backend: &str,
    specs: &[Spec],
    git_sha: &str,
    git_dirty: bool,
) -> EnvManifest {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    };
    let mut env_vars = std::collections::BTreeMap::new();
    for (k, v) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if MANIFEST_ENV_VARS.contains(&k.as_str()) || k.starts_with("OPLEDGER_") {
            // A URL's secrets (`OPLEDGER_STORE`'s password) are masked before they are kept.
            env_vars.insert(k, crate::secret::redact_text(&v.to_string_lossy()));
        }
    }
    let mut spec_files: Vec<SpecFile> = Vec::new();
    for s in specs {
        let path = s.file.display().to_string();
        if !spec_files.iter().any(|f| f.path == path) {
            spec_files.push(SpecFile {
                path,
                sha256: s.source_sha256.clone(),
                bytes: s.source_text.len() as u64,
            });
        }
    }
    EnvManifest {
        opledger_version: env!("CARGO_PKG_VERSION").into(),
        git_sha: git_sha.into(),
        git_dirty,
        command_line: crate::secret::redact_args(command_line.iter().cloned()),
        working_dir: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        hostname: read("/proc/sys/kernel/hostname"),
        arch: std::env::consts::ARCH.into(),
        os: device.os.clone(),
        kernel: device.kernel.clone(),
        cpu: device.name.clone(),
        cores: device.cores,
        simd: device.simd.clone(),
        governor: device.governor.clone(),
        transparent_hugepage: read("/sys/kernel/mm/transparent_hugepage/enabled"),
        rustc: device.rustc.clone(),
        backend: backend.into(),
        cuda_driver: crate::backend::cuda::driver_summary(),
        env_vars,
        spec_files,
    }
}

/// Now in UTC: ("2026-11-29T09:15:00Z", "20261129T091500Z"), to the second.
pub fn utc_now() -> (String, String) {
    utc_of(jiff::Timestamp::now())
}

/// Now in nanoseconds since 1970 (UTC).
pub fn unix_ns() -> i64 {
    i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX)
}

fn utc_of(t: jiff::Timestamp) -> (String, String) {
    (
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        t.strftime("%Y%m%dT%H%M%SZ").to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting() {
        let at = |s: i64| utc_of(jiff::Timestamp::from_second(s).unwrap());
        assert_eq!(at(0).0, "1970-01-01T00:00:00Z");
        assert_eq!(at(1_796_000_000).0, "2026-11-30T00:53:20Z");
        assert_eq!(at(951_782_400).1, "20000229T000000Z");
    }
}
