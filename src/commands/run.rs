//! `opledger run`: the pipeline itself is `pipeline::run`; this file adds what wraps it —
//! profiling under Nsight Compute (`--ncu`), measuring the merge-base again first
//! (`--rerecord-base`), and the exit status `git bisect run` reads (`--bisect`).

use crate::error::{Error, ExitCode, Result};
use crate::pipeline::{self, RunOptions};

/// What wraps a run, from its flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wraps {
    /// Profile the run under Nsight Compute instead (`--ncu`).
    pub ncu: bool,
    /// Exit as `git bisect run` reads it (`--bisect`).
    pub bisect: bool,
    /// Measure the merge-base again and record it first (`--rerecord-base`).
    pub rerecord_base: bool,
}

/// `opledger run`: the pipeline, or under `--ncu` the run profiled under Nsight Compute; the
/// exit status as `--bisect` or `--fail-on-inconclusive` ask.
pub fn run(opts: &RunOptions, wraps: Wraps) -> Result<ExitCode> {
    if wraps.ncu {
        return super::counters::run_with_ncu(opts);
    }
    if wraps.rerecord_base {
        let Some(crate::spec::Against::MergeBase { branch }) = &opts.against else {
            return Err(Error::Flag(
                "--rerecord-base measures the merge-base again: it goes with --against merge-base:BRANCH".into(),
            ));
        };
        let r = super::rerecord::base(opts, branch)?;
        let short = &r.commit[..r.commit.len().min(7)];
        match &r.archive {
            Some(dir) => eprintln!(
                "opledger: --rerecord-base: the merge-base {short} measured again and recorded as {}'s run ({})",
                r.branch,
                dir.display()
            ),
            None => eprintln!(
                "opledger: --rerecord-base: the merge-base {short} has none of these specs; nothing measured there"
            ),
        }
        for p in &r.new_specs {
            eprintln!(
                "opledger: --rerecord-base: {} is new since the merge-base {short}",
                p.display()
            );
        }
    }
    let (verdict, _) = pipeline::run(opts)?;
    if !wraps.bisect {
        return Ok(verdict.exit_code(opts.fail_on_inconclusive));
    }
    // A bisection skips an INCONCLUSIVE commit, and enough skips leave it unable to name the
    // first bad one: such a commit is measured once more, in an archive of its own, before it
    // is given up on.
    if verdict.bisect_code() == ExitCode::BisectSkip {
        eprintln!("opledger: --bisect: INCONCLUSIVE; measuring this commit once more before it is skipped");
        let (again, _) = pipeline::run(opts)?;
        return Ok(again.bisect_code());
    }
    Ok(verdict.bisect_code())
}
