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
        report: Reporter::new(sender, meter),
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
fn a_worker_that_never_stops_is_cut_at_the_turn_bound() {
    let env = TestEnv::new();
    let busy = || Step::tools("looking around", &[("list_files", json!({}))]);
    let server = FakeLlm::start(vec![busy(), busy(), busy(), busy(), busy()]);
    let worker = LlmWorker::new(client(&server), 3);
    let (worked, events) = work(&worker, env.dir.path(), Brief::default(), Arc::default());
    match worked {
        Worked::Failed { class, message, .. } => {
            assert_eq!(class, FailureClass::Logical);
            assert!(message.contains("within 3 turns"), "{message}");
        }
        other => panic!("{other:?}"),
    }
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
    match worked {
        Worked::Failed { class, message, .. } => {
            assert_eq!(class, FailureClass::Environmental);
            assert!(message.contains("turn 2"), "{message}");
        }
        other => panic!("{other:?}"),
    }
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
    for path in walk(env.dir.path()) {
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

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
