//! The report and `compare`: templates, re-rendering, charts, the golden report, and two
//! archived runs compared with the gate's statistics.

use crate::common;
use common::{bin, fixture, only_run_dir, run_in, text, PAIRS};
use std::path::{Path, PathBuf};

#[test]
fn custom_template_and_report_rerender() {
    let dir = tempfile::tempdir().unwrap();
    let tmpl = dir.path().join("t.j2");
    std::fs::write(
        &tmpl,
        "{% for s in specs %}{{ s.name }}={{ s.status }};{% endfor %}",
    )
    .unwrap();
    let o = run_in(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--template", tmpl.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = only_run_dir(dir.path());
    assert_eq!(
        std::fs::read_to_string(run.join("report.md")).unwrap(),
        "tiny-chain=pass;"
    );
    // The template is archived with the run and recorded; every re-render uses it.
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["template"], "template/t.j2");
    assert_eq!(
        std::fs::read_to_string(run.join("template/t.j2")).unwrap(),
        std::fs::read_to_string(&tmpl).unwrap()
    );
    // Every archive holds the same outputs: JUnit, the summary and the HTML report too (the
    // HTML one always the built-in page: a Markdown template does not shape it).
    for f in [
        "report.html",
        "junit.xml",
        "summary.md",
        "environment.json",
        "roofline.svg",
    ] {
        assert!(run.join(f).is_file(), "{f} in the run folder");
    }
    // Re-rendered without measuring, the run's template even when the user's file changed.
    std::fs::write(&tmpl, "changed").unwrap();
    let o = bin().arg("report").arg(&run).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "tiny-chain=pass;");
    // Into the archive's own report.md with another template: every output written again,
    // the new template recorded, the archive still verifies.
    let other = dir.path().join("other.md.j2");
    std::fs::write(&other, "{{ specs|length }} spec(s)").unwrap();
    let o = bin()
        .arg("report")
        .arg(&run)
        .arg("--template")
        .arg(&other)
        .arg("--out")
        .arg(run.join("report.md"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(run.join("report.md")).unwrap(),
        "1 spec(s)"
    );
    let o = bin().arg("verify").arg(&run).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = bin().arg("report").arg(&run).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1 spec(s)");
    // The re-rendered archive's report.html is the page of the same run, sealed with it.
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("data-spec=\"tiny-chain\""));
    let manifest = std::fs::read_to_string(run.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"report.html\""), "{manifest}");
    // `--out` a page elsewhere: the HTML report alone.
    let elsewhere = dir.path().join("page.html");
    let o = bin()
        .arg("report")
        .arg(&run)
        .arg("--out")
        .arg(&elsewhere)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), page);
    // A broken template is bad input.
    std::fs::write(&tmpl, "{% for %}").unwrap();
    let o = bin()
        .arg("report")
        .arg(&run)
        .arg("--template")
        .arg(&tmpl)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("t.j2"), "{}", text(&o));
}

#[test]
fn report_on_a_damaged_archive_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("results.json"), b"[1, 2").unwrap();
    let o = bin().arg("report").arg(dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("results.json") && text(&o).contains("not a valid opledger results file"),
        "{}",
        text(&o)
    );
}

/// The data points of a side in a chart (its circles of class `pt SIDE`; a legend's swatch is
/// `sw SIDE`).
fn points(svg: &str, side: &str) -> usize {
    let doc = roxmltree::Document::parse(svg).expect("the SVG parses as XML");
    let class = format!("pt {side}");
    doc.descendants()
        .filter(|n| n.has_tag_name("circle") && n.attribute("class") == Some(class.as_str()))
        .count()
}

#[test]
fn report_out_redraws_svg_charts_with_one_point_per_case() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r/report.md");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let o = bin()
        .arg("report")
        .arg(fixture("run-fixed"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("run-fixed/results.json")).unwrap()).unwrap();
    let cases = results["specs"].as_array().unwrap().len();
    let svg = std::fs::read_to_string(dir.path().join("r/roofline.svg")).unwrap();
    // One before point and one after point per case, styled from within the file.
    assert_eq!(points(&svg, "after"), cases, "after points");
    assert_eq!(points(&svg, "before"), cases, "before points");
    assert!(
        svg.contains("<style>svg{--before:"),
        "the colours travel with the file"
    );
    // Each case labelled: by its name, or a sweep point by its parameter value.
    for s in results["specs"].as_array().unwrap() {
        let label = s["sweep"]["label"].as_str().or(s["name"].as_str()).unwrap();
        assert!(svg.contains(label), "label of {}", s["name"]);
    }
    // The sweep chart: one point per variant and sweep point in each of its two panels.
    let sweep = &results["sweeps"][0];
    let rows = sweep["rows"].as_array().unwrap().len();
    let name = format!("r/sweep-{}.svg", sweep["group"].as_str().unwrap());
    let svg = std::fs::read_to_string(dir.path().join(name)).unwrap();
    assert_eq!(points(&svg, "after"), 2 * rows);
    assert_eq!(points(&svg, "before"), 2 * rows);
    let md = std::fs::read_to_string(&out).unwrap();
    assert!(
        md.contains("](roofline.svg)") && md.contains("](sweep-tiny-sweep.svg)"),
        "{md}"
    );
}

/// The report rendered from a fixed result file must match the golden file exactly.
/// Regenerate with `OPLEDGER_BLESS=1 cargo test --release --test integration report::golden`.
#[test]
fn golden_report_from_fixed_results() {
    let o = bin()
        .arg("report")
        .arg(fixture("run-fixed"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let got = String::from_utf8(o.stdout).unwrap();
    common::assert_golden(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/report.md"),
        &got,
    );
}

/// A check whose gate was set aside (the other measurement's gate decided) is one short line in
/// report.md, the gate's own line being beside it, and that line leaves out the steps that
/// would decide the gate; JUnit, which has no gate line, keeps the gate's whole sentence.
#[test]
fn a_set_aside_gate_is_one_short_line_in_the_report_and_whole_in_junit() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let src = fixture("run-fixed").join("results.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
    let long = "the CI reaches x1.073, past the x1.057 a PASS needs (thresholds from 5 runs)";
    // Written as `run` writes today (version 1 archives predate the rule).
    v["schema_version"] = opledger::results::SCHEMA_VERSION.into();
    let spec = &mut v["specs"][0];
    spec["set_aside"] = serde_json::json!(["time"]);
    let checks = spec["checks"].as_array_mut().unwrap();
    let regression = checks
        .iter_mut()
        .find(|c| c["name"] == "regression")
        .unwrap();
    regression["status"] = "inconclusive".into();
    regression["detail"] = long.into();
    // The counts gate decided: the rule sets the time gate aside.
    checks.push(serde_json::json!({
        "name": "counts_regression", "status": "pass", "detail": "within the 3% limit"
    }));
    // A time gate that cannot PASS on this runner: its decision says why, and not the steps
    // that would decide it (the counts gate decided).
    spec["baseline"] = serde_json::json!({
        "status": "compared", "path": "b.json", "threshold": 0.1, "state": "inconclusive",
        "ratio": {"point": 0.95, "lo": 0.90, "hi": 1.0},
        "spread": {"runs": 5, "log_sd": 0.06, "noise_factor": 1.0},
        "undecided": "cannot_pass", "message": long
    });
    std::fs::write(run.join("results.json"), v.to_string()).unwrap();
    // Sealed, so that `report -o` on its own report.md writes every output again (JUnit too).
    opledger::archive::seal(&run, "run", Vec::new()).unwrap();
    let out = run.join("report.md");
    let o = bin()
        .arg("report")
        .arg(&run)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let md = std::fs::read_to_string(&out).unwrap();
    let short = "not judged: the time gate could not decide, and the counts gate decided the spec";
    assert!(
        md.contains(&format!("  - ❔ **regression**: {short}\n")),
        "{md}"
    );
    assert!(!md.contains(long), "{md}");
    let gate = md.lines().find(|l| l.starts_with("- **Gate**")).unwrap();
    assert!(
        gate.contains("decision inconclusive: cannot PASS at +10% on this runner")
            && !gate.contains("gate on a quieter runner"),
        "{gate}"
    );
    let junit = std::fs::read_to_string(run.join("junit.xml")).unwrap();
    assert!(
        junit.contains(short) && junit.contains("the CI reaches x1.073, past the x1.057"),
        "{junit}"
    );
}

#[test]
fn compare_two_archived_runs_with_the_gate_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    for _ in 0..2 {
        let o = run_in(dir.path(), std::slice::from_ref(&spec), &PAIRS);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    runs.sort();
    // B slowed down 10x on paper: a regression whatever the noise of 5 samples.
    let b_json = runs[1].join("results.json");
    let mut b: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&b_json).unwrap()).unwrap();
    for t in b["specs"][0]["samples"]["after_secs"]
        .as_array_mut()
        .unwrap()
    {
        *t = serde_json::json!(t.as_f64().unwrap() * 10.0);
    }
    let slow = dir.path().join("slow");
    std::fs::create_dir_all(&slow).unwrap();
    std::fs::write(slow.join("results.json"), serde_json::to_vec(&b).unwrap()).unwrap();
    let comment = dir.path().join("comment.md");
    // In the runs' folder: a history store where the tests run (the repository's own runs/)
    // must not lend it drift.
    let o = bin()
        .current_dir(dir.path())
        .arg("compare")
        .arg(&runs[0])
        .arg(&slow)
        .arg("--markdown")
        .arg(&comment)
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("| tiny-chain |") && out.contains("REGRESSION"),
        "{out}"
    );
    // The pull-request comment: the marker first, the verdict, the changed case, the reports.
    let c = std::fs::read_to_string(&comment).unwrap();
    assert!(c.starts_with("<!-- opledger-compare -->\n"), "{c}");
    assert!(c.contains("### opledger: 1 REGRESSION"), "{c}");
    assert!(
        c.contains("| tiny-chain |") && c.contains("| REGRESSION |"),
        "{c}"
    );
    // What was compared is named (run ids: these runs have no commit), one verdict, the limit
    // and before -> after of the changed case, links relative to the comment.
    let a_id = runs[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(c.contains(&format!("against run {a_id}")), "{c}");
    assert!(!c.contains("run verdict"), "one verdict: {c}");
    assert!(c.contains("| limit |") && c.contains("| +10% |"), "{c}");
    assert!(c.contains(" ms → "), "before -> after: {c}");
    assert!(
        c.contains(&format!("[base](runs/{a_id}/report.md)"))
            && c.contains("[head](slow/report.md)"),
        "relative links: {c}"
    );
    assert!(
        !c.contains(&dir.path().display().to_string()),
        "no absolute path: {c}"
    );
    let o = bin()
        .current_dir(dir.path())
        .arg("compare")
        .arg(&runs[0])
        .arg(&slow)
        .arg("--markdown")
        .arg(&comment)
        .args(["--link-base", "https://ci.example/artifacts/42/"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let c = std::fs::read_to_string(&comment).unwrap();
    assert!(
        c.contains("[head](https://ci.example/artifacts/42/slow/report.md)"),
        "{c}"
    );
    // A run compared with itself: ratio exactly 1, never a regression.
    let o = bin()
        .current_dir(dir.path())
        .arg("compare")
        .arg(&runs[0])
        .arg(&runs[0])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("| 1.000 ("), "{}", text(&o));
    // A damaged archive is a clear error.
    std::fs::write(slow.join("results.json"), b"{").unwrap();
    let o = bin()
        .current_dir(dir.path())
        .arg("compare")
        .arg(&runs[0])
        .arg(&slow)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn compare_reaches_the_runs_own_verdict_on_the_same_archives() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    // Run A is accepted as the baseline; run B is gated against it (one pass or two).
    for extra in [&["--accept"][..], &[][..]] {
        let args: Vec<&str> = extra.iter().copied().chain(PAIRS).collect();
        let o = run_in(dir.path(), std::slice::from_ref(&spec), &args);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    }
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    runs.sort();
    let b: serde_json::Value =
        serde_json::from_slice(&std::fs::read(runs[1].join("results.json")).unwrap()).unwrap();
    let run_state = b["specs"][0]["baseline"]["state"]
        .as_str()
        .unwrap()
        .to_string();
    let o = bin()
        .current_dir(dir.path())
        .arg("compare")
        .arg(&runs[0])
        .arg(&runs[1])
        .arg("--baselines")
        .arg(dir.path().join("baselines"))
        .output()
        .unwrap();
    let out = text(&o);
    let row = out
        .lines()
        .find(|l| l.starts_with("| tiny-chain |"))
        .unwrap();
    let decision = row.rsplit('|').nth(1).unwrap().trim();
    let expected = match run_state.as_str() {
        "fail" => "REGRESSION",
        "pass" => "within the limit",
        "inconclusive" => "INCONCLUSIVE",
        other => other,
    };
    assert!(
        decision.starts_with(expected),
        "run said {run_state}, compare said {decision}: {out}"
    );
}

/// The roof on the SIMD level: present where the register kernels ran (GELU's polynomial is
/// more than the ledger's one FLOP), with the level they ran at; absent on the scalar path,
/// where the ledger's count is the model.
#[test]
fn the_level_roof_names_the_level_the_kernels_ran_at() {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut levels: Vec<(&str, Option<(&str, u64)>)> = vec![("scalar", None)];
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            levels.push(("avx2", Some(("avx2+fma", 8))));
            levels.push(("avx2-nofma", Some(("avx2-nofma", 8))));
        }
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
            levels.push(("avx512", Some(("avx512f", 16))));
        }
    }
    // The spec run under the cap: its archive (kept in `dir`) and its results.
    let run_at = |dir: &Path, cap: &str, spec: &str| {
        let o = common::run_cmd(dir, &[fixture(spec)], &[])
            .env("OPLEDGER_SIMD", cap)
            .output()
            .unwrap();
        assert!(common::passed_but_for_the_bound(&o), "{cap}: {}", text(&o));
        let run = only_run_dir(dir);
        let results: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
        (run, results)
    };
    for (cap, expect) in levels {
        let dir = tempfile::tempdir().unwrap();
        let (run, results) = run_at(dir.path(), cap, "good/tiny-chain.yaml");
        let report = std::fs::read_to_string(run.join("report.md")).unwrap();
        let html = std::fs::read_to_string(run.join("report.html")).unwrap();
        let spec = &results["specs"][0];
        match expect {
            None => {
                assert!(spec["after"].get("on_level").is_none(), "{cap}: {spec}");
                assert!(!report.contains("| on "), "{cap}: {report}");
            }
            Some((level, lanes)) => {
                let (b, a) = (&spec["before"]["on_level"], &spec["after"]["on_level"]);
                assert_eq!(a["executed"]["level"], level, "{cap}: {a}");
                assert_eq!(a["executed"]["lanes"], lanes);
                // The same instructions per element in both variants; only the bytes differ.
                assert_eq!(a["executed"], b["executed"]);
                // 67 rows of 1031 columns: whole vectors and one masked one per row.
                let vectors = 67 * 1031u64.div_ceil(lanes);
                let instructions = a["executed"]["vector_instructions"].as_u64().unwrap();
                assert_eq!(instructions % vectors, 0, "{cap}: {a}");
                assert!(
                    instructions / vectors > 7,
                    "{cap}: seven ops, GELU's and SiLU's many"
                );
                let nominal = spec["after"]["flops"].as_u64().unwrap();
                assert!(
                    a["executed"]["flops"].as_u64().unwrap() > 2 * nominal,
                    "{cap}: {a}"
                );
                let arith = a["arithmetic_secs"].as_f64().unwrap();
                let roof = a["secs"].as_f64().unwrap();
                assert!(arith > 0.0 && roof >= arith && roof >= a["memory_secs"].as_f64().unwrap());
                assert!(a["reached"].as_f64().unwrap() > 0.0);
                assert!(
                    report.contains(&format!("| on {level}: roof (bound) · reached |")),
                    "{cap}: {report}"
                );
                assert!(html.contains(&format!("<h3>On {level}</h3>")), "{cap}");
            }
        }
        // Softmax: the fused kernel's exponential sweep is counted; the unfused passes (the
        // compiler's loops) are not.
        let dir = tempfile::tempdir().unwrap();
        let (_, results) = run_at(dir.path(), cap, "kinds/tiny-softmax.yaml");
        let spec = &results["specs"][0];
        assert!(spec["before"].get("on_level").is_none(), "{cap}: {spec}");
        match expect {
            None => assert!(spec["after"].get("on_level").is_none(), "{cap}: {spec}"),
            Some((level, _)) => {
                let a = &spec["after"]["on_level"];
                assert_eq!(a["executed"]["level"], level, "{cap}: {a}");
                assert!(a["arithmetic_secs"].as_f64().unwrap() > 0.0, "{cap}: {a}");
            }
        }
    }
}
