//! The JSON Schema of the state file, generated from the Rust types. It is
//! checked in under `schema/` for editors, and it drives the shape checks of
//! `aot validate`, so the types, the editor and the validator cannot disagree.

use std::sync::OnceLock;

use serde_json::Value;

use crate::state::StateFile;

/// Returns the state-file schema as JSON.
pub fn state_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let schema = schemars::schema_for!(StateFile);
        serde_json::to_value(schema).unwrap_or(Value::Null)
    })
}

/// Returns the schema as the pretty-printed text checked in at `schema/state.schema.json`.
pub fn state_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(state_schema()).unwrap_or_default();
    text.push('\n');
    text
}
