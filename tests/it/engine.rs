//! The engine driven through its role traits: test workers that panic, and
//! redirects that land while an atom is being dispatched or runs.

use std::sync::Arc;

use aot::engine::roles::{Assignment, BoxFuture, Roles, Worked, Worker};
use aot::engine::{Ended, Engine, Observer, Options};
use aot::journal::event::{Event, Record};
use aot::planner::Alternatives;
use aot::state::{AtomStatus, FailureClass, StateFile, StopReason, TrailEntry};
use aot::workers::{CommandValidator, CommandWorker};
use tokio_util::sync::CancellationToken;

use crate::common::{TestEnv, clock, run_aot};

const HEAD: &str = "version: 1
objective:
  goal: g
  background_intent: b
  deliverables: d
  definition_of_done: done
  base_case:
    command: test -f a.done
  constraints:
    max_retries: 0
graph:
  atoms:
";

fn roles(worker: Arc<dyn Worker>) -> Roles {
    Roles {
        worker,
        validator: Arc::new(CommandValidator),
        planner: Arc::new(Alternatives),
        workspace: None,
    }
}

/// Runs the engine over `aot.yaml` in `env` to its end; returns how it ended and the state.
fn run(env: &TestEnv, roles: Roles, observer: &mut dyn Observer) -> (Ended, StateFile) {
    run_with(env, roles, observer, Options::default())
}

fn run_with(env: &TestEnv, roles: Roles, observer: &mut dyn Observer, options: Options) -> (Ended, StateFile) {
    let path = env.path("aot.yaml");
    let mut store = env.store(&path);
    let (state, _) = store.open().expect("open the state file");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let engine = Engine::new(
        &mut store,
        state,
        clock(),
        options,
        roles,
        observer,
        CancellationToken::new(),
    );
    let ended = runtime
        .block_on(engine.run())
        .expect("the run ends without an engine error");
    let (state, _) = store.open().expect("reopen the state file");
    (ended, state)
}

fn stop_reason(ended: &Ended) -> StopReason {
    match ended {
        Ended::Stopped(stop) => stop.reason,
        Ended::Paused => panic!("the run paused"),
    }
}

/// Runs `action` once, when a record matches `when`.
struct OnRecord<W: Fn(&Event) -> bool + Send, A: FnMut() + Send> {
    when: W,
    action: A,
    done: bool,
}

impl<W: Fn(&Event) -> bool + Send, A: FnMut() + Send> Observer for OnRecord<W, A> {
    fn record(&mut self, record: &Record, _: &StateFile) {
        if !self.done && (self.when)(&record.event) {
            self.done = true;
            (self.action)();
        }
    }
}

struct Panics;

impl Worker for Panics {
    fn work<'a>(&'a self, assignment: &'a Assignment, _: &'a CancellationToken) -> BoxFuture<'a, Worked> {
        Box::pin(async move { panic!("the worker broke on {}", assignment.atom) })
    }
}

#[test]
fn a_worker_task_that_panics_fails_its_attempt_as_environmental_with_the_message() {
    let env = TestEnv::new();
    env.write("aot.yaml", &format!("{HEAD}    a:\n      run: touch a.done\n"));
    let mut quiet = OnRecord {
        when: |_: &Event| false,
        action: || {},
        done: false,
    };
    let (ended, state) = run(&env, roles(Arc::new(Panics)), &mut quiet);
    assert_ne!(stop_reason(&ended), StopReason::Completed);
    assert_eq!(state.graph.atoms["a"].status, AtomStatus::Failed, "never left running");
    let failure = state.trail.iter().find_map(|t| match t {
        TrailEntry::Failure { class, message, .. } => Some((*class, message.clone())),
        _ => None,
    });
    let (class, message) = failure.expect("the failure is in the trail");
    assert_eq!(class, FailureClass::Environmental);
    assert!(
        message.contains("the worker task ended abnormally") && message.contains("the worker broke on a"),
        "{message}"
    );
}

#[test]
fn a_redirect_that_removes_an_atom_as_it_is_dispatched_is_taken_in() {
    // `b` comes first in file order: it is the next ready atom when the
    // iteration starts, and the redirect removing it lands right then — after
    // the loop picked it, before its start record is journaled.
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &format!("{HEAD}    b:\n      run: touch b.done\n    a:\n      run: touch a.done\n"),
    );
    let dir = env.dir.path().to_path_buf();
    let mut redirect = OnRecord {
        when: |e: &Event| matches!(e, Event::IterationStarted { .. }),
        action: move || {
            let out = run_aot(&dir, &["redirect", "--remove-atom", "b", "not needed after all"]);
            assert_eq!(out.code, 0, "{}", out.transcript());
        },
        done: false,
    };
    let worker = Arc::new(CommandWorker::default());
    let (ended, state) = run(&env, roles(worker), &mut redirect);
    assert_eq!(stop_reason(&ended), StopReason::Completed);
    assert!(!state.graph.atoms.contains_key("b"));
    assert!(!env.path("b.done").exists(), "the removed atom never ran");
    // The race happened: `b` was started after its removal was journaled.
    let journal = aot::journal::read(&aot::journal::path_for(&env.path("aot.yaml"))).expect("journal");
    let removed = journal
        .records
        .iter()
        .position(|r| matches!(r.event, Event::CorrectionRecorded { .. }))
        .expect("the redirect is journaled");
    assert!(
        journal.records[removed..]
            .iter()
            .any(|r| matches!(&r.event, Event::AtomStarted { atom, .. } if atom == "b")),
        "the loop picked `b` before it saw the redirect"
    );
}

#[test]
fn a_redirect_that_removes_a_running_atom_cancels_it_and_discards_its_result() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &format!("{HEAD}    slow:\n      run: sleep 30 && touch slow.done\n    a:\n      run: touch a.done\n"),
    );
    let dir = env.dir.path().to_path_buf();
    let mut redirect = OnRecord {
        when: |e: &Event| matches!(e, Event::AtomStarted { atom, .. } if atom == "slow"),
        action: move || {
            let out = run_aot(&dir, &["redirect", "--remove-atom", "slow", "too slow"]);
            assert_eq!(out.code, 0, "{}", out.transcript());
        },
        done: false,
    };
    let started = std::time::Instant::now();
    let (ended, state) = run(&env, roles(Arc::new(CommandWorker::default())), &mut redirect);
    assert_eq!(stop_reason(&ended), StopReason::Completed);
    assert!(!state.graph.atoms.contains_key("slow"));
    // `a` runs beside `slow`; the redirect may cancel the round after `a`
    // touched its file but before its result was settled, so its status is
    // either; the base case holding is what matters.
    assert!(env.path("a.done").exists());
    assert!(!env.path("slow.done").exists(), "the removed atom never finished");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(25),
        "the removed atom's work was cancelled, not waited for"
    );
}

#[test]
fn a_runner_compacts_its_journal_past_the_size_and_runs_on() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &format!(
            "{HEAD}    b:\n      run: touch b.done\n    c:\n      run: touch c.done\n      deps: [b]\n    a:\n      run: touch a.done\n      deps: [c]\n"
        )
        // Checked once solved: the round ends, and its save compacts.
        .replace("    max_retries: 0\n", "    max_retries: 0\n    verify: when_solved\n"),
    );
    let mut seen = OnRecord {
        when: |e: &Event| matches!(e, Event::Compacted { .. }),
        action: || {},
        done: false,
    };
    let options = Options {
        compact_journal_past: Some(1),
        ..Options::default()
    };
    let (ended, state) = run_with(&env, roles(Arc::new(CommandWorker::default())), &mut seen, options);
    assert!(seen.done, "the observer saw a compacted record");
    assert_eq!(stop_reason(&ended), StopReason::Completed);
    assert!(
        ["a", "b", "c"]
            .iter()
            .all(|a| state.graph.atoms[*a].status == AtomStatus::Solved)
    );
    let journal = aot::journal::read(&aot::journal::path_for(&env.path("aot.yaml"))).expect("journal");
    assert!(matches!(journal.records[0].event, Event::Compacted { .. }));
    assert_eq!(aot::journal::fold(&journal.records).as_ref(), Some(&state));
}

/// Two failing alternatives whose tool `sh` gets blocked, and a base case
/// that needs the file `done`: the written plan runs out at once.
const EXHAUSTING: &str = "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: { command: 'test -f done' }\n  constraints: { max_retries: 0, isolation: none }\ngraph:\n  atoms:\n    fix:\n      or: [a, b]\n    a:\n      run: 'false'\n      tool: sh\n    b:\n      run: 'exit 1'\n      tool: sh\n";

/// Command workers and the LLM planner asking the scripted `server`.
fn planner_roles(env: &TestEnv, server: &crate::fake_llm::FakeLlm) -> Roles {
    let client = aot::llm::Client::new(
        aot::llm::Endpoint::new(&server.base, "fake-model", None),
        std::time::Duration::from_secs(5),
        aot::llm::Retry::default(),
    )
    .unwrap();
    let mut roles = roles(Arc::new(CommandWorker::default()));
    roles.planner = Arc::new(aot::planner::llm::LlmPlanner::new(
        client,
        env.dir.path().to_path_buf(),
        false,
    ));
    roles
}

/// Answers every question with `yes`, keeping the questions.
struct Answers {
    yes: bool,
    asked: Vec<String>,
}

impl Observer for Answers {
    fn record(&mut self, _: &Record, _: &StateFile) {}

    fn confirm(&mut self, question: &str) -> BoxFuture<'static, bool> {
        self.asked.push(question.to_string());
        Box::pin(std::future::ready(self.yes))
    }
}

#[test]
fn a_replans_destructive_command_is_asked_about_and_runs_on_a_yes_without_a_new_call() {
    use crate::fake_llm::{FakeLlm, Step};
    let env = TestEnv::new();
    env.write("aot.yaml", EXHAUSTING);
    env.write("junk", "old\n");
    let plan =
        r#"{"atoms": {"w": {"run": "rm -f junk && touch done", "tool": "shell"}}, "rationale": "clean and finish"}"#;
    for yes in [true, false] {
        let _ = std::fs::remove_file(env.path("aot.yaml.journal.jsonl"));
        let server = FakeLlm::start(vec![Step::chat(plan), Step::chat(plan), Step::chat(plan)]);
        let roles = planner_roles(&env, &server);
        let mut answers = Answers { yes, asked: Vec::new() };
        let (ended, _) = run(&env, roles, &mut answers);
        assert_eq!(answers.asked.len(), 1, "asked once: {:?}", answers.asked);
        assert!(
            answers.asked[0].contains("`rm -f junk`") && answers.asked[0].contains("Law 1"),
            "{}",
            answers.asked[0]
        );
        if yes {
            assert_eq!(stop_reason(&ended), StopReason::Completed);
            assert_eq!(
                server.seen().len(),
                1,
                "the plan waiting for the answer ran without a new call"
            );
            assert!(!env.path("junk").exists());
        } else {
            assert_eq!(stop_reason(&ended), StopReason::Exhausted);
            assert_eq!(server.seen().len(), 3, "a no refuses the plan: asked again, twice");
            assert!(env.path("junk").exists());
            break;
        }
        // Start over for the `no` case.
        env.write("aot.yaml", EXHAUSTING);
        let _ = std::fs::remove_file(env.path("done"));
        env.write("junk", "old\n");
    }
}

#[test]
fn a_planner_that_keeps_proposing_new_destructive_commands_is_bounded() {
    use crate::fake_llm::{FakeLlm, Step};
    let env = TestEnv::new();
    env.write("aot.yaml", EXHAUSTING);
    let plans: Vec<Step> = (1..=12)
        .map(|n| {
            Step::chat(&format!(
                r#"{{"atoms": {{"w": {{"run": "rm -f junk{n} && touch done", "tool": "shell"}}}}, "rationale": "r"}}"#
            ))
        })
        .collect();
    let server = FakeLlm::start(plans);
    let roles = planner_roles(&env, &server);
    let mut answers = Answers {
        yes: false,
        asked: Vec::new(),
    };
    let (ended, state) = run(&env, roles, &mut answers);
    assert_eq!(stop_reason(&ended), StopReason::Exhausted);
    assert!(
        server.seen().len() <= 3,
        "at most three asks per decision: {}",
        server.seen().len()
    );
    assert_eq!(
        state.run.spend.calls as usize,
        server.seen().len(),
        "every call counted in the spend"
    );
}
