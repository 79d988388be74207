use super::*;
use crate::graph::WorkGraph;
use crate::model::FailureClass;
use crate::state::{BaseCase, Objective};

fn state(atoms: &str) -> StateFile {
    let atoms: IndexMap<AtomId, Atom> = serde_saphyr::from_str(atoms).unwrap();
    StateFile::new(
        Objective {
            goal: Some("g".into()),
            base_case: Some(BaseCase {
                command: "true".into(),
                timeout: None,
            }),
            ..Objective::default()
        },
        atoms,
    )
}

fn proposal(atoms: &str) -> Proposal {
    Proposal {
        atoms: serde_saphyr::from_str(atoms).unwrap(),
        rationale: "edit the function directly".into(),
    }
}

fn at() -> Timestamp {
    Timestamp::from_millis(1_767_225_600_000)
}

#[test]
fn a_sink_becomes_the_next_alternative_of_an_exhausted_or_atom() {
    let before = state(
        "fix: { or: [a, b], status: failed, chosen: b }\na: { run: 'false', status: failed, attempts: 1 }\nb: { run: 'false', status: failed, attempts: 1 }\nprep: { run: 'true', status: solved, attempts: 1 }",
    );
    let grafted = graft(
        &before,
        Some(&"b".into()),
        &proposal("read: { run: 'cat x', deps: [prep] }\npatch: { run: 'sed -i s/a/b/ x', deps: [read] }"),
        1,
        MacroState::ChangeApproach,
        at(),
    )
    .unwrap();
    assert_eq!(grafted.added, ["r1-read", "r1-patch"].map(AtomId::from).to_vec());
    let after = &grafted.state;
    assert_eq!(
        after.graph.atoms["fix"].or.as_deref(),
        Some(["a", "b", "r1-patch"].map(AtomId::from).as_slice())
    );
    assert_eq!(
        after.graph.atoms["r1-patch"].deps,
        ["r1-read"].map(AtomId::from).to_vec()
    );
    assert_eq!(
        after.graph.atoms["r1-read"].deps,
        ["prep"].map(AtomId::from).to_vec(),
        "a solved atom is built on"
    );
    let planned = after.graph.atoms["r1-patch"].planned.as_ref().unwrap();
    assert_eq!((planned.replan, planned.directive), (1, MacroState::ChangeApproach));
    assert_eq!(planned.answers.as_deref(), Some("b"));
    assert_eq!(
        after.graph.atoms["fix"].status,
        AtomStatus::Pending,
        "the OR atom is open again"
    );
    let graph = WorkGraph::new(after);
    assert_eq!(graph.untried("fix"), ["r1-patch"]);
    assert!(matches!(grafted.events[0], Event::Replanned { .. }));
    assert!(matches!(grafted.events[1], Event::UserEdited { .. }));
}

#[test]
fn a_failed_atom_without_alternatives_is_wrapped_and_its_dependents_wait_for_the_sink() {
    let before = state("build: { run: 'make', status: failed, attempts: 2 }\nship: { run: 'true', deps: [build] }");
    let grafted = graft(
        &before,
        Some(&"build".into()),
        &proposal("cmake: { run: 'cmake --build .' }"),
        2,
        MacroState::ChangeApproach,
        at(),
    )
    .unwrap();
    let after = &grafted.state;
    assert_eq!(grafted.added, ["build-or", "r2-cmake"].map(AtomId::from).to_vec());
    assert_eq!(
        after.graph.atoms["build-or"].or.as_deref(),
        Some(["build", "r2-cmake"].map(AtomId::from).as_slice())
    );
    assert_eq!(after.graph.atoms["ship"].deps, ["build-or"].map(AtomId::from).to_vec());
    assert_eq!(after.graph.atoms["build-or"].chosen.as_deref(), Some("r2-cmake"));
    assert_eq!(
        after.graph.atoms["build"].status,
        AtomStatus::Failed,
        "the failed atom keeps its record"
    );
    let graph = WorkGraph::new(after);
    assert_eq!(graph.ready().collect::<Vec<_>>(), ["r2-cmake"]);
}

#[test]
fn a_plan_for_the_base_case_adds_a_new_root() {
    let before = state("a: { run: 'true', status: solved, attempts: 1 }");
    let grafted = graft(
        &before,
        None,
        &proposal("fix: { run: 'touch done', deps: [a] }"),
        1,
        MacroState::Refine,
        at(),
    )
    .unwrap();
    let graph = WorkGraph::new(&grafted.state);
    assert_eq!(graph.ready().collect::<Vec<_>>(), ["r1-fix"]);
    assert!(graph.roots().any(|r| r == "r1-fix"));
}

#[test]
fn what_cannot_be_grafted_is_refused_with_every_reason() {
    let before = state(
        "x: { run: 'false', status: failed, attempts: 1 }\ny: { run: 'true' }\nz: { run: 'true', status: solved, attempts: 1 }",
    );
    let refused = |plan: &str| {
        graft(
            &before,
            Some(&"x".into()),
            &proposal(plan),
            1,
            MacroState::ChangePath,
            at(),
        )
        .unwrap_err()
    };
    let reasons = refused("a: { run: 'true', deps: [x] }");
    assert!(reasons[0].contains("`x`, which is failed"), "{reasons:?}");
    let reasons = refused("a: { run: 'true', deps: [nowhere] }");
    assert!(reasons[0].contains("neither in the plan nor solved"), "{reasons:?}");
    let reasons = refused("a: { run: 'true' }\nb: { run: 'true' }");
    assert!(
        reasons[0].contains("exactly one sink") && reasons[0].contains("2"),
        "{reasons:?}"
    );
    let reasons = refused("'a b': { run: 'true' }");
    assert!(reasons[0].contains("not a usable name"), "{reasons:?}");
    let reasons =
        refused("a: { run: 'true', deps: [b] }\nb: { run: 'true', deps: [a] }\nc: { run: 'true', deps: [a] }");
    assert!(!reasons.is_empty());
    assert!(
        graft(
            &before,
            Some(&"x".into()),
            &Proposal::default(),
            1,
            MacroState::ChangePath,
            at()
        )
        .is_err()
    );
    // Solved work is built on: fine.
    assert!(
        graft(
            &before,
            Some(&"x".into()),
            &proposal("a: { run: 'true', deps: [z] }"),
            1,
            MacroState::ChangePath,
            at()
        )
        .is_ok()
    );
    let _ = FailureClass::Logical;
}

#[test]
fn ids_given_in_one_plan_never_collide() {
    let before =
        state("r1-a: { run: 'true', status: solved, attempts: 1 }\nx: { run: 'false', status: failed, attempts: 1 }");
    let grafted = graft(
        &before,
        Some(&"x".into()),
        &proposal("a: { run: 'true' }\na-2: { run: 'true', deps: [a] }"),
        1,
        MacroState::ChangePath,
        at(),
    )
    .expect("two names, two ids");
    let mut ids = grafted.added.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), grafted.added.len(), "{:?}", grafted.added);
}
