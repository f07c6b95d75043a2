//! The outputs of an archive, one registry line each: every file a run folder (or a merged one)
//! holds besides its specs and its manifest is written by one [`Output`], and the archive
//! writes them all, in one place, whenever it saves or re-renders. A new format is one file in
//! this folder (a type implementing [`Output`]) and, here, its `mod` line and its line in
//! [`OUTPUTS`].

use crate::error::{Error, Result};
use crate::results::RunResult;

/// A report template: its name (for errors) and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub name: String,
    pub source: String,
}

/// What an output renders from: the run and the report template it uses.
pub struct Rendering<'a> {
    pub run: &'a RunResult,
    /// The user's template; the built-in one when `None`.
    pub template: Option<&'a Template>,
}

/// A file (or a few) of every archive, rendered from its results.
pub trait Output: Sync {
    /// The format's name, as errors and docs name it.
    fn name(&self) -> &'static str;
    /// The files: (path inside the archive, bytes).
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>>;
}

mod charts;
mod data;
mod html;
pub mod junit;
mod markdown;
mod summary;

/// Every output of an archive, in the order they are written: one line a format.
pub static OUTPUTS: &[&dyn Output] = &[
    &data::ResultsJson,
    &data::EnvironmentJson,
    &charts::Charts,
    &markdown::MarkdownReport,
    &html::HtmlReport,
    &junit::JUnit,
    &summary::Summary,
];

/// The file name of the Markdown report inside an archive.
pub const REPORT: &str = "report.md";

/// Pretty JSON with a trailing newline.
pub fn json(what: &'static str, v: &impl serde::Serialize) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(v).map_err(|e| Error::Serialize {
        what,
        message: e.to_string(),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Every output's files for one archive.
pub fn render_all(r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for o in OUTPUTS {
        files.extend(o.render(r)?);
    }
    Ok(files)
}
