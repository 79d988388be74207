//! The AND/OR work graph's read-only views: which atoms are on the selected
//! branches, which are solved, which are ready to run, and which OR atoms still
//! wait for a choice. Pure functions over the state.

use std::collections::{HashMap, HashSet};

use crate::state::{Atom, AtomId, AtomStatus, StateFile};

/// Returns the atoms no other atom refers to (through `deps` or `or`): the
/// graph's goals, in file order.
pub fn roots(state: &StateFile) -> Vec<&str> {
    let referenced: HashSet<&str> = state
        .graph
        .atoms
        .values()
        .flat_map(|a| a.deps.iter().chain(a.or.iter().flatten()))
        .map(String::as_str)
        .collect();
    state
        .graph
        .atoms
        .keys()
        .map(String::as_str)
        .filter(|id| !referenced.contains(id))
        .collect()
}

/// Returns the atoms on the selected branches: reachable from the roots through
/// `deps` and through each OR atom's chosen alternative only.
pub fn selected(state: &StateFile) -> HashSet<&str> {
    let atoms = &state.graph.atoms;
    let mut seen = HashSet::new();
    let mut stack = roots(state);
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let Some(atom) = atoms.get(id) else { continue };
        stack.extend(atom.deps.iter().map(String::as_str));
        if let Some(chosen) = &atom.chosen {
            stack.push(chosen.as_str());
        }
    }
    seen
}

/// Returns whether an atom is solved; an OR atom is solved when its chosen
/// alternative is.
pub fn is_solved(atoms: &indexmap::IndexMap<AtomId, Atom>, id: &str) -> bool {
    let mut current = id;
    // Bounded by the number of atoms: alternatives never form a cycle in a valid file.
    for _ in 0..=atoms.len() {
        let Some(atom) = atoms.get(current) else { return false };
        if atom.status == AtomStatus::Solved {
            return true;
        }
        match (&atom.or, &atom.chosen) {
            (Some(_), Some(chosen)) => current = chosen,
            _ => return false,
        }
    }
    false
}

/// Returns the atoms ready to run, in file order: pending, on a selected branch,
/// with something to run, and every dependency solved.
pub fn ready(state: &StateFile) -> Vec<&str> {
    let atoms = &state.graph.atoms;
    let selected = selected(state);
    atoms
        .iter()
        .filter(|(id, atom)| {
            atom.status == AtomStatus::Pending
                && atom.or.is_none()
                && selected.contains(id.as_str())
                && atom.deps.iter().all(|d| is_solved(atoms, d))
        })
        .map(|(id, _)| id.as_str())
        .collect()
}

/// Returns the OR atoms on a selected branch that have no alternative chosen yet.
pub fn choice_points(state: &StateFile) -> Vec<&str> {
    let selected = selected(state);
    state
        .graph
        .atoms
        .iter()
        .filter(|(id, atom)| atom.or.is_some() && atom.chosen.is_none() && selected.contains(id.as_str()))
        .map(|(id, _)| id.as_str())
        .collect()
}

/// Returns how many atoms have each status.
pub fn counts(state: &StateFile) -> HashMap<AtomStatus, usize> {
    let mut counts = HashMap::new();
    for atom in state.graph.atoms.values() {
        *counts.entry(atom.status).or_insert(0) += 1;
    }
    counts
}
