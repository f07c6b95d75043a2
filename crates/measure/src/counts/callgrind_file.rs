//! Callgrind's output files, read in one place: a file's event totals, its functions' own shares,
//! and the counts of a call from its interval's events.

use super::{CacheModel, Counts};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The events Callgrind counted over one interval, by their names in its output file
/// (`Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw` and, with write-back simulation, `I1dmr D1dmr
/// D1dmw ILdmr DLdmr DLdmw`: misses that evicted a dirty line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Events(pub std::collections::BTreeMap<String, u64>);

impl Events {
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// The totals of a Callgrind output file: its `events:` line names the columns of its
    /// `totals:` (or, without one, `summary:`) line.
    pub fn parse(text: &str) -> Result<Events, String> {
        let mut names: Option<Vec<&str>> = None;
        let mut totals: Option<&str> = None;
        let mut summary: Option<&str> = None;
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("events:") {
                names = Some(v.split_whitespace().collect());
            } else if let Some(v) = line.strip_prefix("totals:") {
                totals = Some(v);
            } else if let Some(v) = line.strip_prefix("summary:") {
                summary = Some(v);
            }
        }
        let names = names.ok_or("no `events:` line: not a Callgrind output file")?;
        let values = totals
            .or(summary)
            .ok_or("no `totals:` or `summary:` line: not a Callgrind output file")?;
        let mut out = std::collections::BTreeMap::new();
        for (i, v) in values.split_whitespace().enumerate() {
            let name = names
                .get(i)
                .ok_or("more totals than events: not a Callgrind output file")?;
            let n = v
                .parse::<u64>()
                .map_err(|_| format!("total {v:?} of {name} is not a count"))?;
            out.insert((*name).to_string(), n);
        }
        // A column Callgrind left out at the end of the line is zero.
        for n in names {
            out.entry(n.to_string()).or_insert(0);
        }
        Ok(Events(out))
    }
}

/// One function's own share of a counted call (what it executed itself, not its callees).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FunctionCounts {
    pub function: String,
    pub instructions: u64,
    /// Its last-level misses, reads and writes.
    pub ll_misses: u64,
}

/// The functions of a Callgrind output file by their own instructions, most first, at most
/// `keep` of them: each `fn=` block's cost lines summed, the cost line after a `calls=` line
/// (a callee's inclusive cost) left out. Needs the file's `events:` line.
pub fn functions(text: &str, keep: usize) -> Vec<FunctionCounts> {
    let names: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))
        .map(|v| v.split_whitespace().collect())
        .unwrap_or_default();
    let col = |n: &str| names.iter().position(|x| *x == n);
    let (ir, misses) = (col("Ir"), [col("ILmr"), col("DLmr"), col("DLmw")]);
    let mut by_fn: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    let mut current: Option<String> = None;
    let mut skip_next = false;
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("fn=") {
            // `(id) name`, or `name` without compressed strings.
            let name = match f.split_once(") ") {
                Some((id, n)) if id.starts_with('(') => n,
                _ => f,
            };
            current = Some(name.to_string());
            continue;
        }
        if line.starts_with("calls=") {
            skip_next = true;
            continue;
        }
        let first = line.bytes().next();
        let is_cost = matches!(first, Some(b'0'..=b'9' | b'+' | b'-' | b'*'));
        if !is_cost {
            continue;
        }
        if skip_next {
            skip_next = false;
            continue;
        }
        let Some(f) = &current else { continue };
        // The position column first, then the events in order (missing ones are zero).
        let values: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        let at = |i: Option<usize>| i.and_then(|i| values.get(i)).copied().unwrap_or(0);
        let e = by_fn.entry(f.clone()).or_default();
        e.0 += at(ir);
        e.1 += misses.iter().map(|m| at(*m)).sum::<u64>();
    }
    let mut out: Vec<FunctionCounts> = by_fn
        .into_iter()
        .map(|(function, (instructions, ll_misses))| FunctionCounts {
            function,
            instructions,
            ll_misses,
        })
        .filter(|f| f.instructions > 0)
        .collect();
    out.sort_by(|a, b| {
        b.instructions
            .cmp(&a.instructions)
            .then(a.function.cmp(&b.function))
    });
    out.truncate(keep);
    out
}

/// A Callgrind output file's events, and its text (for the functions in it).
pub(super) fn read_events(p: &Path) -> Result<(Events, String)> {
    let bytes = crate::files::read_regular(p, 64 << 20, "Callgrind output")?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let events = Events::parse(&text).map_err(|m| Error::Corrupt {
        path: p.to_path_buf(),
        message: m,
    })?;
    Ok((events, text))
}

/// The counts of a call from its interval's events and its flush's, or an error naming the
/// call's file (totals no counted call can reach).
pub(super) fn counts_of(
    call: &Events,
    flush: &Events,
    model: &CacheModel,
    file: &Path,
) -> Result<Counts> {
    Counts::of(call, flush, model).map_err(|message| Error::Corrupt {
        path: file.to_path_buf(),
        message,
    })
}
