//! How an attempt's changes land on a tree that moved on meanwhile — pure.
//!
//! Every landing is the same question: an attempt started from tree `base`
//! and made `own` (base → its result); meanwhile `landed` (base → the current
//! tree) happened — other atoms' work, an undo. Each file the attempt changed
//! is taken as it left it when nobody else changed that file, taken as is
//! when both made the same change, merged line by line (git's three-way
//! merge) when both changed a regular file's content, and a conflict
//! otherwise. Undoing a landing is the same question with the landing's
//! result as the base and its starting tree as the "attempt".

use std::collections::{HashMap, HashSet};

/// A path's entry in a tree: its mode and blob id; `None` when absent.
pub type Entry = Option<(String, String)>;

/// One file that differs between two trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// Path from the repository's top.
    pub path: String,
    /// In the first tree.
    pub old: Entry,
    /// In the second.
    pub new: Entry,
}

/// What to do with one file the attempt changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The file becomes this entry.
    Take(Entry),
    /// Both sides changed a regular file's content: merge `theirs` (the
    /// attempt's) into `ours` (the current tree's) over `base`.
    Merge {
        /// Mode of the result.
        mode: String,
        /// The blob both started from (`None`: both added the file).
        base: Option<String>,
        /// The current tree's blob.
        ours: String,
        /// The attempt's blob.
        theirs: String,
    },
    /// Both sides changed the file in ways that cannot be merged (one
    /// deleted it, the modes differ, or it is not a regular file).
    Conflict(String),
}

/// Decides each file of `own` (base → the attempt's result) over `landed`
/// (base → the current tree). Files the current tree already has as the
/// attempt left them need nothing and are left out.
pub fn plan(own: &[Delta], landed: &[Delta]) -> Vec<(String, Resolution)> {
    let current: HashMap<&str, &Delta> = landed.iter().map(|d| (d.path.as_str(), d)).collect();
    // Files that landed, and the folders they need.
    let landed_files: HashSet<&str> = landed
        .iter()
        .filter(|d| d.new.is_some())
        .map(|d| d.path.as_str())
        .collect();
    let landed_folders: HashSet<&str> = landed_files.iter().flat_map(|p| folders(p)).collect();
    let mut out = Vec::new();
    for delta in own {
        // A file where a folder landed, or under a path that landed as a file.
        if delta.new.is_some()
            && (landed_folders.contains(delta.path.as_str()) || folders(&delta.path).any(|f| landed_files.contains(f)))
        {
            let why = "a file and a folder at the same path: work that landed first made the other";
            out.push((delta.path.clone(), Resolution::Conflict(why.into())));
            continue;
        }
        let resolution = match current.get(delta.path.as_str()) {
            None => Resolution::Take(delta.new.clone()),
            Some(theirs_too) if theirs_too.new == delta.new => continue,
            Some(other) => both_changed(delta, &other.new),
        };
        out.push((delta.path.clone(), resolution));
    }
    out
}

/// Both the attempt (`delta`) and the current tree (`ours`) changed a file.
fn both_changed(delta: &Delta, ours: &Entry) -> Resolution {
    let regular = |mode: &str| mode == "100644" || mode == "100755";
    match (ours, &delta.new) {
        (None, _) => Resolution::Conflict("deleted by work that landed first, changed by this attempt".into()),
        (_, None) => Resolution::Conflict("changed by work that landed first, deleted by this attempt".into()),
        (Some((our_mode, ours)), Some((their_mode, theirs))) => {
            let old_mode = delta.old.as_ref().map(|(mode, _)| mode);
            // A mode changed on one side only is kept.
            let mode = if our_mode == their_mode || old_mode == Some(our_mode) {
                Some(their_mode)
            } else if old_mode == Some(their_mode) {
                Some(our_mode)
            } else {
                None
            };
            if !regular(our_mode) || !regular(their_mode) {
                Resolution::Conflict("not a regular file, changed on both sides".into())
            } else if let Some(mode) = mode {
                Resolution::Merge {
                    mode: mode.clone(),
                    base: delta.old.as_ref().map(|(_, blob)| blob.clone()),
                    ours: ours.clone(),
                    theirs: theirs.clone(),
                }
            } else {
                Resolution::Conflict("its mode changed on both sides".into())
            }
        }
    }
}

/// The folders a path lies in: `a/b/c` → `a`, `a/b`.
fn folders(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

/// The reverse of a list of deltas (to undo them).
pub fn reversed(deltas: &[Delta]) -> Vec<Delta> {
    deltas
        .iter()
        .map(|d| Delta {
            path: d.path.clone(),
            old: d.new.clone(),
            new: d.old.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(id: &str) -> Entry {
        Some(("100644".into(), id.into()))
    }

    fn delta(path: &str, old: Entry, new: Entry) -> Delta {
        Delta {
            path: path.into(),
            old,
            new,
        }
    }

    #[test]
    fn a_file_nobody_else_changed_is_taken_as_the_attempt_left_it() {
        let own = [
            delta("a", blob("1"), blob("2")),
            delta("new", None, blob("3")),
            delta("gone", blob("4"), None),
        ];
        let landed = [delta("other", blob("5"), blob("6"))];
        assert_eq!(
            plan(&own, &landed),
            vec![
                ("a".into(), Resolution::Take(blob("2"))),
                ("new".into(), Resolution::Take(blob("3"))),
                ("gone".into(), Resolution::Take(None)),
            ]
        );
    }

    #[test]
    fn the_same_change_on_both_sides_needs_nothing() {
        let own = [delta("a", blob("1"), blob("2")), delta("b", blob("1"), None)];
        let landed = [delta("a", blob("1"), blob("2")), delta("b", blob("1"), None)];
        assert!(plan(&own, &landed).is_empty());
    }

    #[test]
    fn both_changing_a_files_content_is_a_merge_over_the_common_base() {
        let own = [
            delta("a", blob("1"), blob("theirs")),
            delta("both-new", None, blob("x")),
        ];
        let landed = [delta("a", blob("1"), blob("ours")), delta("both-new", None, blob("y"))];
        assert_eq!(
            plan(&own, &landed),
            vec![
                (
                    "a".into(),
                    Resolution::Merge {
                        mode: "100644".into(),
                        base: Some("1".into()),
                        ours: "ours".into(),
                        theirs: "theirs".into()
                    }
                ),
                (
                    "both-new".into(),
                    Resolution::Merge {
                        mode: "100644".into(),
                        base: None,
                        ours: "y".into(),
                        theirs: "x".into()
                    }
                ),
            ]
        );
    }

    #[test]
    fn a_delete_against_a_change_a_symlink_or_two_new_modes_conflict() {
        let link = |id: &str| Some(("120000".to_string(), id.to_string()));
        let exec = |id: &str| Some(("100755".to_string(), id.to_string()));
        let own = [
            delta("deleted-here", blob("1"), None),
            delta("deleted-there", blob("1"), blob("2")),
            delta("link", link("1"), link("2")),
            delta("mode", blob("1"), exec("2")),
        ];
        let landed = [
            delta("deleted-here", blob("1"), blob("3")),
            delta("deleted-there", blob("1"), None),
            delta("link", link("1"), link("3")),
            delta("mode", blob("1"), Some(("100644".into(), "3".into()))),
        ];
        let plan = plan(&own, &landed);
        let conflicts: Vec<&str> = plan
            .iter()
            .filter(|(_, r)| matches!(r, Resolution::Conflict(_)))
            .map(|(p, _)| p.as_str())
            .collect();
        assert_eq!(conflicts, ["deleted-here", "deleted-there", "link"]);
        // Only the attempt changed the mode: the merge keeps its mode.
        assert!(matches!(&plan[3].1, Resolution::Merge { mode, .. } if mode == "100755"));
    }

    #[test]
    fn a_file_where_a_folder_landed_or_the_reverse_conflicts() {
        let own = [
            delta("x", None, blob("1")),
            delta("d/e/f", None, blob("2")),
            delta("ok/f", None, blob("3")),
        ];
        let landed = [
            delta("x/y", None, blob("4")),
            delta("d", None, blob("5")),
            delta("ok/g", None, blob("6")),
        ];
        let plan = plan(&own, &landed);
        assert!(matches!(&plan[0], (p, Resolution::Conflict(_)) if p == "x"));
        assert!(matches!(&plan[1], (p, Resolution::Conflict(_)) if p == "d/e/f"));
        assert_eq!(plan[2], ("ok/f".into(), Resolution::Take(blob("3"))));
    }

    #[test]
    fn an_undo_is_the_reverse_of_the_landing() {
        let landing = [delta("a", blob("1"), blob("2")), delta("new", None, blob("3"))];
        assert_eq!(
            reversed(&landing),
            vec![delta("a", blob("2"), blob("1")), delta("new", blob("3"), None)]
        );
        // Nothing landed on top: the undo takes the files back.
        assert_eq!(
            plan(&reversed(&landing), &[]),
            vec![
                ("a".into(), Resolution::Take(blob("1"))),
                ("new".into(), Resolution::Take(None))
            ]
        );
    }
}
