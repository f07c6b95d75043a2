//! Unit tests of spec parsing; the fixture corpus of bad specs is driven through the binary in
//! `tests/spec_errors.rs`.

use super::*;
use std::path::Path;

const GOOD: &str = "name: fuse-bias-gelu
title: Fuse bias-add and GELU
checklist: [fusion, roofline, fusion]
workload:
  kind: elementwise
  ops: [bias_add, gelu]
  rows: 8192
  cols: 4096
  dtype: f32
variants: {before: unfused, after: fused}
expect:
  bound: bandwidth
  io_saving: {min: 0.40}
  time_saving: {min: 0.25, max: 0.75}
  tolerance: {rtol: 1.0e-5, atol: 1.0e-6}
gate: {max_regression: 0.10}
";

fn parse_str(text: &str) -> Result<Spec> {
    parse(Path::new("t.yaml"), text.as_bytes())
}

fn err_of(text: &str) -> (Option<Position>, String) {
    match parse_str(text) {
        Err(Error::Spec { pos, message, .. }) => (pos, message),
        other => panic!("expected a spec error, got {other:?}"),
    }
}

#[test]
fn parses_the_issue_example() {
    let s = parse_str(GOOD).unwrap();
    assert_eq!(s.name, "fuse-bias-gelu");
    assert_eq!(
        s.checklist,
        vec![ChecklistItem::Roofline, ChecklistItem::Fusion]
    );
    let Workload::Elementwise(e) = &s.workload else {
        panic!("elementwise expected")
    };
    assert_eq!(e.ops, vec![ElemOp::BiasAdd, ElemOp::Gelu]);
    assert_eq!((e.rows, e.cols, e.elements()), (8192, 4096, 8192 * 4096));
    assert_eq!(e.scale, 0.5);
    assert_eq!(s.variants.before, Variant::Unfused);
    assert_eq!(s.expect.time_saving.unwrap().max(), Some(0.75));
    assert_eq!(s.gate.max_regression.0, 0.10);
    assert_eq!(s.file, Path::new("t.yaml"));
}

#[test]
fn defaults_apply() {
    let t = GOOD
        .replace("gate: {max_regression: 0.10}\n", "")
        .replace("  dtype: f32\n", "");
    let s = parse_str(&t).unwrap();
    assert_eq!(s.gate.max_regression.0, 0.10);
    let Workload::Elementwise(e) = &s.workload else {
        panic!("elementwise expected")
    };
    assert_eq!(e.dtype, DType::F32);
}

#[test]
fn value_errors_point_at_the_value() {
    let (pos, msg) = err_of(&GOOD.replace("rows: 8192", "rows: 0"));
    assert_eq!(pos, Some(Position { line: 7, column: 9 }));
    assert!(msg.contains("invalid size 0"), "{msg}");
    let (pos, msg) = err_of(&GOOD.replace("atol: 1.0e-6", "atol: -1"));
    assert_eq!(pos.map(|p| p.line), Some(15));
    assert!(msg.contains("finite number >= 0"), "{msg}");
}

#[test]
fn cross_field_errors_point_at_the_key() {
    let (pos, msg) = err_of(&GOOD.replace("max: 0.75", "max: 0.1"));
    assert_eq!(
        pos,
        Some(Position {
            line: 14,
            column: 3
        })
    );
    assert!(msg.contains("min 0.25 is greater than max 0.1"), "{msg}");
    let (pos, msg) = err_of(&GOOD.replace("max_regression: 0.10", "max_regression: 0"));
    assert_eq!(pos.map(|p| p.line), Some(16));
    assert!(msg.contains("max_regression"), "{msg}");
    let (_, msg) = err_of(&GOOD.replace("io_saving: {min: 0.40}", "io_saving: {min: 1.5}"));
    assert!(msg.contains("not a saving"), "{msg}");
}

#[test]
fn names_cannot_escape() {
    for bad in ["../x", "a/b", "A", "-a", "a.b", ""] {
        let (_, msg) = err_of(&GOOD.replace("name: fuse-bias-gelu", &format!("name: \"{bad}\"")));
        assert!(msg.contains("invalid spec name"), "{bad}: {msg}");
    }
}

/// Mutation fuzzing of the parser and validator: thousands of damaged variants of a valid spec
/// (bytes replaced, spans deleted or duplicated, YAML syntax inserted) must each give `Ok` or a
/// located error naming the file — never a panic.
#[test]
fn mutated_specs_never_panic() {
    const TOKENS: &[&str] = &[
        ":",
        "-",
        "[",
        "]",
        "{",
        "}",
        ",",
        "&a ",
        "*a",
        "<<: *a",
        "!!str ",
        "!!binary ",
        "\t",
        "\n",
        "  ",
        "#",
        "'",
        "\"",
        "%YAML 1.2\n",
        "---\n",
        "...",
        "~",
        ".nan",
        "-.inf",
        "1e999",
        "-1",
        "0",
        "99999999999999999999",
        "\u{feff}",
        "\0",
        "\u{00e9}",
    ];
    let mut rng = crate::rng::Rng::new(2024);
    let mut errors = 0;
    for _ in 0..3000 {
        let mut bytes = GOOD.as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len() + 1);
            match rng.below(4) {
                0 if at < bytes.len() => bytes[at] = rng.next_u64() as u8,
                1 => {
                    let end = (at + rng.below(40)).min(bytes.len());
                    bytes.drain(at..end);
                }
                2 => {
                    let end = (at + rng.below(60)).min(bytes.len());
                    let span = bytes[at..end].to_vec();
                    bytes.splice(at..at, span);
                }
                _ => {
                    let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                    bytes.splice(at..at, t.iter().copied());
                }
            }
        }
        match parse(Path::new("t.yaml"), &bytes) {
            Ok(s) => assert!(!s.name.is_empty()),
            Err(e) => {
                errors += 1;
                assert!(e.to_string().starts_with("t.yaml"), "{e}");
            }
        }
    }
    // The mutations do damage: most variants are refused.
    assert!(
        errors > 1500,
        "only {errors} of 3000 mutations were refused"
    );
}

#[test]
fn sweeps_expand_into_named_points_with_their_claims() {
    let t = GOOD
        .replace("gate: {max_regression: 0.10}\n", "gate: {max_regression: 0.10}\nsweep:\n  rows: [128, 256]\n")
        .replace(
            "  tolerance: {rtol: 1.0e-5, atol: 1.0e-6}\n",
            "  tolerance: {rtol: 1.0e-5, atol: 1.0e-6}\n  points:\n    rows=256: {io_saving: {min: 0.1}}\n",
        );
    let specs = expand(parse_str(&t).unwrap()).unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["fuse-bias-gelu--rows-128", "fuse-bias-gelu--rows-256"]
    );
    let rows = |s: &Spec| match &s.workload {
        Workload::Elementwise(e) => e.rows,
        _ => 0,
    };
    assert_eq!((rows(&specs[0]), rows(&specs[1])), (128, 256));
    assert_eq!(specs[0].expect.io_saving.unwrap().min(), Some(0.40));
    assert_eq!(specs[1].expect.io_saving.unwrap().min(), Some(0.1));
    assert_eq!(specs[1].point.as_ref().unwrap().label, "rows=256");
    assert_eq!(specs[1].point.as_ref().unwrap().group, "fuse-bias-gelu");
}

#[test]
fn bad_sweeps_are_located_errors() {
    let (pos, msg) = err_of(&GOOD.replace(
        "gate: {max_regression: 0.10}\n",
        "gate: {max_regression: 0.10}\nsweep:\n  eps: [1]\n",
    ));
    assert_eq!(pos.map(|p| p.line), Some(18));
    assert!(
        msg.contains("sweep.eps: not a sweepable workload parameter"),
        "{msg}"
    );
    let (_, msg) = err_of(&GOOD.replace(
        "  tolerance: {rtol: 1.0e-5, atol: 1.0e-6}\n",
        "  tolerance: {rtol: 1.0e-5, atol: 1.0e-6}\n  points:\n    rows=3: {io_saving: {min: 0.1}}\n",
    ));
    assert!(msg.contains("expect.points needs a `sweep`"), "{msg}");
    // A point whose workload is invalid is refused at expansion, naming the point.
    let t = GOOD.replace(
        "gate: {max_regression: 0.10}\n",
        "gate: {max_regression: 0.10}\nsweep:\n  rows: [4194305]\n",
    );
    let e = expand(parse_str(&t).unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("at sweep point rows=4194305") && e.contains("exceeds the limit"),
        "{e}"
    );
}
