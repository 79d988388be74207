//! The checked-in schema matches the types, and every example validates
//! against it with an independent JSON Schema validator.

use crate::common::{examples, root, run_aot};

#[test]
fn checked_in_schema_is_current() {
    let checked_in = std::fs::read_to_string(root().join("schema/state.schema.json")).unwrap();
    let generated = aot::state::schema::state_schema_text();
    assert!(
        checked_in == generated,
        "schema/state.schema.json is stale: run `cargo run -q -- schema > schema/state.schema.json`"
    );
    let run = run_aot(&root(), &["schema"]);
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, generated);
}

#[test]
fn every_example_names_the_schema_and_validates_against_it() {
    let schema = aot::state::schema::state_schema();
    let validator = jsonschema::validator_for(schema).expect("the schema compiles");
    for example in examples() {
        let text = std::fs::read_to_string(&example).unwrap();
        assert!(
            text.starts_with("# yaml-language-server: $schema=../schema/state.schema.json\n"),
            "{} must start with the schema comment",
            example.display()
        );
        let value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", example.display());
    }
}

#[test]
fn the_schema_rejects_what_validate_rejects() {
    let validator = jsonschema::validator_for(aot::state::schema::state_schema()).unwrap();
    for name in [
        "unknown-fields.yaml",
        "negative-limit.yaml",
        "unknown-status.yaml",
        "wrong-type.yaml",
    ] {
        let text = std::fs::read_to_string(root().join("tests/fixtures/bad").join(name)).unwrap();
        let value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert!(!validator.is_valid(&value), "{name} passes the schema");
    }
}

#[test]
fn the_journal_record_the_docs_show_is_the_format_aot_writes() {
    let docs = std::fs::read_to_string(root().join("docs/state-file.md")).unwrap();
    let shown = format!("{{\"v\":{},\"seq\":N", aot::journal::wire::WIRE_VERSION);
    assert!(
        docs.contains(&shown),
        "docs/state-file.md should show the journal record as `{shown}…`"
    );
}
