//! What a run exports for CI: the job summary and JUnit XML.

use crate::common;
use common::{fixture, only_run_dir, run_cmd, run_in, text};

#[test]
fn job_summary_is_appended_from_github_step_summary() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let mut c = run_cmd(dir.path(), &[fixture("good/tiny-chain.yaml")], &[]);
    c.env("GITHUB_STEP_SUMMARY", &summary);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = std::fs::read_to_string(&summary).unwrap();
    assert!(s.starts_with("earlier step\n### opledger: PASS"), "{s}");
    assert!(s.contains("| tiny-chain |"), "{s}");
}

#[test]
fn junit_has_one_case_per_check_and_marks_failures() {
    let dir = tempfile::tempdir().unwrap();
    let xml_path = dir.path().join("junit.xml");
    let o = run_in(
        dir.path(),
        &[
            fixture("good/impossible-claim.yaml"),
            fixture("good/tiny-chain.yaml"),
        ],
        &["--junit", xml_path.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let xml = std::fs::read_to_string(&xml_path).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let suites: Vec<_> = root
        .children()
        .filter(|n| n.has_tag_name("testsuite"))
        .collect();
    assert_eq!(suites.len(), 2);
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(only_run_dir(dir.path()).join("results.json")).unwrap(),
    )
    .unwrap();
    for (suite, spec) in suites.iter().zip(results["specs"].as_array().unwrap()) {
        assert_eq!(suite.attribute("name"), spec["name"].as_str());
        let cases: Vec<_> = suite
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        assert_eq!(cases.len(), spec["checks"].as_array().unwrap().len());
        assert_eq!(suite.attribute("tests").unwrap(), cases.len().to_string());
    }
    let failures: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .collect();
    assert_eq!(failures.len(), 1);
    assert!(failures[0]
        .attribute("message")
        .unwrap()
        .contains("claim >= 90.00%"));
    assert_eq!(root.attribute("failures"), Some("1"));
}
