//! Workspace isolation with git (`constraints.isolation: git`): an attempt
//! never writes the user's tree; what it changes reaches the tree only by
//! landing, when it succeeds.
//!
//! The mechanism (defended in docs/architecture.md): aot keeps the tree *as
//! landed* — the user's files as they are (tracked, and untracked but not
//! ignored) plus every change that landed — as a git tree, written through
//! temporary index files (never the user's index, HEAD or branches). Every
//! attempt works in a **copy**: a linked worktree from a pool reused across
//! attempts (so a copy keeps its ignored build cache), checked out at the
//! tree as landed when it starts, the user's edits made meanwhile taken in
//! first. A success **lands**: its changes, merged ([`merge`]) with what
//! landed since it began, then per file three ways with the user's file as it
//! is *now* — the user's concurrent edit always survives, and a change that
//! does not merge with it fails the attempt (nothing is written). A landing
//! is write-ahead: a ref records each path's before and after (as git
//! objects) before the first file is written, files are written whole
//! (beside their place, then renamed), and the next start finishes or takes
//! back a landing a kill interrupted — by whether the run had journaled it —
//! so a change is never applied twice. A failed, cancelled or killed attempt
//! touches nothing of the user's.

pub mod git;
pub mod merge;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio::sync::Mutex;

use self::git::{Git, GitError};
use self::merge::{Delta, Entry, Resolution};
use crate::engine::roles::{BoxFuture, Interrupted, Landed, Landing, Place, Recovered, Workspace};
use crate::model::Changes;

/// Isolation through git, for one state file's runs.
pub struct GitWorkspace {
    git: Git,
    /// `refs/aot/<key>/`: this state file's refs.
    refs: String,
    /// Each landing is committed on the user's branch (`constraints.commit: per_atom`).
    commit_per_atom: bool,
    /// Where this state file's copies live: outside the repository and its
    /// `.git` (agent CLIs refuse to edit files under a `.git` folder).
    copies: PathBuf,
    /// The most copies kept from one run to the next.
    pool_max: usize,
    inner: Mutex<Inner>,
}

/// What the workspace knows between calls (behind one lock: landings are
/// serialized).
#[derive(Default)]
struct Inner {
    /// The tree as landed, and the commit that holds it (for worktrees).
    landed: String,
    landed_commit: String,
    /// Each open place: the tree it started from, and its copy's pool slot.
    places: HashMap<u64, Entered>,
    /// Copies: their folder, and whether an attempt uses it.
    pool: Vec<(PathBuf, bool)>,
    /// Empty folders of the tree as landed (git keeps none): the user's at
    /// the start, and those landings made; made in each copy.
    folders: std::collections::BTreeSet<String>,
    next: u64,
}

struct Entered {
    base: String,
    slot: usize,
}

impl GitWorkspace {
    /// Isolation for the state file at `state`; `Ok(None)` when its folder
    /// is not in a git work tree, an error when git is missing or refuses it. aot's own files are
    /// never part of an attempt's changes: the state file, what aot keeps
    /// beside it (`<name>.*`, `.<name>.*`), the `.aot` folder, and `others`
    /// (the memory, wherever it is).
    pub async fn discover(state: &Path, others: &[PathBuf]) -> Result<Option<Self>, GitError> {
        let dir = state
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let Some((top, common)) = Git::discover(dir).await? else {
            return Ok(None);
        };
        let relative = |path: &Path| -> Option<String> {
            let full = canonical(path);
            let rest = full.strip_prefix(&top).ok()?;
            Some(rest.to_string_lossy().replace('\\', "/")).filter(|s| !s.is_empty())
        };
        let Some(name) = relative(state) else {
            return Ok(None);
        };
        let (folder, file) = match name.rsplit_once('/') {
            Some((folder, file)) => (format!("{folder}/"), file.to_string()),
            None => (String::new(), name.clone()),
        };
        let folder_glob = glob_escape(&folder);
        // Every run's files in the repository, not only this one's: another
        // state file's journal or `.aot` is never an attempt's change.
        let mut own = vec![
            format!(":(top,literal){name}"),
            format!(":(top,glob){folder_glob}{}.*", glob_escape(&file)),
            format!(":(top,glob){folder_glob}.{}.*", glob_escape(&file)),
            ":(top,glob)**/.aot/**".to_string(),
            ":(top,glob)**/*.journal.jsonl".to_string(),
            ":(top,glob)**/.*.journal.jsonl.tmp-*".to_string(),
            // An agent CLI's cache (aider's repo map), not the attempt's work.
            ":(top,glob)**/.aider.tags.cache.v*/**".to_string(),
        ];
        own.extend(
            others
                .iter()
                .filter_map(|p| relative(p))
                .map(|p| format!(":(top,literal){p}")),
        );
        let key = key_of(&name, &top);
        let scratch = common.join("aot").join(&key);
        let copies = copies_root().join(&key);
        Ok(Some(Self {
            git: Git::new(top, common, scratch, own),
            refs: format!("refs/aot/{key}"),
            commit_per_atom: false,
            copies,
            pool_max: 1,
            inner: Mutex::new(Inner::default()),
        }))
    }

    /// Commits each landing (and each undo) on the user's branch.
    pub fn committing(mut self, per_atom: bool) -> Self {
        self.commit_per_atom = per_atom;
        self
    }

    /// Keeps up to `copies` copies from one run to the next (the pool's
    /// bound: `max_parallel_agents`), so a later run's attempts start in a
    /// copy with its build cache warm.
    pub fn pooling(mut self, copies: usize) -> Self {
        self.pool_max = copies.max(1);
        self
    }

    /// The work tree's top folder.
    pub fn top(&self) -> &Path {
        &self.git.top
    }

    /// Where failed attempts' trees kept for inspection (`--keep-failed`) are.
    pub fn kept_folder(&self) -> PathBuf {
        self.copies.join("kept")
    }

    fn landed_ref(&self) -> String {
        format!("{}/landed", self.refs)
    }

    /// The write-ahead record of landing `id`: a commit of the paths' after
    /// images whose parent holds their before images.
    fn landing_ref(&self, id: u64) -> String {
        format!("{}/landing/{id}", self.refs)
    }

    fn trees(&self) -> PathBuf {
        self.copies.join("trees")
    }

    async fn open_inner(&self, landed: &[(String, u32)]) -> Result<Recovered, GitError> {
        let mut inner = self.inner.lock().await;
        let _ = tokio::fs::create_dir_all(&self.git.scratch).await;
        let _ = tokio::fs::create_dir_all(self.trees()).await;
        sweep_scratch(&self.git.scratch).await;
        // A landing a kill interrupted is finished when the run had journaled
        // it, else taken back (the atom runs again): never applied twice.
        let mut recovered = Recovered {
            landings: self.settle_all(landed).await?,
            ..Recovered::default()
        };
        sweep_orphaned_copies().await;
        // Copies an earlier run kept are this run's pool (each is reset when
        // used), up to the bound; the rest, and aot's refs, go.
        let mut pool = Vec::new();
        for copy in self.git.worktrees_under(&self.trees()).await {
            if pool.len() < self.pool_max && tokio::fs::try_exists(copy.join(".git")).await.unwrap_or(false) {
                pool.push((copy, false));
            } else {
                self.git.remove_worktree(&copy).await;
                recovered.copies += 1;
            }
        }
        for name in self.git.refs(&self.refs).await? {
            self.git.delete_ref(&name).await?;
        }
        // The tree as it is — the user's uncommitted changes included — is
        // where this run starts.
        let start = self.git.snapshot(&self.git.top).await?;
        let commit = self.git.commit(&start, None, "aot: the starting point", false).await?;
        self.git.set_ref(&self.landed_ref(), &commit).await?;
        let next = pool.len() as u64;
        let folders = self.git.empty_folders(&self.git.top).await?.into_iter().collect();
        *inner = Inner {
            landed: start,
            landed_commit: commit,
            pool,
            next,
            folders,
            ..Inner::default()
        };
        Ok(recovered)
    }

    /// Settles every landing whose write-ahead record is still there (see
    /// [`GitWorkspace::settle_interrupted`]), each record removed once done.
    async fn settle_all(&self, landed: &[(String, u32)]) -> Result<Vec<Interrupted>, GitError> {
        let mut settled = Vec::new();
        for name in self.git.refs(&format!("{}/landing/", self.refs)).await? {
            settled.extend(self.settle_interrupted(&name, landed).await?);
            self.git.delete_ref(&name).await?;
        }
        Ok(settled)
    }

    /// Finishes or takes back the landing whose record is the ref `name`:
    /// each path still as the landing left it (or as it found it) is made
    /// what it should be; a path the user changed since stays theirs.
    async fn settle_interrupted(&self, name: &str, landed: &[(String, u32)]) -> Result<Option<Interrupted>, GitError> {
        let Some(commit) = self.git.resolve(name).await else {
            return Ok(None);
        };
        let message = self
            .git
            .run(&self.git.top, &["log", "-1", "--format=%B", &commit])
            .await?;
        let message = String::from_utf8_lossy(&message).into_owned();
        let field = |key: &str| {
            message
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        let (Some(atom), Some(attempt)) = (field("atom: "), field("attempt: ").and_then(|a| a.parse::<u32>().ok()))
        else {
            return Ok(None);
        };
        let before = self.rev(&format!("{commit}^1^{{tree}}")).await?;
        let after = self.rev(&format!("{commit}^{{tree}}")).await?;
        let finished = landed.iter().any(|(a, n)| *a == atom && *n == attempt);
        let (from, to) = if finished { (&before, &after) } else { (&after, &before) };
        let deltas = self.git.diff(from, to).await?;
        let paths: Vec<&str> = deltas.iter().map(|d| d.path.as_str()).collect();
        // A file the kill caught being written is beside its place, whole
        // or not: it goes (the place itself is as before or as after).
        for path in &paths {
            sweep_landing_temps(&self.git.top.join(path)).await;
        }
        let now = self.git.entries_in(&self.git.top, &paths).await?;
        let mut writes = Vec::new();
        let mut kept = Vec::new();
        for (delta, now) in deltas.iter().zip(now) {
            if now == delta.new {
                continue;
            }
            if now == delta.old {
                writes.push((delta.path.clone(), delta.new.clone()));
            } else {
                kept.push(delta.path.clone());
            }
        }
        self.git.write_whole(&self.git.top, &writes).await?;
        Ok(Some(Interrupted {
            atom: atom.into(),
            attempt,
            finished,
            changes: self.git.changes(from, to).await?,
            kept,
        }))
    }

    /// Removes what earlier runs left: copies of the work tree and aot's
    /// refs for this state file. Returns how many copies there were.
    async fn clear_leftovers(&self) -> Result<usize, GitError> {
        let mut copies = 0;
        for stray in self.git.worktrees_under(&self.trees()).await {
            self.git.remove_worktree(&stray).await;
            copies += 1;
        }
        let _ = tokio::fs::remove_dir_all(self.trees()).await;
        for name in self.git.refs(&self.refs).await? {
            self.git.delete_ref(&name).await?;
        }
        Ok(copies)
    }

    /// For a run without isolation (`isolation: none`) in a work tree that
    /// had it before: settles a landing a kill interrupted (see
    /// [`Workspace::open`]; `landed` are the landings the journal holds) and
    /// forgets what earlier isolated runs left.
    pub async fn stand_down(&self, landed: &[(String, u32)]) -> Result<Vec<Interrupted>, GitError> {
        let _inner = self.inner.lock().await;
        let settled = self.settle_all(landed).await?;
        self.clear_leftovers().await?;
        Ok(settled)
    }

    async fn rev(&self, name: &str) -> Result<String, GitError> {
        let out = self.git.run(&self.git.top, &["rev-parse", "--verify", name]).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    async fn enter_inner(&self) -> Result<Place, GitError> {
        let mut inner = self.inner.lock().await;
        let id = inner.next;
        inner.next += 1;
        // The user's edits made since the last landing are part of what this
        // attempt starts from (the tree as landed takes them in).
        let now = self.git.snapshot(&self.git.top).await?;
        if now != inner.landed {
            self.advance(&mut inner, now, "aot: your edits during the run").await?;
        }
        let slot = match inner.pool.iter().position(|(_, busy)| !busy) {
            Some(slot) => {
                let path = inner.pool[slot].0.clone();
                self.git.reset_worktree(&path, &inner.landed_commit).await?;
                slot
            }
            None => {
                // Named by the place that made it, with this process: unique
                // beside copies earlier runs kept.
                let path = self.trees().join(format!("{}-{id}", std::process::id()));
                self.git.add_worktree(&path, &inner.landed_commit).await?;
                inner.pool.push((path, false));
                inner.pool.len() - 1
            }
        };
        let copy = inner.pool[slot].0.clone();
        // Empty folders of the tree as landed (git keeps none) are there in the copy too.
        for folder in &inner.folders {
            let _ = tokio::fs::create_dir_all(copy.join(folder)).await;
        }
        inner.pool[slot].1 = true;
        let base = inner.landed.clone();
        inner.places.insert(id, Entered { base, slot });
        Ok(Place {
            id,
            top: self.git.top.clone(),
            copy: Some(copy),
        })
    }

    /// Makes `tree` the tree as landed, committed with `message`.
    async fn advance(&self, inner: &mut Inner, tree: String, message: &str) -> Result<(), GitError> {
        let commit = self
            .git
            .commit(&tree, Some(&inner.landed_commit), message, false)
            .await?;
        self.git.set_ref(&self.landed_ref(), &commit).await?;
        inner.landed = tree;
        inner.landed_commit = commit;
        Ok(())
    }

    /// Resolves a merge plan into tree entries; the files that conflict, with why.
    async fn resolve(&self, plan: Vec<(String, Resolution)>) -> Result<(Vec<(String, Entry)>, Vec<String>), GitError> {
        let mut entries = Vec::new();
        let mut conflicts = Vec::new();
        for (path, resolution) in plan {
            match resolution {
                Resolution::Take(entry) => entries.push((path, entry)),
                Resolution::Merge {
                    mode,
                    base,
                    ours,
                    theirs,
                } => match self.git.merge_blobs(base.as_deref(), &ours, &theirs).await? {
                    Some(blob) => entries.push((path, Some((mode, blob)))),
                    None => conflicts.push(format!("{path} (both changed the same lines)")),
                },
                Resolution::Conflict(why) => conflicts.push(format!("{path} ({why})")),
            }
        }
        Ok((entries, conflicts))
    }

    /// How `entries` (what lands over the tree as landed, `old`) meet the
    /// user's tree now: a file the user has not changed since `old` takes
    /// its entry; one they changed is merged three ways (old, theirs, what
    /// lands) — a change that does not merge is a conflict, with why. Returns
    /// what to write, the tree entries after it (merged files as merged),
    /// each path's entry in the user's tree now, and the conflicts.
    async fn meet_user(&self, old: &str, entries: &[(String, Entry)]) -> Result<Met, GitError> {
        let paths: Vec<&str> = entries.iter().map(|(p, _)| p.as_str()).collect();
        let now = self.git.entries_in(&self.git.top, &paths).await?;
        let before = self.entries_at(old, &paths).await?;
        let mut met = Met::default();
        for (((path, entry), now), before) in entries.iter().zip(now).zip(before) {
            met.now.push((path.clone(), now.clone()));
            let untouched = now.as_ref().map(|(_, blob)| blob) == before.as_ref();
            met.yours_changed |= !untouched;
            if untouched || now == *entry {
                if now != *entry {
                    met.writes.push((path.clone(), entry.clone()));
                }
                met.entries.push((path.clone(), entry.clone()));
                continue;
            }
            match (&now, entry) {
                (Some((mode, ours)), Some((_, theirs))) => {
                    match self.git.merge_blobs(before.as_deref(), ours, theirs).await? {
                        Some(blob) => {
                            let merged = Some((mode.clone(), blob));
                            met.writes.push((path.clone(), merged.clone()));
                            met.entries.push((path.clone(), merged));
                        }
                        None => met
                            .conflicts
                            .push(format!("{path} (you changed the same lines while it ran)")),
                    }
                }
                (None, _) => met.conflicts.push(format!("{path} (you deleted it while it ran)")),
                (Some(_), None) => met
                    .conflicts
                    .push(format!("{path} (you changed it while it ran, and it deletes it)")),
            }
        }
        Ok(met)
    }

    /// Writes `met` into the user's tree under a write-ahead record (the
    /// ref of landing `id`, naming `atom` and `attempt`): each path's before
    /// image (the user's file now) and after image, kept until the run has
    /// journaled the landing ([`Workspace::settle`]).
    async fn write_ahead(
        &self,
        inner: &Inner,
        id: u64,
        who: (&str, u32),
        met: &Met,
        new: &str,
    ) -> Result<(), GitError> {
        if met.writes.is_empty() {
            return Ok(());
        }
        // Your files as they were and as they will be; when you changed none
        // of them since the last landing, that is the tree as landed and the
        // new one.
        let (before, after) = if met.yours_changed {
            let before = self.git.edit_tree(&inner.landed, &met.now).await?;
            let after = self.git.edit_tree(&before, &met.writes).await?;
            (before, after)
        } else {
            (inner.landed.clone(), new.to_string())
        };
        let before = self.git.commit(&before, None, "aot: before a landing", false).await?;
        let record = format!("aot: a landing\n\natom: {}\nattempt: {}\n", who.0, who.1);
        let after = self.git.commit(&after, Some(&before), &record, false).await?;
        self.git.set_ref(&self.landing_ref(id), &after).await?;
        self.git.write_whole(&self.git.top, &met.writes).await
    }

    /// The blob ids `paths` have in `tree`.
    async fn entries_at(&self, tree: &str, paths: &[&str]) -> Result<Vec<Option<String>>, GitError> {
        // Paths as they are, not patterns (`:x`, `*` are file names here).
        let mut args = vec!["--literal-pathspecs", "ls-tree", "-z", "--full-tree", tree, "--"];
        args.extend(paths.iter().copied());
        let out = self.git.run(&self.git.top, &args).await?;
        let mut found = HashMap::new();
        for line in out.split(|b| *b == 0) {
            let line = String::from_utf8_lossy(line);
            if let Some((meta, path)) = line.split_once('\t') {
                let id = meta.split(' ').nth(2).unwrap_or_default().to_string();
                found.insert(path.to_string(), id);
            }
        }
        Ok(paths.iter().map(|p| found.get(*p).cloned()).collect())
    }

    async fn land_inner(&self, place: &Place, message: &str, who: (&str, u32)) -> Result<Landing, GitError> {
        let mut inner = self.inner.lock().await;
        let Some(entered) = inner.places.get(&place.id) else {
            return Err(unknown_place());
        };
        let (base, slot) = (entered.base.clone(), entered.slot);
        let copy = inner.pool[slot].0.clone();
        let result = self.git.snapshot(&copy).await?;
        let own = self.git.diff(&base, &result).await?;
        let landed = self.git.diff(&base, &inner.landed).await?;
        let (entries, conflicts) = self.resolve(merge::plan(&own, &landed)).await?;
        if !conflicts.is_empty() {
            return Ok(Landing::Conflict { files: conflicts });
        }
        // Then with the user's files as they are now: all of it lands, or
        // nothing does.
        let met = self.meet_user(&inner.landed, &entries).await?;
        if !met.conflicts.is_empty() {
            return Ok(Landing::Conflict { files: met.conflicts });
        }
        let empty = self.git.empty_folders(&copy).await?;
        let old = inner.landed.clone();
        let new = self.git.edit_tree(&old, &met.entries).await?;
        self.write_ahead(&inner, place.id, who, &met, &new).await?;
        for folder in empty {
            let _ = tokio::fs::create_dir_all(self.git.top.join(&folder)).await;
            inner.folders.insert(folder);
        }
        if new != old {
            self.advance(&mut inner, new.clone(), message).await?;
        }
        self.release(&mut inner, place.id);
        let landed = self.landed(&old, &new, message).await?;
        Ok(Landing::Landed(landed))
    }

    /// What a landing from `old` to `new` changed, committed on the user's
    /// branch when asked: a commit of exactly those files on top of `HEAD`,
    /// and the user's index set to them, so `git status` shows the rest of
    /// their work as it was. A commit that cannot be made (the branch moved
    /// meanwhile, a locked index) is a note: the files landed all the same.
    async fn landed(&self, old: &str, new: &str, message: &str) -> Result<Landed, GitError> {
        let changes = self.git.changes(old, new).await?;
        if !self.commit_per_atom || changes.is_empty() {
            return Ok(Landed {
                changes,
                ..Landed::default()
            });
        }
        let (commit, note) = match self.commit_to_head(old, new, message).await {
            Ok((commit, note)) => (Some(commit), note),
            Err(error) => (None, Some(format!("no commit was made: {error}"))),
        };
        Ok(Landed { changes, commit, note })
    }

    /// The commit, and a note when the user's index could not follow it.
    async fn commit_to_head(&self, old: &str, new: &str, message: &str) -> Result<(String, Option<String>), GitError> {
        let entries = entries_of(&self.git.diff(old, new).await?);
        let head = self.git.resolve("HEAD").await;
        let base = match &head {
            Some(head) => self.rev(&format!("{head}^{{tree}}")).await?,
            None => git::EMPTY_TREE.to_string(),
        };
        let tree = self.git.edit_tree(&base, &entries).await?;
        let commit = self.git.commit(&tree, head.as_deref(), message, true).await?;
        let expected = head.unwrap_or_else(|| "0".repeat(40));
        self.git
            .run(
                &self.git.top,
                &["update-ref", "-m", message, "HEAD", &commit, &expected],
            )
            .await?;
        let note = match self.git.update_index(&self.git.top, &entries).await {
            Ok(()) => None,
            Err(error) => Some(format!(
                "committed as {commit}, but your index did not follow ({error}): `git status` shows the commit's files as staged back; `git reset -q -- PATH` mends it"
            )),
        };
        Ok((commit, note))
    }

    fn release(&self, inner: &mut Inner, id: u64) {
        if let Some(Entered { slot, .. }) = inner.places.remove(&id)
            && let Some(entry) = inner.pool.get_mut(slot)
        {
            entry.1 = false;
        }
    }

    async fn discard_inner(&self, place: &Place, keep: Option<&str>) -> Result<(Changes, Option<PathBuf>), GitError> {
        let mut inner = self.inner.lock().await;
        let Some(entered) = inner.places.get(&place.id) else {
            return Err(unknown_place());
        };
        let (base, slot) = (entered.base.clone(), entered.slot);
        let copy = inner.pool[slot].0.clone();
        // Nothing of the user's is touched: the copy is reset when it is next used.
        let result = self.git.snapshot(&copy).await?;
        let changes = self.git.changes(&base, &result).await?;
        let mut kept = None;
        if let Some(label) = keep {
            // The copy leaves the pool as it is; a new one replaces it.
            let path = self.kept_path(label);
            let (from, to) = (copy.display().to_string(), path.display().to_string());
            tokio::fs::create_dir_all(self.kept_folder())
                .await
                .map_err(|e| GitError {
                    command: "worktree move".into(),
                    message: e.to_string(),
                })?;
            self.git.run(&self.git.top, &["worktree", "move", &from, &to]).await?;
            inner.pool.remove(slot);
            inner.places.remove(&place.id);
            for entered in inner.places.values_mut() {
                if entered.slot > slot {
                    entered.slot -= 1;
                }
            }
            kept = Some(path);
        } else {
            self.release(&mut inner, place.id);
        }
        Ok((changes, kept))
    }

    /// A new folder for a kept tree: `<atom>-<attempt>`, numbered when taken.
    fn kept_path(&self, label: &str) -> PathBuf {
        let folder = self.kept_folder();
        let mut path = folder.join(label);
        let mut n = 2;
        while path.exists() {
            path = folder.join(format!("{label}.{n}"));
            n += 1;
        }
        path
    }

    async fn undo_inner(&self, changes: &Changes, message: &str) -> Result<(Landed, Vec<String>), GitError> {
        let mut inner = self.inner.lock().await;
        // The user's edits since the last landing are taken in first: what
        // is undone is merged with them.
        let now = self.git.snapshot(&self.git.top).await?;
        if now != inner.landed {
            self.advance(&mut inner, now, "aot: your edits during the run").await?;
        }
        // Undoing is landing the reverse: from the landing's result back to
        // where it started, over what landed since.
        let own = self.git.diff(&changes.after, &changes.before).await?;
        let landed = self.git.diff(&changes.after, &inner.landed).await?;
        let (entries, kept) = self.resolve(merge::plan(&own, &landed)).await?;
        let old = inner.landed.clone();
        let new = self.git.edit_tree(&old, &entries).await?;
        if new != old {
            self.advance(&mut inner, new.clone(), message).await?;
            self.git
                .write_whole(&self.git.top, &entries_of(&self.git.diff(&old, &new).await?))
                .await?;
        }
        let undone = self.landed(&old, &new, message).await?;
        Ok((undone, kept))
    }

    async fn close_inner(&self, landed: &[(String, u32)]) -> Vec<Interrupted> {
        let mut inner = self.inner.lock().await;
        // Nothing of the user's to put back: attempts never wrote there. A
        // landing the run did not take in (its task was stopped) is settled.
        // One that cannot be settled now stays for the next start.
        let settled = self.settle_all(landed).await.unwrap_or_default();
        // Up to the bound, copies stay for the next run (warm build caches);
        // the rest go.
        let pool: Vec<PathBuf> = inner.pool.drain(..).map(|(path, _)| path).collect();
        for path in pool.iter().skip(self.pool_max) {
            self.git.remove_worktree(path).await;
        }
        inner.places.clear();
        if let Ok(names) = self.git.refs(&self.refs).await {
            for name in names {
                // A landing that could not be settled stays for the next start.
                if !name.starts_with(&format!("{}/landing/", self.refs)) {
                    let _ = self.git.delete_ref(&name).await;
                }
            }
        }
        sweep_scratch(&self.git.scratch).await;
        // Nothing kept (no copy, no `--keep-failed` tree): leave no empty
        // folder behind. Fails, harmlessly, when not empty.
        let _ = tokio::fs::remove_dir(self.trees()).await;
        let _ = tokio::fs::remove_dir(&self.copies).await;
        let _ = tokio::fs::remove_dir(&self.git.scratch).await;
        settled
    }

    async fn settle_inner(&self, id: u64) {
        let _ = self.git.delete_ref(&self.landing_ref(id)).await;
    }
}

/// What lands, met with the user's tree (see [`GitWorkspace::meet_user`]).
#[derive(Default)]
struct Met {
    /// The files to write.
    writes: Vec<(String, Entry)>,
    /// The tree entries after the landing.
    entries: Vec<(String, Entry)>,
    /// Each path's entry in the user's tree before the landing.
    now: Vec<(String, Entry)>,
    /// The files that do not merge, with why.
    conflicts: Vec<String>,
    /// Whether any of the paths is not as landed in the user's tree.
    yours_changed: bool,
}

fn unknown_place() -> GitError {
    GitError {
        command: "(workspace)".into(),
        message: "no such attempt place".into(),
    }
}

/// The entries `deltas` lead to (their new side).
fn entries_of(deltas: &[Delta]) -> Vec<(String, Entry)> {
    deltas.iter().map(|d| (d.path.clone(), d.new.clone())).collect()
}

/// The name of a state file's refs and scratch folder: its path from the
/// repository's top, with characters refs cannot hold as `-`.
/// Each work tree of a repository (linked worktrees share the git folder)
/// has its own: the top folder's hash ends the key.
fn key_of(name: &str, top: &Path) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{name}-{:08x}", git::fnv(top.as_os_str().as_encoded_bytes()) as u32)
}

/// The trees of failed attempts kept for inspection (`--keep-failed`) for the
/// state file at `state`: each a git worktree, by name (`<atom>-<attempt>`).
/// Empty when the file is not in a git work tree.
pub fn kept_trees(state: &Path) -> Vec<(String, PathBuf)> {
    let absolute = std::path::absolute(state).unwrap_or_else(|_| state.to_path_buf());
    let dir = absolute.parent().unwrap_or(Path::new("."));
    let Ok(out) = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--path-format=absolute", "--show-toplevel"])
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(top) = text.lines().next() else {
        return Vec::new();
    };
    let full = canonical(&absolute);
    let Ok(name) = full.strip_prefix(top) else {
        return Vec::new();
    };
    let folder = copies_root()
        .join(key_of(&name.to_string_lossy().replace('\\', "/"), Path::new(top)))
        .join("kept");
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return Vec::new();
    };
    let mut kept: Vec<(String, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    kept.sort();
    kept
}

/// Where the copies of the work trees live: `$AOT_COPIES`, else
/// `$XDG_CACHE_HOME/aot/copies`, else `~/.cache/aot/copies`, else the
/// temporary folder's `aot-copies` — outside any repository, so no tool that
/// guards `.git` folders (agent CLIs do) refuses to work in a copy.
pub fn copies_root() -> PathBuf {
    let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    nonempty("AOT_COPIES")
        .or_else(|| nonempty("XDG_CACHE_HOME").map(|c| c.join("aot").join("copies")))
        .or_else(|| nonempty("HOME").map(|h| h.join(".cache").join("aot").join("copies")))
        .unwrap_or_else(|| std::env::temp_dir().join("aot-copies"))
}

/// A file name with glob characters escaped.
fn glob_escape(name: &str) -> String {
    name.chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}

/// A path with symbolic links resolved as far as it exists.
fn canonical(path: &Path) -> PathBuf {
    if let Ok(full) = path.canonicalize() {
        return full;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => canonical(parent).join(name),
        _ => std::env::current_dir().map_or_else(|_| path.to_path_buf(), |d| d.join(path)),
    }
}

/// Removes the files a landing killed mid-write left beside `path`
/// (`.<name>.aot-<pid>-<n>`, see [`git::Git::write_whole`]).
async fn sweep_landing_temps(path: &Path) {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.aot-", name.to_string_lossy());
    let Ok(mut entries) = tokio::fs::read_dir(parent).await else {
        return;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = tokio::fs::remove_file(entry.path()).await;
        }
    }
}

/// Removes copies whose repository is gone (deleted or moved): a copy's
/// `.git` file names its administrative folder in the repository's `.git`.
async fn sweep_orphaned_copies() {
    let root = copies_root();
    let Ok(mut keys) = tokio::fs::read_dir(&root).await else {
        return;
    };
    while let Ok(Some(key)) = keys.next_entry().await {
        for folder in ["trees", "kept"] {
            let Ok(mut copies) = tokio::fs::read_dir(key.path().join(folder)).await else {
                continue;
            };
            while let Ok(Some(copy)) = copies.next_entry().await {
                let link = tokio::fs::read_to_string(copy.path().join(".git"))
                    .await
                    .unwrap_or_default();
                // Only a copy whose link names a folder that is gone: one
                // another run is creating right now has no link yet (git
                // makes its folder in `.git/worktrees` first, then the link).
                let admin = link.strip_prefix("gitdir:").map(|p| PathBuf::from(p.trim()));
                if admin.is_some_and(|admin| !admin.exists()) {
                    let _ = tokio::fs::remove_dir_all(copy.path()).await;
                }
            }
            let _ = tokio::fs::remove_dir(key.path().join(folder)).await;
        }
        let _ = tokio::fs::remove_dir(key.path()).await;
    }
}

/// Removes temporary index files and merge folders a killed process left.
async fn sweep_scratch(scratch: &Path) {
    let Ok(mut entries) = tokio::fs::read_dir(scratch).await else {
        return;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("index.") || name.starts_with("snap.") {
            let _ = tokio::fs::remove_file(entry.path()).await;
        } else if name.starts_with("merge.") {
            let _ = tokio::fs::remove_dir_all(entry.path()).await;
        }
    }
}

fn text(error: GitError) -> String {
    error.to_string()
}

impl Workspace for GitWorkspace {
    fn open<'a>(&'a self, landed: &'a [(String, u32)]) -> BoxFuture<'a, Result<Recovered, String>> {
        Box::pin(async move {
            match self.open_inner(landed).await {
                Ok(recovered) => Ok(recovered),
                Err(error) => {
                    // The run goes on without isolation: marks left for a
                    // recovery would make a later start undo its work.
                    let _ = self.clear_leftovers().await;
                    Err(text(error))
                }
            }
        })
    }

    fn enter(&self) -> BoxFuture<'_, Result<Place, String>> {
        Box::pin(async move { self.enter_inner().await.map_err(text) })
    }

    fn land<'a>(
        &'a self,
        place: &'a Place,
        message: &'a str,
        atom: &'a str,
        attempt: u32,
    ) -> BoxFuture<'a, Result<Landing, String>> {
        Box::pin(async move { self.land_inner(place, message, (atom, attempt)).await.map_err(text) })
    }

    fn settle(&self, place: u64) -> BoxFuture<'_, ()> {
        Box::pin(self.settle_inner(place))
    }

    fn discard<'a>(
        &'a self,
        place: &'a Place,
        keep: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(Changes, Option<PathBuf>), String>> {
        Box::pin(async move { self.discard_inner(place, keep).await.map_err(text) })
    }

    fn undo<'a>(
        &'a self,
        changes: &'a Changes,
        message: &'a str,
    ) -> BoxFuture<'a, Result<(Landed, Vec<String>), String>> {
        Box::pin(async move { self.undo_inner(changes, message).await.map_err(text) })
    }

    fn close<'a>(&'a self, landed: &'a [(String, u32)]) -> BoxFuture<'a, Vec<Interrupted>> {
        Box::pin(self.close_inner(landed))
    }
}
