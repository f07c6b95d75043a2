//! The SVG charts the report links to (the roofline, one chart per sweep).

use super::{Output, Rendering};
use crate::error::Result;

/// The charts.
pub struct Charts;

impl Output for Charts {
    fn name(&self) -> &'static str {
        "charts"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(crate::svg::files(r.run)?
            .into_iter()
            .map(|(name, svg)| (name, svg.into_bytes()))
            .collect())
    }
}
