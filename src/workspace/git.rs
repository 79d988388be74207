//! The git plumbing isolation is built on, run as `git` processes (async: the
//! loop never waits on one). Nothing here touches the user's index, HEAD or
//! branches: trees are written through temporary index files, files are
//! written whole from blobs (beside their place, then renamed), and aot's own objects are
//! reachable only from refs under `refs/aot/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::merge::{Delta, Entry};
use crate::model::changes::{ChangeKind, Changes, FILES_LISTED, FileChange};

/// A git command that failed, with what it said.
#[derive(Debug, Clone, thiserror::Error)]
#[error("`git {command}` failed: {message}")]
pub struct GitError {
    /// The command, without `git`.
    pub command: String,
    /// Its standard error (or why it could not run).
    pub message: String,
}

/// The id of git's empty tree.
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// One repository, as aot uses it.
#[derive(Debug)]
pub struct Git {
    /// The work tree's top folder.
    pub top: PathBuf,
    /// The common git folder (shared by linked worktrees).
    pub common: PathBuf,
    /// Where aot keeps its temporary index files and worktrees.
    pub scratch: PathBuf,
    /// Pathspecs of aot's own files (the state file and what it keeps beside
    /// it): never snapshotted, so never restored or landed.
    pub own: Vec<String>,
    counter: AtomicU64,
}

impl Git {
    /// The repository whose work tree holds `dir`: its top and its common
    /// git folder; `Ok(None)` when `dir` is in no work tree; an error when
    /// git is missing or refuses the repository (e.g. "dubious ownership").
    pub async fn discover(dir: &Path) -> Result<Option<(PathBuf, PathBuf)>, GitError> {
        let args = [
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--git-common-dir",
        ];
        let out = match run_in(dir, &args, &[], None).await {
            Ok(out) => out,
            Err(e)
                if e.message.contains("not a git repository") || e.message.contains("must be run in a work tree") =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let text = String::from_utf8_lossy(&out);
        let mut lines = text.lines();
        match (lines.next(), lines.next()) {
            (Some(top), Some(common)) => Ok(Some((PathBuf::from(top), PathBuf::from(common)))),
            // A bare repository, or the git folder itself: no work tree.
            _ => Ok(None),
        }
    }

    /// A repository at `top` whose own paths are `own`, keeping scratch files under `scratch`.
    pub fn new(top: PathBuf, common: PathBuf, scratch: PathBuf, own: Vec<String>) -> Self {
        Self {
            top,
            common,
            scratch,
            own,
            counter: AtomicU64::new(0),
        }
    }

    /// Runs git in `dir`.
    pub async fn run(&self, dir: &Path, args: &[&str]) -> Result<Vec<u8>, GitError> {
        run_in(dir, args, &[], None).await
    }

    /// Runs git in `dir` with a temporary index.
    async fn with_index(
        &self,
        dir: &Path,
        index: &Path,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Vec<u8>, GitError> {
        let index = index.display().to_string();
        run_in(dir, args, &[("GIT_INDEX_FILE", index.as_str())], stdin).await
    }

    /// A fresh temporary index path (removed by [`Scratch`]'s drop).
    fn scratch_index(&self) -> Scratch {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        Scratch(self.scratch.join(format!("index.{}.{n}", std::process::id())))
    }

    /// The tree of the work tree at `dir` as it is now: tracked and untracked
    /// files that git does not ignore, without aot's own paths. Each folder
    /// has an index of aot's own, seeded from the folder's index and kept
    /// between snapshots, so only files changed since are read again.
    pub async fn snapshot(&self, dir: &Path) -> Result<String, GitError> {
        let index = self.snapshot_index(dir);
        if !tokio::fs::try_exists(&index).await.unwrap_or(false) {
            let source = self
                .run(dir, &["rev-parse", "--path-format=absolute", "--git-path", "index"])
                .await?;
            let source = PathBuf::from(String::from_utf8_lossy(&source).trim());
            // No index yet (a fresh repository): git starts from an empty one.
            // The copy keeps the index's time: git re-reads a file changed in
            // the same second as the index was written (a "racily clean"
            // entry) only when it knows when the index was written.
            if tokio::fs::copy(&source, &index).await.is_ok()
                && let Ok(written) = tokio::fs::metadata(&source).await.and_then(|m| m.modified())
            {
                let index = index.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    std::fs::File::options().write(true).open(&index)?.set_modified(written)
                })
                .await;
            }
        }
        // A file that vanishes while git reads the tree (an editor's
        // temporary file, saved over its original) fails the read: the tree
        // is read again, a few times.
        let mut tries = 0;
        loop {
            match self.with_index(dir, &index, &["add", "-A", "--", ":/"], None).await {
                Ok(_) => break,
                Err(error) if tries < 5 && vanished(&error) => tries += 1,
                Err(error) => return Err(error),
            }
        }
        // (An exclude pathspec in `add` fails when it names an ignored file.)
        if !self.own.is_empty() {
            let mut args = vec!["rm", "--cached", "-r", "-q", "--ignore-unmatch", "--"];
            args.extend(self.own.iter().map(String::as_str));
            self.with_index(dir, &index, &args, None).await?;
        }
        let tree = self.with_index(dir, &index, &["write-tree"], None).await?;
        Ok(String::from_utf8_lossy(&tree).trim().to_string())
    }

    /// Forgets aot's index for snapshots of the work tree at `dir` (a copy
    /// just checked out anew): the next snapshot starts from the copy's own
    /// index, which the checkout wrote.
    pub async fn forget_snapshot(&self, dir: &Path) {
        let _ = tokio::fs::remove_file(self.snapshot_index(dir)).await;
    }

    /// aot's own index for snapshots of the work tree at `dir`.
    fn snapshot_index(&self, dir: &Path) -> PathBuf {
        self.scratch
            .join(format!("snap.{:016x}", fnv(dir.as_os_str().as_encoded_bytes())))
    }

    /// The files that differ between two trees.
    pub async fn diff(&self, a: &str, b: &str) -> Result<Vec<Delta>, GitError> {
        if a == b {
            return Ok(Vec::new());
        }
        let out = self
            .run(&self.top, &["diff-tree", "-r", "-z", "--no-renames", "--raw", a, b])
            .await?;
        Ok(parse_raw(&out))
    }

    /// What changed from tree `a` to tree `b`, with line counts.
    pub async fn changes(&self, a: &str, b: &str) -> Result<Changes, GitError> {
        let deltas = self.diff(a, b).await?;
        let mut counts = HashMap::new();
        if !deltas.is_empty() {
            let out = self
                .run(&self.top, &["diff-tree", "-r", "-z", "--no-renames", "--numstat", a, b])
                .await?;
            counts = parse_numstat(&out);
        }
        let mut files: Vec<FileChange> = deltas
            .iter()
            .map(|d| {
                let (added, removed) = counts.get(d.path.as_str()).copied().unwrap_or((0, 0));
                FileChange {
                    path: d.path.clone(),
                    change: match (&d.old, &d.new) {
                        (None, _) => ChangeKind::Added,
                        (_, None) => ChangeKind::Deleted,
                        _ => ChangeKind::Modified,
                    },
                    added,
                    removed,
                }
            })
            .collect();
        let more = files.len().saturating_sub(FILES_LISTED);
        files.truncate(FILES_LISTED);
        Ok(Changes {
            before: a.to_string(),
            after: b.to_string(),
            files,
            more,
        })
    }

    /// `tree` with each path set to its entry (`None`: removed).
    pub async fn edit_tree(&self, tree: &str, entries: &[(String, Entry)]) -> Result<String, GitError> {
        if entries.is_empty() {
            return Ok(tree.to_string());
        }
        let index = self.scratch_index();
        self.with_index(&self.top, &index.0, &["read-tree", tree], None).await?;
        let info = index_info(entries);
        self.with_index(
            &self.top,
            &index.0,
            &["update-index", "-z", "--index-info"],
            Some(&info),
        )
        .await?;
        let out = self.with_index(&self.top, &index.0, &["write-tree"], None).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// The blob ids the files `paths` of the work tree at `dir` have now
    /// (`None`: no such file).
    pub async fn hash_files(&self, dir: &Path, paths: &[&str]) -> Result<Vec<Option<String>>, GitError> {
        /// What is at a path: a file (hashed as git reads it), a symbolic
        /// link (its target, as git stores a link), or nothing.
        enum Found {
            File,
            /// A file whose name holds a newline: `--stdin-paths` reads one
            /// name per line, so it is hashed on its own.
            Odd(String),
            Link(PathBuf),
            Nothing,
        }
        let mut found = Vec::new();
        let mut input = Vec::new();
        for path in paths {
            let full = dir.join(path);
            let kind = match tokio::fs::symlink_metadata(&full).await {
                Ok(m) if m.is_symlink() => tokio::fs::read_link(&full).await.map_or(Found::Nothing, Found::Link),
                Ok(m) if !m.is_dir() && path.contains('\n') => Found::Odd((*path).to_string()),
                Ok(m) if !m.is_dir() => Found::File,
                _ => Found::Nothing,
            };
            if matches!(kind, Found::File) {
                input.extend_from_slice(path.as_bytes());
                input.push(b'\n');
            }
            found.push(kind);
        }
        let mut ids = Vec::new();
        if !input.is_empty() {
            // Written to the object store: a file changed meanwhile may be merged.
            let out = run_in(dir, &["hash-object", "-w", "--stdin-paths"], &[], Some(&input)).await?;
            ids = String::from_utf8_lossy(&out).lines().map(str::to_string).collect();
        }
        let mut ids = ids.into_iter();
        let mut out = Vec::new();
        for kind in found {
            out.push(match kind {
                Found::File => ids.next(),
                Found::Odd(path) => {
                    let id = run_in(dir, &["hash-object", "-w", "--", &path], &[], None).await?;
                    Some(String::from_utf8_lossy(&id).trim().to_string())
                }
                Found::Link(target) => {
                    let target = target.as_os_str().as_encoded_bytes().to_vec();
                    let id = run_in(dir, &["hash-object", "-w", "--stdin"], &[], Some(&target)).await?;
                    Some(String::from_utf8_lossy(&id).trim().to_string())
                }
                Found::Nothing => None,
            });
        }
        Ok(out)
    }

    /// What is at each of `paths` in the work tree at `dir`, as a tree entry:
    /// (mode, blob) — the blob written to the object store — or `None`.
    pub async fn entries_in(&self, dir: &Path, paths: &[&str]) -> Result<Vec<Entry>, GitError> {
        let blobs = self.hash_files(dir, paths).await?;
        let mut entries = Vec::with_capacity(paths.len());
        for (path, blob) in paths.iter().zip(blobs) {
            let entry = match blob {
                Some(blob) => {
                    let mode = match tokio::fs::symlink_metadata(dir.join(path)).await {
                        Ok(m) if m.is_symlink() => "120000",
                        Ok(m) if std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0 => "100755",
                        _ => "100644",
                    };
                    Some((mode.to_string(), blob))
                }
                None => None,
            };
            entries.push(entry);
        }
        Ok(entries)
    }

    /// Makes each of `entries` so in the work tree at `dir`, one file at a
    /// time and each whole: written beside its place and renamed over it, so
    /// a kill leaves every file as it was or as it is meant to be, never
    /// half written. `None` removes the file (folders stay).
    pub async fn write_whole(&self, dir: &Path, entries: &[(String, Entry)]) -> Result<(), GitError> {
        for (path, entry) in entries {
            let full = dir.join(path);
            let Some((mode, blob)) = entry else {
                remove_file(dir, path).await;
                continue;
            };
            // A submodule is its own repository: aot does not write into it.
            if mode == "160000" {
                continue;
            }
            let bytes = self.run(&self.top, &["cat-file", "blob", blob]).await?;
            let parent = full.parent().unwrap_or(dir).to_path_buf();
            let name = full
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let temp = parent.join(format!(
                ".{name}.aot-{}-{}",
                std::process::id(),
                self.counter.fetch_add(1, Ordering::Relaxed)
            ));
            let mode = mode.clone();
            let written = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                use std::os::unix::fs::PermissionsExt;
                // A file standing where a folder must go is replaced, and the reverse.
                let mut ancestor = parent.as_path();
                let mut blocking = None;
                while let Ok(m) = std::fs::symlink_metadata(ancestor) {
                    if m.is_dir() {
                        break;
                    }
                    blocking = Some(ancestor.to_path_buf());
                    match ancestor.parent() {
                        Some(up) => ancestor = up,
                        None => break,
                    }
                }
                if let Some(file) = blocking {
                    std::fs::remove_file(file)?;
                }
                std::fs::create_dir_all(&parent)?;
                if mode == "120000" {
                    let target = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&bytes);
                    std::os::unix::fs::symlink(target, &temp)?;
                } else {
                    std::fs::write(&temp, &bytes)?;
                    let bits = if mode == "100755" { 0o755 } else { 0o644 };
                    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(bits))?;
                }
                if std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir() && !m.is_symlink()) {
                    std::fs::remove_dir(&full)?;
                }
                std::fs::rename(&temp, &full).inspect_err(|_| {
                    let _ = std::fs::remove_file(&temp);
                })
            })
            .await
            .map_err(|e| GitError {
                command: "write".into(),
                message: e.to_string(),
            })?;
            written.map_err(|e| io_error(&format!("write {path}"), &e))?;
        }
        Ok(())
    }

    /// The folders of the work tree at `dir` that are empty and neither
    /// tracked nor ignored (`mkdir -p out`): git keeps no folders, so they
    /// are carried between the user's tree and the copies by name.
    pub async fn empty_folders(&self, dir: &Path) -> Result<Vec<String>, GitError> {
        let out = self
            .run(
                dir,
                &["ls-files", "-z", "--others", "--directory", "--exclude-standard"],
            )
            .await?;
        let mut empty = Vec::new();
        for name in out.split(|b| *b == 0).filter(|n| n.ends_with(b"/")) {
            let name = String::from_utf8_lossy(name).trim_end_matches('/').to_string();
            let full = dir.join(&name);
            let is_empty = tokio::task::spawn_blocking(move || {
                std::fs::read_dir(&full).is_ok_and(|mut entries| entries.next().is_none())
            })
            .await
            .unwrap_or(false);
            if is_empty {
                empty.push(name);
            }
        }
        Ok(empty)
    }

    /// Merges `theirs` into `ours` over `base` (blobs); `None` on a conflict.
    pub async fn merge_blobs(&self, base: Option<&str>, ours: &str, theirs: &str) -> Result<Option<String>, GitError> {
        let folder = self.scratch.join(format!(
            "merge.{}.{}",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed)
        ));
        let _guard = ScratchDir(folder.clone());
        tokio::fs::create_dir_all(&folder)
            .await
            .map_err(|e| io_error("merge-file", &e))?;
        let write = |name: &'static str, blob: Option<String>| {
            let path = folder.join(name);
            async move {
                let bytes = match blob {
                    Some(blob) => self.run(&self.top, &["cat-file", "blob", &blob]).await?,
                    None => Vec::new(),
                };
                tokio::fs::write(&path, bytes)
                    .await
                    .map_err(|e| io_error("merge-file", &e))?;
                Ok::<PathBuf, GitError>(path)
            }
        };
        let base = write("base", base.map(str::to_string)).await?;
        let ours = write("ours", Some(ours.to_string())).await?;
        let theirs = write("theirs", Some(theirs.to_string())).await?;
        let (ours, base, theirs) = (
            ours.display().to_string(),
            base.display().to_string(),
            theirs.display().to_string(),
        );
        // `git merge-file` exits with the number of conflicts.
        let status = Command::new("git")
            .args(["merge-file", "-q", &ours, &base, &theirs])
            .env_remove("GIT_DIR")
            .env_remove("GIT_INDEX_FILE")
            .env_remove("GIT_WORK_TREE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .map_err(|e| io_error("merge-file", &e))?;
        match status.code() {
            Some(0) => {
                let out = self.run(&self.top, &["hash-object", "-w", "--", &ours]).await?;
                Ok(Some(String::from_utf8_lossy(&out).trim().to_string()))
            }
            Some(n) if n > 0 => Ok(None),
            _ => Err(GitError {
                command: "merge-file".into(),
                message: format!("ended with {status}"),
            }),
        }
    }

    /// A commit of `tree` (aot's own, unless `identity` is the user's).
    pub async fn commit(
        &self,
        tree: &str,
        parent: Option<&str>,
        message: &str,
        user: bool,
    ) -> Result<String, GitError> {
        let mut args = vec!["commit-tree", tree, "-m", message];
        if let Some(parent) = parent {
            args.extend(["-p", parent]);
        }
        let aot = [
            ("GIT_AUTHOR_NAME", "aot"),
            ("GIT_AUTHOR_EMAIL", "aot@localhost"),
            ("GIT_COMMITTER_NAME", "aot"),
            ("GIT_COMMITTER_EMAIL", "aot@localhost"),
        ];
        let out = run_in(&self.top, &args, if user { &[] } else { &aot }, None).await;
        let out = match out {
            // No identity configured: the commit is signed as aot.
            Err(_) if user => run_in(&self.top, &args, &aot, None).await?,
            other => other?,
        };
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// Sets `entries` in the index of the work tree at `dir` (the user's
    /// index: used only to record a commit aot made on their branch).
    pub async fn update_index(&self, dir: &Path, entries: &[(String, Entry)]) -> Result<(), GitError> {
        let info = index_info(entries);
        run_in(dir, &["update-index", "-z", "--index-info"], &[], Some(&info))
            .await
            .map(drop)
    }

    /// The object a ref names, if it exists.
    pub async fn resolve(&self, name: &str) -> Option<String> {
        let out = self
            .run(
                &self.top,
                &["rev-parse", "-q", "--verify", &format!("{name}^{{commit}}")],
            )
            .await
            .ok()?;
        Some(String::from_utf8_lossy(&out).trim().to_string()).filter(|s| !s.is_empty())
    }

    /// Points a ref at a commit.
    pub async fn set_ref(&self, name: &str, commit: &str) -> Result<(), GitError> {
        self.run(&self.top, &["update-ref", name, commit]).await.map(drop)
    }

    /// Deletes a ref (nothing when it does not exist).
    pub async fn delete_ref(&self, name: &str) -> Result<(), GitError> {
        self.run(&self.top, &["update-ref", "-d", name]).await.map(drop)
    }

    /// The refs under a prefix.
    pub async fn refs(&self, prefix: &str) -> Result<Vec<String>, GitError> {
        let out = self
            .run(&self.top, &["for-each-ref", "--format=%(refname)", prefix])
            .await?;
        Ok(String::from_utf8_lossy(&out).lines().map(str::to_string).collect())
    }

    /// A new linked worktree at `path`, detached at `commit`.
    pub async fn add_worktree(&self, path: &Path, commit: &str) -> Result<(), GitError> {
        let path = path.display().to_string();
        self.run(&self.top, &["worktree", "add", "-q", "-f", "--detach", &path, commit])
            .await
            .map(drop)
    }

    /// Resets a linked worktree to `commit`: tracked files as there, untracked
    /// files gone, ignored files (build caches) kept.
    pub async fn reset_worktree(&self, path: &Path, commit: &str) -> Result<(), GitError> {
        self.run(path, &["checkout", "-q", "-f", "--detach", commit]).await?;
        self.run(path, &["clean", "-f", "-d", "-q"]).await?;
        self.forget_snapshot(path).await;
        Ok(())
    }

    /// Removes a linked worktree and its administrative files.
    pub async fn remove_worktree(&self, path: &Path) {
        let shown = path.display().to_string();
        if self
            .run(&self.top, &["worktree", "remove", "-f", "-f", &shown])
            .await
            .is_err()
        {
            // Its folder is gone already: its administrative files go by
            // hand (`git worktree prune` would prune the user's own
            // worktrees on a drive that is not mounted too).
            self.forget_worktree(path).await;
        }
        let _ = tokio::fs::remove_dir_all(path).await;
    }

    /// Removes the administrative files of the linked worktree at `path`.
    async fn forget_worktree(&self, path: &Path) {
        let Ok(mut admins) = tokio::fs::read_dir(self.common.join("worktrees")).await else {
            return;
        };
        let wanted = path.join(".git");
        while let Ok(Some(admin)) = admins.next_entry().await {
            let gitdir = tokio::fs::read_to_string(admin.path().join("gitdir")).await;
            if gitdir.is_ok_and(|g| Path::new(g.trim()) == wanted) {
                let _ = tokio::fs::remove_dir_all(admin.path()).await;
            }
        }
    }

    /// The linked worktrees under `folder`.
    pub async fn worktrees_under(&self, folder: &Path) -> Vec<PathBuf> {
        let Ok(out) = self.run(&self.top, &["worktree", "list", "--porcelain", "-z"]).await else {
            return Vec::new();
        };
        out.split(|b| *b == 0)
            .filter_map(|field| field.strip_prefix(b"worktree "))
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .filter(|p| p.starts_with(folder))
            .collect()
    }
}

/// `update-index -z --index-info` input setting each path to its entry
/// (a zero mode removes it).
fn index_info(entries: &[(String, Entry)]) -> Vec<u8> {
    let mut info = Vec::new();
    for (path, entry) in entries {
        match entry {
            Some((mode, blob)) => info.extend_from_slice(format!("{mode} {blob}\t{path}").as_bytes()),
            None => info.extend_from_slice(format!("0 {}\t{path}", "0".repeat(40)).as_bytes()),
        }
        info.push(0);
    }
    info
}

/// FNV-1a: a stable name for a folder's snapshot index.
pub(super) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A temporary index file, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A temporary folder, removed when dropped.
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn io_error(command: &str, error: &std::io::Error) -> GitError {
    GitError {
        command: command.into(),
        message: error.to_string(),
    }
}

/// Whether git failed because a file went away while it read the tree.
fn vanished(error: &GitError) -> bool {
    let m = &error.message;
    m.contains("unable to stat") || m.contains("No such file or directory") || m.contains("unable to index file")
}

/// Removes a file. The folders it leaves empty stay: git does not track
/// folders, so an empty one may be work that landed (`mkdir -p out`) and
/// must not go with a failed attempt's file.
async fn remove_file(dir: &Path, path: &str) {
    let full = dir.join(path);
    if tokio::fs::symlink_metadata(&full).await.is_ok_and(|m| m.is_dir()) {
        return;
    }
    let _ = tokio::fs::remove_file(&full).await;
}

/// Runs git in `dir` with extra environment and optional standard input.
async fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
    let command = args.join(" ");
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        // aot's own checkouts and refs run none of the user's hooks.
        .args(["-c", "core.hooksPath=/dev/null"])
        .args(args)
        // The caller's git variables must not redirect aot's commands.
        .env_remove("GIT_DIR")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("LC_ALL", "C")
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        cmd.env(key, value);
    }
    let mut child = cmd.spawn().map_err(|e| GitError {
        command: command.clone(),
        message: if e.kind() == std::io::ErrorKind::NotFound {
            "git is not installed".into()
        } else {
            e.to_string()
        },
    })?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let input = input.to_vec();
        tokio::spawn(async move {
            let _ = pipe.write_all(&input).await;
        });
    }
    let out = child.wait_with_output().await.map_err(|e| io_error(&command, &e))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(GitError {
            command,
            message: if message.is_empty() {
                format!("ended with {}", out.status)
            } else {
                message
            },
        })
    }
}

/// Parses `diff-tree -r -z --raw`: `:oldmode newmode oldid newid status\0path\0`.
fn parse_raw(out: &[u8]) -> Vec<Delta> {
    let mut fields = out.split(|b| *b == 0);
    let mut deltas = Vec::new();
    while let Some(meta) = fields.next() {
        let Some(meta) = meta.strip_prefix(b":") else { continue };
        let Some(path) = fields.next() else { break };
        let meta = String::from_utf8_lossy(meta);
        let parts: Vec<&str> = meta.split(' ').collect();
        let [old_mode, new_mode, old_id, new_id, ..] = parts[..] else {
            continue;
        };
        let entry = |mode: &str, id: &str| (mode != "000000").then(|| (mode.to_string(), id.to_string()));
        deltas.push(Delta {
            path: String::from_utf8_lossy(path).into_owned(),
            old: entry(old_mode, old_id),
            new: entry(new_mode, new_id),
        });
    }
    deltas
}

/// Parses `diff-tree -r -z --numstat`: `added\tremoved\tpath\0` (`-` for binary).
fn parse_numstat(out: &[u8]) -> HashMap<String, (u32, u32)> {
    out.split(|b| *b == 0)
        .filter_map(|line| {
            let line = String::from_utf8_lossy(line);
            let mut parts = line.splitn(3, '\t');
            let added = parts.next()?.parse().unwrap_or(0);
            let removed = parts.next()?.parse().unwrap_or(0);
            Some((parts.next()?.to_string(), (added, removed)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_and_numstat_output_parse_with_odd_paths() {
        let raw = b":100644 100644 aaa bbb M\0dir/a b.txt\0:000000 100755 000 ccc A\0new\tname\0:100644 000000 ddd 000 D\0gone\0";
        let deltas = parse_raw(raw);
        assert_eq!(deltas.len(), 3);
        assert_eq!(deltas[0].path, "dir/a b.txt");
        assert_eq!(deltas[1].old, None);
        assert_eq!(deltas[1].new, Some(("100755".into(), "ccc".into())));
        assert_eq!(deltas[2].new, None);
        let numstat = parse_numstat(b"3\t1\tdir/a b.txt\0-\t-\tbin\0");
        assert_eq!(numstat["dir/a b.txt"], (3, 1));
        assert_eq!(numstat["bin"], (0, 0));
    }
}
