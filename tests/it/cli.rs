//! The binary as a user runs it: status, replay, exit codes, help.

use aot::journal::event::Event;
use aot::model::time::Timestamp;
use aot::state::Binding;

use crate::common::{TestEnv, binding, examples, root, run_aot};

#[test]
fn status_of_every_example() {
    for example in examples() {
        let name = example.file_name().unwrap().to_str().unwrap();
        let run = run_aot(&root(), &["--state", &format!("state/{name}"), "status"]);
        assert_eq!(run.code, 0, "{}", run.transcript());
        insta::assert_snapshot!(format!("status__{name}"), run.transcript());
    }
}

#[test]
fn status_json_is_machine_readable() {
    let run = run_aot(&root(), &["--state", "state/or-fallback.yaml", "status", "--json"]);
    assert_eq!(run.code, 0);
    let value: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(value["counts"]["total"], 5);
    assert_eq!(value["choice_points"], serde_json::json!(["config"]));
    assert_eq!(value["runner_pid"], serde_json::Value::Null);
    assert_eq!(
        value["atoms"][1]["alternatives"],
        serde_json::json!(["from-remote", "from-default"])
    );
}

#[test]
fn status_collapses_solved_subgraphs_and_shows_bindings_trail_and_frontier() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    let solve = |atom: &str, summary: &str| Event::AtomSolved {
        atom: atom.into(),
        binding: Binding {
            at: Timestamp::from_millis(1_767_225_660_000),
            ..binding(summary)
        },
    };
    store
        .commit(
            &mut state,
            vec![solve("prepare", "out/ ready"), solve("left", "left half written")],
        )
        .unwrap();
    let run = env.aot(&["--state", "diamond.yaml", "status"]);
    insta::assert_snapshot!(run.transcript(), @r#"
    diamond.yaml
      goal       Combine two independently produced halves into one report
      base case  grep -q left out/report.txt && grep -q right out/report.txt
      atoms      4 total: 2 solved, 0 running, 2 pending, 0 failed, 0 blocked, 0 pruned
      run        idle (never started), revision 3
      variant    0 untried alternatives, work 14 → at most 14 more graph transitions

    graph
      ○ join  run: cat out/left.txt out/right.txt > out/report.txt && echo "su…
        ✓ left  → left half written
        ○ right  run: echo right > out/right.txt && echo "summary: right half wri…
          ✓ prepare  → out/ ready

    ready      right

    bindings
      prepare: out/ ready (attempt 1, 2026-01-01T00:01:00.000Z)
      left: left half written (attempt 1, 2026-01-01T00:01:00.000Z)
    [exit 0]
    "#);
}

#[test]
fn replay_check_agrees_after_commits_and_shows_a_diff_when_not() {
    let env = TestEnv::new();
    let path = env.example("single.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    store
        .commit(&mut state, vec![Event::IterationStarted { iteration: 1 }])
        .unwrap();
    let run = env.aot(&["--state", "single.yaml", "replay", "--check"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    insta::assert_snapshot!(run.transcript(), @r"
    single.yaml: agrees with its journal at revision 2
    [exit 0]
    ");

    // Change an engine-owned field behind the journal's back.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("iteration: 1", "iteration: 9")).unwrap();
    let run = env.aot(&["--state", "single.yaml", "replay", "--check"]);
    assert_eq!(run.code, 1);
    insta::assert_snapshot!(run.transcript(), @"
    single.yaml: differs from its journal at revision 2
    --- journal (replayed)
    +++ single.yaml
    @@ -26,4 +26,4 @@
         status: idle
         revision: 2
    -    iteration: 1
    +    iteration: 9
         replans: 0
    [exit 1]
    ");

    // `aot replay` rebuilds the file from the journal; the check then agrees.
    let run = env.aot(&["--state", "single.yaml", "replay"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(run.stdout.contains("rebuilt from 2 journal records"), "{}", run.stdout);
    assert_eq!(env.aot(&["--state", "single.yaml", "replay", "--check"]).code, 0);
    let rebuilt = std::fs::read_to_string(&path).unwrap();
    assert!(
        rebuilt.starts_with("# yaml-language-server"),
        "replay keeps the header:\n{rebuilt}"
    );
}

#[test]
fn replay_check_reports_a_journal_ahead_of_the_file() {
    let env = TestEnv::new();
    let path = env.example("single.yaml");
    env.store(&path).open().unwrap();
    let (mut journal, _) = aot::journal::Journal::open(&aot::journal::path_for(&path)).unwrap();
    journal
        .append(
            Timestamp::from_millis(0),
            vec![Event::IterationStarted { iteration: 1 }],
        )
        .unwrap();
    let run = env.aot(&["--state", "single.yaml", "replay", "--check"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("1 later event(s)"), "{}", run.stdout);
    let status = env.aot(&["--state", "single.yaml", "status"]);
    assert!(
        status
            .stdout
            .contains("the journal holds 1 journal record the file lacks"),
        "{}",
        status.stdout
    );
}

#[test]
fn replay_without_a_journal_says_so() {
    let env = TestEnv::new();
    env.example("single.yaml");
    let run = env.aot(&["--state", "single.yaml", "replay"]);
    assert_eq!(run.code, 1);
    insta::assert_snapshot!(run.transcript(), @r"
    --- stderr
    error: no journal at single.yaml.journal.jsonl
    hint: the journal is written by commands that change the state, such as `aot start`
    [exit 1]
    ");
}

#[test]
fn usage_errors_exit_2_and_help_teaches() {
    let env = TestEnv::new();
    assert_eq!(env.aot(&["frobnicate"]).code, 2);
    assert_eq!(env.aot(&["validate", "--bogus"]).code, 2);
    let help = env.aot(&["--help"]);
    assert_eq!(help.code, 0);
    for needle in [
        "validate",
        "schema",
        "status",
        "replay",
        "--state",
        "AOT_STATE",
        "Exit codes",
    ] {
        assert!(help.stdout.contains(needle), "--help lacks {needle}:\n{}", help.stdout);
    }
}

#[test]
fn the_state_file_comes_from_aot_state_when_not_given() {
    let env = TestEnv::new();
    env.example("single.yaml");
    let output = env
        .command()
        .arg("validate")
        .env("AOT_STATE", "single.yaml")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), "single.yaml: valid (1 atom)\n");
}

#[test]
fn status_of_a_missing_file_explains_what_to_do() {
    let env = TestEnv::new();
    let run = env.aot(&["status"]);
    assert_eq!(run.code, 1);
    insta::assert_snapshot!(run.transcript(), @r"
    --- stderr
    error: no state file at aot.yaml
    hint: pass --state FILE (or set AOT_STATE), or create one with `aot align`
    [exit 1]
    ");
}

#[test]
fn graph_export_of_every_example() {
    for example in examples() {
        let name = example.file_name().unwrap().to_str().unwrap();
        for format in ["dot", "mermaid"] {
            let run = run_aot(
                &root(),
                &["--state", &format!("state/{name}"), "graph", "--format", format],
            );
            assert_eq!(run.code, 0, "{}", run.transcript());
            insta::assert_snapshot!(format!("graph_{format}__{name}"), run.stdout);
        }
    }
}

#[test]
fn graph_export_shows_progress_and_the_chosen_alternative() {
    let env = TestEnv::new();
    let path = env.example("or-fallback.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    store
        .commit(
            &mut state,
            vec![
                Event::OrChosen {
                    group: "config".into(),
                    chosen: "from-default".into(),
                    remaining: vec![],
                    reason: "test".into(),
                },
                Event::AtomSolved {
                    atom: "setup".into(),
                    binding: Binding {
                        summary: "out/ \"ready\"".into(),
                        output_tail: String::new(),
                        artifacts: Vec::new(),
                        at: Timestamp::from_millis(0),
                        attempt: 1,
                        changes: None,
                    },
                },
                Event::AtomSolved {
                    atom: "from-default".into(),
                    binding: Binding {
                        summary: String::new(),
                        output_tail: String::new(),
                        artifacts: Vec::new(),
                        at: Timestamp::from_millis(0),
                        attempt: 1,
                        changes: None,
                    },
                },
            ],
        )
        .unwrap();
    let dot = env.aot(&["--state", "or-fallback.yaml", "graph"]).stdout;
    assert!(
        dot.contains(r##""setup" [label="setup\nrun · solved\n→ out/ 'ready'", fillcolor="#a5d6a7"];"##),
        "{dot}"
    );
    assert!(
        dot.contains(r#""from-default" -> "config" [style=bold, arrowhead=odiamond];"#),
        "{dot}"
    );
    let mermaid = env
        .aot(&["--state", "or-fallback.yaml", "graph", "--format", "mermaid"])
        .stdout;
    assert!(mermaid.contains("n3 ==> n1"), "{mermaid}");
    assert!(
        mermaid.contains("n0[\"setup<br/>run · solved<br/>→ out/ #quot;ready#quot;\"]:::solved"),
        "the binding's summary, quotes as entities: {mermaid}"
    );
    assert!(
        mermaid.contains("[\"from-default<br/>run · solved\"]"),
        "no arrow to an empty summary: {mermaid}"
    );
    assert!(!dot.contains("→ \""), "{dot}");
}

#[test]
fn commands_in_a_folder_without_a_state_file_leave_nothing_behind() {
    let env = TestEnv::new();
    for command in ["start", "step", "stop", "status", "replay"] {
        let run = env.aot(&[command]);
        assert_eq!(run.code, 1, "{command}: {}", run.transcript());
        let left: Vec<_> = std::fs::read_dir(env.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{command} left {left:?}");
    }
}

#[test]
fn a_reader_that_closes_the_pipe_ends_log_quietly() {
    let env = TestEnv::new();
    let atoms: String = (0..400).map(|i| format!("    a{i}: {{ run: 'true' }}\n")).collect();
    env.write(
        "aot.yaml",
        &format!(
            "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: x\n  base_case: {{ command: 'false' }}\n  constraints: {{ verify: when_solved }}\ngraph:\n  atoms:\n{atoms}"
        ),
    );
    env.aot(&["start"]);
    let mut child = crate::common::aot_command(env.dir.path())
        .args(["--json", "log"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert!(first.starts_with("{\"v\":"), "{first}");
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "",
        "nothing to say about a closed pipe"
    );
}
