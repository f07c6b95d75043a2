//! `opledger schema`: the shipped JSON Schemas (specs, results.json, the worker protocol).

use crate::error::{ExitCode, Result};
use crate::spec;
use std::path::Path;

/// Which schema.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaKind {
    /// A spec file (YAML).
    Spec,
    /// A run's results.json.
    Results,
    /// One line of the worker protocol (a request or a reply).
    Worker,
}

/// `opledger schema`: a shipped JSON Schema, printed or written.
pub fn schema(which: SchemaKind, out: Option<&Path>) -> Result<ExitCode> {
    let schema = match which {
        SchemaKind::Spec => spec::schema::spec_schema(),
        SchemaKind::Results => crate::results::schema(),
        SchemaKind::Worker => crate::backend::worker::schema(),
    };
    let text = spec::schema::to_text(&schema);
    match out {
        Some(o) => crate::files::write_atomic(o, text.as_bytes())?,
        None => print!("{text}"),
    }
    Ok(ExitCode::Pass)
}
