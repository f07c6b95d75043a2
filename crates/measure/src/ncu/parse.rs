//! Reading an `ncu --csv` export: its two layouts told apart by their header, columns found
//! by name, values normalized to bytes and seconds, the profiler's own lines skipped, one
//! launch at a time.

use super::METRICS;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::Path;

/// Longest line of an export (a launch row is a few hundred bytes; more is not ncu's).
pub const MAX_LINE_BYTES: usize = 1 << 20;
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

pub fn err(path: &Path, line: Option<u64>, message: impl Into<String>) -> Error {
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
pub struct ProfilerLines<R> {
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
pub fn file_line(drops: &[(u64, u64)], kept: u64) -> u64 {
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
#[expect(
    clippy::too_many_lines,
    reason = "one pass of a streaming CSV reader over the two layouts of an export: the reader, its map to file lines and its error translation are closures over one iterator"
)]
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
            // Only the metrics opledger reads are parsed: a real export's other rows (device
            // attributes, launch settings) carry text such as `CachePreferNone`.
            if metric.is_empty() || !METRICS.contains(&metric) {
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
    // Raw: metric columns are those named like `unit__counter.rollup`; of them only the ones
    // opledger reads are parsed. A real export has hundreds of others (`device__attribute_*`,
    // `launch__*`) whose values are text (`No-CC`, `CachePreferNone`, `0x3`) or in units of
    // their own: they are left as they are.
    if !header.iter().any(|h| h.contains("__")) {
        return Err(err(
            path,
            Some(header_line),
            "neither a raw export (metric columns such as dram__bytes_read.sum) nor a details one (Metric Name, Metric Value)",
        ));
    }
    let metric_cols: Vec<(usize, String)> = header
        .iter()
        .enumerate()
        .filter(|(_, h)| METRICS.contains(&h.as_str()))
        .map(|(i, h)| (i, h.clone()))
        .collect();
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

pub fn missing_dram_read(path: &Path, header_line: u64) -> Error {
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
pub fn grid_x(s: &str) -> Option<u64> {
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
pub fn value(raw: &str, unit: &str) -> std::result::Result<Option<f64>, String> {
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
    let scaled = v * unit_scale(unit)?;
    // 1e308 Tbyte is past what an f64 holds: an error, not an infinity stored as "missing".
    if !scaled.is_finite() {
        return Err(format!(
            "`{raw}` {unit} is past the largest number a measurement can hold"
        ));
    }
    Ok(Some(scaled))
}

/// The factor from `unit` to its base unit (bytes, seconds; 1 for counts and cycles).
pub fn unit_scale(unit: &str) -> std::result::Result<f64, String> {
    Ok(match unit.trim() {
        "" | "byte" | "second" | "cycle" | "%" | "inst" | "warp" | "sector" | "request" => 1.0,
        "Kbyte" => 1e3,
        "Mbyte" => 1e6,
        "Gbyte" => 1e9,
        "Tbyte" => 1e12,
        // Both spellings: `nsecond` in older exports, `ns` in those of 2025 and later.
        "nsecond" | "ns" => 1e-9,
        "usecond" | "us" => 1e-6,
        "msecond" | "ms" => 1e-3,
        "s" => 1.0,
        other => return Err(format!("unknown unit `{other}` (expected byte, Kbyte, Mbyte, Gbyte, Tbyte, nsecond/ns, usecond/us, msecond/ms, second/s)")),
    })
}
