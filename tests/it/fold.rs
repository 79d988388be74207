//! Property tests of the fold: the state file is a fold over the journal, no
//! matter how the events come or where the journal is cut.

use aot::graph::WorkGraph;
use aot::journal;
use aot::journal::event::{Event, Record};
use aot::model::time::Timestamp;
use aot::state::document;
use aot::state::*;
use proptest::prelude::*;

use crate::common::TestEnv;

const STATE: &str = "\
version: 1
objective:
  goal: fold
  base_case: { command: 'true' }
graph:
  atoms:
    a: { run: 'true' }
    b: { run: 'true', deps: [a] }
    c: { run: 'true' }
    pick: { or: [b, c] }
";

fn atom() -> impl Strategy<Value = aot::model::AtomId> {
    // "zz" is not in the graph: events naming it must fold harmlessly.
    prop::sample::select(vec!["a", "b", "c", "pick", "zz"]).prop_map(aot::model::AtomId::from)
}

fn class() -> impl Strategy<Value = FailureClass> {
    prop_oneof![Just(FailureClass::Logical), Just(FailureClass::Environmental)]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (atom(), 1..4u32).prop_map(|(atom, attempt)| Event::AtomStarted { atom, attempt }),
        (atom(), "[a-z ]{0,12}").prop_map(|(atom, summary)| Event::AtomSolved {
            atom,
            binding: Binding {
                summary,
                output_tail: String::new(),
                artifacts: Vec::new(),
                at: Timestamp::from_millis(1_767_225_600_000),
                attempt: 1,
                changes: None,
            },
        }),
        (atom(), 1..4u32, class()).prop_map(|(atom, attempt, class)| Event::AttemptFailed {
            atom,
            attempt,
            class,
            criterion: "run".parse().unwrap(),
            message: "exit 1".into(),
            ended: Default::default(),
        }),
        (atom(), class()).prop_map(|(atom, class)| Event::AtomFailed {
            atom,
            class,
            criterion: "check[0]".parse().unwrap(),
            message: "exit 1".into(),
            ended: Default::default(),
        }),
        prop::collection::vec(atom(), 0..3).prop_map(|atoms| Event::AtomsReset { atoms }),
        atom().prop_map(|atom| Event::AtomBlocked {
            atom,
            reason: "down".into()
        }),
        prop::collection::vec(atom(), 0..3).prop_map(|atoms| Event::AtomsPruned { atoms }),
        prop::sample::select(vec!["b", "c"]).prop_map(|chosen| Event::OrChosen {
            group: "pick".into(),
            chosen: chosen.into(),
            remaining: vec![],
            reason: "test".into(),
        }),
        (prop::sample::select(vec![("b", "c"), ("c", "b")]), any::<bool>()).prop_map(|((from, to), reset)| {
            Event::Backtracked {
                group: "pick".into(),
                from: from.into(),
                to: to.into(),
                // A failed alternative is not reset: it stays failed.
                reset: if reset { vec![from.into()] } else { Vec::new() },
            }
        }),
        (any::<bool>(), prop::option::of("[a-z]{1,8}")).prop_map(|(stop_requested, stop_reason)| Event::ControlSet {
            control: Control {
                stop_requested,
                stop_reason,
                redirect_requested: false,
            },
        }),
        (0..100u32).prop_map(|iteration| Event::IterationStarted { iteration }),
        (any::<u32>(), any::<bool>()).prop_map(|(pid, yes)| Event::RunStarted { pid, yes }),
        (
            prop::sample::select(vec![
                CorrectionKind::ObjectiveChange,
                CorrectionKind::DagAdjustment,
                CorrectionKind::ConstraintChange,
                CorrectionKind::BindingsOverride,
            ]),
            any::<bool>()
        )
            .prop_map(|(kind, trail_cleared)| Event::CorrectionRecorded {
                correction: Correction {
                    at: Timestamp::from_millis(1_767_225_600_000),
                    kind,
                    description: "c".into(),
                    trail_cleared,
                },
            }),
        Just(Event::RunStopped {
            stop: StopRecord {
                reason: StopReason::Manual,
                at: Timestamp::from_millis(1_767_225_600_000),
                message: "stop".into(),
                evidence: None,
                final_result: None,
            },
        }),
        prop::collection::vec(atom(), 0..3).prop_map(|atoms| Event::AtomsRefined { atoms }),
        Just(Event::GgsDecided {
            decision: Box::new(crate::ggs::sample_decision()),
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn saving_between_events_equals_folding_them_and_any_prefix_replays(
        batches in prop::collection::vec(prop::collection::vec(event(), 1..4), 1..12)
    ) {
        let env = TestEnv::new();
        let path = env.write("fold.yaml", STATE);
        let mut store = env.store(&path);
        let (mut state, _) = store.open().unwrap();
        let mut history = vec![state.clone()];
        for batch in batches {
            // Commit one event at a time: a save after every event.
            for event in batch {
                store.commit(&mut state, vec![event]).unwrap();
                history.push(state.clone());
                // What is on disk is exactly what is in memory.
                prop_assert_eq!(&document::read(&path).unwrap().state, &state);
            }
        }
        let journal_path = journal::path_for(&path);
        let contents = journal::read(&journal_path).unwrap();
        prop_assert_eq!(&journal::fold(&contents.records).unwrap(), &state);

        // Cut the journal after every line: replay gives the state as of that record.
        let text = std::fs::read_to_string(&journal_path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        prop_assert_eq!(lines.len(), history.len());
        let cut = env.path("cut.jsonl");
        for (k, expected) in history.iter().enumerate() {
            std::fs::write(&cut, lines[..=k].join("\n") + "\n").unwrap();
            let prefix = journal::read(&cut).unwrap();
            prop_assert_eq!(&journal::fold(&prefix.records).unwrap(), expected, "cut after line {}", k + 1);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Compacting the journal anywhere changes nothing a reader folds from it:
    /// the same state and the same correction history as a journal never
    /// compacted, and the records after it follow on.
    #[test]
    fn a_compacted_journal_folds_like_the_whole_one(
        batches in prop::collection::vec(prop::collection::vec(event(), 1..4), 1..10),
        at in any::<prop::sample::Index>(),
    ) {
        let whole_env = TestEnv::new();
        let compacted_env = TestEnv::new();
        let whole_path = whole_env.write("fold.yaml", STATE);
        let compacted_path = compacted_env.write("fold.yaml", STATE);
        let (mut whole, mut compacted) = (whole_env.store(&whole_path), compacted_env.store(&compacted_path));
        let (mut whole_state, _) = whole.open().unwrap();
        let (mut compacted_state, _) = compacted.open().unwrap();
        let cut = at.index(batches.len());
        for (i, batch) in batches.into_iter().enumerate() {
            whole.commit(&mut whole_state, batch.clone()).unwrap();
            compacted.commit(&mut compacted_state, batch).unwrap();
            if i == cut {
                let done = compacted.compact(&mut compacted_state).unwrap();
                let folded = matches!(done, aot::store::Compacted::Done(_));
                prop_assert!(folded, "{:?}", done);
            }
        }
        let whole_records = journal::read(&journal::path_for(&whole_path)).unwrap().records;
        let compacted_records = journal::read(&journal::path_for(&compacted_path)).unwrap().records;
        let starts_compacted = matches!(compacted_records[0].event, Event::Compacted { .. });
        prop_assert!(starts_compacted);
        prop_assert!(compacted_records.len() < whole_records.len());
        prop_assert_eq!(&compacted_state, &whole_state);
        prop_assert_eq!(journal::fold(&compacted_records), Some(whole_state.clone()));
        prop_assert_eq!(
            journal::History::of(&compacted_records),
            journal::History::of(&whole_records)
        );
        // A store opening the compacted pair finds nothing to recover or merge.
        let mut reopen = compacted_env.store(&compacted_path);
        let (reopened, notices) = reopen.open().unwrap();
        prop_assert_eq!(&reopened, &whole_state);
        prop_assert!(notices.is_empty(), "{:?}", notices);
    }
}

/// The user-owned parts as edited: the same atoms, one more, or a changed choice.
fn user_edited() -> impl Strategy<Value = Event> {
    prop::sample::select(vec![0usize, 1, 2]).prop_map(|variant| {
        let mut state = document::parse("fold.yaml", STATE, document::Format::Yaml).unwrap();
        match variant {
            1 => {
                state.graph.atoms.insert(
                    "d".into(),
                    Atom {
                        deps: vec!["a".into()],
                        ..Atom::command("true")
                    },
                );
            }
            2 => {
                if let Some(pick) = state.graph.atoms.get_mut("pick") {
                    pick.or = Some(vec!["c".into(), "b".into()]);
                }
            }
            _ => {}
        }
        Event::user_edited(&state)
    })
}

fn any_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        8 => event(),
        1 => user_edited(),
        1 => Just(Event::snapshot(&document::parse("fold.yaml", STATE, document::Format::Yaml).unwrap())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// The one fold: the work graph kept up to date effect by effect is the
    /// graph built afresh from the state file folded from the same records.
    #[test]
    fn the_graph_folded_incrementally_equals_the_graph_of_the_folded_state(
        events in prop::collection::vec(any_event(), 1..40)
    ) {
        let mut state = document::parse("fold.yaml", STATE, document::Format::Yaml).unwrap();
        let mut graph = WorkGraph::new(&state);
        for (i, event) in events.into_iter().enumerate() {
            let kind = event.kind();
            let record = Record { v: 1, seq: i as u64 + 1, at: Timestamp::from_millis(1_767_225_600_000), event };
            aot::journal::fold::apply_with(&mut state, &mut [&mut graph], &record);
            let rebuilt = WorkGraph::new(&state);
            let ids: Vec<&str> = state.graph.atoms.keys().map(|k| k.as_str()).collect();
            for id in &ids {
                prop_assert_eq!(graph.status(id), rebuilt.status(id), "status of {} after {}", id, kind);
                prop_assert_eq!(graph.is_selected(id), rebuilt.is_selected(id), "selection of {} after {}", id, kind);
                prop_assert_eq!(graph.untried(id), rebuilt.untried(id), "untried of {} after {}", id, kind);
                prop_assert_eq!(Some(state.graph.atoms[*id].status), graph.status(id), "state and graph disagree on {}", id);
            }
            prop_assert_eq!(graph.ready().collect::<Vec<_>>(), rebuilt.ready().collect::<Vec<_>>(), "ready after {}", kind);
            prop_assert_eq!(
                graph.choice_points().collect::<Vec<_>>(),
                rebuilt.choice_points().collect::<Vec<_>>(),
                "choice points after {}", kind
            );
            prop_assert_eq!(graph.variant(), rebuilt.variant(), "variant after {}", kind);
        }
    }
}
