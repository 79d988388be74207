//! The one fold: what each event does, as a table of effects.
//!
//! [`effects`] turns an event into primitive effects — an atom's status, its
//! attempt count, an OR choice, a reset, a binding, a trail entry, a change of
//! the run record. Everything that folds events interprets the same effects:
//! the state file ([`apply`]), the work graph (`graph::WorkGraph`) and the
//! correction history ([`History`]). A rule such as "a backtrack prunes the
//! abandoned alternative unless it failed or is blocked" is written once, here.

use std::collections::HashMap;

use indexmap::IndexMap;
use serde::Serialize;

use super::event::{Event, Record};

/// A failure that says nothing beyond its message (a blocked atom's probe).
static NOT_TOLD: crate::model::Ended = crate::model::Ended {
    exit_code: None,
    signal: None,
    summary: None,
    discarded: None,
};
use crate::ggs::{Decision, GgsState};
use crate::model::time::Timestamp;
use crate::model::{AtomId, Binding, Criterion, FailureClass};
use crate::state::{
    Atom, AtomStatus, Control, Correction, CorrectionKind, Evidence, Objective, RunStatus, StateFile, StopRecord,
    TrailEntry, Workers,
};

/// One primitive change an event makes.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect<'e> {
    /// The whole document is replaced (a snapshot).
    Replace(&'e StateFile),
    /// The user-owned parts are replaced; engine-owned fields of atoms that
    /// still exist are kept, new atoms start pending.
    Redefine {
        /// The objective.
        objective: &'e Objective,
        /// The control block.
        control: &'e Control,
        /// The workers block.
        workers: Option<&'e Workers>,
        /// The `llm:` section.
        llm: Option<&'e crate::state::LlmSettings>,
        /// The atom definitions, in file order.
        atoms: &'e IndexMap<AtomId, Atom>,
    },
    /// A call to a model was paid for.
    Spent {
        /// The role.
        role: &'e str,
        /// The atom it worked for.
        atom: Option<&'e AtomId>,
        /// Prompt and reply tokens.
        tokens: u64,
        /// US dollars.
        cost: f64,
        /// Whether the tokens are estimated.
        estimated: bool,
    },
    /// An agent atom's attempt was worked.
    Worked {
        /// The atom.
        atom: &'e AtomId,
        /// Which worker.
        worker: &'e str,
        /// Model turns.
        turns: u32,
        /// Tool calls.
        tool_calls: u32,
        /// Tool calls refused.
        refusals: u32,
    },
    /// An atom's status.
    Status(&'e AtomId, AtomStatus),
    /// An atom's attempt count.
    Attempts(&'e AtomId, u32),
    /// An interrupted attempt does not count: the attempt count goes down by one.
    AttemptUndone(&'e AtomId),
    /// A running atom back to pending; one a correction already moved on
    /// (pruned by a new choice, reset, removed) stays as it is.
    Interrupted(&'e AtomId),
    /// An atom back to pending with no attempts, no choice and no binding.
    Reset(&'e AtomId),
    /// An atom back to pending with a fresh attempt budget; its correction
    /// history (and its choice, for an OR atom) stays.
    Refill(&'e AtomId),
    /// An abandoned alternative is tried for good: pruned, unless it failed
    /// or is blocked (what failed stays failed).
    PruneUnlessClosed(&'e AtomId),
    /// An OR atom's chosen alternative; choosing counts the alternative as tried.
    Chosen(&'e AtomId, &'e AtomId),
    /// A solved atom's binding.
    Bind(&'e AtomId, &'e Binding),
    /// An attempt failed: what it teaches the next one.
    Failed {
        /// The atom.
        atom: &'e AtomId,
        /// The attempt, when the event names it (else the atom's last).
        attempt: Option<u32>,
        /// The criterion that failed.
        criterion: &'e Criterion,
        /// Logical or environmental.
        class: FailureClass,
        /// What went wrong.
        message: &'e str,
        /// Exit code or signal, and the worker's summary.
        ended: &'e crate::model::Ended,
    },
    /// The user chose an atom explicitly: the blocked sets do not refuse it.
    Allow(&'e AtomId),
    /// A trail entry.
    Trail(TrailEntry),
    /// The trail is cleared: a new objective is a new task, so what was tried
    /// and the controller's state start afresh.
    NewTask,
    /// A correction recorded in `corrections[]`.
    Correction(&'e Correction),
    /// The control block.
    Control(&'e Control),
    /// A run started.
    RunStarted,
    /// An iteration began.
    Iteration(u32),
    /// GGS decided.
    Decided(&'e Decision),
    /// The base case ran.
    Verified(&'e Evidence),
    /// The run paused (`aot step`).
    Paused,
    /// The run stopped.
    Stopped(&'e StopRecord),
}

/// The table: what each event does, in order.
pub fn effects(record: &Record) -> Vec<Effect<'_>> {
    use Effect as E;
    let at = record.at;
    match &record.event {
        Event::Snapshot { state } => vec![E::Replace(state)],
        Event::Compacted { state, failures } => std::iter::once(E::Replace(state))
            .chain(failures.iter().map(|(atom, r)| E::Failed {
                atom,
                attempt: Some(r.attempt),
                criterion: &r.criterion,
                class: r.class,
                message: &r.message,
                ended: &r.ended,
            }))
            .collect(),
        Event::UserEdited {
            objective,
            control,
            workers,
            llm,
            atoms,
        } => vec![E::Redefine {
            objective,
            control,
            workers: workers.as_ref(),
            llm: llm.as_ref(),
            atoms,
        }],
        Event::ControlSet { control } => vec![E::Control(control)],
        Event::RunStarted { .. } => vec![E::RunStarted],
        Event::IterationStarted { iteration } => vec![E::Iteration(*iteration)],
        Event::AtomStarted { atom, attempt } => vec![E::Attempts(atom, *attempt), E::Status(atom, AtomStatus::Running)],
        Event::AtomSolved { atom, binding } | Event::BindingOverridden { atom, binding } => {
            vec![E::Status(atom, AtomStatus::Solved), E::Bind(atom, binding)]
        }
        Event::AttemptFailed {
            atom,
            attempt,
            class,
            criterion,
            message,
            ended,
        } => vec![
            E::Attempts(atom, *attempt),
            E::Status(atom, AtomStatus::Pending),
            E::Failed {
                atom,
                attempt: Some(*attempt),
                criterion,
                class: *class,
                message,
                ended,
            },
        ],
        Event::AttemptCancelled { atom, .. } => vec![E::AttemptUndone(atom), E::Interrupted(atom)],
        Event::AtomFailed {
            atom,
            class,
            criterion,
            message,
            ended,
        } => vec![
            E::Status(atom, AtomStatus::Failed),
            E::Failed {
                atom,
                attempt: None,
                criterion,
                class: *class,
                message,
                ended,
            },
            E::Trail(TrailEntry::Failure {
                at,
                atom: atom.clone(),
                class: *class,
                criterion: criterion.clone(),
                message: message.clone(),
            }),
        ],
        Event::AtomsReset { atoms } => atoms.iter().map(E::Reset).collect(),
        Event::AtomsRefined { atoms } => atoms.iter().map(E::Refill).collect(),
        Event::GgsDecided { decision } => vec![E::Decided(decision)],
        Event::Calibrated { .. }
        | Event::EditRejected { .. }
        | Event::ChangesLanded { .. }
        | Event::ChangesDiscarded { .. }
        | Event::ChangesUndone { .. }
        | Event::WorkspaceRecovered { .. }
        | Event::Replanned { .. }
        | Event::PlanRefused { .. }
        | Event::ToolCalled { .. }
        | Event::CriterionJudged { .. } => Vec::new(),
        Event::AgentRan {
            atom,
            worker,
            turns,
            tool_calls,
            refusals,
            ..
        } => vec![E::Worked {
            atom,
            worker,
            turns: *turns,
            tool_calls: *tool_calls,
            refusals: *refusals,
        }],
        Event::LlmCalled {
            role,
            atom,
            prompt_tokens,
            completion_tokens,
            estimated,
            cost,
            ..
        } => vec![E::Spent {
            role,
            atom: atom.as_ref(),
            tokens: prompt_tokens.saturating_add(*completion_tokens),
            cost: cost.unwrap_or(0.0),
            estimated: *estimated,
        }],
        Event::BlocksOverridden { atoms } => atoms.iter().map(E::Allow).collect(),
        Event::AtomBlocked { atom, reason } => vec![
            E::Status(atom, AtomStatus::Blocked),
            // Environmental by definition: a failed run whose probe failed too.
            E::Failed {
                atom,
                attempt: None,
                criterion: &Criterion::Run,
                class: FailureClass::Environmental,
                message: reason,
                ended: &NOT_TOLD,
            },
        ],
        Event::AtomsPruned { atoms } => atoms.iter().map(|a| E::Status(a, AtomStatus::Pruned)).collect(),
        Event::OrChosen {
            group,
            chosen,
            remaining,
            reason,
        } => vec![
            E::Chosen(group, chosen),
            E::Trail(TrailEntry::OrChoice {
                at,
                group: group.clone(),
                chosen: chosen.clone(),
                remaining: remaining.clone(),
                reason: reason.clone(),
            }),
        ],
        Event::Backtracked { group, from, to, reset } => {
            let mut out: Vec<Effect> = reset.iter().map(E::Reset).collect();
            out.push(E::PruneUnlessClosed(from));
            out.push(E::Chosen(group, to));
            out.push(E::Trail(TrailEntry::Backtrack {
                at,
                group: group.clone(),
                from: from.clone(),
                to: to.clone(),
                reset: reset.clone(),
            }));
            out
        }
        Event::CorrectionRecorded { correction } => {
            let mut out = Vec::new();
            if correction.trail_cleared {
                out.push(E::NewTask);
            }
            if correction.kind == CorrectionKind::DagAdjustment {
                out.push(E::Trail(TrailEntry::UserCorrection {
                    at: correction.at,
                    description: correction.description.clone(),
                }));
            }
            out.push(E::Correction(correction));
            out
        }
        Event::BaseCaseChecked { evidence } => vec![E::Verified(evidence)],
        Event::RunPaused {} => vec![E::Paused],
        Event::RunStopped { stop } => vec![E::Stopped(stop)],
    }
}

/// Something kept up to date by folding records: each effect arrives after
/// the state file took it in (`after` is the state with the whole record applied).
pub trait Fold {
    /// Takes in one effect of a record.
    fn effect(&mut self, effect: &Effect<'_>, after: &StateFile);
}

/// What a store folds records into: a state file alone, or a state file with
/// views (the work graph, the correction history) kept in step with it.
pub trait Folded {
    /// Returns the state file.
    fn state(&self) -> &StateFile;

    /// Applies one record.
    fn apply(&mut self, record: &Record);
}

impl Folded for StateFile {
    fn state(&self) -> &StateFile {
        self
    }

    fn apply(&mut self, record: &Record) {
        apply(self, record);
    }
}

/// Applies one record to a state. Total: an effect naming an atom the state
/// does not have changes nothing about that atom, so any sequence folds.
pub fn apply(state: &mut StateFile, record: &Record) {
    for effect in effects(record) {
        on_state(state, &effect, record.at);
    }
    state.run.revision = record.seq;
}

/// Applies events not journaled yet to a state and `views`, as records at the
/// state's revision would (for plans that fold their own events as they make
/// them: a redirect, a recovery, a graft).
pub fn apply_planned(state: &mut StateFile, views: &mut [&mut dyn Fold], events: &[Event], at: Timestamp) {
    for event in events {
        let record = Record {
            v: super::event::RECORD_VERSION,
            seq: state.run.revision,
            at,
            event: event.clone(),
        };
        apply_with(state, views, &record);
    }
}

/// `state` with events not journaled yet applied (see [`apply_planned`]).
pub fn folded(state: &StateFile, events: &[Event], at: Timestamp) -> StateFile {
    let mut after = state.clone();
    apply_planned(&mut after, &mut [], events, at);
    after
}

/// Applies one record to a state and then to `views` (the work graph, the
/// correction history), all from the same effects.
pub fn apply_with(state: &mut StateFile, views: &mut [&mut dyn Fold], record: &Record) {
    let effects = effects(record);
    for effect in &effects {
        on_state(state, effect, record.at);
    }
    state.run.revision = record.seq;
    for view in views.iter_mut() {
        for effect in &effects {
            view.effect(effect, state);
        }
    }
}

/// Folds records into a state, starting from the last snapshot among them.
/// Returns `None` when there is no snapshot to start from.
pub fn fold<'a>(records: impl IntoIterator<Item = &'a Record>) -> Option<StateFile> {
    let records: Vec<&Record> = records.into_iter().collect();
    let start = records
        .iter()
        .rposition(|r| matches!(r.event, Event::Snapshot { .. } | Event::Compacted { .. }))?;
    let mut state = StateFile::new(Objective::default(), IndexMap::new());
    for record in &records[start..] {
        apply(&mut state, record);
    }
    Some(state)
}

fn on_state(state: &mut StateFile, effect: &Effect<'_>, at: Timestamp) {
    match effect {
        Effect::Replace(snapshot) => *state = (*snapshot).clone(),
        Effect::Redefine {
            objective,
            control,
            workers,
            llm,
            atoms,
        } => {
            state.objective = (*objective).clone();
            state.control = (*control).clone();
            state.workers = workers.cloned();
            state.llm = llm.cloned();
            let mut old = std::mem::take(&mut state.graph.atoms);
            state.graph.atoms = atoms
                .iter()
                .map(|(id, definition)| {
                    let mut atom = definition.definition();
                    if let Some(previous) = old.swap_remove(id.as_str()) {
                        atom.status = previous.status;
                        atom.attempts = previous.attempts;
                        atom.chosen = previous.chosen;
                    }
                    (id.clone(), atom)
                })
                .collect();
        }
        Effect::Status(id, status) => {
            if let Some(a) = state.graph.atoms.get_mut(id.as_str()) {
                a.status = *status;
            }
        }
        Effect::Attempts(id, n) => {
            if let Some(a) = state.graph.atoms.get_mut(id.as_str()) {
                a.attempts = *n;
            }
        }
        Effect::AttemptUndone(id) => {
            if let Some(a) = state.graph.atoms.get_mut(id.as_str()) {
                a.attempts = a.attempts.saturating_sub(1);
            }
        }
        Effect::Interrupted(id) => {
            if let Some(a) = state.graph.atoms.get_mut(id.as_str())
                && a.status == AtomStatus::Running
            {
                a.status = AtomStatus::Pending;
            }
        }
        Effect::Reset(id) => {
            if let Some(a) = state.graph.atoms.get_mut(id.as_str()) {
                a.status = AtomStatus::Pending;
                a.attempts = 0;
                a.chosen = None;
            }
            state.bindings.shift_remove(id.as_str());
        }
        Effect::Refill(id) => {
            if let Some(a) = state.graph.atoms.get_mut(id.as_str()) {
                a.status = AtomStatus::Pending;
                a.attempts = 0;
            }
        }
        Effect::PruneUnlessClosed(id) => {
            if let Some(a) = state.graph.atoms.get_mut(id.as_str())
                && !matches!(a.status, AtomStatus::Failed | AtomStatus::Blocked)
            {
                a.status = AtomStatus::Pruned;
            }
        }
        Effect::Chosen(group, alt) => {
            if let Some(a) = state.graph.atoms.get_mut(group.as_str()) {
                a.chosen = Some((*alt).clone());
            }
        }
        Effect::Bind(id, binding) => {
            if state.graph.atoms.contains_key(id.as_str()) {
                state.bindings.insert((*id).clone(), (*binding).clone());
            }
        }
        Effect::Failed { .. } => {}
        Effect::Allow(id) => {
            state.run.ggs.allowed.insert((*id).clone());
        }
        Effect::Trail(entry) => state.trail.push(entry.clone()),
        Effect::NewTask => {
            state.trail.clear();
            state.run.ggs = GgsState::default();
            state.run.replans = 0;
            state.run.active_ms = 0;
        }
        Effect::Correction(correction) => state.corrections.push((*correction).clone()),
        Effect::Control(control) => state.control = (*control).clone(),
        Effect::RunStarted => {
            state.run.status = RunStatus::Running;
            state.run.started_at = Some(at);
            state.run.stop = None;
        }
        Effect::Iteration(n) => state.run.iteration = *n,
        Effect::Spent {
            role,
            atom,
            tokens,
            cost,
            estimated,
        } => state.run.spend.add(role, *atom, *tokens, *cost, *estimated),
        Effect::Worked {
            atom,
            worker,
            turns,
            tool_calls,
            refusals,
        } => {
            let tally = state.run.agents.entry((*atom).clone()).or_default();
            tally.worker = worker.to_string();
            tally.attempts += 1;
            tally.turns += turns;
            tally.tool_calls += tool_calls;
            tally.refusals += refusals;
        }
        Effect::Decided(decision) => {
            state.run.ggs = state.run.ggs.after(decision);
            if decision.directive.continues() {
                state.run.replans += 1;
            }
        }
        Effect::Verified(evidence) => state.run.last_verify = Some((*evidence).clone()),
        Effect::Paused => {
            state.run.status = RunStatus::Paused;
            end_active(state, at);
        }
        Effect::Stopped(stop) => {
            state.run.status = RunStatus::Stopped;
            state.run.stop = Some((*stop).clone());
            end_active(state, at);
        }
    }
}

/// Adds the time since the run started to the task's active time (GGS Omega).
fn end_active(state: &mut StateFile, at: Timestamp) {
    if let Some(started) = state.run.started_at.take() {
        state.run.active_ms += at.since(started).as_millis() as u64;
    }
}

/// What one failed attempt taught.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reflection {
    /// The attempt.
    pub attempt: u32,
    /// The criterion that failed.
    pub criterion: Criterion,
    /// Logical or environmental.
    pub class: FailureClass,
    /// What went wrong.
    pub message: String,
    /// Exit code or signal, and the worker's summary.
    pub ended: crate::model::Ended,
}

/// The correction history: the failed attempts of the atoms still being
/// worked on — the last [`History::KEPT`] of each, oldest first — so that a
/// retry (or a restarted run) hands the next attempt the same context an
/// uninterrupted run would. The bound keeps a long run's context (and the
/// environment a worker gets it in) from growing past what a process accepts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    failures: HashMap<AtomId, Vec<Reflection>>,
}

impl History {
    /// Failed attempts kept per atom: the most recent ones.
    pub const KEPT: usize = 8;

    /// Folds a journal's records (from its start) into a history.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a Record>) -> Self {
        let mut state = StateFile::new(Objective::default(), IndexMap::new());
        let mut history = History::default();
        for record in records {
            apply_with(&mut state, &mut [&mut history], record);
        }
        history
    }

    /// Every atom's failed attempts, by atom id, each oldest first: what a
    /// compaction carries over.
    pub fn failures(&self) -> Vec<(AtomId, Reflection)> {
        let mut atoms: Vec<&AtomId> = self.failures.keys().collect();
        atoms.sort();
        atoms
            .into_iter()
            .flat_map(|id| self.failures[id].iter().map(move |r| (id.clone(), r.clone())))
            .collect()
    }

    /// Returns an atom's failed attempts, oldest first.
    pub fn of_atom(&self, atom: &str) -> &[Reflection] {
        self.failures.get(atom).map_or(&[], Vec::as_slice)
    }
}

impl Fold for History {
    fn effect(&mut self, effect: &Effect<'_>, after: &StateFile) {
        match effect {
            Effect::Replace(_) => *self = History::default(),
            Effect::Redefine { atoms, .. } => {
                self.failures.retain(|id, _| atoms.contains_key(id.as_str()));
            }
            Effect::Failed {
                atom,
                attempt,
                criterion,
                class,
                message,
                ended,
            } => {
                // An OR atom fails without an attempt of its own: nothing to teach.
                let last = || {
                    after
                        .graph
                        .atoms
                        .get(atom.as_str())
                        .map(|a| a.attempts)
                        .filter(|n| *n > 0)
                };
                let Some(attempt) = attempt.or_else(last) else {
                    return;
                };
                let failures = self.failures.entry((*atom).clone()).or_default();
                if failures.len() == History::KEPT {
                    failures.remove(0);
                }
                failures.push(Reflection {
                    attempt,
                    criterion: (*criterion).clone(),
                    class: *class,
                    message: message.to_string(),
                    ended: (*ended).clone(),
                });
            }
            Effect::Reset(id) => {
                self.failures.remove(id.as_str());
            }
            // A solved atom's lessons are spent.
            Effect::Status(id, AtomStatus::Solved) => {
                self.failures.remove(id.as_str());
            }
            _ => {}
        }
    }
}
