//! `aot audit` on journals that show each finding kind: real runs (a healthy
//! one, a retry storm with break_symmetry, a loop that does not converge,
//! spend without progress with a scripted planner) and hand-made records for
//! the violations a correct aot cannot make (damage, a destructive or blocked
//! command run anyway, a write outside the workspace, a file that disagrees
//! with its journal).

use aot::journal::event::{Event, Record};
use aot::model::time::Timestamp;

use crate::common::TestEnv;
use crate::fake_llm::{FakeLlm, Step};

fn plan(env: &TestEnv, constraints: &str, atoms: &str) {
    env.write(
        "aot.yaml",
        &format!(
            "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: {{ command: 'test -e done.txt' }}\n  constraints: {{ isolation: none, verify: when_solved, {constraints} }}\ngraph:\n  atoms:\n{atoms}"
        ),
    );
}

fn audit(env: &TestEnv) -> crate::common::Run {
    env.aot(&["audit", "--all"])
}

#[test]
fn a_healthy_run_has_no_finding_and_its_end_says_so() {
    let env = TestEnv::new();
    env.example("or-fallback.yaml");
    std::fs::rename(env.path("or-fallback.yaml"), env.path("aot.yaml")).unwrap();
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("  audit       no warnings"), "{}", run.stderr);
    let audited = audit(&env);
    assert_eq!(audited.code, 0);
    // How many records depends on how results fold into checks (timing).
    let said = audited.transcript();
    assert!(
        said.starts_with("aot.yaml: audited ") && said.ends_with(" journal records: no findings\n[exit 0]\n"),
        "{said}"
    );
    let json: serde_json::Value = serde_json::from_str(&env.aot(&["audit", "--json"]).stdout).unwrap();
    assert_eq!(json["findings"], serde_json::json!([]));
    // Each audit is appended to the auditor's own log; the run is untouched.
    let log = std::fs::read_to_string(env.path(".aot/audit.jsonl")).unwrap();
    assert_eq!(
        log.lines().count(),
        2,
        "the two audits (a run's end reports, never logs)"
    );
    assert_eq!(env.aot(&["replay", "--check"]).code, 0);
}

#[test]
fn a_retry_storm_and_repeated_break_symmetry_are_thrashing() {
    let env = TestEnv::new();
    // An agent retried with nothing learned fails the same way each time
    // (a command atom that does is cut short by the engine itself).
    plan(
        &env,
        "max_retries: 3, max_replans: 4",
        "    fix:\n      or: [patch, patch-again]\n    patch:\n      agent: apply the patch\n    patch-again:\n      agent: apply the patch again\n",
    );
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap().replace(
        "graph:\n",
        "workers:\n  agent: { command: 'echo \"error: hunk 1 FAILED\"; exit 1' }\ngraph:\n",
    );
    env.write("aot.yaml", &text);
    let journal_before = env.aot(&["start"]);
    assert_eq!(journal_before.code, 5);
    let audited = audit(&env);
    assert_eq!(audited.code, 9, "warnings: exit 9");
    insta::assert_snapshot!("audit_thrashing", audited.transcript());
}

#[test]
fn the_same_command_failing_under_different_names_is_thrashing() {
    let env = TestEnv::new();
    plan(
        &env,
        "max_retries: 0, max_replans: 4",
        "    fix:\n      or: [patch, patch-again]\n    patch:\n      run: 'echo \"error: hunk 1 FAILED\"; exit 1'\n    patch-again:\n      run: 'echo \"error: hunk 1 FAILED\"; exit 1'\n",
    );
    assert_eq!(env.aot(&["start"]).code, 5);
    let audited = audit(&env);
    assert_eq!(audited.code, 9, "warnings: exit 9");
    assert!(
        audited.stdout.contains(
            "the same command failed under different names (`patch`, `patch-again`): `echo \"error: hunk 1 FAILED\"; exit 1`"
        ),
        "{}",
        audited.stdout
    );
}

#[test]
fn d_not_falling_over_rounds_is_a_convergence_failure() {
    let env = TestEnv::new();
    plan(
        &env,
        "max_retries: 0, max_replans: 6",
        "    fix:\n      or: [a, b, c, d]\n    a:\n      run: 'exit 1'\n      tool: t1\n    b:\n      run: 'exit 2'\n      tool: t2\n    c:\n      run: 'exit 3'\n      tool: t3\n    d:\n      run: 'exit 4'\n      tool: t4\n",
    );
    env.aot(&["start"]);
    let audited = audit(&env);
    assert_eq!(audited.code, 9);
    assert!(audited.stdout.contains("convergence"), "{}", audited.stdout);
    insta::assert_snapshot!("audit_convergence", audited.transcript());
}

#[test]
fn a_planner_spending_while_nothing_moves_is_spend_without_progress() {
    let env = TestEnv::new();
    plan(
        &env,
        "max_retries: 0, max_replans: 3",
        "    fix:\n      or: [a]\n    a:\n      run: 'exit 1'\n      tool: sh\n",
    );
    let plan = |n: u32| {
        Step::chat(&format!(
            r#"{{"atoms": {{"w{n}": {{"run": "exit {n}", "tool": "t{n}"}}}}, "rationale": "try {n}"}}"#
        ))
    };
    let server = FakeLlm::start(vec![plan(3), plan(4), plan(5), plan(6)]);
    crate::common::run_aot_with(
        env.dir.path(),
        &["start"],
        &[
            ("BRAIN_BASE_URL", server.base.as_str()),
            ("BRAIN_MODEL", "fake-planner"),
            ("AOT_LLM_TIMEOUT", "5"),
        ],
    );
    let audited = audit(&env);
    assert_eq!(audited.code, 9);
    assert!(
        audited.stdout.contains("spend_without_progress") || audited.stdout.contains("spend "),
        "{}",
        audited.stdout
    );
    insta::assert_snapshot!("audit_spend", audited.transcript());
}

/// The records of a finished healthy run, then `more` appended by hand as
/// another aot would have written them.
fn tampered(env: &TestEnv, more: impl FnOnce(u64, Timestamp) -> Vec<(u64, Timestamp, Event)>) {
    env.example("single.yaml");
    std::fs::rename(env.path("single.yaml"), env.path("aot.yaml")).unwrap();
    assert_eq!(env.aot(&["start"]).code, 0);
    let path = env.path("aot.yaml.journal.jsonl");
    let records = aot::journal::read(&path).unwrap().records;
    let last = records.last().unwrap();
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (seq, at, event) in more(last.seq, last.at) {
        let record = Record {
            v: aot::journal::event::RECORD_VERSION,
            seq,
            at,
            event,
        };
        text.push_str(&serde_json::to_string(&record).unwrap());
        text.push('\n');
    }
    text.push_str("{this line is damaged\n");
    std::fs::write(&path, text).unwrap();
}

#[test]
fn hand_made_violations_and_damage_are_each_found() {
    let env = TestEnv::new();
    tampered(&env, |last, at| {
        let later = |ms: u64| Timestamp::from_millis(at.as_millis() + ms);
        let mut blocked = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
        blocked.run.ggs.blocked_tools.insert("git".into());
        let atom: aot::model::AtomId = "greet".into();
        let tool = |input: &str, tool: &str| Event::ToolCalled {
            atom: atom.clone(),
            attempt: 1,
            tool: tool.into(),
            input: input.into(),
            refused: None,
            exit_code: Some(0),
        };
        let mut out = vec![
            (last + 1, later(1), tool("rm -rf out", "shell")),
            (last + 2, later(2), tool("../../etc/cron.d/job", "write_file")),
            // Records 3 and 4 are missing.
            (
                last + 5,
                later(5),
                Event::AtomsReset {
                    atoms: vec![atom.clone()],
                },
            ),
            (
                last + 6,
                later(6),
                Event::AtomSolved {
                    atom: atom.clone(),
                    binding: crate::common::binding("made up"),
                },
            ),
            // The clock goes backwards.
            (last + 7, at, tool("ls", "shell")),
            (
                last + 8,
                later(8),
                Event::Replanned {
                    replan: 1,
                    directive: aot::ggs::MacroState::ChangePath,
                    answers: None,
                    added: vec![atom.clone()],
                    group: None,
                    rationale: "again".into(),
                    gates: Vec::new(),
                },
            ),
            // Out of order.
            (last + 8, later(9), tool("true", "shell")),
        ];
        out.push((last + 9, later(10), Event::snapshot(&blocked)));
        out.push((last + 10, later(11), tool("cd src && git apply x.patch", "shell")));
        // Memory said Avoid; the choice was made anyway.
        let calibration = aot::memory::Calibration {
            group: "pick".into(),
            alternatives: vec![aot::memory::Recalled {
                alt: "mirror".into(),
                space: "curl".into(),
                entity: "mirror".into(),
                m_att: 1.0,
                m_dec: -0.9,
                action: aot::memory::Action::Avoid,
                confirmed: None,
            }],
            order: vec!["mirror".into()],
            must_not: vec!["curl on mirror".into()],
            should_prefer: Vec::new(),
        };
        out.push((
            last + 11,
            later(12),
            Event::Calibrated {
                calibration: Box::new(calibration),
            },
        ));
        out.push((
            last + 12,
            later(13),
            Event::OrChosen {
                group: "pick".into(),
                chosen: "mirror".into(),
                remaining: Vec::new(),
                reason: "first".into(),
            },
        ));
        out
    });
    let audited = audit(&env);
    assert_eq!(audited.code, 9);
    for rule in [
        "not a record",
        "without a recorded confirmation",
        "wrote outside the workspace",
        "are missing between",
        "without an attempt having started",
        "clock went backwards",
        "already existed",
        "out of order",
        "which GGS had blocked",
        "though memory advised Avoid",
    ] {
        assert!(audited.stdout.contains(rule), "{rule}:\n{}", audited.stdout);
    }
    insta::assert_snapshot!("audit_violations", audited.transcript());
}

#[test]
fn a_file_that_disagrees_with_its_journal_is_an_anomaly() {
    let env = TestEnv::new();
    env.example("single.yaml");
    std::fs::rename(env.path("single.yaml"), env.path("aot.yaml")).unwrap();
    assert_eq!(env.aot(&["start"]).code, 0);
    let text = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    let lines = aot::audit::read(&text);
    let mut file = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
    let findings = |file: &aot::state::StateFile| {
        aot::audit::audit(&aot::audit::Input {
            lines: &lines,
            file: Some(file),
            workspace: env.dir.path(),
        })
    };
    assert!(findings(&file).is_empty(), "{:?}", findings(&file));
    let (id, atom) = file.graph.atoms.iter_mut().next().unwrap();
    let id = id.clone();
    atom.attempts += 3;
    let found = findings(&file);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].rule, "replay_disagrees");
    assert!(found[0].message.contains(&format!("`{id}`")), "{}", found[0].message);
}
