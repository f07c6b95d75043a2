//! The crates and their order, checked against the workspace itself: `cargo metadata` names each
//! crate and the crates it depends on, and docs/contributing.md's table of crates must list the
//! same ones, each after every crate it depends on (the compiler refuses a cycle between crates;
//! this keeps the guide's account of them true). Also: no file outside the device model and the
//! backends decides by backend, and no tracked file is over 1 MiB.

use crate::common;
use common::{contributing_section, rust_files};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `cargo metadata --format-version 1 --offline` with `extra`, parsed.
fn cargo_metadata(extra: &[&str]) -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = std::process::Command::new(cargo)
        .current_dir(root())
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(extra)
        .output()
        .expect("cargo metadata runs");
    assert!(
        o.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Each workspace crate with the workspace crates it depends on (normal dependencies), from
/// `cargo metadata`.
fn workspace_crates() -> BTreeMap<String, BTreeSet<String>> {
    let meta = cargo_metadata(&["--no-deps"]);
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|d| names.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// The rows `| `crate` | `dep`, `dep` | why |` of the guide's table of crates, in order.
fn guide_rows() -> Vec<(String, BTreeSet<String>)> {
    let section = contributing_section("The crates");
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            if !name.starts_with("opledger") {
                return None;
            }
            let deps = cells[2]
                .split(',')
                .map(|d| d.trim().trim_matches('`').to_string())
                .filter(|d| !d.is_empty() && d != "—")
                .collect();
            Some((name.to_string(), deps))
        })
        .collect()
}

#[test]
fn the_guide_lists_every_crate_after_the_crates_it_depends_on() {
    let crates = workspace_crates();
    let rows = guide_rows();
    let listed: BTreeSet<String> = rows.iter().map(|(n, _)| n.clone()).collect();
    let actual: BTreeSet<String> = crates.keys().cloned().collect();
    assert_eq!(
        listed, actual,
        "docs/contributing.md's table of crates differs from the workspace's crates"
    );
    let mut above = BTreeSet::new();
    for (name, deps) in &rows {
        assert_eq!(
            deps, &crates[name],
            "docs/contributing.md: the dependencies of `{name}` differ from its Cargo.toml"
        );
        for d in deps {
            assert!(
                above.contains(d),
                "docs/contributing.md lists `{name}` before `{d}`, which it depends on"
            );
        }
        above.insert(name.clone());
    }
}

#[test]
fn the_checker_sees_a_crate_listed_before_its_dependency() {
    // The order rule itself, on a made-up table: `b` depends on `a` but comes first.
    let rows = [
        ("b", BTreeSet::from(["a".to_string()])),
        ("a", BTreeSet::new()),
    ];
    let mut above = BTreeSet::new();
    let mut wrong = Vec::new();
    for (name, deps) in &rows {
        wrong.extend(deps.iter().filter(|d| !above.contains(*d)).cloned());
        above.insert(name.to_string());
    }
    assert_eq!(wrong, vec!["a".to_string()]);
}

/// Files outside the device model and the backends that may name a backend by its variant: a
/// feature of one backend by nature, each with why. Every other per-backend decision is a method
/// of `DeviceKind` or of the backend, so a new backend is its folder plus the arms the build
/// lists.
const ONE_BACKEND_FEATURES: &[(&str, &str)] = &[
    ("src/cli/mod.rs", "the default of `ledger --tiling`"),
    (
        "crates/measure/src/counts/valgrind.rs",
        "counts mode runs the CPU backend's kernels under Valgrind",
    ),
    (
        "crates/measure/src/counts/nsight.rs",
        "a GPU's counts are read by Nsight Compute from the CUDA backend's kernels",
    ),
    (
        "src/commands/counters/profile.rs",
        "Nsight Compute profiles the CUDA backend's kernels",
    ),
];

/// Where a backend may be named: the device model (`DeviceKind` itself) and the backends.
const BACKEND_PLACES: &[&str] = &[
    "crates/model/src/device/",
    "crates/backend/src/",
    "crates/cpu/src/",
];

/// The variants of `DeviceKind`, read from its definition.
fn device_kinds() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("crates/model/src/device/mod.rs")).unwrap();
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
    let kinds = device_kinds();
    assert!(kinds.len() >= 2, "{kinds:?}");
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    rust_files(&root().join("crates"), &mut files);
    let mut deciding = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .to_string();
        if BACKEND_PLACES.iter().any(|p| rel.starts_with(p)) || rel.ends_with("build.rs") {
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
        "these files decide by backend; make the decision a method of DeviceKind (crates/model/src/device/mod.rs) or of the backend: {deciding:?}"
    );
    // The contributing guide's edit list for a new backend names the same places.
    let section = contributing_section("A backend");
    for place in [
        "crates/model/src/device/mod.rs",
        "crates/backend/src/lib.rs",
    ]
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

/// The test binaries besides `tests/main.rs`: files of `tests/` that are a test of their own.
const OWN_BINARIES: &[&str] = &["workers"];

/// The test modules `tests/main.rs` declares, and the binaries of their own.
fn test_modules() -> BTreeSet<String> {
    let main = std::fs::read_to_string(root().join("tests/main.rs")).unwrap();
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    for own in OWN_BINARIES {
        assert!(
            manifest.contains(&format!("path = \"tests/{own}.rs\"")),
            "tests/{own}.rs is not a [[test]] of Cargo.toml"
        );
    }
    main.lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .filter(|m| *m != "common")
        .chain(OWN_BINARIES.iter().copied())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_guide_lists_every_test_module_and_no_other() {
    let section = contributing_section("Tests");
    // The first cell of each row of the table: `tests/a.rs`, `tests/b.rs`.
    let listed: BTreeSet<String> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `tests/"))
        .flat_map(|rest| {
            let cell = rest.split(" |").next().unwrap_or("");
            format!("`tests/{cell}")
                .split(", ")
                .filter_map(|f| f.strip_prefix("`tests/")?.strip_suffix(".rs`"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let modules = test_modules();
    assert_eq!(
        listed, modules,
        "docs/contributing.md's table of tests differs from the modules of tests/main.rs"
    );
    // Every file of tests/ is a module (a file left out would never be compiled or run).
    for entry in std::fs::read_dir(root().join("tests")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            assert!(
                stem == "main" || modules.contains(&stem),
                "tests/{stem}.rs is not a module of tests/main.rs, so it never runs"
            );
        }
    }
}

#[test]
fn the_files_a_new_kind_touches_are_those_the_last_kind_touched() {
    // The guide's list, with `<kind>` read as the last kind added the way it describes.
    let section = contributing_section("A workload kind");
    let list = section
        .split("### The files a new kind touches")
        .nth(1)
        .expect("the guide lists the files a new kind touches");
    let mut checked = 0;
    for path in list.split('`').skip(1).step_by(2) {
        if !(path.starts_with("crates/") || path.starts_with("tests/") || path.starts_with("src/"))
            || path.contains(' ')
        {
            continue;
        }
        let path = path.replace("<kind>", "add_rmsnorm");
        let path = path.replace("tiny-add_rmsnorm", "tiny-add-rmsnorm");
        assert!(
            root().join(&path).exists(),
            "docs/contributing.md names `{path}`, which does not exist"
        );
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} paths found in the list");
}

/// The crates named in the root Cargo.toml's `[profile.release.package.<name>]` tables.
fn unoptimised_crates() -> BTreeSet<String> {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    toml.lines()
        .filter_map(|l| l.trim().strip_prefix("[profile.release.package."))
        .map(|l| l.trim_end_matches(']').trim_matches('"').to_string())
        .collect()
}

/// Every package the workspace's libraries and binary need at run time: reached from a
/// workspace crate through normal dependencies only (not dev, not build), from `cargo metadata`.
fn runtime_crates(meta: &serde_json::Value) -> BTreeSet<String> {
    let nodes = meta["resolve"]["nodes"].as_array().unwrap();
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut todo: Vec<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        let node = nodes.iter().find(|n| n["id"] == id).unwrap();
        for dep in node["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            if normal {
                todo.push(dep["pkg"].as_str().unwrap());
            }
        }
    }
    seen.iter().map(|id| name_of[id].to_string()).collect()
}

/// The platform the tests run on, as `rustc -vV` names it (`x86_64-unknown-linux-gnu`).
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let o = std::process::Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names its host")
        .trim()
        .to_string()
}

#[test]
fn crates_built_without_optimisation_are_the_tests_alone() {
    // This platform's packages only: offline, another platform's (a Windows console crate) may
    // never have been downloaded.
    let meta = cargo_metadata(&["--filter-platform", &host_triple()]);
    let all: BTreeSet<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let unoptimised = unoptimised_crates();
    assert!(unoptimised.contains("jsonschema"), "{unoptimised:?}");
    let runtime = runtime_crates(&meta);
    assert!(runtime.contains("serde_json") && runtime.contains("rusqlite"));
    for name in &unoptimised {
        assert!(
            all.contains(name.as_str()),
            "Cargo.toml builds `{name}` without optimisation, but nothing depends on it any more"
        );
        assert!(
            !runtime.contains(name),
            "`{name}` is built without optimisation for the tests, but the binary now depends on it: remove its [profile.release.package.{name}] table"
        );
    }
}
