//! The event journal `<state>.journal.jsonl`: one JSON record per line, appended
//! and flushed before the state file changes. A batch of events is one write and
//! one `fsync` (group commit). A torn last line — a crash in the middle of a
//! write — is detected, reported and skipped, never fatal.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::journal::event::{Event, RECORD_VERSION, Record};
use crate::model::AtomId;
use crate::model::time::Timestamp;
use crate::state::StateFile;

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// An I/O error.
    #[error("journal {}: {source}", path.display())]
    Io {
        /// The journal.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A complete line that is not a valid record.
    #[error("journal {}:{line}: {message}", path.display())]
    Corrupt {
        /// The journal.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The journal changed under this handle in a way no aot process makes:
    /// cut short, replaced by one that does not continue it, or deleted.
    #[error(
        "journal {}: {what} while this process was using it (it had read through record {seq}); \
         stopped rather than fold a journal that went back over newer state",
        path.display()
    )]
    Rewound {
        /// The journal.
        path: PathBuf,
        /// What happened to it.
        what: String,
        /// The last record this handle had read or written.
        seq: u64,
    },
}

/// An incomplete last line, left by a crash during a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// 1-based line number of the torn line.
    pub line: usize,
    /// Its length in bytes.
    pub bytes: usize,
}

/// What a journal holds.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    /// Every complete record, in order.
    pub records: Vec<Record>,
    /// The torn last line, if any (skipped).
    pub torn: Option<TornTail>,
    /// Length in bytes of the complete part.
    pub valid_len: u64,
}

impl Contents {
    /// Returns the sequence number of the last record (0 when empty).
    pub fn last_seq(&self) -> u64 {
        self.records.last().map_or(0, |r| r.seq)
    }
}

/// Returns the journal path for a state file: `aot.yaml` → `aot.yaml.journal.jsonl`.
pub fn path_for(state: &Path) -> PathBuf {
    let mut name = state.file_name().unwrap_or_default().to_os_string();
    name.push(".journal.jsonl");
    state.with_file_name(name)
}

/// Reads a journal; a missing file is an empty journal.
pub fn read(path: &Path) -> Result<Contents, JournalError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Contents::default()),
        Err(source) => {
            return Err(JournalError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    from_bytes(path, &bytes)
}

/// Parses a whole journal already read from `path` (named in errors).
pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Contents, JournalError> {
    parse(path, bytes, 0, 0, 0)
}

/// Says why a line is not a record: written by a newer aot, or not a record.
fn unreadable(line: &[u8], error: &serde_json::Error) -> String {
    #[derive(serde::Deserialize)]
    struct Version {
        v: u32,
        event: Option<Kind>,
    }
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(rename = "type")]
        kind: String,
    }
    match serde_json::from_slice::<Version>(line) {
        Ok(Version { v, .. }) if v > RECORD_VERSION => {
            format!("record version {v} is newer than this aot reads ({RECORD_VERSION}); upgrade aot")
        }
        // Only a newer aot writes a kind this one does not know (or the line is damaged).
        Ok(Version {
            event: Some(Kind { kind }),
            ..
        }) if error.to_string().contains("unknown variant") => format!(
            "record kind `{}` is not one this aot knows: it was written by a newer aot (upgrade aot) or the line is damaged",
            crate::model::text::cut(&kind, 64)
        ),
        _ => format!("not a journal record: {error}"),
    }
}

/// Parses journal bytes that start at line `first_line` (0-based count of lines
/// before them), at byte `offset`, after a record with sequence `prev_seq`.
fn parse(path: &Path, bytes: &[u8], first_line: usize, offset: u64, prev_seq: u64) -> Result<Contents, JournalError> {
    let mut contents = Contents {
        valid_len: offset,
        ..Contents::default()
    };
    let mut prev = prev_seq;
    let mut start = 0;
    let mut line_no = first_line;
    while start < bytes.len() {
        line_no += 1;
        let (line, terminated) = match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(end) => (&bytes[start..start + end], true),
            None => (&bytes[start..], false),
        };
        let next = start + line.len() + usize::from(terminated);
        if line.iter().all(u8::is_ascii_whitespace) {
            start = next;
            if terminated {
                contents.valid_len = offset + next as u64;
            }
            continue;
        }
        if !terminated {
            // A record is complete only with its newline: `append` writes both
            // before it returns, so an unterminated line was never acted on.
            contents.torn = Some(TornTail {
                line: line_no,
                bytes: line.len(),
            });
            break;
        }
        let record = serde_json::from_slice::<Record>(line).map_err(|e| JournalError::Corrupt {
            path: path.to_path_buf(),
            line: line_no,
            message: unreadable(line, &e),
        })?;
        // A compacted journal starts at the sequence number of the last
        // record its first one replaced.
        let compacted_start = contents.records.is_empty()
            && prev_seq == 0
            && record.seq > 0
            && matches!(record.event, Event::Compacted { .. });
        if record.seq != prev + 1 && !compacted_start {
            return Err(JournalError::Corrupt {
                path: path.to_path_buf(),
                line: line_no,
                message: format!(
                    "sequence {} follows {prev}; records are missing or out of order",
                    record.seq
                ),
            });
        }
        prev = record.seq;
        contents.records.push(record);
        contents.valid_len = offset + next as u64;
        start = next;
    }
    Ok(contents)
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// The `compacted` record the journal now starts with.
    pub record: Record,
    /// How many records were folded into one.
    pub records: usize,
    /// The sequence number of the last of them (and of the `compacted` record).
    pub through: u64,
    /// The journal's size before, in bytes.
    pub bytes_before: u64,
    /// Its size after.
    pub bytes_after: u64,
}

/// Whether two metadata describe the same file (not a replacement of it,
/// as a compaction makes). Without file identity (not Unix), `true`.
pub fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        // No file identity here: a replacement shows only as a shorter file.
        let _ = (a, b);
        true
    }
}

/// An open journal, positioned for appending.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    last_seq: u64,
    len: u64,
    lines: usize,
    durable: bool,
    /// Appended since the last fsync (group commit: synced before the state file changes).
    unsynced: bool,
}

impl Journal {
    /// Opens (creating if needed) the journal, truncating a torn tail so the next
    /// append starts on a fresh line. Returns what it held.
    pub fn open(path: &Path) -> Result<(Journal, Contents), JournalError> {
        let io = |source| JournalError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file =
            crate::model::file::open_no_follow(path, OpenOptions::new().read(true).append(true).create(true))
                .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let contents = parse(path, &bytes, 0, 0, 0)?;
        if contents.valid_len < bytes.len() as u64 {
            file.set_len(contents.valid_len).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        let lines = bytes[..contents.valid_len as usize]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        let journal = Journal {
            path: path.to_path_buf(),
            file,
            last_seq: contents.last_seq(),
            len: contents.valid_len,
            lines,
            durable: true,
            unsynced: false,
        };
        Ok((journal, contents))
    }

    /// Returns the journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns the sequence number of the last record.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Sets whether each batch is `fsync`ed (default true). Without it a batch
    /// still reaches the OS before `append` returns, so it survives a killed
    /// process but not a power loss.
    pub fn set_durable(&mut self, durable: bool) {
        self.durable = durable;
    }

    /// Reads records appended by another process since this handle last looked
    /// (the caller holds the store lock, so nobody appends meanwhile).
    pub fn catch_up(&mut self) -> Result<Vec<Record>, JournalError> {
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        let meta = self.file.metadata().map_err(io)?;
        let len = meta.len();
        let rewound = |what: &str| JournalError::Rewound {
            path: self.path.clone(),
            what: what.to_string(),
            seq: self.last_seq,
        };
        let replaced = match std::fs::symlink_metadata(&self.path) {
            Ok(now) => !same_file(&meta, &now),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(rewound("deleted")),
            Err(e) => return Err(io(e)),
        };
        if len == self.len && !replaced {
            return Ok(Vec::new());
        }
        if len < self.len && !replaced {
            return Err(rewound(&format!("cut from {} to {len} bytes", self.len)));
        }
        if replaced {
            // Compaction replaces the file with one that starts with a
            // `compacted` record at or past every record this handle read;
            // anything else went back in time.
            let contents = read(&self.path)?;
            let continues = contents
                .records
                .first()
                .is_some_and(|first| matches!(first.event, Event::Compacted { .. }) && first.seq >= self.last_seq);
            if !continues {
                return Err(rewound(&format!(
                    "replaced by a file whose records end at {}",
                    contents.last_seq()
                )));
            }
            let (fresh, contents) = Journal::open(&self.path)?;
            let durable = self.durable;
            *self = fresh;
            self.durable = durable;
            return Ok(contents.records);
        }
        let mut bytes = Vec::with_capacity((len - self.len) as usize);
        self.file.seek(SeekFrom::Start(self.len)).map_err(io)?;
        self.file.read_to_end(&mut bytes).map_err(io)?;
        let contents = parse(&self.path, &bytes, self.lines, self.len, self.last_seq)?;
        if contents.valid_len < len {
            self.file.set_len(contents.valid_len).map_err(io)?;
        }
        self.lines += bytes[..(contents.valid_len - self.len) as usize]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        self.len = contents.valid_len;
        self.last_seq = contents.last_seq().max(self.last_seq);
        Ok(contents.records)
    }

    /// Replaces the journal with one `compacted` record — the fold of every
    /// record, carrying the failed attempts still worth a retry's context —
    /// at the sequence number and time of the last record, so the next one
    /// follows as before. Atomic: a crash leaves the old journal or the new one. The
    /// caller holds the store lock. Returns `None` when there is nothing to
    /// fold (no snapshot to start from, or already one record).
    pub fn compact(&mut self) -> Result<Option<Compaction>, JournalError> {
        let contents = read(&self.path)?;
        let Some(last) = contents.records.last().filter(|_| contents.records.len() > 1) else {
            return Ok(None);
        };
        let Some(state) = super::fold::fold(&contents.records) else {
            return Ok(None);
        };
        let failures = super::fold::History::of(&contents.records).failures();
        let record = Record {
            v: RECORD_VERSION,
            seq: last.seq,
            at: last.at,
            event: Event::Compacted {
                state: Box::new(state),
                failures,
            },
        };
        let bytes_after = self.replace_with(&record)?;
        Ok(Some(Compaction {
            bytes_after,
            record,
            records: contents.records.len(),
            through: contents.last_seq(),
            bytes_before: contents.valid_len,
        }))
    }

    /// Replaces the journal with `record` alone, atomically, and reads on
    /// from there. Returns the new length.
    fn replace_with(&mut self, record: &Record) -> Result<u64, JournalError> {
        let mut line = serde_json::to_vec(record).map_err(|e| JournalError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push(b'\n');
        crate::model::file::write_atomic(&self.path, &line).map_err(|source| JournalError::Io {
            path: self.path.clone(),
            source,
        })?;
        let (fresh, _) = Journal::open(&self.path)?;
        let durable = self.durable;
        *self = fresh;
        self.durable = durable;
        Ok(line.len() as u64)
    }

    /// After [`JournalError::Rewound`]: keeps whatever file is at the
    /// journal's path now as `<journal>.rewound-<n>` and starts the journal
    /// again from `state` — this process's fold, newer than what it found —
    /// as one `compacted` record at the last sequence number it had read or
    /// written. Returns where the found file was kept, if there was one.
    pub fn restore(
        &mut self,
        state: StateFile,
        failures: Vec<(AtomId, super::Reflection)>,
        at: Timestamp,
    ) -> Result<Option<PathBuf>, JournalError> {
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        let mut kept = None;
        if std::fs::symlink_metadata(&self.path).is_ok() {
            let name = self.path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let aside = (1..)
                .map(|n| self.path.with_file_name(format!("{name}.rewound-{n}")))
                .find(|p| std::fs::symlink_metadata(p).is_err())
                .unwrap_or_else(|| self.path.with_file_name(format!("{name}.rewound")));
            std::fs::rename(&self.path, &aside).map_err(io)?;
            kept = Some(aside);
        }
        let record = Record {
            v: RECORD_VERSION,
            seq: self.last_seq,
            at,
            event: Event::Compacted {
                state: Box::new(state),
                failures,
            },
        };
        self.replace_with(&record)?;
        Ok(kept)
    }

    /// Returns the journal's length in bytes (its complete records).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Returns whether the journal holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a batch of events as one write and (if durable) one `fsync`;
    /// returns the records with their sequence numbers.
    pub fn append(&mut self, at: Timestamp, events: Vec<Event>) -> Result<Vec<Record>, JournalError> {
        let records = self.append_deferred(at, events)?;
        self.sync()?;
        Ok(records)
    }

    /// Makes every appended record durable (one `fsync` for all of them: group
    /// commit). A no-op when nothing was appended since the last sync.
    pub fn sync(&mut self) -> Result<(), JournalError> {
        if self.durable && self.unsynced {
            self.file.sync_data().map_err(|source| JournalError::Io {
                path: self.path.clone(),
                source,
            })?;
        }
        self.unsynced = false;
        Ok(())
    }

    /// Appends a batch as one write, flushed to the OS (so it survives a killed
    /// process) but not yet synced to disk: call [`Journal::sync`] before
    /// anything that depends on it becomes visible, such as the state file.
    pub fn append_deferred(&mut self, at: Timestamp, events: Vec<Event>) -> Result<Vec<Record>, JournalError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut buffer = Vec::with_capacity(events.len() * 128);
        let mut records = Vec::with_capacity(events.len());
        for (i, event) in events.into_iter().enumerate() {
            let record = Record {
                v: RECORD_VERSION,
                seq: self.last_seq + 1 + i as u64,
                at,
                event,
            };
            serde_json::to_writer(&mut buffer, &record).map_err(|e| JournalError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(e),
            })?;
            buffer.push(b'\n');
            records.push(record);
        }
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&buffer).map_err(io)?;
        self.file.flush().map_err(io)?;
        self.unsynced = true;
        self.len += buffer.len() as u64;
        self.lines += records.len();
        self.last_seq += records.len() as u64;
        Ok(records)
    }
}
