//! `run --against merge-base:BRANCH --rerecord-base`: the merge-base commit measured again in
//! this job, before the head is gated against it. A base run made in an unlucky machine state
//! (its ceilings far from today's) leaves every branch off it not judged; measuring the base
//! commit now, on this machine, gives the gate a base in today's state: the newest run at the
//! merge-base, whose samples and ceilings the head is judged against.
//!
//! The base is a git worktree of the merge-base commit (the team's workers and specs as they
//! were there), run by this same opledger from that worktree, so its archive records the base
//! commit, and recorded into the store as the base branch's run.

use crate::error::{Error, Result};
use crate::files::absolute;
use crate::pipeline::RunOptions;
use crate::store::StoreUrl;
use std::path::PathBuf;

/// A worktree removed when dropped, whatever happened in it.
struct Worktree {
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Drop for Worktree {
    fn drop(&mut self) {
        if let Err(e) = crate::provenance::worktree_remove(&self.dir) {
            eprintln!(
                "opledger: warning: --rerecord-base: the worktree {} was not removed: {e}",
                self.dir.display()
            );
        }
    }
}

/// What the base's run was: its commit, the branch it was recorded as, its archive, or why
/// nothing was measured (no spec existed there).
#[derive(Debug)]
pub struct Rerecorded {
    pub commit: String,
    pub branch: String,
    pub archive: Option<PathBuf>,
    /// Spec paths of the head that the base commit does not have.
    pub new_specs: Vec<PathBuf>,
}

/// Measures the merge-base of `HEAD` and `branch` again and records it as the base branch's
/// run in the run's store.
pub fn base(opts: &RunOptions, branch: &str) -> Result<Rerecorded> {
    let flag = |e: String| Error::Flag(format!("--rerecord-base: {e}"));
    let Some(store) = opts.store.clone() else {
        return Err(flag(
            "the base's run is recorded into the history store, and --no-store records nothing: drop one"
                .into(),
        ));
    };
    let commit = crate::provenance::merge_base(branch).map_err(flag)?;
    let top = crate::provenance::toplevel().map_err(flag)?;
    let top = std::fs::canonicalize(&top).unwrap_or(top);
    // Each spec path as the worktree has it: the same place below the checkout's top.
    let mut paths = Vec::new();
    let mut new_specs = Vec::new();
    let tmp = tempfile::Builder::new()
        .prefix("opledger-base-")
        .tempdir()
        .map_err(|e| Error::io("making a folder in", std::env::temp_dir(), e))?;
    let dir = tmp.path().join("base");
    for p in &opts.paths {
        let abs = std::fs::canonicalize(p).unwrap_or_else(|_| absolute(p));
        let rel = abs.strip_prefix(&top).map_err(|_| {
            flag(format!(
                "{} is outside the git checkout {}: the base commit cannot have it",
                p.display(),
                top.display()
            ))
        })?;
        let there = dir.join(rel);
        paths.push((p.clone(), there));
    }
    crate::provenance::worktree_add(&dir, &commit).map_err(flag)?;
    let worktree = Worktree { dir, _tmp: tmp };
    let paths: Vec<PathBuf> = paths
        .into_iter()
        .filter_map(|(head, there)| {
            if there.exists() {
                Some(there)
            } else {
                new_specs.push(head);
                None
            }
        })
        .collect();
    let recorded_as = crate::provenance::local_branch_name(branch);
    if paths.is_empty() {
        return Ok(Rerecorded {
            commit,
            branch: recorded_as,
            archive: None,
            new_specs,
        });
    }
    // Everything the head's run names by a relative path, made absolute: the base runs from
    // the worktree and writes into the head's runs folder and store.
    let store = match store {
        StoreUrl::Sqlite(p) => StoreUrl::Sqlite(absolute(&p)),
        server => server,
    };
    let base_opts = RunOptions {
        paths,
        accept: false,
        require_baseline: false,
        fail_on_inconclusive: false,
        baselines_dir: absolute(&opts.baselines_dir),
        runs_dir: absolute(&opts.runs_dir),
        template: opts.template.as_deref().map(absolute),
        summary_to: None,
        junit: None,
        reference_store: Some(store.clone()),
        store: Some(store),
        branch: Some(recorded_as.clone()),
        against: Some(crate::spec::Against::Baselines),
        ..opts.clone()
    };
    let here = std::env::current_dir().map_err(|e| Error::io("reading", PathBuf::from("."), e))?;
    std::env::set_current_dir(&worktree.dir)
        .map_err(|e| Error::io("entering", worktree.dir.clone(), e))?;
    let measured = crate::pipeline::run(&base_opts);
    std::env::set_current_dir(&here).map_err(|e| Error::io("entering", here.clone(), e))?;
    let (_, archive) = measured?;
    Ok(Rerecorded {
        commit,
        branch: recorded_as,
        archive: Some(archive),
        new_specs,
    })
}
