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
    assert!(
        env.path(".aot/.gitignore").exists(),
        "aot's folder stays out of git status"
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

mod planner {
    //! `aot align "TEXT"` with a planner: a scripted model on 127.0.0.1 drafts.

    use crate::common::{TestEnv, run_aot_with};
    use crate::fake_llm::{FakeLlm, Step};

    const KEY: &str = "sk-align-secret-never-written-93ab";

    const DRAFT: &str = r#"<think>the user wants a file</think>
Here is the plan:
```json
{"objective": {"goal": "Make a hi file", "background_intent": "a demo", "deliverables": "the file hi",
  "definition_of_done": "hi exists", "base_case": {"command": "test -f hi"}},
 "atoms": {"write": {"run": "touch hi"}}}
```"#;

    fn align(env: &TestEnv, server: &FakeLlm, args: &[&str]) -> crate::common::Run {
        run_aot_with(
            env.dir.path(),
            args,
            &[
                ("OPENAI_BASE_URL", server.base.as_str()),
                ("OPENAI_API_KEY", KEY),
                ("OPENAI_MODEL", "fake-model"),
                ("AOT_LLM_TIMEOUT", "5"),
            ],
        )
    }

    #[test]
    fn a_sentence_becomes_an_aligned_plan_that_runs() {
        let env = TestEnv::new();
        let server = FakeLlm::start(vec![Step::chat(DRAFT)]);
        let run = align(&env, &server, &["align", "  please make me a hi file "]);
        assert_eq!(run.code, 0, "{}", run.transcript());
        assert!(run.stdout.contains("aligned, 1 atom(s)"), "{}", run.stdout);
        let seen = server.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].header("x-aot-role"), Some("planner"));
        assert!(seen[0].prompt().contains("please make me a hi file"));
        let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
        assert_eq!(
            state.objective.raw_input.as_deref(),
            Some("  please make me a hi file "),
            "verbatim"
        );
        assert_eq!(state.objective.goal.as_deref(), Some("Make a hi file"));
        // What drafting spent is the task's: journaled, its conversation kept.
        let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
        assert_eq!(
            journal.matches(r#""type":"llm_called","role":"planner""#).count(),
            1,
            "{journal}"
        );
        assert!(journal.contains(r#""kept":".aot/llm/"#), "{journal}");
        assert!(
            env.path(".aot/.gitignore").exists(),
            "made before the conversation is kept"
        );
        assert_eq!(state.run.spend.calls, 1);
        let log = env.aot(&["log", "--llm"]);
        assert!(log.stdout.contains("please make me a hi file"), "{}", log.transcript());
        assert_eq!(env.aot(&["start"]).code, 0);
        let audit = env.aot(&["audit"]);
        assert_eq!(
            audit.code,
            0,
            "drafting is not spend without progress: {}",
            audit.transcript()
        );
        let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
        assert_eq!(state.run.spend.calls, 1, "a start keeps what aligning spent");
        assert!(env.path("hi").exists());
        // The key is in no file aot wrote.
        for entry in crate::common::files_under(env.dir.path()) {
            let bytes = std::fs::read(&entry).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(KEY),
                "{} holds the key",
                entry.display()
            );
        }
        assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
    }

    #[test]
    fn flags_win_over_the_draft() {
        let env = TestEnv::new();
        let server = FakeLlm::start(vec![Step::chat(DRAFT)]);
        let run = align(
            &env,
            &server,
            &["align", "make hi", "--goal", "My own goal", "--atom", "mine=touch hi"],
        );
        assert_eq!(run.code, 0, "{}", run.transcript());
        let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
        assert_eq!(state.objective.goal.as_deref(), Some("My own goal"));
        assert_eq!(
            state.objective.deliverables.as_deref(),
            Some("the file hi"),
            "the draft fills the rest"
        );
        assert_eq!(
            state.graph.atoms.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["mine"]
        );
        let seen = &server.seen()[0];
        assert!(seen.prompt().contains("- goal: My own goal"));
        // The atoms are the user's: only agreements are drafted, by the perceiver (R1).
        assert_eq!(seen.header("x-aot-role"), Some("perceiver"));
        assert!(seen.prompt().contains("You are the perceiver"), "{}", seen.prompt());
    }

    #[test]
    fn an_invalid_draft_is_asked_again_with_the_problems_then_kept_aside() {
        let env = TestEnv::new();
        let broken = r#"{"objective": {"goal": "g", "background_intent": "b", "deliverables": "d", "definition_of_done": "x", "base_case": {"command": "true"}}, "atoms": {"a": {"run": "true", "deps": ["nowhere"]}}}"#;
        let server = FakeLlm::start(vec![Step::chat(broken), Step::chat(broken)]);
        let run = align(&env, &server, &["align", "do it"]);
        assert_eq!(run.code, 1, "{}", run.transcript());
        assert!(
            run.stderr.contains("not valid, also after it was asked again"),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains("nowhere"), "{}", run.stderr);
        assert!(
            !env.path("aot.yaml").exists(),
            "nothing invalid is written as the state file"
        );
        assert!(env.path("aot.yaml.draft.yaml").exists(), "the draft is kept aside");
        let second = &server.seen()[1];
        assert!(
            second.prompt().contains("The plan cannot be used") && second.prompt().contains("nowhere"),
            "{}",
            second.prompt()
        );

        // Fixed on the re-ask: written.
        let fixed = broken.replace(r#", "deps": ["nowhere"]"#, "");
        let server = FakeLlm::start(vec![Step::chat(broken), Step::chat(&fixed)]);
        let run = align(&env, &server, &["align", "do it", "--force"]);
        assert_eq!(run.code, 0, "{}", run.transcript());
        let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
        assert_eq!(state.run.spend.calls, 2, "the re-ask is counted too");
    }

    #[test]
    fn a_destructive_draft_is_refused_without_yes_and_written_with_it() {
        let env = TestEnv::new();
        env.write("data.txt", "precious\n");
        let draft = r#"{"objective": {"goal": "g", "background_intent": "b", "deliverables": "d", "definition_of_done": "x", "base_case": {"command": "test -f out"}}, "atoms": {"wipe": {"run": "rm -rf build && echo > data.txt && touch out"}}}"#;
        let server = FakeLlm::start(vec![Step::chat(draft), Step::chat(draft)]);
        let run = align(&env, &server, &["align", "clean up"]);
        assert_eq!(run.code, 1, "{}", run.transcript());
        assert!(
            run.stderr.contains("`rm -rf build`") && run.stderr.contains("--yes"),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr.contains("overwrites the existing file data.txt"),
            "{}",
            run.stderr
        );
        assert!(!env.path("aot.yaml").exists());
        let server = FakeLlm::start(vec![Step::chat(draft)]);
        let run = align(&env, &server, &["align", "clean up", "--yes"]);
        assert_eq!(run.code, 0, "{}", run.transcript());
        assert_eq!(server.seen().len(), 1);
    }

    #[test]
    fn without_an_llm_align_is_as_before_and_an_unreachable_one_is_a_clear_error() {
        let env = TestEnv::new();
        let run = env.aot(&["align", "make hi"]);
        assert_eq!(run.code, 6, "{}", run.transcript());
        assert!(run.stdout.contains("not aligned yet"), "{}", run.stdout);
        let env = TestEnv::new();
        let run = run_aot_with(
            env.dir.path(),
            &["align", "make hi"],
            &[
                ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
                ("OPENAI_MODEL", "m"),
                ("AOT_LLM_TIMEOUT", "2"),
            ],
        );
        assert_eq!(run.code, 1, "{}", run.transcript());
        assert!(
            run.stderr.contains("could not draft a plan") && run.stderr.contains("127.0.0.1:9"),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains("--no-llm"), "{}", run.stderr);
    }
}
