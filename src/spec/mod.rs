//! Spec files: YAML → validated types.
//!
//! A spec declares one optimization (workload, the two variants compared, and the claims).
//! Parsing is strict: unknown keys are errors, and every error names the file, the line and the
//! column, and what was expected. Value checks that serde can see in isolation (a name, a size, a
//! finite number) run inside deserialization so that serde_yaml attaches the exact location;
//! checks across fields run afterwards and locate the offending key in the text.

mod locate;
pub mod schema;
mod types;
mod workload;

pub use locate::find_key;
pub use types::*;

use crate::error::{Error, Position, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest number of elements one tensor of a spec may have (2^34, 64 GiB of f32). Beyond this a
/// spec is refused outright; below it, the run still refuses cases that do not fit in memory.
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 34;

/// Reads and validates every spec named by `paths` (files, or directories whose `*.yaml`/`*.yml`
/// files are taken in name order). Duplicate spec names across files are an error.
pub fn load_all(paths: &[PathBuf]) -> Result<Vec<Spec>> {
    let mut files = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::io("reading", p, e))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| Error::io("listing", p, e))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|f| {
                    f.is_file()
                        && matches!(f.extension().and_then(|x| x.to_str()), Some("yaml" | "yml"))
                })
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(Error::Usage(format!(
                    "{}: no spec files (*.yaml, *.yml) in this directory",
                    p.display()
                )));
            }
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    if files.is_empty() {
        return Err(Error::Usage("no spec files given".into()));
    }
    let mut specs: Vec<Spec> = Vec::new();
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for f in files {
        for spec in expand(load(&f)?)? {
            if let Some(first) = seen.get(&spec.name) {
                return Err(Error::Spec {
                path: f.clone(),
                pos: find_key(&spec.source_text, &["name"]),
                message: format!(
                    "duplicate spec name `{}`: already used by {} (names key the baselines and must be unique)",
                    spec.name,
                    first.display()
                ),
            });
            }
            seen.insert(spec.name.clone(), f.clone());
            specs.push(spec);
        }
    }
    Ok(specs)
}

/// Expands a spec with a sweep into one spec per point, named `<name>--<param>-<value>...`,
/// each with its workload re-validated and the point's own claims applied.
pub fn expand(spec: Spec) -> Result<Vec<Spec>> {
    if spec.sweep.is_empty() {
        return Ok(vec![spec]);
    }
    let mut points: Vec<Vec<(String, u64)>> = vec![Vec::new()];
    for (key, values) in &spec.sweep {
        points = points
            .into_iter()
            .flat_map(|p| {
                values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((key.clone(), *v));
                    q
                })
            })
            .collect();
    }
    let mut out = Vec::new();
    for params in points {
        let mut raw = spec.raw_workload.clone();
        for (k, v) in &params {
            raw.set(k, *v);
        }
        let label = params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let workload = raw
            .validate(&spec.source_text)
            .map_err(|(pos, message)| Error::Spec {
                path: spec.file.clone(),
                pos,
                message: format!("at sweep point {label}: {message}"),
            })?;
        let mut s = spec.clone();
        s.name = format!(
            "{}--{}",
            spec.name,
            params
                .iter()
                .map(|(k, v)| format!("{}-{v}", k.replace('_', "-")))
                .collect::<Vec<_>>()
                .join("-")
        );
        s.workload = workload;
        s.expect.points.clear();
        if let Some(pe) = spec.expect.points.get(&label) {
            if let Some(b) = pe.bound {
                s.expect.bound = b;
            }
            if pe.io_saving.is_some() {
                s.expect.io_saving = pe.io_saving;
            }
            if pe.time_saving.is_some() {
                s.expect.time_saving = pe.time_saving;
            }
        }
        s.sweep.clear();
        s.point = Some(SweepPoint {
            group: spec.name.clone(),
            params,
            label,
        });
        out.push(s);
    }
    Ok(out)
}

/// Reads and validates one spec file.
pub fn load(path: &Path) -> Result<Spec> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
    parse(path, &bytes)
}

/// Parses and validates spec bytes; `path` is used in messages only.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Spec> {
    let err = |pos: Option<Position>, message: String| Error::Spec {
        path: path.to_path_buf(),
        pos,
        message,
    };
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let column =
                good.len() - good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
            return Err(err(
                Some(Position { line, column }),
                format!(
                    "not valid UTF-8 (invalid byte at offset {}); spec files must be UTF-8 text",
                    e.valid_up_to()
                ),
            ));
        }
    };
    if text.trim().is_empty() {
        return Err(err(
            None,
            "the file is empty; expected a YAML mapping with keys name, title, workload, variants, expect".into(),
        ));
    }
    let raw: RawSpec = serde_yaml::from_str(text).map_err(|e| {
        let pos = e.location().map(|l| Position {
            line: l.line(),
            column: l.column(),
        });
        err(pos, clean_yaml_message(&e.to_string()))
    })?;
    raw.validate(text)
        .map(|mut spec| {
            spec.file = path.to_path_buf();
            spec
        })
        .map_err(|(pos, message)| err(pos, message))
}

/// serde_yaml appends " at line L column C" to its messages; we print the location in front, as
/// compilers do, so the suffix is dropped.
fn clean_yaml_message(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) if msg[i..].contains(" column ") => msg[..i].to_string(),
        _ => msg.to_string(),
    }
}

#[cfg(test)]
mod tests;
