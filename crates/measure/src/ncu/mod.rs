//! Nsight Compute's measurements: the `ncu` command line opledger profiles with, and its CSV
//! export read launch by launch and split into each (spec, variant)'s launches.
//!
//! Two layouts of `ncu --csv` are read, told apart by their header: `--page raw` (one row per
//! kernel launch, one column per metric, a row of units under the header) and `--page details`
//! (one row per metric of a launch: `Metric Name`, `Metric Unit`, `Metric Value`). Columns are
//! found by their header names, never by position. Values are normalized to bytes and seconds
//! (`byte`/`Kbyte`/`Mbyte`/`Gbyte`/`Tbyte`, decimal prefixes as ncu prints them;
//! `nsecond`/`usecond`/`msecond`/`second` and `ns`/`us`/`ms`/`s`), thousands separators
//! dropped; `n/a` is a missing value, never zero; the profiler's own `==PROF==` lines are
//! skipped. Only the metrics opledger reads ([`METRICS`]) are parsed: the hundreds of other
//! columns or rows of a real export (device attributes, launch settings, with text values) are
//! left alone.
//!
//! Launches are matched to (spec, variant) by markers: the profiled pass launches an empty
//! kernel named `opledger_marker` before each variant's one execution, with grid x = 2·case +
//! (0 before, 1 after) + 1 (a grid is never empty), `case` counting the pass's specs in order.
//! Every launch after a marker and before the next belongs to that marker's variant; launches
//! before the first marker (ceiling probes, warm-up) are not counted.
//!
//! One file a step: [`parse`] reads the export, [`segment`] matches launches to variants; what
//! the launches add up to is judged by `commands::counters` (an export imported into a run) and
//! by the counts of `measure::counts::nsight` (a GPU's counts mode).

mod parse;
mod segment;

pub use parse::*;
pub use segment::*;

use std::path::{Path, PathBuf};

/// The metrics opledger asks Nsight Compute for. The first four are read by `opledger
/// counters`; a GPU's counts mode reads DRAM bytes, instructions and cycles.
pub const METRICS: [&str; 6] = [
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "gpu__time_duration.sum",
    "smsp__inst_executed.sum",
    "gpc__cycles_elapsed.max",
];

/// DRAM bytes read ([`METRICS`]' first).
pub const DRAM_READ: &str = METRICS[0];
/// DRAM bytes written.
pub const DRAM_WRITE: &str = METRICS[1];
/// Warp instructions executed.
pub const INSTRUCTIONS: &str = METRICS[4];
/// Cycles of the launch, from start to end (the slowest GPC's).
pub const CYCLES: &str = METRICS[5];

/// The name of the delimiting kernel the profiled pass launches.
pub const MARKER_KERNEL: &str = "opledger_marker";
/// The kernel that holds the stream before each timed sample (and warms the GPU up): opledger's
/// own, never a variant's work, so a profile leaves it out of every tally.
pub const HOLD_KERNEL: &str = "opledger_hold";

/// The `ncu` command line that profiles a marked pass into `csv`: every metric opledger reads,
/// the caches flushed before each launch (`--cache-control all`: every launch starts cold, as
/// the ledger assumes), the clocks left alone (`--clock-control none`: never change the clocks
/// of a shared GPU), base units.
pub fn ncu_args(csv: &Path) -> Vec<String> {
    vec![
        "--csv".into(),
        "--page".into(),
        "raw".into(),
        "--metrics".into(),
        METRICS.join(","),
        "--cache-control".into(),
        "all".into(),
        "--clock-control".into(),
        "none".into(),
        "--print-units".into(),
        "base".into(),
        "--log-file".into(),
        csv.display().to_string(),
    ]
}

/// `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    crate::files::program_on_path(name)
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
        // The hold before each timed sample is opledger's, in no variant's tally.
        let mut held = parse(RAW, Path::new("x.csv")).unwrap();
        let hold = |name: &str| Launch {
            kernel: name.into(),
            grid_x: Some(1),
            metrics: BTreeMap::new(),
        };
        let at = held.launches.len();
        held.launches.insert(at - 1, hold("opledger_hold"));
        held.launches.insert(1, hold("opledger_hold(long long)"));
        let segs = segments(&held, 1, Path::new("x.csv")).unwrap();
        assert_eq!((segs[0][0].launches, segs[0][1].launches), (1, 1));
        assert_eq!(segs[0][0].sum("dram__bytes_read.sum"), Some(2.5e6));
        let e2 = parse(RAW, Path::new("x.csv")).unwrap();
        let err = segments(&e2, 0, Path::new("x.csv"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("the run has 0 specs"), "{err}");
    }
}
