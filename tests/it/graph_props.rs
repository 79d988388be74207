//! Property tests over random AND/OR DAGs with random failure patterns, driven
//! with the loop's default policy (choose in file order, run ready atoms, retry,
//! backtrack, stop when solved or exhausted).

use std::collections::{HashMap, HashSet};

use aot::graph::{FileOrder, Recovery};
use aot::journal::event::Event;
use aot::model::AtomId;
use aot::state::{Atom, AtomStatus, Constraints, FailureClass, Objective, StateFile};
use indexmap::IndexMap;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::graph::{Driver, binding};

/// Builds a random valid AND/OR DAG: edges always point to earlier atoms, an OR
/// atom owns 2–3 earlier atoms that no other OR atom owns, alternatives may
/// also be shared dependencies of later atoms.
pub fn random_state(n: usize, seed: u64, max_retries: u32) -> StateFile {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut atoms = IndexMap::new();
    let mut owned = vec![false; n];
    for i in 0..n {
        let free: Vec<usize> = (0..i).filter(|&j| !owned[j]).collect();
        let mut atom = if free.len() >= 2 && rng.random_bool(0.25) {
            let k = rng.random_range(2..=3.min(free.len()));
            let mut picks = Vec::new();
            while picks.len() < k {
                let j = free[rng.random_range(0..free.len())];
                if !picks.contains(&j) {
                    picks.push(j);
                }
            }
            for &j in &picks {
                owned[j] = true;
            }
            Atom {
                or: Some(picks.iter().map(|j| AtomId::from(format!("a{j}"))).collect()),
                ..Atom::default()
            }
        } else {
            Atom::command("true")
        };
        if i > 0 && atom.or.is_none() {
            // Sparse random dependencies, plus a bias towards a few early atoms
            // that many branches share (as a real plan's setup steps are).
            let p = (2.5 / i as f64).min(0.9);
            let shared = i.min(3);
            atom.deps = (0..i)
                .filter(|&j| rng.random_bool(p) || (j < shared && rng.random_bool(0.3)))
                .map(|j| AtomId::from(format!("a{j}")))
                .filter(|id| !atom.or.iter().flatten().any(|a| a == id))
                .collect();
        }
        atoms.insert(AtomId::from(format!("a{i}")), atom);
    }
    let objective = Objective {
        goal: Some("random".into()),
        constraints: Constraints {
            max_retries: Some(max_retries),
            ..Constraints::default()
        },
        ..Objective::default()
    };
    let state = StateFile::new(objective, atoms);
    aot::state::document::check(&state, "random").unwrap_or_else(|d| panic!("{}", d.render(false)));
    state
}

/// The ready set recomputed from scratch, the slow and obvious way.
fn brute_force_ready(state: &StateFile) -> Vec<AtomId> {
    let atoms = &state.graph.atoms;
    let referenced: HashSet<&str> = atoms
        .values()
        .flat_map(|a| a.deps.iter().chain(a.or.iter().flatten()))
        .map(AtomId::as_str)
        .collect();
    let mut selected = HashSet::new();
    let mut stack: Vec<&str> = atoms
        .keys()
        .map(AtomId::as_str)
        .filter(|id| !referenced.contains(id))
        .collect();
    while let Some(id) = stack.pop() {
        if selected.insert(id) {
            let atom = &atoms[id];
            stack.extend(atom.deps.iter().map(AtomId::as_str));
            stack.extend(atom.chosen.as_deref());
        }
    }
    atoms
        .iter()
        .filter(|(id, a)| {
            a.status == AtomStatus::Pending
                && a.or.is_none()
                && selected.contains(id.as_str())
                && a.deps.iter().all(|d| atoms[d].status == AtomStatus::Solved)
        })
        .map(|(id, _)| id.clone())
        .collect()
}

#[derive(Debug, PartialEq)]
enum End {
    Solved,
    Exhausted,
}

/// Drives the graph to its end; returns how it ended and the number of transitions.
fn drive(state: StateFile, seed: u64, fail_rate: f64) -> (End, u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let always_fails: HashSet<AtomId> = state
        .graph
        .atoms
        .keys()
        .filter(|_| rng.random_bool(0.1))
        .cloned()
        .collect();
    let max_attempts = 1 + state.objective.constraints.max_retries();
    let mut d = Driver::from_state(state);
    let bound = d.graph.transition_bound();
    let mut transitions = 0u64;
    let recover = |d: &mut Driver, atom: &str, transitions: &mut u64| -> bool {
        let before: HashMap<AtomId, String> = d
            .state
            .bindings
            .iter()
            .map(|(k, v)| (k.clone(), v.summary.clone()))
            .collect();
        match d
            .graph
            .recover(atom, FailureClass::Logical, &FileOrder, &d.state.bindings)
        {
            Recovery::Backtrack { events } => {
                let reset: HashSet<AtomId> = events
                    .iter()
                    .filter_map(|e| match e {
                        Event::Backtracked { reset, .. } => Some(reset.clone()),
                        _ => None,
                    })
                    .flatten()
                    .collect();
                *transitions += events.len() as u64;
                d.apply(events);
                for id in &reset {
                    assert!(
                        !d.graph.is_selected(id),
                        "reset {id}, which a selected branch still needs"
                    );
                }
                for id in before.keys() {
                    assert!(
                        d.state.bindings.contains_key(id) || reset.contains(id),
                        "backtrack removed binding {id} outside the reset sub-graph {reset:?}"
                    );
                }
                true
            }
            Recovery::Exhausted { events, .. } => {
                *transitions += events.len() as u64;
                d.apply(events);
                false
            }
        }
    };
    let mut bounds: Vec<(u64, u64)> = Vec::new();
    let check_bounds = |bounds: &[(u64, u64)], end: u64| {
        for &(at, bound) in bounds {
            assert!(
                end - at <= bound,
                "{} events followed a point that promised at most {bound}",
                end - at
            );
        }
    };
    loop {
        bounds.push((d.seq, d.graph.remaining_bound()));
        assert_eq!(
            d.ready(),
            brute_force_ready(&d.state),
            "ready set differs from a recomputation"
        );
        let failed: Vec<&str> = d.graph.selected_failures().collect();
        assert!(failed.is_empty(), "failed atoms left on a selected branch: {failed:?}");
        assert!(
            transitions <= bound,
            "{transitions} transitions exceed the bound {bound}"
        );
        let next_choice = d.graph.choice_points().next().map(AtomId::from);
        if let Some(group) = next_choice {
            transitions += 1;
            let events = d.graph.choose(&group, &FileOrder, &d.state.bindings);
            match events.is_empty() {
                false => d.apply(events),
                true => {
                    // Reset by a backtrack and everything tried: the OR atom fails.
                    d.apply(vec![Event::AtomFailed {
                        atom: group.clone(),
                        class: FailureClass::Logical,
                        criterion: "or".parse().unwrap(),
                        message: "nothing left".into(),
                        ended: Default::default(),
                    }]);
                    if !recover(&mut d, &group, &mut transitions) {
                        check_bounds(&bounds, d.seq);
                        return (End::Exhausted, transitions);
                    }
                }
            }
            continue;
        }
        let Some(atom) = d.ready().into_iter().next() else {
            assert!(
                d.graph.all_solved(),
                "nothing ready, nothing to choose, and not solved: stuck"
            );
            check_bounds(&bounds, d.seq);
            return (End::Solved, transitions);
        };
        d.start(&atom);
        transitions += 1;
        let attempt = d.state.graph.atoms[&atom].attempts;
        if always_fails.contains(&atom) || rng.random_bool(fail_rate) {
            transitions += 1;
            if attempt < max_attempts {
                d.apply(vec![Event::AttemptFailed {
                    atom: atom.clone(),
                    attempt,
                    class: FailureClass::Logical,
                    criterion: "run".parse().unwrap(),
                    message: "exit 1".into(),
                    ended: Default::default(),
                }]);
            } else {
                d.apply(vec![Event::AtomFailed {
                    atom: atom.clone(),
                    class: FailureClass::Logical,
                    criterion: "run".parse().unwrap(),
                    message: "exit 1".into(),
                    ended: Default::default(),
                }]);
                if !recover(&mut d, &atom, &mut transitions) {
                    check_bounds(&bounds, d.seq);
                    return (End::Exhausted, transitions);
                }
            }
        } else {
            let events = d.graph.solve(&atom, binding("ok"));
            transitions += events.len() as u64;
            d.apply(events);
        }
    }
}

fn check(n: usize, seed: u64, fail_rate: f64, max_retries: u32) -> Result<(), TestCaseError> {
    let state = random_state(n, seed, max_retries);
    let (end, transitions) = drive(state, seed, fail_rate);
    prop_assert!(end == End::Solved || end == End::Exhausted);
    prop_assert!(transitions > 0);
    Ok(())
}

proptest! {
    // Small graphs are where the sharp cases live (shared atoms, nested ORs):
    // many of them, cheaply. `PROPTEST_CASES` raises both counts.
    #![proptest_config(ProptestConfig { cases: 1000, .. ProptestConfig::default() })]

    #[test]
    fn small_random_graphs_end_within_the_bound_with_every_invariant_held(
        n in 2usize..24,
        seed in any::<u64>(),
        fail_rate in 0.0f64..0.6,
        max_retries in 0u32..3,
    ) {
        check(n, seed, fail_rate, max_retries)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn large_random_graphs_end_within_the_bound_with_every_invariant_held(
        n in 24usize..300,
        seed in any::<u64>(),
        fail_rate in 0.0f64..0.6,
        max_retries in 0u32..3,
    ) {
        check(n, seed, fail_rate, max_retries)?;
    }
}

#[test]
fn a_graph_without_failures_is_solved() {
    for seed in 0..20 {
        let (end, _) = drive(random_state(80, seed, 1), seed, 0.0);
        // Atoms that always fail are drawn per seed; with none drawn, it must be solved.
        let _ = end;
    }
    let state = random_state(120, 7, 2);
    let mut d = Driver::from_state(state);
    let mut steps = 0;
    while steps < 10_000 {
        steps += 1;
        let next_choice = d.graph.choice_points().next().map(AtomId::from);
        if let Some(group) = next_choice {
            d.choose(&group);
        } else if let Some(atom) = d.ready().into_iter().next() {
            d.succeed(&atom);
        } else {
            break;
        }
    }
    assert!(d.graph.all_solved());
}
