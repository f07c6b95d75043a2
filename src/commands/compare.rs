//! `opledger compare A B`: two archived runs side by side, B judged against A by the gate
//! (`gate::versus`), printed as a table and, with `--markdown`, written as a pull-request
//! comment (`report::comment`).
//!
//! The drift between runs is what lets the gate tell a regression from noise, and one run (A)
//! knows none. So the reference is what `run` would have gated B against had A been accepted:
//! the baseline store's history of this device and spec (`--baselines`) with A joined to it (or
//! as it is, when A is one of its accepted runs). With no history in the store, the decision
//! rests on A alone and says that it assumes no drift between runs.
//!
//! `compare --base merge-base:BRANCH B` finds A in the history store: the newest archived run on
//! B's device at the commit B's branch forked from (else at its nearest ancestor with one), and
//! the comment names that commit.

use crate::error::{Error, ExitCode, Result};
use crate::report::comment::{self, BaseCommit};
use crate::results::RunStatus;
use crate::store::{Store, StoreUrl};
use std::path::{Path, PathBuf};

/// What `compare` is told besides the two runs.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    /// A pull-request comment to write.
    pub markdown: Option<PathBuf>,
    /// The baselines store whose history gives the drift between runs.
    pub baselines: PathBuf,
    /// An INCONCLUSIVE case exits 1.
    pub fail_on_inconclusive: bool,
    /// Links in the comment start here (a CI artifact URL) instead of being relative to it.
    pub link_base: Option<String>,
    /// The history store whose runs of A's cases give the drift where no baseline holds a
    /// history (read only; a store that does not exist gives none).
    pub store: Option<StoreUrl>,
}

/// What `compare` sets against what: two run folders, or a later run against the store's run at
/// a reference (`--base merge-base:BRANCH`).
#[derive(Debug, Clone, Copy)]
pub enum Versus<'a> {
    Runs(&'a Path, &'a Path),
    Base(&'a str, &'a Path),
}

/// `opledger compare`: either form; `url` is the store a `--base` reference is read from.
pub fn compare(versus: Versus<'_>, url: &StoreUrl, opts: &CompareOptions) -> Result<ExitCode> {
    match versus {
        Versus::Runs(a, b) => compare_runs(a, b, opts, None),
        Versus::Base(base, b) => compare_to_base(base, b, url, opts),
    }
}

/// `opledger compare A B`: B against A, case by case, with the gate's decision. Exit 1 when a
/// case regressed (or, with `fail_on_inconclusive`, could not be decided).
pub fn compare_runs(
    a: &Path,
    b: &Path,
    opts: &CompareOptions,
    base: Option<&BaseCommit>,
) -> Result<ExitCode> {
    let (ra, rb) = (crate::archive::load(a)?.run, crate::archive::load(b)?.run);
    if !rb
        .specs
        .iter()
        .any(|sb| ra.specs.iter().any(|sa| sa.name == sb.name))
    {
        return Err(Error::Mismatch(format!(
            "{} and {} have no spec in common: nothing to compare",
            a.display(),
            b.display()
        )));
    }
    let recorded = match crate::gate::reference::open_existing(None, opts.store.as_ref())? {
        Some(mut store) => crate::gate::reference::drift_of_runs_up_to(&mut store, &ra, &rb)?,
        None => Default::default(),
    };
    let cases = crate::gate::versus::versus(&ra, &rb, a, &opts.baselines, &recorded)?;
    if let Some(base) = base {
        println!("{}", comment::base_line(base));
    }
    print!("{}", comment::table(&ra, &rb, &cases, &opts.baselines));
    if let Some(path) = &opts.markdown {
        let text = comment::comment(
            (a, &ra),
            (b, &rb),
            &cases,
            path,
            &opts.baselines,
            opts.link_base.as_deref(),
            base,
        );
        crate::files::write_atomic(path, text.as_bytes())?;
    }
    Ok(match crate::gate::versus::verdict(&cases) {
        RunStatus::Fail => ExitCode::GateFailed,
        RunStatus::Inconclusive if opts.fail_on_inconclusive => ExitCode::GateFailed,
        _ => ExitCode::Pass,
    })
}

/// `compare --base merge-base:BRANCH B`: B against the store's run at the merge-base.
pub fn compare_to_base(
    reference: &str,
    b: &Path,
    url: &StoreUrl,
    opts: &CompareOptions,
) -> Result<ExitCode> {
    let branch = reference
        .strip_prefix("merge-base:")
        .filter(|b| !b.is_empty())
        .ok_or_else(|| Error::Flag(format!("--base {reference}: expected merge-base:BRANCH")))?;
    let flag = |e: String| Error::Flag(format!("--base {reference}: {e}"));
    let rb = crate::archive::load(b)?.run;
    let merge_base = crate::provenance::merge_base(branch).map_err(flag)?;
    let ancestors = crate::provenance::ancestors(&merge_base, crate::store::series::MAX_ANCESTORS)
        .map_err(flag)?;
    let mut store = Store::open_reading(url)?;
    let found = crate::gate::reference::base_run(&mut store, &rb, &ancestors)?;
    let Some((commits_back, p, a)) = found else {
        return Err(Error::Mismatch(format!(
            "--base {reference}: no archived run of {}'s cases on device {} at the merge-base {} or its ancestors in {}",
            b.display(),
            rb.device.key,
            crate::report::gate::short_sha(&merge_base),
            url.display()
        )));
    };
    let base = BaseCommit {
        branch: branch.to_string(),
        merge_base: merge_base.clone(),
        commit: p.run.git_sha.to_string(),
        commits_back,
        run_id: p.run.run_id.to_string(),
    };
    compare_runs(&a, b, opts, Some(&base))
}
