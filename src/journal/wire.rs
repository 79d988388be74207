//! The journal's wire format, apart from the domain types.
//!
//! A journal line is a [`WireRecord`]: `v` (the format version), `seq`, `at`
//! and a [`WireEvent`]. Domain [`Record`]s are written and read only through
//! it, so a change to an engine type (a GGS field renamed, a calibration
//! reshaped) cannot change the journal silently: the golden files under
//! `tests/fixtures/journal/` fail, and the change needs a new version here
//! with a conversion from the old one.
//!
//! What the wire owns: the envelope, the event names and their fields, GGS
//! decisions ([`WireDecision`]) and memory calibrations ([`WireCalibration`]).
//! Payloads that are parts of the state file — the document in a snapshot,
//! objective, control, workers, atom definitions, bindings, corrections,
//! evidence, stop records — are written in the state file's own format, which
//! is versioned by its `version` field and described by the checked-in schema.
//! Enumerations use the documented vocabulary (directive and action names).
//!
//! Versions:
//! - **1** (releases before the engine redesign): a decision after a failing
//!   base case listed the sentinel `"base_case"` among its failed atoms.
//! - **2**: the failed atoms are atoms only; `base_case_failed` says whether
//!   the base case failed.
//! - **3**: a journal may start with a `compacted` record, at any sequence
//!   number: the records up to it were folded into it and dropped.
//! - **4**: `attempt_cancelled` may say `why` (the correction that made the
//!   attempt stale); older records read with none.
//! - **5**: `edit_rejected` records a hand edit a running loop refused; a
//!   failure (`attempt_failed`, `atom_failed`, a compaction's `failures`) may
//!   say its `exit_code` or `signal` and the worker's `summary`;
//!   `blocks_overridden` records atoms the user chose despite the blocked sets.
//! - **6**: workspace isolation: `changes_landed`, `changes_discarded`,
//!   `changes_undone` and `workspace_recovered`; a failure may say what its
//!   attempt changed and was discarded (`discarded`); a binding may carry its
//!   `changes`; the criterion `merge`.
//! - **7**: the LLM planner: `replanned` (atoms a planner added after a GGS
//!   decision, with the destructive commands `--yes` let run), `plan_refused`
//!   (a planner's plan refused in code) and `llm_called` (each call to a
//!   model, with its tokens and cost); `user_edited` may carry the `llm:` section.
//! - **8**: the LLM worker and validators: `tool_called` (each tool call of
//!   the built-in worker, refused or run), `agent_ran` (an agent attempt's
//!   worker, turns and tool calls) and `criterion_judged` (a plausible
//!   criterion's verdict); `run_started` may say `yes` (the run was started
//!   with `--yes`).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::event::{Event, Record};
use super::fold::Reflection;
use crate::ggs::{Decision, FailureMix, Gradient, Loss, MacroState};
use crate::memory::{Action, Calibration, Recalled, Row};
use crate::model::time::Timestamp;
use crate::model::{AtomId, Changes, Criterion, Ended, FailureClass};
use crate::state::{Atom, Binding, Control, Correction, Evidence, Objective, StateFile, StopRecord, Workers};

/// The version this build writes; it reads this one and every older one.
pub const WIRE_VERSION: u32 = 8;

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireRecord {
    /// Format version.
    pub v: u32,
    /// Position in the journal, from 1, without gaps.
    pub seq: u64,
    /// When the transition happened.
    pub at: Timestamp,
    /// The transition.
    pub event: WireEvent,
}

/// A transition as written; see [`Event`] for what each one means.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[allow(missing_docs)]
pub enum WireEvent {
    Snapshot {
        state: Box<StateFile>,
    },
    Compacted {
        state: Box<StateFile>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        failures: Vec<WireFailure>,
    },
    UserEdited {
        objective: Box<Objective>,
        control: Control,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Workers>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        llm: Option<crate::state::LlmSettings>,
        atoms: IndexMap<AtomId, Atom>,
    },
    ControlSet {
        control: Control,
    },
    RunStarted {
        pid: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        yes: bool,
    },
    IterationStarted {
        iteration: u32,
    },
    AtomStarted {
        atom: AtomId,
        attempt: u32,
    },
    AtomSolved {
        atom: AtomId,
        binding: Binding,
    },
    AttemptFailed {
        atom: AtomId,
        attempt: u32,
        class: FailureClass,
        criterion: Criterion,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        discarded: Option<String>,
    },
    AttemptCancelled {
        atom: AtomId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    AtomFailed {
        atom: AtomId,
        class: FailureClass,
        criterion: Criterion,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        discarded: Option<String>,
    },
    AtomsReset {
        atoms: Vec<AtomId>,
    },
    AtomsRefined {
        atoms: Vec<AtomId>,
    },
    Calibrated {
        calibration: Box<WireCalibration>,
    },
    GgsDecided {
        decision: Box<WireDecision>,
    },
    AtomBlocked {
        atom: AtomId,
        reason: String,
    },
    AtomsPruned {
        atoms: Vec<AtomId>,
    },
    OrChosen {
        group: AtomId,
        chosen: AtomId,
        remaining: Vec<AtomId>,
        reason: String,
    },
    Backtracked {
        group: AtomId,
        from: AtomId,
        to: AtomId,
        reset: Vec<AtomId>,
    },
    BindingOverridden {
        atom: AtomId,
        binding: Binding,
    },
    CorrectionRecorded {
        correction: Correction,
    },
    BaseCaseChecked {
        evidence: Evidence,
    },
    RunPaused {},
    EditRejected {
        why: String,
        kept: String,
    },
    BlocksOverridden {
        atoms: Vec<AtomId>,
    },
    ChangesLanded {
        atom: AtomId,
        attempt: u32,
        changes: Changes,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
    },
    ChangesDiscarded {
        atom: AtomId,
        attempt: u32,
        changes: Changes,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept: Option<String>,
    },
    ChangesUndone {
        atom: AtomId,
        changes: Changes,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kept: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
    },
    WorkspaceRecovered {
        changes: Changes,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kept: Vec<String>,
    },
    Replanned {
        replan: u32,
        directive: MacroState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answers: Option<AtomId>,
        added: Vec<AtomId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<AtomId>,
        rationale: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        gates: Vec<String>,
    },
    PlanRefused {
        replan: u32,
        reasons: Vec<String>,
    },
    LlmCalled {
        role: String,
        model: String,
        prompt_tokens: u64,
        completion_tokens: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        estimated: bool,
        latency_ms: u64,
        attempts: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        atom: Option<AtomId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept: Option<String>,
    },
    ToolCalled {
        atom: AtomId,
        attempt: u32,
        tool: String,
        input: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    AgentRan {
        atom: AtomId,
        attempt: u32,
        worker: String,
        turns: u32,
        tool_calls: u32,
        refusals: u32,
    },
    CriterionJudged {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        atom: Option<AtomId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        criterion: Criterion,
        passed: bool,
        evidence: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        class: Option<FailureClass>,
    },
    RunStopped {
        stop: StopRecord,
    },
}

/// A GGS decision as written (`ggs_decided`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct WireDecision {
    pub round: u32,
    pub loss: WireLoss,
    pub grad_l: f64,
    pub gradient: Gradient,
    pub directive: MacroState,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub law2: bool,
    #[serde(default)]
    pub worsening: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub base_case_failed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_criterion: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<FailureMix>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_targets: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_tools: Vec<String>,
    pub replans: u32,
    pub elapsed_ms: u64,
    pub rationale: String,
    pub row: WireRow,
}

/// The loss terms as written.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct WireLoss {
    #[serde(rename = "D")]
    pub d: f64,
    #[serde(rename = "P")]
    pub p: f64,
    #[serde(rename = "Omega")]
    pub omega: f64,
    #[serde(rename = "L")]
    pub l: f64,
}

/// A row of the quantization matrix as written.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct WireRow {
    pub f: f64,
    pub sigma: f64,
    pub k: f64,
}

/// A memory calibration as written (`calibrated`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct WireCalibration {
    pub group: AtomId,
    pub alternatives: Vec<WireRecalled>,
    pub order: Vec<AtomId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub must_not: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub should_prefer: Vec<String>,
}

/// One alternative of a calibration as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct WireRecalled {
    pub alt: AtomId,
    pub space: String,
    pub entity: String,
    pub m_att: f64,
    pub m_dec: f64,
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<bool>,
}

/// Why a line is not a record this build can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Written by a newer aot.
    #[error("record version {0} is newer than this aot reads ({WIRE_VERSION})")]
    Newer(u32),
    /// Not a version that ever existed.
    #[error("record version 0 does not exist")]
    Zero,
}

impl From<Record> for WireRecord {
    fn from(record: Record) -> Self {
        WireRecord {
            v: WIRE_VERSION,
            seq: record.seq,
            at: record.at,
            event: record.event.into(),
        }
    }
}

impl TryFrom<WireRecord> for Record {
    type Error = WireError;

    /// Reads any version up to [`WIRE_VERSION`], upgrading what older ones meant.
    fn try_from(wire: WireRecord) -> Result<Self, WireError> {
        match wire.v {
            0 => return Err(WireError::Zero),
            v if v > WIRE_VERSION => return Err(WireError::Newer(v)),
            _ => {}
        }
        Ok(Record {
            v: WIRE_VERSION,
            seq: wire.seq,
            at: wire.at,
            event: event_from(wire.event, wire.v),
        })
    }
}

impl From<Decision> for WireDecision {
    fn from(d: Decision) -> Self {
        WireDecision {
            round: d.round,
            loss: WireLoss {
                d: d.loss.d,
                p: d.loss.p,
                omega: d.loss.omega,
                l: d.loss.l,
            },
            grad_l: d.grad_l,
            gradient: d.gradient,
            directive: d.directive,
            law2: d.law2,
            worsening: d.worsening,
            failed: d.failed.into_iter().map(String::from).collect(),
            base_case_failed: d.base_case_failed,
            failed_criterion: d.failed_criterion,
            failure_class: d.failure_class,
            blocked_tools: d.blocked_tools,
            blocked_targets: d.blocked_targets,
            failed_tools: d.failed_tools,
            replans: d.replans,
            elapsed_ms: d.elapsed_ms,
            rationale: d.rationale,
            row: WireRow {
                f: d.row.f,
                sigma: d.row.sigma,
                k: d.row.k,
            },
        }
    }
}

impl WireDecision {
    /// The domain decision, as version `v` meant it.
    fn into_decision(self, v: u32) -> Decision {
        let decision = Decision {
            round: self.round,
            loss: Loss {
                d: self.loss.d,
                p: self.loss.p,
                omega: self.loss.omega,
                l: self.loss.l,
            },
            grad_l: self.grad_l,
            gradient: self.gradient,
            directive: self.directive,
            law2: self.law2,
            worsening: self.worsening,
            failed: self.failed.into_iter().map(AtomId::from).collect(),
            base_case_failed: self.base_case_failed,
            failed_criterion: self.failed_criterion,
            failure_class: self.failure_class,
            blocked_tools: self.blocked_tools,
            blocked_targets: self.blocked_targets,
            failed_tools: self.failed_tools,
            replans: self.replans,
            elapsed_ms: self.elapsed_ms,
            rationale: self.rationale,
            row: Row {
                f: self.row.f,
                sigma: self.row.sigma,
                k: self.row.k,
            },
        };
        if v == 1 {
            decision.without_v1_sentinel()
        } else {
            decision
        }
    }
}

impl From<Calibration> for WireCalibration {
    fn from(c: Calibration) -> Self {
        WireCalibration {
            group: c.group,
            alternatives: c
                .alternatives
                .into_iter()
                .map(|r| WireRecalled {
                    alt: r.alt,
                    space: r.space,
                    entity: r.entity,
                    m_att: r.m_att,
                    m_dec: r.m_dec,
                    action: r.action,
                    confirmed: r.confirmed,
                })
                .collect(),
            order: c.order,
            must_not: c.must_not,
            should_prefer: c.should_prefer,
        }
    }
}

/// A failed attempt carried over by a compaction.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct WireFailure {
    pub atom: AtomId,
    pub attempt: u32,
    pub criterion: Criterion,
    pub class: FailureClass,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discarded: Option<String>,
}

impl From<(AtomId, Reflection)> for WireFailure {
    fn from((atom, r): (AtomId, Reflection)) -> Self {
        WireFailure {
            atom,
            attempt: r.attempt,
            criterion: r.criterion,
            class: r.class,
            message: r.message,
            exit_code: r.ended.exit_code,
            signal: r.ended.signal,
            summary: r.ended.summary,
            discarded: r.ended.discarded,
        }
    }
}

impl From<WireFailure> for (AtomId, Reflection) {
    fn from(f: WireFailure) -> Self {
        (
            f.atom,
            Reflection {
                attempt: f.attempt,
                criterion: f.criterion,
                class: f.class,
                message: f.message,
                ended: Ended {
                    exit_code: f.exit_code,
                    signal: f.signal,
                    summary: f.summary,
                    discarded: f.discarded,
                },
            },
        )
    }
}

impl From<WireCalibration> for Calibration {
    fn from(c: WireCalibration) -> Self {
        Calibration {
            group: c.group,
            alternatives: c
                .alternatives
                .into_iter()
                .map(|r| Recalled {
                    alt: r.alt,
                    space: r.space,
                    entity: r.entity,
                    m_att: r.m_att,
                    m_dec: r.m_dec,
                    action: r.action,
                    confirmed: r.confirmed,
                })
                .collect(),
            order: c.order,
            must_not: c.must_not,
            should_prefer: c.should_prefer,
        }
    }
}

impl From<Event> for WireEvent {
    fn from(event: Event) -> Self {
        use WireEvent as W;
        match event {
            Event::Snapshot { state } => W::Snapshot { state },
            Event::Compacted { state, failures } => W::Compacted {
                state,
                failures: failures.into_iter().map(Into::into).collect(),
            },
            Event::UserEdited {
                objective,
                control,
                workers,
                llm,
                atoms,
            } => W::UserEdited {
                objective,
                control,
                workers,
                llm,
                atoms,
            },
            Event::ControlSet { control } => W::ControlSet { control },
            Event::RunStarted { pid, yes } => W::RunStarted { pid, yes },
            Event::IterationStarted { iteration } => W::IterationStarted { iteration },
            Event::AtomStarted { atom, attempt } => W::AtomStarted { atom, attempt },
            Event::AtomSolved { atom, binding } => W::AtomSolved { atom, binding },
            Event::AttemptFailed {
                atom,
                attempt,
                class,
                criterion,
                message,
                ended,
            } => W::AttemptFailed {
                atom,
                attempt,
                class,
                criterion,
                message,
                exit_code: ended.exit_code,
                signal: ended.signal,
                summary: ended.summary,
                discarded: ended.discarded,
            },
            Event::AttemptCancelled { atom, why } => W::AttemptCancelled { atom, why },
            Event::AtomFailed {
                atom,
                class,
                criterion,
                message,
                ended,
            } => W::AtomFailed {
                atom,
                class,
                criterion,
                message,
                exit_code: ended.exit_code,
                signal: ended.signal,
                summary: ended.summary,
                discarded: ended.discarded,
            },
            Event::AtomsReset { atoms } => W::AtomsReset { atoms },
            Event::AtomsRefined { atoms } => W::AtomsRefined { atoms },
            Event::Calibrated { calibration } => W::Calibrated {
                calibration: Box::new((*calibration).into()),
            },
            Event::GgsDecided { decision } => W::GgsDecided {
                decision: Box::new((*decision).into()),
            },
            Event::AtomBlocked { atom, reason } => W::AtomBlocked { atom, reason },
            Event::AtomsPruned { atoms } => W::AtomsPruned { atoms },
            Event::OrChosen {
                group,
                chosen,
                remaining,
                reason,
            } => W::OrChosen {
                group,
                chosen,
                remaining,
                reason,
            },
            Event::Backtracked { group, from, to, reset } => W::Backtracked { group, from, to, reset },
            Event::BindingOverridden { atom, binding } => W::BindingOverridden { atom, binding },
            Event::CorrectionRecorded { correction } => W::CorrectionRecorded { correction },
            Event::BaseCaseChecked { evidence } => W::BaseCaseChecked { evidence },
            Event::RunPaused {} => W::RunPaused {},
            Event::EditRejected { why, kept } => W::EditRejected { why, kept },
            Event::BlocksOverridden { atoms } => W::BlocksOverridden { atoms },
            Event::ChangesLanded {
                atom,
                attempt,
                changes,
                commit,
            } => W::ChangesLanded {
                atom,
                attempt,
                changes,
                commit,
            },
            Event::ChangesDiscarded {
                atom,
                attempt,
                changes,
                kept,
            } => W::ChangesDiscarded {
                atom,
                attempt,
                changes,
                kept,
            },
            Event::ChangesUndone {
                atom,
                changes,
                kept,
                commit,
            } => W::ChangesUndone {
                atom,
                changes,
                kept,
                commit,
            },
            Event::WorkspaceRecovered { changes, kept } => W::WorkspaceRecovered { changes, kept },
            Event::Replanned {
                replan,
                directive,
                answers,
                added,
                group,
                rationale,
                gates,
            } => W::Replanned {
                replan,
                directive,
                answers,
                added,
                group,
                rationale,
                gates,
            },
            Event::PlanRefused { replan, reasons } => W::PlanRefused { replan, reasons },
            Event::LlmCalled {
                role,
                model,
                prompt_tokens,
                completion_tokens,
                estimated,
                latency_ms,
                attempts,
                error,
                atom,
                cost,
                kept,
            } => W::LlmCalled {
                role,
                model,
                prompt_tokens,
                completion_tokens,
                estimated,
                latency_ms,
                attempts,
                error,
                atom,
                cost,
                kept,
            },
            Event::ToolCalled {
                atom,
                attempt,
                tool,
                input,
                refused,
                exit_code,
            } => W::ToolCalled {
                atom,
                attempt,
                tool,
                input,
                refused,
                exit_code,
            },
            Event::AgentRan {
                atom,
                attempt,
                worker,
                turns,
                tool_calls,
                refusals,
            } => W::AgentRan {
                atom,
                attempt,
                worker,
                turns,
                tool_calls,
                refusals,
            },
            Event::CriterionJudged {
                atom,
                attempt,
                criterion,
                passed,
                evidence,
                class,
            } => W::CriterionJudged {
                atom,
                attempt,
                criterion,
                passed,
                evidence,
                class,
            },
            Event::RunStopped { stop } => W::RunStopped { stop },
        }
    }
}

/// The domain event of a wire event written as version `v`.
fn event_from(event: WireEvent, v: u32) -> Event {
    use WireEvent as W;
    match event {
        W::Snapshot { state } => Event::Snapshot { state },
        W::Compacted { state, failures } => Event::Compacted {
            state,
            failures: failures.into_iter().map(Into::into).collect(),
        },
        W::UserEdited {
            objective,
            control,
            workers,
            llm,
            atoms,
        } => Event::UserEdited {
            objective,
            control,
            workers,
            llm,
            atoms,
        },
        W::ControlSet { control } => Event::ControlSet { control },
        W::RunStarted { pid, yes } => Event::RunStarted { pid, yes },
        W::IterationStarted { iteration } => Event::IterationStarted { iteration },
        W::AtomStarted { atom, attempt } => Event::AtomStarted { atom, attempt },
        W::AtomSolved { atom, binding } => Event::AtomSolved { atom, binding },
        W::AttemptFailed {
            atom,
            attempt,
            class,
            criterion,
            message,
            exit_code,
            signal,
            summary,
            discarded,
        } => Event::AttemptFailed {
            atom,
            attempt,
            class,
            criterion,
            message,
            ended: Ended {
                exit_code,
                signal,
                summary,
                discarded,
            },
        },
        W::AttemptCancelled { atom, why } => Event::AttemptCancelled { atom, why },
        W::AtomFailed {
            atom,
            class,
            criterion,
            message,
            exit_code,
            signal,
            summary,
            discarded,
        } => Event::AtomFailed {
            atom,
            class,
            criterion,
            message,
            ended: Ended {
                exit_code,
                signal,
                summary,
                discarded,
            },
        },
        W::AtomsReset { atoms } => Event::AtomsReset { atoms },
        W::AtomsRefined { atoms } => Event::AtomsRefined { atoms },
        W::Calibrated { calibration } => Event::Calibrated {
            calibration: Box::new((*calibration).into()),
        },
        W::GgsDecided { decision } => Event::GgsDecided {
            decision: Box::new(decision.into_decision(v)),
        },
        W::AtomBlocked { atom, reason } => Event::AtomBlocked { atom, reason },
        W::AtomsPruned { atoms } => Event::AtomsPruned { atoms },
        W::OrChosen {
            group,
            chosen,
            remaining,
            reason,
        } => Event::OrChosen {
            group,
            chosen,
            remaining,
            reason,
        },
        W::Backtracked { group, from, to, reset } => Event::Backtracked { group, from, to, reset },
        W::BindingOverridden { atom, binding } => Event::BindingOverridden { atom, binding },
        W::CorrectionRecorded { correction } => Event::CorrectionRecorded { correction },
        W::BaseCaseChecked { evidence } => Event::BaseCaseChecked { evidence },
        W::RunPaused {} => Event::RunPaused {},
        W::EditRejected { why, kept } => Event::EditRejected { why, kept },
        W::BlocksOverridden { atoms } => Event::BlocksOverridden { atoms },
        W::ChangesLanded {
            atom,
            attempt,
            changes,
            commit,
        } => Event::ChangesLanded {
            atom,
            attempt,
            changes,
            commit,
        },
        W::ChangesDiscarded {
            atom,
            attempt,
            changes,
            kept,
        } => Event::ChangesDiscarded {
            atom,
            attempt,
            changes,
            kept,
        },
        W::ChangesUndone {
            atom,
            changes,
            kept,
            commit,
        } => Event::ChangesUndone {
            atom,
            changes,
            kept,
            commit,
        },
        W::WorkspaceRecovered { changes, kept } => Event::WorkspaceRecovered { changes, kept },
        W::Replanned {
            replan,
            directive,
            answers,
            added,
            group,
            rationale,
            gates,
        } => Event::Replanned {
            replan,
            directive,
            answers,
            added,
            group,
            rationale,
            gates,
        },
        W::PlanRefused { replan, reasons } => Event::PlanRefused { replan, reasons },
        W::LlmCalled {
            role,
            model,
            prompt_tokens,
            completion_tokens,
            estimated,
            latency_ms,
            attempts,
            error,
            atom,
            cost,
            kept,
        } => Event::LlmCalled {
            role,
            model,
            prompt_tokens,
            completion_tokens,
            estimated,
            latency_ms,
            attempts,
            error,
            atom,
            cost,
            kept,
        },
        W::ToolCalled {
            atom,
            attempt,
            tool,
            input,
            refused,
            exit_code,
        } => Event::ToolCalled {
            atom,
            attempt,
            tool,
            input,
            refused,
            exit_code,
        },
        W::AgentRan {
            atom,
            attempt,
            worker,
            turns,
            tool_calls,
            refusals,
        } => Event::AgentRan {
            atom,
            attempt,
            worker,
            turns,
            tool_calls,
            refusals,
        },
        W::CriterionJudged {
            atom,
            attempt,
            criterion,
            passed,
            evidence,
            class,
        } => Event::CriterionJudged {
            atom,
            attempt,
            criterion,
            passed,
            evidence,
            class,
        },
        W::RunStopped { stop } => Event::RunStopped { stop },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision_line(v: u32, failed: &str, extra: &str) -> String {
        format!(
            r#"{{"v":{v},"seq":1,"at":"2026-01-01T00:00:00.000Z","event":{{"type":"ggs_decided","decision":{{"round":1,"loss":{{"D":1.0,"P":1.0,"Omega":0.0,"L":0.5}},"grad_l":0.0,"gradient":"plateau","directive":"refine","failed":[{failed}]{extra},"replans":0,"elapsed_ms":1,"rationale":"r","row":{{"f":0.5,"sigma":-1.0,"k":0.05}}}}}}}}"#
        )
    }

    fn decision(line: &str) -> Decision {
        let record: Record = serde_json::from_str(line).expect("a record");
        match record.event {
            Event::GgsDecided { decision } => *decision,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn version_1s_base_case_sentinel_becomes_base_case_failed() {
        let d = decision(&decision_line(1, r#""build","base_case""#, ""));
        assert_eq!(d.failed, [AtomId::from("build")]);
        assert!(d.base_case_failed);
    }

    #[test]
    fn in_version_2_an_atom_may_be_called_base_case() {
        let d = decision(&decision_line(2, r#""base_case""#, ""));
        assert_eq!(d.failed, [AtomId::from("base_case")]);
        assert!(!d.base_case_failed);
        let d = decision(&decision_line(2, r#""a""#, r#","base_case_failed":true"#));
        assert!(d.base_case_failed);
    }

    #[test]
    fn newer_and_zero_versions_are_refused_with_the_reason() {
        let newer = serde_json::from_str::<Record>(&decision_line(WIRE_VERSION + 1, "", "")).unwrap_err();
        assert!(newer.to_string().contains("is newer than this aot reads"), "{newer}");
        assert!(serde_json::from_str::<Record>(&decision_line(0, "", "")).is_err());
    }

    #[test]
    fn records_are_written_at_the_current_version() {
        let record = Record {
            v: 1,
            seq: 3,
            at: Timestamp::from_millis(0),
            event: Event::RunPaused {},
        };
        let line = serde_json::to_string(&record).expect("serializes");
        assert!(line.starts_with(&format!(r#"{{"v":{WIRE_VERSION},"seq":3,"#)), "{line}");
    }
}
