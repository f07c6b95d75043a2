//! The pages' style sheet, built in: every HTML page inlines it whole, and the run folder's
//! stand-alone charts embed its chart rules.

/// `crates/report/templates/html/style.css`.
pub const STYLE: &str = include_str!("../templates/html/style.css");
