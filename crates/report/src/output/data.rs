//! `results.json` (the run as data, what every other output and command reads back) and
//! `environment.json` (the provenance manifest alone).

use super::{json, Output, Rendering};
use crate::error::Result;

/// `results.json`.
pub struct ResultsJson;
/// `environment.json`.
pub struct EnvironmentJson;

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
