//! Real (small) runs: the archive a run writes, claims judged, every kind correct on the CPU.

use crate::common;
use common::{fixture, only_run_dir, run_cmd, run_in, text};
use std::path::{Path, PathBuf};

#[test]
fn run_passes_writes_archive_and_round_trips_baselines() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    // Auto falls back to the CPU and says so.
    let o = run_in(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--backend", "auto"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("backend cpu (auto"), "{out}");
    let run = only_run_dir(dir.path());
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["schema_version"], 2);
    assert_eq!(results["verdict"]["status"], "PASS");
    let s = &results["specs"][0];
    assert_eq!(s["name"], "tiny-chain");
    assert_eq!(s["correctness"]["after_vs_before"]["checked"], 67 * 1031);
    assert_eq!(s["correctness"]["after_vs_before"]["mismatches"], 0);
    assert!(s["samples"]["before_secs"].as_array().unwrap().len() >= 3);
    assert_eq!(s["baseline"]["status"], "missing");
    assert!(results["ceilings"]["triad_bytes_per_sec"].as_f64().unwrap() > 0.0);
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(
        report.contains("## Delivery checklist") && report.contains("tiny-chain"),
        "{report}"
    );
    assert!(run.join("specs/tiny-chain.yaml").exists());
    // The spec's hash names the exact file measured; the manifest records the environment.
    let spec_bytes = std::fs::read(&spec).unwrap();
    let sha = s["spec_sha256"].as_str().unwrap();
    assert_eq!(sha.len(), 64);
    let env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("environment.json")).unwrap()).unwrap();
    assert_eq!(env["spec_files"][0]["sha256"], sha);
    assert_eq!(env["spec_files"][0]["bytes"], spec_bytes.len());
    assert_eq!(env["backend"], "cpu");
    assert!(env["command_line"].as_array().unwrap().len() > 2);
    assert!(env["cuda_driver"].as_str().unwrap().starts_with("none"));
    assert!(env["rustc"].as_str().unwrap().starts_with("rustc "));
    assert_eq!(env, results["environment"]);
    assert!(
        report.contains(&sha[..12]),
        "the report shows the spec hash"
    );
    roxmltree::Document::parse(&std::fs::read_to_string(run.join("roofline.svg")).unwrap())
        .expect("roofline.svg is XML");

    // Accept: the baseline is written with a diff printed.
    let o = run_in(dir.path(), std::slice::from_ref(&spec), &["--accept"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let key_dir: Vec<PathBuf> = std::fs::read_dir(dir.path().join("baselines"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(key_dir.len(), 1);
    let bfile = key_dir[0].join("tiny-chain.json");
    assert!(bfile.exists());
    assert!(out.contains("+after median:"), "diff printed: {out}");
    let b: serde_json::Value = serde_json::from_slice(&std::fs::read(&bfile).unwrap()).unwrap();
    assert_eq!(b["spec"], "tiny-chain");
    assert_eq!(b["history"].as_array().unwrap().len(), 1);

    // Compared on the next run.
    let o = run_in(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--require-baseline"],
    );
    let run = only_run_dir(dir.path());
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    let base = &results["specs"][0]["baseline"];
    assert!(base["status"] == "compared", "{base} {}", text(&o));
    assert!(base["ratio"]["point"].as_f64().unwrap() > 0.0);

    // A damaged baseline is an error naming the file, and is left untouched.
    std::fs::write(&bfile, b"{\"schema_version\": 1, \"spe").unwrap();
    let o = run_in(dir.path(), std::slice::from_ref(&spec), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("tiny-chain.json") && text(&o).contains("damaged baseline"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read(&bfile).unwrap(),
        b"{\"schema_version\": 1, \"spe"
    );
    // --accept replaces it.
    let o = run_in(dir.path(), &[spec], &["--accept"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(serde_json::from_slice::<serde_json::Value>(&std::fs::read(&bfile).unwrap()).is_ok());
}

#[test]
fn threads_size_the_pool_and_key_the_baselines() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    let o = run_in(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--threads", "1", "--accept"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("(1 thread, "), "{out}");
    let run = only_run_dir(dir.path());
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["ceilings"]["threads"], 1);
    let key = results["device"]["key"].as_str().unwrap();
    assert!(key.contains("-1c-"), "{key}");
    // The same through the environment variable, and a nonsense count refused as bad input.
    let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &["--threads", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--threads 0: expected 1 to 4096 threads"),
        "{}",
        text(&o)
    );
    // In a folder of its own: the time gate against the run accepted above is not what this
    // checks, and a loaded machine can move a sub-millisecond chain past any limit.
    let other = tempfile::tempdir().unwrap();
    let o = run_cmd(other.path(), std::slice::from_ref(&spec), &[])
        .env("OPLEDGER_THREADS", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("(1 thread, "), "{}", text(&o));
}

#[test]
fn a_refuted_claim_fails_the_gate_with_exit_1_and_others_still_run() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            fixture("good/impossible-claim.yaml"),
            fixture("good/tiny-chain.yaml"),
        ],
        &[],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("io_saving: ledger saving 49.23% vs claim >= 90.00%"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("PASS ") && l.contains(" tiny-chain ")),
        "{out}"
    );
    let report = std::fs::read_to_string(only_run_dir(dir.path()).join("report.md")).unwrap();
    assert!(report.starts_with("# opledger report: FAIL"), "{report}");
}

/// Natively, and at `avx2-nofma` where the CPU has AVX2 and FMA: the counted sides' level, whose
/// kernels are instances of their own (each multiply-add a multiply and an add).
#[test]
fn every_workload_kind_runs_and_is_correct_on_the_cpu() {
    every_workload_kind_runs_and_is_correct_at(None);
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        every_workload_kind_runs_and_is_correct_at(Some("avx2-nofma"));
    }
}

fn every_workload_kind_runs_and_is_correct_at(cap: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = common::run_cmd(
        dir.path(),
        &[fixture("kinds"), fixture("good/tiny-chain.yaml")],
        &[],
    );
    if let Some(cap) = cap {
        c.env("OPLEDGER_SIMD", cap);
    }
    let o = c.output().unwrap();
    if let Some(cap) = cap {
        assert!(
            text(&o).contains(cap),
            "the run names its level {cap}: {}",
            text(&o)
        );
    }
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(only_run_dir(dir.path()).join("results.json")).unwrap(),
    )
    .unwrap();
    let specs = results["specs"].as_array().unwrap();
    // Every kind of the registry with built-in kernels has its tiny spec (a new kind adds one;
    // kind custom, the user's code on both sides, is tested with workers).
    for kind in opledger::kinds::WorkloadKind::ALL
        .iter()
        .filter(|k| k.builtin_kernels())
    {
        assert!(
            specs.iter().any(|s| s["workload"]["kind"] == kind.name()),
            "no tiny spec of kind {} in tests/fixtures/kinds: {}",
            kind.name(),
            text(&o)
        );
    }
    for s in specs {
        let name = s["name"].as_str().unwrap();
        assert!(s["error"].is_null(), "{name}: {}", s["error"]);
        let checks = s["checks"].as_array().unwrap();
        let correctness = checks.iter().find(|c| c["name"] == "correctness").unwrap();
        assert_eq!(
            correctness["status"], "pass",
            "{name}: {}",
            correctness["detail"]
        );
        assert!(
            s["correctness"]["after_vs_reference"]["checked"]
                .as_u64()
                .unwrap()
                > 0
        );
    }
    // The launch chain reports its per-launch overhead; its value is measured, not asserted.
    let launch = specs.iter().find(|s| s["name"] == "tiny-launch").unwrap();
    assert!(launch["launch_overhead_secs"]["point"].is_f64(), "{launch}");
    assert!(launch["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "launch_overhead"));
    // The checklist draws on them: flash attention and graph replay are evidenced.
    let report = std::fs::read_to_string(only_run_dir(dir.path()).join("report.md")).unwrap();
    for title in ["FlashAttention-class IO path", "graph replay"] {
        let row = report.lines().find(|l| l.contains(title)).unwrap();
        assert!(!row.contains("not evidenced"), "{row}");
    }
}

/// `--shard`: the shards of a suite together run each of its cases once, whichever way they are
/// dealt; a shard may hold no case (an empty archive, exit 0); a bad setting is exit 2.
#[test]
fn shards_of_a_suite_run_each_case_once() {
    let names = |dir: &Path| -> Vec<String> {
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(only_run_dir(dir).join("results.json")).unwrap())
                .unwrap();
        r["specs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    let suite = [fixture("kinds"), fixture("good/tiny-chain.yaml")];
    let whole = tempfile::tempdir().unwrap();
    run_in(whole.path(), &suite, &[]);
    let mut all = names(whole.path());
    all.sort();
    for mode in ["hash", "count"] {
        let mut seen = Vec::new();
        for m in 1..=3 {
            let dir = tempfile::tempdir().unwrap();
            let shard = format!("{mode}:{m}/3");
            let o = run_in(dir.path(), &suite, &["--shard", &shard]);
            assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
            assert!(
                text(&o).contains(&format!("shard {m}/3 ({mode}")),
                "{}",
                text(&o)
            );
            seen.extend(names(dir.path()));
        }
        seen.sort();
        assert_eq!(
            seen, all,
            "{mode}: the shards together are the suite, once each"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let o = run_cmd(dir.path(), &suite, &["--shard", "auto"])
        .env("SLURM_ARRAY_TASK_ID", "4")
        .env("SLURM_ARRAY_TASK_MIN", "1")
        .env("SLURM_ARRAY_TASK_STEP", "2")
        .env("SLURM_ARRAY_TASK_COUNT", "4")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("the task is not one of the array's ids"));
}

/// `--case` runs the named cases of the specs given (a sweep point alone), and refuses a name
/// none of them has, listing theirs.
#[test]
fn a_case_named_runs_alone_and_an_unknown_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("sweep.yaml");
    std::fs::write(
        &spec,
        "name: swept\ntitle: a sweep\nworkload: {kind: elementwise, ops: [scale, add, relu], rows: 64, cols: 1024}\nsweep: {rows: [16, 64]}\nvariants: {before: unfused, after: fused}\nexpect: {bound: bandwidth}\n",
    )
    .unwrap();
    let o = run_in(
        dir.path(),
        std::slice::from_ref(&spec),
        &["--case", "swept--rows-64"],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(
        &std::fs::read(only_run_dir(dir.path()).join("results.json")).unwrap(),
    )
    .unwrap();
    let names: Vec<&str> = r["specs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["swept--rows-64"]);
    let other = tempfile::tempdir().unwrap();
    let o = run_in(
        other.path(),
        std::slice::from_ref(&spec),
        &["--case", "swept--rows-32"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--case swept--rows-32: no case of that name in the specs given; their cases: swept--rows-16, swept--rows-64"),
        "{}",
        text(&o)
    );
    assert!(!other.path().join("runs").exists());
}
