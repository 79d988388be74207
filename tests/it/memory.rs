//! MKCT memory with the real binary: a second task in a folder benefits from
//! the first, calibration gates, concurrent writers, and the Dreamer.

use aot::journal::event::{Event, Record};
use aot::memory::{Entry, Level, Megram, MemoryFile};
use aot::model::time::Timestamp;
use aot::state::document;

use crate::child;
use crate::common::{TestEnv, run_aot_with};

fn aligned(goal: &str, base_case: &str, atoms: &str) -> String {
    format!(
        "version: 1\nobjective:\n  goal: {goal}\n  background_intent: test\n  deliverables: test\n  definition_of_done: test\n  base_case: {{ command: \"{base_case}\" }}\n  constraints: {{ max_retries: 0, max_parallel_agents: 1 }}\ngraph:\n  atoms:\n{atoms}"
    )
}

const CLOCK: (&str, &str) = ("AOT_TEST_CLOCK", "1767225600000");

/// A Megram tagged (space, entity) with the quantization matrix's `row`.
fn seeded(id: &str, space: &str, entity: &str, row: &str, t: Timestamp) -> Entry {
    let r = aot::memory::row(row).unwrap();
    Entry::megram(Megram {
        id: id.into(),
        level: Level::M,
        t,
        t_recalled: None,
        space: space.into(),
        entity: entity.into(),
        content: format!("seeded {row}"),
        state: row.into(),
        f: r.f,
        sigma: r.sigma,
        k: r.k,
    })
}

/// Sixty days ago.
/// Sixty days before the test clock's start (the binary runs on the test clock).
fn long_ago() -> Timestamp {
    Timestamp::from_millis(1_767_225_600_000 - 60 * 86_400_000)
}

fn records(env: &TestEnv, state: &str) -> Vec<Record> {
    let text = std::fs::read_to_string(env.path(&format!("{state}.journal.jsonl"))).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn calibrations(env: &TestEnv, state: &str) -> Vec<serde_json::Value> {
    records(env, state)
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Calibrated { calibration } => Some(serde_json::to_value(calibration).unwrap()),
            _ => None,
        })
        .collect()
}

fn started(env: &TestEnv, state: &str, atom: &str) -> bool {
    records(env, state)
        .iter()
        .any(|r| matches!(&r.event, Event::AtomStarted { atom: a, .. } if a == atom))
}

#[test]
fn a_second_task_avoids_the_tool_that_failed_and_prefers_the_one_that_worked() {
    let env = TestEnv::new();
    env.write(
        "task1.yaml",
        &aligned(
            "write the config",
            "test -f one.done",
            "    config: { or: [with-a, with-b] }
    with-a: { run: 'false', tool: A, target: config }
    with-b: { run: touch one.done, tool: B, target: config }
",
        ),
    );
    let first = run_aot_with(env.dir.path(), &["--state", "task1.yaml", "start"], &[CLOCK]);
    assert_eq!(first.code, 0, "{}", first.transcript());
    assert!(
        started(&env, "task1.yaml", "with-a"),
        "task 1 tries A first (file order)"
    );

    // A different state file, the same OR shape (other ids), in the same folder.
    env.write(
        "task2.yaml",
        &aligned(
            "write the config again",
            "test -f two.done",
            "    setting: { or: [first, second] }
    first: { run: touch a-ran; false, tool: A, target: config }
    second: { run: touch two.done, tool: B, target: config }
",
        ),
    );
    let second = run_aot_with(env.dir.path(), &["--state", "task2.yaml", "start"], &[CLOCK]);
    assert_eq!(second.code, 0, "{}", second.transcript());
    assert!(!started(&env, "task2.yaml", "first"), "A is never run in task 2");
    assert!(!env.path("a-ran").exists());
    let s = document::read(&env.path("task2.yaml")).unwrap().state;
    assert!(
        s.run.ggs.rounds == 0 && s.run.ggs.last.is_none(),
        "nothing failed, so GGS had nothing to decide"
    );
    match &s.trail[0] {
        aot::state::TrailEntry::OrChoice { chosen, reason, .. } => {
            assert_eq!(chosen, "second");
            assert!(reason.starts_with("memory: exploit"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    insta::assert_json_snapshot!(calibrations(&env, "task2.yaml"));

    // What the first task left, as `aot memory` shows it.
    let query = run_aot_with(
        env.dir.path(),
        &["memory", "query", "--space", "A", "--entity", "config"],
        &[CLOCK],
    );
    assert_eq!(query.code, 0, "{}", query.transcript());
    assert!(query.stdout.contains("→ Avoid: MUST NOT"), "{}", query.stdout);
    let list = env.aot(&["--json", "memory", "list"]);
    let listed: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let states: Vec<&str> = listed["megrams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["megram"]["state"].as_str().unwrap())
        .collect();
    // Task 1: A's failure (under break_symmetry), B's solved choice point, the
    // accept; task 2: B again, and its accept.
    assert_eq!(states, ["break_symmetry", "success", "accept", "success", "accept"]);
}

const SPLIT: &str = "    pick: { or: [risky, other] }
    risky: { run: touch risky-ran, tool: R, target: t }
    other: { run: touch other-ran, tool: O, target: t }
";

/// A memory in which R on t both worked and failed: Caution.
fn split_memory(env: &TestEnv) {
    let file = MemoryFile::new(env.path(".aot/memory.jsonl"));
    let t = Timestamp::from_millis(1_767_225_600_000);
    file.append(&[
        seeded("good", "R", "t", "success", t),
        seeded("bad", "R", "t", "change_approach", t),
    ])
    .unwrap();
}

#[test]
fn caution_proceeds_only_with_yes() {
    for (yes, expect_risky) in [(false, false), (true, true)] {
        let env = TestEnv::new();
        split_memory(&env);
        env.write(
            "aot.yaml",
            &aligned("pick one", "test -f risky-ran -o -f other-ran", SPLIT),
        );
        let args: &[&str] = if yes { &["start", "--yes"] } else { &["start"] };
        let run = run_aot_with(env.dir.path(), args, &[CLOCK]);
        assert_eq!(run.code, 0, "{}", run.transcript());
        assert_eq!(env.path("risky-ran").exists(), expect_risky, "--yes: {yes}");
        let c = &calibrations(&env, "aot.yaml")[0];
        assert_eq!(c["alternatives"][0]["action"], "caution");
        assert_eq!(c["alternatives"][0]["confirmed"], yes);
        if !yes {
            assert_eq!(c["order"], serde_json::json!(["other", "risky"]));
            assert_eq!(c["must_not"][0], "R on t (memory: caution)", "{c}");
        }
    }
}

#[test]
fn agent_prompts_carry_must_not_and_should_prefer() {
    let env = TestEnv::new();
    split_memory(&env);
    env.write(
        "aot.yaml",
        &aligned(
            "pick one",
            "test -f prompt.txt",
            "    pick: { or: [risky, helper] }
    risky: { run: touch risky-ran, tool: R, target: t }
    helper: { agent: do it }
",
        ),
    );
    let run = run_aot_with(
        env.dir.path(),
        &["start"],
        &[CLOCK, ("AOT_AGENT_CMD", "cat > prompt.txt")],
    );
    assert_eq!(run.code, 0, "{}", run.transcript());
    let prompt = std::fs::read_to_string(env.path("prompt.txt")).unwrap();
    assert!(prompt.contains("- R on t (memory: caution)"), "{prompt}");
}

#[test]
fn two_processes_writing_at_once_lose_nothing_while_the_dreamer_compacts() {
    let env = TestEnv::new();
    let path = env.path(".aot/memory.jsonl");
    let file = MemoryFile::new(&path);
    // Faded Megrams for the Dreamer to forget meanwhile.
    let faded: Vec<Entry> = (0..50)
        .map(|i| seeded(&format!("faded-{i}"), "old", "x", "refine", long_ago()))
        .collect();
    file.append(&faded).unwrap();
    let rounds = 400;
    let mut writers: Vec<_> = ["p", "q"]
        .into_iter()
        .map(|prefix| {
            child::spawn(
                "megrams",
                &path,
                &[
                    ("AOT_TEST_ROUNDS", rounds.to_string()),
                    ("AOT_TEST_PREFIX", prefix.into()),
                ],
            )
        })
        .collect();
    for w in &mut writers {
        child::wait_ready(w);
    }
    let plan = aot::engine::dream_once(&file, Timestamp::now()).unwrap();
    assert_eq!(plan.forget.len(), 50);
    for mut w in writers {
        assert!(w.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&path).unwrap();
    for (n, line) in text.lines().enumerate() {
        serde_json::from_str::<Entry>(line).unwrap_or_else(|e| panic!("line {}: {e}: {line}", n + 1));
    }
    let loaded = file.load().unwrap();
    assert!(loaded.skipped.is_empty());
    let ids: std::collections::HashSet<&str> = loaded.memory.megrams().iter().map(|m| m.id.as_str()).collect();
    for prefix in ["p", "q"] {
        for i in 0..rounds {
            assert!(ids.contains(format!("{prefix}-{i}").as_str()), "{prefix}-{i} was lost");
        }
    }
    assert!(!ids.iter().any(|id| id.starts_with("faded-")));
    assert_eq!(loaded.memory.len(), 2 * rounds as usize);
}

#[test]
fn memory_dream_dry_run_changes_nothing_and_a_pass_compacts() {
    let env = TestEnv::new();
    let file = MemoryFile::new(env.path(".aot/memory.jsonl"));
    let megram = |id: &str, state: &str, days_ago: u64| {
        let t = Timestamp::from_millis(1_767_225_600_000 - days_ago * 86_400_000);
        seeded(id, "make", "build", state, t)
    };
    let mut entries = vec![megram("stale", "refine", 30)];
    entries.extend((0..7).map(|i| megram(&format!("win-{i}"), "success", 0)));
    file.append(&entries).unwrap();
    let before = std::fs::read_to_string(file.path()).unwrap();
    let dry = run_aot_with(env.dir.path(), &["--json", "memory", "dream", "--dry-run"], &[CLOCK]);
    assert_eq!(dry.code, 0, "{}", dry.transcript());
    let plan: serde_json::Value = serde_json::from_str(&dry.stdout).unwrap();
    assert_eq!(plan["dream"]["forget"], serde_json::json!(["stale"]));
    assert_eq!(plan["dream"]["consolidate"].as_array().unwrap().len(), 1);
    assert_eq!(
        std::fs::read_to_string(file.path()).unwrap(),
        before,
        "a dry run writes nothing"
    );

    let wet = run_aot_with(env.dir.path(), &["memory", "dream"], &[CLOCK]);
    assert_eq!(wet.code, 0, "{}", wet.transcript());
    assert!(
        wet.stdout
            .contains("did forget 1 faded Megram(s), demote 0 and consolidate 1"),
        "{}",
        wet.stdout
    );
    let memory = file.load().unwrap().memory;
    assert_eq!(memory.len(), 8);
    let c = memory.megrams().last().unwrap();
    assert_eq!((c.level, c.k), (Level::C, 0.0));
    assert!(c.content.starts_with("Best practice: make on build worked in 7 of 7"));
}

#[test]
fn the_dreamer_runs_in_the_background_of_a_long_run() {
    let env = TestEnv::new();
    let file = MemoryFile::new(env.path(".aot/memory.jsonl"));
    file.append(&[seeded("faded", "old", "x", "refine", long_ago())])
        .unwrap();
    env.write(
        "aot.yaml",
        &aligned(
            "wait for the test",
            "test -f go",
            "    wait: { run: 'touch waiting; while [ ! -e go ]; do sleep 0.02; done' }\n",
        ),
    );
    let mut child = env
        .command()
        .arg("start")
        .env("AOT_DREAM_INTERVAL_MS", "50")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The atom runs the whole time: the pass must not wait for it.
    env.wait_until("the Dreamer compacts while the atom runs", || {
        let text = std::fs::read_to_string(file.path()).unwrap_or_default();
        env.path("waiting").exists() && !text.contains("\"faded\"")
    });
    assert!(!env.path("go").exists());
    env.write("go", "");
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_memory_that_cannot_be_used_is_reported_once_and_the_run_goes_on() {
    // (memory flag, what makes it fail, the one warning expected)
    let cases = [
        ("not-a-dir/memory.jsonl", "not-a-dir", "memory could not be read"),
        (
            ".aot/memory.jsonl",
            ".aot/memory.jsonl.lock/",
            "memory could not be written",
        ),
    ];
    for (memory, obstacle, warning) in cases {
        let env = TestEnv::new();
        if let Some(dir) = obstacle.strip_suffix('/') {
            std::fs::create_dir_all(env.path(dir)).unwrap();
        } else {
            env.write(obstacle, "");
        }
        env.write(
            "aot.yaml",
            &aligned(
                "write it",
                "test -f done",
                "    pick: { or: [a, b] }
    a: { run: 'false', tool: A }
    b: { run: touch done, tool: B }
",
            ),
        );
        let run = run_aot_with(env.dir.path(), &["--memory", memory, "start"], &[CLOCK]);
        assert_eq!(run.code, 0, "{}", run.transcript());
        let warnings: Vec<&str> = run.stdout.lines().filter(|l| l.contains("\"warning\"")).collect();
        assert_eq!(warnings.len(), 1, "{}", run.transcript());
        assert!(warnings[0].contains(warning), "{}", warnings[0]);
    }
}

#[test]
fn a_speculative_race_leaves_out_what_memory_avoids() {
    let env = TestEnv::new();
    let file = MemoryFile::new(env.path(".aot/memory.jsonl"));
    let t = Timestamp::from_millis(1_767_225_600_000);
    file.append(&[seeded("bad", "X", "mirror", "change_approach", t)])
        .unwrap();
    env.write(
        "aot.yaml",
        &aligned(
            "fetch",
            "test -f fetched",
            "    fetch: { or: [avoided, fine], speculative: true }
    avoided: { run: touch fetched, tool: X, target: mirror }
    fine: { run: touch fetched, tool: Y, target: mirror }
",
        ),
    );
    let run = run_aot_with(env.dir.path(), &["start"], &[CLOCK]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(!started(&env, "aot.yaml", "avoided"), "memory's Avoid does not race");
    assert!(started(&env, "aot.yaml", "fine"));
    assert_eq!(
        calibrations(&env, "aot.yaml")[0]["order"],
        serde_json::json!(["fine", "avoided"])
    );
}

mod calibration_props {
    use aot::ggs::GgsState;
    use aot::graph::{ChoiceOrder, WorkGraph};
    use aot::memory::{Action, Entry, Level, Megram, Memory};
    use aot::model::time::Timestamp;
    use aot::state::{Atom, Objective, StateFile};
    use aot::steer::{Recall, Steer};
    use indexmap::IndexMap;
    use proptest::prelude::*;

    const TOOLS: [&str; 4] = ["sed", "curl", "git", "make"];
    const T0: u64 = 1_767_225_600_000;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, .. ProptestConfig::default() })]

        /// Whatever memory holds: refused plans never appear, Exploit comes
        /// first (strongest first), last resorts come last, nothing is lost.
        #[test]
        fn calibration_orders_and_never_resurrects_a_refused_plan(
            alts in prop::collection::vec((0..4usize, 0..3usize), 1..7),
            megrams in prop::collection::vec((0..4usize, 0..3usize, -1.0..=1.0f64, 0.0..=1.0f64, 0..30u64), 0..30),
            blocked in prop::collection::btree_set(0..4usize, 0..3),
            yes in any::<bool>(),
        ) {
            let mut atoms = IndexMap::new();
            let ids: Vec<aot::model::AtomId> = (0..alts.len()).map(|i| format!("a{i}").into()).collect();
            atoms.insert("g".into(), Atom { or: Some(ids.clone()), ..Atom::default() });
            for (i, (tool, target)) in alts.iter().enumerate() {
                atoms.insert(ids[i].clone(), Atom {
                    tool: Some(TOOLS[*tool].into()),
                    target: Some(format!("t{target}")),
                    ..Atom::command("true")
                });
            }
            let state = StateFile::new(Objective::default(), atoms);
            let graph = WorkGraph::new(&state);
            let memory = Memory::from_entries(megrams.iter().enumerate().map(|(n, (tool, target, sigma, f, days))| {
                Entry::megram(Megram {
                    id: n.to_string(),
                    level: Level::M,
                    t: Timestamp::from_millis(T0 - days * 86_400_000),
                    t_recalled: None,
                    space: TOOLS[*tool].into(),
                    entity: format!("t{target}"),
                    content: String::new(),
                    state: "test".into(),
                    f: *f,
                    sigma: *sigma,
                    k: 0.05,
                })
            }));
            let ggs = GgsState {
                blocked_tools: blocked.iter().map(|t| TOOLS[*t].to_string()).collect(),
                ..GgsState::default()
            };
            // The user answers `yes` about every pair (asked before the ranking).
            let answers: std::collections::HashMap<String, bool> = state
                .graph
                .atoms
                .iter()
                .filter_map(|(id, a)| Some((format!("{} on {}", a.tool()?, aot::steer::target(id, a)), yes)))
                .collect();
            let recall = Recall::new(&memory, Timestamp::from_millis(T0), &answers, false);
            let steer = Steer::new(&state.graph.atoms, &ggs).with_recall(recall);
            let candidates: Vec<&str> = ids.iter().map(aot::model::AtomId::as_str).collect();
            let ranking = steer.rank(&graph, "g", &candidates);
            let ranked = ranking.ranked;
            prop_assert!(ranking.calibration.is_some());
            let c = ranking.calibration.as_ref().unwrap();
            let allowed: Vec<&str> = candidates.iter().copied().filter(|id| {
                !ggs.blocked_tools.contains(state.graph.atoms[*id].tool.as_deref().unwrap_or_default())
            }).collect();
            let mut got: Vec<&str> = ranked.iter().map(|r| r.id.as_str()).collect();
            prop_assert_eq!(&c.order, &got);
            got.sort();
            let mut want = allowed.clone();
            want.sort();
            prop_assert_eq!(got, want, "exactly the allowed alternatives, each once");
            let action = |id: &str| c.alternatives.iter().find(|a| a.alt == id).map(|a| (a.action, a.confirmed, a.m_dec));
            let class = |id: &str| match action(id) {
                Some((Action::Exploit, _, _)) => 0,
                Some((Action::Avoid, _, _)) | Some((_, Some(false), _)) => 2,
                _ => 1,
            };
            for pair in ranked.windows(2) {
                let (a, b) = (pair[0].id.as_str(), pair[1].id.as_str());
                prop_assert!(class(a) <= class(b), "{} before {}: {:?}", a, b, c);
                if class(a) == 0 && class(b) == 0 {
                    prop_assert!(action(a).unwrap().2 >= action(b).unwrap().2, "strongest Exploit first");
                }
                prop_assert_eq!(pair[0].last_resort && !pair[1].last_resort, false);
            }
            for alt in &c.alternatives {
                prop_assert_eq!(alt.confirmed.is_some(), alt.action == Action::Caution);
                if alt.action == Action::Caution {
                    prop_assert_eq!(alt.confirmed, Some(yes));
                }
            }
        }
    }
}

#[test]
fn a_torn_last_line_does_not_swallow_the_next_megram() {
    let env = TestEnv::new();
    let path = env.path(".aot/memory.jsonl");
    let file = MemoryFile::new(&path);
    file.append(&[seeded("first", "s", "x", "refine", long_ago())]).unwrap();
    // A writer killed half-way through its line.
    let mut torn = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut torn, br#"{"v":1,"kind":"megram","megram":{"id":"tor"#).unwrap();
    file.append(&[seeded("after", "s", "y", "refine", long_ago())]).unwrap();
    let loaded = file.load().unwrap();
    let ids: Vec<&str> = loaded.memory.megrams().iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["first", "after"]);
    assert_eq!(loaded.skipped.len(), 1, "the torn line is skipped and counted");
}
