//! `junit.xml`: one test suite per spec, one test case per check, for CI dashboards.

use super::{Output, Rendering};
use crate::error::Result;
use crate::results::RunResult;
use crate::verdict::Status;

/// `junit.xml`: one test case per check.
pub struct JUnit;

impl Output for JUnit {
    fn name(&self) -> &'static str {
        "junit"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![("junit.xml".into(), junit(r.run).into_bytes())])
    }
}

/// Escapes text for an XML attribute or element (the HTML pages' escaping: XML's five entities,
/// control characters as spaces, the invisible reordering characters as their code points).
fn xml_escape(s: &str) -> String {
    crate::html::escape(s)
}

/// The characters of a failure's `message`: the line a CI dashboard lists; the whole sentence
/// is the failure's text.
const HEADLINE_CHARS: usize = 200;

/// A failure's message: its sentence, cut at [`HEADLINE_CHARS`] with an ellipsis.
fn headline(detail: &str) -> String {
    if detail.chars().count() <= HEADLINE_CHARS {
        return detail.to_string();
    }
    let mut h: String = detail.chars().take(HEADLINE_CHARS - 1).collect();
    h.push('…');
    h
}

/// JUnit XML for CI dashboards: one test suite per spec, one test case per check (skipped
/// checks as `<skipped/>`, warnings as passing cases with the warning in `system-out`).
pub fn junit(run: &RunResult) -> String {
    let cases: usize = run.specs.iter().map(|s| s.checks.len()).sum();
    let failures = run.verdict.checks_failed;
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"opledger\" tests=\"{cases}\" failures=\"{failures}\" time=\"{:.3}\">\n",
        run.wall_secs
    );
    for s in &run.specs {
        let fails = s.checks.iter().filter(|c| c.status == Status::Fail).count();
        let skips = s
            .checks
            .iter()
            .filter(|c| matches!(c.status, Status::Skip | Status::Inconclusive))
            .count();
        x.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{fails}\" skipped=\"{skips}\">\n",
            xml_escape(&s.name),
            s.checks.len()
        ));
        for c in &s.checks {
            let detail = crate::gate::check_detail(s, c);
            x.push_str(&format!(
                "    <testcase classname=\"opledger.{}\" name=\"{}\">",
                xml_escape(&s.name),
                xml_escape(c.name.as_str())
            ));
            match c.status {
                Status::Fail => x.push_str(&format!(
                    "<failure message=\"{}\">{}</failure>",
                    xml_escape(&headline(&detail)),
                    xml_escape(&detail)
                )),
                Status::Skip => {
                    x.push_str(&format!("<skipped message=\"{}\"/>", xml_escape(&detail)))
                }
                // Not decided is not passed: shown as skipped, with the reason.
                Status::Inconclusive => x.push_str(&format!(
                    "<skipped message=\"INCONCLUSIVE: {}\"/>",
                    xml_escape(&detail)
                )),
                Status::Warn | Status::Pass => {
                    x.push_str(&format!("<system-out>{}</system-out>", xml_escape(&detail)))
                }
            }
            x.push_str("</testcase>\n");
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_failure_is_a_headline_in_its_message_and_whole_in_its_text() {
        assert_eq!(headline("short"), "short");
        let long = "é".repeat(300);
        let h = headline(&long);
        assert_eq!(h.chars().count(), HEADLINE_CHARS);
        assert!(h.ends_with('…') && long.starts_with(h.trim_end_matches('…')));
    }
}
