//! Steering a running loop: `aot stop`.

use aot::document;
use aot::state::{AtomStatus, StopReason};

use crate::common::TestEnv;

fn aligned(atoms: &str) -> String {
    format!(
        "version: 1\nobjective:\n  goal: test\n  background_intent: test\n  deliverables: test\n  definition_of_done: test\n  base_case: {{ command: \"test -f finished\" }}\n{atoms}"
    )
}

#[test]
fn stop_during_a_long_atom_kills_it_keeps_the_state_and_start_resumes() {
    let env = TestEnv::new();
    let marker = format!("aot-it-stop-{}", std::process::id());
    env.write(
        "aot.yaml",
        &aligned(&format!(
            "graph:\n  atoms:\n    first: {{ run: \"echo 'summary: first done'\" }}\n    long:\n      run: 'touch started; (exec -a {marker} sleep 1000); touch finished'\n      deps: [first]\n"
        )),
    );
    let runner = env.start_until("started");
    let stop = env.aot(&["stop", "--reason", "lunch", "--wait"]);
    assert_eq!(stop.code, 0, "{}", stop.transcript());
    assert!(
        stop.stdout.contains(&format!("aot (pid {}) stopped", runner.id())),
        "{}",
        stop.stdout
    );
    let output = runner.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "stopped: exit 3");

    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    let record = state.run.stop.clone().unwrap();
    assert_eq!(record.reason, StopReason::Manual);
    assert!(record.message.contains("lunch"), "{}", record.message);
    assert_eq!(state.graph.atoms["long"].status, AtomStatus::Pending);
    assert_eq!(state.bindings["first"].summary, "first done", "finished work is kept");
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| String::from_utf8_lossy(&c).contains(&marker));
    assert!(!alive, "the atom's process group is gone");
    assert_eq!(env.aot(&["replay", "--check"]).code, 0);

    // Resume with the long atom made short: the stale stop request does not stop it.
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    std::fs::write(
        env.path("aot.yaml"),
        text.replace(&format!("(exec -a {marker} sleep 1000)"), "true"),
    )
    .unwrap();
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.graph.atoms["first"].attempts, 1, "first was not rerun");
    assert!(!state.control.stop_requested);
}

#[test]
fn stop_with_nothing_running_records_the_request_and_says_so() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned("graph:\n  atoms:\n    a: { run: 'touch finished' }\n"),
    );
    let run = env.aot(&["stop"]);
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, "aot.yaml: nothing is running; the request is recorded\n");
    assert!(
        document::read(&env.path("aot.yaml"))
            .unwrap()
            .state
            .control
            .stop_requested
    );
    assert_eq!(env.aot(&["start"]).code, 0, "a new start clears a stale request");
}

#[test]
fn stop_reaches_a_loop_busy_verifying_its_base_case() {
    let env = TestEnv::new();
    let marker = format!("aot-it-verify-{}", std::process::id());
    let text = aligned("graph:\n  atoms:\n    a: { run: 'true' }\n").replace(
        "base_case: { command: \"test -f finished\" }",
        &format!("base_case: {{ command: \"touch verifying; exec -a {marker} sleep 1000\" }}"),
    );
    env.write("aot.yaml", &text);
    let runner = env.start_until("verifying");
    let stop = env.aot(&["stop", "--wait"]);
    assert_eq!(stop.code, 0, "{}", stop.transcript());
    assert_eq!(runner.wait_with_output().unwrap().status.code(), Some(3));
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.run.stop.unwrap().reason, StopReason::Manual);
    assert_eq!(state.run.iteration, 0, "stopped during the first verification");
}
