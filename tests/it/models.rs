//! Model settings are read only when a role calls a model: a plan that
//! needs none runs whatever `OPENAI_*` the user's shell exports, and a role
//! that needs one that is missing fails where it is needed, naming the
//! settings to add (never a value).

use crate::common::{TestEnv, examples, run_aot_with};
use aot::state::document;
use aot::state::{AtomStatus, StopReason};

/// A key exported for other tools; its value must never be printed.
const KEY: &str = "sk-shell-exported-5f1c";

fn aligned(base_case: &str, extra: &str) -> String {
    format!(
        "version: 2\nobjective:\n  goal: test\n  background_intent: test\n  deliverables: test\n  definition_of_done: test\n  base_case: {{ command: \"{base_case}\" }}\n{extra}"
    )
}

fn state(env: &TestEnv, name: &str) -> aot::state::StateFile {
    document::read(&env.path(name)).unwrap().state
}

/// The half-set environments users have: a key, a base URL, or one tier's key.
const HALF_SET: [&[(&str, &str)]; 3] = [
    &[("OPENAI_API_KEY", KEY)],
    &[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"), ("OPENAI_API_KEY", KEY)],
    &[("BRAIN_API_KEY", KEY), ("TOOL_BASE_URL", "http://127.0.0.1:9/v1")],
];

#[test]
fn every_example_completes_with_openai_variables_set_as_it_does_without() {
    for example in examples() {
        let name = example.file_name().unwrap().to_str().unwrap();
        let plain = TestEnv::new();
        plain.example(name);
        let expected = plain.aot(&["--state", name, "start"]);
        assert_eq!(expected.code, 0, "{name}:\n{}", expected.transcript());
        let without = state(&plain, name).run.stop.unwrap().reason;
        for vars in HALF_SET {
            let env = TestEnv::new();
            env.example(name);
            let run = run_aot_with(env.dir.path(), &["--state", name, "start"], vars);
            assert_eq!(run.code, 0, "{name} with {vars:?}:\n{}", run.transcript());
            let s = state(&env, name);
            // Which parallel atoms finish before the base case holds varies
            // from run to run; how the run ends does not.
            assert_eq!(s.run.stop.unwrap().reason, without, "{name} with {vars:?}");
            assert_eq!(without, StopReason::Completed, "{name}");
            assert!(
                !run.stderr.contains("warning:"),
                "{name} with {vars:?}:\n{}",
                run.stderr
            );
            assert!(!run.transcript().contains(KEY), "{name}: the key is printed");
        }
    }
}

#[test]
fn the_readme_first_command_runs_with_only_a_key_exported() {
    // The report, as the README runs it.
    let env = TestEnv::new();
    env.example("or-fallback.yaml");
    let run = run_aot_with(
        env.dir.path(),
        &["--state", "or-fallback.yaml", "start"],
        &[("OPENAI_API_KEY", KEY)],
    );
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(!run.stderr.contains("is not set"), "{}", run.stderr);
    // The one line on models says what this plan may call and how each stands.
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("aot: models this plan may call"))
        .unwrap_or_else(|| panic!("no models line:\n{}", run.stderr));
    assert!(line.contains("planner"), "{line}");
    assert!(line.contains("OPENAI_API_KEY set"), "{line}");
    assert!(!line.contains("worker") && !line.contains("validator"), "{line}");
    assert!(!line.contains(KEY), "{line}");
}

#[test]
fn the_models_line_names_each_role_the_plan_may_call() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f done",
            "  criteria: [the work reads well]\ngraph:\n  atoms:\n    a: { run: touch done, criteria: [done exists] }\n    b: { agent: do it }\n",
        ),
    );
    let run = run_aot_with(
        env.dir.path(),
        &["validate"],
        &[("OPENAI_API_KEY", KEY), ("TOOL_MODEL", "small")],
    );
    assert_eq!(run.code, 0, "{}", run.transcript());
    let run = run_aot_with(
        env.dir.path(),
        &["step"],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
            ("TOOL_MODEL", "small"),
        ],
    );
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("aot: models this plan may call"))
        .unwrap_or_else(|| panic!("no models line:\n{}", run.stderr));
    assert!(line.contains("built-in worker: `small` at 127.0.0.1:9"), "{line}");
    assert!(
        line.contains("validator (plausible criteria): `small` at 127.0.0.1:9"),
        "{line}"
    );
    assert!(
        line.contains("meta-validator (the objective's criteria): no model named"),
        "{line}"
    );
    assert!(
        line.contains("planner (once the written alternatives run out): no model named"),
        "{line}"
    );
    assert!(!run.transcript().contains(KEY));
}

#[test]
fn an_agent_atom_with_no_worker_is_blocked_naming_the_settings_and_an_unused_one_stops_nothing() {
    // Reached: the atom fails environmentally, blocked (no retry changes the
    // settings), and its message names what to set.
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned("test -f done", "graph:\n  atoms:\n    fix: { agent: do it }\n"),
    );
    let run = run_aot_with(env.dir.path(), &["start"], &[("OPENAI_API_KEY", KEY)]);
    assert_ne!(run.code, 0, "{}", run.transcript());
    let s = state(&env, "aot.yaml");
    assert_eq!(s.graph.atoms["fix"].status, AtomStatus::Blocked, "{}", run.transcript());
    assert_eq!(s.graph.atoms["fix"].attempts, 1, "not retried");
    let failure = s.run.stop.unwrap().message;
    for wanted in ["TOOL_MODEL or OPENAI_MODEL", "OPENAI_API_KEY is set", "AOT_AGENT_CMD"] {
        assert!(failure.contains(wanted), "{wanted}: {failure}");
    }
    assert!(!run.transcript().contains(KEY));
    assert!(!std::fs::read_to_string(env.path("aot.yaml")).unwrap().contains(KEY));

    // Not reached: an OR whose first alternative holds never needs the agent.
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f done",
            "graph:\n  atoms:\n    fix: { or: [by-hand, by-agent] }\n    by-hand: { run: touch done }\n    by-agent: { agent: do it }\n",
        ),
    );
    let run = run_aot_with(env.dir.path(), &["start"], &[("OPENAI_API_KEY", KEY)]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(!run.stderr.contains("warning:"), "{}", run.stderr);
}

#[test]
fn plausible_criteria_no_validator_can_judge_block_the_atom_before_its_work_runs() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f done",
            "graph:\n  atoms:\n    a: { run: touch ran && touch done, criteria: [the file is tidy] }\n",
        ),
    );
    let run = env.aot(&["start"]);
    assert_ne!(run.code, 0, "{}", run.transcript());
    assert!(
        !env.path("ran").exists(),
        "the work ran though its criterion could not be judged"
    );
    let s = state(&env, "aot.yaml");
    assert_eq!(s.graph.atoms["a"].status, AtomStatus::Blocked);
    let failure = s.run.stop.unwrap().message;
    assert!(failure.contains("cannot be judged"), "{failure}");
    assert!(failure.contains("TOOL_MODEL or OPENAI_MODEL"), "{failure}");
}

#[test]
fn a_replan_with_no_brain_model_stops_as_without_a_planner_naming_the_setting() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f done",
            "  constraints: { max_retries: 0 }\ngraph:\n  atoms:\n    a: { run: \"false\" }\n",
        ),
    );
    let run = run_aot_with(env.dir.path(), &["start"], &[("OPENAI_API_KEY", KEY)]);
    let stop = state(&env, "aot.yaml").run.stop.unwrap();
    assert_eq!(stop.reason, StopReason::Exhausted, "{}", run.transcript());
    assert!(stop.message.contains("no new plan was asked for"), "{}", stop.message);
    assert!(
        stop.message.contains("OPENAI_API_KEY is set") && stop.message.contains("BRAIN_MODEL or OPENAI_MODEL"),
        "{}",
        stop.message
    );
    assert!(!run.transcript().contains(KEY));
}

#[test]
fn aots_own_model_settings_never_reach_an_atoms_command_unless_its_env_passes_them() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f seen",
            "graph:\n  atoms:\n    a: { run: 'env > seen', env: { TOOL_MODEL: passed-on-purpose } }\n",
        ),
    );
    let run = run_aot_with(
        env.dir.path(),
        &["start"],
        &[
            ("BRAIN_API_KEY", "sk-brain-only-aot"),
            ("BRAIN_MODEL", "big"),
            ("TOOL_MODEL", "small"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.transcript());
    let seen = std::fs::read_to_string(env.path("seen")).unwrap();
    assert!(!seen.contains("BRAIN_"), "{seen}");
    assert!(seen.contains("TOOL_MODEL=passed-on-purpose"), "{seen}");
    // The shell's OPENAI_* are the user's, read by agent CLIs as they always are.
    assert!(seen.contains("OPENAI_BASE_URL=http://127.0.0.1:9/v1"), "{seen}");
}

#[test]
fn align_with_every_field_given_needs_no_model_whatever_is_exported() {
    let env = TestEnv::new();
    let run = run_aot_with(
        env.dir.path(),
        &[
            "align",
            "--goal",
            "Say hello",
            "--base-case",
            "grep -q hello hello.txt",
            "--background",
            "a first loop",
            "--deliverables",
            "hello.txt",
            "--done",
            "hello.txt greets",
            "--atom",
            "greet=echo hello > hello.txt",
        ],
        &[("OPENAI_API_KEY", KEY)],
    );
    assert_eq!(run.code, 0, "{}", run.transcript());
    let run = run_aot_with(env.dir.path(), &["start"], &[("OPENAI_API_KEY", KEY)]);
    assert_eq!(run.code, 0, "{}", run.transcript());
}
