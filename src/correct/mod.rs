//! Corrections: a user's change to a piece of work, applied with the seed's
//! trail rules — an objective change clears the trail; a DAG adjustment (add or
//! remove an atom, force an OR choice) appends `user_correction`; a constraint
//! change keeps the trail; a binding override resets only the overridden
//! atom's dependents. Every correction is recorded in `corrections[]`. Pure:
//! it plans events; the store applies them (exactly once, journal first).

pub mod interrupt;

use crate::graph::WorkGraph;
use crate::journal::event::Event;
use crate::model::time::{Span, Timestamp};
use crate::state::diag::Diagnostics;
use crate::state::{Atom, AtomId, BaseCase, Binding, Correction, CorrectionKind, StateFile, VerifyPolicy};
use crate::steer::Steer;

/// One change asked for by `aot redirect`.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A new goal.
    Goal(String),
    /// A new base-case command.
    BaseCase(String),
    /// A new command atom with its dependencies.
    AddAtom {
        /// Its id.
        id: AtomId,
        /// Its command.
        run: String,
        /// Its dependencies.
        deps: Vec<AtomId>,
    },
    /// An atom removed.
    RemoveAtom(AtomId),
    /// An OR choice forced.
    Choose {
        /// The OR atom.
        group: AtomId,
        /// The alternative.
        alt: AtomId,
    },
    /// An atom re-run: it and what is above it that holds work go back to
    /// pending (an OR atom: its chosen alternative is re-run).
    Reset(AtomId),
    /// A constraint set: `max_iterations`, `max_parallel_agents`, `max_retries`,
    /// `max_replans`, `time_budget`, `verify`, `isolation` or `commit`.
    Set {
        /// The constraint's name.
        key: String,
        /// Its value, as it would be written in the file.
        value: String,
    },
    /// A binding overwritten (the atom counts as solved with this summary).
    Bind {
        /// The atom.
        atom: AtomId,
        /// The summary.
        summary: String,
    },
}

impl Change {
    fn kind(&self) -> CorrectionKind {
        match self {
            Change::Goal(_) | Change::BaseCase(_) => CorrectionKind::ObjectiveChange,
            Change::AddAtom { .. } | Change::RemoveAtom(_) | Change::Choose { .. } | Change::Reset(_) => {
                CorrectionKind::DagAdjustment
            }
            Change::Set { .. } => CorrectionKind::ConstraintChange,
            Change::Bind { .. } => CorrectionKind::BindingsOverride,
        }
    }

    fn describe(&self) -> String {
        match self {
            Change::Goal(goal) => format!("goal set to {goal:?}"),
            Change::BaseCase(command) => format!("base case set to `{command}`"),
            Change::AddAtom { id, run, deps } if deps.is_empty() => format!("atom `{id}` added: `{run}`"),
            Change::AddAtom { id, run, deps } => format!("atom `{id}` added: `{run}` after {}", deps.join(", ")),
            Change::RemoveAtom(id) => format!("atom `{id}` removed"),
            Change::Choose { group, alt } => format!("`{alt}` chosen at `{group}`"),
            Change::Reset(atom) => format!("`{atom}` reset to run again"),
            Change::Set { key, value } => format!("{key} set to {value}"),
            Change::Bind { atom, summary } => format!("binding of `{atom}` set to {summary:?}"),
        }
    }
}

/// Why a redirect was refused (nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The change is not meaningful as asked.
    #[error("{0}")]
    Invalid(String),
    /// The resulting graph would be invalid.
    #[error("the change would leave the graph invalid")]
    Graph(Diagnostics),
}

/// Returns `state` with planned (not yet journaled) events applied.
fn with_events(state: &StateFile, events: &[Event], at: Timestamp) -> StateFile {
    crate::journal::folded(state, events, at)
}

fn set_constraint(state: &mut StateFile, key: &str, value: &str) -> Result<(), Refused> {
    let c = &mut state.objective.constraints;
    let count = |v: &str| {
        v.parse::<u32>()
            .map_err(|_| Refused::Invalid(format!("{key} needs a whole number, got {v:?}")))
    };
    match key {
        "max_iterations" => c.max_iterations = Some(count(value)?),
        "max_parallel_agents" => c.max_parallel_agents = Some(count(value)?),
        "max_retries" => c.max_retries = Some(count(value)?),
        "max_replans" => c.max_replans = Some(count(value)?),
        "time_budget" => c.time_budget = Some(Span::parse(value).map_err(Refused::Invalid)?),
        "max_tokens" => {
            c.max_tokens = Some(
                value
                    .parse::<u64>()
                    .map_err(|_| Refused::Invalid(format!("max_tokens needs a whole number, got {value:?}")))?,
            )
        }
        "max_cost" => {
            let dollars = value
                .trim_start_matches('$')
                .parse::<f64>()
                .ok()
                .filter(|d| d.is_finite() && *d >= 0.0)
                .ok_or_else(|| {
                    Refused::Invalid(format!("max_cost needs an amount in dollars, e.g. 2.50, got {value:?}"))
                })?;
            c.max_cost = Some(dollars);
        }
        "verify" => {
            c.verify = Some(match value {
                "every_iteration" => VerifyPolicy::EveryIteration,
                "when_solved" => VerifyPolicy::WhenSolved,
                other => {
                    return Err(Refused::Invalid(format!(
                        "verify is every_iteration or when_solved, got {other:?}"
                    )));
                }
            })
        }
        "isolation" => {
            c.isolation = Some(match value {
                "git" => crate::state::Isolation::Git,
                "none" => crate::state::Isolation::None,
                other => return Err(Refused::Invalid(format!("isolation is git or none, got {other:?}"))),
            })
        }
        "commit" => {
            c.commit = Some(match value {
                "per_atom" => crate::state::CommitPolicy::PerAtom,
                "none" => crate::state::CommitPolicy::None,
                other => return Err(Refused::Invalid(format!("commit is per_atom or none, got {other:?}"))),
            })
        }
        other => {
            return Err(Refused::Invalid(format!(
                "unknown constraint `{other}`; --set takes max_iterations, max_parallel_agents, max_retries, max_replans, time_budget, max_tokens, max_cost, verify, isolation or commit"
            )));
        }
    }
    Ok(())
}

/// Plans the events that apply `changes` to `state`, most destructive kind
/// first, each kind recorded as one correction. `message` (the user's words)
/// is added to every correction's description.
pub fn plan(
    state: &StateFile,
    changes: &[Change],
    message: Option<&str>,
    at: Timestamp,
) -> Result<Vec<Event>, Refused> {
    if changes.is_empty() {
        return Err(Refused::Invalid(
            "nothing to change: give at least one of the redirect options".into(),
        ));
    }
    let mut next = state.clone();
    for change in changes {
        match change {
            Change::Goal(goal) => next.objective.goal = Some(goal.clone()),
            Change::BaseCase(command) => {
                let timeout = next.objective.base_case.as_ref().and_then(|b| b.timeout);
                next.objective.base_case = Some(BaseCase {
                    command: command.clone(),
                    timeout,
                });
            }
            Change::AddAtom { id, run, deps } => {
                if next.graph.atoms.contains_key(id) {
                    return Err(Refused::Invalid(format!("atom `{id}` already exists")));
                }
                let atom = Atom {
                    deps: deps.clone(),
                    ..Atom::command(run.clone())
                };
                next.graph.atoms.insert(id.clone(), atom);
            }
            Change::RemoveAtom(id) => {
                if next.graph.atoms.shift_remove(id).is_none() {
                    return Err(Refused::Invalid(format!("there is no atom `{id}` to remove")));
                }
            }
            Change::Set { key, value } => set_constraint(&mut next, key, value)?,
            Change::Choose { .. } | Change::Bind { .. } | Change::Reset(_) => {}
        }
    }
    crate::state::document::check(&next, "the redirected state").map_err(Refused::Graph)?;

    let mut events = Vec::new();
    if !next.user_part_eq(state) {
        events.push(Event::user_edited(&next));
    }
    // Plan graph-level changes on the edited graph, in the order of the kinds.
    let after = with_events(state, &events, at);
    let graph = WorkGraph::new(&after);
    // One correction per kind, most destructive first, each after its own events,
    // so that clearing the trail never erases what this redirect adds to it.
    for kind in [
        CorrectionKind::ObjectiveChange,
        CorrectionKind::DagAdjustment,
        CorrectionKind::ConstraintChange,
        CorrectionKind::BindingsOverride,
    ] {
        let of_kind: Vec<&Change> = changes.iter().filter(|c| c.kind() == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let mut description = of_kind.iter().map(|c| c.describe()).collect::<Vec<_>>().join("; ");
        if let Some(message) = message.filter(|m| !m.trim().is_empty()) {
            description.push_str(&format!(" ({message})"));
        }
        let mut correction = Correction {
            at,
            kind,
            description,
            trail_cleared: kind == CorrectionKind::ObjectiveChange,
        };
        // The trail is cleared before a DAG adjustment's entries are added to it.
        if kind == CorrectionKind::ObjectiveChange {
            events.push(Event::CorrectionRecorded {
                correction: correction.clone(),
            });
        }
        for change in of_kind {
            match change {
                Change::Choose { group, alt } => {
                    if after.graph.atoms.get(group).is_none_or(|a| a.or.is_none()) {
                        return Err(Refused::Invalid(match after.graph.atoms.get(group) {
                            Some(_) => format!(
                                "`{group}` is not an OR atom: --choose picks among an `or:` list's alternatives \
                                 (`aot redirect --reset {group}` re-runs it)"
                            ),
                            None => format!("there is no atom `{group}`"),
                        }));
                    }
                    // A choice at a group that failed (or under one) revives it and what is above it.
                    let reopen = graph.reopen_for_choice(group, Some(alt));
                    let reopened = with_events(&after, &reopen, at);
                    let regraph = WorkGraph::new(&reopened);
                    let planned = regraph.force_choice(group, alt, &reopened.bindings).ok_or_else(|| {
                        Refused::Invalid(format!("`{alt}` is not an alternative of OR atom `{group}`"))
                    })?;
                    events.extend(reopen);
                    events.extend(planned);
                    // The user's choice overrides GGS's blocked sets, and says so.
                    let steer = Steer::new(&reopened.graph.atoms, &reopened.run.ggs);
                    let overridden: Vec<(AtomId, String)> = regraph
                        .plan(alt)
                        .into_iter()
                        .filter_map(|id| steer.blocked(id).map(|why| (AtomId::from(id), why)))
                        .collect();
                    if !overridden.is_empty() {
                        let why: Vec<&str> = overridden.iter().map(|(_, why)| why.as_str()).collect();
                        correction
                            .description
                            .push_str(&format!(" (overrides GGS's blocked sets: {})", why.join("; ")));
                        events.push(Event::BlocksOverridden {
                            atoms: overridden.into_iter().map(|(id, _)| id).collect(),
                        });
                    }
                }
                Change::Reset(atom) => {
                    let planned = graph
                        .rerun(atom)
                        .ok_or_else(|| Refused::Invalid(format!("there is no atom `{atom}` to reset")))?;
                    events.extend(planned);
                }
                Change::Bind { atom, summary } => {
                    if !after.graph.atoms.contains_key(atom) {
                        return Err(Refused::Invalid(format!("there is no atom `{atom}` to bind")));
                    }
                    let reset = graph.dependents_with_work(atom);
                    events.push(Event::BindingOverridden {
                        atom: atom.clone(),
                        binding: Binding {
                            summary: summary.clone(),
                            output_tail: String::new(),
                            artifacts: Vec::new(),
                            at,
                            attempt: after.graph.atoms[atom].attempts,
                            changes: None,
                        },
                    });
                    if !reset.is_empty() {
                        events.push(Event::AtomsReset { atoms: reset });
                    }
                }
                _ => {}
            }
        }
        if kind != CorrectionKind::ObjectiveChange {
            events.push(Event::CorrectionRecorded { correction });
        }
    }
    Ok(events)
}

/// Plans reopening the failed OR atoms of `state` that have an untried
/// alternative GGS's blocked sets do not refuse; returns the events and, per
/// reopened atom, `` `group` (`alt` may run now) ``.
fn revive_choices(state: &StateFile) -> (Vec<Event>, Vec<String>) {
    let graph = WorkGraph::new(state);
    let steer = Steer::new(&state.graph.atoms, &state.run.ggs);
    let mut events = Vec::new();
    let mut revived = Vec::new();
    for (id, atom) in &state.graph.atoms {
        if atom.or.is_none() || atom.status != crate::state::AtomStatus::Failed {
            continue;
        }
        let runnable = graph
            .untried(id)
            .into_iter()
            .find(|alt| crate::graph::ChoiceOrder::refusal(&steer, &graph, alt).is_none());
        if let Some(alt) = runnable {
            revived.push(format!("`{id}` (`{alt}` may run now)"));
            events.extend(graph.reopen_for_choice(id, None));
        }
    }
    (events, revived)
}

/// Plans the events that take in a hand edit of the state file — `current` is
/// what the file held before the edit (the store's expectation at the file's
/// revision), `edited` what it holds now: the edit's
/// user-owned parts as one `user_edited`, each kind of change as a correction
/// (with the same trail rules as `aot redirect`), changed bindings as
/// overrides, and a changed `control` (a stop written by hand) as is. An edit
/// of other engine-owned fields (status, attempts, trail, run, corrections) is
/// refused: those are the engine's record of what happened.
pub fn from_edit(current: &StateFile, edited: &StateFile, at: Timestamp) -> Result<Vec<Event>, Refused> {
    let engine_edits: Vec<String> = current
        .engine_differences(edited)
        .into_iter()
        .filter(|f| f != "bindings")
        .collect();
    if !engine_edits.is_empty() {
        return Err(Refused::Invalid(format!(
            "engine-owned fields were edited ({}); change the work with `aot redirect` or the user-owned fields",
            engine_edits.join(", ")
        )));
    }
    let mut changes = Vec::new();
    let (a, b) = (&current.objective, &edited.objective);
    let objective_changed = a.goal != b.goal
        || a.raw_input != b.raw_input
        || a.background_intent != b.background_intent
        || a.deliverables != b.deliverables
        || a.definition_of_done != b.definition_of_done
        || a.criteria != b.criteria
        || a.base_case != b.base_case;
    let mut kinds = Vec::new();
    if objective_changed {
        kinds.push((
            CorrectionKind::ObjectiveChange,
            "hand edit of the objective".to_string(),
        ));
    }
    let atoms_changed = !crate::state::disk::same_atoms(&current.graph.atoms, &edited.graph.atoms);
    if atoms_changed || current.workers != edited.workers {
        kinds.push((CorrectionKind::DagAdjustment, "hand edit of the graph".to_string()));
    }
    if a.constraints != b.constraints || current.llm != edited.llm {
        kinds.push((
            CorrectionKind::ConstraintChange,
            "hand edit of the constraints".to_string(),
        ));
    }
    for (atom, binding) in &edited.bindings {
        if current.bindings.get(atom).map(|c| &c.summary) != Some(&binding.summary) {
            changes.push(Change::Bind {
                atom: atom.clone(),
                summary: binding.summary.clone(),
            });
        }
    }
    let mut events = Vec::new();
    if !edited.user_part_eq(current) {
        events.push(Event::user_edited(edited));
    }
    for (kind, description) in kinds {
        events.push(Event::CorrectionRecorded {
            correction: Correction {
                at,
                kind,
                description,
                trail_cleared: kind == CorrectionKind::ObjectiveChange,
            },
        });
    }
    // An edit that lets a failed OR atom's untried alternative run (a label
    // changed, an alternative added) revives it: the user's word beats GGS's.
    let edited_state = with_events(current, &events, at);
    let (revive, revived) = revive_choices(&edited_state);
    if !revived.is_empty() {
        for event in &mut events {
            if let Event::CorrectionRecorded { correction } = event
                && correction.kind == CorrectionKind::DagAdjustment
            {
                correction
                    .description
                    .push_str(&format!("; reopens {}", revived.join(", ")));
            }
        }
        events.extend(revive);
    }
    if !changes.is_empty() {
        let after = with_events(current, &events, at);
        events.extend(plan(&after, &changes, Some("hand edit"), at)?);
    }
    if current.control != edited.control && events.iter().all(|e| !matches!(e, Event::UserEdited { .. })) {
        events.push(Event::ControlSet {
            control: edited.control.clone(),
        });
    }
    Ok(events)
}
