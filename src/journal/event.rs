//! Journal events: every transition of a state file, as a versioned wire record.
//!
//! The state file is a fold over these events ([`super::fold::apply`]). A record is written to
//! the journal before the state file reflects it, so replaying the journal
//! reproduces the file and a crash loses nothing that was journaled.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::model::time::Timestamp;
use crate::model::{Changes, Criterion};
use crate::state::{
    AtomId, Binding, Control, Correction, Evidence, FailureClass, Objective, StateFile, StopRecord, Workers,
};

/// The journal record format version this build writes (and the newest it reads).
pub const RECORD_VERSION: u32 = super::wire::WIRE_VERSION;

/// One line of the journal, read and written through its wire format
/// ([`super::wire`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "super::wire::WireRecord", try_from = "super::wire::WireRecord")]
pub struct Record {
    /// Record format version (records read from older versions are upgraded).
    pub v: u32,
    /// Position in the journal, from 1, without gaps.
    pub seq: u64,
    /// When the transition happened.
    pub at: Timestamp,
    /// The transition.
    pub event: Event,
}

/// A state transition (domain type; its wire form is [`super::wire::WireEvent`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The whole document: the start of a journal, or a new document (an
    /// edit of engine-owned fields made while nothing ran).
    Snapshot {
        /// The document.
        state: Box<StateFile>,
    },
    /// The first record of a compacted journal: the fold of every record up
    /// to and including this one's sequence number, which it replaces.
    Compacted {
        /// The document those records folded into.
        state: Box<StateFile>,
        /// The failed attempts of the atoms still being worked on, per atom
        /// oldest first, so a retry after compaction keeps its context.
        failures: Vec<(AtomId, super::fold::Reflection)>,
    },
    /// The user-owned parts were edited (by hand or by a command); engine-owned
    /// fields of atoms that still exist are kept, new atoms start pending.
    UserEdited {
        /// The objective as edited.
        objective: Box<Objective>,
        /// The control block as edited.
        control: Control,
        /// The workers block as edited.
        workers: Option<Workers>,
        /// The `llm:` section as edited.
        llm: Option<crate::state::LlmSettings>,
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
        /// Destructive commands and Caution alternatives were confirmed up
        /// front (`--yes`): what the auditor checks a destructive command against.
        yes: bool,
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
        /// Exit code or signal, and the worker's summary.
        ended: crate::model::Ended,
    },
    /// An attempt was interrupted (stop, redirect, a lost speculative race): the
    /// atom goes back to pending (unless the correction that interrupted it
    /// already moved it on: pruned by a new choice, reset) and the
    /// interrupted attempt does not count.
    AttemptCancelled {
        /// The atom.
        atom: AtomId,
        /// Why, when a correction made the attempt stale ("its definition
        /// changed", "`build` upstream changed").
        why: Option<String>,
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
        /// Exit code or signal, and the worker's summary.
        ended: crate::model::Ended,
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
    /// The user chose these atoms explicitly (`aot redirect --choose`): the
    /// blocked sets no longer refuse them, for the rest of the task.
    BlocksOverridden {
        /// The atoms (the chosen alternative and the atoms its plan runs).
        atoms: Vec<AtomId>,
    },
    /// A hand edit made while a loop ran was refused; the file went back to the
    /// last good state and the edited text was saved aside (no state change).
    EditRejected {
        /// Why, as the user was told.
        why: String,
        /// Where the edited text was saved.
        kept: String,
    },
    /// An attempt's changes landed in the user's tree (with isolation).
    ChangesLanded {
        /// The atom.
        atom: AtomId,
        /// The attempt.
        attempt: u32,
        /// What changed in the tree as landed.
        changes: Changes,
        /// The commit made of them (`constraints.commit: per_atom`).
        commit: Option<String>,
    },
    /// A failed or cancelled attempt's changes were discarded (with isolation).
    ChangesDiscarded {
        /// The atom.
        atom: AtomId,
        /// The attempt.
        attempt: u32,
        /// What the attempt had changed (`after`: its tree, still in git).
        changes: Changes,
        /// Where a copy of its tree was kept for inspection (`--keep-failed`).
        kept: Option<String>,
    },
    /// Changes that had landed were undone: a backtrack gave up the branch
    /// of the atom that made them.
    ChangesUndone {
        /// The atom whose changes were undone.
        atom: AtomId,
        /// What the undo changed.
        changes: Changes,
        /// Files left as they are because later work changed them too.
        kept: Vec<String>,
        /// The commit made of the undo (`constraints.commit: per_atom`).
        commit: Option<String>,
    },
    /// A run's start took back a landing a kill had interrupted before the
    /// run recorded it (records of older versions: put back what a killed
    /// attempt had changed in place).
    WorkspaceRecovered {
        /// What taking it back changed (`before`: what the landing wrote, still in git).
        changes: Changes,
        /// Files left as they are: the user changed them after the landing.
        kept: Vec<String>,
    },
    /// The planner added atoms after a GGS decision, when no written
    /// alternative was left (their definitions arrive in the `user_edited`
    /// that follows; this record says why).
    Replanned {
        /// The replan's number in the task.
        replan: u32,
        /// The directive the plan answers.
        directive: crate::ggs::MacroState,
        /// The failed atom the plan is a new way to solve (none: the base case).
        answers: Option<AtomId>,
        /// The atoms added, the sink last.
        added: Vec<AtomId>,
        /// The OR atom the sink became an alternative of (made for it when
        /// the failed atom had none).
        group: Option<AtomId>,
        /// The planner's reason.
        rationale: String,
        /// Destructive commands in the plan that run because `--yes` confirmed them (Law 1).
        gates: Vec<String>,
    },
    /// A planner's plan was refused in code and never ran.
    PlanRefused {
        /// The replan it was for.
        replan: u32,
        /// Every reason (blocked labels, Law 1 gates, graph problems).
        reasons: Vec<String>,
    },
    /// A call to a model was made (or failed).
    LlmCalled {
        /// The role (`planner`, `worker`, …).
        role: String,
        /// The model asked.
        model: String,
        /// Prompt tokens.
        prompt_tokens: u64,
        /// Reply tokens.
        completion_tokens: u64,
        /// Whether the tokens are aot's estimate (the reply gave none).
        estimated: bool,
        /// From the first request to the answer, retries included.
        latency_ms: u64,
        /// HTTP attempts.
        attempts: u32,
        /// Why the call failed (none: it answered).
        error: Option<String>,
        /// The atom the call worked for, if one.
        atom: Option<AtomId>,
        /// US dollars, when the model has a price.
        cost: Option<f64>,
        /// Where the call's prompt and answer are kept (for `aot log --llm`),
        /// relative to the state file's folder.
        kept: Option<String>,
    },
    /// A built-in worker's tool call: what the model asked for and whether
    /// it ran (a refusal says why: a blocked tool, a path outside the
    /// workspace, a destructive command without a confirmation).
    ToolCalled {
        /// The atom.
        atom: AtomId,
        /// The attempt.
        attempt: u32,
        /// The tool (`shell`, `read_file`, …).
        tool: String,
        /// The command or path asked for, cut to a line.
        input: String,
        /// Why it did not run (none: it ran).
        refused: Option<String>,
        /// A `shell` call's exit code (none: refused, killed or another tool).
        exit_code: Option<i32>,
    },
    /// An agent atom's attempt ended: which worker did it, with how many
    /// model turns and tool calls, how many of them refused.
    AgentRan {
        /// The atom.
        atom: AtomId,
        /// The attempt.
        attempt: u32,
        /// `llm` (the built-in worker), a template's name (`claude`, …) or `command`.
        worker: String,
        /// Model turns (calls), as far as the worker knows.
        turns: u32,
        /// Tool calls made.
        tool_calls: u32,
        /// Tool calls refused.
        refusals: u32,
    },
    /// A validator judged a plausible criterion (an atom's, or with no atom
    /// the objective's, by the meta-validator).
    CriterionJudged {
        /// The atom (none: the objective).
        atom: Option<AtomId>,
        /// The atom's attempt.
        attempt: Option<u32>,
        /// The criterion.
        criterion: Criterion,
        /// Whether it holds.
        passed: bool,
        /// The validator's evidence.
        evidence: String,
        /// A failure's class.
        class: Option<FailureClass>,
    },
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
            Event::Compacted { .. } => "compacted",
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
            Event::EditRejected { .. } => "edit_rejected",
            Event::BlocksOverridden { .. } => "blocks_overridden",
            Event::ChangesLanded { .. } => "changes_landed",
            Event::ChangesDiscarded { .. } => "changes_discarded",
            Event::ChangesUndone { .. } => "changes_undone",
            Event::WorkspaceRecovered { .. } => "workspace_recovered",
            Event::Replanned { .. } => "replanned",
            Event::PlanRefused { .. } => "plan_refused",
            Event::LlmCalled { .. } => "llm_called",
            Event::ToolCalled { .. } => "tool_called",
            Event::AgentRan { .. } => "agent_ran",
            Event::CriterionJudged { .. } => "criterion_judged",
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
            llm: state.llm.clone(),
            atoms: state
                .graph
                .atoms
                .iter()
                .map(|(id, atom)| (id.clone(), atom.definition()))
                .collect(),
        }
    }
}
