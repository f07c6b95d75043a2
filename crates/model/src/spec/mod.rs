//! Spec files: YAML → validated types.
//!
//! A spec declares one optimization (workload, the two variants compared, and the claims).
//! Parsing is strict: unknown keys are errors, and every error names the file, the line and the
//! column, and what was expected. Value checks that serde can see in isolation (a name, a size, a
//! finite number) run inside deserialization so that serde_yaml attaches the exact location;
//! checks across fields run afterwards and locate the offending key in the text.

pub mod kernel_source;
mod locate;
pub mod schema;
mod types;

pub use locate::find_key;
pub use types::*;

use crate::error::{Error, Position, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use crate::kinds::MAX_TENSOR_ELEMENTS;

/// Reads and validates every spec named by `paths` (files, or directories whose `*.yaml`/`*.yml`
/// files are taken in name order). Duplicate spec names across files are an error; the first
/// error is returned.
pub fn load_all(paths: &[PathBuf]) -> Result<Vec<Spec>> {
    let (specs, mut errors) = load_all_collect(paths);
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(errors.remove(0))
    }
}

/// Like [`load_all`], but goes on past a bad file: every valid spec, and every error (`check`
/// reports them all at once).
pub fn load_all_collect(paths: &[PathBuf]) -> (Vec<Spec>, Vec<Error>) {
    let mut errors = Vec::new();
    let mut files = Vec::new();
    for p in paths {
        match spec_files_in(p) {
            Ok(found) => files.extend(found),
            Err(e) => errors.push(e),
        }
    }
    if files.is_empty() && errors.is_empty() {
        errors.push(Error::NoSpecs { folder: None });
    }
    let mut specs: Vec<Spec> = Vec::new();
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for f in files {
        let expanded = match load(&f).and_then(expand).and_then(check_kernel_sources) {
            Ok(v) => v,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        for spec in expanded {
            if let Some(first) = seen.get(&spec.name) {
                errors.push(Error::Spec {
                    path: f.clone(),
                    pos: find_key(&spec.source_text, &["name"]),
                    message: format!(
                        "duplicate spec name `{}`: already used by {} (names key the baselines and must be unique)",
                        spec.name,
                        first.display()
                    ),
                });
                break;
            }
            seen.insert(spec.name.clone(), f.clone());
            specs.push(spec);
        }
    }
    (specs, errors)
}

/// The specs of one file, sweeps expanded, without reading their `cuda:` sources: for a
/// process that runs a built-in side of specs already loaded and checked by the one that
/// started it, from a copy of the file whose kernel sources are not beside it.
pub fn load_expanded(path: &Path) -> Result<Vec<Spec>> {
    load(path).and_then(expand)
}

/// Checks every `cuda:` implementation of `specs` (one file's, sweep points included) against
/// its source file, which is read here: a kernel that cannot be launched as written is a spec
/// error at `check` time, not a failure on the GPU.
fn check_kernel_sources(specs: Vec<Spec>) -> Result<Vec<Spec>> {
    for spec in &specs {
        for (side, implementation) in [
            ("before", &spec.implementations.before),
            ("after", &spec.implementations.after),
        ] {
            let Some(Implementation::Cuda(src)) = implementation else {
                continue;
            };
            let located = |key: &str, element: Option<&str>, message: String| {
                let mut keys = vec!["variants", side, "cuda"];
                if !key.is_empty() {
                    keys.push(key);
                }
                Error::Spec {
                    path: spec.file.clone(),
                    pos: match element {
                        Some(e) => locate::find_element(&spec.source_text, &keys, e),
                        None => find_key(&spec.source_text, &keys),
                    },
                    message: format!("variants.{side}.cuda: {message}"),
                }
            };
            let err = |message: String| located("source", None, message);
            let path = spec.dir().join(&src.source);
            let bytes = crate::files::read_regular(&path, 16 << 20, "CUDA source")
                .map_err(|e| err(e.to_string()))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| err(format!("{}: not UTF-8 text", path.display())))?;
            let point = spec
                .point
                .as_ref()
                .map(|p| format!(" (at sweep point {})", p.label))
                .unwrap_or_default();
            kernel_source::check(spec, side, src, &text).map_err(|e| {
                located(
                    e.key,
                    e.element.as_deref(),
                    format!("{}: {}{point}", src.source, e.message),
                )
            })?;
        }
    }
    Ok(specs)
}

/// The spec files a path names: the file itself, or a directory's `*.yaml`/`*.yml` in name
/// order. A link among them that leads nowhere (dangling, or a loop) is an error, not skipped.
fn spec_files_in(p: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(p).map_err(|e| Error::io("reading", p, e))?;
    if !meta.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(p).map_err(|e| Error::io("listing", p, e))? {
        let f = entry.map_err(|e| Error::io("listing", p, e))?.path();
        if !matches!(f.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")) {
            continue;
        }
        match std::fs::metadata(&f) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => found.push(f),
            Err(e) => {
                return Err(Error::Refused {
                    message: format!(
                        "a spec file that cannot be opened ({e}): a dangling or looping symbolic link? Remove it or point it at a spec"
                    ),
                    path: f,
                })
            }
        }
    }
    found.sort();
    if found.is_empty() {
        return Err(Error::NoSpecs {
            folder: Some(p.to_path_buf()),
        });
    }
    Ok(found)
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
        let workload = raw.validate().map_err(|e| Error::Spec {
            path: spec.file.clone(),
            pos: find_key(&spec.source_text, &e.key_path()),
            message: format!("at sweep point {label}: {}", e.message),
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
        // The point's sizes with counts_sizes over them must make a workload too.
        s.counted()?;
        out.push(s);
    }
    Ok(out)
}

/// Reads and validates one spec file.
pub fn load(path: &Path) -> Result<Spec> {
    let bytes = crate::files::read_regular(path, crate::files::MAX_SPEC_BYTES, "spec")?;
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
    // A byte-order mark is not part of the YAML (editors on some systems write one).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if let Some((pos, message)) = prescan(text) {
        return Err(err(Some(pos), message));
    }
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

/// Deepest nesting a spec may have (flow brackets, or sequence markers on one line). A spec
/// needs five levels; the limit keeps a hostile file from making the parser work for minutes.
pub const MAX_NESTING: usize = 64;
/// Widest indentation accepted, in columns (block nesting is bounded by it).
pub const MAX_INDENT: usize = 256;

/// What the YAML parser would either choke on or locate badly, found with its position before
/// parsing: control characters, nesting deeper than [`MAX_NESTING`], and a second document.
#[expect(
    clippy::too_many_lines,
    reason = "one scanner over the text with its quote and nesting state"
)]
fn prescan(text: &str) -> Option<(Position, String)> {
    let mut seen_content = false;
    let mut flow = 0usize;
    let (mut in_single, mut in_double) = (false, false);
    for (li, line) in text.split_inclusive('\n').enumerate() {
        let pos = |byte: usize| Position {
            line: li + 1,
            column: line[..byte].chars().count() + 1,
        };
        if let Some((i, c)) = line
            .char_indices()
            .find(|&(_, c)| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\u{85}'))
        {
            return Some((
                pos(i),
                format!(
                    "control character U+{:04X} is not allowed in a spec (YAML text has none)",
                    c as u32
                ),
            ));
        }
        let body = line.trim_end_matches(['\n', '\r']);
        let at_doc_marker = |m: &str| {
            body.strip_prefix(m)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
        };
        if !in_single && !in_double && flow == 0 {
            if at_doc_marker("---") && seen_content {
                return Some((
                    pos(0),
                    "a second YAML document starts here; a spec file holds one document (split it into two files)".into(),
                ));
            }
            let indent = body.len() - body.trim_start_matches(' ').len();
            if indent > MAX_INDENT {
                return Some((
                    pos(0),
                    format!(
                        "indented {indent} columns; more than the {MAX_INDENT} a spec may nest"
                    ),
                ));
            }
        }
        let trimmed = body.trim_start();
        if !trimmed.is_empty() && !trimmed.starts_with('#') && !at_doc_marker("---") {
            seen_content = true;
        }
        // Flow brackets and sequence markers outside quotes and comments.
        let mut markers = 0usize;
        let mut scalar_start = true;
        let mut prev = ' ';
        let mut chars = body.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if in_double {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => in_double = false,
                    _ => {}
                }
                prev = c;
                continue;
            }
            if in_single {
                if c == '\'' {
                    if chars.peek().is_some_and(|&(_, n)| n == '\'') {
                        chars.next();
                    } else {
                        in_single = false;
                    }
                }
                prev = c;
                continue;
            }
            match c {
                '#' if prev == ' ' || prev == '\t' || i == 0 => break,
                '"' if scalar_start => in_double = true,
                '\'' if scalar_start => in_single = true,
                '[' | '{' if scalar_start || flow > 0 => {
                    flow += 1;
                    if flow > MAX_NESTING {
                        return Some((
                            pos(i),
                            format!(
                                "nested more than {MAX_NESTING} levels deep; a spec needs a few"
                            ),
                        ));
                    }
                }
                ']' | '}' if flow > 0 => flow -= 1,
                '-' | '?'
                    if scalar_start && chars.peek().is_none_or(|&(_, n)| n == ' ' || n == '\t') =>
                {
                    markers += 1;
                    if markers > MAX_NESTING {
                        return Some((
                            pos(i),
                            format!(
                                "nested more than {MAX_NESTING} levels deep; a spec needs a few"
                            ),
                        ));
                    }
                }
                _ => {}
            }
            if !(c == ' ' || c == '\t') {
                scalar_start = matches!(c, '[' | '{' | ',' | ':' | '-' | '?');
            }
            prev = c;
        }
    }
    None
}

/// serde_yaml appends " at line L column C" to its messages; we print the location in front, as
/// compilers do, so the suffix is dropped.
/// Rust type names that serde falls back to ("expected struct X") are replaced by what a spec
/// author writes.
fn clean_yaml_message(msg: &str) -> String {
    let msg = match msg.rfind(" at line ") {
        Some(i) if msg[i..].contains(" column ") => &msg[..i],
        _ => msg,
    };
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest
        .find("expected struct ")
        .or_else(|| rest.find("expected enum "))
    {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let is_struct = after.starts_with("expected struct ");
        let name_start = if is_struct { 16 } else { 14 };
        let name_len = after[name_start..]
            .find(|c: char| !c.is_alphanumeric())
            .unwrap_or(after.len() - name_start);
        out.push_str(if is_struct {
            "expected a mapping"
        } else {
            "expected one of its names"
        });
        rest = &after[name_start + name_len..];
    }
    out.push_str(rest);
    // serde_yaml's wording for an enum given a collection.
    out.replace(
        "expected a YAML tag starting with '!'",
        "expected a plain name",
    )
}

#[cfg(test)]
mod tests;
