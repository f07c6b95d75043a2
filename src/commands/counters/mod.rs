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
//! them, or the model is wrong) or above 1.5× (the GPU read what the ledger does not count);
//! a tiled ledger (flash attention with the L2 as its reuse cache) is held within ±15% both
//! ways, as counts hold it.
//! Writes and L2 bytes are reported: dirty lines are written back after the profiled range ends,
//! so the write counter reads low.
//!
//! One file a step: `measure::ncu` reads the export and matches launches to variants,
//! [`reconcile`] judges them against the ledger, [`profile`] launches the profiler; this file
//! imports an export into a run.

mod profile;
mod reconcile;

pub use crate::measure::ncu::*;
pub use profile::*;
pub use reconcile::*;

use crate::error::{ExitCode, Result};
use crate::report::format::decimal_bytes;
use crate::results::VariantCounters;
use std::path::Path;

/// `opledger counters RUN_DIR NCU_CSV`: reads the export, writes the counters into the run's
/// results.json and re-renders its report; prints one line per variant. Returns the number of
/// findings.
pub fn import(run_dir: &Path, csv_path: &Path) -> Result<usize> {
    let loaded = crate::archive::load_allowing(run_dir, Some(csv_path))?;
    crate::archive::refuse_unverified(run_dir, &loaded.verification, "counters")?;
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
            "opledger: {}: the counters disagree with the ledger (report: {})",
            crate::report::format::counted(findings as u64, "finding", "findings"),
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
    use crate::measure::ncu::{Launch, Tally};

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
            let v = reconcile(&Tally::of(&[&l]), &ledger, 50 << 20);
            assert_eq!(v.ledger_read_bytes, 1_000_000);
            assert_eq!(v.ledger_write_bytes, 1_000_000);
            assert_eq!(v.finding.is_some(), finding, "{read}: {:?}", v.finding);
        }
        let v = reconcile(&Tally::default(), &ledger, 50 << 20);
        assert!(v.finding.unwrap().contains("no kernel launches"));
        // A tiled ledger (tiles of 96 KiB) is held within ±15% both ways, as counts hold it;
        // with tiles beyond the L2 it predicts nothing.
        let tiled = ledger.clone().with_tile_bytes(96 << 10);
        for (read, finding) in [(1.0e6, false), (0.9e6, false), (0.8e6, true), (1.2e6, true)] {
            let v = reconcile(&Tally::of(&[&launch(read)]), &tiled, 50 << 20);
            assert_eq!(v.finding.is_some(), finding, "{read}: {:?}", v.finding);
        }
        let v = reconcile(&Tally::of(&[&launch(1.0e6)]), &tiled, 64 << 10);
        assert!(v.finding.unwrap().contains("exceed the L2"));
    }
}
