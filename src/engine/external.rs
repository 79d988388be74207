//! What reaches a running loop from outside: other processes' journal records
//! (`aot stop`, `aot redirect`) and hand edits of the state file. A hand edit
//! is classified by [`crate::correct::from_edit`] into corrections, as a
//! redirect would make them; one that cannot be applied is saved aside.

use super::{Engine, EngineError};
use crate::store::TakenEdit;
use crate::store::watch::{Changed, Watch};

impl Engine<'_> {
    /// Folds in what other processes recorded (e.g. `aot stop`, `aot redirect`).
    pub(super) fn sync_external(&mut self) -> Result<(), EngineError> {
        self.record(Vec::new())?;
        Ok(())
    }

    /// Waits for the next change of the watched files (forever, without a watch).
    pub(super) async fn next_change(watch: &mut Option<Watch>) -> Changed {
        match watch {
            Some(w) => w.changed().await,
            None => std::future::pending().await,
        }
    }

    /// Reacts to a change of the watched files: other processes' journal
    /// records, or a hand edit of the state file.
    pub(super) async fn on_change(&mut self, changed: Changed) -> Result<(), EngineError> {
        match changed {
            Changed::Journal => self.sync_external(),
            Changed::State => {
                let store = &*self.store;
                if super::off_the_loop(|| store.disk_is_ours()) {
                    return Ok(());
                }
                self.take_hand_edit().await
            }
        }
    }

    /// Takes in a hand edit of the state file: a valid one becomes corrections
    /// (as a redirect would), an invalid one or one of engine-owned fields is
    /// saved aside and reported, and the loop goes on with its last good state.
    async fn take_hand_edit(&mut self) -> Result<(), EngineError> {
        // The watch signals a change once the file has been quiet for a
        // moment (editors write in several steps). Another aot process (stop,
        // redirect) writes through the journal: what its records explain is
        // not an edit, so they are taken in first.
        self.sync_external()?;
        for _ in 0..10 {
            match self.with_views(|store, views| store.take_edit(views))? {
                TakenEdit::None => return Ok(()),
                TakenEdit::Changed => continue,
                TakenEdit::Merged => {}
                TakenEdit::Refused { why, aside } => {
                    // Diagnostics with source excerpts read best on lines of their own.
                    let sep = if why.contains('\n') { "\n" } else { "; " };
                    self.observer.warn(&format!(
                        "{why}{sep}the edit was not applied; it is saved as {} and the file holds the last good state",
                        aside.display()
                    ));
                }
            }
            self.report_preserved();
            return Ok(());
        }
        Ok(())
    }
}
