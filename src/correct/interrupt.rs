//! Which running atoms a correction touches: the Law 1 of interrupts — a
//! change cancels only the work it makes stale. An atom in flight is touched
//! by a change of its own definition (its command, checks, deps…), its
//! removal, a change of anything upstream of it (a definition, an overridden
//! binding), a change of an OR choice it belongs to, a reset or prune of it,
//! or any change of the objective (which touches everything). A constraint
//! change, a new atom elsewhere or an edit of an unrelated atom touches
//! nothing: that work goes on and its result is kept. Pure.

use std::collections::HashSet;

use indexmap::IndexMap;

use crate::journal::event::Event;
use crate::state::{Atom, AtomId, AtomStatus, Objective, StateFile};

/// The running atoms of `before` that `event` (a correction's record, about
/// to be folded into `before`) makes stale, each with why.
pub fn touched(before: &StateFile, event: &Event) -> Vec<(AtomId, String)> {
    // Every record of a run comes through here: the others leave at once.
    if !matches!(
        event,
        Event::Snapshot { .. }
            | Event::UserEdited { .. }
            | Event::BindingOverridden { .. }
            | Event::AtomsReset { .. }
            | Event::AtomsRefined { .. }
            | Event::AtomsPruned { .. }
            | Event::OrChosen { .. }
            | Event::Backtracked { .. }
    ) {
        return Vec::new();
    }
    let running: Vec<&AtomId> = before
        .graph
        .atoms
        .iter()
        .filter(|(_, a)| a.status == AtomStatus::Running)
        .map(|(id, _)| id)
        .collect();
    if running.is_empty() {
        return Vec::new();
    }
    let atoms = &before.graph.atoms;
    let mut out = Vec::new();
    match event {
        Event::Snapshot { .. } => {
            out.extend(
                running
                    .iter()
                    .map(|id| ((*id).clone(), "the file was replaced".to_string())),
            );
        }
        Event::UserEdited {
            objective,
            workers,
            atoms: edited,
            ..
        } => {
            if !same_task(&before.objective, objective) {
                out.extend(
                    running
                        .iter()
                        .map(|id| ((*id).clone(), "the objective changed".to_string())),
                );
                return out;
            }
            let changed: HashSet<&AtomId> = atoms
                .keys()
                .chain(edited.keys())
                .filter(|id| match (atoms.get(id.as_str()), edited.get(id.as_str())) {
                    (Some(old), Some(new)) => old.definition() != new.definition(),
                    _ => true,
                })
                .collect();
            let workers_changed = before.workers != *workers;
            for id in running {
                let why = if !edited.contains_key(id.as_str()) {
                    Some("it was removed".to_string())
                } else if changed.contains(id) {
                    Some("its definition changed".to_string())
                } else if workers_changed && atoms.get(id.as_str()).is_some_and(|a| a.agent.is_some()) {
                    Some("the workers changed".to_string())
                } else {
                    // Upstream in the graph as it was or as it will be.
                    let upstream = upstream(atoms, id).into_iter().chain(upstream(edited, id));
                    let mut upstream: Vec<AtomId> = upstream.filter(|u| changed.contains(u)).collect();
                    upstream.sort();
                    upstream.dedup();
                    let choice = groups_of(atoms, id).into_iter().find(|g| changed.contains(g));
                    match (upstream.first(), choice) {
                        (Some(u), _) => Some(format!("`{u}` upstream changed")),
                        (None, Some(group)) => Some(format!("its choice `{group}` changed")),
                        (None, None) => None,
                    }
                };
                if let Some(why) = why {
                    out.push((id.clone(), why));
                }
            }
        }
        Event::BindingOverridden { atom, .. } => {
            for id in running {
                if id == atom {
                    out.push((id.clone(), "its binding was overridden".to_string()));
                } else if upstream(atoms, id).contains(atom) {
                    out.push((id.clone(), format!("the binding of `{atom}` upstream was overridden")));
                }
            }
        }
        Event::AtomsReset { atoms: reset } | Event::AtomsRefined { atoms: reset } => {
            out.extend(
                running
                    .into_iter()
                    .filter(|id| reset.contains(id))
                    .map(|id| (id.clone(), "it was reset".to_string())),
            );
        }
        Event::AtomsPruned { atoms: pruned } => {
            out.extend(
                running
                    .into_iter()
                    .filter(|id| pruned.contains(id))
                    .map(|id| (id.clone(), "it was pruned".to_string())),
            );
        }
        Event::OrChosen { group, chosen: alt, .. } | Event::Backtracked { group, to: alt, .. } => {
            let reset: &[AtomId] = match event {
                Event::Backtracked { reset, .. } => reset,
                _ => &[],
            };
            for id in running {
                let in_group = groups_of(atoms, id).contains(group);
                let in_chosen = id == alt || upstream(atoms, alt).contains(id);
                if (in_group && !in_chosen) || reset.contains(id) {
                    out.push((id.clone(), format!("its choice `{group}` changed")));
                }
            }
        }
        _ => {}
    }
    out
}

/// Whether two objectives describe the same task: everything but the
/// constraints (which apply to work not yet started) is the same.
fn same_task(a: &Objective, b: &Objective) -> bool {
    let strip = |o: &Objective| Objective {
        constraints: Default::default(),
        ..o.clone()
    };
    strip(a) == strip(b)
}

/// Every atom `id` needs: its deps, the alternatives of an OR atom among
/// them, and theirs, transitively.
fn upstream(atoms: &IndexMap<AtomId, Atom>, id: &str) -> HashSet<AtomId> {
    let mut seen = HashSet::new();
    let mut stack: Vec<&AtomId> = atoms.get(id).map(needs).unwrap_or_default();
    while let Some(next) = stack.pop() {
        if seen.insert(next.clone())
            && let Some(atom) = atoms.get(next.as_str())
        {
            stack.extend(needs(atom));
        }
    }
    seen
}

fn needs(atom: &Atom) -> Vec<&AtomId> {
    atom.deps.iter().chain(atom.or.iter().flatten()).collect()
}

/// The OR atoms whose alternatives (or what they need) include `id`.
fn groups_of(atoms: &IndexMap<AtomId, Atom>, id: &AtomId) -> Vec<AtomId> {
    atoms
        .iter()
        .filter(|(_, a)| {
            a.or.iter()
                .flatten()
                .any(|alt| alt == id || upstream(atoms, alt).contains(id))
        })
        .map(|(g, _)| g.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::document::{Format, parse};

    /// A state with `slow` and `fast` running in parallel, `base` under
    /// `slow`, an OR `pick` over `left`/`right` with `left` running.
    fn state() -> StateFile {
        let text = r#"version: 1
objective:
  goal: g
  base_case: { command: "true" }
graph:
  atoms:
    base: { run: "true", status: solved, attempts: 1 }
    slow: { run: "sleep 9", deps: [base], status: running, attempts: 1 }
    fast: { run: "sleep 1", status: running, attempts: 1 }
    pick: { or: [left, right], chosen: left }
    left: { run: "true", status: running, attempts: 1 }
    right: { run: "true" }
bindings:
  base: { summary: b, at: "2026-01-01T00:00:00Z", attempt: 1 }
"#;
        match parse("t", text, Format::Yaml) {
            Ok(state) => state,
            Err(d) => panic!("{}", d.render(false)),
        }
    }

    fn edited(f: impl FnOnce(&mut StateFile)) -> Event {
        let mut next = state();
        f(&mut next);
        Event::user_edited(&next)
    }

    fn ids(touched: &[(AtomId, String)]) -> Vec<&str> {
        let mut ids: Vec<&str> = touched.iter().map(|(id, _)| id.as_str()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn unrelated_changes_touch_nothing() {
        let s = state();
        let constraint = edited(|n| n.objective.constraints.max_retries = Some(5));
        let added = edited(|n| {
            n.graph.atoms.insert("extra".into(), Atom::command("true".to_string()));
        });
        let other = edited(|n| n.graph.atoms["right"].run = Some("echo other".into()));
        for event in [constraint, added, other] {
            assert_eq!(touched(&s, &event), Vec::new(), "{event:?}");
        }
    }

    #[test]
    fn a_change_touches_its_atom_and_what_is_downstream_of_it() {
        let s = state();
        let own = touched(&s, &edited(|n| n.graph.atoms["fast"].run = Some("sleep 2".into())));
        assert_eq!(own, [("fast".into(), "its definition changed".to_string())]);
        let up = touched(&s, &edited(|n| n.graph.atoms["base"].run = Some("false".into())));
        assert_eq!(up, [("slow".into(), "`base` upstream changed".to_string())]);
        let removed = touched(
            &s,
            &edited(|n| {
                n.graph.atoms.shift_remove("fast");
            }),
        );
        assert_eq!(ids(&removed), ["fast"]);
        let choice = touched(
            &s,
            &edited(|n| n.graph.atoms["pick"].or = Some(vec!["right".into(), "left".into()])),
        );
        assert_eq!(choice, [("left".into(), "its choice `pick` changed".to_string())]);
    }

    #[test]
    fn an_objective_change_or_a_replaced_file_touches_everything() {
        let s = state();
        let goal = touched(&s, &edited(|n| n.objective.goal = Some("another".into())));
        assert_eq!(ids(&goal), ["fast", "left", "slow"]);
        let snapshot = touched(
            &s,
            &Event::Snapshot {
                state: Box::new(state()),
            },
        );
        assert_eq!(ids(&snapshot), ["fast", "left", "slow"]);
    }

    #[test]
    fn an_override_resets_and_choices_touch_only_their_atoms() {
        let s = state();
        let binding = s.bindings["base"].clone();
        let over = touched(
            &s,
            &Event::BindingOverridden {
                atom: "base".into(),
                binding,
            },
        );
        assert_eq!(ids(&over), ["slow"]);
        let reset = touched(
            &s,
            &Event::AtomsReset {
                atoms: vec!["fast".into()],
            },
        );
        assert_eq!(ids(&reset), ["fast"]);
        let chosen = touched(
            &s,
            &Event::OrChosen {
                group: "pick".into(),
                chosen: "right".into(),
                remaining: Vec::new(),
                reason: String::new(),
            },
        );
        assert_eq!(ids(&chosen), ["left"]);
    }
}
