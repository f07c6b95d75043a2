//! The module layers, checked on the source: each top-level module of `src/` may name (through
//! `crate::…`) only modules of its own layer or below, so the pipeline reads bottom to top and
//! no import runs back up into a cycle. A new module takes a place in `LAYERS`.

mod common;
use common::{contributing_section, rust_files};
use std::collections::BTreeMap;
use std::path::Path;

/// Bottom to top. Modules of one layer do not name each other.
const LAYERS: &[&[&str]] = &[
    &[
        "error",
        "values",
        "rng",
        "expr",
        "secret",
        "stop",
        "untrusted",
    ],
    &["settings"],
    &["files", "ledger"],
    &["kinds"],
    &["spec", "device"],
    &["shard"],
    &["backend"],
    &["measure"],
    &["verdict", "gate::stats"],
    &["gate::outcome"],
    &["gate::rule"],
    &["results"],
    &["baseline", "evidence", "provenance", "store"],
    &["gate"],
    &["report"],
    &["archive"],
    &["pipeline"],
    &["commands"],
    &["cli"],
    &["main"],
];

/// Files of a folder that sit below the folder's own layer, named `folder::file`: the gate's
/// statistics and findings are data that `results` holds, while the rest of the gate reads
/// baselines and the store above it. One folder, two floors.
fn sub_layered(folder: &str, file: &str) -> Option<String> {
    let name = format!("{folder}::{file}");
    LAYERS
        .iter()
        .any(|l| l.contains(&name.as_str()))
        .then_some(name)
}

/// Names reached as `crate::name` that are macros exported at the crate root, not modules.
const ROOT_MACROS: &[&str] = &["multiversion"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The top-level module a file of `src/` belongs to (`src/backend/cpu/gemm.rs` → `backend`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    let first = first.trim_end_matches(".rs").to_string();
    let second = rel.components().nth(1).map(|c| {
        c.as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string()
    });
    second
        .and_then(|f| sub_layered(&first, &f))
        .unwrap_or(first)
}

/// The modules a file names as `crate::name`.
fn named_modules(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && !ROOT_MACROS.contains(&name.as_str()) {
            let sub: String = rest[name.len()..]
                .strip_prefix("::")
                .unwrap_or("")
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push(sub_layered(&name, &sub).unwrap_or(name));
        }
    }
    out
}

#[test]
fn every_module_names_only_its_own_layer_or_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" {
            continue;
        }
        let Some(own) = layer_of(&module) else {
            panic!(
                "module `{module}` ({}) has no place in LAYERS",
                file.display()
            );
        };
        let text = std::fs::read_to_string(file).unwrap();
        for named in named_modules(&text) {
            let folder = |m: &str| m.split("::").next().unwrap_or("").to_string();
            if named == module
                || (folder(&named) == folder(&module) && layer_of(&named) <= layer_of(&module))
            {
                continue;
            }
            let Some(theirs) = layer_of(&named) else {
                panic!(
                    "{} names crate::{named}, which has no place in LAYERS",
                    file.display()
                );
            };
            if theirs >= own {
                wrong
                    .entry(file.display().to_string())
                    .or_default()
                    .push(format!(
                        "crate::{named} (layer {theirs}; this file's is {own})"
                    ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run sideways or up a layer:\n{wrong:#?}"
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(name) = line.strip_prefix("pub mod ") {
            let name = name.trim_end_matches(';');
            assert!(layer_of(name).is_some(), "module `{name}` has no layer");
        }
    }
}

#[test]
fn the_checker_sees_an_upward_import() {
    // A file of `kinds` naming the pipeline would be caught.
    let named = named_modules("use crate::pipeline::run;\nlet x = crate::multiversion!();");
    assert_eq!(named, vec!["pipeline".to_string()]);
    assert!(layer_of("pipeline").unwrap() > layer_of("kinds").unwrap());
    // The gate's statistics sit below `results`, the rest of the gate above it.
    let named = named_modules("use crate::gate::stats::Spread;\nuse crate::gate::judge;");
    assert_eq!(named, vec!["gate::stats".to_string(), "gate".to_string()]);
    assert!(layer_of("gate::stats").unwrap() < layer_of("results").unwrap());
    assert!(layer_of("gate").unwrap() > layer_of("results").unwrap());
}

#[test]
fn the_contributing_guide_lists_the_same_layers() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/contributing.md"))
            .unwrap();
    // Rows `| N | `a`, `b` | … |` of the layers table, in order.
    let mut rows: Vec<(usize, Vec<String>)> = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let Ok(n) = cells[1].parse::<usize>() else {
            continue;
        };
        let modules = cells[2]
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_string())
            .collect();
        rows.push((n, modules));
    }
    let want: Vec<(usize, Vec<String>)> = LAYERS
        .iter()
        .enumerate()
        .map(|(i, l)| (i, l.iter().map(|m| m.to_string()).collect()))
        .collect();
    assert_eq!(
        rows, want,
        "docs/contributing.md's layers table differs from LAYERS"
    );
}

/// Files outside `src/device/` and `src/backend/` that may name a backend by its variant: a
/// feature of one backend by nature, each with why. Every other per-backend decision is a method
/// of `DeviceKind` or of the backend, so a new backend is its folder plus the arms the build
/// lists.
const ONE_BACKEND_FEATURES: &[(&str, &str)] = &[
    ("src/cli.rs", "the default of `ledger --tiling`"),
    (
        "src/measure/counts/valgrind.rs",
        "counts mode runs the CPU backend's kernels under Valgrind",
    ),
    (
        "src/measure/counts/nsight.rs",
        "a GPU's counts are read by Nsight Compute from the CUDA backend's kernels",
    ),
    (
        "src/commands/counters/profile.rs",
        "Nsight Compute profiles the CUDA backend's kernels",
    ),
];

/// The variants of `DeviceKind`, read from its definition.
fn device_kinds(src: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(src.join("device/mod.rs")).unwrap();
    let body = text
        .split("pub enum DeviceKind {")
        .nth(1)
        .and_then(|b| b.split('}').next())
        .unwrap();
    body.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#') && !l.is_empty())
        .map(|l| l.trim_end_matches(',').to_string())
        .collect()
}

#[test]
fn every_per_backend_decision_is_a_method_of_the_device_kind() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let kinds = device_kinds(&src);
    assert!(kinds.len() >= 2, "{kinds:?}");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut deciding = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .to_string();
        if rel.starts_with("src/device/") || rel.starts_with("src/backend/") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        // Tests may name any backend.
        let code = text.split("#[cfg(test)]").next().unwrap();
        let names_one = kinds
            .iter()
            .any(|k| code.contains(&format!("DeviceKind::{k}")));
        if names_one && !ONE_BACKEND_FEATURES.iter().any(|(f, _)| *f == rel) {
            deciding.push(rel);
        }
    }
    assert!(
        deciding.is_empty(),
        "these files decide by backend; make the decision a method of DeviceKind (src/device/mod.rs) or of the backend: {deciding:?}"
    );
    // The contributing guide's edit list for a new backend names the same places.
    let section = contributing_section("A backend");
    for place in ["src/device/mod.rs", "src/backend/mod.rs"]
        .into_iter()
        .chain(ONE_BACKEND_FEATURES.iter().map(|(f, _)| *f))
    {
        assert!(
            section.contains(&format!("`{place}`")),
            "docs/contributing.md's backend section does not name `{place}`"
        );
    }
}

/// Files the repository may track over 1 MiB: fixtures that must be that large, each named
/// with why. Downloads and build outputs never belong in the repository.
const LARGE_FILES: &[&str] = &[];

/// No tracked file is over 1 MiB unless listed in [`LARGE_FILES`] (a wheel of another package,
/// a binary or a data set committed by mistake makes every clone pay for it).
#[test]
fn no_tracked_file_is_over_one_mib_unless_listed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Ok(o) = std::process::Command::new("git")
        .current_dir(root)
        .args(["ls-files", "-z"])
        .output()
    else {
        panic!("git cannot be run: the tracked files cannot be listed");
    };
    if !o.status.success() {
        // A source tree without its repository (a crate's package) tracks nothing.
        assert!(
            !root.join(".git").exists(),
            "git ls-files failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        return;
    }
    let large: Vec<String> = o
        .stdout
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .filter(|f| {
            std::fs::metadata(root.join(f)).is_ok_and(|m| m.len() > 1 << 20)
                && !LARGE_FILES.contains(&f.as_str())
        })
        .collect();
    assert!(
        large.is_empty(),
        "tracked files over 1 MiB (remove them, or list a needed fixture in LARGE_FILES): {large:?}"
    );
}
