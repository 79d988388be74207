//! Steering a running loop: `aot stop`.

use aot::state::document;
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

fn trail_kinds(env: &TestEnv) -> Vec<String> {
    document::read(&env.path("aot.yaml"))
        .unwrap()
        .state
        .trail
        .iter()
        .map(|t| serde_json::to_value(t).unwrap()["type"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_redirect_kind_applies_its_trail_rule() {
    let env = TestEnv::new();
    std::fs::copy(
        crate::common::root().join("state/or-fallback.yaml"),
        env.path("aot.yaml"),
    )
    .unwrap();
    // Steps, each one fan-in of results, until a choice, a failure and a backtrack.
    for _ in 0..10 {
        if trail_kinds(&env).len() >= 3 {
            break;
        }
        assert_eq!(env.aot(&["step"]).code, 0);
    }
    assert_eq!(trail_kinds(&env), ["or_choice", "failure", "backtrack"]);

    let run = env.aot(&["redirect", "--set", "max_retries=3", "flaky network"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(
        trail_kinds(&env),
        ["or_choice", "failure", "backtrack"],
        "a constraint change keeps the trail"
    );

    assert_eq!(
        env.aot(&["redirect", "--add-atom", "lint=true", "--deps", "setup"])
            .code,
        0
    );
    assert_eq!(
        trail_kinds(&env),
        ["or_choice", "failure", "backtrack", "user_correction"],
        "a DAG adjustment appends"
    );

    assert_eq!(env.aot(&["redirect", "--goal", "Produce config, fast"]).code, 0);
    assert!(trail_kinds(&env).is_empty(), "an objective change clears the trail");

    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    let kinds: Vec<(String, bool)> = state
        .corrections
        .iter()
        .map(|c| {
            (
                serde_json::to_value(c.kind).unwrap().as_str().unwrap().to_string(),
                c.trail_cleared,
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("constraint_change".to_string(), false),
            ("dag_adjustment".to_string(), false),
            ("objective_change".to_string(), true)
        ]
    );
    assert_eq!(state.corrections[0].description, "max_retries set to 3 (flaky network)");
    assert_eq!(state.objective.constraints.max_retries, Some(3));
    assert_eq!(env.aot(&["replay", "--check"]).code, 0, "every correction is journaled");
    assert_eq!(env.aot(&["start"]).code, 0, "the redirected work runs to completion");
}

#[test]
fn a_binding_override_resets_only_the_dependents() {
    let env = TestEnv::new();
    std::fs::copy(crate::common::root().join("state/diamond.yaml"), env.path("aot.yaml")).unwrap();
    assert_eq!(env.aot(&["start"]).code, 0);
    let run = env.aot(&["redirect", "--bind", "left=left half, redone by hand"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.bindings["left"].summary, "left half, redone by hand");
    assert_eq!(
        state.graph.atoms["join"].status,
        AtomStatus::Pending,
        "join depended on left"
    );
    assert!(!state.bindings.contains_key("join"));
    assert_eq!(
        state.graph.atoms["right"].status,
        AtomStatus::Solved,
        "right did not depend on left"
    );
    assert_eq!(state.graph.atoms["prepare"].status, AtomStatus::Solved);
    std::fs::remove_file(env.path("out/report.txt")).unwrap();
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(
        state.bindings["join"].summary,
        "joined (left half, redone by hand; right half written)"
    );
}

#[test]
fn forcing_an_or_choice_switches_and_records_it() {
    let env = TestEnv::new();
    std::fs::copy(
        crate::common::root().join("state/or-fallback.yaml"),
        env.path("aot.yaml"),
    )
    .unwrap();
    assert_eq!(env.aot(&["redirect", "--choose", "config=from-default"]).code, 0);
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.graph.atoms["config"].chosen.as_deref(), Some("from-default"));
    assert_eq!(trail_kinds(&env), ["or_choice", "user_correction"]);
    assert_eq!(env.aot(&["start"]).code, 0);
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(
        state.graph.atoms["from-remote"].attempts, 0,
        "the forced choice skipped from-remote"
    );
}

#[test]
fn a_redirect_that_would_break_the_graph_is_refused_and_changes_nothing() {
    let env = TestEnv::new();
    std::fs::copy(
        crate::common::root().join("state/or-fallback.yaml"),
        env.path("aot.yaml"),
    )
    .unwrap();
    let before = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let run = env.aot(&["redirect", "--remove-atom", "setup"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("dependency `setup` is not an atom"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("redirect refused, nothing changed"),
        "{}",
        run.stderr
    );
    for (args, why) in [
        (vec!["redirect", "--choose", "config=report"], "not an alternative"),
        (vec!["redirect", "--set", "max_retries=lots"], "whole number"),
        (vec!["redirect", "--set", "colour=blue"], "unknown constraint"),
        (vec!["redirect", "--set", "isolation=copy"], "isolation is git or none"),
        (vec!["redirect", "--set", "commit=always"], "commit is per_atom or none"),
        (vec!["redirect"], "nothing to change"),
    ] {
        let run = env.aot(&args);
        assert_eq!(run.code, 1, "{args:?}");
        assert!(run.stderr.contains(why), "{args:?}: {}", run.stderr);
    }
    let after = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert_eq!(before, after, "nothing changed");
}

#[test]
fn a_redirect_interrupts_in_flight_work_and_the_loop_carries_on() {
    let env = TestEnv::new();
    let marker = format!("aot-it-redirect-{}", std::process::id());
    env.write(
        "aot.yaml",
        &aligned(&format!(
            "graph:\n  atoms:\n    long:\n      run: 'if [ -f go ]; then touch finished; else touch started-$AOT_ATTEMPT; exec -a {marker} sleep 1000; fi'\n"
        )),
    );
    let runner = env.start_until("started-1");
    env.write("go", "");
    // A new goal is a new task: everything in flight was planned for the old one.
    let run = env.aot(&[
        "redirect",
        "--goal",
        "a sharper goal",
        "--set",
        "max_retries=5",
        "give it more tries",
    ]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(
        run.stdout
            .contains(&format!("the running loop (pid {}) picks it up now", runner.id())),
        "{}",
        run.stdout
    );
    let output = runner.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "the loop went on and completed");

    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.objective.constraints.max_retries, Some(5));
    assert_eq!(state.objective.goal.as_deref(), Some("a sharper goal"));
    assert_eq!(
        state.corrections.len(),
        2,
        "an objective change and a constraint change"
    );
    assert_eq!(
        state.graph.atoms["long"].attempts, 1,
        "the interrupted attempt did not count"
    );
    let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    assert!(
        journal.contains(r#""type":"attempt_cancelled""#),
        "the in-flight work was interrupted: {journal}"
    );
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| String::from_utf8_lossy(&c).contains(&marker));
    assert!(!alive, "the interrupted worker is gone");
    assert_eq!(env.aot(&["replay", "--check"]).code, 0);
}

#[test]
fn redirects_racing_a_busy_loop_are_each_applied_and_journaled_once() {
    use rand::{RngExt, SeedableRng};

    let env = TestEnv::new();
    // 200 short atoms in three chains; the first one says when the loop is busy.
    // Checked once the graph is solved: 200 atoms are far more than the
    // default iteration limit of fan-ins.
    let mut atoms = String::from("  constraints: { max_parallel_agents: 3, verify: when_solved }\ngraph:\n  atoms:\n");
    atoms.push_str("    a0: { run: 'touch started; sleep 0.05' }\n");
    for i in 1..200 {
        let deps = if i >= 3 {
            format!(", deps: [a{}]", i - 3)
        } else {
            String::new()
        };
        atoms.push_str(&format!("    a{i}: {{ run: 'sleep 0.05'{deps} }}\n"));
    }
    env.write("aot.yaml", &aligned(&atoms));
    let runner = env.start_until("started");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let (mut accepted, mut live, mut hand_edits) = (0, 0, 0);
    let mut hand_ids = Vec::new();
    for i in 0..100 {
        if rng.random_range(0..4) == 0 {
            // A hand edit: add an atom by editing the file in place.
            let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
            let marker = "\n  atoms:\n";
            if let Some(at) = text.find(marker) {
                let rest = &text[at + marker.len()..];
                let edited = format!("{}{marker}    hand{i}:\n      run: 'true'\n{rest}", &text[..at]);
                std::fs::write(env.path("aot.yaml"), edited).unwrap();
                hand_edits += 1;
                hand_ids.push(i);
            }
            continue;
        }
        let args: Vec<String> = match rng.random_range(0..5) {
            0 => vec!["--set".into(), format!("max_retries={}", rng.random_range(0..4))],
            1 => vec!["--add-atom".into(), format!("extra{i}=true")],
            2 => vec![
                "--bind".into(),
                format!("a{}=bound by hand {i}", rng.random_range(0..200)),
            ],
            3 => vec!["--remove-atom".into(), "no-such-atom".into()],
            _ => vec!["--choose".into(), "a1=a2".into()],
        };
        let mut full = vec!["redirect"];
        full.extend(args.iter().map(String::as_str));
        let run = env.aot(&full);
        if run.code == 0 {
            accepted += 1;
            live += usize::from(run.stdout.contains("picks it up now"));
        } else {
            assert!(
                run.stderr.contains("redirect refused, nothing changed"),
                "{}",
                run.transcript()
            );
        }
    }
    let output = runner.wait_with_output().unwrap();
    assert!(
        matches!(output.status.code(), Some(0 | 5)),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(accepted > 30, "the mix accepts most changes: {accepted}");
    assert!(live > 10, "the loop was running for many of them: {live}");
    // A last accepted redirect takes in any hand edit no one has read yet.
    assert_eq!(env.aot(&["redirect", "--set", "max_retries=1"]).code, 0);
    accepted += 1;
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    // Hand edits saved before anyone read the file are one edit, so they are
    // counted by what they did: every hand-added atom is in the graph or in an
    // edit set aside; none is lost.
    let set_aside: String = std::fs::read_dir(env.dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".rejected-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(hand_edits > 10, "the mix includes hand edits: {hand_edits}");
    for i in &hand_ids {
        let id = format!("hand{i}");
        assert!(
            state.graph.atoms.contains_key(id.as_str()) || set_aside.contains(&format!("{id}:")),
            "the hand edit adding {id} was lost"
        );
    }
    let by_hand = state
        .corrections
        .iter()
        .filter(|c| c.description.starts_with("hand edit"))
        .count();
    assert!(
        by_hand >= 1 && by_hand <= hand_edits,
        "{by_hand} hand-edit corrections for {hand_edits} edits: {:#?}",
        state.corrections
    );
    assert_eq!(
        state.corrections.len() - by_hand,
        accepted,
        "one correction per accepted redirect"
    );
    let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    assert_eq!(
        journal.matches(r#""type":"correction_recorded""#).count(),
        state.corrections.len(),
        "each correction journaled once"
    );
    assert_eq!(env.aot(&["replay", "--check"]).code, 0);
}

/// A running loop over one atom that sleeps until the file `go` exists.
fn waiting_loop(env: &TestEnv, tag: &str) -> (std::process::Child, String) {
    let marker = format!("aot-it-{tag}-{}", std::process::id());
    env.write(
        "aot.yaml",
        &aligned(&format!(
            "graph:\n  atoms:\n    long:\n      run: 'if [ -f go ]; then touch finished; else touch started-$AOT_ATTEMPT; exec -a {marker} sleep 1000; fi'\n"
        )),
    );
    (env.start_until("started-1"), marker)
}

#[test]
fn a_hand_edit_saved_by_rename_becomes_a_correction() {
    let env = TestEnv::new();
    let (runner, _) = waiting_loop(&env, "rename");
    env.write("go", "");
    // Save as vim does: write a new file, rename it over the old one.
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    // The running atom's own command changes: it is interrupted, runs again.
    let edited = text.replace("then touch finished;", "then touch finished edited;");
    assert_ne!(edited, text);
    env.write("aot.yaml.swp-new", &edited);
    std::fs::rename(env.path("aot.yaml.swp-new"), env.path("aot.yaml")).unwrap();
    let output = runner.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "the edit interrupted the sleeping atom, which then finished"
    );
    assert!(env.path("edited").exists(), "the edited command ran");
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    let kinds: Vec<String> = state.corrections.iter().map(|c| c.description.clone()).collect();
    assert_eq!(kinds, ["hand edit of the graph"]);
    assert_eq!(env.aot(&["replay", "--check"]).code, 0);
}

#[test]
fn a_hand_edit_written_in_place_changing_the_goal_clears_the_trail() {
    let env = TestEnv::new();
    let (runner, _) = waiting_loop(&env, "inplace");
    env.write("go", "");
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    // Truncate and write, in two chunks, as some tools do.
    let edited = text.replace("goal: test", "goal: a new goal");
    let (first, second) = edited.split_at(edited.len() / 2);
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(env.path("aot.yaml"))
            .unwrap();
        file.write_all(first.as_bytes()).unwrap();
        file.flush().unwrap();
        file.write_all(second.as_bytes()).unwrap();
    }
    assert_eq!(runner.wait_with_output().unwrap().status.code(), Some(0));
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.objective.goal.as_deref(), Some("a new goal"));
    assert_eq!(state.corrections.len(), 1, "seen exactly once as a complete file");
    assert!(state.corrections[0].trail_cleared);
}

#[test]
fn an_invalid_hand_edit_is_set_aside_and_the_loop_keeps_its_last_good_state() {
    let env = TestEnv::new();
    let (runner, _) = waiting_loop(&env, "invalid");
    let garbage = "version: 1\nobjective: [ this is not finished\n";
    std::fs::write(env.path("aot.yaml"), garbage).unwrap();
    // The loop restores the file; wait (bounded) until it is valid again.
    env.wait_until("the file is restored", || document::read(&env.path("aot.yaml")).is_ok());
    assert_eq!(
        std::fs::read_to_string(env.path("aot.yaml.rejected-1.yaml")).unwrap(),
        garbage,
        "the edit is kept aside"
    );
    assert_eq!(env.aot(&["stop", "--wait"]).code, 0);
    let output = runner.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "the loop ran on until stopped");
}

#[test]
fn a_stop_written_by_hand_stops_the_loop() {
    let env = TestEnv::new();
    let (runner, marker) = waiting_loop(&env, "handstop");
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    std::fs::write(
        env.path("aot.yaml"),
        text.replace("stop_requested: false", "stop_requested: true"),
    )
    .unwrap();
    assert_eq!(runner.wait_with_output().unwrap().status.code(), Some(3));
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| String::from_utf8_lossy(&c).contains(&marker));
    assert!(!alive);
}

#[test]
fn an_edit_saved_from_a_stale_editor_buffer_keeps_the_engines_record() {
    let env = TestEnv::new();
    let atoms = "graph:\n  atoms:\n    first: { run: \"echo 'summary: first'\" }\n    long:\n      run: 'if [ -f go ]; then touch finished; else touch started-$AOT_ATTEMPT; sleep 1000; fi'\n      deps: [first]\n";
    env.write("aot.yaml", &aligned(atoms));
    // The "editor" loads the file before the loop has done anything.
    let stale = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let runner = env.start_until("started-1");
    env.write("go", "");
    // ...and saves its old buffer with one change of the goal.
    std::fs::write(
        env.path("aot.yaml"),
        stale.replace("goal: test", "goal: from a stale buffer"),
    )
    .unwrap();
    assert_eq!(runner.wait_with_output().unwrap().status.code(), Some(0));
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(
        state.objective.goal.as_deref(),
        Some("from a stale buffer"),
        "the user's change is taken in"
    );
    assert_eq!(
        state.bindings["first"].summary, "first",
        "the engine's record is not rolled back"
    );
    assert_eq!(state.corrections.len(), 1);
    assert!(!env.path("aot.yaml.rejected-1.yaml").exists());
}

/// The parts of the state a correction touches, for snapshots.
fn corrections_and_trail(env: &TestEnv) -> String {
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    let view = serde_json::json!({
        "goal": state.objective.goal,
        "constraints": state.objective.constraints,
        "atoms": state.graph.atoms.iter().map(|(id, a)| format!("{id}: {}{}", a.status.as_str(),
            a.chosen.as_ref().map(|c| format!(" (chosen {c})")).unwrap_or_default())).collect::<Vec<_>>(),
        "bindings": state.bindings.iter().map(|(id, b)| format!("{id}: {}", b.summary)).collect::<Vec<_>>(),
        "trail": state.trail,
        "corrections": state.corrections,
    });
    serde_saphyr::to_string(&view).unwrap()
}

#[test]
fn the_state_before_and_after_each_redirect_kind() {
    let env = TestEnv::new();
    std::fs::copy(
        crate::common::root().join("state/or-fallback.yaml"),
        env.path("aot.yaml"),
    )
    .unwrap();
    // Steps until a choice, a failure and a backtrack are on the trail.
    while trail_kinds(&env).len() < 3 {
        assert_eq!(env.aot_fixed_clock(&["step"]).code, 0);
        assert!(document::read(&env.path("aot.yaml")).unwrap().state.run.iteration < 10);
    }
    insta::assert_snapshot!("redirect_0_before", corrections_and_trail(&env));
    let steps: [(&str, &[&str]); 4] = [
        (
            "redirect_1_constraint_change",
            &["redirect", "--set", "max_retries=3", "flaky network"],
        ),
        (
            "redirect_2_dag_adjustment",
            &["redirect", "--add-atom", "lint=true", "--deps", "setup"],
        ),
        (
            "redirect_3_bindings_override",
            &["redirect", "--bind", "setup=made by hand"],
        ),
        (
            "redirect_4_objective_change",
            &["redirect", "--goal", "Produce config, fast"],
        ),
    ];
    for (name, args) in steps {
        let run = env.aot_fixed_clock(args);
        assert_eq!(run.code, 0, "{}", run.transcript());
        insta::assert_snapshot!(name, corrections_and_trail(&env));
    }
}

#[test]
fn a_change_interrupts_only_the_atoms_it_touches() {
    let env = TestEnv::new();
    // Two atoms side by side, each waiting for `go`; `last` finishes the work.
    let wait = "while [ ! -f go ]; do sleep 0.05; done";
    let atoms = format!(
        "graph:\n  atoms:\n    slow:\n      run: 'echo $AOT_ATTEMPT >> slow.starts; {wait}'\n    other:\n      run: 'echo $AOT_ATTEMPT >> other.starts; {wait}'\n    last:\n      run: 'touch finished'\n      deps: [slow, other]\n"
    );
    env.write("aot.yaml", &aligned(&atoms));
    let starts = |name: &str| {
        std::fs::read_to_string(env.path(name))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let runner = env.start_until("slow.starts");
    env.wait_until("both atoms run", || starts("other.starts") == 1);

    // A new atom elsewhere and a constraint change touch neither.
    for args in [
        &["redirect", "--add-atom", "extra=touch extra.done"][..],
        &["redirect", "--set", "max_retries=3"],
    ] {
        let run = env.aot(args);
        assert_eq!(run.code, 0, "{}", run.transcript());
    }
    env.wait_until("the new atom ran", || env.path("extra.done").exists());
    // A hand edit of `other` touches `other` only.
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let edited = text.replacen(
        "echo $AOT_ATTEMPT >> other.starts",
        "echo $AOT_ATTEMPT edited >> other.starts",
        1,
    );
    assert_ne!(edited, text);
    std::fs::write(env.path("aot.yaml"), edited).unwrap();
    env.wait_until("other restarted", || starts("other.starts") == 2);
    env.write("go", "");

    let output = runner.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(starts("slow.starts"), 1, "slow ran once, through all three changes");
    let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    assert!(
        journal.contains(r#""type":"attempt_cancelled","atom":"other","why":"its definition changed""#),
        "{journal}"
    );
    assert!(
        !journal.contains(r#""type":"attempt_cancelled","atom":"slow""#),
        "{journal}"
    );
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.graph.atoms["slow"].attempts, 1);
    assert_eq!(
        state.graph.atoms["other"].attempts, 1,
        "the interrupted attempt did not count"
    );
    assert_eq!(env.aot(&["replay", "--check"]).code, 0);
}

#[test]
fn choosing_another_alternative_mid_attempt_journals_the_interruption_and_keeps_it_pruned() {
    let env = TestEnv::new();
    let atoms = "graph:\n  atoms:\n    fix: { or: [patch-a, patch-b] }\n    patch-a: { run: 'touch a.started; sleep 1000' }\n    patch-b: { run: 'touch finished' }\n";
    env.write("aot.yaml", &aligned(atoms));
    let runner = env.start_until("a.started");
    let run = env.aot(&["redirect", "--choose", "fix=patch-b"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let output = runner.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    assert!(
        journal.contains(r#""type":"attempt_cancelled","atom":"patch-a","why":"#),
        "the journal says why patch-a stopped:\n{journal}"
    );
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.graph.atoms["patch-a"].status, aot::state::AtomStatus::Pruned);
    let log = env.aot(&["log"]).stdout;
    assert!(log.contains("○ patch-a interrupted ("), "{log}");
    assert_eq!(env.aot(&["replay", "--check"]).code, 0);
}

#[test]
fn an_edit_saved_from_a_buffer_older_than_a_redirect_keeps_the_redirects_change() {
    let env = TestEnv::new();
    let atoms = "graph:\n  atoms:\n    # the long one\n    long: { run: 'if [ -f go ]; then touch finished; else touch started-$AOT_ATTEMPT; sleep 1000; fi' }\n";
    env.write("aot.yaml", &aligned(atoms).replace("goal: test", "goal: test   # mine"));
    // The "editor" loads the file; the loop runs; a redirect adds an atom.
    let stale = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let runner = env.start_until("started-1");
    let run = env.aot(&["redirect", "--add-atom", "extra=touch extra.done"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    env.wait_until("the redirect's atom ran", || env.path("extra.done").exists());
    // ...then the editor saves its old buffer with one change of the goal.
    std::fs::write(
        env.path("aot.yaml"),
        stale.replace("goal: test", "goal: from a stale buffer"),
    )
    .unwrap();
    env.wait_until("the edit is taken in", || {
        document::read(&env.path("aot.yaml"))
            .is_ok_and(|d| d.state.objective.goal.as_deref() == Some("from a stale buffer"))
    });
    env.write("go", "");
    let run = env.aot(&["redirect", "--reset", "long"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(runner.wait_with_output().unwrap().status.code(), Some(0));
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(
        state.objective.goal.as_deref(),
        Some("from a stale buffer"),
        "the user's change"
    );
    assert!(
        state.graph.atoms.contains_key("extra"),
        "the redirect's atom stays: {}",
        std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap()
    );
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert!(text.contains("goal: from a stale buffer   # mine\n"), "{text}");
    assert!(
        text.contains("    # the long one\n"),
        "the buffer's words are kept: {text}"
    );
    assert!(text.contains("    extra:\n      run: touch extra.done\n"), "{text}");
}
