//! The JSON Schema of spec files, generated from the types serde reads (`schemars`), so editors
//! can complete and check specs (`# yaml-language-server: $schema=...`). The derived schema is
//! tightened with what the validator checks across fields: the keys each workload kind takes and
//! requires, and the parameters a sweep may vary. The validator stays the authority; the schema
//! is its editor-side mirror, and a test keeps both in step.

use super::{RawSpec, RawWorkload, WorkloadKind};
use serde_json::{json, Value};

/// Draft-07: the draft editors' YAML language servers support most widely.
pub fn generator() -> schemars::SchemaGenerator {
    schemars::generate::SchemaSettings::draft07().into_generator()
}

/// The spec schema as JSON.
pub fn spec_schema() -> Value {
    let mut root = generator().into_root_schema_for::<RawSpec>().to_value();
    root["$id"] = json!("https://opledger.dev/schemas/spec.schema.json");
    root["title"] = json!("opledger spec");
    root["description"] =
        json!("One optimization: its workload, the two variants compared and the claims.");
    if let Some(w) = root.pointer_mut("/definitions/RawWorkload") {
        w["required"] = json!(["kind"]);
        let rules: Vec<Value> = WorkloadKind::ALL
            .iter()
            .map(|kind| {
                let (required, optional) = kind.keys();
                let mut allowed = vec!["kind"];
                allowed.extend_from_slice(required);
                allowed.extend_from_slice(optional);
                let mut then = json!({"required": required, "propertyNames": {"enum": allowed}});
                // Only the dtypes a kernel backs (the validator says the same).
                if optional.contains(&"dtype") {
                    let names: Vec<&str> = kind.dtypes().iter().map(|d| d.name()).collect();
                    then["properties"] = json!({"dtype": {"enum": names}});
                }
                json!({
                    "if": {"properties": {"kind": {"const": kind.name()}}, "required": ["kind"]},
                    "then": then,
                })
            })
            .collect();
        w["allOf"] = Value::Array(rules);
    }
    if let Some(sweep) = root.pointer_mut("/properties/sweep") {
        sweep["propertyNames"] = json!({"enum": RawWorkload::SWEEPABLE});
    }
    root
}

/// A schema as the text shipped in `schemas/` (pretty, newline-terminated).
pub fn to_text(schema: &Value) -> String {
    let mut s = serde_json::to_string_pretty(schema).unwrap_or_default();
    s.push('\n');
    s
}
