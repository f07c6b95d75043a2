//! The shipped JSON Schemas (`schemas/`): generated from opledger's types and kept in step with
//! them, accepting every shipped and test spec, refusing the bad fixtures a schema can see, and
//! describing the results.json a real run writes.

use crate::common;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_opledger"))
}

fn generated(which: &str) -> String {
    let o = bin().args(["schema", which]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    String::from_utf8(o.stdout).unwrap()
}

fn validator(which: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(root().join(format!("schemas/{which}.schema.json")))
        .expect("the schema is shipped");
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).expect("the schema itself is valid")
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    v
}

fn yaml_as_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Regenerate with `OPLEDGER_BLESS=1 cargo test --release --test integration schema::`.
#[test]
fn shipped_schemas_match_the_types() {
    for which in ["spec", "results", "worker"] {
        let path = root().join(format!("schemas/{which}.schema.json"));
        common::assert_golden(&path, &generated(which));
    }
}

#[test]
fn every_good_spec_validates_and_says_where_its_schema_is() {
    let v = validator("spec");
    let mut n = 0;
    for dir in [
        "specs",
        "specs/full",
        "specs/gpu",
        "tests/fixtures/good",
        "tests/fixtures/kinds",
        "examples/numpy",
        "examples/cuda",
        "examples/torch",
        "examples/triton",
    ] {
        for f in yaml_files(dir) {
            let doc = yaml_as_json(&f);
            let errors: Vec<String> = v.iter_errors(&doc).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{}: {errors:?}", f.display());
            n += 1;
            if dir.starts_with("specs") || dir.starts_with("examples") {
                let depth = dir.matches('/').count() + 1;
                let line = format!(
                    "# yaml-language-server: $schema={}schemas/spec.schema.json",
                    "../".repeat(depth)
                );
                let text = std::fs::read_to_string(&f).unwrap();
                assert!(text.starts_with(&line), "{} lacks `{line}`", f.display());
            }
        }
    }
    assert!(n >= 20, "only {n} specs checked");
}

#[test]
fn bad_fixtures_a_schema_can_see_are_refused() {
    let v = validator("spec");
    for name in [
        "key-of-other-kind",
        "missing-ops",
        "name-chars",
        "name-escapes",
        "negative-size",
        "unknown-key",
        "unknown-kind",
        "unknown-op",
        "wrong-type",
        "zero-size",
        "bf16-not-attention",
    ] {
        let doc = yaml_as_json(&root().join(format!("tests/fixtures/bad/{name}.yaml")));
        assert!(!v.is_valid(&doc), "{name} passes the schema");
    }
}

#[test]
fn results_of_a_real_run_and_the_fixed_archive_validate() {
    let v = validator("results");
    let fixed: Value = serde_json::from_slice(
        &std::fs::read(root().join("tests/fixtures/run-fixed/results.json")).unwrap(),
    )
    .unwrap();
    let errors: Vec<String> = v.iter_errors(&fixed).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "fixed archive: {errors:?}");

    let dir = tempfile::tempdir().unwrap();
    let o = bin()
        .env_remove("GITHUB_STEP_SUMMARY")
        .arg("run")
        .arg(root().join("tests/fixtures/good/tiny-chain.yaml"))
        .arg(root().join("tests/fixtures/kinds/tiny-launch.yaml"))
        .args(["--backend", "cpu", "--min-pairs", "3", "--max-pairs", "5"])
        .args([
            "--probe-mib",
            "8",
            "--flush-mib",
            "8",
            "--time-cap-secs",
            "2",
        ])
        .arg("--baselines")
        .arg(dir.path().join("b"))
        .arg("--runs-dir")
        .arg(dir.path().join("runs"))
        .output()
        .unwrap();
    assert!(o.status.code().is_some_and(|c| c <= 1), "{o:?}");
    let run = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let results: Value =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    let errors: Vec<String> = v.iter_errors(&results).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "fresh run: {errors:?}");
    // And a damaged one does not.
    let mut bad = results.clone();
    bad["specs"][0]["status"] = Value::from("maybe");
    assert!(!v.is_valid(&bad));
}

/// Every message the reference worker and opledger exchange in a real run is one the shipped
/// protocol schema accepts, and it refuses what the protocol does not allow.
#[test]
fn the_worker_protocol_schema_accepts_its_messages_and_refuses_others() {
    let v = validator("worker");
    for ok in [
        serde_json::json!({"op": "hello", "protocol": 1}),
        serde_json::json!({"op": "run", "id": "after", "count": 1, "cold": true}),
        serde_json::json!({"op": "output", "id": "before"}),
        serde_json::json!({"op": "shutdown"}),
        serde_json::json!({"ok": true, "protocol": 1, "worker": "w", "device": "cpu", "functions": ["f"]}),
        serde_json::json!({"ok": true, "secs": [0.001]}),
        serde_json::json!({"ok": false, "error": "boom"}),
    ] {
        assert!(v.is_valid(&ok), "{ok}");
    }
    for bad in [
        serde_json::json!({"op": "run", "id": "after"}),
        serde_json::json!({"op": "launch"}),
        serde_json::json!({"ok": true, "secs": "fast"}),
    ] {
        assert!(!v.is_valid(&bad), "{bad}");
    }
}
