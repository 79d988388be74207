//! The store: the state file and its journal as one durable unit.
//!
//! Every change is appended to the journal before the state file reflects it,
//! and the file is replaced atomically (temp file, fsync, rename, fsync of the
//! directory), so it is always a complete document. A short lock on a side file
//! serializes read-modify-write between processes; a runner lock allows one loop
//! per state file. An edit made by hand since the store last read the file is
//! detected by content hash and never silently overwritten: edits of user-owned
//! fields are merged (and journaled), anything else is refused and the engine's
//! document is saved aside.

pub mod observe;
pub mod watch;

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::journal::event::{Event, Record};
use crate::journal::fold::Folded;
use crate::journal::{self, Journal, JournalError, TornTail};
use crate::model::time::Clock;
use crate::state::StateFile;
use crate::state::document::{self, Document, Format, ReadError};

/// Where a state file's companions live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// The state file.
    pub state: PathBuf,
    /// The event journal, beside it.
    pub journal: PathBuf,
    /// The short read-modify-write lock, under `.aot/`.
    pub lock: PathBuf,
    /// The runner lock (holds the runner's pid), under `.aot/`.
    pub runner: PathBuf,
    /// The `.aot/` folder beside the state file.
    pub aot_dir: PathBuf,
}

impl Paths {
    /// Returns the companion paths of a state file.
    pub fn new(state: &Path) -> Self {
        let dir = match state.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = state.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let aot_dir = dir.join(".aot");
        Self {
            state: state.to_path_buf(),
            journal: journal::path_for(state),
            lock: aot_dir.join(format!("{name}.lock")),
            runner: aot_dir.join(format!("{name}.runner")),
            aot_dir,
        }
    }

    /// Returns the directory holding the state file.
    pub fn dir(&self) -> &Path {
        self.aot_dir.parent().unwrap_or(Path::new("."))
    }

    /// Returns `.aot/<state>.before-<revision>.<ext>`: where the user's part
    /// of the file is kept when a change writes it afresh.
    pub fn before(&self, revision: u64, format: Format) -> PathBuf {
        let name = self.state.file_name().unwrap_or_default().to_string_lossy();
        self.aot_dir
            .join(format!("{name}.before-{revision}.{}", format.extension()))
    }

    /// Returns `<state>.draft.<ext>`: where `aot align` keeps a planner's
    /// draft that did not validate.
    pub fn draft(&self, format: Format) -> PathBuf {
        let name = self.state.file_name().unwrap_or_default().to_string_lossy();
        self.state
            .with_file_name(format!("{name}.draft.{}", format.extension()))
    }

    /// Returns `<state>.rejected-<n>.<ext>` for the first unused `n`.
    pub fn next_rejected(&self, format: Format) -> PathBuf {
        let name = self
            .state
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        (1..)
            .map(|n| {
                self.state
                    .with_file_name(format!("{name}.rejected-{n}.{}", format.extension()))
            })
            .find(|p| std::fs::symlink_metadata(p).is_err())
            .unwrap_or_else(|| {
                self.state
                    .with_file_name(format!("{name}.rejected.{}", format.extension()))
            })
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state file could not be read or is invalid.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The journal could not be read or written.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// Another I/O failure.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Another loop holds the runner lock.
    #[error("aot is already running on {} ({})", state.display(), match pid { Some(pid) => format!("pid {pid}"), None => "pid unknown".to_string() })]
    AlreadyRunning {
        /// The state file.
        state: PathBuf,
        /// The holder's pid, as it recorded it.
        pid: Option<u32>,
    },
    /// The file on disk was changed in a way that cannot be merged.
    #[error("{} was edited while aot held it ({}); the file was left as edited and aot's version saved as {}", state.display(), reason, rejected.display())]
    Conflict {
        /// The state file.
        state: PathBuf,
        /// What made the edit unmergeable.
        reason: String,
        /// Where the engine's document was saved.
        rejected: PathBuf,
    },
    /// The state file says it reflects journal records the journal does not have.
    #[error("{} is at revision {revision} but its journal {} ends at {last}; move the journal aside to start a new one", state.display(), journal.display())]
    JournalBehind {
        /// The state file.
        state: PathBuf,
        /// The journal.
        journal: PathBuf,
        /// The file's revision.
        revision: u64,
        /// The journal's last sequence number.
        last: u64,
    },
    /// The state could not be serialized.
    #[error("cannot serialize the state: {0}")]
    Serialize(String),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Something worth telling the user that did not stop the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The journal ended in a torn line, which was skipped and truncated.
    TornTail(TornTail),
    /// The file was behind the journal (a crash between the two writes); the
    /// missing records were applied.
    Recovered {
        /// How many records were applied.
        records: usize,
    },
    /// The file had hand edits of user-owned fields, now journaled.
    MergedEdit,
    /// The file had hand edits of engine-owned fields, recorded as a new snapshot.
    EngineFieldsEdited(Vec<String>),
    /// The journal was started with a snapshot of the file.
    JournalStarted,
    /// The file had a record (`status:` at this revision) but there was no
    /// journal: a new one was started from the file.
    JournalRestarted {
        /// The file's revision.
        revision: u64,
    },
}

/// What a read-modify-write ([`Store::transact`]) did.
#[derive(Debug)]
pub struct Transacted<R> {
    /// The state saved.
    pub state: StateFile,
    /// What the caller's function returned.
    pub out: R,
    /// Edits that landed while the file was being saved, kept as
    /// `<state>.rejected-<n>` (the caller tells the user to apply them again).
    pub set_aside: Vec<PathBuf>,
    /// The user's part as it was written — comments, layout — when this
    /// change had it written afresh from its content, saved here first.
    pub restyled: Option<PathBuf>,
}

/// A held read-modify-write lock; released on drop.
#[derive(Debug)]
pub struct ShortLock {
    _file: File,
}

/// A held runner lock; released on drop or when the process dies.
#[derive(Debug)]
pub struct RunnerLock {
    _file: File,
    path: PathBuf,
}

impl RunnerLock {
    /// Returns the lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A hand edit saved from an editor buffer older than a change of the
/// user's part (a redirect that added an atom, set a constraint): the edit
/// is merged with that change — what only one side changed is kept, the
/// user's edit winning where both changed the same value — so a stale buffer
/// does not undo it. Returns what the edit is judged against (the current
/// user part, the buffer's engine part) and the edit as merged.
fn rebased(before: StateFile, edited: &StateFile, current: &StateFile) -> (StateFile, StateFile) {
    use crate::state::disk::{UserPart, same_user_part, split};
    if same_user_part(&before, current) {
        return (before, edited.clone());
    }
    let (base, _) = split(before.clone());
    let (ours, _) = split(current.clone());
    let (theirs, _) = split(edited.clone());
    match UserPart::merged(&base, &ours, &theirs) {
        Some(merged) => (ours.applied_to(&before), merged.applied_to(edited)),
        None => (before, edited.clone()),
    }
}

/// Makes aot's folder beside the state file (a real folder, never a link).
/// A new one gets a `.gitignore` of `*`: locks, memory and logs are aot's,
/// not the project's, and stay out of `git status`.
pub fn aot_dir(paths: &Paths) -> Result<(), StoreError> {
    let new = !paths.aot_dir.exists();
    file::real_dir(&paths.aot_dir).map_err(io_error(&paths.aot_dir))?;
    if new {
        let ignore = paths.aot_dir.join(".gitignore");
        // Best effort: a folder aot cannot write fails at the lock just after.
        let _ = std::fs::write(&ignore, "# aot's own files (locks, memory, logs)\n*\n");
    }
    Ok(())
}

/// Takes the short lock of a state file, waiting for other holders.
pub fn lock_short(paths: &Paths) -> Result<ShortLock, StoreError> {
    aot_dir(paths)?;
    let file = file::open_no_follow(
        &paths.lock,
        OpenOptions::new().read(true).write(true).create(true).truncate(false),
    )
    .map_err(io_error(&paths.lock))?;
    file.lock().map_err(io_error(&paths.lock))?;
    Ok(ShortLock { _file: file })
}

/// Takes the runner lock at once, or fails naming the pid that holds it.
pub fn acquire_runner(paths: &Paths, pid: u32) -> Result<RunnerLock, StoreError> {
    file::refuse_link(&paths.state).map_err(io_error(&paths.state))?;
    aot_dir(paths)?;
    let mut file = file::open_no_follow(
        &paths.runner,
        OpenOptions::new().read(true).write(true).create(true).truncate(false),
    )
    .map_err(io_error(&paths.runner))?;
    // A runner killed while it started a process (between fork and exec)
    // leaves that child holding the lock for a moment: when the recorded
    // runner is gone, the lock is waited for, within a bound.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut locked = file.try_lock();
    while matches!(locked, Err(TryLockError::WouldBlock))
        && std::time::Instant::now() < deadline
        && runner_pid(paths).is_none_or(|pid| !i32::try_from(pid).is_ok_and(crate::model::process::running))
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
        locked = file.try_lock();
    }
    match locked {
        Ok(()) => {
            file.set_len(0).map_err(io_error(&paths.runner))?;
            writeln!(file, "{pid}").map_err(io_error(&paths.runner))?;
            file.flush().map_err(io_error(&paths.runner))?;
            Ok(RunnerLock {
                _file: file,
                path: paths.runner.clone(),
            })
        }
        Err(TryLockError::WouldBlock) => Err(StoreError::AlreadyRunning {
            state: paths.state.clone(),
            pid: runner_pid(paths),
        }),
        Err(TryLockError::Error(source)) => Err(StoreError::Io {
            path: paths.runner.clone(),
            source,
        }),
    }
}

/// Returns the pid of the running loop, if one holds the runner lock.
pub fn running_pid(paths: &Paths) -> Option<u32> {
    let file = File::open(&paths.runner).ok()?;
    match file.try_lock() {
        Ok(()) => None,
        Err(_) => runner_pid(paths),
    }
}

fn runner_pid(paths: &Paths) -> Option<u32> {
    let mut text = String::new();
    File::open(&paths.runner).ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

use crate::model::file;
pub use crate::model::file::write_atomic;

/// What the store last read or wrote: the basis for detecting edits.
#[derive(Debug, Clone)]
struct Base {
    hash: u64,
    state: StateFile,
    header: String,
    /// The user's part of the file as last read or written (YAML), kept byte
    /// for byte by the next save while the state's user part is unchanged.
    user_text: Option<document::UserText>,
    /// The file as read when its user part could not be kept as written (a
    /// version-1 file with the engine's fields among the user's): saved
    /// aside before the first save renders it afresh.
    unkept: Option<String>,
}

/// How a compaction went.
#[derive(Debug, Clone, PartialEq)]
pub enum Compacted {
    /// The journal is one record now.
    Done(Box<journal::Compaction>),
    /// It held at most one record already.
    NothingToFold,
    /// The state file does not hold what the journal says (records not saved
    /// yet, or a hand edit): compacting would drop what explains it.
    FileBehind,
}

/// How a commit went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Written.
    Saved,
    /// Written, after merging a hand edit of user-owned fields.
    Merged,
    /// Journaled but not written: the file holds an edit that cannot be merged
    /// now (invalid — perhaps half-written — or touching engine-owned fields).
    /// The file is left as it is; see [`Store::commit_or_defer`].
    Deferred {
        /// Why the edit could not be merged.
        reason: String,
    },
}

/// A state file and its journal.
pub struct Store {
    paths: Paths,
    format: Format,
    clock: Arc<dyn Clock>,
    journal: Option<Journal>,
    base: Option<Base>,
    /// Records journaled (by anyone) since the file was last written by this
    /// store: the base plus these explain what the file may legitimately hold.
    unsaved: Vec<Record>,
    /// Hash of the state file as this store last read or wrote it.
    disk_hash: Option<u64>,
    /// Edits found overwritten-in-waiting at a save, kept aside (see `write`).
    preserved: Vec<PathBuf>,
    /// The user's part as it was before a save wrote it afresh (see `keep_restyled`).
    restyled: Option<PathBuf>,
    durable: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Returns a store for the state file at `path`; nothing is read yet.
    pub fn new(path: &Path, clock: Arc<dyn Clock>) -> Self {
        Self {
            paths: Paths::new(path),
            format: Format::of(path),
            clock,
            journal: None,
            base: None,
            unsaved: Vec::new(),
            disk_hash: None,
            preserved: Vec::new(),
            restyled: None,
            durable: true,
        }
    }

    /// Returns the companion paths.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// Sets whether journal batches are fsynced (default true).
    pub fn set_durable(&mut self, durable: bool) {
        self.durable = durable;
        if let Some(journal) = &mut self.journal {
            journal.set_durable(durable);
        }
    }

    /// Takes the short lock.
    pub fn lock(&self) -> Result<ShortLock, StoreError> {
        lock_short(&self.paths)
    }

    /// Reads the file, brings it level with its journal (applying records a crash
    /// left unsaved, journaling hand edits), saves if that changed anything, and
    /// returns the state. Holds the short lock while doing so.
    pub fn open(&mut self) -> Result<(StateFile, Vec<Notice>), StoreError> {
        let _lock = self.lock()?;
        self.reconcile()
    }

    /// Runs one read-modify-write under the short lock: `f` sees the current
    /// state and returns events, which are journaled, applied and saved.
    pub fn transact<R, E>(
        &mut self,
        f: impl FnOnce(&StateFile) -> Result<(Vec<Event>, R), E>,
    ) -> Result<Result<Transacted<R>, E>, StoreError> {
        let _lock = self.lock()?;
        let (mut state, _) = self.reconcile()?;
        let (events, out) = match f(&state) {
            Ok(result) => result,
            Err(e) => return Ok(Err(e)),
        };
        self.append_and_apply(&mut state, events)?;
        self.write(&state)?;
        Ok(Ok(Transacted {
            state,
            out,
            set_aside: self.take_preserved(),
            restyled: self.take_restyled(),
        }))
    }

    /// Creates a new state file (and a journal starting with its snapshot).
    /// Fails if the file exists, unless `overwrite`.
    pub fn create(
        &mut self,
        state: &StateFile,
        header: &str,
        overwrite: bool,
        then: Vec<Event>,
    ) -> Result<StateFile, StoreError> {
        let _lock = self.lock()?;
        if !overwrite && self.paths.state.exists() {
            return Err(StoreError::Io {
                path: self.paths.state.clone(),
                source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "file exists"),
            });
        }
        let mut state = state.clone();
        self.ensure_journal()?;
        self.base = Some(Base {
            hash: 0,
            state: state.clone(),
            header: header.to_string(),
            user_text: None,
            unkept: None,
        });
        let snapshot = Event::snapshot(&state);
        self.append_and_apply(&mut state, std::iter::once(snapshot).chain(then).collect())?;
        self.write(&state)?;
        Ok(state)
    }

    /// Journals `events` and applies them to `state` without writing the file
    /// (the loop saves at iteration boundaries). The records are flushed to the
    /// OS at once and synced to disk with the next save (group commit). Records other processes
    /// appended meanwhile are applied first. Returns every new record, theirs
    /// then ours, so callers can fold them into their own views.
    pub fn record(&mut self, state: &mut dyn Folded, events: Vec<Event>) -> Result<Vec<Record>, StoreError> {
        let _lock = self.lock()?;
        let mut records = self.catch_up(state)?;
        records.extend(self.append_deferred(state, events)?);
        Ok(records)
    }

    /// Journals `events`, applies them to `state` and saves it. A hand edit made
    /// since the last read or write is merged when it touched only user-owned
    /// fields (journaled as `user_edited` first); otherwise the file is left as
    /// edited, the engine's document is saved aside, and `Conflict` is returned —
    /// the events are journaled either way, so nothing is lost.
    pub fn commit(&mut self, state: &mut dyn Folded, events: Vec<Event>) -> Result<Committed, StoreError> {
        self.commit_inner(state, events, false)
    }

    /// Like [`Store::commit`], but an edit that cannot be merged now is left in
    /// the file untouched and nothing is saved aside: the events are journaled
    /// (the journal leads, as always) and `Deferred` is returned. A running loop
    /// saves this way, because it takes hand edits in through its own path once
    /// the editor has finished writing.
    pub fn commit_or_defer(&mut self, state: &mut dyn Folded, events: Vec<Event>) -> Result<Committed, StoreError> {
        self.commit_inner(state, events, true)
    }

    fn commit_inner(
        &mut self,
        state: &mut dyn Folded,
        events: Vec<Event>,
        defer: bool,
    ) -> Result<Committed, StoreError> {
        let _lock = self.lock()?;
        self.catch_up(state)?;
        let disk = self.read_disk()?;
        let mut outcome = Committed::Saved;
        let mut conflict = None;
        let mut events = events;
        match &disk {
            Some(DiskState::Invalid(diagnostics)) => {
                let first = diagnostics
                    .errors
                    .first()
                    .map(|d| d.message.clone())
                    .unwrap_or_default();
                conflict = Some(format!("it is not valid: {first}"));
            }
            Some(DiskState::Changed(doc)) => {
                if let Some(base) = &mut self.base {
                    base.header = doc.header.clone();
                    base.user_text = doc.user_text.clone();
                }
                let base_revision = self.base.as_ref().map_or(0, |b| b.state.run.revision);
                if let Some(expected) = self.expected_before(&doc.state, base_revision)?
                    && doc.state != expected
                {
                    let (expected, edited) = rebased(expected, &doc.state, state.state());
                    match crate::correct::from_edit(&expected, &edited, self.clock.now()) {
                        Ok(edit) => {
                            events.splice(0..0, edit);
                            outcome = Committed::Merged;
                        }
                        Err(refused) => conflict = Some(refused.to_string()),
                    }
                }
            }
            Some(DiskState::Unchanged) | None => {}
        }
        self.append_and_apply(state, events)?;
        if let Some(reason) = conflict.clone()
            && defer
        {
            return Ok(Committed::Deferred { reason });
        }
        if let Some(reason) = conflict {
            let rejected = self.paths.next_rejected(self.format);
            let (text, _) = self.render(state.state())?;
            write_atomic(&rejected, text.as_bytes()).map_err(io_error(&rejected))?;
            return Err(StoreError::Conflict {
                state: self.paths.state.clone(),
                reason,
                rejected,
            });
        }
        self.write(state.state())?;
        Ok(outcome)
    }

    /// Compacts the journal ([`Journal::compact`]) when the state file holds
    /// everything the compaction covers. A file behind its journal, or edited
    /// by hand since this store wrote it, is left alone (`Ok(None)`): the
    /// records that explain it would be gone. Other processes' records are
    /// folded into `state` first.
    pub fn compact(&mut self, state: &mut dyn Folded) -> Result<Compacted, StoreError> {
        let _lock = self.lock()?;
        self.catch_up(state)?;
        let last = self.ensure_journal()?.last_seq();
        let saved = self.base.as_ref().is_some_and(|b| b.state.run.revision == last);
        if !saved || !self.disk_is_ours() {
            return Ok(Compacted::FileBehind);
        }
        let Some(compaction) = self.ensure_journal()?.compact()? else {
            return Ok(Compacted::NothingToFold);
        };
        self.unsaved.clear();
        Ok(Compacted::Done(Box::new(compaction)))
    }

    /// After the journal was cut, replaced or deleted under this store
    /// ([`JournalError::Rewound`]): keeps the file found as
    /// `<journal>.rewound-<n>`, starts the journal again from `state` (the
    /// caller's fold, which holds every record it saw) and saves the state
    /// file from it, so nothing solved is lost and the file is again the fold
    /// of its journal. Returns where the found journal was kept.
    pub fn restore_journal(
        &mut self,
        state: &StateFile,
        failures: Vec<(crate::model::AtomId, crate::journal::Reflection)>,
    ) -> Result<Option<PathBuf>, StoreError> {
        let _lock = self.lock()?;
        let at = self.clock.now();
        let kept = self.ensure_journal()?.restore(state.clone(), failures, at)?;
        self.unsaved.clear();
        self.write(state)?;
        Ok(kept)
    }

    /// Returns the journal's size in bytes, as this store last saw it.
    pub fn journal_len(&self) -> u64 {
        self.journal.as_ref().map_or(0, Journal::len)
    }

    /// Returns whether the file on disk is exactly this store's last write
    /// (cheap: a read and a hash, no parse).
    pub fn disk_is_ours(&self) -> bool {
        match (&self.base, std::fs::read(&self.paths.state)) {
            (Some(base), Ok(bytes)) => document::content_hash(&bytes) == base.hash,
            _ => false,
        }
    }

    /// Takes in an edit of the file made since this store last wrote it, after
    /// folding in other processes' journal records, and writes the file from
    /// the result — all under one lock. Another process (`aot redirect`)
    /// saving the same file meanwhile therefore either merged the edit itself
    /// (and this store finds it explained by the journal) or finds the file
    /// already rewritten: an edit is taken in once, never twice. A valid edit
    /// of user-owned fields is journaled as corrections (as a redirect would
    /// make them); an invalid one, or one of engine-owned fields, is saved
    /// aside and journaled as `edit_rejected`, and the file goes back to the
    /// last good state. When the file changes again while it is read (an
    /// editor still writing), nothing is recorded and `Changed` says to look again.
    pub fn take_edit(&mut self, state: &mut dyn Folded) -> Result<TakenEdit, StoreError> {
        let _lock = self.lock()?;
        self.catch_up(state)?;
        let (hash, taken, bytes) = match self.hand_edit()? {
            DiskEdit::None => return Ok(TakenEdit::None),
            DiskEdit::Invalid {
                diagnostics,
                hash,
                text,
            } => (hash, Err(diagnostics.render(false)), text),
            DiskEdit::Edited {
                before,
                after,
                hash,
                text,
            } => {
                let (before, edited) = rebased(*before, &after.state, state.state());
                (
                    hash,
                    crate::correct::from_edit(&before, &edited, self.clock.now()).map_err(|r| r.to_string()),
                    text,
                )
            }
        };
        let now = std::fs::read(&self.paths.state)
            .map(|b| document::content_hash(&b))
            .ok();
        if now != Some(hash) {
            return Ok(TakenEdit::Changed);
        }
        let outcome = match taken {
            Ok(events) => {
                self.append_deferred(state, events)?;
                TakenEdit::Merged
            }
            Err(why) => {
                let aside = self.save_aside(&bytes)?;
                let why = why.trim_end().to_string();
                self.append_deferred(
                    state,
                    vec![Event::EditRejected {
                        why: why.clone(),
                        kept: aside.display().to_string(),
                    }],
                )?;
                TakenEdit::Refused { why, aside }
            }
        };
        if let Some(base) = &mut self.base {
            // The edit was taken in (or set aside): its user text is what to keep.
            match document::from_bytes(&self.paths.state, bytes.as_bytes(), hash) {
                Ok(doc) => {
                    base.header = doc.header;
                    base.user_text = doc.user_text;
                }
                Err(_) => base.header = document::header_of(&bytes),
            }
        }
        self.write(state.state())?;
        Ok(outcome)
    }

    /// Looks for an edit of the file made since this store last wrote it. The
    /// caller holds the lock and has caught up with the journal.
    fn hand_edit(&mut self) -> Result<DiskEdit, StoreError> {
        let Some((base_hash, base_revision)) = self.base.as_ref().map(|b| (b.hash, b.state.run.revision)) else {
            return Ok(DiskEdit::None);
        };
        let Some((bytes, hash)) = self.read_bytes()? else {
            return Ok(DiskEdit::None);
        };
        if hash == base_hash {
            return Ok(DiskEdit::None);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match document::from_bytes(&self.paths.state, &bytes, hash) {
            Ok(doc) => match self.expected_before(&doc.state, base_revision)? {
                Some(expected) if expected == doc.state => Ok(DiskEdit::None),
                Some(expected) => Ok(DiskEdit::Edited {
                    before: Box::new(expected),
                    after: Box::new(doc),
                    hash,
                    text,
                }),
                None => Ok(DiskEdit::None),
            },
            Err(diagnostics) => Ok(DiskEdit::Invalid {
                diagnostics,
                hash,
                text,
            }),
        }
    }

    /// Reads the state file's bytes and hash, remembering the hash as what this
    /// store last saw on disk. `None` when there is no file.
    fn read_bytes(&mut self) -> Result<Option<(Vec<u8>, u64)>, StoreError> {
        let bytes = match std::fs::read(&self.paths.state) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StoreError::Io {
                    path: self.paths.state.clone(),
                    source,
                });
            }
        };
        let hash = document::content_hash(&bytes);
        self.disk_hash = Some(hash);
        Ok(Some((bytes, hash)))
    }

    /// Saves `text` (an edit that could not be applied) as `<state>.rejected-<n>.<ext>`.
    pub fn save_aside(&self, text: &str) -> Result<PathBuf, StoreError> {
        let path = self.paths.next_rejected(self.format);
        write_atomic(&path, text.as_bytes()).map_err(io_error(&path))?;
        Ok(path)
    }

    /// Applies records other processes appended since this store last looked.
    fn catch_up(&mut self, state: &mut dyn Folded) -> Result<Vec<Record>, StoreError> {
        let theirs = self.ensure_journal()?.catch_up()?;
        for record in &theirs {
            state.apply(record);
        }
        self.unsaved.extend(theirs.iter().cloned());
        Ok(theirs)
    }

    /// Returns what an edited file held before its edit. An editor may save a
    /// stale buffer — a file from before this store's last write — so an older
    /// revision is folded from the journal itself.
    fn expected_before(&self, edited: &StateFile, base_revision: u64) -> Result<Option<StateFile>, StoreError> {
        let revision = edited.run.revision;
        if revision >= base_revision {
            return Ok(self.expected_at(revision));
        }
        let contents = journal::read(&self.paths.journal)?;
        if revision == 0 {
            // A file aot never wrote (hand-written): the journal's snapshot of it.
            let original = contents.records.iter().rev().find_map(|r| match &r.event {
                Event::Snapshot { state } if state.run.revision == 0 => Some((**state).clone()),
                _ => None,
            });
            return Ok(original.or_else(|| self.expected_at(u64::MAX)));
        }
        Ok(journal::fold(contents.records.iter().take_while(|r| r.seq <= revision))
            .or_else(|| self.expected_at(u64::MAX)))
    }

    /// Returns what the file should hold at `revision` if nobody edited it: the
    /// state this store last wrote plus the journal records up to `revision`.
    fn expected_at(&self, revision: u64) -> Option<StateFile> {
        let mut expected = self.base.as_ref()?.state.clone();
        for record in self.unsaved.iter().take_while(|r| r.seq <= revision) {
            journal::apply(&mut expected, record);
        }
        Some(expected)
    }

    fn ensure_journal(&mut self) -> Result<&mut Journal, StoreError> {
        if self.journal.is_none() {
            let (mut journal, _) = Journal::open(&self.paths.journal)?;
            journal.set_durable(self.durable);
            self.journal = Some(journal);
        }
        self.journal
            .as_mut()
            .ok_or_else(|| StoreError::Serialize("journal not open".into()))
    }

    fn append_and_apply(&mut self, state: &mut dyn Folded, events: Vec<Event>) -> Result<Vec<Record>, StoreError> {
        let records = self.append_deferred(state, events)?;
        self.ensure_journal()?.sync()?;
        Ok(records)
    }

    /// Journals without an fsync: `write` syncs the journal before the state
    /// file changes, so the file never shows what the disk may not keep.
    fn append_deferred(&mut self, state: &mut dyn Folded, events: Vec<Event>) -> Result<Vec<Record>, StoreError> {
        if events.is_empty() {
            // Reading the clock for nothing would make a fixed test clock depend on timing.
            return Ok(Vec::new());
        }
        let at = self.clock.now();
        let journal = self.ensure_journal()?;
        let records = journal.append_deferred(at, events)?;
        for record in &records {
            state.apply(record);
        }
        self.unsaved.extend(records.iter().cloned());
        Ok(records)
    }

    fn render(&self, state: &StateFile) -> Result<(String, Option<document::UserText>), StoreError> {
        let header = self.base.as_ref().map_or("", |b| b.header.as_str());
        let kept = self.base.as_ref().and_then(|b| b.user_text.as_ref());
        document::render(state, self.format, header, kept).map_err(StoreError::Serialize)
    }

    /// Saves the user's part as last written aside when the new text writes
    /// it afresh and it carried what a fresh rendering drops (comments,
    /// flow style, blank lines, quoting), or when an edit in place rewrote a
    /// comment: no one's words are lost unseen.
    fn keep_restyled(&mut self, new: &Option<document::UserText>) -> Result<(), StoreError> {
        if let Some(text) = self.base.as_mut().and_then(|b| b.unkept.take()) {
            let aside = self
                .paths
                .before(self.base.as_ref().map_or(0, |b| b.state.run.revision), self.format);
            std::fs::create_dir_all(&self.paths.aot_dir).map_err(io_error(&self.paths.aot_dir))?;
            std::fs::write(&aside, &text).map_err(io_error(&aside))?;
            self.restyled = Some(aside);
            return Ok(());
        }
        let Some(base) = &self.base else {
            return Ok(());
        };
        let (Some(old), Some(new)) = (&base.user_text, new) else {
            return Ok(());
        };
        if old.text == new.text || document::is_rendered(old, &base.header) {
            return Ok(());
        }
        let patched = !document::is_rendered(new, &base.header);
        if patched && crate::state::patch::keeps_comments(&old.text, &new.text) {
            return Ok(());
        }
        let aside = self.paths.before(base.state.run.revision, self.format);
        std::fs::create_dir_all(&self.paths.aot_dir).map_err(io_error(&self.paths.aot_dir))?;
        std::fs::write(&aside, &old.text).map_err(io_error(&aside))?;
        self.restyled = Some(aside);
        Ok(())
    }

    /// The text of a YAML file whose user part cannot be kept as written,
    /// unless writing it afresh would give the same text.
    fn unkept(&self, doc: &document::Document) -> Option<String> {
        if self.format != Format::Yaml || doc.user_text.is_some() {
            return None;
        }
        let text = std::fs::read_to_string(&self.paths.state).ok()?;
        let fresh = document::to_text(&doc.state, Format::Yaml, &doc.header).ok();
        (fresh.as_deref() != Some(text.as_str())).then_some(text)
    }

    /// Returns where the user's part was kept when the last saves wrote it
    /// afresh (see `keep_restyled`), for the caller to report.
    pub fn take_restyled(&mut self) -> Option<PathBuf> {
        self.restyled.take()
    }

    /// Returns the edits that were written to the file while this store was
    /// saving it, each kept aside as `<state>.rejected-<n>`, for the caller to report.
    pub fn take_preserved(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.preserved)
    }

    /// Writes the state file atomically without ever destroying bytes someone
    /// else wrote. Editors do not take aot's locks, so a check of the file
    /// followed by a rename over it could discard an edit saved in between.
    /// Instead the new file is exchanged with the current one in one step
    /// (`renameat2(RENAME_EXCHANGE)`: the path always holds a complete file),
    /// and what comes out is compared with what this store last read or wrote:
    /// an edit made in between is kept as `<state>.rejected-<n>` (`take_preserved`).
    fn write(&mut self, state: &StateFile) -> Result<(), StoreError> {
        self.ensure_journal()?.sync()?;
        let (text, user_text) = self.render(state)?;
        self.keep_restyled(&user_text)?;
        let path = self.paths.state.clone();
        let dir = self.paths.dir().to_path_buf();
        let io = io_error(&path);
        file::refuse_link(&path).map_err(io_error(&path))?;
        let prepared = (|| {
            let mut file = file::temp_beside(&path)?;
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                file.as_file().set_permissions(meta.permissions())?;
            }
            file.write_all(text.as_bytes())?;
            file.as_file().sync_all()?;
            // From here the name is ours to rename or remove.
            file.into_temp_path().keep().map_err(|e| e.error)
        })();
        let tmp = match prepared {
            Ok(tmp) => tmp,
            Err(e) => return Err(io(e)),
        };
        // Swap the new file in atomically; what was there comes out under `tmp`.
        let swapped = nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            tmp.as_path(),
            nix::fcntl::AT_FDCWD,
            path.as_path(),
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        );
        let previous = match swapped {
            Ok(()) => Some(tmp.clone()),
            // No file yet, or a file system without exchange: a plain atomic rename.
            Err(_) => {
                if let Err(e) = std::fs::rename(&tmp, &path) {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(io_error(&path)(e));
                }
                None
            }
        };
        File::open(&dir).and_then(|d| d.sync_all()).map_err(io_error(&dir))?;
        if let Some(previous) = previous {
            let hash = std::fs::read(&previous).map(|b| document::content_hash(&b)).ok();
            if self.disk_hash.is_none() || hash == self.disk_hash {
                let _ = std::fs::remove_file(&previous);
            } else {
                let kept = self.paths.next_rejected(self.format);
                std::fs::rename(&previous, &kept).map_err(io_error(&kept))?;
                self.preserved.push(kept);
            }
        }
        self.unsaved.clear();
        let hash = document::content_hash(text.as_bytes());
        self.disk_hash = Some(hash);
        let header = self.base.as_ref().map(|b| b.header.clone()).unwrap_or_default();
        self.base = Some(Base {
            hash,
            state: state.clone(),
            header,
            user_text,
            unkept: None,
        });
        Ok(())
    }

    fn read_disk(&mut self) -> Result<Option<DiskState>, StoreError> {
        let Some(base_hash) = self.base.as_ref().map(|b| b.hash) else {
            return Ok(None);
        };
        let Some((bytes, hash)) = self.read_bytes()? else {
            return Ok(None);
        };
        if hash == base_hash {
            return Ok(Some(DiskState::Unchanged));
        }
        match document::from_bytes(&self.paths.state, &bytes, hash) {
            Ok(doc) => Ok(Some(DiskState::Changed(Box::new(doc)))),
            Err(diagnostics) => Ok(Some(DiskState::Invalid(diagnostics))),
        }
    }

    /// The body of `open`, for callers that already hold the lock.
    fn reconcile(&mut self) -> Result<(StateFile, Vec<Notice>), StoreError> {
        // Writers hold the short lock, as the caller does: a temporary file
        // seen now is one a killed process left.
        file::remove_stale_temps(&self.paths.state);
        file::remove_stale_temps(&self.paths.journal);
        match self.reconcile_incremental()? {
            Some(state) => Ok((state, Vec::new())),
            None => self.reconcile_full(),
        }
    }

    /// Reconciles from what this store already knows: reads only the journal's
    /// new tail, and accepts the file when it equals the last state this store
    /// saw plus those records. Returns `None` when a full reconcile is needed.
    fn reconcile_incremental(&mut self) -> Result<Option<StateFile>, StoreError> {
        if self.base.is_none() || self.journal.is_none() {
            return Ok(None);
        }
        let theirs = self.ensure_journal()?.catch_up()?;
        self.unsaved.extend(theirs);
        let last = self.unsaved.last().map_or(0, |r| r.seq);
        match self.read_disk()? {
            Some(DiskState::Unchanged) if self.unsaved.is_empty() => Ok(self.expected_at(last)),
            Some(DiskState::Changed(doc)) if self.expected_at(doc.state.run.revision).as_ref() == Some(&doc.state) => {
                // The file is explained by the journal; bring it up to the journal's end.
                let mut state = doc.state.clone();
                let behind: Vec<Record> = self
                    .unsaved
                    .iter()
                    .filter(|r| r.seq > state.run.revision)
                    .cloned()
                    .collect();
                for record in &behind {
                    journal::apply(&mut state, record);
                }
                let unkept = self.unkept(&doc);
                self.base = Some(Base {
                    hash: doc.hash,
                    state: doc.state.clone(),
                    header: doc.header,
                    user_text: doc.user_text,
                    unkept,
                });
                self.unsaved.retain(|r| r.seq > doc.state.run.revision);
                if !behind.is_empty() {
                    self.write(&state)?;
                }
                Ok(Some(state))
            }
            Some(DiskState::Unchanged) => {
                let state = self.expected_at(last);
                if let Some(state) = &state {
                    self.write(state)?;
                }
                Ok(state)
            }
            _ => Ok(None),
        }
    }

    fn reconcile_full(&mut self) -> Result<(StateFile, Vec<Notice>), StoreError> {
        let doc = document::read(&self.paths.state)?;
        let (mut journal, contents) = Journal::open(&self.paths.journal)?;
        journal.set_durable(self.durable);
        self.journal = Some(journal);
        self.base = Some(Base {
            hash: doc.hash,
            state: doc.state.clone(),
            header: doc.header.clone(),
            user_text: doc.user_text.clone(),
            unkept: self.unkept(&doc),
        });
        self.unsaved.clear();
        self.disk_hash = Some(doc.hash);
        let mut notices = Vec::new();
        if let Some(torn) = contents.torn {
            notices.push(Notice::TornTail(torn));
        }
        let mut state = doc.state.clone();
        let revision = state.run.revision;
        let last = contents.last_seq();
        if revision > last && last == 0 {
            // No journal (never committed beside the file, or moved aside):
            // a new one starts from what the file says.
            notices.push(Notice::JournalRestarted { revision });
            let mut events = vec![Event::snapshot(&state)];
            self.append_and_apply(&mut state, std::mem::take(&mut events))?;
            self.write(&state)?;
            return Ok((state, notices));
        }
        if revision > last {
            return Err(StoreError::JournalBehind {
                state: self.paths.state.clone(),
                journal: self.paths.journal.clone(),
                revision,
                last,
            });
        }
        let folded = if revision == 0 {
            // A file aot never saved (hand-written, or an editor's buffer
            // from before the first save) beside a journal: an edit of the
            // file the journal started from, not a new start.
            contents.records.iter().rev().find_map(|r| match &r.event {
                Event::Snapshot { state } if state.run.revision == 0 => Some((**state).clone()),
                _ => None,
            })
        } else {
            journal::fold(contents.records.iter().take_while(|r| r.seq <= revision))
        };
        let mut events = Vec::new();
        let mut changed = false;
        match folded {
            None => {
                events.push(Event::snapshot(&state));
                notices.push(Notice::JournalStarted);
            }
            Some(expected) => {
                let missed: Vec<&Record> = contents.records.iter().filter(|r| r.seq > revision).collect();
                if !missed.is_empty() {
                    notices.push(Notice::Recovered { records: missed.len() });
                    changed = true;
                }
                // The journal's view without the file's edit: what a stale
                // edit is merged with.
                let mut latest = expected.clone();
                for record in missed {
                    journal::apply(&mut state, record);
                    journal::apply(&mut latest, record);
                }
                if doc.state != expected {
                    let engine_edits = doc.state.engine_differences(&expected);
                    let (expected, edited) = rebased(expected, &doc.state, &latest);
                    // A hand edit is recorded like a redirect: corrections with their trail rules.
                    if let Ok(edit) = crate::correct::from_edit(&expected, &edited, self.clock.now()) {
                        events.extend(edit);
                        notices.push(Notice::MergedEdit);
                    } else {
                        events.push(Event::snapshot(&state));
                        notices.push(Notice::EngineFieldsEdited(engine_edits));
                    }
                }
            }
        }
        if !events.is_empty() {
            self.append_and_apply(&mut state, events)?;
            changed = true;
        }
        if changed {
            self.write(&state)?;
        }
        Ok((state, notices))
    }
}

/// What [`Store::take_edit`] did with the file.
#[derive(Debug)]
pub enum TakenEdit {
    /// Nothing new: the file is this store's last write, or explained by the journal.
    None,
    /// The file changed again while it was read: nothing recorded, look again.
    Changed,
    /// A valid edit, journaled, and the file written from it.
    Merged,
    /// An edit that could not be applied: saved aside, journaled as refused,
    /// and the file written back from the last good state.
    Refused {
        /// Why it was refused.
        why: String,
        /// Where the edited text was kept.
        aside: PathBuf,
    },
}

/// What the state file holds compared with what this store expects.
#[derive(Debug)]
enum DiskEdit {
    /// Nothing new: the file is this store's last write, or explained by the journal.
    None,
    /// A valid edit: `before` is what the file held before it, `after` what it holds.
    Edited {
        /// The expected state at the file's revision.
        before: Box<StateFile>,
        /// The file as edited.
        after: Box<Document>,
        /// The edited bytes' hash.
        hash: u64,
        /// The edited text.
        text: String,
    },
    /// The file does not parse or validate.
    Invalid {
        /// Every problem.
        diagnostics: crate::state::diag::Diagnostics,
        /// The edited bytes' hash.
        hash: u64,
        /// The edited text.
        text: String,
    },
}

enum DiskState {
    Unchanged,
    Changed(Box<Document>),
    Invalid(crate::state::diag::Diagnostics),
}

/// Rebuilds the state from the journal alone.
pub fn replay(journal_path: &Path) -> Result<(Option<StateFile>, journal::Contents), JournalError> {
    let contents = journal::read(journal_path)?;
    Ok((journal::fold(&contents.records), contents))
}
