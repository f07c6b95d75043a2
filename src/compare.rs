//! `opledger compare A B`: two archived runs side by side, B judged against A by the gate
//! (`gate::versus`), printed as a table and, with `--markdown`, written as a pull-request
//! comment (`report::comment`).
//!
//! The drift between runs is what lets the gate tell a regression from noise, and one run (A)
//! knows none. So the reference is what `run` would have gated B against had A been accepted:
//! the baseline store's history of this device and spec (`--baselines`) with A joined to it (or
//! as it is, when A is one of its accepted runs). With no history in the store, the decision
//! rests on A alone and says that it assumes no drift between runs.

use crate::error::{Error, ExitCode, Result};
use crate::report::comment;
use crate::results::RunStatus;
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
}

/// `opledger compare A B`: B against A, case by case, with the gate's decision. Exit 1 when a
/// case regressed (or, with `fail_on_inconclusive`, could not be decided).
pub fn compare_runs(a: &Path, b: &Path, opts: &CompareOptions) -> Result<ExitCode> {
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
    let cases = crate::gate::versus::versus(&ra, &rb, a, &opts.baselines)?;
    print!("{}", comment::table(&ra, &rb, &cases, &opts.baselines));
    if let Some(path) = &opts.markdown {
        let text = comment::comment(
            (a, &ra),
            (b, &rb),
            &cases,
            path,
            &opts.baselines,
            opts.link_base.as_deref(),
        );
        crate::files::write_atomic(path, text.as_bytes())?;
    }
    Ok(match crate::gate::versus::verdict(&cases) {
        RunStatus::Fail => ExitCode::GateFailed,
        RunStatus::Inconclusive if opts.fail_on_inconclusive => ExitCode::GateFailed,
        _ => ExitCode::Pass,
    })
}
