//! The history store: every run recorded (SQLite beside the archives), `ingest` rebuilding the
//! same store from the archives (idempotent by run id and manifest digest), `history` reading
//! each case's series, writers at once losing nothing.

use crate::common;
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

/// One passing run of `spec` in `dir` on each branch, with `extra` flags.
fn runs_on(dir: &Path, spec: &Path, branches: &[&str], extra: &[&str]) {
    for branch in branches {
        let mut args = vec!["--branch", branch];
        args.extend(extra);
        let o = run_cmd(dir, &[spec.to_path_buf()], &args).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one store recorded, rebuilt and compared: each step reads what the last step left"
)]
fn every_run_is_recorded_and_ingest_rebuilds_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    runs_on(dir.path(), &spec, &["main"; 3], &[]);
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
    // A copy of a recorded run without its manifest cannot be checked: it never takes the
    // place of the record its sealed archive made.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(&dirs[0]).unwrap() {
        let f = f.unwrap().path();
        if f.is_file() && f.file_name().unwrap() != "manifest.json" {
            std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
        }
    }
    let before = history_json(&["--store", live_store.to_str().unwrap()]);
    let o = bin()
        .arg("ingest")
        .arg(&copy)
        .args(["--store", live_store.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("has no manifest to check it by: refusing to replace the record"),
        "{}",
        text(&o)
    );
    assert_eq!(
        history_json(&["--store", live_store.to_str().unwrap()]),
        before
    );
}

#[test]
fn history_filters_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    runs_on(dir.path(), &spec, &["main", "main", "feature"], &[]);
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
    // A name the store does not hold is bad input, answered with the closest known one.
    for (args, says) in [
        (
            vec!["--device", "cpu-elsewhere-1c"],
            "--device `cpu-elsewhere-1c` is not in the store",
        ),
        (vec!["tiny-chian"], "did you mean `tiny-chain`?"),
        (vec!["--branch", "mian"], "did you mean `main`?"),
    ] {
        let o = bin()
            .args(["history", "--runs-dir", r])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(says), "{}", text(&o));
        assert!(text(&o).contains("it holds:"), "{}", text(&o));
    }
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
fn no_store_records_nothing_and_an_unknown_server_is_refused_by_name() {
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

/// Four processes at once, each ten runs into the store at `store`: every run is there.
fn writers_at_once(dir: &Path, store: &str) {
    let spec = fixture("good/tiny-chain.yaml");
    let children: Vec<_> = (0..4)
        .map(|w| {
            let runs = dir.join(format!("runs-{w}"));
            let (store, spec) = (store.to_string(), spec.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let o = bin()
                        .arg("run")
                        .arg(&spec)
                        .args(common::FAST)
                        .args(common::FEW_PAIRS)
                        .args(["--backend", "cpu", "--store", &store])
                        .arg("--runs-dir")
                        .arg(&runs)
                        .output()
                        .unwrap();
                    // Eight processes on a small machine can starve a ceiling probe into a
                    // failed check: still a run, recorded as any other.
                    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
                }
            })
        })
        .collect();
    for c in children {
        c.join().unwrap();
    }
    let all = history_json(&["--store", store]);
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 40);
    let mut ids: Vec<&str> = all.iter().map(|p| p["archive"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40, "every run its own row");
}

#[test]
fn writers_at_once_lose_nothing_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shared.sqlite");
    writers_at_once(dir.path(), store.to_str().unwrap());
}

#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "needs a PostgreSQL server (OPLEDGER_TEST_POSTGRES)"
)]
fn writers_at_once_lose_nothing_on_postgres() {
    let Some(db) = common::postgres_store("writers_at_once") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    writers_at_once(dir.path(), &db.url);
}

#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "needs a PostgreSQL server (OPLEDGER_TEST_POSTGRES)"
)]
fn a_postgres_store_holds_what_an_sqlite_one_does() {
    let Some(db) = common::postgres_store("postgres_like_sqlite") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    runs_on(
        dir.path(),
        &spec,
        &["main", "main", "main", "feature"],
        &["--store", &db.url],
    );
    let runs = dir.path().join("runs");
    assert!(
        !runs.join("history.sqlite").exists(),
        "the server's store, not the file"
    );
    // The same archives ingested into an SQLite store: the same rows, but where the archives
    // are (absolute for a server, relative to the file's folder for SQLite).
    let lite = dir.path().join("lite.sqlite");
    let dirs = run_dirs(&runs);
    let o = bin()
        .arg("ingest")
        .args(&dirs[..3])
        .args(["--store", lite.to_str().unwrap(), "--branch", "main"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = bin()
        .arg("ingest")
        .arg(&dirs[3])
        .args(["--store", lite.to_str().unwrap(), "--branch", "feature"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let strip = |mut v: serde_json::Value| {
        for p in v.as_array_mut().unwrap() {
            let a = p["archive"].as_str().unwrap().to_string();
            let name = Path::new(&a)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            p["archive"] = serde_json::json!(name);
        }
        v
    };
    let server = history_json(&["--store", &db.url]);
    assert_eq!(server.as_array().unwrap().len(), 4);
    assert_eq!(
        strip(server.clone()),
        strip(history_json(&["--store", lite.to_str().unwrap()]))
    );
    for p in server.as_array().unwrap() {
        assert!(Path::new(p["archive"].as_str().unwrap())
            .join("results.json")
            .is_file());
    }
    assert_eq!(
        history_json(&["--store", &db.url, "--branch", "main", "--last", "2"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Idempotent on the server too.
    let o = bin()
        .arg("ingest")
        .args(&dirs)
        .args(["--store", &db.url])
        .output()
        .unwrap();
    assert_eq!(
        text(&o).matches("already recorded").count(),
        4,
        "{}",
        text(&o)
    );
    // The gate's history reference read from the server.
    let o = run_cmd(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--store", &db.url, "--against", "history:main"],
    )
    .output()
    .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let run = common::only_run_dir(dir.path());
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(r["specs"][0]["baseline"]["reference"]["runs"], 3, "{r}");
    // A server that is not there: bad input naming the store, its password hidden.
    let o = run_cmd(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--store", "postgres://u:hunter2@127.0.0.1:9/none"],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("postgres://u:***@127.0.0.1:9/none"),
        "{}",
        text(&o)
    );
    assert!(!text(&o).contains("hunter2"), "{}", text(&o));
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
    // The gate's reference in words, in the report's checks (the HTML holds every check's).
    let report =
        std::fs::read_to_string(common::only_run_dir(dir.path()).join("report.html")).unwrap();
    assert!(
        report.contains("the history store holds 1 run of this spec"),
        "{report}"
    );
    // More runs of main (and one of another branch, which main's reference leaves out).
    runs_on(dir.path(), &spec, &["main", "main", "other"], &[]);
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
    // The gate's reference in words, in the report's checks (the HTML holds every check's).
    let report =
        std::fs::read_to_string(common::only_run_dir(dir.path()).join("report.html")).unwrap();
    assert!(
        report.contains("the newest 4 runs of branch main"),
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

#[test]
fn a_store_address_that_cannot_be_used_is_refused_in_the_stores_words() {
    let dir = tempfile::tempdir().unwrap();
    for (how, url, says) in [
        ("flag", ":memory:", "would keep nothing"),
        (
            "env",
            "mysql://ann:hunter2@db/x",
            "store mysql://…: expected an SQLite file",
        ),
        (
            "env",
            "postgres://ann:hunter2@db/x?sslmode=nonsense",
            "not a PostgreSQL URL",
        ),
    ] {
        let mut cmd = bin();
        cmd.current_dir(dir.path()).arg("history");
        if how == "flag" {
            cmd.args(["--store", url]);
        } else {
            cmd.env("OPLEDGER_STORE", url);
        }
        let o = cmd.output().unwrap();
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{url}: {t}");
        assert!(t.contains(says), "{url}: {t}");
        // Whichever way the address came, no flag is named for it and no password shown.
        assert!(
            !t.contains("--store ") && !t.contains("hunter2"),
            "{url}: {t}"
        );
    }
}
