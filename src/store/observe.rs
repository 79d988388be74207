//! What a reader outside the loop sees: the state file folded with the journal
//! records ahead of it, and whether a loop is running on it right now.
//!
//! The runner appends every transition to the journal before it rewrites the
//! file (and batches file writes), so during a run the file lags the journal.
//! [`observe`] never shows that lag as the truth: it folds the journal, says
//! whether a live runner, a crashed one, or nobody produced the records the
//! file lacks, and names what the file holds that the runner has not taken (a
//! pending or a rejected hand edit).

use std::path::PathBuf;

use crate::journal::event::{Event, Record};
use crate::journal::{self, TornTail};
use crate::model::AtomId;
use crate::model::time::Timestamp;
use crate::state::document::{self, ReadError};
use crate::state::{AtomStatus, StateFile};

use super::{Paths, running_pid};

/// Where the shown state comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The state file: nothing newer exists.
    File,
    /// A loop runs now: the file folded with the journal records it has not saved yet.
    Live {
        /// The runner's process id.
        pid: u32,
    },
    /// No loop runs, but the journal holds records the file lacks (a run was
    /// killed before it saved): what `aot replay` (or any next command) gives.
    Replayed,
}

/// An atom a worker is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// The atom.
    pub atom: AtomId,
    /// Its attempt number.
    pub attempt: u32,
    /// When the attempt started, if the journal still holds its start.
    pub since: Option<Timestamp>,
}

/// A hand edit the runner refused, kept aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// When it was refused.
    pub at: Timestamp,
    /// Why.
    pub why: String,
    /// Where the edited text was saved.
    pub kept: PathBuf,
}

/// What the file holds that the shown state does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileNote {
    /// The file agrees with the journal (up to the records it has not saved yet).
    InStep,
    /// The file was edited and the edit is not in the journal yet: a running
    /// loop takes it within a moment, otherwise the next command does.
    PendingEdit,
    /// The file does not parse or validate; its problems, rendered.
    Invalid(String),
}

/// The observed state of a state file.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The state shown.
    pub state: StateFile,
    /// Where it comes from.
    pub source: Source,
    /// Journal records the file does not reflect yet.
    pub journal_ahead: u64,
    /// The revision the file itself was saved at (`None` when it is invalid).
    pub file_revision: Option<u64>,
    /// What the file holds compared with the state shown.
    pub file: FileNote,
    /// Atoms with a worker on them (only when a loop runs).
    pub running: Vec<Running>,
    /// Hand edits refused during the current journal whose saved copy still exists.
    pub rejected: Vec<Rejected>,
    /// A record cut short by a crash, skipped.
    pub torn: Option<TornTail>,
}

/// Why nothing could be observed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// The file cannot be read and no journal stands in for it.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The journal cannot be read.
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
    /// Neither a valid file nor a journal to rebuild it from.
    #[error("{} is not valid and has no journal to rebuild it from", .0.display())]
    Nothing(PathBuf),
}

/// Observes the state file and its journal.
pub fn observe(paths: &Paths) -> Result<Observed, ObserveError> {
    let file = document::read(&paths.state);
    let contents = match journal::read(&paths.journal) {
        Ok(contents) => Some(contents),
        Err(journal::JournalError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let pid = running_pid(paths);
    let records: &[Record] = contents.as_ref().map_or(&[], |c| &c.records);
    let last_seq = contents.as_ref().map_or(0, journal::Contents::last_seq);
    let replayed = journal::fold(records);

    let (file_state, file_note) = match file {
        Ok(doc) => (Some(doc.state), FileNote::InStep),
        Err(ReadError::Invalid(diagnostics)) if replayed.is_some() => {
            (None, FileNote::Invalid(diagnostics.render(false)))
        }
        Err(e) => return Err(e.into()),
    };
    let file_revision = file_state.as_ref().map(|s| s.run.revision);
    let journal_ahead = last_seq.saturating_sub(file_revision.unwrap_or(0));

    let source = match pid {
        Some(pid) => Source::Live { pid },
        None if replayed.is_some() && (file_state.is_none() || journal_ahead > 0) => Source::Replayed,
        None => Source::File,
    };
    let state = match (&source, replayed, file_state.clone()) {
        (Source::File, _, Some(file)) => file,
        (_, Some(replayed), _) => replayed,
        (_, None, Some(file)) => file,
        // An invalid file without a journal was returned as an error above.
        (_, None, None) => return Err(ObserveError::Nothing(paths.state.clone())),
    };
    let file_note = match (&file_note, &file_state) {
        (FileNote::InStep, Some(file)) if source != Source::File => {
            if edited_since_saved(file, records) {
                FileNote::PendingEdit
            } else {
                FileNote::InStep
            }
        }
        _ => file_note,
    };
    let running = match source {
        Source::Live { .. } => running_atoms(&state, records),
        _ => Vec::new(),
    };
    Ok(Observed {
        state,
        source,
        journal_ahead,
        file_revision,
        file: file_note,
        running,
        rejected: rejected_edits(records),
        torn: contents.and_then(|c| c.torn),
    })
}

/// Returns whether the file differs from what the journal held at the file's
/// revision — a hand edit the journal has not taken yet.
fn edited_since_saved(file: &StateFile, records: &[Record]) -> bool {
    let revision = file.run.revision;
    if records.first().is_some_and(|r| r.seq > revision) {
        // The journal began after this file was saved (from this file): compare
        // with the journal's first document, which is the file as it was read.
        return match records.first().map(|r| &r.event) {
            Some(Event::Snapshot { state } | Event::Compacted { state, .. }) => !file.user_part_eq(state),
            _ => false,
        };
    }
    match journal::fold(records.iter().take_while(|r| r.seq <= revision)) {
        Some(saved) => !file.user_part_eq(&saved),
        None => false,
    }
}

fn running_atoms(state: &StateFile, records: &[Record]) -> Vec<Running> {
    state
        .graph
        .atoms
        .iter()
        .filter(|(_, atom)| atom.status == AtomStatus::Running)
        .map(|(id, atom)| {
            let started = records.iter().rev().find_map(|r| match &r.event {
                Event::AtomStarted { atom: a, attempt } if a == id => Some((r.at, *attempt)),
                _ => None,
            });
            Running {
                atom: id.clone(),
                attempt: started.map_or(atom.attempts.max(1), |(_, attempt)| attempt),
                since: started.map(|(at, _)| at),
            }
        })
        .collect()
}

fn rejected_edits(records: &[Record]) -> Vec<Rejected> {
    records
        .iter()
        .filter_map(|r| match &r.event {
            Event::EditRejected { why, kept } => Some(Rejected {
                at: r.at,
                why: why.clone(),
                kept: PathBuf::from(kept),
            }),
            _ => None,
        })
        .filter(|r| r.kept.exists())
        .collect()
}
