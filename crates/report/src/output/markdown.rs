//! `report.md`: the delivery checklist, rendered with the run's template.

use super::{Output, Rendering, REPORT};
use crate::error::Result;

/// `report.md`.
pub struct MarkdownReport;

impl Output for MarkdownReport {
    fn name(&self) -> &'static str {
        "markdown"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![(
            REPORT.into(),
            crate::render_with(r.run, r.template)?.into_bytes(),
        )])
    }
}
