//! `aot validate` on good and broken files: every problem at once, each with
//! file:line:column where it has one, never a panic.

use std::io::Write;

use crate::common::{TestEnv, examples, root, run_aot};

fn bad_fixtures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("tests/fixtures/bad"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn there_are_at_least_fifteen_broken_fixtures() {
    assert!(bad_fixtures().len() >= 15, "{:?}", bad_fixtures());
}

#[test]
fn every_broken_fixture_is_refused_with_a_located_message() {
    for name in bad_fixtures() {
        let rel = format!("tests/fixtures/bad/{name}");
        let run = run_aot(&root(), &["validate", &rel]);
        assert_eq!(run.code, 1, "{name}: {}", run.transcript());
        assert!(
            run.stdout.is_empty(),
            "{name}: text mode prints problems on stderr only"
        );
        assert!(!run.stderr.contains("panicked"), "{name}: {}", run.stderr);
        assert!(
            run.stderr.contains(&rel),
            "{name}: the message must name the file:\n{}",
            run.stderr
        );
        // Every problem that has a place in the text is shown at file:line:column.
        let json = run_aot(&root(), &["validate", "--json", &rel]);
        let report: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
        for error in report["errors"].as_array().unwrap() {
            if let Some(line) = error["line"].as_u64() {
                let column = error["column"].as_u64().unwrap();
                assert!(
                    run.stderr.contains(&format!("{rel}:{line}:{column}")),
                    "{name}: missing {rel}:{line}:{column} in\n{}",
                    run.stderr
                );
            }
        }
        let placeless = ["empty.yaml", "directory.yaml"];
        if !placeless.contains(&name.as_str()) {
            assert!(
                report["errors"][0]["line"].is_u64(),
                "{name}: expected a line number: {report}"
            );
        }
        insta::assert_snapshot!(format!("validate_bad__{name}"), run.stderr);
    }
}

#[test]
fn many_problems_are_reported_in_one_run() {
    let run = run_aot(&root(), &["validate", "tests/fixtures/bad/many-problems.yaml"]);
    assert!(run.stderr.contains("7 problems"), "{}", run.stderr);
}

#[test]
fn a_fifty_megabyte_file_is_refused_quickly_and_clearly() {
    let env = TestEnv::new();
    let path = env.path("huge.yaml");
    let mut file = std::fs::File::create(&path).unwrap();
    let line = format!("# {}\n", "x".repeat(1022));
    for _ in 0..(50 * 1024) {
        file.write_all(line.as_bytes()).unwrap();
    }
    drop(file);
    let run = env.aot(&["validate", "huge.yaml"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("50.0 MiB"), "{}", run.stderr);
    assert!(run.stderr.contains("huge.yaml"), "{}", run.stderr);
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let env = TestEnv::new();
    let run = env.aot(&["validate"]);
    assert_eq!(run.code, 1);
    insta::assert_snapshot!(run.transcript(), @r"
    --- stderr
    error: aot.yaml: no such file
    [exit 1]
    ");
}

#[test]
fn every_example_is_valid() {
    for example in examples() {
        let run = run_aot(&root(), &["validate", example.to_str().unwrap()]);
        assert_eq!(run.code, 0, "{}", run.transcript());
    }
}

#[test]
fn json_state_files_are_read_and_checked_like_yaml() {
    let env = TestEnv::new();
    let example = aot::state::document::read(&root().join("state/diamond.yaml"))
        .unwrap()
        .state;
    env.write("diamond.json", &serde_json::to_string_pretty(&example).unwrap());
    let run = env.aot(&["--state", "diamond.json", "validate"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let mut broken = serde_json::to_value(&example).unwrap();
    broken["graph"]["atoms"]["join"]["deps"] = serde_json::json!(["left", "rihgt"]);
    env.write("broken.json", &serde_json::to_string_pretty(&broken).unwrap());
    let run = env.aot(&["validate", "broken.json"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("did you mean `right`?"), "{}", run.stderr);
    assert!(run.stderr.contains("broken.json:"), "{}", run.stderr);
}

#[test]
fn validate_json_output_lists_each_problem_with_its_place() {
    let run = run_aot(&root(), &["validate", "--json", "tests/fixtures/bad/dangling-dep.yaml"]);
    assert_eq!(run.code, 1);
    insta::assert_snapshot!(run.stdout, @r#"
    {
      "file": "tests/fixtures/bad/dangling-dep.yaml",
      "valid": false,
      "errors": [
        {
          "message": "dependency `fech` is not an atom",
          "field": "graph.atoms.build.deps[0]",
          "line": 8,
          "column": 39,
          "help": "did you mean `fetch`?"
        }
      ],
      "warnings": []
    }
    "#);
}

/// Files built to make validation slow or its report huge: 10,000 dangling
/// dependencies on one line, 4,000 bad templates, a 200 KB unknown name.
fn hostile_files(env: &TestEnv) -> Vec<(&'static str, usize)> {
    let head = r#"{"version":1,"objective":{"goal":"g","background_intent":"b","deliverables":"d","definition_of_done":"x","base_case":{"command":"true"}},"graph":{"atoms":"#;
    let deps: Vec<String> = (0..10_000).map(|i| format!("\"missing{i}\"")).collect();
    env.write(
        "deps.yaml",
        &format!(r#"{head}{{"a":{{"run":"true","deps":[{}]}}}}}}}}"#, deps.join(",")),
    );
    let refs: Vec<String> = (0..4_000)
        .map(|i| format!("{{{{bindings.nope{i}.summary}}}}"))
        .collect();
    env.write(
        "refs.yaml",
        &format!(r#"{head}{{"a":{{"run":"{}"}}}}}}}}"#, refs.join(" ")),
    );
    let many: Vec<String> = (0..2_000).map(|i| format!(r#""x{i}":{{"run":"true"}}"#)).collect();
    env.write(
        "name.yaml",
        &format!(
            r#"{head}{{{},"a":{{"run":"true","deps":["{}"]}}}}}}}}"#,
            many.join(","),
            "z".repeat(200_000)
        ),
    );
    vec![("deps.yaml", 10_000), ("refs.yaml", 4_000), ("name.yaml", 1)]
}

#[test]
fn a_report_of_thousands_of_problems_stays_short_and_json_keeps_them_all() {
    let env = TestEnv::new();
    for (file, problems) in hostile_files(&env) {
        let run = env.aot(&["validate", file]);
        assert_eq!(run.code, 1, "{file}: {}", run.transcript());
        assert!(
            run.stderr.len() < 64 * 1024,
            "{file}: {} bytes of report",
            run.stderr.len()
        );
        let shown = run.stderr.matches("error: ").count();
        assert_eq!(shown, problems.min(50), "{file}: the first 50 are shown");
        if problems > 50 {
            assert!(
                run.stderr.contains(&format!("… and {} more", problems - 50)),
                "{file}: says how many more:\n{}",
                run.stderr
            );
        }
        let json = env.aot(&["--json", "validate", file]);
        let report: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
        assert_eq!(report["errors"].as_array().map(Vec::len), Some(problems), "{file}");
    }
}
