//! The history store: every run recorded (SQLite beside the archives), `ingest` rebuilding the
//! same store from the archives (idempotent by run id and manifest digest), `history` reading
//! each case's series, writers at once losing nothing.

mod common;
use common::{bin, fixture, run_cmd, text};
use std::path::{Path, PathBuf};

fn history_json(args: &[&str]) -> serde_json::Value {
    let o = bin()
        .arg("history")
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn run_dirs(runs: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

#[test]
fn every_run_is_recorded_and_ingest_rebuilds_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    for _ in 0..3 {
        let o = run_cmd(
            dir.path(),
            std::slice::from_ref(&spec),
            &["--branch", "main"],
        )
        .output()
        .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let runs = dir.path().join("runs");
    let live_store = runs.join("history.sqlite");
    assert!(
        live_store.is_file(),
        "the default store beside the archives"
    );
    let live = history_json(&["--runs-dir", runs.to_str().unwrap()]);
    let points = live.as_array().unwrap();
    assert_eq!(points.len(), 3, "{live}");
    for p in points {
        assert_eq!(p["spec"], "tiny-chain");
        assert_eq!(p["branch"], "main");
        assert_eq!(p["verdict"], "pass");
        let (r, lo, hi) = (
            p["ratio"].as_f64().unwrap(),
            p["ratio_lo"].as_f64().unwrap(),
            p["ratio_hi"].as_f64().unwrap(),
        );
        assert!(lo <= r && r <= hi && r > 0.0, "{p}");
        // Where the archive is, relative to the store.
        assert!(runs
            .join(p["archive"].as_str().unwrap())
            .join("results.json")
            .is_file());
    }
    // Rebuilt from the archives into another store: the same rows.
    let rebuilt = dir.path().join("rebuilt.sqlite");
    let dirs = run_dirs(&runs);
    let o = bin()
        .arg("ingest")
        .args(&dirs)
        .args(["--store", rebuilt.to_str().unwrap(), "--branch", "main"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(text(&o).matches("recorded 2026").count(), 3, "{}", text(&o));
    let mut again = history_json(&["--store", rebuilt.to_str().unwrap()]);
    // Archive paths are relative to each store's folder.
    for p in again.as_array_mut().unwrap() {
        let a = p["archive"].as_str().unwrap().to_string();
        p["archive"] = serde_json::json!(a.trim_start_matches("runs/"));
    }
    assert_eq!(
        live, again,
        "the store rebuilt by ingest is the one written live"
    );
    // Idempotent: the same archives again change nothing.
    let o = bin()
        .arg("ingest")
        .args(&dirs)
        .args(["--store", rebuilt.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        text(&o).matches("already recorded").count(),
        3,
        "{}",
        text(&o)
    );
    // An archive re-rendered since (a new manifest) replaces its rows.
    let o = bin()
        .arg("report")
        .arg(&dirs[0])
        .arg("--out")
        .arg(dirs[0].join("report.md"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = bin()
        .arg("ingest")
        .arg(&dirs[0])
        .args(["--store", live_store.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(text(&o).contains("re-recorded"), "{}", text(&o));
    assert_eq!(
        history_json(&["--store", live_store.to_str().unwrap()])
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn history_filters_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    for branch in ["main", "main", "feature"] {
        let o = run_cmd(
            dir.path(),
            std::slice::from_ref(&spec),
            &["--branch", branch],
        )
        .output()
        .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let runs = dir.path().join("runs");
    let r = runs.to_str().unwrap();
    assert_eq!(
        history_json(&["--runs-dir", r, "--branch", "main"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let last = history_json(&["--runs-dir", r, "--last", "1"]);
    assert_eq!(last.as_array().unwrap().len(), 1);
    assert_eq!(last[0]["branch"], "feature", "the newest run");
    assert!(
        history_json(&["--runs-dir", r, "--device", "cpu-elsewhere-1c"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(history_json(&["--runs-dir", r, "no-such-case"])
        .as_array()
        .unwrap()
        .is_empty());
    let o = bin().args(["history", "--runs-dir", r]).output().unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("## tiny-chain") && table.contains("(3 runs, after/before)"),
        "{table}"
    );
    let o = bin()
        .args(["history", "--runs-dir", r, "--format", "csv"])
        .output()
        .unwrap();
    let csv = String::from_utf8_lossy(&o.stdout);
    assert!(csv.starts_with("spec,run_id,started_utc"), "{csv}");
    assert_eq!(csv.lines().count(), 4, "{csv}");
}

#[test]
fn no_store_records_nothing_and_a_server_url_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &["--no-store"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!dir.path().join("runs/history.sqlite").exists());
    let o = run_cmd(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--store", "mysql://db/x"],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("mysql://"), "{}", text(&o));
    // OPLEDGER_STORE names the store as --store does.
    let elsewhere = dir.path().join("team.sqlite");
    let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &[])
        .env("OPLEDGER_STORE", &elsewhere)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        history_json(&["--store", elsewhere.to_str().unwrap()])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let o = bin()
        .args(["history", "--store"])
        .arg(dir.path().join("none.sqlite"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn writers_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    // Four processes at once, each three runs into one store.
    let children: Vec<_> = (0..4)
        .map(|w| {
            let runs = dir.path().join(format!("runs-{w}"));
            let store = dir.path().join("shared.sqlite");
            let spec = spec.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    let o = bin()
                        .arg("run")
                        .arg(&spec)
                        .args(common::FAST)
                        .args(common::FEW_PAIRS)
                        .args(["--backend", "cpu", "--store"])
                        .arg(&store)
                        .arg("--runs-dir")
                        .arg(&runs)
                        .output()
                        .unwrap();
                    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
                }
            })
        })
        .collect();
    for c in children {
        c.join().unwrap();
    }
    let store = dir.path().join("shared.sqlite");
    let all = history_json(&["--store", store.to_str().unwrap()]);
    assert_eq!(all.as_array().unwrap().len(), 12, "{all}");
}

#[test]
fn the_gate_judges_against_a_branch_history() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    let results = |dir: &Path| -> serde_json::Value {
        let run = common::only_run_dir(dir);
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap()
    };
    // One run of history: not enough to judge; the report says so.
    let o = run_cmd(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--branch", "main"],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run_cmd(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--branch", "main", "--against", "history"],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = results(dir.path());
    assert_eq!(r["specs"][0]["baseline"]["finding"]["kind"], "no_baseline");
    assert_eq!(r["specs"][0]["baseline"]["reference"]["runs"], 1);
    let report =
        std::fs::read_to_string(common::only_run_dir(dir.path()).join("report.md")).unwrap();
    assert!(
        report.contains("the history store holds 1 run(s)"),
        "{report}"
    );
    // More runs of main (and one of another branch, which main's reference leaves out).
    for branch in ["main", "main", "other"] {
        let o = run_cmd(
            dir.path(),
            std::slice::from_ref(&spec),
            &["--branch", branch],
        )
        .output()
        .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let o = run_cmd(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--against", "history:main"],
    )
    .output()
    .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r = results(dir.path());
    let b = &r["specs"][0]["baseline"];
    // Four runs of main are in the store: the two before, this branch's run with --against
    // history, and the last two.
    assert_eq!(b["reference"]["runs"], 4, "{b}");
    assert_eq!(b["reference"]["branch"], "main", "{b}");
    assert_eq!(b["finding"]["kind"], "judged", "{b}");
    assert_eq!(b["finding"]["all"]["decided"]["pooled_runs"], 4, "{b}");
    let report =
        std::fs::read_to_string(common::only_run_dir(dir.path()).join("report.md")).unwrap();
    assert!(
        report.contains("the newest 4 run(s) of branch main"),
        "{report}"
    );
    // Accepting and judging against history at once, or an unknown reference: bad input.
    for extra in [
        &["--against", "history", "--accept"][..],
        &["--against", "yesterday"][..],
    ] {
        let o = run_cmd(dir.path(), std::slice::from_ref(&spec), extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o));
    }
}
