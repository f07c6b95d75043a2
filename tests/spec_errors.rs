//! Bad input through the real binary: every bad spec fixture with its location and reason,
//! duplicate names, bad flags, sizes refused before allocating, and specs a backend cannot run.

use crate::common;
use common::{bin, fixture, only_run_dir, run_cmd, run_in, text};
use std::path::Path;

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "the table of bad-spec fixtures with their expected positions and messages, read in one loop"
)]
fn every_bad_spec_fixture_exits_2_with_file_location_and_reason() {
    // (fixture, expected position "line:col" or "" when the file has none, expected message part)
    let cases = [
        (
            "alias-bomb.yaml",
            "3:8",
            "invalid type: sequence, expected a string",
        ),
        ("empty-ops.yaml", "5:3", "workload.ops is empty"),
        ("empty.yaml", "", "the file is empty"),
        (
            "min-above-max.yaml",
            "11:3",
            "min 0.8 is greater than max 0.2",
        ),
        ("missing-ops.yaml", "4:3", "`ops` is missing"),
        (
            "key-of-other-kind.yaml",
            "6:3",
            "workload.m does not apply to kind rmsnorm",
        ),
        (
            "one-op-chain.yaml",
            "5:3",
            "workload.n_ops 1: expected 2 to 100000",
        ),
        (
            "wrong-variant-for-kind.yaml",
            "8:27",
            "variant `fused` does not apply to workload kind gemm; expected one of: naive, tiled",
        ),
        ("name-chars.yaml", "1:7", "invalid spec name \"Bad_Name\""),
        (
            "name-escapes.yaml",
            "1:7",
            "invalid spec name \"../../etc\"",
        ),
        (
            "nan-tolerance.yaml",
            "11:21",
            "expected a finite number >= 0",
        ),
        ("negative-size.yaml", "7:9", "invalid size -5"),
        ("non-utf8.yaml", "2:12", "not valid UTF-8"),
        ("overflow.yaml", "7:3", "exceeds the limit"),
        ("same-variants.yaml", "8:1", "are the same"),
        (
            "syntax-error.yaml",
            "12:1",
            "while scanning a quoted scalar",
        ),
        ("tab-indent.yaml", "4:1", "cannot start any token"),
        ("unknown-key.yaml", "7:3", "unknown field `colz`"),
        ("unknown-kind.yaml", "4:9", "unknown variant `convolution`"),
        ("unknown-op.yaml", "5:19", "unknown variant `tanh`"),
        (
            "wrong-type.yaml",
            "6:9",
            "invalid type: string \"many\", expected a whole number >= 1",
        ),
        ("zero-size.yaml", "6:9", "invalid size 0"),
        (
            "counts-sizes-unknown-key.yaml",
            "13:3",
            "measure.counts_sizes: workload.seq_len does not apply to kind elementwise",
        ),
        ("counts-sizes-zero.yaml", "13:24", "invalid size 0"),
        (
            "counts-cache-model-bad.yaml",
            "13:3",
            "measure.counts_cache_model: \"LL=1000000,16,64\": the size must be ways x line x a power-of-two number of sets",
        ),
        (
            "command-an-option.yaml",
            "8:5",
            "the program \"--LL=65536,16,64\" starts with `-`: give the program first",
        ),
        (
            "bf16-not-attention.yaml",
            "8:3",
            "workload.dtype bf16 is supported for kind attention only",
        ),
    ];
    let listed: Vec<&str> = cases.iter().map(|c| c.0).collect();
    for entry in std::fs::read_dir(fixture("bad")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            listed.contains(&name.as_str()),
            "fixture {name} has no expectation"
        );
    }
    for (file, pos, msg) in cases {
        let path = fixture(&format!("bad/{file}"));
        for cmd in ["check", "run"] {
            let o = bin().arg(cmd).arg(&path).output().unwrap();
            let out = text(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd} {file}: {out}");
            let located = if pos.is_empty() {
                format!("{}: ", path.display())
            } else {
                format!("{}:{pos}: ", path.display())
            };
            assert!(
                out.contains(&located),
                "{cmd} {file}: expected {located:?} in {out}"
            );
            assert!(out.contains(msg), "{cmd} {file}: expected {msg:?} in {out}");
            assert!(!out.contains("panicked"), "{out}");
        }
    }
}

#[test]
fn duplicate_names_across_files_exit_2() {
    let o = bin().arg("check").arg(fixture("dup")).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("duplicate spec name `twin`"),
        "{}",
        text(&o)
    );
}

#[test]
fn missing_file_and_bad_flags_exit_2() {
    let o = bin().args(["check", "no/such/spec.yaml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no/such/spec.yaml"), "{}", text(&o));
    let o = bin()
        .args(["run", "--min-pairs", "1"])
        .arg(fixture("good/tiny-chain.yaml"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = bin().args(["frobnicate"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn shipped_specs_are_valid() {
    let o = bin()
        .arg("check")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn absurd_sizes_are_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("huge.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(fixture("good/tiny-chain.yaml"))
            .unwrap()
            .replace("rows: 67", "rows: 16000000"),
    )
    .unwrap();
    let o = run_in(dir.path(), std::slice::from_ref(&spec), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("GiB of memory but only") && out.contains("huge.yaml:"),
        "{out}"
    );
}

#[test]
fn a_spec_the_backend_cannot_run_is_refused_by_check_and_run_before_anything_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bf16.yaml");
    std::fs::write(
        &spec,
        "name: bf16-attention\ntitle: bf16 on the CPU\nworkload: {kind: attention, batch: 1, heads: 1, seq_len: 64, head_dim: 128, dtype: bf16}\nvariants: {before: standard, after: flash}\nexpect: {bound: compute, tolerance: {rtol: 2.0e-2, atol: 5.0e-3}}\n",
    )
    .unwrap();
    let reason = "the cpu backend cannot run this workload: dtype bf16 runs on the CUDA backend";
    // Without a backend, check says where the spec can run.
    let o = bin().arg("check").arg(&spec).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("[cuda only]"), "{}", text(&o));
    // Naming the backend refuses it, located at the workload, with the reason.
    let o = bin()
        .args(["check", "--backend", "cpu"])
        .arg(&spec)
        .arg(fixture("good/tiny-chain.yaml"))
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains(&format!("{}:3:1: ", spec.display())), "{out}");
    assert!(out.contains(reason), "{out}");
    assert!(out.contains("1 spec valid"), "{out}");
    // run refuses it the same way, before any case is measured or any run folder written.
    let o = run_in(
        dir.path(),
        &[spec.clone(), fixture("good/tiny-chain.yaml")],
        &[],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains(reason), "{out}");
    assert!(!out.contains("probing ceilings"), "{out}");
    assert!(
        !dir.path().join("runs").exists()
            || std::fs::read_dir(dir.path().join("runs"))
                .unwrap()
                .next()
                .is_none()
    );
    // Picked by `auto` (no GPU here), the CPU fails that spec without measuring it and the run
    // goes on with the others.
    let o = run_in(
        dir.path(),
        &[spec, fixture("good/tiny-chain.yaml")],
        &["--backend", "auto"],
    );
    let out = text(&o);
    if out.contains("backend cuda") {
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{out}");
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(only_run_dir(dir.path()).join("results.json")).unwrap(),
    )
    .unwrap();
    let spec_result = |name: &str| {
        results["specs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap()
    };
    let bf16 = spec_result("bf16-attention");
    assert_eq!(bf16["status"], "fail");
    assert!(bf16["error"].as_str().unwrap().contains(reason), "{bf16}");
    assert!(bf16["samples"].is_null(), "not measured: {bf16}");
    assert_eq!(spec_result("tiny-chain")["status"], "pass");
}

#[test]
fn cuda_backend_request_exits_3_without_gpu_support() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--backend", "cuda"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("CUDA"), "{}", text(&o));
    assert!(
        !dir.path().join("runs").exists(),
        "nothing is measured or written"
    );
}

#[test]
fn experiment_slowdown_is_refused_when_malformed_and_announced_when_used() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    for bad in ["8.5", "-0.1", "ten"] {
        let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &[])
            .env("OPLEDGER_EXPERIMENT_SLOWDOWN", bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(
            text(&o).contains("expected a number of outputs computed again, between 0 and 8"),
            "{}",
            text(&o)
        );
    }
    let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &[])
        .env("OPLEDGER_EXPERIMENT_SLOWDOWN", "0.5")
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let run = only_run_dir(dir.path());
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(
        report.contains("made the fused variant compute 50% of its output twice"),
        "{report}"
    );
    let env = std::fs::read_to_string(run.join("environment.json")).unwrap();
    assert!(env.contains("OPLEDGER_EXPERIMENT_SLOWDOWN"), "{env}");
}

#[test]
fn a_misspelt_simd_cap_is_refused_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    for bad in ["avx-2", "AVX512", "sse"] {
        let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &[])
            .env("OPLEDGER_SIMD", bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(
            text(&o).contains("OPLEDGER_SIMD")
                && text(&o).contains("expected scalar, avx2, avx2-nofma, avx512 or native"),
            "{}",
            text(&o)
        );
        assert!(!dir.path().join("runs").exists(), "nothing measured");
    }
    for good in ["scalar", "avx2", "avx2-nofma", "native"] {
        let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &[])
            .env("OPLEDGER_SIMD", good)
            .output()
            .unwrap();
        assert!(common::passed_but_for_the_bound(&o), "{good}: {}", text(&o));
    }
    // The cap read at the start reaches the kernels and the device's identity.
    let runs = dir.path().join("runs");
    let scalar = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| std::fs::read_to_string(p.join("results.json")).unwrap())
        .filter(|r| r.contains("\"simd\": \"scalar\""))
        .count();
    assert_eq!(scalar, 1, "one run at the scalar level");
}

#[test]
fn an_empty_variable_is_unset_as_in_every_shell_convention() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &[])
        .env("OPLEDGER_SIMD", "")
        .env("OPLEDGER_EXPERIMENT_SLOWDOWN", "")
        .env("OPLEDGER_STORE", " ")
        .env("OPLEDGER_THREADS", "")
        .env("OPLEDGER_SHARD", "")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Unset, the store is the default one beside the runs.
    assert!(dir.path().join("runs/history.sqlite").exists());
}
