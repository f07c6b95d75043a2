//! A branch's history in a real git repository: runs at several commits of `main`, a slowdown
//! committed there (found by `history --changes` and reported by `run` on the default branch),
//! a feature branch judged against the merge-base (`run --against merge-base:main`, `compare
//! --base merge-base:main`), the nearest ancestor with runs when the merge-base has none, and a
//! spec whose own `gate.against` asks for the branch's history; `git bisect run` driven by
//! `run --bisect`.

use crate::common;
use common::{bin, fixture, git, text};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The tests of this file one at a time: their histories are of one machine's runs, and a run
/// beside another blurs the levels the time references are made of.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The slow commit's deliberate slowdown: the fused variant computes its output four times (a
/// step of about ×3 in its counted cycles).
const SLOW: f64 = 3.0;

fn commit(repo: &Path, file: &str) -> String {
    std::fs::write(repo.join(file), file).unwrap();
    git(repo, &["add", file]);
    git(repo, &["commit", "-q", "-m", file]);
    git(repo, &["rev-parse", "--short", "HEAD"])
}

/// A run of the spec in the repository (git's branch and commit), on one thread; `slowdown` is
/// the experiment's deliberate slowdown of the fused variant. What these tests decide on a
/// slowdown they decide by counts (`count`), which repeat exactly: the timed runs make the
/// histories whose references, commits and runs are asserted, never a timed verdict.
fn run(repo: &Path, spec: &str, slowdown: f64, extra: &[&str]) -> std::process::Output {
    bin()
        .current_dir(repo)
        .env_remove("GITHUB_HEAD_REF")
        .env_remove("GITHUB_REF_NAME")
        .env("OPLEDGER_EXPERIMENT_SLOWDOWN", slowdown.to_string())
        .args(["run", spec])
        .args(common::FAST)
        .args(common::FEW_PAIRS)
        .args(["--backend", "cpu"])
        .args(["--threads", "1"])
        .args(["--default-branch", "main"])
        .args(extra)
        .output()
        .unwrap()
}

/// The archive a run wrote, as it says (`report: runs/…/report.md`; the last such line: a
/// re-recorded base reports first): folders of one second sort by commit, not by time.
fn archive_of(repo: &Path, o: &std::process::Output) -> PathBuf {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report line: {}", text(o)));
    repo.join(line.trim()).parent().unwrap().to_path_buf()
}

fn results(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap()
}

fn repo_with_spec() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().to_path_buf();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::copy(fixture("good/tiny-chain.yaml"), repo.join("chain.yaml")).unwrap();
    git(&repo, &["add", "chain.yaml"]);
    git(&repo, &["commit", "-q", "-m", "spec"]);
    (dir, repo)
}

/// A counted run of the spec in the repository (`--measure counts`): its counts repeat exactly,
/// so a slowdown's step and the gate's decision on it are the code's, not the machine's.
fn count(repo: &Path, spec: &str, slowdown: f64, extra: &[&str]) -> std::process::Output {
    let mut all = vec!["--measure", "counts"];
    all.extend_from_slice(extra);
    run(repo, spec, slowdown, &all)
}

/// The counts gate of a run's first spec, from its archive.
fn counts_gate(repo: &Path, o: &std::process::Output) -> serde_json::Value {
    results(&archive_of(repo, o))["specs"][0]["counts_gate"].clone()
}

#[cfg_attr(not(has_valgrind), ignore = "needs Valgrind")]
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one history built commit by commit: each step's runs are the next step's reference"
)]
fn a_branch_is_judged_against_its_merge_base_and_a_slowdown_is_placed_between_commits() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    let fast = commit(&repo, "fast");
    for _ in 0..2 {
        let o = count(&repo, "chain.yaml", 0.0, &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    // A slowdown lands on main: the fused variant computes its output four times.
    let slow = commit(&repo, "slow");
    let o = count(&repo, "chain.yaml", SLOW, &[]);
    // FAILed against main's newest counted run, and reported as a new shift by the run that
    // made it: between the fast commit's last run and the slow commit's first.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(counts_gate(&repo, &o)["state"], "fail");
    let out = text(&o);
    let shift: Vec<&str> = out.lines().filter(|l| l.starts_with("shift:")).collect();
    assert_eq!(shift.len(), 1, "{}", text(&o));
    assert!(
        shift[0].starts_with("shift: tiny-chain: the counts after cycles moved +")
            && shift[0].contains(&format!("between commit {fast} (run "))
            && shift[0].contains(&format!("and commit {slow} (run "))
            && shift[0].contains("--changes --metric counts-after"),
        "{}",
        shift[0]
    );
    // The next run at the same code: no new shift; still a regression, against main's newest
    // counted run that passed (a failed run is no reference until its counts are accepted).
    let o = count(&repo, "chain.yaml", SLOW, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!text(&o).contains("shift:"), "{}", text(&o));
    // The series' change point: exactly at the slow commit's first run, about tripled.
    let o = bin()
        .current_dir(&repo)
        .args(["history", "--changes", "--metric", "counts-after"])
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let changes: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let shifts = changes[0]["shifts"].as_array().unwrap();
    assert_eq!(shifts.len(), 1, "{changes:#}");
    let step = &shifts[0];
    assert_eq!(step["at"], 2, "{step}");
    assert_eq!(step["last_before"]["git_sha"], fast.as_str(), "{step}");
    assert_eq!(step["first_after"]["git_sha"], slow.as_str(), "{step}");
    assert!(step["ratio"].as_f64().unwrap() > 2.0, "{step}");
    let o = bin()
        .current_dir(&repo)
        .args([
            "history",
            "tiny-chain",
            "--changes",
            "--metric",
            "counts-after",
        ])
        .output()
        .unwrap();
    assert!(
        text(&o).contains("shift") && text(&o).contains(&slow),
        "{}",
        text(&o)
    );

    // A feature branch forked at the slow commit, with the slowdown fixed: judged against the
    // merge-base's counted run, the after side down by more than half.
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    let fix = commit(&repo, "fix");
    let o = count(&repo, "chain.yaml", 0.0, &["--against", "merge-base:main"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("pass, after -") && text(&o).contains(&format!("at {slow}")),
        "{}",
        text(&o)
    );
    let dir = archive_of(&repo, &o);
    let g = &results(&dir)["specs"][0]["counts_gate"];
    let r = &g["reference"];
    assert_eq!(r["kind"], "merge_base", "{g}");
    assert_eq!(r["commit"], slow.as_str(), "{g}");
    assert_eq!(r["commits_back"], 0, "{g}");
    assert_eq!(g["state"], "pass", "{g}");
    let after = &g["after"];
    assert!(
        after["now"].as_f64().unwrap() < 0.5 * after["baseline"].as_f64().unwrap(),
        "{g}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("the merge-base"), "{report}");
    assert!(
        !text(&o).contains("shift:"),
        "not the default branch: {}",
        text(&o)
    );
    // The feature's run against the merge-base's, by compare: the comment names the base.
    let comment = repo.join("comment.md");
    let o = bin()
        .current_dir(&repo)
        .args(["compare", "--base", "merge-base:main"])
        .arg(&dir)
        .arg("--markdown")
        .arg(&comment)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let c = std::fs::read_to_string(&comment).unwrap();
    assert!(
        c.contains(&format!(
            "at commit {slow}, the merge-base of this branch and main"
        )),
        "{c}"
    );
    assert!(
        text(&o).contains(&fix),
        "B is the feature's run: {}",
        text(&o)
    );

    // main moves on without runs; a branch forked there finds the nearest ancestor with runs,
    // and the slowdown it still carries passes against it.
    git(&repo, &["checkout", "-q", "main"]);
    commit(&repo, "docs");
    git(&repo, &["checkout", "-q", "-b", "feature2"]);
    commit(&repo, "more");
    let o = count(&repo, "chain.yaml", SLOW, &["--against", "merge-base:main"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = &counts_gate(&repo, &o)["reference"];
    assert_eq!(r["commit"], slow.as_str(), "{r}");
    assert_eq!(r["commits_back"], 1, "{r}");

    // Bad references: an unknown branch, and compare with both A and --base.
    let o = run(
        &repo,
        "chain.yaml",
        0.0,
        &["--against", "merge-base:nowhere"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("merge-base HEAD nowhere"), "{}", text(&o));
    let o = bin()
        .current_dir(&repo)
        .args(["compare", "--base", "merge-base:main"])
        .arg(&dir)
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn a_spec_can_ask_for_its_branch_history() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    let mut text_of_spec = std::fs::read_to_string(repo.join("chain.yaml")).unwrap();
    text_of_spec.push_str("gate: {against: history}\n");
    std::fs::write(repo.join("own.yaml"), &text_of_spec).unwrap();
    let mut o = run(&repo, "own.yaml", 0.0, &[]);
    for _ in 0..2 {
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        o = run(&repo, "own.yaml", 0.0, &[]);
    }
    let r = &results(&archive_of(&repo, &o))["specs"][0]["baseline"];
    assert_eq!(r["reference"]["kind"], "history", "{r}");
    assert_eq!(r["reference"]["branch"], "main", "{r}");
    assert_eq!(r["reference"]["runs"], 2, "the two runs before: {r}");
    // `--against baselines` overrides the spec's own.
    let o = run(&repo, "own.yaml", 0.0, &["--against", "baselines"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(results(&archive_of(&repo, &o))["specs"][0]["baseline"]["reference"].is_null());
    // `--no-store` gates against the store's history all the same, and records nothing.
    let recorded = || {
        let o = bin()
            .current_dir(&repo)
            .args(["history", "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let before = recorded();
    let o = run(&repo, "own.yaml", 0.0, &["--no-store"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r = &results(&archive_of(&repo, &o))["specs"][0]["baseline"];
    assert_eq!(r["reference"]["kind"], "history", "{r}");
    assert_eq!(r["reference"]["runs"], 4, "every run recorded before: {r}");
    assert_eq!(recorded(), before, "--no-store recorded a run");
    // A store that does not exist is not made to be read.
    let o = run(
        &repo,
        "own.yaml",
        0.0,
        &["--no-store", "--store", "elsewhere.sqlite"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
    assert!(!repo.join("elsewhere.sqlite").exists());
    // A reference the spec cannot name: bad input at its line.
    text_of_spec.push_str("");
    let bad = text_of_spec.replace("against: history", "against: yesterday");
    std::fs::write(repo.join("bad.yaml"), bad).unwrap();
    let o = run(&repo, "bad.yaml", 0.0, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("yesterday") && text(&o).contains("bad.yaml:"),
        "{}",
        text(&o)
    );
}

/// `git bisect run` itself, driven by `run --bisect`: the commit whose spec claims what the
/// ledger refutes is found as the first bad one; a commit whose spec is bad input aborts the
/// bisection instead of being marked bad.
#[test]
fn git_bisect_run_finds_the_first_bad_commit() {
    let _one = serial();
    let (dir, repo) = repo_with_spec();
    let good = git(&repo, &["rev-parse", "HEAD"]);
    commit(&repo, "a");
    let spec = std::fs::read_to_string(repo.join("chain.yaml")).unwrap();
    std::fs::write(
        repo.join("chain.yaml"),
        spec.replace("io_saving: {min: 0.5}", "io_saving: {min: 0.99}"),
    )
    .unwrap();
    git(&repo, &["commit", "-q", "-am", "claims too much"]);
    let bad = git(&repo, &["rev-parse", "HEAD"]);
    commit(&repo, "b");
    commit(&repo, "c");
    let runs = dir.path().join("bisect-runs");
    let bisect_run = |repo: &Path| {
        Command::new("git")
            .current_dir(repo)
            .args([
                "bisect",
                "run",
                env!("CARGO_BIN_EXE_opledger"),
                "run",
                "chain.yaml",
                "--bisect",
            ])
            .args(common::FAST)
            .args(common::FEW_PAIRS)
            .args(["--backend", "cpu", "--no-store", "--runs-dir"])
            .arg(&runs)
            .output()
            .unwrap()
    };
    git(&repo, &["bisect", "start", "HEAD", &good]);
    let o = bisect_run(&repo);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("{bad} is the first bad commit")),
        "{}",
        text(&o)
    );
    git(&repo, &["bisect", "reset"]);
    // A broken spec in the range: the bisection stops at it, no commit is called bad for it.
    std::fs::write(repo.join("chain.yaml"), &spec).unwrap();
    git(&repo, &["commit", "-q", "-am", "claims what it saves"]);
    let fixed = git(&repo, &["rev-parse", "HEAD"]);
    let broken = spec.replace(
        "ops: [bias_add, scale, add, relu, mul, silu, gelu]",
        "ops: []",
    );
    std::fs::write(repo.join("chain.yaml"), broken).unwrap();
    git(&repo, &["commit", "-q", "-am", "broken spec"]);
    std::fs::write(
        repo.join("chain.yaml"),
        spec.replace("io_saving: {min: 0.5}", "io_saving: {min: 0.99}"),
    )
    .unwrap();
    git(&repo, &["commit", "-q", "-am", "claims too much again"]);
    git(&repo, &["bisect", "start", "HEAD", &fixed]);
    let o = bisect_run(&repo);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("exit code 130"), "{}", text(&o));
    assert!(
        !text(&o).contains("is the first bad commit"),
        "{}",
        text(&o)
    );
    git(&repo, &["bisect", "reset"]);
}

/// A spec with no accepted baseline on a branch whose runs the store holds is judged against
/// the branch's history by default: the first runs say how many more it needs, then a slowdown
/// committed on main FAILs instead of passing for want of a baseline.
#[cfg_attr(not(has_valgrind), ignore = "needs Valgrind")]
#[test]
fn without_a_baseline_main_is_judged_against_its_own_history() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    commit(&repo, "fast");
    let both = ["--measure", "both"];
    // The first run makes the store; the second says how many runs the time history needs (the
    // counts need one: the newest counted run of main).
    let o = run(&repo, "chain.yaml", 0.0, &both);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&repo, "chain.yaml", 0.0, &both);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("no baseline (history: 1 of 3 runs needed)")
            && text(&o).contains("vs the newest counted run of main"),
        "{}",
        text(&o)
    );
    let o = run(&repo, "chain.yaml", 0.0, &both);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&repo, "chain.yaml", 0.0, &both);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r = results(&archive_of(&repo, &o));
    let reference = &r["specs"][0]["baseline"]["reference"];
    assert_eq!(reference["by_default"], true, "{reference}");
    assert_eq!(reference["runs"], 3, "{reference}");
    // The fused variant now computes its output four times: a regression on main, no longer a
    // PASS for want of a baseline — decided by its counts, which repeat exactly (what time says
    // of it on a busy machine does not change a decisive FAIL).
    commit(&repo, "slow");
    let o = run(&repo, "chain.yaml", SLOW, &both);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let r = results(&archive_of(&repo, &o));
    assert_eq!(
        r["specs"][0]["counts_gate"]["state"],
        "fail",
        "{}",
        text(&o)
    );
    assert_eq!(r["specs"][0]["status"], "fail", "{}", text(&o));
    // Asking for the accepted baselines by name keeps the old behaviour: nothing to compare.
    let o = run(&repo, "chain.yaml", SLOW, &["--against", "baselines"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("gate: no baseline"), "{}", text(&o));
}

/// A bisection's steps measure commits that are no branch's: `run --bisect` records them under
/// the branch `bisect`, out of every series that does not ask for them by name.
#[test]
fn bisect_steps_are_kept_apart_from_the_branches_series() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    let o = run(&repo, "chain.yaml", 0.0, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&repo, "chain.yaml", 0.0, &["--bisect"]);
    assert!(matches!(o.status.code(), Some(0 | 1 | 125)), "{}", text(&o));
    let history = |extra: &[&str]| -> Vec<String> {
        let o = bin()
            .current_dir(&repo)
            .args(["history", "--format", "json"])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| p["branch"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(history(&[]), ["main"]);
    assert_eq!(history(&["--branch", "bisect"]), ["bisect"]);
}

/// `--rerecord-base`: the merge-base commit measured again in the same job (a worktree of it),
/// recorded as the base branch's run, and the head judged against that newest base run; a spec
/// new on the branch is named and not measured at the base; what cannot be re-recorded is bad
/// input.
#[test]
fn the_merge_base_is_measured_again_before_the_head_is_judged() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    for _ in 0..2 {
        let o = run(&repo, "chain.yaml", 0.0, &[]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    }
    let base = git(&repo, &["rev-parse", "--short", "HEAD"]);
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    std::fs::copy(repo.join("chain.yaml"), repo.join("new.yaml")).unwrap();
    let spec = std::fs::read_to_string(repo.join("new.yaml")).unwrap();
    std::fs::write(
        repo.join("new.yaml"),
        spec.replace("name: tiny-chain", "name: tiny-chain-new"),
    )
    .unwrap();
    git(&repo, &["add", "new.yaml"]);
    git(&repo, &["commit", "-q", "-m", "new spec"]);
    let o = run(
        &repo,
        "chain.yaml",
        0.0,
        &["--against", "merge-base:main", "--rerecord-base"],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "--rerecord-base: the merge-base {base} measured again and recorded as main's run"
        )),
        "{}",
        text(&o)
    );
    // The base's run is main's, at the merge-base, in the store beside the two before it.
    let h = bin()
        .current_dir(&repo)
        .args([
            "history",
            "tiny-chain",
            "--branch",
            "main",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(h.status.code(), Some(0), "{}", text(&h));
    let series: serde_json::Value = serde_json::from_slice(&h.stdout).unwrap();
    let points = series.as_array().unwrap();
    assert_eq!(points.len(), 3, "{series}");
    assert!(
        points.iter().all(|p| p["git_sha"] == base.as_str()),
        "{series}"
    );
    // The head is judged against the runs at the merge-base, the newest (re-recorded) one with
    // its samples.
    let b = &results(&archive_of(&repo, &o))["specs"][0]["baseline"];
    assert_eq!(b["reference"]["kind"], "merge_base", "{b}");
    assert_eq!(b["reference"]["commit"], base.as_str(), "{b}");
    assert_eq!(b["reference"]["runs"], 3, "{b}");
    assert_eq!(b["reference"]["samples"], true, "{b}");
    // The worktree is gone.
    let worktrees = git(&repo, &["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 1, "{worktrees}");
    // A spec the merge-base does not have: named, nothing measured there.
    let o = run(
        &repo,
        "new.yaml",
        0.0,
        &["--against", "merge-base:main", "--rerecord-base"],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert!(
        text(&o).contains("new.yaml is new since the merge-base")
            && text(&o).contains("has none of these specs"),
        "{}",
        text(&o)
    );
    // Bad input: without a merge-base reference, with nothing to record into, without --against.
    for (extra, says) in [
        (
            &["--against", "history", "--rerecord-base"][..],
            "it goes with --against merge-base:BRANCH",
        ),
        (
            &[
                "--against",
                "merge-base:main",
                "--rerecord-base",
                "--no-store",
            ][..],
            "--no-store records nothing",
        ),
        (&["--rerecord-base"][..], "--against"),
    ] {
        let o = run(&repo, "chain.yaml", 0.0, extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{extra:?}: {}", text(&o));
    }
}

/// `compare` takes the drift between runs from the history store as `run`'s history reference
/// is made (which of the runs: `opledger_gate::reference`'s unit test on a series with a
/// change of level): here, that the drift is read from the store the runs were recorded in.
#[test]
fn compare_takes_its_drift_from_the_history_store() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    commit(&repo, "fast");
    let mut runs = Vec::new();
    for _ in 0..4 {
        let o = run(&repo, "chain.yaml", 0.0, &[]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        runs.push(archive_of(&repo, &o));
    }
    let o = bin()
        .current_dir(&repo)
        .arg("compare")
        .arg(&runs[2])
        .arg(&runs[3])
        .args(["--baselines", "nowhere", "--store", "runs/history.sqlite"])
        .output()
        .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert!(
        text(&o).contains("from the history store's runs of these cases ("),
        "{}",
        text(&o)
    );
}
