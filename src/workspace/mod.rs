//! Workspace isolation with git (`constraints.isolation: git`): an attempt's
//! file changes reach the user's tree only when it succeeds.
//!
//! The mechanism (defended in docs/architecture.md): aot keeps the tree *as
//! landed* — the user's tree at the start plus every change that landed since
//! — as a git tree, written through temporary index files (never the user's
//! index, HEAD or branches). An attempt works either **in place**, in the
//! user's tree itself (one at a time: a chain of atoms, a retry — build caches
//! and other ignored files are right there), or in a **copy**: a linked
//! worktree of the tree as landed, from a pool reused across attempts so a
//! copy keeps its own build cache (AND-parallel atoms, speculative racers).
//! Success lands the attempt's changes, merged ([`merge`]) with what landed
//! since it began; failure puts the files back as landed. A ref marks the
//! user's tree as holding unlanded work while that is so: a run killed then
//! has its tree put back by the next start.

pub mod git;
pub mod merge;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio::sync::Mutex;

use self::git::{Git, GitError};
use self::merge::{Delta, Entry, Resolution};
use crate::engine::roles::{BoxFuture, Landed, Landing, Place, Recovered, Workspace};
use crate::model::Changes;

/// Isolation through git, for one state file's runs.
pub struct GitWorkspace {
    git: Git,
    /// `refs/aot/<key>/`: this state file's refs.
    refs: String,
    /// Each landing is committed on the user's branch (`constraints.commit: per_atom`).
    commit_per_atom: bool,
    /// When a killed run was last alive: a file changed after it is not that
    /// run's attempt's to put back — unless the run left workers running.
    last_alive: Option<std::time::SystemTime>,
    /// The killed run left workers running (stopped by this start).
    left_running: bool,
    inner: Mutex<Inner>,
}

/// What the workspace knows between calls (behind one lock: landings are
/// serialized).
#[derive(Default)]
struct Inner {
    /// The tree as landed, and the commit that holds it (for worktrees).
    landed: String,
    landed_commit: String,
    /// The attempt working in the user's tree.
    in_place: Option<u64>,
    /// Each open place: the tree it started from, and its copy's pool slot.
    places: HashMap<u64, Entered>,
    /// Copies: their folder, and whether an attempt uses it.
    pool: Vec<(PathBuf, bool)>,
    next: u64,
}

struct Entered {
    base: String,
    slot: Option<usize>,
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
        Ok(Some(Self {
            git: Git::new(top, common, scratch, own),
            refs: format!("refs/aot/{key}"),
            commit_per_atom: false,
            last_alive: None,
            left_running: false,
            inner: Mutex::new(Inner::default()),
        }))
    }

    /// Says when the last run of this state file was last alive (its
    /// heartbeat): after a kill, files changed later than that are left as
    /// they are rather than put back — unless it `left_running` workers,
    /// whose writes could be among them: then they are put back and named.
    pub fn last_alive(mut self, at: Option<std::time::SystemTime>, left_running: bool) -> Self {
        self.last_alive = at;
        self.left_running = left_running;
        self
    }

    /// Commits each landing (and each undo) on the user's branch.
    pub fn committing(mut self, per_atom: bool) -> Self {
        self.commit_per_atom = per_atom;
        self
    }

    /// The work tree's top folder.
    pub fn top(&self) -> &Path {
        &self.git.top
    }

    /// Where failed attempts' trees kept for inspection (`--keep-failed`) are.
    pub fn kept_folder(&self) -> PathBuf {
        self.git.scratch.join("kept")
    }

    fn landed_ref(&self) -> String {
        format!("{}/landed", self.refs)
    }

    fn dirty_ref(&self) -> String {
        format!("{}/dirty", self.refs)
    }

    fn dirty_head_ref(&self) -> String {
        format!("{}/dirty-head", self.refs)
    }

    /// Marks the user's tree as holding work that has not landed (and
    /// where HEAD was), for a start after a kill.
    async fn mark_dirty(&self, landed_commit: &str) -> Result<(), GitError> {
        if let Some(head) = self.git.resolve("HEAD").await {
            self.git.set_ref(&self.dirty_head_ref(), &head).await?;
        }
        self.git.set_ref(&self.dirty_ref(), landed_commit).await
    }

    async fn clear_dirty(&self) -> Result<(), GitError> {
        self.git.delete_ref(&self.dirty_ref()).await?;
        self.git.delete_ref(&self.dirty_head_ref()).await
    }

    fn trees(&self) -> PathBuf {
        self.git.scratch.join("trees")
    }

    async fn open_inner(&self) -> Result<Recovered, GitError> {
        let mut inner = self.inner.lock().await;
        let _ = tokio::fs::create_dir_all(self.trees()).await;
        sweep_scratch(&self.git.scratch).await;
        let mut recovered = Recovered::default();
        // A run killed while the user's tree held unlanded work: the tree goes
        // back to what had landed (what the killed attempt left stays in git's
        // object store, named in the journal).
        if self.git.resolve(&self.dirty_ref()).await.is_some()
            && let Some(landed) = self.git.resolve(&self.landed_ref()).await
        {
            let landed_tree = format!("{landed}^{{tree}}");
            let landed_tree = self.rev(&landed_tree).await?;
            let now = self.git.snapshot(&self.git.top).await?;
            // Commits made since the kill are the user's: the tree is then
            // not the killed run's to put back.
            let head_then = self.git.resolve(&self.dirty_head_ref()).await;
            let head_now = self.git.resolve("HEAD").await;
            if now != landed_tree {
                let changes = self.git.changes(&landed_tree, &now).await?;
                if head_then == head_now {
                    // A file changed after the killed run was last alive is
                    // the user's since: it stays, and is reported. With its
                    // workers left running it may be theirs too: it is put
                    // back, and named so the user can take it back.
                    let newer = self.changed_since_alive(&now, &landed_tree).await?;
                    if self.left_running {
                        self.restore(&now, &landed_tree).await?;
                        recovered.maybe_yours = newer;
                    } else {
                        self.restore_but(&now, &landed_tree, &newer).await?;
                        recovered.kept = newer;
                    }
                } else {
                    recovered.left = true;
                }
                recovered.changes = Some(changes);
            }
        }
        recovered.copies = self.clear_leftovers().await?;
        // The tree as it is — the user's uncommitted changes included — is
        // where this run starts.
        let start = self.git.snapshot(&self.git.top).await?;
        let commit = self.git.commit(&start, None, "aot: the starting point", false).await?;
        self.git.set_ref(&self.landed_ref(), &commit).await?;
        *inner = Inner {
            landed: start,
            landed_commit: commit,
            ..Inner::default()
        };
        Ok(recovered)
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
    /// had it before: forgets what earlier isolated runs left, so that a later
    /// isolated start never puts the tree back to a point from before this
    /// run's work. Returns whether a killed run's attempt had left changes in
    /// the tree — they stay as they are, as everything does without isolation.
    pub async fn stand_down(&self) -> Result<bool, GitError> {
        let _inner = self.inner.lock().await;
        let killed = self.git.resolve(&self.dirty_ref()).await.is_some();
        self.clear_leftovers().await?;
        Ok(killed)
    }

    async fn rev(&self, name: &str) -> Result<String, GitError> {
        let out = self.git.run(&self.git.top, &["rev-parse", "--verify", name]).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    async fn enter_inner(&self, in_place: bool) -> Result<Place, GitError> {
        let mut inner = self.inner.lock().await;
        let id = inner.next;
        inner.next += 1;
        if in_place && inner.in_place.is_none() {
            // Edits made in the tree since the last landing (the user's) are
            // part of what this attempt starts from, and stay if it fails.
            let now = self.git.snapshot(&self.git.top).await?;
            if now != inner.landed {
                self.advance(&mut inner, now, "aot: edits made during the run").await?;
            }
            self.mark_dirty(&inner.landed_commit).await?;
            inner.in_place = Some(id);
            let base = inner.landed.clone();
            inner.places.insert(id, Entered { base, slot: None });
            return Ok(Place {
                id,
                top: self.git.top.clone(),
                copy: None,
            });
        }
        let slot = match inner.pool.iter().position(|(_, busy)| !busy) {
            Some(slot) => {
                let path = inner.pool[slot].0.clone();
                self.git.reset_worktree(&path, &inner.landed_commit).await?;
                slot
            }
            None => {
                // Named by the place that made it: unique though kept copies leave the pool.
                let path = self.trees().join(id.to_string());
                self.git.add_worktree(&path, &inner.landed_commit).await?;
                inner.pool.push((path, false));
                inner.pool.len() - 1
            }
        };
        inner.pool[slot].1 = true;
        let base = inner.landed.clone();
        inner.places.insert(id, Entered { base, slot: Some(slot) });
        Ok(Place {
            id,
            top: self.git.top.clone(),
            copy: Some(inner.pool[slot].0.clone()),
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

    /// Writes landed entries into the user's tree. While an attempt works in
    /// place, a file it has changed is left to it: its own landing merges, or
    /// its failure puts the landed file there.
    async fn write_landed(
        &self,
        inner: &Inner,
        old: &str,
        entries: &[(String, Entry)],
        skip_in_place: bool,
    ) -> Result<Vec<String>, GitError> {
        let mut writes: Vec<(String, Entry)> = Vec::new();
        let mut merged: Vec<(String, String)> = Vec::new();
        let mut left = Vec::new();
        if skip_in_place && !entries.is_empty() {
            // A file that is not as landed was changed meanwhile: by the
            // attempt in place (its own landing merges it), or by the user
            // (merged with what lands; their edit wins a conflict).
            let paths: Vec<&str> = entries.iter().map(|(p, _)| p.as_str()).collect();
            let now = self.git.hash_files(&self.git.top, &paths).await?;
            let before = self.entries_at(old, &paths).await?;
            for (((path, entry), now), before) in entries.iter().zip(now).zip(before) {
                if now == before {
                    writes.push((path.clone(), entry.clone()));
                } else if inner.in_place.is_some() {
                    continue;
                } else {
                    let theirs = entry.as_ref().map(|(_, blob)| blob.as_str());
                    match (now.as_deref(), theirs) {
                        (Some(ours), Some(theirs)) => {
                            match self.git.merge_blobs(before.as_deref(), ours, theirs).await? {
                                Some(blob) => merged.push((path.clone(), blob)),
                                None => left.push(path.clone()),
                            }
                        }
                        _ => left.push(path.clone()),
                    }
                }
            }
        } else {
            writes = entries.to_vec();
        }
        if writes.is_empty() && merged.is_empty() {
            return Ok(left);
        }
        // Marked while files are written: a kill half-way is finished by the next start.
        if inner.in_place.is_none() {
            self.mark_dirty(&inner.landed_commit).await?;
        }
        self.git.write_files(&self.git.top, &inner.landed, &writes).await?;
        for (path, blob) in &merged {
            self.git.write_blob_to(&self.git.top, path, blob).await?;
        }
        if inner.in_place.is_none() {
            self.clear_dirty().await?;
        }
        Ok(left)
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

    async fn land_inner(&self, place: &Place, message: &str) -> Result<Landing, GitError> {
        let mut inner = self.inner.lock().await;
        let Some(entered) = inner.places.get(&place.id) else {
            return Err(unknown_place());
        };
        let base = entered.base.clone();
        let dir = place.copy.clone().unwrap_or_else(|| self.git.top.clone());
        let result = self.git.snapshot(&dir).await?;
        let own = self.git.diff(&base, &result).await?;
        let landed = self.git.diff(&base, &inner.landed).await?;
        let (entries, conflicts) = self.resolve(merge::plan(&own, &landed)).await?;
        if !conflicts.is_empty() {
            return Ok(Landing::Conflict { files: conflicts });
        }
        let old = inner.landed.clone();
        // Nothing landed since the attempt began: its tree is the new one.
        let new = if landed.is_empty() {
            result
        } else {
            self.git.edit_tree(&old, &entries).await?
        };
        let before = (inner.landed.clone(), inner.landed_commit.clone());
        if new != old {
            self.advance(&mut inner, new.clone(), message).await?;
        }
        let mut left = Vec::new();
        if place.copy.is_some() {
            left = match self.write_landed(&inner, &old, &entries, true).await {
                Ok(left) => left,
                Err(error) => {
                    // Not landed after all: the tree as landed goes back, and
                    // so do the files written (else the next start does it).
                    let written = self.git.diff(&new, &before.0).await?;
                    self.git
                        .write_files(&self.git.top, &before.0, &entries_of(&written))
                        .await?;
                    self.git.set_ref(&self.landed_ref(), &before.1).await?;
                    (inner.landed, inner.landed_commit) = before;
                    self.clear_dirty().await?;
                    return Err(error);
                }
            };
        } else {
            // In place, the tree holds the attempt's files already; merged
            // files are written.
            let merged: Vec<(String, Entry)> = entries
                .iter()
                .filter(|(path, entry)| own.iter().find(|d| &d.path == path).is_none_or(|d| &d.new != entry))
                .cloned()
                .collect();
            inner.in_place = None;
            self.write_landed(&inner, &old, &merged, false).await?;
            self.clear_dirty().await?;
        }
        self.release(&mut inner, place.id);
        let mut landed = self.landed(&old, &new, message).await?;
        landed.left = left;
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
        Ok(Landed {
            changes,
            commit,
            note,
            left: Vec::new(),
        })
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

    /// Puts the user's tree, whose snapshot is `now`, back to `target`. Files
    /// are written first (a `.gitignore` among them), then what `target`
    /// lacks is removed — except files its ignore rules ignore: an attempt
    /// that edited `.gitignore` made them look new, but they are build
    /// caches or secrets, never the attempt's work.
    async fn restore(&self, now: &str, target: &str) -> Result<(), GitError> {
        self.restore_but(now, target, &[]).await
    }

    /// Puts the tree back from `now` to `target`, but for the paths `keep`.
    async fn restore_but(&self, now: &str, target: &str, keep: &[String]) -> Result<(), GitError> {
        let back = self.git.diff(now, target).await?;
        let (present, absent): (Vec<_>, Vec<_>) = entries_of(&back)
            .into_iter()
            .filter(|(path, _)| !keep.contains(path))
            .partition(|(_, e)| e.is_some());
        self.git.write_files(&self.git.top, target, &present).await?;
        let paths: Vec<&str> = absent.iter().map(|(p, _)| p.as_str()).collect();
        let ignored = self.git.ignored(&self.git.top, &paths).await?;
        if !ignored.is_empty() {
            self.git.untrack(&self.git.top, &ignored).await?;
        }
        let removed: Vec<(String, Entry)> = absent.into_iter().filter(|(p, _)| !ignored.contains(p)).collect();
        self.git.write_files(&self.git.top, target, &removed).await
    }

    /// The paths that differ between `now` and `target` and were modified
    /// after the killed run was last alive (with a second's grace for its
    /// last heartbeat).
    async fn changed_since_alive(&self, now: &str, target: &str) -> Result<Vec<String>, GitError> {
        let Some(alive) = self.last_alive else {
            return Ok(Vec::new());
        };
        let after = alive + std::time::Duration::from_secs(2);
        let mut newer = Vec::new();
        for delta in self.git.diff(now, target).await? {
            let modified = tokio::fs::symlink_metadata(self.git.top.join(&delta.path))
                .await
                .and_then(|m| m.modified());
            if modified.is_ok_and(|m| m > after) {
                newer.push(delta.path);
            }
        }
        Ok(newer)
    }

    fn release(&self, inner: &mut Inner, id: u64) {
        if let Some(Entered { slot: Some(slot), .. }) = inner.places.remove(&id)
            && let Some(entry) = inner.pool.get_mut(slot)
        {
            entry.1 = false;
        }
        if inner.in_place == Some(id) {
            inner.in_place = None;
        }
    }

    async fn discard_inner(&self, place: &Place, keep: Option<&str>) -> Result<(Changes, Option<PathBuf>), GitError> {
        let mut inner = self.inner.lock().await;
        let Some(entered) = inner.places.get(&place.id) else {
            return Err(unknown_place());
        };
        let base = entered.base.clone();
        let slot = entered.slot;
        let dir = place.copy.clone().unwrap_or_else(|| self.git.top.clone());
        let result = self.git.snapshot(&dir).await?;
        let mut kept = None;
        let changes = if place.copy.is_none() {
            // What differs from the tree as landed is the attempt's.
            let changes = self.git.changes(&inner.landed, &result).await?;
            if let Some(label) = keep
                && !changes.is_empty()
            {
                let commit = self
                    .git
                    .commit(&result, Some(&inner.landed_commit), "aot: a failed attempt", false)
                    .await?;
                let path = self.kept_path(label);
                let _ = tokio::fs::create_dir_all(self.kept_folder()).await;
                self.git.add_worktree(&path, &commit).await?;
                kept = Some(path);
            }
            self.restore(&result, &inner.landed).await?;
            self.clear_dirty().await?;
            changes
        } else {
            let changes = self.git.changes(&base, &result).await?;
            if let (Some(label), Some(slot)) = (keep, slot) {
                // The copy leaves the pool as it is; a new one replaces it.
                let path = self.kept_path(label);
                let from = inner.pool[slot].0.display().to_string();
                let to = path.display().to_string();
                tokio::fs::create_dir_all(self.kept_folder())
                    .await
                    .map_err(|e| GitError {
                        command: "worktree move".into(),
                        message: e.to_string(),
                    })?;
                self.git.run(&self.git.top, &["worktree", "move", &from, &to]).await?;
                inner.pool.remove(slot);
                for entered in inner.places.values_mut() {
                    if let Some(s) = entered.slot.as_mut()
                        && *s > slot
                    {
                        *s -= 1;
                    }
                }
                kept = Some(path);
            }
            changes
        };
        if kept.is_none() || place.copy.is_none() {
            self.release(&mut inner, place.id);
        } else {
            inner.places.remove(&place.id);
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
        // Undoing is landing the reverse: from the landing's result back to
        // where it started, over what landed since.
        let own = self.git.diff(&changes.after, &changes.before).await?;
        let landed = self.git.diff(&changes.after, &inner.landed).await?;
        let (entries, kept) = self.resolve(merge::plan(&own, &landed)).await?;
        let old = inner.landed.clone();
        let new = self.git.edit_tree(&old, &entries).await?;
        let mut left = Vec::new();
        if new != old {
            self.advance(&mut inner, new.clone(), message).await?;
            left = self.write_landed(&inner, &old, &entries, true).await?;
        }
        let mut undone = self.landed(&old, &new, message).await?;
        undone.left = left;
        Ok((undone, kept))
    }

    async fn close_inner(&self) {
        let mut inner = self.inner.lock().await;
        // An attempt still in the user's tree (its task was aborted) leaves
        // nothing; if putting it back fails, the refs stay for the next
        // start to finish it.
        let mut restored = true;
        if inner.in_place.take().is_some() {
            restored = match self.git.snapshot(&self.git.top).await {
                Ok(now) => self.restore(&now, &inner.landed).await.is_ok(),
                Err(_) => false,
            };
        }
        for (path, _) in inner.pool.drain(..) {
            self.git.remove_worktree(&path).await;
        }
        let _ = tokio::fs::remove_dir_all(self.trees()).await;
        if restored && let Ok(names) = self.git.refs(&self.refs).await {
            for name in names {
                let _ = self.git.delete_ref(&name).await;
            }
        }
        sweep_scratch(&self.git.scratch).await;
        // Nothing kept (no `--keep-failed` tree, no refs for a recovery):
        // leave no empty folder behind. Fails, harmlessly, when not empty.
        let _ = tokio::fs::remove_dir(&self.git.scratch).await;
    }
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
        .args([
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--git-common-dir",
        ])
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (Some(top), Some(common)) = (lines.next(), lines.next()) else {
        return Vec::new();
    };
    let full = canonical(&absolute);
    let Ok(name) = full.strip_prefix(top) else {
        return Vec::new();
    };
    let folder = Path::new(common)
        .join("aot")
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
    fn open(&self) -> BoxFuture<'_, Result<Recovered, String>> {
        Box::pin(async move {
            match self.open_inner().await {
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

    fn enter(&self, in_place: bool) -> BoxFuture<'_, Result<Place, String>> {
        Box::pin(async move { self.enter_inner(in_place).await.map_err(text) })
    }

    fn land<'a>(&'a self, place: &'a Place, message: &'a str) -> BoxFuture<'a, Result<Landing, String>> {
        Box::pin(async move { self.land_inner(place, message).await.map_err(text) })
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

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.close_inner())
    }
}
