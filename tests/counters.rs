//! `opledger counters`: Nsight Compute exports (both layouts) reconciled with a real run's
//! ledgers; one fixture per broken rule with its message.

use crate::common;
use common::{bin, fixture, only_run_dir, quick_run, text};
use std::path::Path;

/// A real run of the tiny chain (1 spec), in `dir`.
fn tiny_run(dir: &Path) -> std::path::PathBuf {
    let o = quick_run(dir, &[fixture("good/tiny-chain.yaml")], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    only_run_dir(dir)
}

fn counters(run: &Path, csv: &str) -> std::process::Output {
    bin()
        .args(["counters"])
        .arg(run)
        .arg(fixture(csv))
        .output()
        .unwrap()
}

fn results(run: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap()
}

#[test]
fn a_raw_export_within_the_bounds_passes_and_lands_in_results_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let o = counters(&run, "ncu/raw.csv");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("ok      tiny-chain before: DRAM read 2.491 MB vs ledger 2.491 MB (1.00×)"),
        "{out}"
    );
    assert!(out.contains("7 launches"), "{out}");
    let r = results(&run);
    let c = &r["specs"][0]["counters"];
    assert_eq!(c["layout"], "raw");
    assert_eq!(c["source"], "raw.csv");
    // Seven launches of the unfused chain after the first marker; the probe before it is not counted.
    assert_eq!(c["before"]["launches"], 7);
    assert_eq!(c["before"]["kernels"][0][0], "ew_chain");
    assert_eq!(c["before"]["ledger_read_bytes"], 2_490_896);
    let read = c["before"]["dram_read_bytes"].as_f64().unwrap();
    assert!(
        (read - 2_490_800.0).abs() < 1.0,
        "Kbyte values with separators: {read}"
    );
    assert!((c["before"]["gpu_time_secs"].as_f64().unwrap() - 24.576e-6).abs() < 1e-12);
    // n/a in one launch: the L2 sum is absent, never zero.
    assert!(c["after"]["l2_bytes"].is_null());
    assert!(c["after"]["finding"].is_null());
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(
        report.contains("| Nsight Compute: DRAM read (ledger) |"),
        "{report}"
    );
    assert!(report.contains(", 7 launches: ✅"), "{report}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("<h3>Ledger vs counters</h3>"), "{html}");
}

/// An export as Nsight Compute of 2025-2026 writes it: device-attribute and launch columns with
/// text values (`NVIDIA H200`, `CachePreferNone`, `No-CC`, `0x3`) and units of their own
/// (`block`, `SM`) beside the metrics, and times in `us`: read as the same launches.
#[test]
fn an_export_with_a_real_exports_columns_and_units_reads_as_the_same_launches() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let o = counters(&run, "ncu/raw-real-columns.csv");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("ok      tiny-chain before: DRAM read 2.491 MB vs ledger 2.491 MB (1.00×)"),
        "{out}"
    );
    let c = &results(&run)["specs"][0]["counters"];
    assert_eq!(c["before"]["launches"], 7);
    assert!((c["before"]["gpu_time_secs"].as_f64().unwrap() - 24.576e-6).abs() < 1e-12);
    // The details layout with such rows between the metrics' (and `us`): the same finding as
    // the documented form gives.
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let o = counters(&run, "ncu/details-real-rows.csv");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("FINDING tiny-chain after: DRAM read 400.000 kB vs ledger 833.048 kB (0.48×)"),
        "{out}"
    );
}

#[test]
fn a_details_export_with_a_low_read_is_a_finding_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let o = counters(&run, "ncu/details.csv");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("FINDING tiny-chain after: DRAM read 400.000 kB vs ledger 833.048 kB (0.48×)"),
        "{out}"
    );
    assert!(out.contains("below 0.95×"), "{out}");
    let r = results(&run);
    assert_eq!(r["specs"][0]["counters"]["layout"], "details");
    assert!(
        (r["specs"][0]["counters"]["before"]["dram_read_bytes"]
            .as_f64()
            .unwrap()
            - 2_490_800.0)
            .abs()
            < 1.0
    );
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(report.contains("❌ DRAM read 0.48×"), "{report}");
    // The archive still reads as a run: `opledger report` renders it with the table.
    let o = bin().arg("report").arg(&run).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("| Nsight Compute: DRAM read (ledger) |"));
}

#[test]
fn every_broken_export_is_refused_with_its_line_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let before = std::fs::read(run.join("results.json")).unwrap();
    for (csv, message) in [
        (
            "ncu/bad-unit.csv",
            "bad-unit.csv:4: column dram__bytes_write.sum: unknown unit `furlong`",
        ),
        (
            "ncu/bad-number.csv",
            "bad-number.csv:9: column dram__bytes_read.sum: `55x.60` is not a number",
        ),
        (
            "ncu/bad-no-markers.csv",
            "bad-no-markers.csv: no `opledger_marker` launches: profile with `opledger run --ncu`",
        ),
        (
            "ncu/bad-no-kernel-column.csv",
            "bad-no-kernel-column.csv:3: no `Kernel Name` column in the header",
        ),
        (
            "ncu/bad-other-run.csv",
            "bad-other-run.csv:14: a marker for case 3, but the run has 1 spec",
        ),
        (
            "ncu/bad-negative.csv",
            "bad-negative.csv:7: column dram__bytes_read.sum: `-280.40` is negative",
        ),
        (
            "ncu/bad-open-quote.csv",
            "bad-open-quote.csv:8: an unbalanced quote",
        ),
        (
            "ncu/bad-no-dram-read.csv",
            "bad-no-dram-read.csv:3: no `dram__bytes_read.sum` metric",
        ),
        (
            "ncu/bad-huge.csv",
            "bad-huge.csv:7: column dram__bytes_read.sum: `1e308` Kbyte is past the largest number",
        ),
        ("ncu/absent.csv", "absent.csv"),
    ] {
        let o = counters(&run, csv);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{csv}: {out}");
        assert!(out.contains(message), "{csv}: {out}");
    }
    assert_eq!(
        std::fs::read(run.join("results.json")).unwrap(),
        before,
        "a refused export changes nothing"
    );
}

#[test]
fn run_ncu_needs_ncu_on_path_and_a_gpu_run() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    // No ncu on PATH: refused before anything runs, as an unavailable backend.
    let empty = dir.path().join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let o = common::run_cmd(dir.path(), std::slice::from_ref(&spec), &["--ncu"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("`ncu` (Nsight Compute) is not on PATH"),
        "{}",
        text(&o)
    );
    assert!(!dir.path().join("runs").exists(), "nothing was measured");
    // An ncu there, but the run is on the CPU: refused after the run, which stays archived.
    let ncu = empty.join("ncu");
    std::fs::write(&ncu, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ncu, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = common::run_cmd(dir.path(), std::slice::from_ref(&spec), &["--ncu"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("this run used the cpu backend"),
        "{}",
        text(&o)
    );
    assert!(only_run_dir(dir.path()).join("results.json").exists());
}

/// A raw export of `launches` launches per variant of the tiny chain's marked pass.
fn large_export(path: &Path, launches: usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(f, "==PROF== Connected to process 1 (opledger)").unwrap();
    writeln!(f, "\"ID\",\"Kernel Name\",\"Grid Size\",\"dram__bytes_read.sum\",\"dram__bytes_write.sum\",\"lts__t_bytes.sum\",\"gpu__time_duration.sum\"").unwrap();
    writeln!(f, "\"\",\"\",\"\",\"byte\",\"byte\",\"byte\",\"nsecond\"").unwrap();
    let mut id = 0;
    for (marker, read) in [(1, 2_490_896.0), (2, 833_048.0)] {
        writeln!(
            f,
            "\"{id}\",\"opledger_marker\",\"({marker}, 1, 1)\",\"0\",\"0\",\"0\",\"1\""
        )
        .unwrap();
        id += 1;
        let per = read / launches as f64;
        for k in 0..launches {
            writeln!(f, "\"{id}\",\"ew_chain_{}\",\"(270, 1, 1)\",\"{per:.6}\",\"1,000\",\"2,000\",\"3,000\"", k % 3).unwrap();
            id += 1;
        }
    }
}

#[test]
fn a_large_export_is_streamed_within_a_small_address_space() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let csv = dir.path().join("large.csv");
    // 400 000 launch rows, ~28 MB: read whole, at ~17x its size, it would not fit the limit.
    large_export(&csv, 200_000);
    let size = std::fs::metadata(&csv).unwrap().len();
    assert!(size > 25_000_000, "{size}");
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 400000 && exec \"$0\" counters \"$1\" \"$2\"")
        .arg(env!("CARGO_BIN_EXE_opledger"))
        .arg(&run)
        .arg(&csv)
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let c = &results(&run)["specs"][0]["counters"];
    assert_eq!(c["before"]["launches"], 200_000);
    assert_eq!(c["after"]["launches"], 200_000);
    assert_eq!(c["before"]["kernels"].as_array().unwrap().len(), 3);
    let read = c["before"]["dram_read_bytes"].as_f64().unwrap();
    assert!((read / 2_490_896.0 - 1.0).abs() < 1e-6, "{read}");
}

/// An archive without a manifest cannot be checked, so `counters` does not seal it as if it had
/// been: refused (exit 2) before the export is read, and `verify` still calls it unverified.
#[test]
fn an_archive_without_a_manifest_is_not_sealed_by_an_import() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    std::fs::remove_file(run.join("manifest.json")).unwrap();
    let before = std::fs::read(run.join("results.json")).unwrap();
    let o = counters(&run, "ncu/raw.csv");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("has no manifest"), "{out}");
    assert!(!run.join("manifest.json").exists());
    assert_eq!(std::fs::read(run.join("results.json")).unwrap(), before);
    let o = bin().arg("verify").arg(&run).output().unwrap();
    assert!(text(&o).contains("manifest"), "{}", text(&o));
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
}
