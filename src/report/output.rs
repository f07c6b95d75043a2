//! The outputs of an archive, one registry line each: every file a run folder (or a merged one)
//! holds besides its specs and its manifest is written by one [`Output`], and the archive
//! writes them all, in one place, whenever it saves or re-renders. A new format is one type
//! implementing [`Output`] and one line in [`OUTPUTS`].

use crate::error::{Error, Result};
use crate::results::RunResult;
use std::path::Path;

/// A report template: its name (for errors) and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub name: String,
    pub source: String,
}

/// What an output renders from: the run, the report template it uses, and the archive's folder
/// (as the summary names the report).
pub struct Rendering<'a> {
    pub run: &'a RunResult,
    /// The user's template; the built-in one when `None`.
    pub template: Option<&'a Template>,
    pub dir: &'a Path,
}

/// A file (or a few) of every archive, rendered from its results.
pub trait Output: Sync {
    /// The format's name, as errors and docs name it.
    fn name(&self) -> &'static str;
    /// The files: (path inside the archive, bytes).
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>>;
}

/// Every output of an archive, in the order they are written.
pub static OUTPUTS: &[&dyn Output] = &[
    &ResultsJson,
    &EnvironmentJson,
    &Charts,
    &MarkdownReport,
    &JUnit,
    &Summary,
];

/// `results.json`: the run as data, what every other output and command reads back.
pub struct ResultsJson;
/// `environment.json`: the provenance manifest alone.
pub struct EnvironmentJson;
/// The SVG charts the report links to.
pub struct Charts;
/// `report.md`: the delivery checklist.
pub struct MarkdownReport;
/// `junit.xml`: one test case per check.
pub struct JUnit;
/// `summary.md`: the short summary a CI job page shows.
pub struct Summary;

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

impl Output for ResultsJson {
    fn name(&self) -> &'static str {
        "results"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![("results.json".into(), json("results", r.run)?)])
    }
}

impl Output for EnvironmentJson {
    fn name(&self) -> &'static str {
        "environment"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![(
            "environment.json".into(),
            json("the environment manifest", &r.run.environment)?,
        )])
    }
}

impl Output for Charts {
    fn name(&self) -> &'static str {
        "charts"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(super::chart::all(r.run)?
            .into_iter()
            .map(|(name, svg)| (name, svg.into_bytes()))
            .collect())
    }
}

impl Output for MarkdownReport {
    fn name(&self) -> &'static str {
        "markdown"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![(
            REPORT.into(),
            super::render_with(r.run, r.template)?.into_bytes(),
        )])
    }
}

impl Output for JUnit {
    fn name(&self) -> &'static str {
        "junit"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![("junit.xml".into(), super::junit(r.run).into_bytes())])
    }
}

impl Output for Summary {
    fn name(&self) -> &'static str {
        "summary"
    }
    fn render(&self, r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![(
            "summary.md".into(),
            super::render_summary(r.run, &r.dir.join(REPORT))?.into_bytes(),
        )])
    }
}

/// Every output's files for one archive.
pub fn render_all(r: &Rendering<'_>) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for o in OUTPUTS {
        files.extend(o.render(r)?);
    }
    Ok(files)
}
