//! MKCT memory: Megrams, dual-channel recall, and the Dreamer.
//!
//! Every GGS decision leaves Megrams — ⟨id, level, t, t_recalled, space,
//! entity, content, state, f, σ, k⟩ — in an append-only memory journal shared
//! by every task in a folder (`.aot/memory.jsonl`). Recall computes two
//! potentials over the Megrams of a (space, entity) pair, each decaying as
//! e^(−kΔt) with Δt in days since the later of creation and last recall:
//!
//! ```text
//! M_att = Σ |f|·e^(−kΔt)      where to look (unsigned energy)
//! M_dec = Σ σ·f·e^(−kΔt)      what to do (signed preference)
//!
//! M_att < 0.5 → Ignore;  M_dec > 0.2 → Exploit;  M_dec < −0.2 → Avoid;  else Caution
//! ```
//!
//! Past records are never rewritten: a recall or a demotion is a new record.
//! Only the Dreamer's garbage collection rewrites the file, atomically, keeping
//! every record it does not forget. The pure parts (potentials, actions, the
//! quantization matrix, the Dreamer's plan) do no I/O; [`MemoryFile`] is the edge.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::file;
use crate::model::time::Timestamp;

mod calibration;

pub use calibration::{Calibration, Recalled};

/// The memory record format version this build writes and reads.
pub const MEMORY_VERSION: u32 = 1;

const DAY_MS: f64 = 86_400_000.0;

/// The pyramid level of a Megram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Megram: an episodic fact, decaying per the quantization matrix.
    M,
    /// Knowledge: a task-scoped cache, decaying like M (and demoted C entries).
    K,
    /// Common sense: consolidated best practices and constraints, timeless.
    C,
    /// Thinking: laws and persona, timeless.
    T,
}

/// One memory unit: the paper's 11-tuple.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Megram {
    /// Runtime-assigned id.
    pub id: String,
    /// Pyramid level.
    pub level: Level,
    /// Creation time.
    pub t: Timestamp,
    /// Last recall (from `recalled` records; never written in the Megram's own line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_recalled: Option<Timestamp>,
    /// Index tag: a tool (action states) or a task-intent slug (terminal states).
    pub space: String,
    /// Index tag: a target (action states) or the local environment (terminal states).
    pub entity: String,
    /// What happened, in words.
    pub content: String,
    /// The GGS macro-state (or `accept`, or the row the outcome used).
    pub state: String,
    /// Stimulus magnitude, in [0, 1].
    pub f: f64,
    /// Valence, in [−1, 1].
    pub sigma: f64,
    /// Decay rate per day (0 = timeless).
    pub k: f64,
}

impl Megram {
    /// Returns e^(−kΔt), Δt in days since the later of creation and last recall.
    pub fn decay(&self, now: Timestamp) -> f64 {
        let since = self.t_recalled.map_or(self.t, |r| r.max(self.t));
        let days = now.since(since).as_millis() as f64 / DAY_MS;
        (-self.k * days).exp()
    }

    /// This Megram's share of M_att now.
    pub fn attention(&self, now: Timestamp) -> f64 {
        self.f.abs() * self.decay(now)
    }

    /// This Megram's share of M_dec now.
    pub fn decision(&self, now: Timestamp) -> f64 {
        self.sigma * self.f * self.decay(now)
    }
}

/// One line of the memory journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    /// A new Megram.
    Megram {
        /// Record version.
        v: u32,
        /// The Megram.
        #[serde(flatten)]
        megram: Megram,
    },
    /// Megrams were recalled by a calibration: their decay clocks restart.
    Recalled {
        /// Record version.
        v: u32,
        /// When.
        at: Timestamp,
        /// The Megrams.
        ids: Vec<String>,
    },
    /// A C-level Megram lost the trust it had (trust bankruptcy).
    Demoted {
        /// Record version.
        v: u32,
        /// When.
        at: Timestamp,
        /// The Megram.
        id: String,
        /// Its new level.
        level: Level,
        /// Its new decay rate.
        k: f64,
    },
}

impl Entry {
    /// Wraps a new Megram.
    pub fn megram(megram: Megram) -> Self {
        Entry::Megram {
            v: MEMORY_VERSION,
            megram,
        }
    }
}

/// A (f, σ, k) row of the GGS quantization matrix.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Row {
    /// Magnitude.
    pub f: f64,
    /// Valence.
    pub sigma: f64,
    /// Decay per day.
    pub k: f64,
}

/// The quantization matrix (SPEC §6): the row for a macro-state, or `accept`.
pub fn row(state: &str) -> Option<Row> {
    let (f, sigma, k) = match state {
        "abandon" => (0.95, -1.0, 0.05),
        "accept" => (0.90, 1.0, 0.05),
        "change_approach" => (0.85, -1.0, 0.05),
        "success" => (0.80, 1.0, 0.05),
        "break_symmetry" => (0.75, 1.0, 0.05),
        "change_path" => (0.30, 0.0, 0.2),
        "refine" => (0.10, 0.5, 0.5),
        _ => return None,
    };
    Some(Row { f, sigma, k })
}

/// What recall advises for a (space, entity) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Too little energy to matter: no constraint.
    Ignore,
    /// SHOULD PREFER.
    Exploit,
    /// MUST NOT.
    Avoid,
    /// High variance: proceed only with confirmation.
    Caution,
}

impl Action {
    /// Returns the name as written in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Ignore => "ignore",
            Action::Exploit => "exploit",
            Action::Avoid => "avoid",
            Action::Caution => "caution",
        }
    }

    /// Maps the two potentials to an action (seed §4.4 thresholds).
    pub fn of(m_att: f64, m_dec: f64) -> Self {
        if m_att < 0.5 {
            Action::Ignore
        } else if m_dec > 0.2 {
            Action::Exploit
        } else if m_dec < -0.2 {
            Action::Avoid
        } else {
            Action::Caution
        }
    }
}

/// The potentials of a (space, entity) pair.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Potentials {
    /// Attention: Σ |f|·e^(−kΔt).
    pub m_att: f64,
    /// Decision: Σ σ·f·e^(−kΔt).
    pub m_dec: f64,
}

impl Potentials {
    /// Sums the potentials of `megrams` at `now`.
    pub fn of<'a>(megrams: impl IntoIterator<Item = &'a Megram>, now: Timestamp) -> Self {
        megrams.into_iter().fold(Potentials::default(), |p, m| Potentials {
            m_att: p.m_att + m.attention(now),
            m_dec: p.m_dec + m.decision(now),
        })
    }

    /// The action these potentials advise.
    pub fn action(self) -> Action {
        Action::of(self.m_att, self.m_dec)
    }
}

/// The memory as loaded: Megrams (recalls and demotions applied) with an
/// index by (space, entity), so a query touches only its pair.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    megrams: Vec<Megram>,
    /// space → entity → Megrams: looked up with borrowed keys, allocating only
    /// for a new pair.
    index: HashMap<String, HashMap<String, Vec<usize>>>,
    /// Hash of an id → its Megram; ids whose hash is taken go to `overflow`.
    by_id: HashMap<u64, usize>,
    overflow: HashMap<String, usize>,
}

fn id_hash(id: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(id)
}

impl Memory {
    /// Builds the memory from its records, in order.
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Self {
        let mut memory = Memory::default();
        for entry in entries {
            memory.apply(entry);
        }
        memory
    }

    /// Applies one record.
    pub fn apply(&mut self, entry: Entry) {
        match entry {
            Entry::Megram { megram, .. } => {
                let i = self.megrams.len();
                match self.by_id.entry(id_hash(&megram.id)) {
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(i);
                    }
                    std::collections::hash_map::Entry::Occupied(_) => {
                        self.overflow.insert(megram.id.clone(), i);
                    }
                }
                let entities = match self.index.get_mut(&megram.space) {
                    Some(entities) => entities,
                    None => self.index.entry(megram.space.clone()).or_default(),
                };
                match entities.get_mut(&megram.entity) {
                    Some(ids) => ids.push(i),
                    None => {
                        entities.insert(megram.entity.clone(), vec![i]);
                    }
                }
                self.megrams.push(megram);
            }
            Entry::Recalled { at, ids, .. } => {
                for id in ids {
                    if let Some(i) = self.find(&id) {
                        let m = &mut self.megrams[i];
                        m.t_recalled = Some(m.t_recalled.map_or(at, |r| r.max(at)));
                    }
                }
            }
            Entry::Demoted { id, level, k, .. } => {
                if let Some(i) = self.find(&id) {
                    self.megrams[i].level = level;
                    self.megrams[i].k = k;
                }
            }
        }
    }

    /// The position of the Megram with this id.
    fn find(&self, id: &str) -> Option<usize> {
        match self.by_id.get(&id_hash(id)) {
            Some(&i) if self.megrams[i].id == id => Some(i),
            _ => self.overflow.get(id).copied(),
        }
    }

    /// Every Megram, oldest first.
    pub fn megrams(&self) -> &[Megram] {
        &self.megrams
    }

    /// The number of Megrams.
    pub fn len(&self) -> usize {
        self.megrams.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.megrams.is_empty()
    }

    /// The Megrams tagged (space, entity).
    pub fn matching(&self, space: &str, entity: &str) -> Vec<&Megram> {
        self.index
            .get(space)
            .and_then(|entities| entities.get(entity))
            .map(|ids| ids.iter().map(|&i| &self.megrams[i]).collect())
            .unwrap_or_default()
    }

    /// The potentials of a (space, entity) pair at `now`.
    pub fn query(&self, space: &str, entity: &str, now: Timestamp) -> Potentials {
        Potentials::of(self.matching(space, entity), now)
    }

    /// The (space, entity) pairs, each with its Megrams.
    pub fn clusters(&self) -> impl Iterator<Item = ((&str, &str), Vec<&Megram>)> {
        self.index.iter().flat_map(move |(space, entities)| {
            entities.iter().map(move |(entity, ids)| {
                (
                    (space.as_str(), entity.as_str()),
                    ids.iter().map(|&i| &self.megrams[i]).collect(),
                )
            })
        })
    }
}

/// What one Dreamer pass would do.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Dream {
    /// M/K Megrams whose own attention fell below 0.1: compacted away.
    pub forget: Vec<String>,
    /// C-level Megrams of a cluster whose M_dec is negative: demoted to K, k 0.05.
    pub demote: Vec<String>,
    /// New C-level Megrams consolidating strong clusters.
    pub consolidate: Vec<Megram>,
}

impl Dream {
    /// Whether the pass changes nothing.
    pub fn is_empty(&self) -> bool {
        self.forget.is_empty() && self.demote.is_empty() && self.consolidate.is_empty()
    }
}

/// Plans a Dreamer pass at `now`; `id` names new Megrams.
pub fn dream(memory: &Memory, now: Timestamp, mut id: impl FnMut() -> String) -> Dream {
    let mut plan = Dream {
        forget: memory
            .megrams()
            .iter()
            .filter(|m| matches!(m.level, Level::M | Level::K) && m.attention(now) < 0.1)
            .map(|m| m.id.clone())
            .collect(),
        ..Dream::default()
    };
    // What this pass forgets no longer counts for the clusters.
    let forgotten: std::collections::HashSet<&str> = plan.forget.iter().map(String::as_str).collect();
    let mut clusters: Vec<_> = memory.clusters().collect();
    clusters.sort_by(|a, b| a.0.cmp(&b.0));
    for ((space, entity), mut megrams) in clusters {
        megrams.retain(|m| !forgotten.contains(m.id.as_str()));
        if megrams.is_empty() {
            continue;
        }
        let p = Potentials::of(megrams.iter().copied(), now);
        let common = |sign: f64| megrams.iter().any(|m| m.level == Level::C && m.sigma * sign > 0.0);
        if p.m_dec < 0.0 {
            plan.demote.extend(
                megrams
                    .iter()
                    .filter(|m| m.level == Level::C && m.sigma > 0.0)
                    .map(|m| m.id.clone()),
            );
        }
        let (positive, negative) = (
            megrams.iter().filter(|m| m.sigma > 0.0).count(),
            megrams.iter().filter(|m| m.sigma < 0.0).count(),
        );
        let mut consolidated = |sigma: f64, state: &str, content: String| Megram {
            id: id(),
            level: Level::C,
            t: now,
            t_recalled: None,
            space: space.to_string(),
            entity: entity.to_string(),
            content,
            state: state.to_string(),
            f: 1.0,
            sigma,
            k: 0.0,
        };
        if p.m_att >= 5.0 && p.m_dec >= 3.0 && !common(1.0) {
            plan.consolidate.push(consolidated(
                1.0,
                "best_practice",
                format!(
                    "Best practice: {space} on {entity} worked in {positive} of {} recorded outcomes (M_att {:.2}, M_dec {:+.2}).",
                    megrams.len(),
                    p.m_att,
                    p.m_dec
                ),
            ));
        } else if p.m_dec <= -3.0 && !common(-1.0) {
            plan.consolidate.push(consolidated(
                -1.0,
                "absolute_constraint",
                format!(
                    "Absolute constraint: do not use {space} on {entity}; it failed in {negative} of {} recorded outcomes (M_att {:.2}, M_dec {:+.2}).",
                    megrams.len(),
                    p.m_att,
                    p.m_dec
                ),
            ));
        }
    }
    plan
}

/// Errors of the memory file.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What loading found besides the records.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// The memory.
    pub memory: Memory,
    /// Lines that could not be read (a torn last line, a newer format), by number.
    pub skipped: Vec<usize>,
    /// The file's size in bytes.
    pub bytes: u64,
}

impl Loaded {
    /// Reads memory-journal bytes. A line that is not a record is skipped and
    /// counted; nothing in the bytes can make this fail.
    pub fn from_bytes(bytes: &[u8]) -> Loaded {
        // Parsing dominates a large memory's load: chunks of whole lines are
        // parsed on every core, then applied in file order.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
        let chunks = line_chunks(bytes, if bytes.len() < 1 << 20 { 1 } else { threads });
        let parsed: Vec<(Vec<Entry>, Vec<usize>)> = if let [(first_line, chunk)] = chunks[..] {
            vec![parse_lines(first_line, chunk)]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = chunks
                    .iter()
                    .map(|&(first_line, chunk)| scope.spawn(move || parse_lines(first_line, chunk)))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
            })
        };
        let mut loaded = Loaded {
            bytes: bytes.len() as u64,
            ..Loaded::default()
        };
        for (entries, skipped) in parsed {
            for entry in entries {
                loaded.memory.apply(entry);
            }
            loaded.skipped.extend(skipped);
        }
        loaded
    }
}

/// The memory journal on disk: appends under a lock (several aot processes
/// share one file), loads, and the Dreamer's atomic compaction.
#[derive(Debug, Clone)]
pub struct MemoryFile {
    path: PathBuf,
    lock: PathBuf,
}

impl MemoryFile {
    /// The memory beside a state file: `.aot/memory.jsonl` in its folder.
    pub fn beside(state: &Path) -> PathBuf {
        let dir = match state.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        dir.join(".aot").join("memory.jsonl")
    }

    /// Opens (without creating) the memory at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let mut lock = path.clone().into_os_string();
        lock.push(".lock");
        Self {
            path,
            lock: lock.into(),
        }
    }

    /// The memory journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, path: &Path) -> impl Fn(std::io::Error) -> MemoryError {
        let path = path.to_path_buf();
        move |source| MemoryError::Io {
            path: path.clone(),
            source,
        }
    }

    fn locked(&self) -> Result<File, MemoryError> {
        if let Some(dir) = self.lock.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(self.io(dir))?;
        }
        let file = file::open_no_follow(&self.lock, OpenOptions::new().create(true).truncate(false).write(true))
            .map_err(self.io(&self.lock))?;
        file.lock().map_err(self.io(&self.lock))?;
        Ok(file)
    }

    /// Appends records: one write of whole lines under the lock, then fsync.
    pub fn append(&self, entries: &[Entry]) -> Result<(), MemoryError> {
        if entries.is_empty() {
            return Ok(());
        }
        let _lock = self.locked()?;
        self.append_locked(entries)
    }

    /// Appends records; the caller holds the lock.
    fn append_locked(&self, entries: &[Entry]) -> Result<(), MemoryError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for entry in entries {
            // Serializing plain data cannot fail.
            text.push_str(&serde_json::to_string(entry).unwrap_or_default());
            text.push('\n');
        }
        let mut file = file::open_no_follow(&self.path, OpenOptions::new().read(true).create(true).append(true))
            .map_err(self.io(&self.path))?;
        // A torn last line (a writer killed mid-line) would swallow the first
        // record appended after it: start on a fresh line.
        if ends_torn(&mut file).map_err(self.io(&self.path))? {
            text.insert(0, '\n');
        }
        file.write_all(text.as_bytes()).map_err(self.io(&self.path))?;
        file.sync_data().map_err(self.io(&self.path))
    }

    /// Loads the memory; a missing file is an empty memory. A line that is
    /// not a record (a torn last line, a line of a newer build) is skipped and
    /// counted in `skipped`.
    pub fn load(&self) -> Result<Loaded, MemoryError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(e) => return Err(self.io(&self.path)(e)),
        };
        Ok(Loaded::from_bytes(&bytes))
    }

    /// Carries out a Dreamer pass under the lock: forgotten Megrams (and their
    /// recall records) are compacted away — temp file, fsync, rename — keeping
    /// every other line as it was; demotions and consolidations are appended.
    pub fn apply_dream(&self, plan: &Dream, now: Timestamp) -> Result<(), MemoryError> {
        if plan.is_empty() {
            return Ok(());
        }
        let _lock = self.locked()?;
        // Compactions hold this lock: a temporary file seen now is one a
        // killed Dreamer left.
        file::remove_stale_temps(&self.path);
        if !plan.forget.is_empty() {
            let text = match std::fs::read_to_string(&self.path) {
                Ok(text) => text,
                Err(e) if e.kind() == ErrorKind::NotFound => String::new(),
                Err(e) => return Err(self.io(&self.path)(e)),
            };
            let forget: std::collections::HashSet<&str> = plan.forget.iter().map(String::as_str).collect();
            let mut kept = String::with_capacity(text.len());
            for line in text.lines() {
                let drop = match serde_json::from_str::<Entry>(line) {
                    Ok(Entry::Megram { megram, .. }) => forget.contains(megram.id.as_str()),
                    Ok(Entry::Recalled { ids, .. }) => ids.iter().all(|id| forget.contains(id.as_str())),
                    Ok(Entry::Demoted { id, .. }) => forget.contains(id.as_str()),
                    // A line this build cannot read is kept: it is not ours to drop.
                    Err(_) => false,
                };
                if !drop {
                    kept.push_str(line);
                    kept.push('\n');
                }
            }
            file::write_atomic(&self.path, kept.as_bytes()).map_err(self.io(&self.path))?;
        }
        let mut entries: Vec<Entry> = plan
            .demote
            .iter()
            .map(|id| Entry::Demoted {
                v: MEMORY_VERSION,
                at: now,
                id: id.clone(),
                level: Level::K,
                k: 0.05,
            })
            .collect();
        entries.extend(plan.consolidate.iter().cloned().map(Entry::megram));
        self.append_locked(&entries)
    }
}

/// Splits `bytes` into about `n` chunks of whole lines, each with the number
/// of its first line.
fn line_chunks(bytes: &[u8], n: usize) -> Vec<(usize, &[u8])> {
    let mut chunks = Vec::new();
    let (mut start, mut line) = (0, 1);
    let size = bytes.len().div_ceil(n.max(1)).max(1);
    while start < bytes.len() {
        let mut end = (start + size).min(bytes.len());
        while end < bytes.len() && bytes[end - 1] != b'\n' {
            end += 1;
        }
        let chunk = &bytes[start..end];
        chunks.push((line, chunk));
        line += chunk.iter().filter(|b| **b == b'\n').count();
        start = end;
    }
    chunks
}

/// Parses whole lines; returns the records and the numbers of unreadable lines.
fn parse_lines(first_line: usize, chunk: &[u8]) -> (Vec<Entry>, Vec<usize>) {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for (n, line) in chunk.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Entry>(line) {
            Ok(entry) => entries.push(entry),
            Err(_) => skipped.push(first_line + n),
        }
    }
    (entries, skipped)
}

/// Turns a goal into a task-intent slug: lower case, words joined by `-`.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        if out.len() + word.len() > 60 {
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&word.to_lowercase());
    }
    if out.is_empty() { "task".to_string() } else { out }
}

/// The local environment's identifier: OS, architecture and host name.
pub fn environment() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string());
    format!("{}-{}@{host}", std::env::consts::OS, std::env::consts::ARCH)
}

/// Whether a non-empty file's last byte is not a line break.
fn ends_torn(file: &mut File) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_767_225_600_000;

    fn at_days(days: f64) -> Timestamp {
        Timestamp::from_millis(T0 + (days * DAY_MS) as u64)
    }

    fn megram(id: &str, state: &str, level: Level) -> Megram {
        let r = row(state).unwrap();
        Megram {
            id: id.into(),
            level,
            t: at_days(0.0),
            t_recalled: None,
            space: "sed".into(),
            entity: "f".into(),
            content: state.into(),
            state: state.into(),
            f: r.f,
            sigma: r.sigma,
            k: r.k,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn decay_at_zero_one_and_fourteen_days() {
        let m = megram("a", "success", Level::M); // f .8, σ +1, k .05
        assert!(close(m.attention(at_days(0.0)), 0.8));
        assert!(close(m.attention(at_days(1.0)), 0.8 * (-0.05f64).exp()));
        assert!(
            close(m.decision(at_days(1.0)), 0.760_983_539_6),
            "{}",
            m.decision(at_days(1.0))
        );
        // k = 0.05 is a ~14-day half-life: 0.8·e^(−0.7) = 0.397 27
        assert!(close(m.attention(at_days(14.0)), 0.8 * (-0.7f64).exp()));
        assert!((m.attention(at_days(14.0)) - 0.397_27).abs() < 1e-5);
        let refine = megram("r", "refine", Level::M); // k .5: fast GC
        assert!((refine.attention(at_days(14.0)) - 0.1 * (-7.0f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn a_recall_restarts_the_decay_clock() {
        let mut memory = Memory::from_entries([Entry::megram(megram("a", "success", Level::M))]);
        let before = memory.query("sed", "f", at_days(14.0)).m_att;
        memory.apply(Entry::Recalled {
            v: MEMORY_VERSION,
            at: at_days(10.0),
            ids: vec!["a".into()],
        });
        let after = memory.query("sed", "f", at_days(14.0)).m_att;
        assert!(close(after, 0.8 * (-0.2f64).exp()), "4 days since the recall: {after}");
        assert!(after > before);
    }

    #[test]
    fn actions_from_the_two_channels() {
        let now = at_days(0.0);
        let single = |state| Memory::from_entries([Entry::megram(megram("a", state, Level::M))]).query("sed", "f", now);
        let exploit = single("success");
        assert_eq!(
            (exploit.m_att, exploit.m_dec, exploit.action()),
            (0.8, 0.8, Action::Exploit)
        );
        assert_eq!(single("change_approach").action(), Action::Avoid);
        assert_eq!(
            single("change_path").action(),
            Action::Ignore,
            "0.30 of energy is below 0.5"
        );
        assert_eq!(single("refine").action(), Action::Ignore);
        // One big success and one big failure: high energy, no direction.
        let both = Memory::from_entries([
            Entry::megram(megram("a", "success", Level::M)),
            Entry::megram(megram("b", "change_approach", Level::M)),
        ])
        .query("sed", "f", now);
        assert!(close(both.m_att, 1.65) && close(both.m_dec, -0.05));
        assert_eq!(both.action(), Action::Caution);
        assert_eq!(Memory::default().query("sed", "f", now).action(), Action::Ignore);
        // The thresholds themselves.
        assert_eq!(Action::of(0.5, 0.2), Action::Caution);
        assert_eq!(Action::of(0.5, -0.2), Action::Caution);
        assert_eq!(Action::of(0.499, 0.9), Action::Ignore);
    }

    #[test]
    fn the_dreamer_forgets_faded_megrams() {
        let memory = Memory::from_entries([
            Entry::megram(megram("old-refine", "refine", Level::M)),
            Entry::megram(megram("fresh", "success", Level::M)),
            Entry::megram(Megram {
                k: 0.0,
                ..megram("timeless", "refine", Level::C)
            }),
        ]);
        // After 5 days a refine Megram (f .1, k .5) holds 0.1·e^(−2.5) < 0.1.
        let plan = dream(&memory, at_days(5.0), || "new".into());
        assert_eq!(plan.forget, ["old-refine"]);
        assert!(plan.demote.is_empty() && plan.consolidate.is_empty());
    }

    #[test]
    fn the_dreamer_demotes_common_sense_that_evidence_contradicts() {
        let memory = Memory::from_entries([
            Entry::megram(Megram {
                k: 0.0,
                f: 0.5,
                ..megram("sop", "success", Level::C)
            }),
            Entry::megram(megram("fail", "change_approach", Level::M)),
        ]);
        // M_dec = 0.5 − 0.85 < 0: trust bankruptcy.
        let plan = dream(&memory, at_days(0.0), || "new".into());
        assert_eq!(plan.demote, ["sop"]);
        let mut demoted = memory.clone();
        demoted.apply(Entry::Demoted {
            v: MEMORY_VERSION,
            at: at_days(0.0),
            id: "sop".into(),
            level: Level::K,
            k: 0.05,
        });
        assert_eq!(demoted.megrams()[0].level, Level::K);
        assert_eq!(demoted.megrams()[0].k, 0.05);
    }

    #[test]
    fn the_dreamer_consolidates_strong_clusters_once() {
        let successes: Vec<Entry> = (0..7)
            .map(|i| Entry::megram(megram(&format!("s{i}"), "success", Level::M)))
            .collect();
        // 7 × 0.8 = 5.6 ≥ 5 and ≥ 3: a best practice.
        let memory = Memory::from_entries(successes.clone());
        let plan = dream(&memory, at_days(0.0), || "bp".into());
        assert_eq!(plan.consolidate.len(), 1);
        let c = &plan.consolidate[0];
        assert_eq!(
            (c.level, c.sigma, c.k, c.state.as_str()),
            (Level::C, 1.0, 0.0, "best_practice")
        );
        assert!(
            c.content.starts_with("Best practice: sed on f worked in 7 of 7"),
            "{}",
            c.content
        );
        let mut again = memory.clone();
        again.apply(Entry::megram(c.clone()));
        assert!(dream(&again, at_days(0.0), || "bp2".into()).consolidate.is_empty());

        let failures: Vec<Entry> = (0..4)
            .map(|i| Entry::megram(megram(&format!("f{i}"), "abandon", Level::M)))
            .collect();
        // 4 × −0.95 = −3.8 ≤ −3: an absolute constraint.
        let plan = dream(&Memory::from_entries(failures), at_days(0.0), || "ac".into());
        assert_eq!(plan.consolidate.len(), 1);
        assert_eq!(plan.consolidate[0].sigma, -1.0);
        assert!(
            plan.consolidate[0]
                .content
                .starts_with("Absolute constraint: do not use sed on f")
        );
    }

    #[test]
    fn slugs_and_rows() {
        assert_eq!(
            slug("Make the parser crate pass its test suite!"),
            "make-the-parser-crate-pass-its-test-suite"
        );
        assert_eq!(slug("   "), "task");
        assert_eq!(
            row("abandon"),
            Some(Row {
                f: 0.95,
                sigma: -1.0,
                k: 0.05
            })
        );
        assert_eq!(row("accept").unwrap().sigma, 1.0);
        assert_eq!(row("change_path").unwrap().sigma, 0.0);
        assert_eq!(row("nothing"), None);
    }

    #[test]
    fn chunks_cover_every_line_once_with_its_number() {
        let text = b"a\nbb\n\nccc\ndddd";
        for n in 1..8 {
            let chunks = line_chunks(text, n);
            let joined: Vec<u8> = chunks.iter().flat_map(|(_, c)| c.iter().copied()).collect();
            assert_eq!(joined, text, "n = {n}");
            for (line, chunk) in chunks {
                let before = text[..chunk.as_ptr() as usize - text.as_ptr() as usize]
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count();
                assert_eq!(line, before + 1, "n = {n}");
            }
        }
        // An unreadable line is reported by its number in the whole file.
        let (entries, skipped) = parse_lines(7, b"{}\nnot json\n");
        assert!(entries.is_empty());
        assert_eq!(skipped, [7, 8]);
    }

    #[test]
    fn appends_compaction_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let file = MemoryFile::new(dir.path().join(".aot/memory.jsonl"));
        assert!(
            file.load().unwrap().memory.is_empty(),
            "a missing file is an empty memory"
        );
        file.append(&[
            Entry::megram(megram("old-refine", "refine", Level::M)),
            Entry::megram(megram("keep", "success", Level::M)),
        ])
        .unwrap();
        file.append(&[Entry::Recalled {
            v: MEMORY_VERSION,
            at: at_days(0.0),
            ids: vec!["old-refine".into()],
        }])
        .unwrap();
        let loaded = file.load().unwrap();
        assert_eq!(loaded.memory.len(), 2);
        let plan = dream(&loaded.memory, at_days(5.0), || "x".into());
        file.apply_dream(&plan, at_days(5.0)).unwrap();
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert_eq!(
            text.lines().count(),
            1,
            "the faded Megram and its recall are gone:\n{text}"
        );
        assert!(text.contains("\"id\":\"keep\""));
    }
}
