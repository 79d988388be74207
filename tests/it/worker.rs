//! The built-in worker (an LLM with tools) against a scripted server on
//! 127.0.0.1, in a real folder: files written through `write_file`, tool
//! results sent back, refusals at dispatch (Law 1, blocked tools, the
//! workspace), the turn bound, provider faults mid-turn, the budget.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aot::engine::roles::{Assignment, Brief, Meter, Report, Reporter, Worked};
use aot::journal::event::Event;
use aot::llm::{Client, Endpoint, Retry};
use aot::state::{Atom, FailureClass, Spend};
use aot::workers::LlmWorker;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::TestEnv;
use crate::fake_llm::{FakeLlm, Step};

fn client(server: &FakeLlm) -> Client {
    let retry = Retry {
        attempts: 2,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(1),
    };
    Client::new(
        Endpoint::new(&server.base, "fake-model", None),
        Duration::from_millis(1500),
        retry,
    )
    .unwrap()
}

/// An attempt at an agent atom working in `dir`, reporting to the returned receiver.
fn assignment(
    dir: &Path,
    brief: Brief,
    meter: Arc<Meter>,
) -> (Assignment, tokio::sync::mpsc::UnboundedReceiver<Report>) {
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let spec = Atom {
        agent: Some("write hello to out.txt".into()),
        ..Atom::default()
    };
    let assignment = Assignment {
        atom: "greet".into(),
        attempt: 1,
        spec,
        cwd: dir.to_path_buf(),
        root: dir.to_path_buf(),
        env: vec![("AOT_STATE".into(), dir.join("aot.yaml").display().to_string())],
        workers: None,
        llm: None,
        brief: Brief {
            goal: "say hello".into(),
            ..brief
        },
        report: Reporter::new(sender, meter, Vec::new()),
    };
    (assignment, receiver)
}

/// Runs one attempt; returns how it ended and every record it reported.
fn work(worker: &LlmWorker, dir: &Path, brief: Brief, meter: Arc<Meter>) -> (Worked, Vec<Event>) {
    let (assignment, mut receiver) = assignment(dir, brief, meter);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let worked = runtime.block_on(worker.work(&assignment, "write hello to out.txt", &CancellationToken::new()));
    let mut events = Vec::new();
    while let Ok(report) = receiver.try_recv() {
        events.push(report.event);
    }
    (worked, events)
}

/// How a failed attempt failed (a panic when it did not fail).
fn failure(worked: Worked) -> (FailureClass, String) {
    match worked {
        Worked::Failed { class, message, .. } => (class, message),
        other => panic!("expected a failure: {other:?}"),
    }
}

fn refusals(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCalled {
                input,
                refused: Some(why),
                ..
            } => Some((input.clone(), why.clone())),
            _ => None,
        })
        .collect()
}

fn agent_ran(events: &[Event]) -> (u32, u32, u32) {
    events
        .iter()
        .find_map(|e| match e {
            Event::AgentRan {
                turns,
                tool_calls,
                refusals,
                worker,
                ..
            } => {
                assert_eq!(worker, "llm");
                Some((*turns, *tool_calls, *refusals))
            }
            _ => None,
        })
        .expect("agent_ran reported")
}

/// The tool messages of a request, in order.
fn tool_messages(body: &serde_json::Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_worker_writes_a_file_and_finishes_with_its_summary() {
    let env = TestEnv::new();
    let server = FakeLlm::start(vec![
        Step::tools("", &[("write_file", json!({"path": "out.txt", "content": "hello\n"}))]),
        Step::tools("", &[("read_file", json!({"path": "out.txt"}))]),
        Step::chat("It is written.\nsummary: wrote hello to out.txt"),
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    let (worked, events) = work(&worker, env.dir.path(), Brief::default(), Arc::default());
    match worked {
        Worked::Done { summary, .. } => assert_eq!(summary, "wrote hello to out.txt"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(env.dir.path().join("out.txt")).unwrap(),
        "hello\n"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    // Each tool's result is in the next request, answering its call.
    assert_eq!(tool_messages(&seen[1].body), ["wrote `out.txt` (6 bytes)"]);
    assert_eq!(seen[1].body["messages"][2]["tool_call_id"], "call_1");
    assert_eq!(tool_messages(&seen[2].body)[1], "hello\n");
    assert_eq!(seen[0].header("x-aot-role"), Some("worker"));
    let offered: Vec<&str> = seen[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["shell", "read_file", "write_file", "list_files"]);
    assert!(seen[0].prompt().contains("write hello to out.txt"));
    assert_eq!(agent_ran(&events), (3, 2, 0));
    let calls = events
        .iter()
        .filter(|e| matches!(e, Event::LlmCalled { role, atom: Some(a), .. } if role == "worker" && a == "greet"))
        .count();
    assert_eq!(calls, 3, "every model call is reported for its atom");
}

fn destroy_script() -> Vec<Step> {
    vec![
        Step::tools("", &[("shell", json!({"command": "rm -rf data"}))]),
        Step::chat("summary: tried to clean up"),
    ]
}

#[test]
fn a_destructive_shell_command_is_refused_without_yes_and_runs_with_it() {
    let env = TestEnv::new();
    std::fs::create_dir(env.dir.path().join("data")).unwrap();
    std::fs::write(env.dir.path().join("data/keep.txt"), "precious").unwrap();
    let server = FakeLlm::start(destroy_script());
    let worker = LlmWorker::new(client(&server), 30);
    let (worked, events) = work(&worker, env.dir.path(), Brief::default(), Arc::default());
    assert!(matches!(worked, Worked::Done { .. }), "{worked:?}");
    assert_eq!(
        std::fs::read_to_string(env.dir.path().join("data/keep.txt")).unwrap(),
        "precious"
    );
    let refused = refusals(&events);
    assert_eq!(refused.len(), 1, "{events:?}");
    assert!(refused[0].1.contains("Law 1"), "{refused:?}");
    let told = &tool_messages(&server.seen()[1].body)[0];
    assert!(told.starts_with("refused:") && told.contains("rm -rf data"), "{told}");
    assert_eq!(agent_ran(&events), (2, 1, 1));

    let server = FakeLlm::start(destroy_script());
    let worker = LlmWorker::new(client(&server), 30);
    let yes = Brief {
        confirmed: true,
        ..Brief::default()
    };
    let (_, events) = work(&worker, env.dir.path(), yes, Arc::default());
    assert!(!env.dir.path().join("data").exists(), "confirmed: it ran");
    assert!(refusals(&events).is_empty());
    assert!(tool_messages(&server.seen()[1].body)[0].starts_with("exit 0"));
}

#[test]
fn a_blocked_tool_and_paths_outside_the_workspace_are_refused_at_dispatch() {
    let env = TestEnv::new();
    let ws = env.path("ws");
    std::fs::create_dir(&ws).unwrap();
    let outside = env.path("outside-secret.txt");
    let server = FakeLlm::start(vec![
        Step::tools(
            "",
            &[
                ("shell", json!({"command": "cd . && git status"})),
                ("read_file", json!({"path": "../outside-secret.txt"})),
                (
                    "write_file",
                    json!({"path": outside.display().to_string(), "content": "x"}),
                ),
                ("write_file", json!({"path": "aot.yaml", "content": "goal: mine"})),
                ("shell", json!({"command": "echo git"})),
                ("delete_all", json!({})),
            ],
        ),
        Step::chat("summary: gave up on git"),
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    let brief = Brief {
        blocked_tools: vec!["git".into()],
        confirmed: true,
        ..Brief::default()
    };
    let (worked, events) = work(&worker, &ws, brief, Arc::default());
    assert!(matches!(worked, Worked::Done { .. }), "{worked:?}");
    assert!(!outside.exists() && !ws.join("aot.yaml").exists());
    let refused = refusals(&events);
    let why: Vec<&str> = refused.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(refused.len(), 5, "{refused:?}");
    assert!(why[0].contains("`git`") && why[0].contains("blocked"), "{why:?}");
    assert!(why[1].contains("outside the workspace"), "{why:?}");
    assert!(why[2].contains("outside the workspace"), "{why:?}");
    assert!(why[3].contains("aot.yaml"), "{why:?}");
    assert!(why[4].contains("no tool `delete_all`"), "{why:?}");
    // `echo git` runs: git is an argument there, not the program.
    let told = tool_messages(&server.seen()[1].body);
    assert_eq!(told.len(), 6);
    assert!(told[4].starts_with("exit 0"), "{told:?}");
    assert_eq!(agent_ran(&events), (2, 6, 5));
}

#[test]
fn a_probe_gets_the_reading_tools_only() {
    let env = TestEnv::new();
    std::fs::write(env.dir.path().join("notes.txt"), "the parser is in date.py\n").unwrap();
    let server = FakeLlm::start(vec![
        Step::tools(
            "",
            &[
                ("read_file", json!({"path": "notes.txt"})),
                ("write_file", json!({"path": "x.txt", "content": "x"})),
                ("shell", json!({"command": "touch y.txt"})),
            ],
        ),
        Step::chat("summary: the parser is in date.py"),
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let (mut probe, _) = assignment(env.dir.path(), Brief::default(), Arc::default());
    probe.spec.read_only = true;
    probe.report = Reporter::new(sender, Arc::default(), Vec::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let worked = runtime.block_on(worker.work(&probe, "find the parser", &CancellationToken::new()));
    assert!(
        matches!(worked, Worked::Done { ref summary, .. } if summary == "the parser is in date.py"),
        "{worked:?}"
    );
    let seen = server.seen();
    let offered: Vec<&str> = seen[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["read_file", "list_files"]);
    assert!(seen[0].prompt().contains("This atom is a probe"));
    assert!(!env.dir.path().join("x.txt").exists() && !env.dir.path().join("y.txt").exists());
    let mut events = Vec::new();
    while let Ok(r) = receiver.try_recv() {
        events.push(r.event);
    }
    let refused = refusals(&events);
    assert_eq!(refused.len(), 2, "{events:?}");
    assert!(refused.iter().all(|(_, why)| why.contains("only reads")), "{refused:?}");
}

#[test]
fn a_worker_that_never_stops_is_cut_at_the_turn_bound() {
    let env = TestEnv::new();
    let busy = || Step::tools("looking around", &[("list_files", json!({}))]);
    let server = FakeLlm::start(vec![busy(), busy(), busy(), busy(), busy()]);
    let worker = LlmWorker::new(client(&server), 3);
    let (worked, events) = work(&worker, env.dir.path(), Brief::default(), Arc::default());
    let (class, message) = failure(worked);
    assert_eq!(class, FailureClass::Logical);
    assert!(message.contains("within 3 turns"), "{message}");
    assert_eq!(server.seen().len(), 3, "no fourth call");
    assert_eq!(agent_ran(&events), (3, 3, 0));
}

#[test]
fn provider_faults_mid_turn_end_the_attempt_as_environmental() {
    let env = TestEnv::new();
    let server = FakeLlm::start(vec![
        Step::tools("", &[("write_file", json!({"path": "half.txt", "content": "1"}))]),
        Step::status(503, &[]),
        Step::Drop,
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    let (worked, events) = work(&worker, env.dir.path(), Brief::default(), Arc::default());
    let (class, message) = failure(worked);
    assert_eq!(class, FailureClass::Environmental);
    assert!(message.contains("turn 2"), "{message}");
    let failed_call = events.iter().any(|e| {
        matches!(
            e,
            Event::LlmCalled {
                error: Some(_),
                attempts: 2,
                ..
            }
        )
    });
    assert!(failed_call, "the failed call is reported with its retries: {events:?}");
    // A malformed tool call is answered, not fatal.
    let server = FakeLlm::start(vec![
        Step::Reply {
            status: 200,
            headers: Vec::new(),
            body: json!({"model": "m", "choices": [{"message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{not json"}}]}}]})
            .to_string(),
        },
        Step::chat("summary: done"),
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    let (worked, _) = work(&worker, env.dir.path(), Brief::default(), Arc::default());
    assert!(matches!(worked, Worked::Done { .. }), "{worked:?}");
    assert!(tool_messages(&server.seen()[1].body)[0].contains("do not read"));
}

#[test]
fn a_call_that_could_pass_the_budget_is_not_made() {
    let env = TestEnv::new();
    let server = FakeLlm::start(vec![Step::chat("summary: never asked")]);
    let worker = LlmWorker::new(client(&server), 30);
    let meter = Arc::new(Meter::default());
    let spend = Spend {
        tokens: 900,
        ..Spend::default()
    };
    meter.set(&spend, Some(1000), None);
    let (worked, events) = work(&worker, env.dir.path(), Brief::default(), meter);
    match worked {
        Worked::OverBudget { message } => assert!(message.contains("max_tokens 1000"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(server.seen().is_empty());
    assert_eq!(agent_ran(&events), (0, 0, 0));
}

// ---- Through `aot start`: the built-in worker, the validators, the accounting.

const KEY: &str = "sk-worker-secret-91ab-never-written";

fn state_with(env: &TestEnv, objective_extra: &str, atom_extra: &str, retries: u32) {
    env.write(
        "aot.yaml",
        &format!(
            "version: 2\nobjective:\n  goal: greet the reader\n  background_intent: b\n  deliverables: out.txt\n  definition_of_done: out.txt greets\n  base_case: {{ command: 'grep -q Hello out.txt' }}\n  constraints: {{ max_retries: {retries}, isolation: none }}\n{objective_extra}graph:\n  atoms:\n    greet:\n      agent: write a greeting to out.txt\n{atom_extra}"
        ),
    );
}

fn start_with_model(env: &TestEnv, server: &FakeLlm) -> crate::common::Run {
    crate::common::run_aot_with(
        env.dir.path(),
        &["start"],
        &[
            ("OPENAI_BASE_URL", server.base.as_str()),
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_MODEL", "fake-model"),
            ("AOT_LLM_TIMEOUT", "5"),
        ],
    )
}

fn verdict(verdict: &str, evidence: &str) -> Step {
    Step::chat(&json!({"verdict": verdict, "evidence": evidence, "failure_class": "logical"}).to_string())
}

fn journal(env: &TestEnv) -> Vec<Event> {
    aot::journal::read(&env.path("aot.yaml.journal.jsonl"))
        .unwrap()
        .records
        .into_iter()
        .map(|r| r.event)
        .collect()
}

fn judged(events: &[Event]) -> Vec<(bool, String, Option<FailureClass>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::CriterionJudged {
                passed,
                evidence,
                class,
                ..
            } => Some((*passed, evidence.clone(), *class)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_plausible_criterion_that_fails_is_retried_with_its_evidence_then_passes() {
    let env = TestEnv::new();
    state_with(&env, "", "      criteria: [out.txt greets politely]\n", 1);
    let server = FakeLlm::start(vec![
        Step::tools("", &[("write_file", json!({"path": "out.txt", "content": "hi"}))]),
        Step::chat("summary: wrote hi"),
        verdict("fail", "out.txt says `hi`, which is curt, not polite"),
        Step::tools(
            "",
            &[(
                "write_file",
                json!({"path": "out.txt", "content": "Hello, dear reader."}),
            )],
        ),
        Step::chat("summary: wrote a polite hello"),
        verdict("pass", "out.txt says `Hello, dear reader.`"),
    ]);
    let run = start_with_model(&env, &server);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(env.path("out.txt")).unwrap_or_default(),
        "Hello, dear reader."
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 6);
    let roles: Vec<&str> = seen.iter().map(|s| s.header("x-aot-role").unwrap()).collect();
    assert_eq!(
        roles,
        ["worker", "worker", "validator", "worker", "worker", "validator"]
    );
    // The validator sees the criterion and what the worker said; it gets only reading tools.
    assert!(seen[2].prompt().contains("out.txt greets politely") && seen[2].prompt().contains("wrote hi"));
    assert_eq!(seen[2].body["tools"].as_array().unwrap().len(), 2);
    // The retry is told the criterion and the validator's evidence.
    let retry = seen[3].prompt();
    assert!(retry.contains("which is curt, not polite"), "{retry}");
    assert!(retry.contains("criteria[0]"), "{retry}");
    let events = journal(&env);
    let verdicts = judged(&events);
    assert_eq!(verdicts.len(), 2);
    assert_eq!((verdicts[0].0, verdicts[0].2), (false, Some(FailureClass::Logical)));
    // What an attempt reported is journaled before the attempt's end.
    let at = |want: fn(&Event) -> bool| events.iter().position(want).unwrap();
    let first_failed = at(|e| matches!(e, Event::AttemptFailed { .. }));
    let first_verdict = at(|e| matches!(e, Event::CriterionJudged { .. }));
    let solved = at(|e| matches!(e, Event::AtomSolved { .. }));
    let last_call = events
        .iter()
        .rposition(|e| matches!(e, Event::LlmCalled { .. }))
        .unwrap();
    assert!(first_verdict < first_failed && last_call < solved, "{events:?}");
    assert!(verdicts[1].0);
    let status = crate::common::run_aot(env.dir.path(), &["status"]);
    assert!(
        status
            .stdout
            .contains("for greet: 6 calls, 720 tokens; llm, 2 attempts, 4 turns, 2 tool calls"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("worker     4 calls"), "{}", status.stdout);
    assert!(status.stdout.contains("validator  2 calls"), "{}", status.stdout);
    assert!(
        run.stderr.contains("llm, 2 attempts, 4 turns"),
        "the summary shows it: {}",
        run.stderr
    );
    // The key is nowhere aot writes.
    for path in crate::common::files_under(env.dir.path()) {
        let text = std::fs::read(&path).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&text).contains(KEY), "{}", path.display());
    }
}

#[test]
fn malformed_verdicts_are_re_asked_once_then_fail_as_environmental() {
    let env = TestEnv::new();
    state_with(&env, "", "      criteria: [out.txt greets]\n", 0);
    let server = FakeLlm::start(vec![
        Step::tools("", &[("write_file", json!({"path": "out.txt", "content": "hi"}))]),
        Step::chat("summary: wrote hi"),
        Step::chat("Looks good to me!"),
        Step::chat(r#"{"verdict": "probably", "evidence": "it greets"}"#),
        Step::chat("no plan"),
        Step::chat("still no plan"),
    ]);
    let run = start_with_model(&env, &server);
    assert_ne!(run.code, 0, "an unread verdict never passes: {}", run.stderr);
    let events = journal(&env);
    let verdicts = judged(&events);
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert!(!verdicts[0].0);
    assert_eq!(verdicts[0].2, Some(FailureClass::Environmental));
    assert!(verdicts[0].1.contains("could not be read"), "{verdicts:?}");
    // The re-ask holds the answer and says what was wrong with it.
    let reask = server.seen()[3].prompt();
    assert!(
        reask.contains("Looks good to me!") && reask.contains("could not be read"),
        "{reask}"
    );
    let failed = events.iter().any(|e| {
        matches!(e, Event::AtomFailed { class: FailureClass::Environmental, criterion, .. }
            if criterion.to_string().starts_with("criteria[0]"))
    });
    assert!(failed, "{events:?}");

    // A repaired verdict counts.
    let env = TestEnv::new();
    state_with(&env, "", "      criteria: [out.txt greets]\n", 0);
    let server = FakeLlm::start(vec![
        Step::tools("", &[("write_file", json!({"path": "out.txt", "content": "Hello"}))]),
        Step::chat("summary: wrote Hello"),
        Step::chat("<think>hmm</think> it greets"),
        verdict("pass", "it says hi"),
    ]);
    let run = start_with_model(&env, &server);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn the_objective_criteria_are_judged_by_the_meta_validator_once_the_base_case_holds() {
    let objective = "  criteria: [the greeting is friendly]\n";
    let env = TestEnv::new();
    state_with(&env, objective, "", 0);
    let server = FakeLlm::start(vec![
        Step::tools("", &[("write_file", json!({"path": "out.txt", "content": "Hello!"}))]),
        Step::chat("summary: wrote Hello!"),
        Step::chat(r#"{"verdicts": [{"criterion": 0, "verdict": "pass", "evidence": "Hello! is friendly"}]}"#),
    ]);
    let run = start_with_model(&env, &server);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("meta-validator finds the objective's criteria met"),
        "{}",
        run.stderr
    );
    let seen = server.seen();
    assert_eq!(seen[2].header("x-aot-role"), Some("meta_validator"));
    assert!(seen[2].prompt().contains("the greeting is friendly") && seen[2].prompt().contains("wrote Hello!"));
    let verdicts = judged(&journal(&env));
    assert_eq!(verdicts.len(), 1);
    assert!(verdicts[0].0);

    // Unmet: the task does not complete although the base case holds.
    let env = TestEnv::new();
    state_with(&env, objective, "", 0);
    let server = FakeLlm::start(vec![
        Step::tools(
            "",
            &[("write_file", json!({"path": "out.txt", "content": "Hello, go away"}))],
        ),
        Step::chat("summary: wrote Hello, go away"),
        Step::chat(r#"{"verdicts": [{"criterion": 0, "verdict": "fail", "evidence": "`go away` is hostile"}]}"#),
        Step::chat("no plan"),
        Step::chat("still no plan"),
    ]);
    let run = start_with_model(&env, &server);
    assert_ne!(run.code, 0, "{}", run.stderr);
    let verdicts = judged(&journal(&env));
    assert_eq!(verdicts.len(), 1);
    assert!(!verdicts[0].0 && verdicts[0].1.contains("hostile"));
    let state = std::fs::read_to_string(env.path("aot.yaml")).unwrap_or_default();
    assert!(!state.contains("reason: completed"), "{state}");
    // GGS saw the objective's criterion fail, logically (not the base case's command).
    let decided = journal(&env).into_iter().find_map(|e| match e {
        Event::GgsDecided { decision } => Some(decision),
        _ => None,
    });
    let decision = decided.expect("a GGS decision");
    assert!(
        decision
            .failed_criterion
            .as_deref()
            .is_some_and(|c| c.contains("criteria[0]")),
        "{:?}",
        decision.failed_criterion
    );
    // The planner was asked with the meta-validator's evidence as the unmet base case.
    let planner = server
        .seen()
        .iter()
        .find(|s| s.header("x-aot-role") == Some("planner"))
        .map(|s| s.prompt());
    assert!(
        planner.is_some_and(|p| p.contains("hostile")),
        "{:?}",
        server.seen().len()
    );
}

// ---- Agent CLI templates, run as fake CLIs that print recorded output.

use aot::state::AgentTemplate;

const TEMPLATES: [(AgentTemplate, &str); 6] = [
    (AgentTemplate::Claude, "claude.json"),
    (AgentTemplate::Codex, "codex.jsonl"),
    (AgentTemplate::Aider, "aider.txt"),
    (AgentTemplate::Goose, "goose.json"),
    (AgentTemplate::Gemini, "gemini.json"),
    (AgentTemplate::Opencode, "opencode.jsonl"),
];

/// A fake `name` CLI on a PATH of its own: it records its arguments, its
/// stdin and `GOOSE_MODE`, writes `content` to out.txt (unless empty),
/// prints the recorded fixture, and exits `code`.
fn fake_cli(env: &TestEnv, name: &str, fixture: &str, code: i32, content: &str) -> Vec<(String, String)> {
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fixture = crate::common::root().join("tests/fixtures/agents").join(fixture);
    let script = format!(
        "#!/bin/bash\nprintf '%s\\n' \"$@\" > \"$FAKE_DIR/args\"\ncat > \"$FAKE_DIR/stdin\"\necho \"${{GOOSE_MODE:-}}\" > \"$FAKE_DIR/goose_mode\"\nif [ -n \"$FAKE_CONTENT\" ]; then printf '%s' \"$FAKE_CONTENT\" > out.txt; fi\ncat \"$FAKE_FIXTURE\"\nexit {code}\n"
    );
    let path = bin.join(name);
    std::fs::write(&path, script).unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(&mut std::fs::metadata(&path).unwrap().permissions(), 0o755);
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    vec![
        (
            "PATH".into(),
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()),
        ),
        ("FAKE_DIR".into(), env.dir.path().display().to_string()),
        ("FAKE_FIXTURE".into(), fixture.display().to_string()),
        ("FAKE_CONTENT".into(), content.into()),
    ]
}

fn template_state(env: &TestEnv, template: AgentTemplate, extra: &str) {
    env.write(
        "aot.yaml",
        &format!(
            "version: 2\nobjective:\n  goal: greet the reader\n  background_intent: b\n  deliverables: out.txt\n  definition_of_done: out.txt greets\n  base_case: {{ command: 'grep -q Hello out.txt' }}\n  constraints: {{ max_retries: 0, isolation: none }}\nworkers:\n  agent: {{ template: {} }}\ngraph:\n  atoms:\n    greet:\n      agent: write a greeting to out.txt\n{extra}",
            template.name()
        ),
    );
}

fn run_with(env: &TestEnv, vars: &[(String, String)], args: &[&str]) -> crate::common::Run {
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    crate::common::run_aot_with(env.dir.path(), args, &vars)
}

#[test]
fn each_template_runs_its_cli_headless_and_reads_what_it_reports() {
    for (template, fixture) in TEMPLATES {
        let env = TestEnv::new();
        template_state(&env, template, "");
        let vars = fake_cli(&env, template.name(), fixture, 0, "Hello");
        let run = run_with(&env, &vars, &["start"]);
        assert_eq!(run.code, 0, "{template:?}: {}", run.stderr);
        // The template's command line, the prompt on stdin.
        let line = aot::workers::template::command(template);
        let after_program = line.split_once(&format!("{} ", template.name())).unwrap().1;
        let args = std::fs::read_to_string(env.path("args")).unwrap();
        assert_eq!(
            args.lines().collect::<Vec<_>>().join(" "),
            after_program,
            "{template:?}"
        );
        let stdin = std::fs::read_to_string(env.path("stdin")).unwrap();
        assert!(stdin.contains("write a greeting to out.txt"), "{template:?}: {stdin}");
        let goose_mode = std::fs::read_to_string(env.path("goose_mode")).unwrap();
        assert_eq!(
            goose_mode.trim(),
            if template == AgentTemplate::Goose { "auto" } else { "" }
        );
        // The summary is the agent's final message's, not a line of JSON.
        let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
        assert_eq!(
            state.bindings["greet"].summary, "wrote Hello to out.txt",
            "{template:?}"
        );
        let tally = &state.run.agents["greet"];
        assert_eq!((tally.worker.as_str(), tally.attempts), (template.name(), 1));
        let parsed = aot::workers::template::parse(
            template,
            &std::fs::read_to_string(crate::common::root().join("tests/fixtures/agents").join(fixture)).unwrap(),
        );
        let (prompt, completion) = parsed.tokens.unwrap();
        let spend = &state.run.spend;
        assert_eq!(spend.tokens, prompt + completion, "{template:?}");
        assert_eq!(spend.by_role["worker"].calls, 1, "{template:?}");
        assert_eq!(spend.by_atom["greet"].tokens, prompt + completion, "{template:?}");
        assert_eq!(spend.cost, parsed.cost.unwrap_or(0.0), "{template:?}");
        assert_eq!(tally.turns, parsed.turns.unwrap_or(0), "{template:?}");
    }
}

#[test]
fn a_cli_reporting_a_provider_error_fails_as_environmental_even_with_exit_0() {
    // Exit 0, `is_error: true`: not done; environmental, and with a failing probe, blocked.
    let env = TestEnv::new();
    template_state(&env, AgentTemplate::Claude, "      probe: 'false'\n");
    let vars = fake_cli(&env, "claude", "claude-rate-limited.json", 0, "");
    let run = run_with(&env, &vars, &["start"]);
    assert_eq!(run.code, 7, "blocked: {}", run.stderr);
    let events = journal(&env);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::AtomBlocked { reason, .. } if reason.contains("Rate limit"))),
        "{events:?}"
    );
    // The CLI's error, not the JSON around it.
    assert!(!format!("{events:?}").contains("total_cost_usd"), "{events:?}");
    // codex exits 1 for everything: the 401 in its events makes it environmental.
    let env = TestEnv::new();
    template_state(&env, AgentTemplate::Codex, "");
    let vars = fake_cli(&env, "codex", "codex-unauthorized.jsonl", 1, "");
    let run = run_with(&env, &vars, &["start"]);
    assert_ne!(run.code, 0);
    let failed = journal(&env).into_iter().find_map(|e| match e {
        Event::AtomFailed { class, message, .. } => Some((class, message)),
        _ => None,
    });
    let (class, message) = failed.expect("the atom failed");
    assert_eq!(class, FailureClass::Environmental, "{message}");
    assert!(message.contains("401 Unauthorized"), "{message}");
    // gemini's own exit codes: 41 is authentication.
    let env = TestEnv::new();
    template_state(&env, AgentTemplate::Gemini, "");
    let vars = fake_cli(&env, "gemini", "gemini.json", 41, "");
    run_with(&env, &vars, &["start"]);
    let class = journal(&env).into_iter().find_map(|e| match e {
        Event::AtomFailed { class, .. } => Some(class),
        _ => None,
    });
    assert_eq!(class, Some(FailureClass::Environmental));
}

#[test]
fn cost_and_tokens_add_up_across_roles_and_templates() {
    // claude works both atoms (reporting its own tokens and dollars), the
    // validator judges greet's criterion, the planner adds the atom that
    // makes the base case hold; every call is priced and counted once.
    let env = TestEnv::new();
    template_state(&env, AgentTemplate::Claude, "      criteria: [out.txt greets]\n");
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap()
        + "llm:\n  prices:\n    fake-model: { input: 1.0, output: 2.0 }\n";
    env.write("aot.yaml", &text);
    // The first attempt writes `hi` (the base case wants Hello); the planner's atom writes Hello.
    let mut vars = fake_cli(&env, "claude", "claude.json", 0, "hi");
    let bin = env.path("bin/claude");
    let script = std::fs::read_to_string(&bin).unwrap().replace(
        "if [ -n \"$FAKE_CONTENT\" ]",
        "if [ \"$AOT_ATOM\" != greet ]; then FAKE_CONTENT=Hello; fi\nif [ -n \"$FAKE_CONTENT\" ]",
    );
    std::fs::write(&bin, script).unwrap();
    let server = FakeLlm::start(vec![
        verdict("pass", "it greets"),
        Step::chat(r#"{"atoms": {"polite": {"agent": "write Hello to out.txt"}}, "rationale": "say Hello"}"#),
    ]);
    vars.extend([
        ("OPENAI_BASE_URL".to_string(), server.base.clone()),
        ("OPENAI_MODEL".to_string(), "fake-model".to_string()),
        ("AOT_LLM_TIMEOUT".to_string(), "5".to_string()),
    ]);
    // An agent CLI runs commands aot does not read: the planner's agent atom needs --yes.
    let run = run_with(&env, &vars, &["start", "--yes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let roles: Vec<String> = server
        .seen()
        .iter()
        .map(|s| s.header("x-aot-role").unwrap().to_string())
        .collect();
    assert_eq!(roles, ["validator", "planner"]);
    let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    let spend = &state.run.spend;
    // claude.json: 184,595 prompt + 2,577 reply tokens, $0.2416735, per run.
    let claude = (184_595 + 2577, 0.2416735);
    // Each fake-model call: 100 + 20 tokens at $1/$2 per million.
    let call = (120, (100.0 + 40.0) / 1e6);
    assert_eq!(spend.calls, 4);
    assert_eq!(spend.tokens, 2 * claude.0 + 2 * call.0);
    assert!(
        (spend.cost - (2.0 * claude.1 + 2.0 * call.1)).abs() < 1e-9,
        "{}",
        spend.cost
    );
    assert_eq!(spend.by_role["worker"].tokens, 2 * claude.0);
    assert_eq!(spend.by_role["validator"].tokens, call.0);
    assert_eq!(spend.by_role["planner"].tokens, call.0);
    let by_role: f64 = spend.by_role.values().map(|t| t.cost).sum();
    assert!((by_role - spend.cost).abs() < 1e-9);
    let by_role_tokens: u64 = spend.by_role.values().map(|t| t.tokens).sum();
    assert_eq!(by_role_tokens, spend.tokens);
    assert_eq!(
        spend.by_atom["greet"].tokens,
        claude.0 + call.0,
        "greet: its run and its verdict"
    );
    assert_eq!(state.run.agents["greet"].worker, "claude");
    // The journal folds to the same spend.
    assert_eq!(crate::common::run_aot(env.dir.path(), &["replay", "--check"]).code, 0);
}

#[test]
fn symbolic_links_do_not_lead_the_file_tools_out_or_onto_aots_files() {
    let env = TestEnv::new();
    let ws = env.path("ws");
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::write(ws.join("aot.yaml"), "mine").unwrap();
    let outside = env.path("outside.txt");
    let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, ws.join(name)).unwrap();
    link(&outside, "escape"); // dangling: its target does not exist yet
    link(&ws.join(".git"), "g");
    link(&ws.join("aot.yaml"), "s");
    link(Path::new("/etc"), "etc");
    let write = |path: &str| ("write_file", json!({"path": path, "content": "x"}));
    let server = FakeLlm::start(vec![
        Step::tools(
            "",
            &[
                write("escape"),
                write("g/config"),
                write("s"),
                write("sub/.GIT/hooks/pre-commit"),
                ("read_file", json!({"path": "etc/hostname"})),
                write("fine/new.txt"),
            ],
        ),
        Step::chat("summary: done"),
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    let (worked, _) = work(&worker, &ws, Brief::default(), Arc::default());
    assert!(matches!(worked, Worked::Done { .. }), "{worked:?}");
    assert!(!outside.exists(), "no file made outside through a dangling link");
    assert!(!ws.join(".git/config").exists());
    assert_eq!(std::fs::read_to_string(ws.join("aot.yaml")).unwrap(), "mine");
    assert!(!ws.join("sub/.GIT").exists());
    assert_eq!(std::fs::read_to_string(ws.join("fine/new.txt")).unwrap(), "x");
    let told = tool_messages(&server.seen()[1].body);
    for (i, says) in [
        (0, "symbolic link"),
        (1, "own"),
        (2, "symbolic link"),
        (3, "aot's or git's own"),
        (4, "outside"),
    ] {
        assert!(
            told[i].starts_with("refused") && told[i].contains(says),
            "{i}: {}",
            told[i]
        );
    }
}

#[test]
fn the_models_commands_see_no_secret_and_nothing_reported_holds_one() {
    let env = TestEnv::new();
    const SECRET: &str = "sk-the-brain-key-0042-xyz";
    std::fs::write(env.dir.path().join(".env"), format!("KEY={SECRET}\n")).unwrap();
    let server = FakeLlm::start(vec![
        Step::tools(
            "",
            &[
                ("shell", json!({"command": "echo \"[${BRAIN_API_KEY}]\""})),
                ("read_file", json!({"path": ".env"})),
                ("shell", json!({"command": format!("echo {SECRET} && rm -rf x")})),
            ],
        ),
        Step::chat("summary: looked"),
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    // SAFETY: a test process's own variable, read by the child it starts.
    unsafe { std::env::set_var("BRAIN_API_KEY", SECRET) };
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let (mut a, _) = assignment(env.dir.path(), Brief::default(), Arc::default());
    a.report = Reporter::new(sender, Arc::default(), vec![SECRET.to_string()]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(worker.work(&a, "look", &CancellationToken::new()));
    let told = tool_messages(&server.seen()[1].body);
    assert!(told[0].contains("[]"), "the variable is blanked: {}", told[0]);
    assert!(told.iter().all(|t| !t.contains(SECRET)), "{told:?}");
    let mut events = Vec::new();
    while let Ok(r) = receiver.try_recv() {
        events.push(r.event);
    }
    assert!(!format!("{events:?}").contains(SECRET), "{events:?}");
}

#[test]
fn a_file_tool_stuck_on_a_pipe_does_not_hold_a_cancelled_attempt() {
    let env = TestEnv::new();
    let fifo = env.dir.path().join("pipe");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(
        env.dir.path().join("big.log"),
        vec![b'x'; (aot::workers::llm::READ_MAX + 1) as usize],
    )
    .unwrap();
    let server = FakeLlm::start(vec![
        Step::tools(
            "",
            &[
                ("read_file", json!({"path": "big.log"})),
                ("read_file", json!({"path": "pipe"})),
            ],
        ),
        Step::chat("summary: read"),
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    let (a, _) = assignment(env.dir.path(), Brief::default(), Arc::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let worked = runtime.block_on(worker.work(&a, "read", &CancellationToken::new()));
    // Neither is read: one is too large, the other not a regular file.
    assert!(matches!(worked, Worked::Done { .. }), "{worked:?}");
    let told = tool_messages(&server.seen()[1].body);
    assert!(told[0].contains("over the"), "{}", told[0]);
    assert!(told[1].contains("not a regular file"), "{}", told[1]);
}

#[test]
fn a_call_waits_for_calls_in_flight_and_is_refused_only_by_what_is_spent() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let meter = Arc::new(Meter::default());
        meter.set(
            &Spend {
                tokens: 500,
                ..Spend::default()
            },
            Some(1000),
            None,
        );
        let (sender, _receiver) = tokio::sync::mpsc::unbounded_channel();
        let reporter = Reporter::new(sender, Arc::clone(&meter), Vec::new());
        let never = CancellationToken::new();
        // Spent 500 of 1000: a call that could take 600 is refused outright.
        let refused = reporter.hold("worker", 600, None, &never).await.unwrap_err();
        assert!(refused.contains("max_tokens 1000"), "{refused}");
        // One in flight holds 400: the next 300 waits for it, not for ever.
        let first = reporter.hold("worker", 400, None, &never).await.unwrap().unwrap();
        let waiting = {
            let reporter = reporter.clone();
            tokio::spawn(async move { reporter.hold("worker", 300, None, &CancellationToken::new()).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits while the first call is in flight");
        drop(first); // its record journaled: the first call spent far less than its worst case
        let second = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(second, Ok(Some(_))));
        drop(second);
        // A waiting call gives way to a cancellation.
        let _held = reporter.hold("worker", 450, None, &never).await.unwrap().unwrap();
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(matches!(reporter.hold("worker", 300, None, &cancel).await, Ok(None)));
    });
}

#[test]
fn hard_links_to_a_file_outside_or_to_the_journal_are_refused_and_left_whole() {
    let env = TestEnv::new();
    let ws = env.path("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let outside = env.path("outside.txt");
    std::fs::write(&outside, "precious outside\n").unwrap();
    let journal = ws.join("aot.yaml.journal.jsonl");
    std::fs::write(&journal, "{\"the\":\"journal\"}\n").unwrap();
    std::fs::hard_link(&outside, ws.join("innocent.txt")).unwrap();
    std::fs::hard_link(&journal, ws.join("notes.txt")).unwrap();
    let write = |path: &str| ("write_file", json!({"path": path, "content": "overwritten"}));
    let server = FakeLlm::start(vec![
        Step::tools("", &[write("innocent.txt"), write("notes.txt"), write("fresh.txt")]),
        Step::chat("summary: done"),
    ]);
    let worker = LlmWorker::new(client(&server), 30);
    let (worked, _) = work(&worker, &ws, Brief::default(), Arc::default());
    assert!(matches!(worked, Worked::Done { .. }), "{worked:?}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious outside\n");
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap(),
        "{\"the\":\"journal\"}\n",
        "not even truncated"
    );
    assert_eq!(std::fs::read_to_string(ws.join("fresh.txt")).unwrap(), "overwritten");
    let told = tool_messages(&server.seen()[1].body);
    for (i, said) in told.iter().take(2).enumerate() {
        assert!(
            said.starts_with("refused") && said.contains("hard links"),
            "{i}: {said}"
        );
    }
}
