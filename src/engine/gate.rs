//! The gate a run passes before any work, and the run's start record.

use super::{Ended, Engine, EngineError};
use crate::journal::event::Event;
use crate::state::{AtomId, AtomStatus, StateFile, StopReason};

/// Returns what the objective still lacks to be aligned (empty = aligned).
pub fn alignment_gaps(state: &StateFile) -> Vec<&'static str> {
    let o = &state.objective;
    let mut gaps = Vec::new();
    let blank = |v: &Option<String>| v.as_deref().is_none_or(|s| s.trim().is_empty());
    if blank(&o.goal) {
        gaps.push("objective.goal (what the work is for)");
    }
    if blank(&o.background_intent) {
        gaps.push("objective.background_intent (why it matters)");
    }
    if blank(&o.deliverables) {
        gaps.push("objective.deliverables (what should be produced)");
    }
    if blank(&o.definition_of_done) {
        gaps.push("objective.definition_of_done (when it is done, in words)");
    }
    if o.base_case.is_none() {
        gaps.push("objective.base_case.command (a command whose exit 0 means done)");
    }
    if state.graph.atoms.is_empty() {
        gaps.push("graph.atoms (at least one atom)");
    }
    gaps
}

impl Engine<'_> {
    /// Stops at the gate when the objective is not aligned; `None`: the run
    /// may start. (An atom no worker can take fails when it is reached, with
    /// the settings to add: an unused one stops nothing.)
    pub(super) fn gate(&mut self) -> Result<Option<Ended>, EngineError> {
        let gaps = alignment_gaps(&self.state);
        if !gaps.is_empty() {
            let message = format!("not aligned; missing: {}", gaps.join("; "));
            return self.stop(StopReason::Gate, message, None).map(Some);
        }
        Ok(None)
    }

    /// Journals the run's start. A new run starts after the user had the
    /// chance to fix what blocked the last one; work a crash interrupted does
    /// not count as an attempt; a stop requested while nothing ran does not
    /// stop this run.
    pub(super) fn begin(&mut self) -> Result<(), EngineError> {
        let with = |status: AtomStatus| -> Vec<AtomId> {
            let atoms = &self.state.graph.atoms;
            atoms
                .iter()
                .filter(|(_, a)| a.status == status)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let (blocked, interrupted) = (with(AtomStatus::Blocked), with(AtomStatus::Running));
        let mut events: Vec<Event> = interrupted
            .into_iter()
            .map(|atom| Event::AttemptCancelled { atom, why: None })
            .collect();
        if !blocked.is_empty() {
            events.push(Event::AtomsReset { atoms: blocked });
        }
        if self.state.control.stop_requested {
            let control = crate::state::Control {
                stop_requested: false,
                stop_reason: None,
                ..self.state.control.clone()
            };
            events.push(Event::ControlSet { control });
        }
        events.push(Event::RunStarted {
            pid: std::process::id(),
            yes: self.options.yes,
        });
        self.record(events)?;
        Ok(())
    }
}
