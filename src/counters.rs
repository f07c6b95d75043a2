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

use crate::error::{Error, Result};
use crate::results::{RunResult, SpecCounters, VariantCounters};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The metrics opledger asks Nsight Compute for.
pub const METRICS: [&str; 4] = [
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "gpu__time_duration.sum",
];

/// The name of the delimiting kernel the profiling pass launches.
pub const MARKER_KERNEL: &str = "opledger_marker";

/// Below this read ratio (measured / ledger) the ledger counts bytes the GPU did not read.
pub const READ_RATIO_MIN: f64 = 0.95;
/// Above this the GPU read bytes the ledger does not count.
pub const READ_RATIO_MAX: f64 = 1.5;

/// Largest export read (a profile of every launch of a suite stays far below).
const MAX_CSV_BYTES: u64 = 256 << 20;

/// The layout of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Raw,
    Details,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Raw => "raw",
            Layout::Details => "details",
        }
    }
}

/// One kernel launch of an export.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub kernel: String,
    /// The grid's x dimension, when the export has a `Grid Size` column.
    pub grid_x: Option<u64>,
    /// Metric → value in base units (bytes, seconds); `None` where the export says `n/a`.
    pub metrics: BTreeMap<String, Option<f64>>,
}

/// An export, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub layout: Layout,
    pub launches: Vec<Launch>,
}

fn err(path: &Path, line: Option<u64>, message: impl Into<String>) -> Error {
    Error::Counters {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

/// Reads an export from a file.
pub fn read(path: &Path) -> Result<Export> {
    let bytes = crate::files::read_regular(path, MAX_CSV_BYTES, "Nsight Compute export")?;
    let text = String::from_utf8_lossy(&bytes);
    parse(&text, path)
}

/// Parses the text of an export; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<Export> {
    // The profiler's own lines (`==PROF== Connected to process …`) and blank lines, with the
    // line numbers of what is left, for errors.
    let kept: Vec<(u64, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("==") && !l.trim().is_empty())
        .map(|(i, l)| (i as u64 + 1, l))
        .collect();
    if kept.is_empty() {
        return Err(err(
            path,
            None,
            "no CSV rows: is this an `ncu --csv` export?",
        ));
    }
    let joined: String = kept.iter().map(|(_, l)| format!("{l}\n")).collect();
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(joined.as_bytes());
    let mut rows: Vec<(u64, Vec<String>)> = Vec::new();
    for (i, rec) in reader.records().enumerate() {
        let line = kept.get(i).map(|(n, _)| *n);
        let rec = rec.map_err(|e| err(path, line, format!("not CSV: {e}")))?;
        rows.push((
            line.unwrap_or(0),
            rec.iter().map(|f| f.trim().to_string()).collect(),
        ));
    }
    let (header_line, header) = rows.remove(0);
    let col = |name: &str| header.iter().position(|h| h == name);
    let kernel_col = col("Kernel Name").ok_or_else(|| {
        err(
            path,
            Some(header_line),
            format!(
                "no `Kernel Name` column in the header (found: {})",
                header.join(", ")
            ),
        )
    })?;
    let grid_col = col("Grid Size");
    if let (Some(name_col), Some(value_col)) = (col("Metric Name"), col("Metric Value")) {
        let unit_col = col("Metric Unit");
        let id_col = col("ID").ok_or_else(|| {
            err(
                path,
                Some(header_line),
                "a details export without an `ID` column",
            )
        })?;
        let mut launches: Vec<(String, Launch)> = Vec::new();
        for (line, row) in &rows {
            let field = |c: usize| row.get(c).map(String::as_str).unwrap_or("");
            let id = field(id_col).to_string();
            if launches.last().map(|(last, _)| last != &id).unwrap_or(true) {
                launches.push((
                    id.clone(),
                    Launch {
                        kernel: field(kernel_col).to_string(),
                        grid_x: grid_col.and_then(|c| grid_x(field(c))),
                        metrics: BTreeMap::new(),
                    },
                ));
            }
            let metric = field(name_col);
            if metric.is_empty() {
                continue;
            }
            let unit = unit_col.map(&field).unwrap_or("");
            let value = value(field(value_col), unit)
                .map_err(|m| err(path, Some(*line), format!("metric {metric}: {m}")))?;
            let launch = &mut launches.last_mut().expect("pushed above").1;
            launch.metrics.insert(metric.to_string(), value);
        }
        return Ok(Export {
            layout: Layout::Details,
            launches: launches.into_iter().map(|(_, l)| l).collect(),
        });
    }
    // Raw: metric columns are those named like `unit__counter.rollup`.
    let metric_cols: Vec<(usize, &str)> = header
        .iter()
        .enumerate()
        .filter(|(_, h)| h.contains("__"))
        .map(|(i, h)| (i, h.as_str()))
        .collect();
    if metric_cols.is_empty() {
        return Err(err(
            path,
            Some(header_line),
            "neither a raw export (metric columns such as dram__bytes_read.sum) nor a details one (Metric Name, Metric Value)",
        ));
    }
    // The units row: no kernel name, units under the metric columns.
    let units: Vec<String> = match rows.first() {
        Some((_, r)) if r.get(kernel_col).is_none_or(|k| k.is_empty()) => {
            let (line, units) = rows.remove(0);
            for &(c, name) in &metric_cols {
                unit_scale(units.get(c).map(String::as_str).unwrap_or(""))
                    .map_err(|m| err(path, Some(line), format!("column {name}: {m}")))?;
            }
            units
        }
        _ => Vec::new(),
    };
    let mut launches = Vec::new();
    for (line, row) in &rows {
        let field = |c: usize| row.get(c).map(String::as_str).unwrap_or("");
        let mut metrics = BTreeMap::new();
        for &(c, name) in &metric_cols {
            let unit = units.get(c).map(String::as_str).unwrap_or("");
            let v = value(field(c), unit)
                .map_err(|m| err(path, Some(*line), format!("column {name}: {m}")))?;
            metrics.insert(name.to_string(), v);
        }
        launches.push(Launch {
            kernel: field(kernel_col).to_string(),
            grid_x: grid_col.and_then(|c| grid_x(field(c))),
            metrics,
        });
    }
    Ok(Export {
        layout: Layout::Raw,
        launches,
    })
}

/// The x of a grid written `(x, y, z)` (or a bare number).
fn grid_x(s: &str) -> Option<u64> {
    let inner = s.trim().trim_start_matches('(').trim_end_matches(')');
    inner
        .split(',')
        .next()?
        .trim()
        .replace(' ', "")
        .parse()
        .ok()
}

/// A value in base units: `n/a` (or empty) is missing, thousands separators are dropped.
fn value(raw: &str, unit: &str) -> std::result::Result<Option<f64>, String> {
    let raw = raw.trim();
    if raw.is_empty() || raw.eq_ignore_ascii_case("n/a") {
        return Ok(None);
    }
    let digits: String = raw.chars().filter(|&c| c != ',').collect();
    let v: f64 = digits
        .parse()
        .map_err(|_| format!("`{raw}` is not a number"))?;
    if !v.is_finite() {
        return Err(format!("`{raw}` is not a finite number"));
    }
    Ok(Some(v * unit_scale(unit)?))
}

/// The factor from `unit` to its base unit (bytes, seconds; 1 for counts and cycles).
fn unit_scale(unit: &str) -> std::result::Result<f64, String> {
    Ok(match unit.trim() {
        "" | "byte" | "second" | "cycle" | "%" | "inst" | "warp" | "sector" | "request" => 1.0,
        "Kbyte" => 1e3,
        "Mbyte" => 1e6,
        "Gbyte" => 1e9,
        "Tbyte" => 1e12,
        "nsecond" => 1e-9,
        "usecond" => 1e-6,
        "msecond" => 1e-3,
        other => return Err(format!("unknown unit `{other}` (expected byte, Kbyte, Mbyte, Gbyte, nsecond, usecond, msecond, second)")),
    })
}

/// The launches of each (case, variant), split at the markers: `[case][0 before, 1 after]`.
pub fn segments<'a>(e: &'a Export, cases: usize, path: &Path) -> Result<Vec<[Vec<&'a Launch>; 2]>> {
    let mut out: Vec<[Vec<&Launch>; 2]> = (0..cases).map(|_| [Vec::new(), Vec::new()]).collect();
    let mut seen = vec![[false; 2]; cases];
    let mut current: Option<(usize, usize)> = None;
    // The name alone, or with its signature (`opledger_marker()`) as some exports print it.
    let with_signature = format!("{MARKER_KERNEL}(");
    for l in &e.launches {
        if l.kernel == MARKER_KERNEL || l.kernel.starts_with(&with_signature) {
            let x = l.grid_x.filter(|&x| x >= 1).ok_or_else(|| {
                err(
                    path,
                    None,
                    "a marker launch without a Grid Size of at least 1: export with the default columns",
                )
            })? as usize;
            let (case, side) = ((x - 1) / 2, (x - 1) % 2);
            if case >= cases {
                return Err(err(
                    path,
                    None,
                    format!("a marker for case {case}, but the run has {cases} specs: is this the export of this run?"),
                ));
            }
            seen[case][side] = true;
            current = Some((case, side));
        } else if let Some((case, side)) = current {
            out[case][side].push(l);
        }
    }
    if !seen.iter().flatten().any(|&s| s) {
        return Err(err(
            path,
            None,
            format!("no `{MARKER_KERNEL}` launches: profile with `opledger run --ncu`, which marks each variant's launches"),
        ));
    }
    Ok(out)
}

/// Sums a metric over launches; missing when any launch lacks it.
fn sum(launches: &[&Launch], metric: &str) -> Option<f64> {
    launches
        .iter()
        .map(|l| l.metrics.get(metric).copied().flatten())
        .sum::<Option<f64>>()
        .filter(|_| !launches.is_empty())
}

/// One variant's counters beside its ledger.
pub fn reconcile(launches: &[&Launch], ledger: &crate::ledger::VariantLedger) -> VariantCounters {
    let ledger_read_bytes: u64 = ledger.movements.iter().map(|m| m.bytes * m.reads).sum();
    let ledger_write_bytes: u64 = ledger.movements.iter().map(|m| m.bytes * m.writes).sum();
    let dram_read_bytes = sum(launches, METRICS[0]);
    let mut kernels: Vec<(String, u64)> = Vec::new();
    for l in launches {
        match kernels.iter_mut().find(|(k, _)| k == &l.kernel) {
            Some((_, n)) => *n += 1,
            None => kernels.push((l.kernel.clone(), 1)),
        }
    }
    let read_ratio = dram_read_bytes
        .filter(|_| ledger_read_bytes > 0)
        .map(|r| r / ledger_read_bytes as f64);
    let finding = if launches.is_empty() {
        Some("no kernel launches between this variant's marker and the next".to_string())
    } else {
        match read_ratio {
            None if dram_read_bytes.is_none() => {
                Some(format!("{} missing (absent or n/a) for a launch: not judged", METRICS[0]))
            }
            None => Some("the ledger counts no read bytes: not judged".to_string()),
            Some(r) if r < READ_RATIO_MIN => Some(format!(
                "DRAM read {r:.2}× the ledger's: below {READ_RATIO_MIN}×, the ledger counts bytes the GPU did not read from memory (served by a cache, or a wrong model)"
            )),
            Some(r) if r > READ_RATIO_MAX => Some(format!(
                "DRAM read {r:.2}× the ledger's: above {READ_RATIO_MAX}×, the GPU read bytes the ledger does not count"
            )),
            Some(_) => None,
        }
    };
    VariantCounters {
        launches: launches.len() as u64,
        kernels,
        dram_read_bytes,
        dram_write_bytes: sum(launches, METRICS[1]),
        l2_bytes: sum(launches, METRICS[2]),
        gpu_time_secs: sum(launches, METRICS[3]),
        ledger_read_bytes,
        ledger_write_bytes,
        read_ratio,
        finding,
    }
}

/// Attaches an export's counters to every spec of a run; returns how many findings.
pub fn attach(run: &mut RunResult, export: &Export, csv_path: &Path) -> Result<usize> {
    let segs = segments(export, run.specs.len(), csv_path)?;
    let source = csv_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| csv_path.display().to_string());
    let mut findings = 0;
    for (spec, [before, after]) in run.specs.iter_mut().zip(&segs) {
        let c = SpecCounters {
            source: source.clone(),
            layout: export.layout.name().to_string(),
            before: reconcile(before, &spec.before.ledger),
            after: reconcile(after, &spec.after.ledger),
        };
        findings += [&c.before, &c.after]
            .iter()
            .filter(|v| v.finding.is_some())
            .count();
        spec.counters = Some(c);
    }
    Ok(findings)
}

/// `opledger counters RUN_DIR NCU_CSV`: reads the export, writes the counters into the run's
/// results.json and re-renders its report; prints one line per variant. Returns the number of
/// findings.
pub fn import(run_dir: &Path, csv_path: &Path) -> Result<usize> {
    let loaded = crate::archive::load_allowing(run_dir, Some(csv_path))?;
    let mut run = loaded.run;
    let export = read(csv_path)?;
    let findings = attach(&mut run, &export, csv_path)?;
    let mut json = serde_json::to_vec_pretty(&run).map_err(|e| Error::Corrupt {
        path: run_dir.join("results.json"),
        message: format!("cannot serialize: {e}"),
    })?;
    json.push(b'\n');
    // What the new manifest rests on: the archive as it was, and the export added to it.
    let mut read_from = Vec::new();
    if let Some(sha256) = &loaded.verification.manifest_sha256 {
        read_from.push(crate::archive::ReadRecord {
            what: "previous manifest".into(),
            path: run_dir.join(crate::archive::MANIFEST).display().to_string(),
            sha256: sha256.clone(),
            run_id: Some(run.run_id.clone()),
        });
    }
    read_from.push(crate::archive::file_record("ncu export", csv_path)?);
    crate::files::write_atomic(&run_dir.join("results.json"), &json)?;
    let md = crate::report::render(&run, None)?;
    crate::files::write_atomic(&run_dir.join("report.md"), md.as_bytes())?;
    crate::archive::seal(run_dir, "counters", read_from)?;
    for s in &run.specs {
        if let Some(c) = &s.counters {
            for (side, v) in [("before", &c.before), ("after", &c.after)] {
                println!("{}", line(&s.name, side, v));
            }
        }
    }
    Ok(findings)
}

fn line(spec: &str, side: &str, v: &VariantCounters) -> String {
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

/// Bytes with a decimal prefix, as ncu counts them (2.491 MB).
fn decimal_bytes(b: f64) -> String {
    let (v, unit) = match b {
        b if b >= 1e12 => (b / 1e12, "TB"),
        b if b >= 1e9 => (b / 1e9, "GB"),
        b if b >= 1e6 => (b / 1e6, "MB"),
        b if b >= 1e3 => (b / 1e3, "kB"),
        b => (b, "B"),
    };
    format!("{v:.3} {unit}")
}

/// The `ncu` command line that profiles a run's marked pass: every metric opledger reads, the
/// caches flushed before each launch (`--cache-control all`), the clocks left alone
/// (`--clock-control none`: never change the clocks of a shared GPU), base units.
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

/// The marked pass that `ncu` profiles: for each spec of the run, in the run's order, a marker
/// then one execution of `before`, a marker then one of `after`, on the CUDA backend, with the
/// run's seed (`opledger profile-pass`, started by `run --ncu` under `ncu`).
pub fn profile_pass(run_dir: &Path, paths: &[PathBuf], seed: u64) -> Result<()> {
    use crate::backend::pair::{prepare, PairContext, Side};
    // ncu is writing its export into the run folder while this pass runs.
    let run = crate::archive::load_allowing(run_dir, Some(&export_path(run_dir)))?.run;
    let specs = crate::spec::load_all(paths)?;
    let (backend, _) = crate::backend::select(crate::backend::BackendChoice::Cuda, None)?;
    for (case, r) in run.specs.iter().enumerate() {
        let s = specs.iter().find(|s| s.name == r.name).ok_or_else(|| {
            Error::Usage(format!(
                "{}: spec {} of the run is not among the specs given",
                run_dir.display(),
                r.name
            ))
        })?;
        let inputs = std::sync::Arc::new(s.workload.as_kind().inputs(seed));
        let ctx = PairContext {
            spec_dir: s.dir(),
            flush_bytes: backend.flush_bytes().max(64 << 20),
        };
        let mut pair = prepare(
            backend.as_ref(),
            &s.workload,
            s.variants,
            &s.implementations,
            inputs,
            &ctx,
        )?;
        let seq = 2 * case as u32;
        backend.mark(seq)?;
        pair.run_timed(Side::Before)?;
        backend.mark(seq + 1)?;
        pair.run_timed(Side::After)?;
    }
    Ok(())
}

/// `opledger run --ncu`: the run as usual (its timings unprofiled), then the marked pass under
/// `ncu` into `RUN_DIR/ncu.csv`, then the counters attached as `opledger counters` does.
/// Returns the run's exit code, or 1 when the counters disagree with a ledger.
pub fn run_with_ncu(opts: &crate::pipeline::RunOptions) -> Result<crate::error::ExitCode> {
    use crate::error::ExitCode;
    let ncu = which("ncu").ok_or_else(|| {
        Error::BackendUnavailable(
            "run --ncu: `ncu` (Nsight Compute) is not on PATH; install it with the CUDA toolkit, or profile the marked pass yourself and use `opledger counters`".into(),
        )
    })?;
    let before: Vec<PathBuf> = run_dirs(&opts.runs_dir);
    let code = crate::pipeline::run(opts)?;
    let run_dir = run_dirs(&opts.runs_dir)
        .into_iter()
        .find(|d| !before.contains(d))
        .ok_or_else(|| {
            Error::Usage(format!(
                "run --ncu: no new run folder under {}",
                opts.runs_dir.display()
            ))
        })?;
    let run = crate::archive::load(&run_dir)?.run;
    if run.backend != "cuda" {
        return Err(Error::BackendUnavailable(format!(
            "run --ncu profiles GPU kernels, but this run used the {} backend: run with --backend cuda on a machine with a GPU",
            run.backend
        )));
    }
    let csv = export_path(&run_dir);
    let exe =
        std::env::current_exe().map_err(|e| Error::io("finding", "the opledger executable", e))?;
    let mut cmd = std::process::Command::new(&ncu);
    cmd.args(ncu_args(&csv))
        .arg(&exe)
        .arg("profile-pass")
        .arg(&run_dir)
        .args(&opts.paths)
        .args(["--seed", &opts.measure.seed.to_string()]);
    eprintln!("opledger: profiling the marked pass: {cmd:?}");
    let status = cmd.status().map_err(|e| Error::io("starting", &ncu, e))?;
    if !status.success() {
        return Err(Error::BackendUnavailable(format!(
            "run --ncu: `ncu` exited with {status} (its log: {}); the run itself is archived in {}",
            csv.display(),
            run_dir.display()
        )));
    }
    let findings = import(&run_dir, &csv)?;
    Ok(if findings > 0 {
        ExitCode::GateFailed
    } else {
        code
    })
}

/// Folders directly under `dir`.
fn run_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// `name` on PATH.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Where `run --ncu` keeps the export inside the run folder.
pub fn export_path(run_dir: &Path) -> PathBuf {
    run_dir.join("ncu.csv")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn segments_follow_the_markers_and_sums_need_every_launch() {
        let e = parse(RAW, Path::new("x.csv")).unwrap();
        let segs = segments(&e, 1, Path::new("x.csv")).unwrap();
        assert_eq!(segs[0][0].len(), 1);
        assert_eq!(segs[0][1].len(), 1);
        assert_eq!(sum(&segs[0][0], "dram__bytes_read.sum"), Some(2.5e6));
        assert_eq!(sum(&segs[0][0], "lts__t_bytes.sum"), None);
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
            let v = reconcile(&[&l], &ledger);
            assert_eq!(v.ledger_read_bytes, 1_000_000);
            assert_eq!(v.ledger_write_bytes, 1_000_000);
            assert_eq!(v.finding.is_some(), finding, "{read}: {:?}", v.finding);
        }
        let v = reconcile(&[], &ledger);
        assert!(v.finding.unwrap().contains("no kernel launches"));
    }
}
