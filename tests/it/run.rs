//! `aot start` and `aot step` with the real binary: every example, stop
//! reasons and exit codes, the no-inertia rule, the agent worker's prompt,
//! blockers, and one runner per file.

use aot::state::document;
use aot::state::{AtomStatus, RunStatus, StopReason, TrailEntry};

use crate::common::{TestEnv, examples};

/// A complete, aligned objective for hand-written test files.
fn aligned(base_case: &str, extra: &str) -> String {
    format!(
        "version: 1\nobjective:\n  goal: test\n  background_intent: test\n  deliverables: test\n  definition_of_done: test\n  base_case: {{ command: \"{base_case}\" }}\n{extra}"
    )
}

fn state(env: &TestEnv, name: &str) -> aot::state::StateFile {
    document::read(&env.path(name)).unwrap().state
}

#[test]
fn every_example_runs_to_completion() {
    for example in examples() {
        let env = TestEnv::new();
        let name = example.file_name().unwrap().to_str().unwrap();
        env.example(name);
        let run = env.aot(&["--state", name, "start"]);
        assert_eq!(run.code, 0, "{name}:\n{}", run.transcript());
        let s = state(&env, name);
        let stop = s.run.stop.clone().unwrap();
        assert_eq!(stop.reason, StopReason::Completed, "{name}");
        assert_eq!(
            stop.evidence.unwrap().exit_code,
            Some(0),
            "{name}: completion carries its evidence"
        );
        assert_eq!(s.run.status, RunStatus::Stopped);
        assert!(!s.bindings.is_empty(), "{name}: solved atoms are bound");
        assert_eq!(
            env.aot(&["--state", name, "replay", "--check"]).code,
            0,
            "{name}: journal and file agree"
        );
        // Without a terminal, progress is one JSON record per line.
        for line in run.stdout.lines() {
            let record: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {e}: {line}"));
            assert!(record["seq"].is_u64() && record["event"]["type"].is_string(), "{line}");
        }
    }
}

#[test]
fn the_or_fallback_example_backtracks_and_records_the_trail() {
    let env = TestEnv::new();
    env.example("or-fallback.yaml");
    // Checked once every atom is solved: with a check after each fan-in, the
    // base case can hold while `report` still runs (it has written its file,
    // not yet its summary), and the run halts before `report` is solved.
    let set = env.aot(&["--state", "or-fallback.yaml", "redirect", "--set", "verify=when_solved"]);
    assert_eq!(set.code, 0, "{}", set.transcript());
    assert_eq!(env.aot(&["--state", "or-fallback.yaml", "start"]).code, 0);
    let s = state(&env, "or-fallback.yaml");
    let kinds: Vec<String> = s
        .trail
        .iter()
        .map(|t| match t {
            TrailEntry::OrChoice { chosen, .. } => format!("or_choice {chosen}"),
            TrailEntry::Failure { atom, criterion, .. } => format!("failure {atom} {criterion}"),
            TrailEntry::Backtrack { from, to, .. } => format!("backtrack {from}->{to}"),
            TrailEntry::UserCorrection { .. } => "user_correction".into(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "or_choice from-remote",
            "failure from-remote check[0]: grep -q '^mode=[a-z]' out/config.txt",
            "backtrack from-remote->from-default"
        ]
    );
    assert_eq!(s.bindings["config"].summary, "wrote default config");
    assert_eq!(
        s.bindings["report"].summary, "config from wrote default config",
        "contraction reached the dependent"
    );
    assert_eq!(s.graph.atoms["from-remote"].attempts, 2, "1 + max_retries (1) attempts");
}

#[test]
fn a_failing_action_is_not_repeated_beyond_its_retries_or_after_its_alternative() {
    let env = TestEnv::new();
    let atoms = r#"  constraints: { max_retries: 2 }
graph:
  atoms:
    pick: { or: [a, b] }
    a: { run: 'echo run >> a.count', check: ['wc -l < a.count; false'] }
    b: { run: 'echo run >> b.count', check: ['wc -l < b.count; false'], tool: other }
"#;
    env.write("aot.yaml", &aligned("false", atoms));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 5, "exhausted:\n{}", run.transcript());
    let count = |f: &str| std::fs::read_to_string(env.path(f)).unwrap().lines().count();
    assert_eq!(
        (count("a.count"), count("b.count")),
        (3, 3),
        "each alternative ran 1 + max_retries times"
    );
    // A second start does not run what already failed.
    let again = env.aot(&["start"]);
    assert_eq!(again.code, 5, "{}", again.transcript());
    assert_eq!(
        (count("a.count"), count("b.count")),
        (3, 3),
        "nothing failed is run again"
    );
    let stop = state(&env, "aot.yaml").run.stop.unwrap();
    assert!(
        stop.message.contains("a, b"),
        "the stop names what was tried: {}",
        stop.message
    );
}

#[test]
fn a_command_failing_the_same_way_twice_is_not_retried_again() {
    let count = |env: &TestEnv| std::fs::read_to_string(env.path("runs")).unwrap().lines().count();
    let one = |run: &str| {
        let env = TestEnv::new();
        let atoms = format!(
            "  constraints: {{ max_retries: 3 }}\ngraph:\n  atoms:\n    a: {{ run: 'echo run >> runs; {run}; exit 1' }}\n"
        );
        env.write("aot.yaml", &aligned("false", &atoms));
        let start = env.aot(&["start"]);
        assert_eq!(start.code, 5, "exhausted:\n{}", start.transcript());
        env
    };
    let same = one(r#"echo "error: it is broken""#);
    assert_eq!(count(&same), 2, "the second identical failure ends the retries");
    let state = state(&same, "aot.yaml");
    let (_, _, message) = state.last_failure("a").unwrap();
    assert!(message.contains("the same failure as attempt 1"), "{message}");
    let varies = one(r#"echo "flaky $AOT_ATTEMPT""#);
    assert_eq!(count(&varies), 4, "a failure that changes keeps its retries");
}

#[test]
fn retries_carry_the_correction_signal() {
    let env = TestEnv::new();
    // Checked when solved: an eager check could find the goal met by the
    // retry's first line and cancel it before its summary.
    let atoms = r#"  constraints: { max_retries: 1, verify: when_solved }
graph:
  atoms:
    flaky:
      run: |
        echo "$AOT_ATTEMPT ${AOT_CORRECTION:-none}" >> seen.log
        test "$AOT_ATTEMPT" = 2 && echo 'summary: second time lucky'
"#;
    env.write(
        "aot.yaml",
        &aligned(
            "test -f seen.log && grep -q lucky seen.log || grep -q '^2 ' seen.log",
            atoms,
        ),
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let seen = std::fs::read_to_string(env.path("seen.log")).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines[0], "1 none");
    let correction: serde_json::Value = serde_json::from_str(lines[1].trim_start_matches("2 ")).unwrap();
    assert_eq!(correction["failed_criterion"], "run");
    assert_eq!(correction["class"], "logical");
    assert_eq!(correction["history"][0]["attempt"], 1);
    assert_eq!(state(&env, "aot.yaml").bindings["flaky"].summary, "second time lucky");
}

/// The retry's correction names the failing command, its exit code, and the
/// lines that carry the error even when they are far from the end: a Python
/// traceback above 400 lines of noise, and a `cargo test` failure above its
/// failure report and summary.
#[test]
fn a_correction_carries_the_error_lines_far_from_the_end() {
    let env = TestEnv::new();
    env.write(
        "pytest.sh",
        r#"echo "============ test session starts ============"
echo "Traceback (most recent call last):"
echo '  File "slug.py", line 12, in unidecode'
echo "    return table[c]"
echo "KeyError: 'e-acute'"
for i in $(seq 1 400); do echo "log line $i of a chatty tool"; done
echo "1 failed, 11 passed in 0.31s"
exit 1
"#,
    );
    env.write(
        "cargotest.sh",
        r#"echo "running 300 tests"
for i in $(seq 1 150); do echo "test tests::case_$i ... ok"; done
echo "test tests::slug_keeps_unicode ... FAILED"
for i in $(seq 151 300); do echo "test tests::case_$i ... ok"; done
echo "---- tests::slug_keeps_unicode stdout ----"
echo "thread 'tests::slug_keeps_unicode' panicked at src/lib.rs:88:9:"
for i in $(seq 1 100); do echo "note: context line $i"; done
echo "test result: FAILED. 299 passed; 1 failed; 0 ignored"
exit 101
"#,
    );
    let atoms = r#"  constraints: { max_retries: 1 }
graph:
  atoms:
    py:
      run: |
        if [ -n "$AOT_CORRECTION" ]; then printf '%s' "$AOT_CORRECTION" > py.json; else sh pytest.sh; fi
    rs:
      run: "echo 'summary: patched the slug table'"
      check: ['[ -z "$AOT_CORRECTION" ] || printf "%s" "$AOT_CORRECTION" > rs.seen; sh cargotest.sh']
"#;
    env.write("aot.yaml", &aligned("test -f py.json && test -s rs.seen", atoms));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());

    let py = std::fs::read_to_string(env.path("py.json")).unwrap_or_else(|e| panic!("{e}: {}", run.transcript()));
    let py: serde_json::Value = serde_json::from_str(&py).unwrap();
    assert_eq!(py["failed_criterion"], "run");
    assert!(py["command"].as_str().unwrap().contains("sh pytest.sh"), "{py}");
    assert_eq!(py["exit_code"], 1);
    assert_eq!(py["working_tree"], "kept");
    let message = py["message"].as_str().unwrap();
    assert!(message.len() <= 4096, "{}", message.len());
    for needle in [
        "exit 1:",
        "Traceback (most recent call last):",
        "line 12, in unidecode",
        "KeyError: 'e-acute'",
        "1 failed, 11 passed",
    ] {
        assert!(message.contains(needle), "`{needle}` in:\n{message}");
    }
    assert!(!message.contains("log line 200 "), "{message}");

    // The check failed on the first attempt; the journal's failure carries the evidence.
    let journal = aot::journal::read(&aot::journal::path_for(&env.path("aot.yaml"))).unwrap();
    let (message, ended) = journal
        .records
        .iter()
        .rev()
        .find_map(|r| match &r.event {
            aot::journal::event::Event::AttemptFailed {
                atom, message, ended, ..
            } if atom == "rs" => Some((message.clone(), ended.clone())),
            _ => None,
        })
        .expect("rs failed once");
    assert_eq!(ended.exit_code, Some(101));
    assert_eq!(
        ended.summary.as_deref(),
        Some("patched the slug table"),
        "the work's summary"
    );
    for needle in [
        "exit 101:",
        "test tests::slug_keeps_unicode ... FAILED",
        "panicked at src/lib.rs:88:9",
        "test result: FAILED. 299 passed; 1 failed",
    ] {
        assert!(message.contains(needle), "`{needle}` in:\n{message}");
    }
    let seen: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(env.path("rs.seen")).unwrap()).unwrap();
    assert!(
        seen["command"].as_str().unwrap().ends_with("sh cargotest.sh"),
        "the check names itself by its command: {seen}"
    );
    assert_eq!(seen["previous_summary"], "patched the slug table");
}

#[test]
fn the_agent_worker_gets_goal_bindings_and_the_failed_criterion_on_stdin() {
    let env = TestEnv::new();
    // A fake agent: saves each prompt, succeeds on its second attempt.
    env.write(
        "agent.sh",
        "#!/bin/sh\nn=$(ls prompt-*.txt 2>/dev/null | wc -l)\ncat > prompt-$n.txt\nif [ \"$n\" -ge 1 ]; then touch done.flag; fi\necho 'summary: agent did it'\n",
    );
    let atoms = r#"workers: { agent: { command: 'sh agent.sh' } }
graph:
  atoms:
    fetch: { run: "echo 'summary: 42 crates fetched'" }
    fix:
      agent: Make the lexer tests pass
      deps: [fetch]
      check: ['test -f done.flag']
"#;
    env.write("aot.yaml", &aligned("test -f done.flag", atoms));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let first = std::fs::read_to_string(env.path("prompt-0.txt")).unwrap();
    assert!(first.contains("# Goal of the whole task\ntest"), "{first}");
    assert!(first.contains("Make the lexer tests pass"), "{first}");
    assert!(
        first.contains("- fetch: 42 crates fetched"),
        "the dependency's binding:\n{first}"
    );
    assert!(first.contains("- `test -f done.flag`"), "{first}");
    let second = std::fs::read_to_string(env.path("prompt-1.txt")).unwrap();
    assert!(
        second.contains("- attempt 1 failed check[0]: test -f done.flag, exit code 1 (logical"),
        "the failed criterion:\n{second}"
    );
    assert!(
        second.contains("  you said then: agent did it"),
        "its own summary:\n{second}"
    );
    assert!(
        second.contains("The working tree still holds the last attempt's edits"),
        "the working tree:\n{second}"
    );
}

#[test]
fn an_unaligned_objective_stops_at_the_gate_naming_what_is_missing() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        "version: 1\nobjective:\n  goal: g\ngraph:\n  atoms:\n    a: { run: 'true' }\n",
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 6);
    let message = state(&env, "aot.yaml").run.stop.unwrap().message;
    for missing in ["background_intent", "deliverables", "definition_of_done", "base_case"] {
        assert!(message.contains(missing), "{message}");
    }
    assert!(!message.contains("objective.goal"), "{message}");
}

#[test]
fn a_base_case_that_already_holds_stops_before_any_work() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned("true", "graph:\n  atoms:\n    a: { run: 'touch ran' }\n"),
    );
    assert_eq!(env.aot(&["start"]).code, 0);
    assert!(!env.path("ran").exists());
    assert_eq!(state(&env, "aot.yaml").run.iteration, 0);
}

#[test]
fn a_solved_graph_with_a_failing_base_case_is_exhausted() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned("false", "graph:\n  atoms:\n    a: { run: 'true' }\n"),
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 5);
    assert!(
        state(&env, "aot.yaml")
            .run
            .stop
            .unwrap()
            .message
            .contains("every atom is solved but the base case still fails")
    );
}

#[test]
fn the_iteration_limit_stops_with_exit_8() {
    let env = TestEnv::new();
    let atoms = r#"  constraints: { max_retries: 0 }
graph:
  atoms:
    pick: { or: [a, b, c, d] }
    a: { run: 'false', tool: ta }
    b: { run: 'false', tool: tb }
    c: { run: 'false', tool: tc }
    d: { run: 'false', tool: td }
"#;
    env.write("aot.yaml", &aligned("false", atoms));
    let run = env.aot(&["start", "--max-iterations", "2"]);
    assert_eq!(run.code, 8, "{}", run.transcript());
    assert_eq!(
        state(&env, "aot.yaml").run.stop.unwrap().reason,
        StopReason::IterationLimit
    );
}

#[test]
fn an_environmental_failure_confirmed_by_its_probe_blocks_and_names_the_fix() {
    let env = TestEnv::new();
    let atoms = r#"graph:
  atoms:
    deploy:
      run: 'exit 75'
      probe: 'echo registry unreachable >&2; false'
      tool: registry
    verify: { run: 'true', deps: [deploy], tool: registry }
"#;
    env.write("aot.yaml", &aligned("false", atoms));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 7, "{}", run.transcript());
    let s = state(&env, "aot.yaml");
    assert_eq!(s.graph.atoms["deploy"].status, AtomStatus::Blocked);
    assert_eq!(
        s.graph.atoms["verify"].status,
        AtomStatus::Blocked,
        "cascade: same tool"
    );
    let message = s.run.stop.unwrap().message;
    assert!(
        message.contains("deploy") && message.contains("registry unreachable"),
        "{message}"
    );
    assert_eq!(s.graph.atoms["deploy"].attempts, 1, "a blocker is not retried");
}

#[test]
fn step_runs_one_iteration_and_start_continues() {
    let env = TestEnv::new();
    env.example("or-fallback.yaml");
    let run = env.aot(&["--state", "or-fallback.yaml", "step"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    // One iteration: the first result (`setup`, the only atom ready) taken
    // in and checked; nothing else started.
    let s = state(&env, "or-fallback.yaml");
    assert_eq!((s.run.status, s.run.iteration), (RunStatus::Paused, 1));
    let statuses: Vec<(&str, AtomStatus)> = s.graph.atoms.iter().map(|(id, a)| (id.as_str(), a.status)).collect();
    assert_eq!(
        statuses,
        [
            ("setup", AtomStatus::Solved),
            ("config", AtomStatus::Pending),
            ("from-remote", AtomStatus::Pending),
            ("from-default", AtomStatus::Pending),
            ("report", AtomStatus::Pending),
        ]
    );
    let run = env.aot(&["--state", "or-fallback.yaml", "start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let s = state(&env, "or-fallback.yaml");
    assert_eq!(s.graph.atoms["config"].chosen.as_deref(), Some("from-default"));
    assert!(s.run.iteration > 2, "each fan-in of results is an iteration");
}

#[test]
fn a_second_runner_on_the_same_file_fails_naming_the_first() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "false",
            "graph:\n  atoms:\n    wait: { run: 'touch started; sleep 30' }\n",
        ),
    );
    let first = env.start_until("started");
    let second = env.aot(&["start"]);
    // Stop the first runner gracefully, so its atom's process group goes with it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let pid = first.id();
    assert_eq!(first.wait_with_output().unwrap().status.code(), Some(3));
    assert_eq!(second.code, 1);
    assert!(
        second
            .stderr
            .contains(&format!("aot is already running on aot.yaml (pid {pid})")),
        "{}",
        second.stderr
    );
}

/// The state file with what varies between runs (pids, durations) masked.
fn redacted(env: &TestEnv, name: &str) -> String {
    let text = std::fs::read_to_string(env.path(name)).unwrap();
    text.lines()
        .map(|line| match line.split_once("duration_ms: ") {
            Some((indent, _)) => format!("{indent}duration_ms: [ms]"),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Steps an example to its end, snapshotting the state after every iteration.
fn snapshot_each_iteration(example: &str) {
    let env = TestEnv::new();
    env.example(example);
    for iteration in 1..=10 {
        let run = env.aot_fixed_clock(&["--state", example, "step"]);
        assert_eq!(run.code, 0, "{}", run.transcript());
        insta::assert_snapshot!(format!("{example}__iteration_{iteration}"), redacted(&env, example));
        if state(&env, example).run.stop.is_some() {
            return;
        }
    }
    panic!("{example} did not finish in 10 iterations");
}

#[test]
fn or_fallback_state_after_each_iteration() {
    snapshot_each_iteration("or-fallback.yaml");
}

#[test]
fn speculative_state_after_each_iteration() {
    snapshot_each_iteration("speculative.yaml");
}

#[test]
fn an_atom_timeout_leaves_no_process_behind() {
    let env = TestEnv::new();
    let marker = format!("aot-it-timeout-{}", std::process::id());
    let atoms = format!(
        "  constraints: {{ max_retries: 0 }}\ngraph:\n  atoms:\n    hang:\n      run: '(exec -a {marker} sleep 1000) & wait'\n      timeout: 300ms\n"
    );
    env.write("aot.yaml", &aligned("false", &atoms));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 5, "{}", run.transcript());
    let s = state(&env, "aot.yaml");
    assert!(
        s.run.stop.unwrap().message.contains("timed out"),
        "the failure names the timeout"
    );
    // The group was killed before aot exited; give the kernel a bounded moment to reap.
    env.wait_until("no grandchild survives its atom's timeout", || {
        !std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|c| String::from_utf8_lossy(&c).contains(&marker))
    });
}

#[test]
fn ctrl_c_stops_gracefully_and_start_resumes() {
    a_signal_stops_gracefully_and_start_resumes(nix::sys::signal::Signal::SIGINT);
}

#[test]
fn kill_and_a_closed_terminal_stop_gracefully_too() {
    a_signal_stops_gracefully_and_start_resumes(nix::sys::signal::Signal::SIGTERM);
    a_signal_stops_gracefully_and_start_resumes(nix::sys::signal::Signal::SIGHUP);
}

fn a_signal_stops_gracefully_and_start_resumes(signal: nix::sys::signal::Signal) {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;

    let env = TestEnv::new();
    let marker = format!("aot-it-{signal}-{}", std::process::id());
    let atoms = format!(
        "graph:\n  atoms:\n    quick: {{ run: \"echo 'summary: quick done'\" }}\n    long:\n      run: 'touch started; (exec -a {marker} sleep 1000)'\n      deps: [quick]\n"
    );
    env.write("aot.yaml", &aligned("test -f finished", &atoms));
    let child = env.start_until("started");
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let s = state(&env, "aot.yaml");
    assert_eq!(s.run.stop.unwrap().reason, StopReason::Manual);
    assert_eq!(
        s.graph.atoms["long"].status,
        AtomStatus::Pending,
        "interrupted work goes back to pending"
    );
    assert_eq!(s.bindings["quick"].summary, "quick done", "finished work is kept");
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| String::from_utf8_lossy(&c).contains(&marker));
    assert!(!alive, "{signal}: the interrupted atom's process group is gone");
    // Resuming: the long atom runs again (now finishing), quick is not rerun.
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let old_run = format!("touch started; (exec -a {marker} sleep 1000)");
    std::fs::write(
        env.path("aot.yaml"),
        text.replace(&old_run, "touch started; touch finished"),
    )
    .unwrap();
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(
        state(&env, "aot.yaml").graph.atoms["quick"].attempts,
        1,
        "quick was not run again"
    );
}

#[test]
fn and_parallel_siblings_are_bound_even_when_one_fails() {
    let env = TestEnv::new();
    let atoms = r#"  constraints: { max_retries: 0, max_parallel_agents: 3 }
graph:
  atoms:
    bad: { run: 'sleep 0.2; exit 1' }
    good: { run: "sleep 0.4; echo 'summary: good done'" }
    also-good: { run: "echo 'summary: also done'" }
    after: { run: 'true', deps: [bad, good] }
"#;
    env.write("aot.yaml", &aligned("false", atoms));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 5, "{}", run.transcript());
    let s = state(&env, "aot.yaml");
    assert_eq!(
        s.bindings["good"].summary, "good done",
        "finished after its sibling failed, still bound"
    );
    assert_eq!(s.bindings["also-good"].summary, "also done");
    assert_eq!(
        s.graph.atoms["after"].status,
        AtomStatus::Pending,
        "nothing new starts after a failure"
    );
}

#[test]
fn a_binding_keeps_only_the_last_kilobyte_of_output() {
    let env = TestEnv::new();
    let atoms = "graph:\n  atoms:\n    loud: { run: 'for i in $(seq 1 3000); do echo line $i; done' }\n";
    env.write("aot.yaml", &aligned("test -f never", atoms));
    env.aot(&["start"]);
    let tail = state(&env, "aot.yaml").bindings["loud"].output_tail.clone();
    assert!(tail.len() <= 1024, "{}", tail.len());
    assert!(
        tail.ends_with("line 3000\n") && tail.starts_with("line "),
        "cut at a line break: {tail:?}"
    );
}

#[test]
fn a_restart_keeps_the_retry_budget_and_the_correction_history() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let env = TestEnv::new();
    let atoms = r#"  constraints: { max_retries: 2 }
graph:
  atoms:
    flaky:
      run: |
        echo "$AOT_ATTEMPT ${AOT_CORRECTION:-none}" >> seen.log
        if [ "$AOT_ATTEMPT" = 2 ] && [ ! -f go ]; then touch started; sleep 1000; fi
        [ -f go ] && touch ok && echo 'summary: fine now'
"#;
    env.write("aot.yaml", &aligned("test -f ok", atoms));
    let child = env.start_until("started");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    assert_eq!(
        state(&env, "aot.yaml").graph.atoms["flaky"].attempts,
        1,
        "the interrupted attempt does not count"
    );

    env.write("go", "");
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let seen = std::fs::read_to_string(env.path("seen.log")).unwrap();
    let last = seen.lines().last().unwrap();
    assert!(
        last.starts_with("2 {"),
        "the resumed attempt is number 2, with its correction: {last}"
    );
    let correction: serde_json::Value = serde_json::from_str(last.trim_start_matches("2 ")).unwrap();
    assert_eq!(
        correction["history"][0]["attempt"], 1,
        "attempt 1's failure survived the restart"
    );
}

/// A chain a1 → a4 whose base case holds once a2 is done; a3 is slow.
fn chain_done_after_a2(verify: &str) -> String {
    aligned(
        "test -f a2.done",
        &format!(
            "  constraints: {{ verify: {verify} }}\ngraph:\n  atoms:\n    a1: {{ run: 'touch a1.done' }}\n    a2: {{ run: 'touch a2.done', deps: [a1] }}\n    a3: {{ run: 'touch a3.started; sleep 30; touch a3.done', deps: [a2] }}\n    a4: {{ run: 'touch a4.done', deps: [a3] }}\n"
        ),
    )
}

#[test]
fn the_run_halts_the_moment_the_base_case_holds() {
    let env = TestEnv::new();
    env.write("aot.yaml", &chain_done_after_a2("every_iteration"));
    let started = std::time::Instant::now();
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the run waited for a3 after the goal held"
    );
    let s = state(&env, "aot.yaml");
    assert_eq!(s.run.stop.as_ref().map(|s| s.reason), Some(StopReason::Completed));
    assert!(!env.path("a4.done").exists(), "nothing starts after the goal holds");
    assert!(!env.path("a3.done").exists());
    assert_ne!(s.graph.atoms["a3"].status, AtomStatus::Solved);
    let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    if env.path("a3.started").exists() {
        assert!(
            journal.contains(r#""type":"attempt_cancelled","atom":"a3""#),
            "a3 was in flight and is recorded as cancelled"
        );
    }
    assert_eq!(env.aot(&["replay", "--check"]).code, 0);
}

#[test]
fn with_verify_when_solved_every_atom_runs_before_the_check() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &chain_done_after_a2("when_solved").replace("sleep 30; ", ""),
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(
        env.path("a4.done").exists(),
        "when_solved checks once the graph is solved"
    );
    let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    assert_eq!(
        journal.matches(r#""type":"base_case_checked""#).count(),
        2,
        "once before the first iteration, once when solved"
    );
}

#[test]
fn each_check_ends_an_iteration_and_the_limit_counts_them() {
    let env = TestEnv::new();
    let chain = "  constraints: { max_iterations: 2 }\ngraph:\n  atoms:\n    a1: { run: 'touch a1.done' }\n    a2: { run: 'touch a2.done', deps: [a1] }\n    a3: { run: 'touch a3.done', deps: [a2] }\n    a4: { run: 'touch a4.done', deps: [a3] }\n    a5: { run: 'touch a5.done', deps: [a4] }\n";
    env.write("aot.yaml", &aligned("test -f a5.done", chain));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 8, "iteration limit:\n{}", run.transcript());
    let s = state(&env, "aot.yaml");
    assert_eq!(s.run.stop.as_ref().map(|s| s.reason), Some(StopReason::IterationLimit));
    assert_eq!(s.run.iteration, 2);
    assert!(!env.path("a5.done").exists(), "the base case is unmet");
    let solved = s
        .graph
        .atoms
        .values()
        .filter(|a| a.status == AtomStatus::Solved)
        .count();
    // Two fan-ins, two checks; atoms run on while a check runs, so on a
    // loaded machine one more may finish before the second check ends.
    assert!((2..=4).contains(&solved), "two fan-ins, two checks: {solved} solved");
}
