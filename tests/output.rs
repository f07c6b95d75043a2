//! What a person reads: the terminal's account of a run, `check`, `compare`, `report --out`,
//! `--help`, and errors that speak the spec's language.

use crate::common;
use common::{bin, fixture, only_run_dir, quick_run, text};

#[test]
fn a_run_prints_one_line_per_spec_and_a_summary_whose_counts_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let o = quick_run(
        dir.path(),
        &[
            fixture("good/impossible-claim.yaml"),
            fixture("good/tiny-chain.yaml"),
        ],
        &[],
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let spec_lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("PASS ") || l.starts_with("FAIL "))
        .collect();
    assert_eq!(spec_lines.len(), 2, "{out}");
    for l in &spec_lines {
        assert!(l.contains(" → ") && l.contains("gate: no baseline"), "{l}");
    }
    // The failed check under its spec, with the digits that decided it.
    assert!(
        out.contains("    ❌ io_saving: ledger saving 49.23% vs claim >= 90.00%"),
        "{out}"
    );
    assert!(
        out.contains("FAIL: 2 specs: 1 pass, 1 fail, 0 inconclusive"),
        "{out}"
    );
    // Off a terminal, progress is plain lines on stderr, one per spec.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("[1/2] impossible-claim") && err.contains("[2/2] tiny-chain"),
        "{err}"
    );
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err}");
}

#[test]
fn an_accepting_run_says_it_recorded_the_first_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let o = quick_run(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--accept"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("gate: accepted (first baseline)"),
        "{}",
        text(&o)
    );
    let run = only_run_dir(dir.path());
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(report.contains("first baseline for device"), "{report}");
    assert!(!report.contains("yet (written by this run)"), "{report}");
}

#[test]
fn the_job_summary_points_at_the_report_where_it_lies() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.md");
    let o = quick_run(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--summary-to", summary.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = std::fs::read_to_string(&summary).unwrap();
    let line = s.lines().find(|l| l.starts_with("Full report:")).unwrap();
    let path = line
        .trim_start_matches("Full report: `")
        .trim_end_matches('`');
    assert!(
        dir.path().join(path).is_file(),
        "{path} is not the report, from where the run was started"
    );
}

/// `--summary-to ""` (the example workflow's matrix shards) writes no summary, not even to the
/// job's `GITHUB_STEP_SUMMARY`, and is not refused.
#[test]
fn an_empty_summary_path_writes_no_summary() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("step-summary.md");
    let o = common::run_cmd(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--summary-to", "", "--measure", "time", "--no-store"],
    )
    .env("GITHUB_STEP_SUMMARY", &summary)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!summary.exists(), "a summary was written: {}", text(&o));
}

/// A FIFO that nothing reads as the summary path ends the run with an error naming it, after
/// the archive is written, instead of waiting forever for a reader.
#[test]
fn a_summary_fifo_without_a_reader_is_an_error_not_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("summary.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut child = common::run_cmd(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &[
            "--summary-to",
            fifo.to_str().unwrap(),
            "--measure",
            "time",
            "--no-store",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // A run that waits on the FIFO is stopped, and the test fails; the bound is generous (a run
    // of this size ends in seconds), and nothing is asserted about how long it took.
    let mut waited = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        waited += 1;
        if waited > 1200 {
            child.kill().unwrap();
            panic!("the run waits for a reader of the summary FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let o = child.wait_with_output().unwrap();
    assert_ne!(status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("a FIFO that no process reads"),
        "{}",
        text(&o)
    );
    assert!(only_run_dir(dir.path()).join("report.md").is_file());
}

#[test]
fn check_reports_every_bad_file_and_the_claims_the_ledger_refutes() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["bad/zero-size.yaml", "bad/unknown-key.yaml"] {
        std::fs::copy(
            fixture(f),
            dir.path()
                .join(std::path::Path::new(f).file_name().unwrap()),
        )
        .unwrap();
    }
    let o = bin().arg("check").arg(dir.path()).output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("zero-size.yaml:6:9") && out.contains("unknown-key.yaml:7:3"),
        "every bad file: {out}"
    );
    // Valid YAML whose io_saving claim the ledger refutes: exit 1, as `run` would.
    let o = bin()
        .arg("check")
        .arg(fixture("good/impossible-claim.yaml"))
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("FAIL impossible-claim"), "{out}");
    assert!(out.contains("vs claim >= 90.00%"), "{out}");
}

#[test]
fn errors_name_what_the_author_writes_not_rust_types() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("s.yaml");
    let good = std::fs::read_to_string(fixture("good/tiny-chain.yaml")).unwrap();
    for (from, to, says) in [
        (
            "io_saving: {min: 0.5}",
            "io_saving: 5",
            "expected a mapping with `min`, `max`",
        ),
        ("bound: bandwidth", "bound: [1]", "expected a plain name"),
        (
            "io_saving: {min: 0.5}",
            "io_saving: {min_of_predicted: 0.5}",
            "apply to time_saving only",
        ),
    ] {
        std::fs::write(&spec, good.replace(from, to)).unwrap();
        let o = bin().arg("check").arg(&spec).output().unwrap();
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{out}");
        assert!(out.contains(says), "{to}: {out}");
        assert!(
            !out.contains("struct ") && !out.contains("SavingRange"),
            "{out}"
        );
    }
}

#[test]
fn compare_labels_its_ratio_and_refuses_runs_with_nothing_in_common() {
    let dir = tempfile::tempdir().unwrap();
    let o = quick_run(dir.path(), &[fixture("good/tiny-chain.yaml")], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = only_run_dir(dir.path());
    let o = bin().arg("compare").arg(&run).arg(&run).output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("| compared |"), "{out}");
    assert!(
        out.contains("| after/before |") || out.contains("| after time |"),
        "{out}"
    );
    // Another archive whose specs all have other names.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("run-fixed/results.json")).unwrap()).unwrap();
    for s in r["specs"].as_array_mut().unwrap() {
        let n = format!("x-{}", s["name"].as_str().unwrap());
        s["name"] = serde_json::json!(n);
    }
    std::fs::write(other.join("results.json"), serde_json::to_vec(&r).unwrap()).unwrap();
    let o = bin().arg("compare").arg(&run).arg(&other).output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("no spec in common"), "{out}");
}

#[test]
fn report_out_says_where_its_charts_go_and_sweeps_tick_every_point() {
    let dir = tempfile::tempdir().unwrap();
    let out_md = dir.path().join("r/report.md");
    std::fs::create_dir(dir.path().join("r")).unwrap();
    let o = bin()
        .arg("report")
        .arg(fixture("run-fixed"))
        .arg("--out")
        .arg(&out_md)
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("roofline.svg") && out.contains("sweep-tiny-sweep.svg"),
        "{out}"
    );
    let svg = std::fs::read_to_string(dir.path().join("r/sweep-tiny-sweep.svg")).unwrap();
    // The sweep's points are rows = 16 and 64: both are tick labels.
    for x in ["16", "64"] {
        assert!(svg.contains(&format!(">{x}</text>")), "tick {x}");
    }
}

#[test]
fn help_lists_exit_codes_and_describes_every_argument() {
    let o = bin().arg("--help").output().unwrap();
    let out = text(&o);
    assert!(
        out.contains("Exit codes:") && out.contains("3  the requested backend"),
        "{out}"
    );
    let o = bin().args(["ledger", "--help"]).output().unwrap();
    let out = text(&o);
    assert!(
        out.contains("Spec files or directories of *.yaml specs"),
        "{out}"
    );
}

#[test]
fn a_closed_pipe_ends_output_quietly() {
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} ledger {} | head -n 1",
            env!("CARGO_BIN_EXE_opledger"),
            fixture("../../specs").display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
}
