//! `aot align`: flags, plan files, `--atom`, overwrite protection, and what
//! is still missing.

use crate::common::TestEnv;

const FLAGS: [&str; 10] = [
    "--goal",
    "Say hi",
    "--base-case",
    "test -f hi",
    "--background",
    "a demo",
    "--deliverables",
    "the file hi",
    "--done",
    "hi exists",
];

#[test]
fn flags_and_atoms_make_an_aligned_file_that_runs() {
    let env = TestEnv::new();
    let mut args = vec!["align", "--raw-input", "  make a hi file, pls  "];
    args.extend(FLAGS);
    args.extend(["--atom", "hi=touch hi && echo 'summary: made hi'"]);
    let run = env.aot(&args);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(run.stdout, "aot.yaml: aligned, 1 atom(s); run `aot start`\n");
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert!(
        text.starts_with("# yaml-language-server: $schema=.aot/state.schema.json\n"),
        "{text}"
    );
    assert!(
        env.path(".aot/state.schema.json").exists(),
        "the schema the modeline names is there"
    );
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(
        state.objective.raw_input.as_deref(),
        Some("  make a hi file, pls  "),
        "verbatim"
    );
    assert_eq!(env.aot(&["start"]).code, 0);
    assert!(env.path("hi").exists());
}

#[test]
fn an_existing_file_is_not_overwritten_without_force() {
    let env = TestEnv::new();
    env.write("aot.yaml", "precious\n");
    let mut args = vec!["align"];
    args.extend(FLAGS);
    args.extend(["--atom", "a=true"]);
    let run = env.aot(&args);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("aot.yaml already exists"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(env.path("aot.yaml")).unwrap(), "precious\n");
    args.push("--force");
    assert_eq!(env.aot(&args).code, 0);
}

#[test]
fn a_plan_file_gives_the_graph() {
    let env = TestEnv::new();
    env.write(
        "plan.yaml",
        "atoms:\n  fetch: { run: 'true' }\n  build: { run: 'touch hi', deps: [fetch] }\n",
    );
    let mut args = vec!["align", "--plan", "plan.yaml"];
    args.extend(FLAGS);
    assert_eq!(env.aot(&args).code, 0);
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.graph.atoms.keys().collect::<Vec<_>>(), ["fetch", "build"]);
}

#[test]
fn a_broken_plan_is_reported_at_its_line_and_nothing_is_written() {
    let env = TestEnv::new();
    env.write("plan.yaml", "atoms:\n  build: { rnu: 'make' }\n");
    let mut args = vec!["align", "--plan", "plan.yaml"];
    args.extend(FLAGS);
    let run = env.aot(&args);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("plan.yaml:2:"), "{}", run.stderr);
    assert!(run.stderr.contains("unknown field `rnu`"), "{}", run.stderr);
    assert!(!env.path("aot.yaml").exists());
    env.write("plan.yaml", "atoms:\n  build: { run: 'make', deps: [fetch] }\n");
    let run = env.aot(&args);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("dependency `fetch` is not an atom"),
        "{}",
        run.stderr
    );
    assert!(!env.path("aot.yaml").exists());
}

#[test]
fn missing_agreements_are_named_and_the_gate_code_returned() {
    let env = TestEnv::new();
    let run = env.aot(&["align", "--goal", "x", "--atom", "a=true"]);
    assert_eq!(run.code, 6, "{}", run.transcript());
    insta::assert_snapshot!(run.stdout, @r"
    aot.yaml: written, not aligned yet; missing:
      - objective.background_intent (why it matters)
      - objective.deliverables (what should be produced)
      - objective.definition_of_done (when it is done, in words)
      - objective.base_case.command (a command whose exit 0 means done)
    fill them in the file (or rerun `aot align --force` with the flags), then `aot start`
    ");
    assert_eq!(env.aot(&["start"]).code, 6, "the start gate agrees");
}

#[test]
fn a_malformed_atom_flag_is_explained() {
    let env = TestEnv::new();
    let run = env.aot(&["align", "--atom", "no-equals-sign"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("expected ID=CMD"), "{}", run.stderr);
}
