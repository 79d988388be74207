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
