//! The event journal: every transition of a state file as a domain event, the
//! fold that turns events into state, and the append-only JSONL file that
//! keeps them (`<state>.journal.jsonl`).

pub mod event;
mod file;
pub mod fold;
pub mod wire;

pub use event::{Event, Record};
pub use file::{Compaction, Contents, Journal, JournalError, TornTail, from_bytes, path_for, read, same_file};
pub use fold::{Effect, Fold, Folded, History, Reflection, apply, apply_planned, fold, folded};
