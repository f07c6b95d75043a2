//! The one command that re-runs a regressed case on a reviewer's machine — that case alone, at
//! its sweep point, against the same reference — as the PR comment, the terminal and the
//! report give it.

use crate::results::{CountsState, GateReference, RunResult, SpecResult};
use opledger_gate::stats::RegressionState;

/// `opledger run SPEC --backend B [--case NAME] [--measure counts [--cache-model M]]
/// [--against merge-base:BASE --rerecord-base]`: `--case` for a sweep point (its file holds the
/// others too), `--measure counts` where the counts gate failed (counts repeat exactly on any
/// x86-64 machine; the run's cache model named where it was neither the default nor the
/// spec's own), and the merge-base of `base` re-recorded where the reference was one.
pub fn command(s: &SpecResult, backend: &str, counts_failed: bool, base: Option<&str>) -> String {
    let mut cmd = format!("opledger run {} --backend {backend}", shell_word(&s.file));
    if s.sweep.is_some() {
        cmd.push_str(&format!(" --case {}", shell_word(&s.name)));
    }
    if counts_failed {
        cmd.push_str(" --measure counts");
        // A model of the spec's own is the spec's to give again; another, the run's.
        if let Some(k) = s.counts.as_ref().filter(|k| !k.spec_cache_model) {
            let model = k.engine.cache_model;
            if model != crate::measure::counts::CacheModel::default() {
                cmd.push_str(&format!(" --cache-model {}", shell_word(&model.describe())));
            }
        }
    }
    if let Some(base) = base {
        cmd.push_str(&format!(
            " --against {} --rerecord-base",
            shell_word(&format!("merge-base:{base}"))
        ));
    }
    cmd
}

/// The command that reproduces spec `s` of `run` where its time or counts gate failed: against
/// the merge-base its gate read, where it read one.
pub fn for_run(run: &RunResult, s: &SpecResult) -> Option<String> {
    let time_failed = s.baseline.state == Some(RegressionState::Fail);
    let counts_failed = s
        .counts_gate
        .as_ref()
        .is_some_and(|c| c.state == CountsState::Fail);
    if !time_failed && !counts_failed {
        return None;
    }
    let merge_base = |r: Option<&GateReference>| match r {
        Some(GateReference::MergeBase { branch, .. }) => Some(branch.clone()),
        _ => None,
    };
    let base = merge_base(s.baseline.reference.as_ref())
        .or_else(|| merge_base(s.counts_gate.as_ref().and_then(|c| c.reference.as_ref())));
    Some(command(
        s,
        run.device.kind.name(),
        counts_failed,
        base.as_deref(),
    ))
}

/// `w` as one shell word: as it is where it is plain, else single-quoted.
pub fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn shell_words_are_quoted_only_where_needed() {
        assert_eq!(shell_word("specs/a.yaml"), "specs/a.yaml");
        assert_eq!(shell_word("my spec's.yaml"), "'my spec'\\''s.yaml'");
        assert_eq!(shell_word(""), "''");
    }
}
