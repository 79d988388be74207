//! Watching a state file for changes made by others: `aot stop` (through the
//! journal) and, later, hand edits. Editors save by writing a new file and
//! renaming it over the old one, which a watch on the file's inode would miss,
//! so the parent directory is watched and events are filtered by file name.

use std::ffi::OsString;
use std::path::Path;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

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
    _watcher: notify::RecommendedWatcher,
    /// Receives a message for every change of the watched files.
    pub changes: UnboundedReceiver<Changed>,
}

/// Watches the state file and its journal.
pub fn watch(state: &Path, journal: &Path) -> notify::Result<Watch> {
    let dir = match state.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let names: [(OsString, Changed); 2] = [
        (state.file_name().unwrap_or_default().to_os_string(), Changed::State),
        (journal.file_name().unwrap_or_default().to_os_string(), Changed::Journal),
    ];
    let (tx, changes) = unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
        let Ok(event) = result else { return };
        if matches!(event.kind, EventKind::Access(_)) {
            return;
        }
        for path in &event.paths {
            if let Some(name) = path.file_name()
                && let Some((_, which)) = names.iter().find(|(n, _)| n == name)
            {
                // A closed receiver means the run is over; nothing to tell.
                let _ = tx.send(*which);
            }
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(Watch {
        _watcher: watcher,
        changes,
    })
}
