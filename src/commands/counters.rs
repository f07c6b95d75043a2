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

use crate::error::{Error, ExitCode, Result};
use crate::results::{RunResult, SpecCounters, VariantCounters};
use std::collections::BTreeMap;
use std::io::{BufRead, Read};
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

/// Longest line of an export (a launch row is a few hundred bytes; more is not ncu's).
const MAX_LINE_BYTES: usize = 1 << 20;
/// Distinct kernel names kept per variant; launches of further names are counted together.
const MAX_KERNEL_NAMES: usize = 64;
/// The name the launches of kernels past [`MAX_KERNEL_NAMES`] are counted under.
const OTHER_KERNELS: &str = "(other kernels)";

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

/// An export, parsed whole (small exports and tests; `import` streams instead).
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

/// The export's lines less the profiler's own (`==PROF== …`), with a record of where lines were
/// dropped so that a line of what is left maps back to the file's; a line over
/// [`MAX_LINE_BYTES`] or with an odd number of quotes (a quote that never closes would swallow
/// the rest of the file into one field) is an error there.
struct ProfilerLines<R> {
    inner: R,
    line: Vec<u8>,
    at: usize,
    /// Lines read from the file so far, and lines given on.
    read: u64,
    kept: u64,
    /// (kept lines before the drop, file lines dropped so far), one entry per run of drops.
    drops: std::rc::Rc<std::cell::RefCell<Vec<(u64, u64)>>>,
}

/// The file line of kept line `kept` (1-based).
fn file_line(drops: &[(u64, u64)], kept: u64) -> u64 {
    let dropped = drops
        .iter()
        .take_while(|(k, _)| *k < kept)
        .last()
        .map_or(0, |(_, d)| *d);
    kept + dropped
}

impl<R: BufRead> Read for ProfilerLines<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.line.len() {
            self.line.clear();
            self.at = 0;
            let n = (&mut self.inner)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.line)?;
            if n == 0 {
                return Ok(0);
            }
            self.read += 1;
            if self.line.len() > MAX_LINE_BYTES {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("line {}: longer than {MAX_LINE_BYTES} bytes", self.read),
                ));
            }
            let text = self.line.trim_ascii_start();
            if text.starts_with(b"==") {
                let dropped = self.read - self.kept;
                let mut d = self.drops.borrow_mut();
                match d.last_mut() {
                    Some(last) if last.0 == self.kept => last.1 = dropped,
                    _ => d.push((self.kept, dropped)),
                }
                self.line.clear();
                continue;
            }
            if self.line.iter().filter(|&&b| b == b'"').count() % 2 == 1 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "line {}: an unbalanced quote (a field opened with `\"` never closes on its line)",
                        self.read
                    ),
                ));
            }
            self.kept += 1;
        }
        let n = buf.len().min(self.line.len() - self.at);
        buf[..n].copy_from_slice(&self.line[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Parses an export whole; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<Export> {
    let mut launches = Vec::new();
    let layout = parse_stream(text.as_bytes(), path, &mut |l, _| {
        launches.push(l);
        Ok(())
    })?;
    Ok(Export { layout, launches })
}

/// Streams the export in file `path` into `sink`, one launch at a time.
pub fn read_stream(path: &Path, sink: &mut dyn FnMut(Launch, u64) -> Result<()>) -> Result<Layout> {
    let file = crate::files::open_regular(path, "Nsight Compute export")?;
    parse_stream(std::io::BufReader::new(file), path, sink)
}

/// Parses an export as it is read, handing each launch (with its file line) to `sink`: memory
/// stays that of one launch whatever the export's size. Values are checked as they come: a
/// number that is not one, negative, or in an unknown unit is an error at its line.
pub fn parse_stream<R: BufRead>(
    input: R,
    path: &Path,
    sink: &mut dyn FnMut(Launch, u64) -> Result<()>,
) -> Result<Layout> {
    let drops = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let lines = ProfilerLines {
        inner: input,
        line: Vec::new(),
        at: 0,
        read: 0,
        kept: 0,
        drops: drops.clone(),
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(lines);
    let line_of = |rec: &csv::StringRecord| -> u64 {
        rec.position()
            .map_or(0, |p| file_line(&drops.borrow(), p.line()))
    };
    let csv_err = |e: csv::Error, line: Option<u64>| -> Error {
        match e.kind() {
            csv::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
                // "line N: …" from the line reader: the file's line.
                let m = io.to_string();
                let (n, rest) = m
                    .strip_prefix("line ")
                    .and_then(|r| r.split_once(": "))
                    .and_then(|(n, rest)| n.parse::<u64>().ok().map(|n| (n, rest.to_string())))
                    .unwrap_or((0, m.clone()));
                err(path, (n > 0).then_some(n), rest)
            }
            csv::ErrorKind::Io(io) => Error::io(
                "reading",
                path,
                std::io::Error::new(io.kind(), io.to_string()),
            ),
            _ => err(path, line, format!("not CSV: {e}")),
        }
    };
    let mut records = reader.records();
    let next = |records: &mut csv::StringRecordsIter<'_, ProfilerLines<R>>| -> Result<Option<(u64, Vec<String>)>> {
        match records.next() {
            None => Ok(None),
            Some(Err(e)) => Err(csv_err(e, None)),
            Some(Ok(rec)) => Ok(Some((
                line_of(&rec),
                rec.iter().map(|f| f.trim().to_string()).collect(),
            ))),
        }
    };
    let Some((header_line, header)) = next(&mut records)? else {
        return Err(err(
            path,
            None,
            "no CSV rows: is this an `ncu --csv` export?",
        ));
    };
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
        // One launch is several consecutive rows with its ID.
        let mut current: Option<(String, Launch, u64)> = None;
        let mut dram_read_seen = false;
        while let Some((line, row)) = next(&mut records)? {
            let field = |c: usize| row.get(c).map(String::as_str).unwrap_or("");
            let id = field(id_col);
            if current.as_ref().is_none_or(|(last, _, _)| last != id) {
                if let Some((_, l, at)) = current.take() {
                    sink(l, at)?;
                }
                current = Some((
                    id.to_string(),
                    Launch {
                        kernel: field(kernel_col).to_string(),
                        grid_x: grid_col.and_then(|c| grid_x(field(c))),
                        metrics: BTreeMap::new(),
                    },
                    line,
                ));
            }
            let metric = field(name_col);
            if metric.is_empty() {
                continue;
            }
            let unit = unit_col.map(&field).unwrap_or("");
            let value = value(field(value_col), unit)
                .map_err(|m| err(path, Some(line), format!("metric {metric}: {m}")))?;
            dram_read_seen |= metric == METRICS[0];
            if let Some((_, launch, _)) = current.as_mut() {
                launch.metrics.insert(metric.to_string(), value);
            }
        }
        if let Some((_, l, at)) = current.take() {
            if !dram_read_seen {
                return Err(missing_dram_read(path, header_line));
            }
            sink(l, at)?;
        } else if !dram_read_seen {
            return Err(missing_dram_read(path, header_line));
        }
        return Ok(Layout::Details);
    }
    // Raw: metric columns are those named like `unit__counter.rollup`.
    let metric_cols: Vec<(usize, String)> = header
        .iter()
        .enumerate()
        .filter(|(_, h)| h.contains("__"))
        .map(|(i, h)| (i, h.clone()))
        .collect();
    if metric_cols.is_empty() {
        return Err(err(
            path,
            Some(header_line),
            "neither a raw export (metric columns such as dram__bytes_read.sum) nor a details one (Metric Name, Metric Value)",
        ));
    }
    if !metric_cols.iter().any(|(_, n)| n == METRICS[0]) {
        return Err(missing_dram_read(path, header_line));
    }
    // The units row: no kernel name, units under the metric columns.
    let mut units: Vec<String> = Vec::new();
    let mut first = true;
    while let Some((line, row)) = next(&mut records)? {
        if std::mem::take(&mut first) && row.get(kernel_col).is_none_or(|k| k.is_empty()) {
            for (c, name) in &metric_cols {
                unit_scale(row.get(*c).map(String::as_str).unwrap_or(""))
                    .map_err(|m| err(path, Some(line), format!("column {name}: {m}")))?;
            }
            units = row;
            continue;
        }
        let field = |c: usize| row.get(c).map(String::as_str).unwrap_or("");
        let mut metrics = BTreeMap::new();
        for (c, name) in &metric_cols {
            let unit = units.get(*c).map(String::as_str).unwrap_or("");
            let v = value(field(*c), unit)
                .map_err(|m| err(path, Some(line), format!("column {name}: {m}")))?;
            metrics.insert(name.clone(), v);
        }
        sink(
            Launch {
                kernel: field(kernel_col).to_string(),
                grid_x: grid_col.and_then(|c| grid_x(field(c))),
                metrics,
            },
            line,
        )?;
    }
    Ok(Layout::Raw)
}

fn missing_dram_read(path: &Path, header_line: u64) -> Error {
    err(
        path,
        Some(header_line),
        format!(
            "no `{}` metric: the DRAM read bytes are what opledger judges; profile with the metrics `run --ncu` asks for ({})",
            METRICS[0],
            METRICS.join(",")
        ),
    )
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
    if v < 0.0 {
        return Err(format!(
            "`{raw}` is negative: bytes, times and counts are never below zero"
        ));
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

/// What one variant's launches add up to: built launch by launch as the export streams.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub launches: u64,
    /// Kernel names in order of first launch, with counts (at most [`MAX_KERNEL_NAMES`], then
    /// [`OTHER_KERNELS`]).
    pub kernels: Vec<(String, u64)>,
    /// Per metric: the sum, or `None` once a launch lacked it (missing, never zero).
    sums: BTreeMap<String, Option<f64>>,
}

impl Tally {
    fn add(&mut self, l: &Launch) {
        let first = self.launches == 0;
        self.launches += 1;
        let full = self.kernels.len() >= MAX_KERNEL_NAMES;
        let name = if full && !self.kernels.iter().any(|(k, _)| *k == l.kernel) {
            OTHER_KERNELS
        } else {
            l.kernel.as_str()
        };
        match self.kernels.iter_mut().find(|(k, _)| k == name) {
            Some((_, n)) => *n += 1,
            None if !full => self.kernels.push((name.to_string(), 1)),
            None => {
                // The last name makes room for the others' count.
                let (_, n) = self.kernels.pop().unwrap_or_default();
                self.kernels.push((OTHER_KERNELS.into(), n + 1));
            }
        }
        for m in METRICS {
            let v = l.metrics.get(m).copied().flatten();
            let entry =
                self.sums
                    .entry(m.to_string())
                    .or_insert(if first { Some(0.0) } else { None });
            *entry = entry.zip(v).map(|(a, b)| a + b);
        }
    }

    /// The sum of `metric` over every launch; missing when any launch lacks it or none ran.
    pub fn sum(&self, metric: &str) -> Option<f64> {
        self.sums.get(metric).copied().flatten()
    }

    /// The tally of some launches (tests, small exports).
    pub fn of(launches: &[&Launch]) -> Tally {
        let mut t = Tally::default();
        for l in launches {
            t.add(l);
        }
        t
    }
}

/// Splits launches at the markers into (case, variant) tallies as they stream.
pub struct Segmenter<'a> {
    cases: usize,
    path: &'a Path,
    current: Option<(usize, usize)>,
    seen: Vec<[bool; 2]>,
    tallies: Vec<[Tally; 2]>,
}

impl<'a> Segmenter<'a> {
    pub fn new(cases: usize, path: &'a Path) -> Self {
        Segmenter {
            cases,
            path,
            current: None,
            seen: vec![[false; 2]; cases],
            tallies: (0..cases).map(|_| Default::default()).collect(),
        }
    }

    /// One launch, at file line `line`.
    pub fn push(&mut self, l: &Launch, line: u64) -> Result<()> {
        // The name alone, or with its signature (`opledger_marker()`) as some exports print it.
        let marker = l.kernel == MARKER_KERNEL
            || l.kernel
                .strip_prefix(MARKER_KERNEL)
                .is_some_and(|r| r.starts_with('('));
        if marker {
            let x = l.grid_x.filter(|&x| x >= 1).ok_or_else(|| {
                err(
                    self.path,
                    Some(line),
                    "a marker launch without a Grid Size of at least 1: export with the default columns",
                )
            })?;
            let (case, side) = ((x - 1) / 2, ((x - 1) % 2) as usize);
            if case >= self.cases as u64 {
                return Err(err(
                    self.path,
                    Some(line),
                    format!(
                        "a marker for case {case}, but the run has {} specs: is this the export of this run?",
                        self.cases
                    ),
                ));
            }
            let case = case as usize;
            self.seen[case][side] = true;
            self.current = Some((case, side));
        } else if let Some((case, side)) = self.current {
            self.tallies[case][side].add(l);
        }
        Ok(())
    }

    /// The tallies `[case][0 before, 1 after]`; an export without markers is an error.
    pub fn finish(self) -> Result<Vec<[Tally; 2]>> {
        if !self.seen.iter().flatten().any(|&s| s) {
            return Err(err(
                self.path,
                None,
                format!("no `{MARKER_KERNEL}` launches: profile with `opledger run --ncu`, which marks each variant's launches"),
            ));
        }
        Ok(self.tallies)
    }
}

/// The launches of each (case, variant) of a parsed export, split at the markers.
pub fn segments(e: &Export, cases: usize, path: &Path) -> Result<Vec<[Tally; 2]>> {
    let mut s = Segmenter::new(cases, path);
    for l in &e.launches {
        s.push(l, 0)?;
    }
    s.finish()
}

/// One variant's counters beside its ledger.
pub fn reconcile(t: &Tally, ledger: &crate::ledger::VariantLedger) -> VariantCounters {
    let sum_of = |f: fn(&crate::ledger::Movement) -> u64| {
        ledger
            .movements
            .iter()
            .map(f)
            .fold(0u64, u64::saturating_add)
    };
    let ledger_read_bytes = sum_of(|m| m.bytes.saturating_mul(m.reads));
    let ledger_write_bytes = sum_of(|m| m.bytes.saturating_mul(m.writes));
    let dram_read_bytes = t.sum(METRICS[0]);
    let read_ratio = dram_read_bytes
        .filter(|_| ledger_read_bytes > 0)
        .map(|r| r / ledger_read_bytes as f64);
    let finding = if t.launches == 0 {
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
        launches: t.launches,
        kernels: t.kernels.clone(),
        dram_read_bytes,
        dram_write_bytes: t.sum(METRICS[1]),
        l2_bytes: t.sum(METRICS[2]),
        gpu_time_secs: t.sum(METRICS[3]),
        ledger_read_bytes,
        ledger_write_bytes,
        read_ratio,
        finding,
    }
}

/// Attaches the tallies of an export (`[case][before, after]`) to every spec of a run; returns
/// how many findings.
pub fn attach_tallies(
    run: &mut RunResult,
    layout: Layout,
    segs: &[[Tally; 2]],
    csv_path: &Path,
) -> usize {
    let source = csv_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| csv_path.display().to_string());
    let mut findings = 0;
    for (spec, [before, after]) in run.specs.iter_mut().zip(segs) {
        let c = SpecCounters {
            source: source.clone(),
            layout: layout.name().to_string(),
            before: reconcile(before, &spec.before.ledger),
            after: reconcile(after, &spec.after.ledger),
        };
        findings += [&c.before, &c.after]
            .iter()
            .filter(|v| v.finding.is_some())
            .count();
        spec.counters = Some(c);
    }
    findings
}

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
    let (backend, _) = crate::backend::select(
        crate::backend::BackendChoice::Kind(crate::device::DeviceKind::Cuda),
        None,
        &crate::settings::Settings::default(),
    )?;
    for (case, r) in run.specs.iter().enumerate() {
        let s = specs.iter().find(|s| s.name == r.name).ok_or_else(|| {
            Error::Mismatch(format!(
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
    let (verdict, run_dir) = crate::pipeline::run(opts)?;
    let code = verdict.exit_code(opts.fail_on_inconclusive);
    let run = crate::archive::load(&run_dir)?.run;
    if !run.device.kind.has_hardware_counters() {
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
