//! Smaller things users hit, through the real binary: GGS's `success` on a
//! failed round reads as what it means, a failure's evidence keeps its
//! indentation in `aot status`, empty lists print nothing, one-alternative OR
//! atoms warn, a duplicate key does not hide the file's other problems.

use crate::common::TestEnv;

fn aligned(base_case: &str, extra: &str) -> String {
    format!(
        "version: 1\nobjective:\n  goal: test\n  background_intent: test\n  deliverables: test\n  definition_of_done: test\n  base_case: {{ command: \"{base_case}\" }}\n{extra}"
    )
}

/// Three sound atoms and an OR whose first alternative fails with a
/// traceback: one failed criterion in ten is within GGS's tolerance.
const TOLERATED: &str = "  constraints: { max_retries: 0, verify: when_solved }
graph:
  atoms:
    a: { run: 'true', check: ['true', 'true'] }
    b: { run: 'true', check: ['true', 'true'] }
    c: { run: 'true', check: ['true', 'true'] }
    fix: { or: [d, e] }
    d: { run: \"printf 'line one\\\\nTraceback (most recent call last):\\\\n  File x\\\\nValueError: bad\\\\n'; exit 1\", deps: [a, b, c] }
    e: { run: 'touch e.done', deps: [a, b, c] }
";

#[test]
fn a_tolerated_failure_is_never_called_a_success() {
    let env = TestEnv::new();
    env.write("aot.yaml", &aligned("test -f e.done", TOLERATED));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let log = env.aot(&["log"]).stdout;
    assert!(log.contains("→ within tolerance (D ≤ δ)"), "{log}");
    assert!(!log.contains("→ success"), "{log}");
    let status = env.aot(&["status"]).stdout;
    assert!(status.contains("→ within tolerance (D ≤ δ)"), "{status}");
    let memory = env.aot(&["memory", "list"]).stdout;
    let failed = memory
        .lines()
        .find(|l| l.contains(" d "))
        .unwrap_or_else(|| panic!("d's Megram in {memory}"));
    assert!(failed.ends_with("within tolerance (D ≤ δ)"), "{failed}");
    let megrams = std::fs::read_to_string(env.path(".aot/memory.jsonl")).unwrap();
    assert!(!megrams.contains("(anti-pattern) in round"), "{megrams}");
    assert!(
        megrams.contains("(anti-pattern); GGS round 1: within tolerance"),
        "{megrams}"
    );
}

#[test]
fn status_keeps_a_failures_evidence_under_its_entry_and_prints_no_empty_lists() {
    let env = TestEnv::new();
    env.write("aot.yaml", &aligned("test -f e.done", TOLERATED));
    assert_eq!(env.aot(&["start"]).code, 0);
    let status = env.aot(&["status"]).stdout;
    let trail: Vec<&str> = status
        .lines()
        .skip_while(|l| *l != "trail")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(
        trail.iter().all(|l| l.starts_with("  ")),
        "every trail line is indented:\n{}",
        trail.join("\n")
    );
    let at = trail.iter().position(|l| l.contains("failure d")).unwrap();
    assert!(trail[at].ends_with("run: exit 1:"), "{}", trail[at]);
    assert_eq!(trail[at + 2].trim(), "Traceback (most recent call last):");
    assert!(
        trail[at + 2].starts_with("      "),
        "evidence under its entry: {:?}",
        trail[at + 2]
    );
    assert!(
        trail[at + 3].starts_with("        File x"),
        "its own indentation kept: {:?}",
        trail[at + 3]
    );
    assert!(status.contains("backtrack fix: d → e\n"), "{status}");
    for empty in ["(reset: )", ": ;", "remaining: ;"] {
        assert!(!status.contains(empty), "`{empty}` in:\n{status}");
    }
}

#[test]
fn one_iteration_is_singular() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f never",
            "graph:\n  atoms:\n    a: { run: 'true' }\n    b: { run: 'true', deps: [a] }\n",
        ),
    );
    let run = env.aot(&["start", "--max-iterations", "1"]);
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    let stop = state.run.stop.unwrap();
    assert_eq!(
        stop.message,
        "1 iteration done and the base case does not hold",
        "{}",
        run.transcript()
    );
}

#[test]
fn status_says_one_replan_and_shows_no_arrow_to_an_empty_summary() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f never",
            "graph:\n  atoms:\n    a: { run: 'true' }\n    b: { run: 'true', deps: [a] }\n",
        ),
    );
    assert_eq!(env.aot(&["start"]).code, 5, "exhausted");
    let status = env.aot(&["status"]).stdout;
    assert!(status.contains("  ✓ b  run: true (attempts: 1)"), "{status}");
    assert!(!status.contains("→ \n"), "an arrow to nothing:\n{status}");
    assert!(status.contains("  a: (no summary) (attempt 1,"), "{status}");
    assert!(status.contains("1 decision, 1 replan, "), "{status}");
}

#[test]
fn an_or_atom_with_one_alternative_warns() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f done",
            "graph:\n  atoms:\n    fix: { or: [only] }\n    only: { run: 'touch done' }\n",
        ),
    );
    let validate = env.aot(&["validate"]);
    assert_eq!(validate.code, 0, "a warning is not an error: {}", validate.transcript());
    assert!(
        validate
            .stderr
            .contains("warning: aot.yaml: graph.atoms.fix: an OR atom with one alternative (`only`) has no fallback"),
        "{}",
        validate.stderr
    );
    let json = env.aot(&["validate", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(value["warnings"].as_array().map(Vec::len), Some(1), "{value}");
    let start = env.aot(&["start"]);
    assert_eq!(start.code, 0);
    assert!(start.stderr.contains("has no fallback"), "{}", start.stderr);
}

#[test]
fn a_duplicate_key_is_reported_with_the_files_other_problems() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        "version: 7\nobjective:\n  goal: g\n  goal: h\n  base_case: { command: 'true' }\ngraph:\n  atoms:\n    a: { run: 'true', deps: [nope] }\n    b: { run: 'true', run: 'false' }\n    c:\n      run: 'true'\n      deps: []\n      deps: [a]\n    b: { run: 'x' }\n",
    );
    let run = env.aot(&["validate"]);
    assert_eq!(run.code, 1);
    for needle in [
        "unsupported version 7",
        "objective.goal: duplicate key",
        "graph.atoms.b.run: duplicate key",
        "graph.atoms.c.deps: duplicate key",
        "graph.atoms.b: duplicate key",
        "dependency `nope` is not an atom",
        "aot.yaml: 6 problems",
    ] {
        assert!(run.stderr.contains(needle), "`{needle}` in:\n{}", run.stderr);
    }
}

#[test]
fn an_exhausted_stop_names_a_tracebacks_exception_and_reads_plainly() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f never",
            r#"  constraints: { max_retries: 0 }
graph:
  atoms:
    fix: { or: [a, b] }
    a: { run: "printf 'one\nTraceback (most recent call last):\n  File x, line 1\nIndexError: tuple index out of range\n'; exit 1" }
    b: { run: "printf 'Traceback (most recent call last):\n  File x, line 1\nModuleNotFoundError: No module named nope\nnoise\n'; exit 1" }
"#,
        ),
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 5, "{}", run.transcript());
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    let message = state.run.stop.unwrap().message;
    assert!(
        message.contains("ModuleNotFoundError: No module named nope"),
        "{message}"
    );
    assert!(!message.contains("Traceback"), "{message}");
    assert!(message.contains("no alternative left ("), "{message}");
    assert!(message.contains("; GGS's decision: "), "{message}");
    assert!(!message.contains(" under "), "{message}");
}
