//! Functions over 100 lines, found on the source: outside the kernels every one must be named in
//! docs/contributing.md's table with why it is whole, and every function the table names must
//! still be that long — so the table can neither miss one nor keep a stale row.

mod common;
use common::{contributing_section, rust_files};
use std::path::Path;

/// Longest a function may be without a row in the table.
const MAX_LINES: usize = 100;

/// Folders of kernels: loops unrolled per SIMD level and tiles, long by nature.
const KERNELS: &[&str] = &["src/backend/cpu/", "src/backend/cuda/kernels/"];

/// The text with comments, strings and character literals blanked (their braces do not count),
/// lines kept.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                if b[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_ident(&b, i) {
            // A raw string: r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == '#' {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                if b[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if b.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('{', '\n', '\''), not a lifetime ('a).
            let close = if next == Some('\\') {
                (i + 2..(i + 12).min(b.len())).find(|&j| b[j] == '\'')
            } else {
                (b.get(i + 2) == Some(&'\'')).then_some(i + 2)
            };
            match close {
                Some(j) => i = j + 1,
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// Each function of a file: (name, lines from `fn` to its closing brace).
fn functions(text: &str) -> Vec<(String, usize)> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let Some(pos) = t.find("fn ") else { continue };
        let head = &t[..pos];
        let is_fn = head.split_whitespace().all(|w| {
            [
                "pub",
                "pub(crate)",
                "pub(super)",
                "async",
                "unsafe",
                "const",
                "extern",
                "\"C\"",
            ]
            .contains(&w)
        });
        if !is_fn {
            continue;
        }
        let name: String = t[pos + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // From the line of `fn` to the brace that closes its body (a declaration without a body
        // ends at `;` first).
        let mut depth = 0i32;
        let mut opened = false;
        let mut end = None;
        'scan: for (k, l) in lines.iter().enumerate().skip(start) {
            for ch in l.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => {
                        depth -= 1;
                        if opened && depth == 0 {
                            end = Some(k);
                            break 'scan;
                        }
                    }
                    ';' if !opened => break 'scan,
                    _ => {}
                }
            }
        }
        if let Some(end) = end {
            out.push((name, end - start + 1));
        }
    }
    out
}

/// The function names of the contributing guide's table of long functions.
fn documented() -> Vec<String> {
    let section = contributing_section("Long functions");
    let mut names = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let first = line.split('|').nth(1).unwrap_or("");
        for part in first.split('`').skip(1).step_by(2) {
            // `module::Type::method` is found as `module::method`: the scanner reads no impls.
            let path: Vec<&str> = part
                .split("::")
                .filter(|seg| !seg.starts_with(|c: char| c.is_ascii_uppercase()))
                .collect();
            names.push(path.join("::"));
        }
    }
    names
}

fn long_functions(root: &Path) -> Vec<(String, usize)> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut out = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .to_string();
        if KERNELS.iter().any(|k| rel.starts_with(k)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Tests may be long: a table of cases reads best whole.
        let code = text.split("#[cfg(test)]").next().unwrap();
        let module = rel
            .trim_start_matches("src/")
            .trim_end_matches(".rs")
            .trim_end_matches("/mod")
            .replace('/', "::");
        for (name, n) in functions(code) {
            if n > MAX_LINES {
                out.push((format!("{module}::{name}"), n));
            }
        }
    }
    out
}

#[test]
fn every_long_function_outside_the_kernels_says_why_it_is_whole() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let long = long_functions(root);
    let doc = documented();
    let missing: Vec<String> = long
        .iter()
        .filter(|(name, _)| !doc.iter().any(|d| name.ends_with(d.as_str())))
        .map(|(name, n)| format!("{name} ({n} lines)"))
        .collect();
    assert!(
        missing.is_empty(),
        "functions over {MAX_LINES} lines without a row in docs/contributing.md's table (split them, or say why each is whole): {missing:#?}"
    );
    let stale: Vec<&String> = doc
        .iter()
        .filter(|d| !long.iter().any(|(name, _)| name.ends_with(d.as_str())))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/contributing.md's table names functions no longer over {MAX_LINES} lines: {stale:?}"
    );
}

#[test]
fn the_scanner_counts_a_body_and_ignores_braces_in_strings() {
    let text = "fn a() {\n    let s = \"}}}\";\n    let c = '{';\n    // }\n}\nfn b<'x>(v: &'x str) -> &'x str {\n    v\n}\n";
    let f = functions(text);
    assert_eq!(f, vec![("a".to_string(), 5), ("b".to_string(), 3)]);
}
