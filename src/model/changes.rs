//! What an attempt changed in the work tree, when attempts are isolated
//! (`constraints.isolation: git`): the tree before and after, by git id, and
//! the files, with a line count each. Journaled when changes land, are
//! discarded or are undone; a solved atom's binding keeps the trees, so a
//! backtrack can undo what its branch landed, in this run or a later one.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How many files a record lists; the rest are counted in `more`.
pub const FILES_LISTED: usize = 100;

/// What one attempt (or an undo) changed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Changes {
    /// The git tree the changes apply to.
    pub before: String,
    /// The git tree with the changes (for discarded work: still in git's
    /// object store, `git checkout <after> -- PATH` brings a file back).
    pub after: String,
    /// The files, by path from the repository's top.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileChange>,
    /// Files changed beyond those listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileChange {
    /// Path from the repository's top, `/`-separated.
    pub path: String,
    /// Added, modified or deleted.
    pub change: ChangeKind,
    /// Lines added (0 for a binary file).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub added: u32,
    /// Lines removed (0 for a binary file).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub removed: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A new file.
    Added,
    /// Changed content or mode.
    Modified,
    /// Removed.
    Deleted,
}

impl Changes {
    /// Returns whether no file changed.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.more == 0
    }

    /// Returns how many files changed.
    pub fn count(&self) -> usize {
        self.files.len() + self.more
    }

    /// The same changes listing at most `n` files (a binding keeps few).
    pub fn listing(&self, n: usize) -> Changes {
        let shown = self.files.len().min(n);
        Changes {
            before: self.before.clone(),
            after: self.after.clone(),
            files: self.files[..shown].to_vec(),
            more: self.more + self.files.len() - shown,
        }
    }

    /// The listed paths.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(|f| f.path.as_str())
    }
}

/// A short diff stat: `2 files: src/a.py (+3 -1), notes.txt (new, +10)`.
impl fmt::Display for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 10;
        let n = self.count();
        if n == 0 {
            return f.write_str("no files");
        }
        write!(f, "{n} file{}: ", if n == 1 { "" } else { "s" })?;
        for (i, file) in self.files.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{file}")?;
        }
        let rest = n - self.files.len().min(SHOWN);
        if rest > 0 {
            write!(f, " and {rest} more")?;
        }
        Ok(())
    }
}

impl fmt::Display for FileChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines = |f: &mut fmt::Formatter<'_>| match (self.added, self.removed) {
            (0, 0) => Ok(()),
            (a, 0) => write!(f, "+{a}"),
            (0, r) => write!(f, "-{r}"),
            (a, r) => write!(f, "+{a} -{r}"),
        };
        match self.change {
            ChangeKind::Added => {
                write!(f, "{} (new", self.path)?;
                if self.added > 0 {
                    f.write_str(", ")?;
                    lines(f)?;
                }
                f.write_str(")")
            }
            ChangeKind::Deleted => write!(f, "{} (deleted)", self.path),
            ChangeKind::Modified if self.added == 0 && self.removed == 0 => write!(f, "{}", self.path),
            ChangeKind::Modified => {
                write!(f, "{} (", self.path)?;
                lines(f)?;
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, change: ChangeKind, added: u32, removed: u32) -> FileChange {
        FileChange {
            path: path.into(),
            change,
            added,
            removed,
        }
    }

    #[test]
    fn the_stat_names_each_file_with_its_lines() {
        let changes = Changes {
            before: "a".into(),
            after: "b".into(),
            files: vec![
                file("src/a.py", ChangeKind::Modified, 3, 1),
                file("notes.txt", ChangeKind::Added, 10, 0),
                file("old.txt", ChangeKind::Deleted, 0, 4),
                file("bin", ChangeKind::Modified, 0, 0),
            ],
            more: 0,
        };
        assert_eq!(
            changes.to_string(),
            "4 files: src/a.py (+3 -1), notes.txt (new, +10), old.txt (deleted), bin"
        );
        let one = Changes {
            files: vec![file("a", ChangeKind::Added, 0, 0)],
            ..Changes::default()
        };
        assert_eq!(one.to_string(), "1 file: a (new)");
        assert_eq!(Changes::default().to_string(), "no files");
    }

    #[test]
    fn a_long_list_is_cut_and_counted() {
        let files: Vec<FileChange> = (0..12)
            .map(|i| file(&format!("f{i}"), ChangeKind::Modified, 1, 0))
            .collect();
        let changes = Changes {
            files,
            more: 5,
            ..Changes::default()
        };
        assert!(changes.to_string().starts_with("17 files: f0 (+1), "));
        assert!(changes.to_string().ends_with("f9 (+1) and 7 more"));
        let kept = changes.listing(2);
        assert_eq!((kept.files.len(), kept.more, kept.count()), (2, 15, 17));
    }
}
