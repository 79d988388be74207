//! How the state file and its journal grow with GGS decisions: 1,000 rounds,
//! each an attempt that fails logically with one of 50 tools (so the blocked
//! set grows to 50) and a real GGS decision, every round committed as the
//! runner commits it. Prints the sizes, then compacts the journal and prints
//! them again. Run with `cargo bench --bench growth`.

use std::sync::Arc;

use aot::ggs::{self, AttemptGap, GgsConfig, Outcome, ReplanRequest, Verdict};
use aot::journal::event::Event;
use aot::model::FailureClass;
use aot::model::time::{FixedClock, Timestamp};
use aot::store::{Compacted, Store};

const STATE: &str = "version: 1
objective:
  goal: grow
  background_intent: measure
  deliverables: sizes
  definition_of_done: never
  base_case:
    command: 'false'
graph:
  atoms:
    a:
      run: 'false'
";

const ROUNDS: u32 = 1_000;

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("aot.yaml");
    std::fs::write(&path, STATE).expect("write");
    let clock = Arc::new(FixedClock::new(Timestamp::from_millis(1_767_225_600_000), 1));
    let mut store = Store::new(&path, clock);
    store.set_durable(false);
    let (mut state, _) = store.open().expect("open");
    let config = GgsConfig::default();
    for round in 1..=ROUNDS {
        let tool = format!("tool-{:02}", round % 50);
        let request = ReplanRequest {
            outcomes: vec![Outcome {
                atom: Some("a".into()),
                tool: Some(tool.clone()),
                tool_declared: true,
                target: Some("a".into()),
                solved: false,
                verdicts: vec![Verdict {
                    criterion: "run".parse().expect("criterion"),
                    passed: false,
                    class: Some(FailureClass::Logical),
                }],
                trajectory: vec![AttemptGap {
                    attempt: round,
                    criterion: "run".parse().expect("criterion"),
                    class: FailureClass::Logical,
                }],
                attempts: round,
                subtree_tools: vec![tool],
                subtree_targets: Vec::new(),
            }],
            elapsed_ms: u64::from(round) * 10,
            time_budget_ms: 100_000_000,
            replans: round - 1,
            max_replans: 1_000_000,
            spent: 0.0,
            carried: None,
        };
        let decision = ggs::decide(&request, &state.run.ggs, &config);
        let events = vec![
            Event::IterationStarted { iteration: round },
            Event::AtomStarted {
                atom: "a".into(),
                attempt: round,
            },
            Event::AttemptFailed {
                atom: "a".into(),
                attempt: round,
                class: FailureClass::Logical,
                criterion: "run".parse().expect("criterion"),
                message: "exit 1: 3 tests failed".into(),
                ended: Default::default(),
            },
            Event::GgsDecided {
                decision: Box::new(decision),
            },
        ];
        store.commit(&mut state, events).expect("commit");
    }
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let journal = aot::journal::path_for(&path);
    println!(
        "after {ROUNDS} GGS decisions: state file {} bytes, journal {} bytes",
        size(&path),
        size(&journal)
    );
    match store.compact(&mut state).expect("compact") {
        Compacted::Done(c) => println!(
            "compacted ({} records): state file {} bytes, journal {} bytes",
            c.records,
            size(&path),
            size(&journal)
        ),
        other => println!("not compacted: {other:?}"),
    }
}
