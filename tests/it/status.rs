//! `aot status` as a loop runs: the file folded with the journal records it
//! has not saved yet, said to be live; a refused hand edit shown; and after the
//! runner dies, what replay gives — never a stale picture without saying so.

use crate::common::TestEnv;

fn aligned(atoms: &str) -> String {
    format!(
        "version: 1\nobjective:\n  goal: test\n  background_intent: test\n  deliverables: test\n  definition_of_done: test\n  base_case: {{ command: \"test -f finished\" }}\n{atoms}"
    )
}

#[test]
fn status_during_a_run_is_live_shows_refused_edits_and_after_a_kill_says_so() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "graph:\n  atoms:\n    first: { run: \"echo 'summary: first done'\" }\n    long:\n      run: 'touch started; while [ ! -f go ]; do sleep 0.05; done; touch finished'\n      deps: [first]\n",
        ),
    );
    let mut runner = env.start_until("started");
    let pid = runner.id();

    let status = env.aot(&["status"]);
    assert_eq!(status.code, 0, "{}", status.transcript());
    for needle in [
        format!("live       aot runs (pid {pid}), iteration "),
        "● long attempt 1, running for ".to_string(),
        "✓ first  → first done".to_string(),
        "1 solved, 1 running".to_string(),
    ] {
        assert!(status.stdout.contains(&needle), "`{needle}` in:\n{}", status.stdout);
    }
    assert!(!status.stdout.contains("idle"), "{}", status.stdout);

    let json = env.aot(&["status", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(value["source"], "live");
    assert_eq!(value["runner_pid"], pid);
    assert_eq!(value["running_atoms"][0]["atom"], "long");
    assert!(value["running_atoms"][0]["elapsed_ms"].is_u64(), "{value}");
    assert_eq!(value["counts"]["solved"], 1);

    // A hand edit that does not validate is refused, and status says so.
    let good = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    std::fs::write(env.path("aot.yaml"), format!("{good}colour: blue\n")).unwrap();
    env.wait_until("the refused edit is kept aside", || {
        env.path("aot.yaml.rejected-1.yaml").exists()
    });
    let mut shown = String::new();
    env.wait_until("status shows the refused edit", || {
        shown = env.aot(&["status"]).stdout;
        shown.contains("rejected   a hand edit at")
    });
    assert!(shown.contains("colour"), "the reason names the problem:\n{shown}");
    assert!(shown.contains("live       aot runs"), "{shown}");
    // The runner puts the file back right after journaling the refusal.
    env.wait_until("the file is put back", || {
        std::fs::read_to_string(env.path("aot.yaml")).is_ok_and(|t| !t.contains("colour"))
    });

    // The runner dies: status no longer claims it is live.
    runner.kill().unwrap();
    runner.wait().unwrap();
    let after = env.aot(&["status"]);
    assert_eq!(after.code, 0, "{}", after.transcript());
    assert!(!after.stdout.contains("live       aot runs"), "{}", after.stdout);
    assert!(
        after.stdout.contains("replayed   no loop runs") || after.stdout.contains("not live   the file says running"),
        "{}",
        after.stdout
    );
    let json = env.aot(&["status", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_ne!(value["source"], "live");
    assert_eq!(value["runner_pid"], serde_json::Value::Null);

    // Resuming finishes the work the killed run left.
    std::fs::write(env.path("go"), "").unwrap();
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
}

#[test]
fn status_after_a_run_killed_before_it_saved_shows_what_replay_gives() {
    let env = TestEnv::new();
    let path = env.write("aot.yaml", &aligned("graph:\n  atoms:\n    a: { run: 'true' }\n"));
    env.store(&path).open().unwrap();
    let (mut journal, _) = aot::journal::Journal::open(&aot::journal::path_for(&path)).unwrap();
    journal
        .append(
            aot::model::time::Timestamp::from_millis(0),
            vec![aot::journal::event::Event::RunStarted { pid: 1, yes: false }],
        )
        .unwrap();
    let status = env.aot(&["status"]);
    assert_eq!(status.code, 0, "{}", status.transcript());
    assert!(
        status.stdout.contains("run        running, iteration 0"),
        "{}",
        status.stdout
    );
    assert!(
        status
            .stdout
            .contains("replayed   no loop runs, and the journal holds 1 journal record the file lacks"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("`aot start` resumes it"), "{}", status.stdout);
}
