//! The one command that re-runs a regressed case on a reviewer's machine — that case alone, at
//! its sweep point, against the same reference — as the PR comment, the terminal and the
//! report give it.

use crate::results::{CountsState, GateReference, RunResult, SpecResult};
use crate::spec::Against;
use opledger_gate::stats::RegressionState;
use opledger_records::baseline::DEFAULT_DIR;

/// `opledger run SPEC --backend B [--case NAME] [--measure counts [--cache-model M]]
/// [--baselines DIR | --against history[:BRANCH] | --against merge-base:BASE --rerecord-base]`:
/// `--case` for a sweep point (its file holds the others too), `--measure counts` where the
/// counts gate failed (counts repeat exactly on any x86-64 machine; the run's cache model named
/// where it was neither the default nor the spec's own), and the reference the gate read —
/// `against`, with the baselines' folder `baselines_dir` where it is not the default one.
pub fn command(
    s: &SpecResult,
    backend: &str,
    counts_failed: bool,
    against: &Against,
    baselines_dir: Option<&str>,
) -> String {
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
    match against {
        Against::Baselines => {
            if let Some(dir) = baselines_dir.filter(|d| *d != DEFAULT_DIR) {
                cmd.push_str(&format!(" --baselines {}", shell_word(dir)));
            }
        }
        Against::History { .. } => cmd.push_str(&format!(
            " --against {}",
            shell_word(&String::from(against.clone()))
        )),
        // Measured again at the merge-base on the reviewer's machine: time compares only on one.
        Against::MergeBase { .. } => cmd.push_str(&format!(
            " --against {} --rerecord-base",
            shell_word(&String::from(against.clone()))
        )),
    }
    cmd
}

/// The command that reproduces spec `s` of `run` where its time or counts gate failed, against
/// the reference the failed gate read: the merge-base, the branch's history it was asked for,
/// or the accepted baselines (their folder named where it is not the default).
pub fn for_run(run: &RunResult, s: &SpecResult) -> Option<String> {
    let time_failed = s.baseline.state == Some(RegressionState::Fail);
    let counts_gate = s.counts_gate.as_ref();
    let counts_failed = counts_gate.is_some_and(|c| c.state == CountsState::Fail);
    if !time_failed && !counts_failed {
        return None;
    }
    // Both gates read the reference chosen once for the spec; the failed one's is named.
    let (reference, baseline_file) = if time_failed {
        (s.baseline.reference.as_ref(), s.baseline.path.as_str())
    } else {
        let c = counts_gate?;
        (c.reference.as_ref(), c.path.as_str())
    };
    let against = match reference {
        Some(GateReference::MergeBase { branch, .. }) => Against::MergeBase {
            branch: branch.clone(),
        },
        // A history the spec fell back to for want of a baseline is read again without a flag.
        Some(GateReference::History {
            branch,
            by_default: false,
            ..
        }) => Against::History {
            branch: branch.clone(),
        },
        Some(GateReference::History { .. }) | None => Against::Baselines,
    };
    // An accepted baseline is `DIR/<key>/<spec>.json`.
    let dir = reference
        .is_none()
        .then(|| {
            std::path::Path::new(baseline_file)
                .parent()?
                .parent()?
                .to_str()
        })
        .flatten()
        .filter(|dir| !dir.is_empty());
    let cmd = command(s, run.device.kind.name(), counts_failed, &against, dir);
    Some(if time_failed {
        with_caps(cmd, run)
    } else {
        cmd
    })
}

/// `cmd` with the caps `run` ran under on a CPU: time compares within one device key, whose
/// SIMD level (`OPLEDGER_SIMD`) and thread count (`--threads`) a run may have capped — a time
/// regression is reproduced under the same caps (counts are counted at one level whatever the
/// cap, and need none).
pub fn with_caps(mut cmd: String, run: &RunResult) -> String {
    if !run.device.kind.key_has_caps() {
        return cmd;
    }
    if run.ceilings.threads != run.device.cores && run.ceilings.threads > 0 {
        cmd.push_str(&format!(" --threads {}", run.ceilings.threads));
    }
    if let Some(cap) = run
        .environment
        .env_vars
        .get("OPLEDGER_SIMD")
        .filter(|v| !v.trim().is_empty())
    {
        cmd = format!("OPLEDGER_SIMD={} {cmd}", shell_word(cap));
    }
    cmd
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
    use super::{for_run, shell_word};
    use crate::results::{GateReference, RunResult};
    use opledger_gate::stats::RegressionState;

    /// A run of the fixture archive whose first spec's time gate failed against `reference`,
    /// its baseline file at `path`.
    fn failed(reference: Option<GateReference>, path: &str) -> RunResult {
        let mut run: RunResult = serde_json::from_str(include_str!(
            "../../../tests/fixtures/run-fixed/results.json"
        ))
        .unwrap();
        let s = &mut run.specs[0];
        s.baseline.state = Some(RegressionState::Fail);
        s.baseline.reference = reference;
        s.baseline.path = path.into();
        run
    }

    #[test]
    fn the_command_names_the_reference_the_failed_gate_read() {
        let cmd = |run: &RunResult| for_run(run, &run.specs[0]).unwrap();
        let base = "opledger run tests/fixtures/good/tiny-chain.yaml --backend cpu";
        // The accepted baselines in the default folder: nothing to name.
        let run = failed(None, "baselines/cpu-x/tiny-chain.json");
        assert_eq!(cmd(&run), base);
        // In another folder: that folder, quoted where a shell needs it.
        let run = failed(None, "/ci/my baselines/cpu-x/tiny-chain.json");
        assert_eq!(cmd(&run), format!("{base} --baselines '/ci/my baselines'"));
        let history = |branch: Option<&str>, by_default| GateReference::History {
            runs: 5,
            branch: branch.map(str::to_string),
            change: None,
            by_default,
            outliers: 0,
        };
        let run = failed(Some(history(Some("main"), false)), "");
        assert_eq!(cmd(&run), format!("{base} --against history:main"));
        let run = failed(Some(history(None, false)), "");
        assert_eq!(cmd(&run), format!("{base} --against history"));
        // The history a spec without a baseline falls back to is read again without a flag.
        let run = failed(Some(history(Some("main"), true)), "");
        assert_eq!(cmd(&run), base);
        let run = failed(
            Some(GateReference::MergeBase {
                branch: "origin/main".into(),
                merge_base: "0".repeat(40),
                commit: None,
                commits_back: 0,
                runs: 1,
                change: None,
                samples: true,
            }),
            "",
        );
        assert_eq!(
            cmd(&run),
            format!("{base} --against merge-base:origin/main --rerecord-base")
        );
        // A run capped to AVX2 on one thread: the same caps, for time.
        let mut run = failed(None, "baselines/cpu-x/tiny-chain.json");
        run.environment
            .env_vars
            .insert("OPLEDGER_SIMD".into(), "avx2".into());
        run.ceilings.threads = 1;
        run.device.cores = 2;
        assert_eq!(cmd(&run), format!("OPLEDGER_SIMD=avx2 {base} --threads 1"));
        // Nothing failed: no command.
        let mut run = failed(None, "");
        run.specs[0].baseline.state = Some(RegressionState::Pass);
        assert_eq!(for_run(&run, &run.specs[0]), None);
    }

    #[test]
    fn shell_words_are_quoted_only_where_needed() {
        assert_eq!(shell_word("specs/a.yaml"), "specs/a.yaml");
        assert_eq!(shell_word("my spec's.yaml"), "'my spec'\\''s.yaml'");
        assert_eq!(shell_word(""), "''");
    }
}
