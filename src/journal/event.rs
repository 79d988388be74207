//! Journal events: every transition of a state file, as a versioned wire record.
//!
//! The state file is a fold over these events ([`apply`]). A record is written to
//! the journal before the state file reflects it, so replaying the journal
//! reproduces the file and a crash loses nothing that was journaled.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::model::time::Timestamp;
use crate::state::{
    AtomId, AtomStatus, Binding, Control, Correction, CorrectionKind, Evidence, FailureClass, Objective, RunStatus,
    StateFile, StopRecord, TrailEntry, Workers,
};

/// The journal record format version this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Record format version.
    pub v: u32,
    /// Position in the journal, from 1, without gaps.
    pub seq: u64,
    /// When the transition happened.
    pub at: Timestamp,
    /// The transition.
    pub event: Event,
}

/// A state transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// The whole document: the start of a journal, or a compaction point.
    Snapshot {
        /// The document.
        state: Box<StateFile>,
    },
    /// The user-owned parts were edited (by hand or by a command); engine-owned
    /// fields of atoms that still exist are kept, new atoms start pending.
    UserEdited {
        /// The objective as edited.
        objective: Box<Objective>,
        /// The control block as edited.
        control: Control,
        /// The workers block as edited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Workers>,
        /// Atom definitions as edited, in file order.
        atoms: IndexMap<AtomId, crate::state::Atom>,
    },
    /// `control` was set (stop or redirect requested or cleared).
    ControlSet {
        /// The new control block.
        control: Control,
    },
    /// A loop took over the file.
    RunStarted {
        /// The runner's process id.
        pid: u32,
    },
    /// An iteration began.
    IterationStarted {
        /// Its number, from 1.
        iteration: u32,
    },
    /// A worker started on an atom.
    AtomStarted {
        /// The atom.
        atom: AtomId,
        /// Attempt number, from 1.
        attempt: u32,
    },
    /// An atom was solved; its binding contracts it.
    AtomSolved {
        /// The atom.
        atom: AtomId,
        /// Its result.
        binding: Binding,
    },
    /// An attempt failed and a retry remains: the atom goes back to pending.
    AttemptFailed {
        /// The atom.
        atom: AtomId,
        /// The failed attempt.
        attempt: u32,
        /// Logical or environmental.
        class: FailureClass,
        /// The criterion that failed.
        criterion: crate::model::Criterion,
        /// What went wrong.
        message: String,
    },
    /// An attempt was interrupted (stop, redirect, a lost speculative race): the
    /// atom goes back to pending and the interrupted attempt does not count.
    AttemptCancelled {
        /// The atom.
        atom: AtomId,
    },
    /// An atom failed for good.
    AtomFailed {
        /// The atom.
        atom: AtomId,
        /// Logical or environmental.
        class: FailureClass,
        /// The criterion that failed.
        criterion: crate::model::Criterion,
        /// What went wrong.
        message: String,
    },
    /// Atoms went back to pending with no attempts and no binding (cancelled
    /// work, an override's dependents, a reset sub-graph).
    AtomsReset {
        /// The atoms.
        atoms: Vec<AtomId>,
    },
    /// GGS refined: failed atoms go back to pending with a fresh attempt budget,
    /// keeping their correction history.
    AtomsRefined {
        /// The atoms.
        atoms: Vec<AtomId>,
    },
    /// Memory was consulted before an OR choice (no state change).
    Calibrated {
        /// The potentials of each alternative and the resulting constraints.
        calibration: Box<crate::memory::Calibration>,
    },
    /// GGS decided what to do after a failed round.
    GgsDecided {
        /// The decision (the seed's PlanDirective, with the loss trajectory).
        decision: Box<crate::ggs::Decision>,
    },
    /// An atom cannot run until the user fixes its environment.
    AtomBlocked {
        /// The atom.
        atom: AtomId,
        /// What the user must fix.
        reason: String,
    },
    /// Atoms on an abandoned branch will not run.
    AtomsPruned {
        /// The atoms.
        atoms: Vec<AtomId>,
    },
    /// An alternative was selected at an OR atom.
    OrChosen {
        /// The OR atom.
        group: AtomId,
        /// The selected alternative.
        chosen: AtomId,
        /// Alternatives still untried.
        remaining: Vec<AtomId>,
        /// Why.
        reason: String,
    },
    /// Backtracking switched an OR atom to another alternative. The listed atoms
    /// are reset; `from` becomes `pruned` unless it failed or is blocked.
    Backtracked {
        /// The OR atom.
        group: AtomId,
        /// The alternative given up.
        from: AtomId,
        /// The alternative now selected.
        to: AtomId,
        /// Atoms reset to pending.
        reset: Vec<AtomId>,
    },
    /// A binding was overwritten by the user.
    BindingOverridden {
        /// The atom.
        atom: AtomId,
        /// The new binding.
        binding: Binding,
    },
    /// A correction was recorded in `corrections[]`.
    CorrectionRecorded {
        /// The correction.
        correction: Correction,
    },
    /// The base case ran.
    BaseCaseChecked {
        /// What ran and how it ended.
        evidence: Evidence,
    },
    /// A run paused after one iteration (`aot step`).
    RunPaused {},
    /// A run ended.
    RunStopped {
        /// How and why.
        stop: StopRecord,
    },
}

impl Event {
    /// Returns the event's type name as written in the journal.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Snapshot { .. } => "snapshot",
            Event::UserEdited { .. } => "user_edited",
            Event::ControlSet { .. } => "control_set",
            Event::RunStarted { .. } => "run_started",
            Event::IterationStarted { .. } => "iteration_started",
            Event::AtomStarted { .. } => "atom_started",
            Event::AtomSolved { .. } => "atom_solved",
            Event::AttemptFailed { .. } => "attempt_failed",
            Event::AttemptCancelled { .. } => "attempt_cancelled",
            Event::AtomFailed { .. } => "atom_failed",
            Event::AtomsReset { .. } => "atoms_reset",
            Event::AtomsRefined { .. } => "atoms_refined",
            Event::GgsDecided { .. } => "ggs_decided",
            Event::Calibrated { .. } => "calibrated",
            Event::AtomBlocked { .. } => "atom_blocked",
            Event::AtomsPruned { .. } => "atoms_pruned",
            Event::OrChosen { .. } => "or_chosen",
            Event::Backtracked { .. } => "backtracked",
            Event::BindingOverridden { .. } => "binding_overridden",
            Event::CorrectionRecorded { .. } => "correction_recorded",
            Event::BaseCaseChecked { .. } => "base_case_checked",
            Event::RunPaused {} => "run_paused",
            Event::RunStopped { .. } => "run_stopped",
        }
    }

    /// Returns the snapshot event of a document.
    pub fn snapshot(state: &StateFile) -> Self {
        Event::Snapshot {
            state: Box::new(state.clone()),
        }
    }

    /// Returns the event that carries the user-owned parts of `state`.
    pub fn user_edited(state: &StateFile) -> Self {
        Event::UserEdited {
            objective: Box::new(state.objective.clone()),
            control: state.control.clone(),
            workers: state.workers.clone(),
            atoms: state
                .graph
                .atoms
                .iter()
                .map(|(id, atom)| (id.clone(), atom.definition()))
                .collect(),
        }
    }
}

/// Applies one record to a state. Total: an event naming an atom the state does
/// not have changes nothing about that atom, so any sequence folds.
pub fn apply(state: &mut StateFile, record: &Record) {
    let at = record.at;
    match &record.event {
        Event::Snapshot { state: snapshot } => *state = (**snapshot).clone(),
        Event::UserEdited {
            objective,
            control,
            workers,
            atoms,
        } => {
            state.objective = (**objective).clone();
            state.control = control.clone();
            state.workers = workers.clone();
            let mut old = std::mem::take(&mut state.graph.atoms);
            state.graph.atoms = atoms
                .iter()
                .map(|(id, definition)| {
                    let mut atom = definition.definition();
                    if let Some(previous) = old.swap_remove(id) {
                        atom.status = previous.status;
                        atom.attempts = previous.attempts;
                        atom.chosen = previous.chosen;
                    }
                    (id.clone(), atom)
                })
                .collect();
        }
        Event::ControlSet { control } => state.control = control.clone(),
        Event::RunStarted { .. } => {
            state.run.status = RunStatus::Running;
            state.run.started_at = Some(at);
            state.run.stop = None;
        }
        Event::IterationStarted { iteration } => state.run.iteration = *iteration,
        Event::AtomStarted { atom, attempt } => {
            if let Some(a) = state.graph.atoms.get_mut(atom) {
                a.status = AtomStatus::Running;
                a.attempts = *attempt;
            }
        }
        Event::AtomSolved { atom, binding } => {
            if let Some(a) = state.graph.atoms.get_mut(atom) {
                a.status = AtomStatus::Solved;
                state.bindings.insert(atom.clone(), binding.clone());
            }
        }
        Event::AttemptFailed { atom, attempt, .. } => {
            if let Some(a) = state.graph.atoms.get_mut(atom) {
                a.status = AtomStatus::Pending;
                a.attempts = *attempt;
            }
        }
        Event::AttemptCancelled { atom } => {
            if let Some(a) = state.graph.atoms.get_mut(atom) {
                a.status = AtomStatus::Pending;
                a.attempts = a.attempts.saturating_sub(1);
            }
        }
        Event::AtomFailed {
            atom,
            class,
            criterion,
            message,
        } => {
            if let Some(a) = state.graph.atoms.get_mut(atom) {
                a.status = AtomStatus::Failed;
            }
            state.trail.push(TrailEntry::Failure {
                at,
                atom: atom.clone(),
                class: *class,
                criterion: criterion.clone(),
                message: message.clone(),
            });
        }
        Event::AtomsReset { atoms } => reset(state, atoms),
        Event::AtomsRefined { atoms } => {
            for id in atoms {
                if let Some(a) = state.graph.atoms.get_mut(id) {
                    a.status = AtomStatus::Pending;
                    a.attempts = 0;
                }
            }
        }
        Event::GgsDecided { decision } => {
            state.run.ggs = state.run.ggs.after(decision);
            if decision.directive.continues() {
                state.run.replans += 1;
            }
        }
        Event::AtomBlocked { atom, .. } => {
            if let Some(a) = state.graph.atoms.get_mut(atom) {
                a.status = AtomStatus::Blocked;
            }
        }
        Event::AtomsPruned { atoms } => {
            for id in atoms {
                if let Some(a) = state.graph.atoms.get_mut(id) {
                    a.status = AtomStatus::Pruned;
                }
            }
        }
        Event::OrChosen {
            group,
            chosen,
            remaining,
            reason,
        } => {
            if let Some(a) = state.graph.atoms.get_mut(group) {
                a.chosen = Some(chosen.clone());
            }
            state.trail.push(TrailEntry::OrChoice {
                at,
                group: group.clone(),
                chosen: chosen.clone(),
                remaining: remaining.clone(),
                reason: reason.clone(),
            });
        }
        Event::Backtracked {
            group,
            from,
            to,
            reset: atoms,
        } => {
            reset(state, atoms);
            // The abandoned alternative is tried for good: failed stays failed,
            // anything else is pruned.
            if let Some(a) = state.graph.atoms.get_mut(from)
                && !matches!(a.status, AtomStatus::Failed | AtomStatus::Blocked)
            {
                a.status = AtomStatus::Pruned;
            }
            if let Some(a) = state.graph.atoms.get_mut(group) {
                a.chosen = Some(to.clone());
            }
            state.trail.push(TrailEntry::Backtrack {
                at,
                group: group.clone(),
                from: from.clone(),
                to: to.clone(),
                reset: atoms.clone(),
            });
        }
        Event::BindingOverridden { atom, binding } => {
            if let Some(a) = state.graph.atoms.get_mut(atom) {
                a.status = AtomStatus::Solved;
                state.bindings.insert(atom.clone(), binding.clone());
            }
        }
        Event::CorrectionRecorded { correction } => {
            if correction.trail_cleared {
                // A new objective is a new task: the controller starts afresh.
                state.trail.clear();
                state.run.ggs = crate::ggs::GgsState::default();
                state.run.replans = 0;
                state.run.active_ms = 0;
            }
            if correction.kind == CorrectionKind::DagAdjustment {
                state.trail.push(TrailEntry::UserCorrection {
                    at: correction.at,
                    description: correction.description.clone(),
                });
            }
            state.corrections.push(correction.clone());
        }
        Event::BaseCaseChecked { evidence } => state.run.last_verify = Some(evidence.clone()),
        Event::Calibrated { .. } => {}
        Event::RunPaused {} => {
            state.run.status = RunStatus::Paused;
            end_active(state, at);
        }
        Event::RunStopped { stop } => {
            state.run.status = RunStatus::Stopped;
            state.run.stop = Some(stop.clone());
            end_active(state, at);
        }
    }
    state.run.revision = record.seq;
}

/// Adds the time since the run started to the task's active time (GGS Omega).
fn end_active(state: &mut StateFile, at: Timestamp) {
    if let Some(started) = state.run.started_at.take() {
        state.run.active_ms += at.since(started).as_millis() as u64;
    }
}

fn reset(state: &mut StateFile, atoms: &[AtomId]) {
    for id in atoms {
        if let Some(a) = state.graph.atoms.get_mut(id) {
            a.status = AtomStatus::Pending;
            a.attempts = 0;
            a.chosen = None;
        }
        state.bindings.shift_remove(id);
    }
}

/// Folds records into a state, starting from the last snapshot among them.
/// Returns `None` when there is no snapshot to start from.
pub fn fold<'a>(records: impl IntoIterator<Item = &'a Record>) -> Option<StateFile> {
    let records: Vec<&Record> = records.into_iter().collect();
    let start = records
        .iter()
        .rposition(|r| matches!(r.event, Event::Snapshot { .. }))?;
    let mut state = StateFile::new(Objective::default(), IndexMap::new());
    for record in &records[start..] {
        apply(&mut state, record);
    }
    Some(state)
}
