//! Helpers shared by the integration tests: the binary, fixtures, and a run's text.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test, never writing into a real CI job summary.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_opledger"));
    c.env_remove("GITHUB_STEP_SUMMARY");
    c
}

/// `got` against the golden file at `path`, diffed line by line where they differ; with
/// `OPLEDGER_BLESS` set, `got` is written there instead (its folder made).
pub fn assert_golden(path: &Path, got: &str) {
    if std::env::var_os("OPLEDGER_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(path).unwrap_or_default();
    if got != want {
        let diff = similar::TextDiff::from_lines(want.as_str(), got)
            .unified_diff()
            .header("golden", "now")
            .to_string();
        panic!(
            "{} differs (OPLEDGER_BLESS=1 to accept):\n{diff}",
            path.display()
        );
    }
}

pub fn fixture(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(p)
}

/// stdout followed by stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether a run of a tiny spec passed, or failed its bound claim alone: that claim is decided
/// by the ceilings the run probed, and a machine loaded by the other tests can probe a triad low
/// enough (6-7 GB/s on the scalar path) that the spec's intensity sits at the ridge. Any other
/// failed check, or any other exit, is not the machine's.
pub fn passed_but_for_the_bound(o: &Output) -> bool {
    let said = text(o);
    match o.status.code() {
        Some(0) => true,
        Some(1) => said.contains("    ❌ bound: ") && said.matches("    ❌ ").count() == 1,
        _ => false,
    }
}

/// Flags of a small, fast run on the CPU: in-cache probe and flush buffers, few pairs.
pub const QUICK: [&str; 12] = [
    "--backend",
    "cpu",
    "--probe-mib",
    "8",
    "--flush-mib",
    "8",
    "--min-pairs",
    "3",
    "--max-pairs",
    "5",
    "--time-cap-secs",
    "2",
];

/// A small, fast run of `specs` in `dir` on the CPU.
pub fn quick_run(dir: &Path, specs: &[PathBuf], extra: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .arg("run")
        .args(specs)
        .args(QUICK)
        .args(extra)
        .output()
        .unwrap()
}

/// The one (or newest) run folder under `dir/runs` (calibration runs left out).
pub fn only_run_dir(dir: &Path) -> PathBuf {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .filter(|p| !p.to_string_lossy().contains("-calibrate-"))
        .collect();
    runs.sort();
    runs.pop().expect("a run directory")
}

/// Small, fast measurement settings for tests (sizes and caps, not timings, are asserted).
pub const FAST: [&str; 6] = [
    "--time-cap-secs",
    "2",
    "--probe-mib",
    "8",
    "--flush-mib",
    "8",
];
/// Default sample counts of test runs: few, for speed.
pub const FEW_PAIRS: [&str; 4] = ["--min-pairs", "3", "--max-pairs", "5"];
/// Enough pairs that a bootstrap CI of a 10x ratio cannot reach 1 (tests of the gate's decisions).
pub const PAIRS: [&str; 4] = ["--min-pairs", "25", "--max-pairs", "25"];

pub fn run_cmd(dir: &Path, specs: &[PathBuf], extra: &[&str]) -> Command {
    let mut c = bin();
    c.current_dir(dir)
        .arg("run")
        .args(specs)
        .args(FAST)
        .args(extra);
    if !extra.contains(&"--min-pairs") {
        c.args(FEW_PAIRS);
    }
    if !extra.contains(&"--backend") {
        c.args(["--backend", "cpu"]);
    }
    c.args(["--baselines", dir.join("baselines").to_str().unwrap()]);
    c.args(["--runs-dir", dir.join("runs").to_str().unwrap()]);
    c
}

pub fn run_in(dir: &Path, specs: &[PathBuf], extra: &[&str]) -> Output {
    run_cmd(dir, specs, extra).output().unwrap()
}

/// `git ARGS` in `repo` as a fixed author; its trimmed stdout (a failure fails the test).
pub fn git(repo: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .current_dir(repo)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

pub mod parts;
#[path = "postgres.rs"]
mod postgres_db;
#[allow(unused_imports)]
pub use postgres_db::{postgres_store, PostgresDb};

/// Every file under `dir`, at any depth, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every `.rs` file under `dir`, at any depth.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of docs/contributing.md under `## heading`, up to the next `## `.
pub fn contributing_section(heading: &str) -> String {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/contributing.md"))
            .unwrap();
    doc.split(&format!("## {heading}"))
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap_or_else(|| panic!("docs/contributing.md has no section `## {heading}`"))
        .to_string()
}

/// Whether Valgrind can be run (the counts engine); without it SKIPPED on stderr, unless
/// `OPLEDGER_REQUIRE_VALGRIND` says this is CI, where it must be there.
pub fn valgrind() -> bool {
    let has = parts::valgrind();
    if !has {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_VALGRIND").is_none(),
            "OPLEDGER_REQUIRE_VALGRIND is set but valgrind cannot be run"
        );
        eprintln!("SKIPPED: no valgrind (apt-get install valgrind)");
    }
    has
}
