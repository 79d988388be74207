//! Watching a state file for changes made by others: `aot stop` and
//! `aot redirect` (through the journal) and hand edits of the file. Editors
//! save by writing a new file and renaming it over the old one, which a watch
//! on the file's inode would miss, so the parent directory is watched and
//! events are filtered by file name.
//!
//! The two files are watched differently. A journal append is one complete
//! line written by aot, and a stop must reach the loop at once: it is signalled
//! as it happens. A hand edit arrives in several steps (truncate and write,
//! chunks, a rename), so the state file's changes go through a debouncer and
//! are signalled once the file has been quiet for [`QUIET`] — never while it
//! is still being written, which would read half an edit.
//!
//! Signals are bounded: one pending signal per file. A change while one is
//! pending adds nothing, since the reader looks at the whole file anyway.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{EventHandler, RecursiveMode, Watcher};
use notify_debouncer_mini::{DebounceEventResult, DebouncedEventKind, Debouncer};
use tokio::sync::mpsc::{Receiver, Sender, channel};

/// How long the state file must be unchanged before a change is signalled.
pub const QUIET: Duration = Duration::from_millis(100);

/// Which file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// The journal: another process recorded something (`aot stop`).
    Journal,
    /// The state file itself.
    State,
}

/// A live watch; dropping it stops watching.
pub struct Watch {
    _journal: notify::RecommendedWatcher,
    _state: Debouncer<NoAccess>,
    journal: Receiver<()>,
    state: Receiver<()>,
}

impl Watch {
    /// Waits for the next change; journal changes first when both are pending.
    /// Waits forever once the watchers are gone.
    pub async fn changed(&mut self) -> Changed {
        tokio::select! {
            biased;
            Some(()) = self.journal.recv() => Changed::Journal,
            Some(()) = self.state.recv() => Changed::State,
            else => std::future::pending().await,
        }
    }

    /// Blocks until the journal changes; `false` once the watcher is gone.
    /// For callers outside a runtime (`aot log --follow`).
    pub fn journal_changed_blocking(&mut self) -> bool {
        self.journal.blocking_recv().is_some()
    }
}

/// Watches the state file and its journal.
pub fn watch(state: &Path, journal: &Path) -> notify::Result<Watch> {
    let dir = match state.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (journal_tx, journal_rx) = channel(1);
    let journal_name = file_name(journal);
    let mut journal_watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
        if let Ok(event) = result
            && !event.kind.is_access()
            && event.paths.iter().any(|p| p.file_name() == Some(&journal_name))
        {
            signal(&journal_tx);
        }
    })?;
    journal_watcher.watch(&dir, RecursiveMode::NonRecursive)?;

    let (state_tx, state_rx) = channel(1);
    let state_name = file_name(state);
    let mut state_watcher = notify_debouncer_mini::new_debouncer_opt::<_, NoAccess>(
        notify_debouncer_mini::Config::default().with_timeout(QUIET),
        move |result: DebounceEventResult| {
            if let Ok(events) = result
                && events
                    .iter()
                    .any(|e| e.kind == DebouncedEventKind::Any && e.path.file_name() == Some(&state_name))
            {
                signal(&state_tx);
            }
        },
    )?;
    state_watcher.watcher().watch(&dir, RecursiveMode::NonRecursive)?;

    Ok(Watch {
        _journal: journal_watcher,
        _state: state_watcher,
        journal: journal_rx,
        state: state_rx,
    })
}

fn file_name(path: &Path) -> OsString {
    path.file_name().unwrap_or_default().to_os_string()
}

/// Leaves one pending signal: a full channel already has one, and a closed
/// one means the run is over.
fn signal(tx: &Sender<()>) {
    let _ = tx.try_send(());
}

/// The recommended watcher without access events. Reading the state file
/// opens it, and an open is an event: without this filter every read would
/// be signalled as a change, and the reader would read again.
pub struct NoAccess(notify::RecommendedWatcher);

impl Watcher for NoAccess {
    fn new<F: EventHandler>(mut handler: F, config: notify::Config) -> notify::Result<Self> {
        let filtered = move |event: notify::Result<notify::Event>| {
            if !matches!(&event, Ok(e) if e.kind.is_access()) {
                handler.handle_event(event);
            }
        };
        notify::RecommendedWatcher::new(filtered, config).map(NoAccess)
    }

    fn watch(&mut self, path: &Path, mode: RecursiveMode) -> notify::Result<()> {
        self.0.watch(path, mode)
    }

    fn unwatch(&mut self, path: &Path) -> notify::Result<()> {
        self.0.unwatch(path)
    }

    fn kind() -> notify::WatcherKind {
        notify::RecommendedWatcher::kind()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::{Duration, Instant};

    use super::{Changed, QUIET, Watch, watch};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// The next change within `bound`, if any.
    fn next(rt: &tokio::runtime::Runtime, watch: &mut Watch, bound: Duration) -> Option<Changed> {
        rt.block_on(async { tokio::time::timeout(bound, watch.changed()).await.ok() })
    }

    fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Watch) {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("aot.yaml");
        let journal = dir.path().join("aot.yaml.journal.jsonl");
        std::fs::write(&state, "version: 1\n").expect("write");
        std::fs::write(&journal, "").expect("write");
        let watch = watch(&state, &journal).expect("watch");
        (dir, state, journal, watch)
    }

    #[test]
    fn a_journal_append_is_signalled_without_waiting_for_quiet() {
        let rt = runtime();
        let (_dir, _state, journal, mut watch) = setup();
        let appended = Instant::now();
        let mut file = std::fs::OpenOptions::new().append(true).open(&journal).expect("open");
        file.write_all(b"{}\n").expect("append");
        assert_eq!(next(&rt, &mut watch, Duration::from_secs(5)), Some(Changed::Journal));
        assert!(appended.elapsed() < QUIET, "a stop waited for the debounce");
    }

    #[test]
    fn a_state_file_written_in_steps_is_signalled_once_after_it_is_quiet() {
        let rt = runtime();
        let (_dir, state, _journal, mut watch) = setup();
        // An editor writing in chunks, each within the quiet period of the last.
        let mut file = std::fs::File::create(&state).expect("truncate");
        for chunk in ["version: 1\n", "objective:\n", "  goal: g\n"] {
            file.write_all(chunk.as_bytes()).expect("write");
            file.flush().expect("flush");
            std::thread::sleep(QUIET / 4);
        }
        let written = Instant::now();
        drop(file);
        assert_eq!(next(&rt, &mut watch, Duration::from_secs(5)), Some(Changed::State));
        assert!(written.elapsed() >= QUIET / 2, "signalled before the file was quiet");
        assert_eq!(next(&rt, &mut watch, QUIET * 3), None, "one edit, one signal");
    }

    #[test]
    fn reading_the_state_file_is_not_a_change() {
        let rt = runtime();
        let (_dir, state, _journal, mut watch) = setup();
        for _ in 0..5 {
            std::fs::read_to_string(&state).expect("read");
        }
        assert_eq!(next(&rt, &mut watch, QUIET * 3), None);
    }

    #[test]
    fn many_changes_leave_one_pending_signal_per_file() {
        let rt = runtime();
        let (_dir, state, journal, mut watch) = setup();
        let mut file = std::fs::OpenOptions::new().append(true).open(&journal).expect("open");
        for _ in 0..100 {
            file.write_all(b"{}\n").expect("append");
        }
        std::fs::write(&state, "version: 1\n# edited\n").expect("write");
        // The journal's events may reach its watcher while the first signal
        // is being taken, leaving a second; never one per append.
        let mut journal_signals = 0;
        let mut state_signals = 0;
        while let Some(changed) = next(
            &rt,
            &mut watch,
            if state_signals == 0 {
                Duration::from_secs(5)
            } else {
                QUIET * 3
            },
        ) {
            match changed {
                Changed::Journal => journal_signals += 1,
                Changed::State => state_signals += 1,
            }
        }
        assert_eq!(state_signals, 1, "one edit, one signal");
        assert!(
            (1..=2).contains(&journal_signals),
            "{journal_signals} signals for 100 appends"
        );
    }
}
