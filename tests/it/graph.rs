//! The work graph's rules, one scenario each: readiness, OR choice through the
//! ordering hook, contraction, backtracking, exhaustion, and the variant.

use aot::graph::{ChoiceOrder, FileOrder, Ranked, Ranking, Recovery, Variant, WorkGraph};
use aot::journal::event::{Event, Record};
use aot::model::AtomId;
use aot::state::document::{self, Format};
use aot::state::{AtomStatus, FailureClass, StateFile};

pub use crate::common::binding;
use aot::model::time::Timestamp;

/// A state and its graph, advanced together by events, checking on every
/// engine transition that the variant strictly decreases and that the
/// incrementally maintained graph equals one rebuilt from the state.
pub struct Driver {
    pub state: StateFile,
    pub graph: WorkGraph,
    pub seq: u64,
}

impl Driver {
    pub fn new(yaml: &str) -> Self {
        let state = document::parse("test.yaml", yaml, Format::Yaml).unwrap_or_else(|d| panic!("{}", d.render(false)));
        Self::from_state(state)
    }

    pub fn from_state(state: StateFile) -> Self {
        let graph = WorkGraph::new(&state);
        Self { state, graph, seq: 0 }
    }

    pub fn apply(&mut self, events: Vec<Event>) {
        for event in events {
            if std::env::var_os("AOT_TRACE").is_some() {
                eprintln!("  {event:?}");
            }
            let before = self.graph.variant();
            let subject = match &event {
                Event::AtomSolved { atom, .. } | Event::AtomFailed { atom, .. } | Event::AtomStarted { atom, .. } => {
                    self.graph.status(atom)
                }
                _ => None,
            };
            self.seq += 1;
            let record = Record {
                v: 1,
                seq: self.seq,
                at: Timestamp::from_millis(1_767_225_600_000 + self.seq),
                event,
            };
            aot::journal::fold::apply_with(&mut self.state, &mut [&mut self.graph], &record);
            let after = self.graph.variant();
            assert!(
                after < before,
                "{} did not decrease the variant: {before:?} -> {after:?} (its atom was {subject:?})",
                record.event.kind()
            );
            self.assert_consistent();
        }
    }

    pub fn assert_consistent(&self) {
        let rebuilt = WorkGraph::new(&self.state);
        assert_eq!(
            self.graph.ready().collect::<Vec<_>>(),
            rebuilt.ready().collect::<Vec<_>>(),
            "ready set drifted"
        );
        assert_eq!(
            self.graph.choice_points().collect::<Vec<_>>(),
            rebuilt.choice_points().collect::<Vec<_>>(),
            "choice points drifted"
        );
        assert_eq!(self.graph.variant(), rebuilt.variant(), "variant drifted");
    }

    pub fn ready(&self) -> Vec<AtomId> {
        self.graph.ready().map(AtomId::from).collect()
    }

    pub fn start(&mut self, atom: &str) {
        let attempt = self.state.graph.atoms[atom].attempts + 1;
        self.apply(vec![Event::AtomStarted {
            atom: atom.into(),
            attempt,
        }]);
    }

    pub fn succeed(&mut self, atom: &str) {
        self.start(atom);
        let events = self.graph.solve(atom, binding(&format!("{atom} ok")));
        self.apply(events);
    }

    /// Starts and fails an atom for good, then applies the recovery plan.
    pub fn fail(&mut self, atom: &str) -> Recovery {
        self.start(atom);
        self.apply(vec![Event::AtomFailed {
            atom: atom.into(),
            class: FailureClass::Logical,
            criterion: "run".parse().unwrap(),
            message: "exit 1".into(),
            ended: Default::default(),
        }]);
        let recovery = self
            .graph
            .recover(atom, FailureClass::Logical, &FileOrder, &self.state.bindings);
        match &recovery {
            Recovery::Backtrack { events } | Recovery::Exhausted { events, .. } => self.apply(events.clone()),
        }
        recovery
    }

    pub fn choose(&mut self, group: &str) -> Event {
        let events = self.graph.choose(group, &FileOrder, &self.state.bindings);
        assert!(!events.is_empty(), "an alternative to choose");
        self.apply(events.clone());
        events[0].clone()
    }
}

const HEAD: &str = "version: 1\nobjective:\n  goal: g\n  base_case: { command: 'true' }\n";

fn driver(atoms: &str) -> Driver {
    Driver::new(&format!("{HEAD}graph:\n  atoms:\n{atoms}"))
}

#[test]
fn an_atom_is_ready_once_every_dependency_is_solved() {
    let mut d = driver(
        "    prepare: { run: 'true' }\n    left: { run: 'true', deps: [prepare] }\n    right: { run: 'true', deps: [prepare] }\n    join: { run: 'true', deps: [left, right] }\n",
    );
    assert_eq!(d.ready(), ["prepare"]);
    d.succeed("prepare");
    assert_eq!(d.ready(), ["left", "right"]);
    d.succeed("left");
    assert_eq!(d.ready(), ["right"], "join still waits for right");
    d.succeed("right");
    assert_eq!(d.ready(), ["join"]);
    d.succeed("join");
    assert!(d.graph.all_solved());
    assert!(d.ready().is_empty());
}

#[test]
fn a_running_atom_is_not_ready_and_a_retry_makes_it_ready_again() {
    let mut d = driver("    a: { run: 'true' }\n");
    d.start("a");
    assert!(d.ready().is_empty());
    d.apply(vec![Event::AttemptFailed {
        atom: "a".into(),
        attempt: 1,
        class: FailureClass::Logical,
        criterion: "run".parse().unwrap(),
        message: "exit 1".into(),
        ended: Default::default(),
    }]);
    assert_eq!(d.ready(), ["a"]);
}

#[test]
fn alternatives_wait_for_a_choice_and_the_choice_is_a_trail_entry() {
    let mut d = driver(
        "    setup: { run: 'true' }\n    config: { or: [remote, local] }\n    remote: { run: 'true', deps: [setup] }\n    local: { run: 'true', deps: [setup] }\n    report: { run: 'true', deps: [config] }\n",
    );
    assert!(d.ready().is_empty(), "nothing is selected below an unchosen OR atom");
    assert_eq!(d.graph.choice_points().collect::<Vec<_>>(), ["config"]);
    let event = d.choose("config");
    assert_eq!(
        event,
        Event::OrChosen {
            group: "config".into(),
            chosen: "remote".into(),
            remaining: vec!["local".into()],
            reason: "first untried alternative in file order".into(),
        }
    );
    assert_eq!(d.ready(), ["setup"]);
    assert!(!d.graph.is_selected("local"));
    assert!(
        matches!(d.state.trail.last(), Some(aot::state::TrailEntry::OrChoice { chosen, .. }) if chosen == "remote")
    );
}

#[test]
fn solving_the_chosen_alternative_solves_its_or_atom_with_the_same_binding() {
    let mut d = driver(
        "    pick: { or: [a, b] }\n    a: { run: 'true' }\n    b: { run: 'true' }\n    after: { run: 'true', deps: [pick] }\n",
    );
    d.choose("pick");
    let events = d.graph.solve("a", binding("a ok"));
    assert_eq!(
        events.iter().map(Event::kind).collect::<Vec<_>>(),
        ["atom_solved", "atom_solved"]
    );
    d.start("a");
    d.apply(events);
    assert_eq!(d.state.bindings["pick"].summary, "a ok");
    assert_eq!(d.ready(), ["after"]);
}

#[test]
fn a_failed_alternative_backtracks_to_the_next_keeping_shared_bindings() {
    let mut d = driver(
        "    setup: { run: 'true' }\n    config: { or: [remote, local] }\n    remote: { run: 'true', deps: [setup] }\n    local: { run: 'true', deps: [setup] }\n",
    );
    d.choose("config");
    d.succeed("setup");
    let recovery = d.fail("remote");
    assert_eq!(
        recovery,
        Recovery::Backtrack {
            events: vec![Event::Backtracked {
                group: "config".into(),
                from: "remote".into(),
                to: "local".into(),
                reset: vec![],
            }]
        }
    );
    assert_eq!(
        d.state.bindings["setup"].summary, "setup ok",
        "setup is shared: its binding stays"
    );
    assert_eq!(d.state.graph.atoms["remote"].status, AtomStatus::Failed);
    assert_eq!(d.ready(), ["local"]);
    d.succeed("local");
    assert!(d.graph.all_solved());
}

#[test]
fn backtracking_resets_only_what_the_abandoned_alternative_owned() {
    let mut d = driver(
        "    shared: { run: 'true' }\n    pick: { or: [a, b] }\n    a-prep: { run: 'true', deps: [shared] }\n    a: { run: 'true', deps: [a-prep] }\n    b: { run: 'true', deps: [shared] }\n",
    );
    d.choose("pick");
    d.succeed("shared");
    d.succeed("a-prep");
    let Recovery::Backtrack { events } = d.fail("a") else {
        panic!("expected a backtrack")
    };
    let Event::Backtracked { reset, .. } = &events[0] else {
        panic!()
    };
    assert_eq!(reset, &["a-prep"]);
    assert!(!d.state.bindings.contains_key("a-prep"), "a-prep belonged to a alone");
    assert!(d.state.bindings.contains_key("shared"));
    assert_eq!(d.ready(), ["b"]);
}

#[test]
fn a_pruned_branch_is_abandoned_when_a_descendant_fails() {
    let mut d = driver(
        "    pick: { or: [a, b] }\n    a: { run: 'true', deps: [a-dep] }\n    a-dep: { run: 'true' }\n    b: { run: 'true' }\n",
    );
    d.choose("pick");
    d.fail("a-dep");
    assert_eq!(
        d.state.graph.atoms["a"].status,
        AtomStatus::Pruned,
        "the abandoned alternative is pruned"
    );
    assert_eq!(
        d.state.graph.atoms["a-dep"].status,
        AtomStatus::Failed,
        "what failed stays failed"
    );
    assert_eq!(d.ready(), ["b"]);
}

#[test]
fn when_every_alternative_failed_the_graph_is_exhausted_naming_what_was_tried() {
    let mut d = driver("    pick: { or: [a, b] }\n    a: { run: 'true' }\n    b: { run: 'true' }\n");
    d.choose("pick");
    d.fail("a");
    let recovery = d.fail("b");
    let Recovery::Exhausted { atom, tried, events } = recovery else {
        panic!("expected exhaustion")
    };
    assert_eq!(atom, "b");
    assert_eq!(tried, ["pick: a, b"]);
    assert_eq!(events.iter().map(Event::kind).collect::<Vec<_>>(), ["atom_failed"]);
    assert_eq!(d.state.graph.atoms["pick"].status, AtomStatus::Failed);
}

#[test]
fn a_failure_outside_any_or_atom_is_exhausted_at_once() {
    let mut d = driver("    a: { run: 'true' }\n    b: { run: 'true', deps: [a] }\n");
    let Recovery::Exhausted { atom, tried, .. } = d.fail("a") else {
        panic!()
    };
    assert_eq!((atom.as_str(), tried.len()), ("a", 0));
}

#[test]
fn an_exhausted_inner_or_backtracks_the_outer_one() {
    let mut d = driver(
        "    outer: { or: [x, y] }\n    x: { run: 'true', deps: [inner] }\n    inner: { or: [i1, i2] }\n    i1: { run: 'true' }\n    i2: { run: 'true' }\n    y: { run: 'true' }\n",
    );
    d.choose("outer");
    d.choose("inner");
    d.fail("i1");
    assert_eq!(d.ready(), ["i2"], "the inner OR switches first: it is nearest");
    let Recovery::Backtrack { events } = d.fail("i2") else {
        panic!()
    };
    assert_eq!(
        events.iter().map(Event::kind).collect::<Vec<_>>(),
        ["atom_failed", "backtracked"]
    );
    assert_eq!(d.state.graph.atoms["inner"].status, AtomStatus::Failed);
    assert_eq!(d.ready(), ["y"]);
}

#[test]
fn switching_an_or_that_cannot_escape_the_failure_is_not_a_backtrack() {
    // `needed` is required by the root directly, so switching `pick` cannot help.
    let mut d = driver(
        "    root: { run: 'true', deps: [needed, pick] }\n    needed: { run: 'true' }\n    pick: { or: [a, b] }\n    a: { run: 'true', deps: [needed] }\n    b: { run: 'true' }\n",
    );
    d.choose("pick");
    let recovery = d.fail("needed");
    assert!(
        matches!(recovery, Recovery::Exhausted { ref atom, .. } if atom == "needed"),
        "{recovery:?}"
    );
}

#[test]
fn a_failed_action_is_never_chosen_again() {
    let mut d = driver("    pick: { or: [a, b] }\n    a: { run: 'true' }\n    b: { run: 'true' }\n");
    d.choose("pick");
    d.fail("a");
    assert_eq!(
        d.graph.untried("pick"),
        Vec::<&str>::new(),
        "a is failed and b is chosen"
    );
}

struct Reverse;

impl ChoiceOrder for Reverse {
    fn rank(&self, _: &WorkGraph, _: &str, candidates: &[&str]) -> Ranking {
        let ranked = candidates
            .iter()
            .rev()
            .filter(|c| **c != "blocked-tool")
            .map(|c| Ranked {
                last_resort: false,
                id: AtomId::from(*c),
                reason: "preferred by memory".into(),
            })
            .collect();
        Ranking {
            ranked,
            calibration: None,
        }
    }
}

#[test]
fn the_ordering_hook_ranks_and_filters_alternatives() {
    let d = driver(
        "    pick: { or: [a, b, blocked-tool] }\n    a: { run: 'true' }\n    b: { run: 'true' }\n    blocked-tool: { run: 'true' }\n",
    );
    let events = d.graph.choose("pick", &Reverse, &d.state.bindings);
    assert_eq!(
        events[0],
        Event::OrChosen {
            group: "pick".into(),
            chosen: "b".into(),
            remaining: vec!["a".into()],
            reason: "preferred by memory".into(),
        }
    );
    struct Nothing;
    impl ChoiceOrder for Nothing {
        fn rank(&self, _: &WorkGraph, _: &str, _: &[&str]) -> Ranking {
            Ranking::default()
        }
    }
    assert_eq!(d.graph.choose("pick", &Nothing, &d.state.bindings), Vec::<Event>::new());
}

#[test]
fn the_variant_orders_choices_before_work() {
    let small = Variant { untried: 1, work: 1000 };
    let large = Variant { untried: 2, work: 0 };
    assert!(
        small < large,
        "consuming an alternative outweighs any amount of reset work"
    );
}

#[test]
fn a_graph_built_from_a_saved_state_continues_where_it_was() {
    let mut d = driver("    pick: { or: [a, b] }\n    a: { run: 'true' }\n    b: { run: 'true' }\n");
    d.choose("pick");
    d.fail("a");
    let text = document::to_text(&d.state, Format::Yaml, "").unwrap();
    let reloaded = document::parse("x.yaml", &text, Format::Yaml).unwrap();
    let graph = WorkGraph::new(&reloaded);
    assert_eq!(graph.ready().collect::<Vec<_>>(), ["b"]);
    assert_eq!(
        graph.variant(),
        d.graph.variant(),
        "tried alternatives come back from the trail"
    );
}

/// Found by the fuzzer: a trail naming an alternative that an edit has since
/// taken out of the `or` list counted as tried, and the variant underflowed.
#[test]
fn a_trail_naming_a_removed_alternative_does_not_count_it() {
    let text = r#"version: 1
objective:
  goal: g
  base_case: { command: "true" }
graph:
  atoms:
    patch: { or: [flaky, second], chosen: second }
    first: { run: "true", status: pruned, attempts: 1 }
    flaky: { run: "false", status: failed, attempts: 1 }
    second: { run: "true" }
trail:
  - { type: or_choice, at: "2026-01-01T00:00:00Z", group: patch, chosen: first, remaining: [second], reason: r }
  - { type: backtrack, at: "2026-01-01T00:00:01Z", group: patch, from: first, to: flaky, reset: [] }
  - { type: backtrack, at: "2026-01-01T00:00:02Z", group: patch, from: flaky, to: second, reset: [] }
"#;
    let state = match document::parse("t", text, Format::Yaml) {
        Ok(state) => state,
        Err(d) => panic!("{}", d.render(false)),
    };
    let graph = WorkGraph::new(&state);
    assert_eq!(
        graph.variant().untried,
        0,
        "flaky and second tried; first is no alternative"
    );
    assert!(graph.untried("patch").is_empty());
}
