//! `summary.md`: the short summary a CI job page shows, linking to the report beside it.

use super::{Output, Rendering, REPORT};
use crate::error::Result;

/// `summary.md`.
pub struct Summary;

impl Output for Summary {
    fn name(&self) -> &'static str {
        "summary"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![(
            "summary.md".into(),
            crate::render_summary(r.run, std::path::Path::new(REPORT))?.into_bytes(),
        )])
    }
}
