//! What opledger publishes, tried as a hostile or careless user would: a store URL's password
//! (in its userinfo or its query string, given by flag or by environment) is written to no
//! archive, report, site page or message; what is read from an archive is only ever a regular
//! file inside it (links, FIFOs and devices refused, with or without a manifest); the site
//! publishes only files opledger rendered; and the store refuses what would keep nothing or
//! would not be a file. Every file a run, a report and a site wrote is searched for the planted
//! secrets.

use crate::common;
use common::{bin, fixture, only_run_dir, quick_run, text};
use std::path::{Path, PathBuf};
use std::process::Output;

/// What a planted secret starts with: no other text of a run contains it.
const PLANTED: &str = "PLANTEDsecret";

/// Every regular file under `root` (links not followed) whose bytes contain `needle`.
fn files_containing(root: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let bytes = std::fs::read(e.path()).unwrap();
                if String::from_utf8_lossy(&bytes).contains(needle) {
                    found.push(e.path());
                }
            }
        }
    }
    found
}

/// `opledger ARGS` in `dir`.
fn cmd(dir: &Path, args: &[&str]) -> Output {
    bin().current_dir(dir).args(args).output().unwrap()
}

/// A URL holding a planted password in its userinfo and in its query string.
fn planted(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let rest = match rest.split_once('@') {
        Some((user, host)) => format!("{user}:{PLANTED}-userinfo@{host}"),
        None => format!("postgres:{PLANTED}-userinfo@{rest}"),
    };
    format!("{scheme}://{rest}?password={PLANTED}-query&application_name=opledger-test")
}

#[test]
fn a_password_in_a_store_url_is_in_no_message_when_the_server_refuses() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: the connection is refused at once.
    let url = planted("postgres://u@127.0.0.1:1/db");
    let spec = fixture("good/tiny-chain.yaml");
    let spec = spec.to_str().unwrap();
    let flag = format!("--store={url}");
    let runs: [(Vec<&str>, bool); 5] = [
        (
            vec!["run", spec, "--backend", "cpu", "--store", &url],
            false,
        ),
        (vec!["run", spec, "--backend", "cpu", &flag], false),
        (vec!["run", spec, "--backend", "cpu"], true),
        (vec!["history", "--store", &url], false),
        (vec!["site", "--out", "site"], true),
    ];
    for (args, by_env) in runs {
        let mut c = bin();
        c.current_dir(dir.path()).args(&args);
        if by_env {
            c.env("OPLEDGER_STORE", &url);
        }
        let o = c.output().unwrap();
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {out}");
        assert!(!out.contains(PLANTED), "{args:?}: {out}");
        // The URL the message names is the masked one; the server's refusal is said.
        assert!(
            out.contains(
                "postgres://u:***@127.0.0.1:1/db?password=***&application_name=opledger-test"
            ) && out.contains("Connection refused"),
            "{args:?}: {out}"
        );
        // The store is opened before anything is measured: no run folder was made.
        assert!(!dir.path().join("runs").exists(), "{args:?}");
    }
    // libpq's `sslpassword` is not one the client knows: refused by name, its value masked.
    let ssl = format!("{url}&sslpassword={PLANTED}-ssl");
    let o = cmd(dir.path(), &["history", "--store", &ssl]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("sslpassword=***"), "{}", text(&o));
    assert!(!text(&o).contains(PLANTED), "{}", text(&o));
    assert!(files_containing(dir.path(), PLANTED).is_empty());
}

#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "needs a PostgreSQL server (OPLEDGER_TEST_POSTGRES)"
)]
fn a_password_in_a_store_url_reaches_no_archive_report_or_site() {
    let Some(db) = common::postgres_store("published_secrets") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = planted(&db.url);
    let spec = fixture("good/tiny-chain.yaml");
    let mut outputs = String::new();
    // By flag (both spellings) and by environment.
    let flag = format!("--store={url}");
    for extra in [vec!["--store", url.as_str()], vec![flag.as_str()]] {
        let o = quick_run(dir.path(), std::slice::from_ref(&spec), &extra);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        outputs.push_str(&text(&o));
    }
    let o = bin()
        .current_dir(dir.path())
        .env("OPLEDGER_STORE", &url)
        .arg("run")
        .arg(&spec)
        .args(common::QUICK)
        .output()
        .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    outputs.push_str(&text(&o));
    let run = only_run_dir(dir.path());
    let results = std::fs::read_to_string(run.join("results.json")).unwrap();
    assert!(results.contains(":***@") && results.contains("password=***"));
    for args in [
        vec!["report", run.to_str().unwrap(), "--out", "report.html"],
        vec!["history", "--store", &url],
        vec!["history", "--store", &url, "--format", "json"],
        vec!["history", "--store", &url, "--format", "csv"],
        vec!["site", "--store", &url, "--out", "site"],
    ] {
        let o = cmd(dir.path(), &args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        outputs.push_str(&text(&o));
    }
    assert!(!outputs.contains(PLANTED), "{outputs}");
    let leaked = files_containing(dir.path(), PLANTED);
    assert!(leaked.is_empty(), "the password is in {leaked:?}");
    // The site names its store, masked.
    let marker = std::fs::read_to_string(dir.path().join("site/opledger-site.json")).unwrap();
    assert!(marker.contains(":***@"), "{marker}");
}

/// The fixed archive's results, with `edit` applied, as `dir/name/results.json`.
fn archive(dir: &Path, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("run-fixed/results.json")).unwrap()).unwrap();
    edit(&mut r);
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("results.json"), serde_json::to_vec(&r).unwrap()).unwrap();
    d
}

#[test]
fn an_archive_written_with_a_password_shows_none_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = planted("postgres://u@db.example:5432/opledger");
    let old = archive(dir.path(), "archives/old", |r| {
        r["command_line"] = serde_json::json!(["opledger", "run", "--store", url.clone()]);
        r["environment"]["command_line"] = r["command_line"].clone();
        r["environment"]["env_vars"]["OPLEDGER_STORE"] = serde_json::json!(url.clone());
    });
    let store = dir.path().join("store.sqlite");
    let store = store.to_str().unwrap();
    let mut outputs = String::new();
    for args in [
        vec!["ingest", "--store", store, old.to_str().unwrap()],
        vec!["site", "--store", store, "--out", "site"],
        vec!["report", old.to_str().unwrap()],
        vec!["report", old.to_str().unwrap(), "--out", "out/report.html"],
    ] {
        std::fs::create_dir_all(dir.path().join("out")).unwrap();
        let o = cmd(dir.path(), &args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        outputs.push_str(&text(&o));
    }
    assert!(!outputs.contains(PLANTED), "{outputs}");
    for published in ["site", "out"] {
        let leaked = files_containing(&dir.path().join(published), PLANTED);
        assert!(leaked.is_empty(), "the password is in {leaked:?}");
    }
}

/// A file of the machine that an archive's links point at.
fn machine_file(dir: &Path) -> PathBuf {
    let p = dir.join("machine-secret.txt");
    std::fs::write(&p, "MACHINE-FILE-CONTENT root:x:0:0\n").unwrap();
    p
}

#[test]
fn an_archive_is_read_only_through_regular_files_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let secret = machine_file(dir.path());
    let store = dir.path().join("store.sqlite");
    let store = store.to_str().unwrap();

    // results.json a link (to a sound results file outside), or a FIFO: refused by every
    // command that reads an archive, before reading.
    let outside = archive(dir.path(), "outside", |_| {});
    let linked = dir.path().join("linked");
    std::fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(outside.join("results.json"), linked.join("results.json")).unwrap();
    for args in [
        vec!["ingest", "--store", store, linked.to_str().unwrap()],
        vec!["report", linked.to_str().unwrap()],
    ] {
        let o = cmd(dir.path(), &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("a symbolic link"), "{}", text(&o));
    }
    let fifo = dir.path().join("fifo");
    std::fs::create_dir(&fifo).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(fifo.join("results.json"))
        .status()
        .unwrap();
    assert!(made.success());
    let o = cmd(dir.path(), &["report", fifo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("a FIFO"), "{}", text(&o));

    // A template linked to a file of the machine: `report` renders none of it.
    let templated = archive(dir.path(), "templated", |r| {
        r["template"] = serde_json::json!("template/report.md.j2")
    });
    std::fs::create_dir(templated.join("template")).unwrap();
    std::os::unix::fs::symlink(&secret, templated.join("template/report.md.j2")).unwrap();
    let o = cmd(dir.path(), &["report", templated.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!text(&o).contains("MACHINE-FILE-CONTENT"), "{}", text(&o));
    assert!(text(&o).contains("a symbolic link"), "{}", text(&o));

    // No manifest, its other files links to the machine's and a scripted SVG: ingested as
    // unverified; its site page says so and publishes only what opledger rendered.
    let bare = archive(dir.path(), "bare", |_| {});
    std::os::unix::fs::symlink(&secret, bare.join("environment.json")).unwrap();
    std::os::unix::fs::symlink(&secret, bare.join("report.md")).unwrap();
    std::fs::write(
        bare.join("roofline.svg"),
        "<svg xmlns='http://www.w3.org/2000/svg'><script>alert(document.cookie)</script></svg>",
    )
    .unwrap();
    let o = cmd(
        dir.path(),
        &["ingest", "--store", store, bare.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("unverified"), "{}", text(&o));
    let o = cmd(dir.path(), &["site", "--store", store, "--out", "site"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let site = dir.path().join("site");
    assert!(files_containing(&site, "MACHINE-FILE-CONTENT").is_empty());
    assert!(files_containing(&site, "<script>alert").is_empty());
    let pages = files_containing(&site, "data-unverified=\"true\"");
    assert_eq!(pages.len(), 1, "{pages:?}");
    let run_page = pages[0].parent().unwrap();
    for f in [
        "results.json",
        "environment.json",
        "report.md",
        "roofline.svg",
    ] {
        let meta = std::fs::symlink_metadata(run_page.join(f)).unwrap();
        assert!(meta.is_file(), "{f}");
    }
    let env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_page.join("environment.json")).unwrap()).unwrap();
    assert!(env["opledger_version"].is_string(), "{env}");
}

#[test]
fn a_sealed_archive_with_a_scripted_svg_publishes_only_the_svg_opledger_draws() {
    let dir = tempfile::tempdir().unwrap();
    let o = quick_run(dir.path(), &[fixture("good/tiny-chain.yaml")], &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let run = only_run_dir(dir.path());
    // The SVG replaced and the manifest re-sealed by hand: `verify` passes.
    let svg = b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>";
    std::fs::write(run.join("roofline.svg"), svg).unwrap();
    let mpath = run.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(svg)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    m["files"]["roofline.svg"] = serde_json::json!({"sha256": digest, "bytes": svg.len()});
    std::fs::write(&mpath, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let o = cmd(dir.path(), &["verify", run.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = cmd(dir.path(), &["site", "--out", "site"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let site = dir.path().join("site");
    assert!(files_containing(&site, "<script>alert").is_empty());
    assert!(!files_containing(&site, "<svg").is_empty());
}

#[test]
fn a_merge_reads_no_linked_spec_of_a_shard() {
    let dir = tempfile::tempdir().unwrap();
    let secret = machine_file(dir.path());
    let o = quick_run(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--shard", "count:1/1", "--no-store"],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let run = only_run_dir(dir.path());
    std::fs::remove_file(run.join("manifest.json")).unwrap();
    let spec = std::fs::read_dir(run.join("specs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&spec).unwrap();
    std::os::unix::fs::symlink(&secret, &spec).unwrap();
    let o = cmd(
        dir.path(),
        &[
            "merge",
            run.to_str().unwrap(),
            "--out",
            "merged",
            "--no-store",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("a symbolic link"), "{}", text(&o));
    assert!(!text(&o).contains("MACHINE-FILE-CONTENT"), "{}", text(&o));
}

#[test]
fn a_damaged_or_ambiguous_manifest_fails_verification() {
    let dir = tempfile::tempdir().unwrap();
    let o = quick_run(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--no-store"],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let run = only_run_dir(dir.path());
    let mpath = run.join("manifest.json");
    let good = std::fs::read_to_string(&mpath).unwrap();
    // A key given twice: the second would win where the first was read.
    let twice = good.replacen(
        "\"files\": {",
        "\"files\": {\n    \"results.json\": {\"sha256\": \"00\", \"bytes\": 1},",
        1,
    );
    assert_ne!(twice, good);
    for (bytes, says) in [
        (twice.as_str(), "the key `results.json` is given twice"),
        ("{ not json", "not an opledger manifest"),
    ] {
        std::fs::write(&mpath, bytes).unwrap();
        let o = cmd(dir.path(), &["verify", run.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains(says), "{}", text(&o));
        assert!(text(&o).contains("NOT INTACT"), "{}", text(&o));
        let o = cmd(dir.path(), &["report", run.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    }
}

#[test]
fn a_store_that_would_keep_nothing_or_is_no_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    let spec = spec.to_str().unwrap();
    for store in ["", "sqlite:", ":memory:", "sqlite::memory:"] {
        for args in [
            vec!["run", spec, "--backend", "cpu", "--store", store],
            vec!["history", "--store", store],
        ] {
            let o = cmd(dir.path(), &args);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
            assert!(text(&o).contains("would keep nothing"), "{}", text(&o));
        }
    }
    // A device (and a folder): refused before SQLite opens it, nothing left beside it.
    let device = dir.path().join("zero.sqlite");
    std::os::unix::fs::symlink("/dev/zero", &device).unwrap();
    let o = cmd(
        dir.path(),
        &[
            "run",
            spec,
            "--backend",
            "cpu",
            "--store",
            device.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not a regular file"), "{}", text(&o));
    assert!(!dir.path().join("zero.sqlite-journal").exists());
    assert!(!Path::new("/dev/zero-journal").exists());
    assert!(!dir.path().join("runs").exists());
}

/// Runs of the fixed archive under two run ids, ingested with `branch`.
fn store_of_two_runs(dir: &Path, branch: &str) -> String {
    let store = dir.join("store.sqlite").to_str().unwrap().to_string();
    for id in ["20261130T101010Z-aaaaaaa", "20261130T111010Z-bbbbbbb"] {
        let a = archive(dir, &format!("archives/{id}"), |r| {
            r["run_id"] = serde_json::json!(id);
        });
        let o = cmd(
            dir,
            &[
                "ingest",
                "--store",
                &store,
                "--branch",
                branch,
                a.to_str().unwrap(),
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    store
}

#[test]
fn a_branch_name_cannot_become_a_formula_or_break_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let branch = "=HYPERLINK(\"http://x\")|col\nrow";
    let store = store_of_two_runs(dir.path(), branch);
    let o = cmd(
        dir.path(),
        &["history", "--store", &store, "--format", "csv"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let csv = String::from_utf8_lossy(&o.stdout).to_string();
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let header = rows.headers().unwrap().clone();
    let at = header.iter().position(|h| h == "branch").unwrap();
    let mut n = 0;
    for r in rows.records() {
        let r = r.unwrap();
        assert_eq!(&r[at], format!("'{branch}"), "{csv}");
        for cell in r.iter() {
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "{cell:?}"
            );
        }
        n += 1;
    }
    // Every case of both runs.
    assert!(n >= 2 && n % 2 == 0, "{csv}");
    let o = cmd(dir.path(), &["history", "--store", &store]);
    let table = String::from_utf8_lossy(&o.stdout).to_string();
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| 2026")).collect();
    assert_eq!(rows.len(), n, "{table}");
    for r in rows {
        // Nine cells: ten unescaped bars.
        let bars = r.matches('|').count() - r.matches("\\|").count();
        assert_eq!(bars, 10, "{r}");
    }
}

#[test]
fn device_keys_that_slug_alike_get_case_pages_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_of_two_runs(dir.path(), "main");
    let db = rusqlite::Connection::open(&store).unwrap();
    db.execute(
        "UPDATE runs SET device_key = 'cpu/x' WHERE run_id = '20261130T101010Z-aaaaaaa'",
        [],
    )
    .unwrap();
    db.execute(
        "UPDATE runs SET device_key = 'cpu_x' WHERE run_id = '20261130T111010Z-bbbbbbb'",
        [],
    )
    .unwrap();
    drop(db);
    let o = cmd(dir.path(), &["site", "--store", &store, "--out", "site"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cases: Vec<_> = std::fs::read_dir(dir.path().join("site/cases"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(cases.len(), 2, "{cases:?}");
}

#[test]
fn huge_last_counts_read_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_of_two_runs(dir.path(), "main");
    let o = cmd(
        dir.path(),
        &[
            "history",
            "--store",
            &store,
            "--last",
            "18446744073709551615",
            "--format",
            "json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let points: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let specs = std::fs::read_to_string(fixture("run-fixed/results.json")).unwrap();
    let specs: serde_json::Value = serde_json::from_str(&specs).unwrap();
    let cases = specs["specs"].as_array().unwrap().len();
    assert_eq!(points.as_array().unwrap().len(), 2 * cases);
}

#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "needs a PostgreSQL server (OPLEDGER_TEST_POSTGRES)"
)]
fn huge_last_counts_read_every_run_on_postgres() {
    let dir = tempfile::tempdir().unwrap();
    // The two runs' archives, ingested into the server.
    store_of_two_runs(dir.path(), "main");
    let Some(db) = common::postgres_store("published_last") else {
        return;
    };
    let archives = dir.path().join("archives");
    let o = cmd(
        dir.path(),
        &["ingest", "--store", &db.url, archives.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = cmd(
        dir.path(),
        &[
            "history",
            "--store",
            &db.url,
            "--last",
            "18446744073709551615",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
#[cfg_attr(
    not(has_root),
    ignore = "needs root, runuser and unshare (the store is read as `nobody`)"
)]
fn an_unwritable_store_is_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_of_two_runs(dir.path(), "main");
    // A store its reader cannot write (root ignores modes: the check runs as `nobody`).
    if !common::parts::root() {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_ROOT").is_none(),
            "OPLEDGER_REQUIRE_ROOT is set but this is not root with runuser and unshare"
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    for p in [dir.path().to_path_buf(), PathBuf::from(&store)] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut p = dir.path().parent();
    while let Some(d) = p {
        // Every folder above must let `nobody` through (a temporary folder usually does).
        assert!(
            std::fs::metadata(d).unwrap().permissions().mode() & 0o001 != 0,
            "{} is closed to other users: set TMPDIR to a folder every user may pass through",
            d.display()
        );
        p = d.parent();
    }
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).unwrap();
    for args in [
        vec!["history", "--store", store.as_str()],
        vec![
            "site",
            "--store",
            store.as_str(),
            "--out",
            "/tmp/opledger-ro-site-test",
        ],
    ] {
        let _ = std::fs::remove_dir_all("/tmp/opledger-ro-site-test");
        let o = std::process::Command::new("runuser")
            .args(["-u", "nobody", "--"])
            .arg(env!("CARGO_BIN_EXE_opledger"))
            .args(&args)
            .current_dir("/tmp")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
    }
    let _ = std::fs::remove_dir_all("/tmp/opledger-ro-site-test");
}

#[test]
fn a_site_made_into_the_current_folder_leaves_no_staging_folder() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_of_two_runs(dir.path(), "main");
    let out = dir.path().join("site-here");
    std::fs::create_dir(&out).unwrap();
    for _ in 0..2 {
        let o = cmd(&out, &["site", "--store", &store, "--out", "."]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(out.join("index.html").is_file());
    }
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".opledger"))
        .collect();
    left.extend(
        std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".opledger")),
    );
    assert!(left.is_empty(), "{left:?}");
}

#[test]
#[cfg_attr(
    not(has_root),
    ignore = "needs root, runuser and unshare (a tmpfs mounted in a mount namespace of its own)"
)]
fn a_full_disk_under_the_store_is_a_failed_write() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(dir.path(), "archive", |_| {});
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    // A file system of a few KiB, in a mount namespace of its own (gone when the command ends).
    let mounts = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=8k tmpfs \"$1\""])
        .arg("sh")
        .arg(&mnt)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounts {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_ROOT").is_none(),
            "OPLEDGER_REQUIRE_ROOT is set but `unshare -m` cannot mount a tmpfs"
        );
        return;
    }
    // Too small for the WAL's shared memory, and too small for the tables.
    for size in ["8k", "40k"] {
        let o = std::process::Command::new("unshare")
            .args([
                "-m",
                "sh",
                "-c",
                "mount -t tmpfs -o size=$4 tmpfs \"$1\" && exec \"$2\" ingest --store \"$1/h.sqlite\" \"$3\"",
            ])
            .arg("sh")
            .arg(&mnt)
            .arg(env!("CARGO_BIN_EXE_opledger"))
            .arg(&a)
            .arg(size)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(4), "{size}: {}", text(&o));
        assert!(text(&o).contains("history store"), "{}", text(&o));
    }
}
