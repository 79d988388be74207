//! The landing part of the engine: what each solved atom's work landed in
//! the user's tree (for a backtrack to undo), and what a backtrack gave up
//! and is owed an undo. The landing itself — the merge, the write-ahead
//! record, the settling after a kill — is the workspace's
//! (`workspace/mod.rs`); this part keeps the engine's account of it.

use indexmap::IndexMap;

use crate::journal::event::{Event, Record};
use crate::model::Changes;
use crate::state::{AtomId, Binding};

/// What landed, in landing order, and the landings owed an undo.
#[derive(Debug, Default)]
pub(super) struct Landings {
    landed: IndexMap<AtomId, Changes>,
    owed: Vec<(AtomId, Changes)>,
}

impl Landings {
    /// The landings the solved atoms' bindings name, in the order they
    /// landed; an OR atom's binding repeats its alternative's, so one
    /// landing is kept once.
    pub(super) fn of(bindings: &IndexMap<AtomId, Binding>) -> Self {
        let mut landed: Vec<_> = bindings
            .iter()
            .filter_map(|(atom, b)| Some((b.at, atom.clone(), b.changes.clone()?)))
            .collect();
        landed.sort_by_key(|(at, ..)| *at);
        let mut seen = std::collections::HashSet::new();
        landed.retain(|(_, _, changes)| seen.insert(changes.after.clone()));
        Self {
            landed: landed.into_iter().map(|(_, atom, changes)| (atom, changes)).collect(),
            owed: Vec::new(),
        }
    }

    /// `atom`'s work landed these changes.
    pub(super) fn landed(&mut self, atom: AtomId, changes: Changes) {
        self.landed.insert(atom, changes);
    }

    /// Landings owed an undo (a start's account from the journal).
    pub(super) fn owe(&mut self, owed: Vec<(AtomId, Changes)>) {
        self.owed.extend(owed);
    }

    /// Whether an undo is owed.
    pub(super) fn owes(&self) -> bool {
        !self.owed.is_empty()
    }

    /// The newest landing owed an undo, taken off the account.
    pub(super) fn next_owed(&mut self) -> Option<(AtomId, Changes)> {
        self.owed.pop()
    }

    /// Without isolation nothing can be undone: the account is dropped.
    pub(super) fn forget_owed(&mut self) {
        self.owed.clear();
    }

    /// Takes a record in: a backtrack gives up the branch it leaves, so what
    /// that branch's atoms landed is owed an undo; a reset or an overridden
    /// binding (the user's) keeps the files.
    pub(super) fn track(&mut self, event: &Event) {
        match event {
            Event::Backtracked { from, reset, .. } => {
                // Queued in landing order: the newest landing is undone first.
                let given_up: std::collections::HashSet<&AtomId> = reset.iter().chain(std::iter::once(from)).collect();
                let (undo, keep) = std::mem::take(&mut self.landed)
                    .into_iter()
                    .partition(|(atom, _)| given_up.contains(atom));
                self.landed = keep;
                self.owed.extend(undo);
            }
            Event::AtomsReset { atoms } => {
                for atom in atoms {
                    self.landed.shift_remove(atom);
                }
            }
            Event::BindingOverridden { atom, .. } => {
                self.landed.shift_remove(atom);
            }
            _ => {}
        }
    }
}

/// The landings a journal says are owed an undo, in landing order: landed
/// (`changes_landed`), then given up by a backtrack (as its `from` or in its
/// `reset`), and not undone since. A `changes_undone` of an atom settles its
/// latest owed landing; an atom that lands again settles its owed ones (the
/// new landing supersedes them: undoing the old one could revert it). A reset
/// or an overridden binding keeps the files, as a running loop does. A
/// snapshot or compaction starts over: what came before it is not known.
pub fn owed_undos(records: &[Record]) -> Vec<(AtomId, Changes)> {
    let mut landed: Vec<(AtomId, Changes)> = Vec::new();
    let mut owed: Vec<(AtomId, Changes)> = Vec::new();
    for record in records {
        match &record.event {
            Event::Snapshot { .. } | Event::Compacted { .. } => {
                landed.clear();
                owed.clear();
            }
            Event::ChangesLanded { atom, changes, .. } => {
                owed.retain(|(a, _)| a != atom);
                landed.push((atom.clone(), changes.clone()));
            }
            Event::AtomsReset { atoms } => landed.retain(|(a, _)| !atoms.contains(a)),
            Event::BindingOverridden { atom, .. } => landed.retain(|(a, _)| a != atom),
            Event::Backtracked { from, reset, .. } => {
                let (given_up, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut landed)
                    .into_iter()
                    .partition(|(a, _)| a == from || reset.contains(a));
                landed = kept;
                owed.extend(given_up);
            }
            Event::ChangesUndone { atom, .. } => {
                if let Some(at) = owed.iter().rposition(|(a, _)| a == atom) {
                    owed.remove(at);
                }
            }
            _ => {}
        }
    }
    owed
}
