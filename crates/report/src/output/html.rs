//! `report.html`: the report as one self-contained page (CSS, script and charts inline).

use super::{Output, Rendering};
use crate::error::Result;
use crate::html::{self, REPORT_HTML};

/// `report.html`.
pub struct HtmlReport;

impl Output for HtmlReport {
    fn name(&self) -> &'static str {
        "html"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![(
            REPORT_HTML.into(),
            html::report(r.run, &html::Place::default())?.into_bytes(),
        )])
    }
}
