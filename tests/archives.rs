//! Archives nobody can turn against their reader: a tampered `results.json` (a CI artifact of a
//! fork's pull request is one) never writes outside the folder a command was given, never makes
//! a failed check a baseline, and every archive's manifest names the file edited after the run.
//! Each case runs beside a `victim` file and checks that the parent folder holds nothing new.

use crate::common;
use common::{bin, fixture, only_run_dir, quick_run, text};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A folder `case/` inside a parent holding only `victim`; nothing may appear beside them.
struct Sandbox {
    root: tempfile::TempDir,
    dir: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("case");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(root.path().join("victim"), b"untouched").unwrap();
        Sandbox { root, dir }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.dir.join(p)
    }
    /// Nothing written outside `case/`, the victim unchanged.
    fn assert_contained(&self) {
        let mut names: Vec<String> = std::fs::read_dir(self.root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["case", "victim"],
            "something was written outside case/"
        );
        assert_eq!(
            std::fs::read(self.root.path().join("victim")).unwrap(),
            b"untouched"
        );
    }
}

/// A real run of `spec` (quick settings) in `dir`; its archive.
fn real_run(dir: &Path, spec: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let o = quick_run(dir, &[spec.to_path_buf()], &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    only_run_dir(dir)
}

/// An edit of `results.json`, and one of the archive's files.
type Edit = fn(&mut Value);
type FileEdit = fn(&Path);

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// Edits `results.json` of `run`; with `reseal`, recomputes its manifest as a forger would.
fn tamper(run: &Path, reseal: bool, edit: impl FnOnce(&mut Value)) {
    let p = run.join("results.json");
    let mut v = read_json(&p);
    edit(&mut v);
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    if reseal {
        opledger::archive::seal(run, "run", Vec::new()).unwrap();
    }
}

fn code_and_text(cmd: &mut std::process::Command) -> (Option<i32>, String) {
    let o = cmd.output().unwrap();
    let t = text(&o);
    assert!(!t.contains("panicked"), "{t}");
    (o.status.code(), t)
}

/// Runs once per test binary: one real run that every case copies. A static is never dropped,
/// so its folder is removed when the test binary exits (it stayed in /tmp after every run).
fn template_run() -> &'static Path {
    static RUN: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    extern "C" fn remove_template() {
        if let Some((d, _)) = RUN.get() {
            let _ = std::fs::remove_dir_all(d.path());
        }
    }
    &RUN.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        // SAFETY: registers a function of no arguments that libc's `exit` calls; it only reads
        // the initialised static and removes a folder.
        unsafe { libc::atexit(remove_template) };
        let run = real_run(d.path(), &fixture("good/tiny-chain.yaml"));
        (d, run)
    })
    .1
}

/// A copy of the template run at `to`.
fn copy_run(to: &Path) -> PathBuf {
    copy_dir(template_run(), to);
    to.to_path_buf()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

#[test]
fn merge_refuses_a_device_key_that_would_leave_its_output_folder() {
    for (key, reseal) in [
        ("../../vdir", false),
        ("../../vdir", true),
        ("/tmp/opledger-abs-escape", true),
    ] {
        let sb = Sandbox::new();
        let s1 = copy_run(&sb.path("s1"));
        let s2 = copy_run(&sb.path("s2"));
        tamper(&s2, reseal, |r| r["device"]["key"] = json!(key));
        std::fs::create_dir_all(sb.path("mout")).unwrap();
        let (code, out) = code_and_text(
            bin()
                .arg("merge")
                .arg("--no-store")
                .arg(&s1)
                .arg(&s2)
                .arg("--out")
                .arg(sb.path("mout/dev2")),
        );
        assert_eq!(code, Some(2), "{key}: {out}");
        if reseal {
            assert!(
                out.contains("device.key") && out.contains("not a valid name"),
                "{out}"
            );
        } else {
            assert!(out.contains("results.json: edited after the run"), "{out}");
        }
        assert!(!sb.path("mout/dev2").exists(), "nothing merged");
        assert!(!Path::new("/tmp/opledger-abs-escape").exists());
        sb.assert_contained();
    }
}

#[test]
fn accept_refuses_device_keys_and_spec_names_that_would_leave_the_store() {
    let edits: [(&str, Edit); 3] = [
        ("device.key", |r| {
            r["device"]["key"] = json!("../acc-escape")
        }),
        ("specs[0].name", |r| {
            r["specs"][0]["name"] = json!("../../../name-escape")
        }),
        ("specs[0].name", |r| {
            r["specs"][0]["name"] = json!("/abs-name")
        }),
    ];
    for (field, edit) in edits {
        for reseal in [false, true] {
            let sb = Sandbox::new();
            let run = copy_run(&sb.path("run"));
            tamper(&run, reseal, edit);
            let store = sb.path("store/baselines");
            let (code, out) =
                code_and_text(bin().arg("accept").arg(&run).arg("--baselines").arg(&store));
            assert_eq!(code, Some(2), "{out}");
            if reseal {
                assert!(out.contains(field), "{field}: {out}");
            } else {
                assert!(out.contains("edited after the run"), "{out}");
            }
            assert!(!sb.path("store").exists(), "nothing recorded");
            sb.assert_contained();
        }
    }
}

/// A run whose time-saving claim fails: the claim asks for more than the ledger allows.
fn failing_run(dir: &Path) -> PathBuf {
    let spec = dir.join("spec/claims-too-much.yaml");
    std::fs::create_dir_all(spec.parent().unwrap()).unwrap();
    let text = std::fs::read_to_string(fixture("good/tiny-chain.yaml"))
        .unwrap()
        .replace("name: tiny-chain", "name: claims-too-much")
        .replace(
            "io_saving: {min: 0.5}",
            "io_saving: {min: 0.5}\n  time_saving: {min: 0.995}",
        );
    std::fs::write(&spec, text).unwrap();
    let run = real_run(&dir.join("work"), &spec);
    let r = read_json(&run.join("results.json"));
    assert_eq!(r["specs"][0]["status"], "fail", "the claim fails: {r}");
    run
}

#[test]
fn accept_refuses_a_run_whose_failed_verdict_was_edited_to_pass() {
    let sb = Sandbox::new();
    let run = failing_run(&sb.dir);
    let time_check = read_json(&run.join("results.json"))["specs"][0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["name"] == "time_saving")
        .unwrap();
    // Only the statuses edited, then the check's own status too: each is named.
    let cases: [(bool, &str); 2] = [(false, "specs[0].status"), (true, "checks[")];
    for (edit_check, field) in cases {
        let copy = sb.path(&format!("copy-{edit_check}"));
        copy_dir(&run, &copy);
        tamper(&copy, true, |r| {
            r["specs"][0]["status"] = json!("pass");
            r["verdict"]["status"] = json!("PASS");
            r["verdict"]["specs_passed"] = json!(1);
            r["verdict"]["specs_failed"] = json!(0);
            r["verdict"]["checks_failed"] = json!(0);
            if edit_check {
                r["specs"][0]["checks"][time_check]["status"] = json!("pass");
            }
        });
        let store = sb.path("baselines");
        let (code, out) = code_and_text(
            bin()
                .arg("accept")
                .arg(&copy)
                .arg("--baselines")
                .arg(&store),
        );
        assert_eq!(code, Some(2), "{out}");
        assert!(
            out.contains("damaged") && out.contains(field),
            "{field}: {out}"
        );
        assert!(!store.exists(), "no baseline recorded: {out}");
    }
    // The untampered failing run: nothing accepted, exit 0.
    let store = sb.path("baselines");
    let (code, out) = code_and_text(bin().arg("accept").arg(&run).arg("--baselines").arg(&store));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("accepted 0 baselines"), "{out}");
    sb.assert_contained();
}

#[test]
fn every_reader_refuses_an_archive_edited_after_the_run_and_verify_names_the_file() {
    let sb = Sandbox::new();
    let good = copy_run(&sb.path("good"));
    let (code, out) = code_and_text(bin().arg("verify").arg(&good));
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("intact") && out.contains("written by `opledger run`"),
        "{out}"
    );

    let edits: [(&str, FileEdit); 4] = [
        ("report.md: edited after the run", |r| {
            std::fs::write(r.join("report.md"), "# all green\n").unwrap()
        }),
        ("results.json: edited after the run", |r| {
            let p = r.join("results.json");
            let t = std::fs::read_to_string(&p)
                .unwrap()
                .replace("Tiny fused", "Tiny fuzed");
            std::fs::write(p, t).unwrap()
        }),
        ("environment.json: removed after the run", |r| {
            std::fs::remove_file(r.join("environment.json")).unwrap()
        }),
        ("specs/extra.yaml: added after the run", |r| {
            std::fs::write(r.join("specs/extra.yaml"), "name: extra\n").unwrap()
        }),
    ];
    for (says, edit) in edits {
        let run = copy_run(&sb.path("edited"));
        edit(&run);
        let (code, out) = code_and_text(bin().arg("verify").arg(&run));
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains(says) && out.contains("NOT INTACT"),
            "{says}: {out}"
        );
        let csv = fixture("ncu/raw.csv");
        let readers: Vec<Vec<std::ffi::OsString>> = vec![
            vec!["report".into(), run.clone().into()],
            vec!["compare".into(), good.clone().into(), run.clone().into()],
            vec!["compare".into(), run.clone().into(), good.clone().into()],
            vec![
                "merge".into(),
                "--no-store".into(),
                run.clone().into(),
                "--out".into(),
                sb.path("merged").into(),
            ],
            vec![
                "accept".into(),
                run.clone().into(),
                "--baselines".into(),
                sb.path("store").into(),
            ],
            vec!["counters".into(), run.clone().into(), csv.into()],
        ];
        for args in readers {
            let (code, out) = code_and_text(bin().args(&args));
            assert_eq!(code, Some(2), "{args:?}: {out}");
            assert!(out.contains(says), "{args:?}: expected {says:?} in {out}");
        }
        assert!(!sb.path("merged").exists() && !sb.path("store").exists());
        std::fs::remove_dir_all(&run).unwrap();
    }
    // A manifest removed: verify says the archive cannot be checked (exit 1); readers warn.
    let run = copy_run(&sb.path("unsealed"));
    std::fs::remove_file(run.join("manifest.json")).unwrap();
    let (code, out) = code_and_text(bin().arg("verify").arg(&run));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("no manifest.json"), "{out}");
    let (code, out) = code_and_text(bin().arg("report").arg(&run));
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("warning") && out.contains("no manifest.json"),
        "{out}"
    );
    sb.assert_contained();
}

#[test]
fn derived_archives_record_what_they_were_made_from() {
    let sb = Sandbox::new();
    let run = copy_run(&sb.path("run"));
    let out = sb.path("merged");
    let (code, text) = code_and_text(
        bin()
            .arg("merge")
            .arg("--no-store")
            .arg(&run)
            .arg("--out")
            .arg(&out),
    );
    assert!(matches!(code, Some(0 | 1)), "{text}");
    let m = read_json(&out.join("manifest.json"));
    assert_eq!(m["written_by"], "merge");
    let shard_manifest = std::fs::read(run.join("manifest.json")).unwrap();
    assert_eq!(
        m["read"][0]["sha256"].as_str().unwrap(),
        opledger::archive::sha256_hex(&shard_manifest),
        "the shard's manifest digest is recorded"
    );
    let (code, text) = code_and_text(bin().arg("verify").arg(&out));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("made from shard"), "{text}");
    // Re-rendering a report into its own archive re-seals it.
    let (code, text) = code_and_text(
        bin()
            .arg("report")
            .arg(&run)
            .arg("--out")
            .arg(run.join("report.md")),
    );
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = code_and_text(bin().arg("verify").arg(&run));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("written by `opledger report`"), "{text}");
    sb.assert_contained();
}

#[test]
fn merge_refuses_an_output_folder_that_is_contains_or_lies_in_an_input() {
    let sb = Sandbox::new();
    let s1 = copy_run(&sb.path("runs/s1"));
    let s2 = copy_run(&sb.path("runs/s2"));
    let before = std::fs::read(s2.join("results.json")).unwrap();
    for (out, says) in [
        (s2.clone(), "is the input"),
        (s2.join("sub"), "lies inside the input"),
        (sb.path("runs"), "contains the input"),
        (sb.path("runs/s2/../s2"), "is the input"),
    ] {
        let (code, text) = code_and_text(
            bin()
                .arg("merge")
                .arg("--no-store")
                .arg(&s1)
                .arg(&s2)
                .arg("--out")
                .arg(&out),
        );
        assert_eq!(code, Some(2), "{}: {text}", out.display());
        assert!(text.contains(says), "{says}: {text}");
    }
    assert_eq!(std::fs::read(s2.join("results.json")).unwrap(), before);
    assert!(!s2.join("sub").exists());
    let (code, text) = code_and_text(bin().arg("verify").arg(&s2));
    assert_eq!(code, Some(0), "{text}");
    sb.assert_contained();
}

/// Archives of earlier and of the current results format, as opledger wrote them (committed
/// under `tests/fixtures/archives/`): each must verify, re-render its report from the Markdown
/// template they were written with (kept beside them: the built-in one has since become a
/// screen per spec) with every figure the written report holds, and render with today's,
/// merge, be compared and be accepted, with every later version. The gate's words are today's
/// (its findings are data), so each re-render is also diffed against a golden of its own,
/// `tests/golden/archives/NAME.md` (`OPLEDGER_BLESS=1` to accept a change of words).
const ARCHIVE_FIXTURES: [&str; 2] = [
    "archives/written-before-gate-findings",
    "archives/gate-findings-as-data",
];

/// The figures of a text: each run of digits with its decimal point, separators and sign
/// (`1.234`, `18,448,586`, `+10.0`).
fn figures(text: &str) -> std::collections::BTreeSet<&str> {
    text.split(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | ',' | '+' | '-')))
        .map(|t| t.trim_matches(|c: char| !c.is_ascii_digit()))
        .filter(|t| t.chars().any(|c| c.is_ascii_digit()))
        .collect()
}

#[test]
fn archives_of_earlier_and_current_formats_load_and_render_with_every_figure() {
    let sb = Sandbox::new();
    for (i, name) in ARCHIVE_FIXTURES.iter().enumerate() {
        let run = sb.path(&format!("a{i}"));
        copy_dir(&fixture(name), &run);
        let (code, text) = code_and_text(bin().arg("verify").arg(&run));
        assert_eq!(code, Some(0), "{name}: {text}");
        let today = bin().arg("report").arg(&run).output().unwrap();
        assert_eq!(
            today.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&today.stderr)
        );
        assert!(String::from_utf8_lossy(&today.stdout).contains("## Delivery checklist"));
        let o = bin()
            .arg("report")
            .arg(&run)
            .arg("--template")
            .arg(fixture("archives/report-as-written.md.j2"))
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let written = std::fs::read_to_string(run.join("report.md")).unwrap();
        let rendered = String::from_utf8(o.stdout).unwrap();
        // Nothing lost: every figure of the report as written is in the re-render.
        let rendered_figures = figures(&rendered);
        let lost: Vec<&str> = figures(&written)
            .into_iter()
            .filter(|f| !rendered_figures.contains(f))
            .collect();
        assert!(
            lost.is_empty(),
            "{name}: figures lost in the re-render: {lost:?}"
        );
        common::assert_golden(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/golden/archives")
                .join(format!(
                    "{}.md",
                    Path::new(name).file_name().unwrap().to_string_lossy()
                )),
            &rendered,
        );
        let store = sb.path(&format!("store{i}"));
        let (code, text) =
            code_and_text(bin().arg("accept").arg(&run).arg("--baselines").arg(&store));
        assert_eq!(code, Some(0), "{name}: {text}");
        let out = sb.path(&format!("merged{i}"));
        let (code, text) = code_and_text(
            bin()
                .arg("merge")
                .arg("--no-store")
                .arg(&run)
                .arg("--out")
                .arg(&out),
        );
        assert!(matches!(code, Some(0 | 1)), "{name}: {text}");
        for f in [
            "report.md",
            "report.html",
            "junit.xml",
            "summary.md",
            "results.json",
        ] {
            assert!(out.join(f).is_file(), "{name}: merged {f}");
        }
    }
    // The earlier archive against the current one: the gate decides, nothing is refused.
    let (code, text) = code_and_text(bin().arg("compare").arg(sb.path("a0")).arg(sb.path("a1")));
    assert!(matches!(code, Some(0 | 1)), "{text}");
    assert!(text.contains("| tiny-chain |"), "{text}");
    sb.assert_contained();
}
