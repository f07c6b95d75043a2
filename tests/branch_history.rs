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

/// The tests of this file one at a time: each times a slowdown, and two at once on a small
/// machine blur each other's levels.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The slow commit's deliberate slowdown: the fused variant computes its output four times (a
/// step of about ×3 that a loaded runner's noise cannot hide in a few runs).
const SLOW: f64 = 3.0;

fn commit(repo: &Path, file: &str) -> String {
    std::fs::write(repo.join(file), file).unwrap();
    git(repo, &["add", file]);
    git(repo, &["commit", "-q", "-m", file]);
    git(repo, &["rev-parse", "--short", "HEAD"])
}

/// A run of the spec in the repository (git's branch and commit), enough pairs for stable
/// medians, on one thread (a tiny case's parallel kernel stalls whenever another test holds the
/// other core, and the step must stand out of the noise); `slowdown` is the experiment's
/// deliberate slowdown of the fused variant.
fn run(repo: &Path, spec: &str, slowdown: f64, extra: &[&str]) -> std::process::Output {
    bin()
        .current_dir(repo)
        .env_remove("GITHUB_HEAD_REF")
        .env_remove("GITHUB_REF_NAME")
        .env("OPLEDGER_EXPERIMENT_SLOWDOWN", slowdown.to_string())
        .args(["run", spec])
        .args(common::FAST)
        .args(["--min-pairs", "25", "--max-pairs", "25", "--backend", "cpu"])
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

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one history built commit by commit: each step's runs are the next step's reference"
)]
fn a_branch_is_judged_against_its_merge_base_and_a_slowdown_is_placed_between_commits() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    let fast = commit(&repo, "fast");
    // These runs make the history; what the gate says of each is noise's to decide at these
    // sizes (a loaded runner has moved one tiny case's after/before ratio ×2.5), and the gate's
    // decision is tested elsewhere: a run is recorded whichever way it goes.
    let fast_runs = 8;
    for _ in 0..fast_runs {
        let o = run(&repo, "chain.yaml", 0.0, &[]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    }
    // A slowdown lands on main: the fused variant computes its output four times.
    let slow = commit(&repo, "slow");
    let mut reported = Vec::new();
    for _ in 0..6 {
        let o = run(&repo, "chain.yaml", SLOW, &[]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        reported.extend(
            text(&o)
                .lines()
                .filter(|l| l.starts_with("shift:"))
                .map(str::to_string),
        );
    }
    // Reported by the run that made it visible (later runs know it): the new level begins at
    // the slow commit (at one of its runs: a change is placed within the noise).
    assert!(
        reported
            .iter()
            .any(|l| l.contains("tiny-chain: the ")
                && l.contains(&format!("and commit {slow} (run"))),
        "run on the default branch reports the new shift: {reported:?}"
    );
    // The series' change point: at the slow commit, about tripled, in the after median or in
    // after/before (which cancels the machine's drift, where raw times follow a loaded machine;
    // either can blur on a busy one). A change is placed within the noise: at the first run of
    // the slow commit, or one run either side of it when a runner's bad second lands there.
    let mut seen = Vec::new();
    let step = ["after", "ratio"].iter().find_map(|&metric| {
        let o = bin()
            .current_dir(&repo)
            .args([
                "history",
                "--changes",
                "--metric",
                metric,
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let changes: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        seen.push(changes.clone());
        changes[0]["shifts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["at"]
                    .as_u64()
                    .is_some_and(|at| at.abs_diff(fast_runs) <= 1)
            })
            .cloned()
            .map(|s| (metric, s))
    });
    let (metric, step) = step
        .unwrap_or_else(|| panic!("no shift within a run of the slow commit's first: {seen:#?}"));
    assert!(step["ratio"].as_f64().unwrap() > 1.3, "{step}");
    // It began at a run of the fast commit or of the slow one.
    let at = step["first_after"]["git_sha"].as_str().unwrap().to_string();
    assert!(at == fast || at == slow, "{step}");
    let o = bin()
        .current_dir(&repo)
        .args(["history", "tiny-chain", "--changes", "--metric", metric])
        .output()
        .unwrap();
    assert!(
        text(&o).contains("shift") && text(&o).contains(&at),
        "{}",
        text(&o)
    );

    // A feature branch forked at the slow commit, with the slowdown fixed.
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    let fix = commit(&repo, "fix");
    let o = run(&repo, "chain.yaml", 0.0, &["--against", "merge-base:main"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let dir = archive_of(&repo, &o);
    let b = &results(&dir)["specs"][0]["baseline"];
    let r = &b["reference"];
    assert_eq!(r["kind"], "merge_base", "{b}");
    assert_eq!(r["commit"], slow.as_str(), "{b}");
    assert_eq!(r["commits_back"], 0, "{b}");
    assert_eq!(r["samples"], true, "{b}");
    // The runs before the change of level are not part of the reference: the level holds
    // from the slow commit on (the change is placed in noise: from one of its runs).
    let left_out = r["change"]["left_out"].as_u64().unwrap();
    assert!(left_out >= 8, "{b}");
    assert_eq!(r["runs"].as_u64().unwrap() + left_out, 14, "{b}");
    assert_eq!(r["change"]["since_commit"], slow.as_str(), "{b}");
    assert_eq!(b["finding"]["kind"], "judged", "{b}");
    // The fix against the slow base (the gate's decision on a few noisy runs is tested
    // elsewhere): on raw after times, which the fix halves.
    let all = &b["finding"]["all"];
    let raw = [&all["decided"], &all["other"]]
        .into_iter()
        .find(|c| c["relative"] == false)
        .unwrap_or_else(|| panic!("a raw comparison: {b}"));
    assert!(raw["ratio"]["point"].as_f64().unwrap() < 0.8, "{b}");
    assert_ne!(b["state"], "fail", "{b}");
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

    // main moves on without runs; a branch forked there finds the nearest ancestor with runs.
    git(&repo, &["checkout", "-q", "main"]);
    commit(&repo, "docs");
    git(&repo, &["checkout", "-q", "-b", "feature2"]);
    commit(&repo, "more");
    let o = run(&repo, "chain.yaml", SLOW, &["--against", "merge-base:main"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r = &results(&archive_of(&repo, &o))["specs"][0]["baseline"]["reference"];
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
#[test]
fn without_a_baseline_main_is_judged_against_its_own_history() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    commit(&repo, "fast");
    // The first run makes the store; the second says how many runs history needs.
    let o = run(&repo, "chain.yaml", 0.0, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&repo, "chain.yaml", 0.0, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("no baseline (history: 1 of 3 runs needed)"),
        "{}",
        text(&o)
    );
    let o = run(&repo, "chain.yaml", 0.0, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&repo, "chain.yaml", 0.0, &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r = results(&archive_of(&repo, &o));
    let reference = &r["specs"][0]["baseline"]["reference"];
    assert_eq!(reference["by_default"], true, "{reference}");
    assert_eq!(reference["runs"], 3, "{reference}");
    assert!(
        text(&o).contains("vs the newest 3 runs of main"),
        "{}",
        text(&o)
    );
    // The fused variant now computes its output four times: a regression on main, no longer a
    // PASS for want of a baseline (FAIL, or INCONCLUSIVE where this runner's drift between
    // the history's runs is as large as the step).
    commit(&repo, "slow");
    let o = run(&repo, "chain.yaml", SLOW, &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r = results(&archive_of(&repo, &o));
    let state = &r["specs"][0]["baseline"]["state"];
    assert!(state == "fail" || state == "inconclusive", "{}", text(&o));
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
/// is made: the runs up to A, from the newest change of level on. A slowdown that landed after
/// A is not the drift B is judged with, nor are the runs before a change that A came after.
#[test]
fn compare_takes_its_drift_from_the_runs_at_the_bases_level() {
    let _one = serial();
    let (_dir, repo) = repo_with_spec();
    commit(&repo, "fast");
    let mut fast = Vec::new();
    for _ in 0..5 {
        let o = run(&repo, "chain.yaml", 0.0, &[]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        fast.push(archive_of(&repo, &o));
    }
    commit(&repo, "slow");
    let mut slow = Vec::new();
    for _ in 0..4 {
        let o = run(&repo, "chain.yaml", SLOW, &[]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        slow.push(archive_of(&repo, &o));
    }
    let compare = |a: &Path, b: &Path| {
        let o = bin()
            .current_dir(&repo)
            .arg("compare")
            .arg(a)
            .arg(b)
            .args(["--baselines", "nowhere", "--store", "runs/history.sqlite"])
            .output()
            .unwrap();
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        text(&o)
    };
    // A is the fourth fast run and B the fifth: the three fast runs before A, and A. The four
    // slow runs since are another code's.
    let out = compare(&fast[3], &fast[4]);
    assert!(out.contains("(4 to 4 runs with A)"), "{out}");
    // A is the newest slow run: the slow runs before it, and A; not the fast runs before the
    // change of level, nor B.
    let out = compare(&slow[3], &fast[4]);
    assert!(out.contains("(4 to 4 runs with A)"), "{out}");
}
