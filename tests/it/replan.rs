//! Replanning by a model when the written alternatives run out: a scripted
//! OpenAI-compatible server on 127.0.0.1 answers the planner; its plans are
//! grafted, checked in code (blocked tools, Law 1) and run.

use crate::common::{Run, TestEnv, run_aot_with};
use crate::fake_llm::{FakeLlm, Step};

const KEY: &str = "sk-replan-secret-7c1d-never-written";

/// Two alternatives that both fail (their tool `sh` gets blocked), and a
/// base case that needs the file `done`.
fn exhausting(env: &TestEnv) {
    env.write(
        "aot.yaml",
        "version: 2\nobjective:\n  goal: make done\n  background_intent: b\n  deliverables: the file done\n  definition_of_done: done exists\n  base_case: { command: 'test -f done' }\n  constraints: { max_retries: 0, isolation: none }\ngraph:\n  atoms:\n    fix:\n      or: [a, b]\n    a:\n      run: 'false'\n      tool: sh\n    b:\n      run: 'exit 1'\n      tool: sh\n",
    );
}

fn start(env: &TestEnv, server: &FakeLlm, extra: &[&str]) -> Run {
    let mut args = vec!["start"];
    args.extend(extra);
    run_aot_with(
        env.dir.path(),
        &args,
        &[
            ("BRAIN_BASE_URL", server.base.as_str()),
            ("BRAIN_API_KEY", KEY),
            ("BRAIN_MODEL", "fake-planner"),
            ("AOT_LLM_TIMEOUT", "5"),
        ],
    )
}

fn read(env: &TestEnv, name: &str) -> String {
    std::fs::read_to_string(env.path(name)).unwrap_or_default()
}

fn plan(atoms: &str) -> Step {
    Step::chat(&format!(
        r#"{{"atoms": {atoms}, "rationale": "write the file directly"}}"#
    ))
}

#[test]
fn without_a_planner_the_run_is_exhausted_as_before() {
    let env = TestEnv::new();
    exhausting(&env);
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 5, "{}", run.transcript());
}

#[test]
fn a_replan_after_exhaustion_runs_and_completes() {
    let env = TestEnv::new();
    exhausting(&env);
    let server = FakeLlm::start(vec![plan(r#"{"write": {"run": "touch done"}}"#)]);
    let run = start(&env, &server, &[]);
    assert_eq!(
        run.code,
        0,
        "{}\n{}",
        run.transcript(),
        read(&env, "aot.yaml.journal.jsonl")
    );
    assert!(env.path("done").exists());
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("x-aot-role"), Some("planner"));
    let prompt = seen[0].prompt();
    for part in [
        "GGS's directive",
        "D=",
        "the tool `sh` (blocked by GGS)",
        "`b`",
        "exit 1",
    ] {
        assert!(prompt.contains(part), "the PlanDirective carries {part}:\n{prompt}");
    }
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    let added = &state.graph.atoms["r1-write"];
    let planned = added.planned.as_ref().expect("marked as the planner's");
    // `a` failed and blocked the tool `sh`, which refuses `b` too: the plan answers `a`.
    assert_eq!(planned.answers.as_deref(), Some("a"));
    assert_eq!(planned.rationale, "write the file directly");
    assert!(
        state.graph.atoms["fix"]
            .or
            .as_ref()
            .unwrap()
            .iter()
            .any(|a| a == "r1-write")
    );
    let text = read(&env, "aot.yaml");
    assert!(
        text.contains("r1-write:") && text.contains("planned:"),
        "visible in the file:\n{text}"
    );
    let journal = read(&env, "aot.yaml.journal.jsonl");
    assert!(journal.contains(r#""type":"replanned""#), "{journal}");
    assert!(
        journal.contains(r#""type":"llm_called","role":"planner","model":"fake-model""#),
        "{journal}"
    );
    assert_eq!(env.aot(&["replay", "--check"]).code, 0, "replayable");
    let calls = env.aot(&["log", "--llm"]);
    assert_eq!(calls.code, 0, "{}", calls.transcript());
    assert!(calls.stdout.contains("☁ planner → fake-model"), "{}", calls.stdout);
    assert!(
        calls.stdout.contains("GGS's directive"),
        "the prompt is kept: {}",
        calls.stdout
    );
    assert!(
        calls.stdout.contains(r#""run": "touch done""#),
        "the answer is kept: {}",
        calls.stdout
    );
    let log = env.aot(&["log"]);
    assert!(
        log.stdout.contains("planner (change_approach)") || log.stdout.contains("✎ planner"),
        "{}",
        log.stdout
    );
    for file in crate::common::files_under(env.dir.path()) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap_or_default()).into_owned();
        assert!(!text.contains(KEY), "{} holds the key", file.display());
    }
    assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
}

#[test]
fn a_plan_with_a_blocked_tool_never_runs_and_the_reason_reaches_the_next_request() {
    let env = TestEnv::new();
    exhausting(&env);
    let marker = env.path("blocked-ran");
    let server = FakeLlm::start(vec![
        plan(&format!(
            r#"{{"w": {{"run": "touch {} done", "tool": "sh"}}}}"#,
            marker.display()
        )),
        plan(r#"{"w": {"run": "touch done", "tool": "touch"}}"#),
    ]);
    let run = start(&env, &server, &[]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(!marker.exists(), "the refused plan never ran");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let second = seen[1].prompt();
    assert!(
        second.contains("refused") && second.contains("tool `sh`, which is blocked"),
        "{second}"
    );
}

#[test]
fn a_destructive_plan_is_refused_without_yes_and_runs_with_it() {
    let env = TestEnv::new();
    exhausting(&env);
    env.write("junk", "old\n");
    let destructive = || plan(r#"{"w": {"run": "rm -f junk && touch done", "tool": "shell"}}"#);
    let server = FakeLlm::start(vec![destructive(), destructive(), destructive()]);
    let run = start(&env, &server, &[]);
    assert_eq!(run.code, 5, "{}", run.transcript());
    assert!(env.path("junk").exists(), "nothing destructive ran");
    assert_eq!(server.seen().len(), 3, "asked again twice, then stopped");
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    let stop = state.run.stop.expect("stopped");
    assert!(
        stop.message.contains("refused 3 times") && stop.message.contains("--yes"),
        "{}",
        stop.message
    );
    assert!(
        run.stderr
            .contains("law 1       refused: atom `r1-w` run: `rm -f junk`"),
        "the summary lists each gate: {}",
        run.stderr
    );
    assert_eq!(
        read(&env, "aot.yaml.journal.jsonl")
            .matches(r#""type":"plan_refused""#)
            .count(),
        3,
        "each refusal recorded"
    );

    let env = TestEnv::new();
    exhausting(&env);
    env.write("junk", "old\n");
    let server = FakeLlm::start(vec![destructive()]);
    let run = start(&env, &server, &["--yes"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(
        run.stderr
            .contains("law 1       ran with --yes: atom `r1-w` run: `rm -f junk`"),
        "{}",
        run.stderr
    );
    assert!(!env.path("junk").exists() && env.path("done").exists());
}

#[test]
fn a_planner_that_cannot_answer_ends_the_run_exhausted_saying_why() {
    let env = TestEnv::new();
    exhausting(&env);
    let server = FakeLlm::start(vec![Step::status(401, &[])]);
    let run = start(&env, &server, &[]);
    assert_eq!(run.code, 5, "{}", run.transcript());
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    let message = state.run.stop.unwrap().message;
    assert!(
        message.contains("could not make a new plan") && message.contains("401"),
        "{message}"
    );
    assert!(!message.contains(KEY));
}

/// `exhausting`'s file with these constraints added.
fn exhausting_with(env: &TestEnv, constraints: &str) {
    exhausting(env);
    let text = read(env, "aot.yaml").replace(
        "constraints: { max_retries: 0, isolation: none }",
        &format!("constraints: {{ max_retries: 0, isolation: none, {constraints} }}"),
    );
    env.write("aot.yaml", &text);
}

#[test]
fn a_token_budget_too_small_for_the_call_abandons_before_making_it() {
    let env = TestEnv::new();
    exhausting_with(&env, "max_tokens: 1000");
    let server = FakeLlm::start(vec![plan(r#"{"write": {"run": "touch done"}}"#)]);
    let run = start(&env, &server, &[]);
    assert_eq!(run.code, 4, "abandoned: {}", run.transcript());
    assert_eq!(
        server.seen().len(),
        0,
        "the call that could pass the budget was not made"
    );
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    let stop = state.run.stop.unwrap();
    assert!(
        stop.message.contains("token budget") && stop.message.contains("max_tokens 1000"),
        "{}",
        stop.message
    );
    assert!(stop.final_result.is_some(), "with a FinalResult");
}

#[test]
fn the_budget_is_checked_before_every_call_and_spend_is_shown_by_role_and_atom() {
    let env = TestEnv::new();
    exhausting_with(&env, "max_tokens: 20000");
    std::fs::write(
        env.path("aot.yaml"),
        read(&env, "aot.yaml") + "llm:\n  prices:\n    fake-model: { input: 2.0, output: 8.0 }\n",
    )
    .unwrap();
    // The first plan is refused (blocked tool) after using 8,000 tokens:
    // asking again could pass the budget, so it is not asked.
    let refused = Step::chat_with_usage(
        r#"{"atoms": {"w": {"run": "touch done", "tool": "sh"}}, "rationale": "r"}"#,
        Some((5000, 3000)),
    );
    let server = FakeLlm::start(vec![refused, plan(r#"{"w": {"run": "touch done"}}"#)]);
    let run = start(&env, &server, &[]);
    assert_eq!(run.code, 4, "{}", run.transcript());
    assert_eq!(server.seen().len(), 1);
    let status = env.aot(&["status"]);
    assert!(
        status
            .stdout
            .contains("spend      1 call, 8000 tokens, $0.0340 of max_tokens 20000"),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains("planner    1 call, 8000 tokens"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("for a: 1 call"), "{}", status.stdout);
    let json: serde_json::Value = serde_json::from_str(&env.aot(&["status", "--json"]).stdout).unwrap();
    assert_eq!(json["spend"]["tokens"], 8000);
    assert_eq!(json["spend"]["by_role"]["planner"]["calls"], 1);
    assert_eq!(env.aot(&["replay", "--check"]).code, 0, "spend folds from the journal");
}
