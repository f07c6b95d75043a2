//! The ledger checked by hardware counters: Nsight Compute CSV exports read and reconciled with
//! a run's ledgers (`opledger counters RUN_DIR NCU_CSV`).
//!
//! Two layouts of `ncu --csv` are read, told apart by their header: `--page raw` (one row per
//! kernel launch, one column per metric, a row of units under the header) and `--page details`
//! (one row per metric of a launch: `Metric Name`, `Metric Unit`, `Metric Value`). Columns are
//! found by their header names, never by position. Values are normalized to bytes and seconds
//! (`byte`/`Kbyte`/`Mbyte`/`Gbyte`/`Tbyte`, decimal prefixes as ncu prints them;
//! `nsecond`/`usecond`/`msecond`/`second`), thousands separators dropped; `n/a` is a missing
//! value, never zero; the profiler's own `==PROF==` lines are skipped.
//!
//! Launches are matched to (spec, variant) by markers: the profiling pass launches an empty
//! kernel named `opledger_marker` before each variant's one execution, with grid x = 2·case +
//! (0 before, 1 after) + 1 (a grid is never empty), `case` counting the run's specs in order. Every launch after a marker and
//! before the next belongs to that marker's variant; launches before the first marker (ceiling
//! probes, warm-up) are not counted.
//!
//! The judgement is on the read side only: measured DRAM read bytes against the ledger's read
//! bytes, a finding below 0.95× (the ledger counts bytes the GPU did not read: a cache served
//! them, or the model is wrong) or above 1.5× (the GPU read what the ledger does not count).
//! Writes and L2 bytes are reported: dirty lines are written back after the profiled range ends,
//! so the write counter reads low.
//!
//! One file a step: [`parse`] reads the export, [`segment`] matches launches to variants,
//! [`reconcile`] judges them against the ledger, [`profile`] launches the profiler; this file
//! imports an export into a run.

mod parse;
mod profile;
mod reconcile;
mod segment;

pub use parse::*;
pub use profile::*;
pub use reconcile::*;
pub use segment::*;

use crate::error::{ExitCode, Result};
use crate::report::format::decimal_bytes;
use crate::results::VariantCounters;
use std::path::Path;

/// The metrics opledger asks Nsight Compute for.
pub const METRICS: [&str; 4] = [
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "gpu__time_duration.sum",
];

/// The name of the delimiting kernel the profiling pass launches.
pub const MARKER_KERNEL: &str = "opledger_marker";

/// `opledger counters RUN_DIR NCU_CSV`: reads the export, writes the counters into the run's
/// results.json and re-renders its report; prints one line per variant. Returns the number of
/// findings.
pub fn import(run_dir: &Path, csv_path: &Path) -> Result<usize> {
    let loaded = crate::archive::load_allowing(run_dir, Some(csv_path))?;
    let mut run = loaded.run;
    // Streamed: one launch in memory at a time, whatever the export's size.
    let mut segmenter = Segmenter::new(run.specs.len(), csv_path);
    let layout = read_stream(csv_path, &mut |l, line| segmenter.push(&l, line))?;
    let segs = segmenter.finish()?;
    let findings = attach_tallies(&mut run, layout, &segs, csv_path);
    // The archive's every output written again, with the template the run recorded; the new
    // manifest rests on the archive as it was and on the export added to it.
    let export = crate::archive::file_record("ncu export", csv_path)?;
    crate::archive::rerender(
        run_dir,
        &loaded.verification,
        &mut run,
        None,
        "counters",
        vec![export],
    )?;
    for s in &run.specs {
        if let Some(c) = &s.counters {
            for (side, v) in [("before", &c.before), ("after", &c.after)] {
                println!("{}", line(&s.name, side, v));
            }
        }
    }
    Ok(findings)
}

pub(super) fn line(spec: &str, side: &str, v: &VariantCounters) -> String {
    let gb = |b: Option<f64>| b.map_or("n/a".to_string(), decimal_bytes);
    format!(
        "{} {spec} {side}: DRAM read {} vs ledger {}{} · write {} · L2 {} · {} launches{}",
        if v.finding.is_some() {
            "FINDING"
        } else {
            "ok     "
        },
        gb(v.dram_read_bytes),
        decimal_bytes(v.ledger_read_bytes as f64),
        v.read_ratio
            .map_or(String::new(), |r| format!(" ({r:.2}×)")),
        gb(v.dram_write_bytes),
        gb(v.l2_bytes),
        v.launches,
        v.finding
            .as_ref()
            .map_or(String::new(), |f| format!(" — {f}")),
    )
}

/// `opledger counters RUN_DIR NCU_CSV`: the import, exit 1 when the counters disagree with the
/// ledger.
pub fn import_command(run_dir: &Path, ncu_csv: &Path) -> Result<ExitCode> {
    let findings = import(run_dir, ncu_csv)?;
    if findings > 0 {
        eprintln!(
            "opledger: {findings} finding(s): the counters disagree with the ledger (report: {})",
            run_dir.join(crate::report::output::REPORT).display()
        );
        Ok(ExitCode::GateFailed)
    } else {
        Ok(ExitCode::Pass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const RAW: &str = r#"==PROF== Connected to process 4242 (/usr/bin/opledger)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","lts__t_bytes.sum","gpu__time_duration.sum"
"","","","","","","","","","","","Mbyte","Kbyte","byte","usecond"
"0","4242","opledger","h","probe_copy","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","1,000","5","7","1.5"
"1","4242","opledger","h","opledger_marker","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","0","0","0","0.001"
"2","4242","opledger","h","ew_chain","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","2.5","1,024","n/a","10"
"3","4242","opledger","h","opledger_marker","1","7","(1, 1, 1)","(2, 1, 1)","0","9.0","0","0","0","0.001"
"4","4242","opledger","h","ew_chain","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","1.2","512","3","4"
==PROF== Disconnected from process 4242
"#;

    #[test]
    fn raw_layout_units_separators_and_missing_values() {
        let e = parse(RAW, Path::new("x.csv")).unwrap();
        assert_eq!(e.layout, Layout::Raw);
        assert_eq!(e.launches.len(), 5);
        let probe = &e.launches[0];
        assert_eq!(probe.metrics["dram__bytes_read.sum"], Some(1e9)); // 1,000 Mbyte
        assert_eq!(probe.metrics["dram__bytes_write.sum"], Some(5e3));
        assert_eq!(probe.metrics["gpu__time_duration.sum"], Some(1.5e-6));
        assert_eq!(e.launches[1].grid_x, Some(1));
        assert_eq!(
            e.launches[2].metrics["lts__t_bytes.sum"], None,
            "n/a is missing, not zero"
        );
        assert_eq!(
            e.launches[2].metrics["dram__bytes_write.sum"],
            Some(1.024e6)
        );
    }

    #[test]
    fn details_layout_groups_rows_by_launch() {
        let text = r#""ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","opledger","h","opledger_marker","1","7","(1, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","0"
"1","1","opledger","h","gemm_tiled","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Gbyte","1.25"
"1","1","opledger","h","gemm_tiled","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","2"
"#;
        let e = parse(text, Path::new("d.csv")).unwrap();
        assert_eq!(e.layout, Layout::Details);
        assert_eq!(e.launches.len(), 2);
        assert_eq!(e.launches[0].grid_x, Some(4));
        assert_eq!(e.launches[1].metrics["dram__bytes_read.sum"], Some(1.25e9));
        assert_eq!(e.launches[1].metrics["gpu__time_duration.sum"], Some(2e-3));
    }

    #[test]
    fn bad_values_and_units_are_errors_with_the_line() {
        let bad = RAW.replace("\"2.5\"", "\"2.5x\"");
        let e = parse(&bad, Path::new("x.csv")).unwrap_err().to_string();
        assert!(
            e.starts_with("x.csv:6: column dram__bytes_read.sum: `2.5x` is not a number"),
            "{e}"
        );
        let bad = RAW.replace("\"Kbyte\"", "\"furlong\"");
        let e = parse(&bad, Path::new("x.csv")).unwrap_err().to_string();
        assert!(e.contains("unknown unit `furlong`"), "{e}");
        let e = parse("==PROF== nothing\n", Path::new("e.csv"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no CSV rows"), "{e}");
        let e = parse("\"ID\",\"Name\"\n\"1\",\"x\"\n", Path::new("e.csv"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no `Kernel Name` column"), "{e}");
    }

    #[test]
    fn negative_values_open_quotes_and_a_missing_dram_read_are_refused_at_their_line() {
        let bad = RAW.replace("\"2.5\"", "\"-2.5\"");
        let e = parse(&bad, Path::new("x.csv")).unwrap_err().to_string();
        assert!(
            e.starts_with("x.csv:6: column dram__bytes_read.sum: `-2.5` is negative"),
            "{e}"
        );
        let bad = RAW.replace("\"ew_chain\",\"1\"", "\"ew_chain,\"1\"");
        let e = parse(&bad, Path::new("x.csv")).unwrap_err().to_string();
        assert!(e.starts_with("x.csv:6: an unbalanced quote"), "{e}");
        let bad = RAW.replace("dram__bytes_read.sum", "dram__bytes_other.sum");
        let e = parse(&bad, Path::new("x.csv")).unwrap_err().to_string();
        assert!(
            e.starts_with("x.csv:2: no `dram__bytes_read.sum` metric"),
            "{e}"
        );
        let long = format!("{}\n", "x".repeat(MAX_LINE_BYTES + 10));
        let e = parse(&long, Path::new("x.csv")).unwrap_err().to_string();
        assert!(e.starts_with("x.csv:1: longer than"), "{e}");
    }

    #[test]
    fn a_variant_with_many_kernel_names_keeps_a_bounded_list() {
        let launches: Vec<Launch> = (0..200)
            .map(|i| Launch {
                kernel: format!("k{i}"),
                grid_x: None,
                metrics: BTreeMap::new(),
            })
            .collect();
        let t = Tally::of(&launches.iter().collect::<Vec<_>>());
        assert_eq!(t.kernels.len(), MAX_KERNEL_NAMES);
        assert_eq!(t.kernels.iter().map(|(_, n)| n).sum::<u64>(), 200);
        assert_eq!(t.kernels.last().unwrap().0, OTHER_KERNELS);
    }

    #[test]
    fn segments_follow_the_markers_and_sums_need_every_launch() {
        let e = parse(RAW, Path::new("x.csv")).unwrap();
        let segs = segments(&e, 1, Path::new("x.csv")).unwrap();
        assert_eq!(segs[0][0].launches, 1);
        assert_eq!(segs[0][1].launches, 1);
        assert_eq!(segs[0][0].sum("dram__bytes_read.sum"), Some(2.5e6));
        assert_eq!(segs[0][0].sum("lts__t_bytes.sum"), None);
        let e2 = parse(RAW, Path::new("x.csv")).unwrap();
        let err = segments(&e2, 0, Path::new("x.csv"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("the run has 0 specs"), "{err}");
    }

    #[test]
    fn the_read_side_is_judged_between_the_bounds() {
        use crate::kinds::Variant;
        use crate::ledger::{Movement, VariantLedger};
        let ledger = VariantLedger::new(
            Variant::Fused,
            vec![
                Movement {
                    tensor: "x".into(),
                    bytes: 1_000_000,
                    reads: 1,
                    writes: 0,
                },
                Movement {
                    tensor: "y".into(),
                    bytes: 1_000_000,
                    reads: 0,
                    writes: 1,
                },
            ],
            0,
            1,
        );
        let launch = |read: f64| Launch {
            kernel: "k".into(),
            grid_x: None,
            metrics: [("dram__bytes_read.sum".to_string(), Some(read))]
                .into_iter()
                .collect(),
        };
        for (read, finding) in [
            (1.0e6, false),
            (0.96e6, false),
            (0.9e6, true),
            (1.49e6, false),
            (1.6e6, true),
        ] {
            let l = launch(read);
            let v = reconcile(&Tally::of(&[&l]), &ledger);
            assert_eq!(v.ledger_read_bytes, 1_000_000);
            assert_eq!(v.ledger_write_bytes, 1_000_000);
            assert_eq!(v.finding.is_some(), finding, "{read}: {:?}", v.finding);
        }
        let v = reconcile(&Tally::default(), &ledger);
        assert!(v.finding.unwrap().contains("no kernel launches"));
    }
}
