//! Edits the user's part of a YAML state file in place when what it says
//! changes (an `aot redirect` adds an atom, sets a constraint, changes the
//! goal): only the entries that differ are rewritten, so comments, flow
//! style, key order and blank lines everywhere else stay as the user wrote
//! them. Pure: text in, text out, and every result is checked by parsing it
//! back — when a change cannot be made this way, the caller writes the part
//! afresh (and keeps the old text aside).

use serde_json::Value;

use crate::state::disk::UserPart;
use crate::state::spans::{self, Node, NodeKind};

/// Returns `text` (a user part that says `old`) edited to say `new`, or
/// `None` when the edit cannot be made in place.
pub fn patch(text: &str, old: &UserPart, new: &UserPart) -> Option<String> {
    let tree = spans::parse(text).ok()?;
    let old_value = serde_json::to_value(old).ok()?;
    let new_value = serde_json::to_value(new).ok()?;
    let source = Source::new(text);
    let mut edits = Vec::new();
    diff_map(&source, &tree, 0, &old_value, &new_value, &mut edits)?;
    let patched = source.apply(edits)?;
    let says: UserPart = serde_saphyr::from_str(&patched).ok()?;
    let same_order = says.graph.atoms.keys().eq(new.graph.atoms.keys());
    (says == *new && same_order).then_some(patched)
}

/// One replacement of a byte range.
#[derive(Debug)]
struct Edit {
    start: usize,
    end: usize,
    with: String,
}

/// The text with its lines' byte ranges.
struct Source<'a> {
    text: &'a str,
    /// Each line's start and end (before its line break).
    lines: Vec<(usize, usize)>,
}

impl<'a> Source<'a> {
    fn new(text: &'a str) -> Self {
        let mut lines = Vec::new();
        let mut start = 0;
        for line in text.split_inclusive('\n') {
            let end = start + line.trim_end_matches(['\n', '\r']).len();
            lines.push((start, end));
            start += line.len();
        }
        Self { text, lines }
    }

    /// The byte offset of a 1-based line and character column.
    fn offset(&self, line: u64, column: u64) -> Option<usize> {
        let &(start, end) = self.lines.get(usize::try_from(line).ok()?.checked_sub(1)?)?;
        let skip = usize::try_from(column).ok()?.checked_sub(1)?;
        let line_text = &self.text[start..end];
        match line_text.char_indices().nth(skip) {
            Some((i, _)) => Some(start + i),
            None if line_text.chars().count() == skip => Some(end),
            None => None,
        }
    }

    /// The 0-based index of the line holding `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.lines
            .partition_point(|&(start, _)| start <= offset)
            .saturating_sub(1)
    }

    fn indent(&self, line: usize) -> usize {
        let (start, end) = self.lines[line];
        self.text[start..end].len() - self.text[start..end].trim_start_matches(' ').len()
    }

    fn blank_or_comment(&self, line: usize) -> bool {
        let (start, end) = self.lines[line];
        let rest = self.text[start..end].trim_start();
        rest.is_empty() || rest.starts_with('#')
    }

    /// The last line of the block entry whose key is on `key_line` at
    /// indentation `indent`: the lines after it that are indented deeper
    /// (or are a sequence's `- ` at the key's own indentation), trailing
    /// blank and comment lines left to what follows.
    fn entry_end(&self, key_line: usize, indent: usize) -> usize {
        let mut last = key_line;
        for line in key_line + 1..self.lines.len() {
            if self.blank_or_comment(line) {
                continue;
            }
            let (start, end) = self.lines[line];
            let deeper = self.indent(line) > indent;
            let dash = self.indent(line) == indent && self.text[start..end].trim_start().starts_with('-');
            if !(deeper || dash) {
                break;
            }
            last = line;
        }
        last
    }

    /// The offset just past the bracket closing the flow collection that
    /// opens at `open`, skipping quoted text and comments.
    fn flow_end(&self, open: usize) -> Option<usize> {
        let bytes = self.text.as_bytes();
        let mut depth = 0usize;
        let mut i = open;
        while i < bytes.len() {
            match bytes[i] {
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                b'\'' => i += self.text[i + 1..].find('\'')? + 1,
                b'"' => {
                    let mut j = i + 1;
                    while bytes.get(j) != Some(&b'"') {
                        j += if bytes.get(j) == Some(&b'\\') { 2 } else { 1 };
                        if j >= bytes.len() {
                            return None;
                        }
                    }
                    i = j;
                }
                b'#' if i > 0 && bytes[i - 1].is_ascii_whitespace() => {
                    i = self.lines[self.line_of(i)].1;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        None
    }

    /// Applies `edits` (non-overlapping) from the last to the first.
    fn apply(&self, mut edits: Vec<Edit>) -> Option<String> {
        edits.sort_by_key(|e| (e.start, e.end));
        if edits.windows(2).any(|w| w[0].end > w[1].start) {
            return None;
        }
        let mut out = self.text.to_string();
        for edit in edits.iter().rev() {
            out.replace_range(edit.start..edit.end, &edit.with);
        }
        Some(out)
    }
}

/// Where a node's text starts, and whether it is a flow collection.
fn start_of(source: &Source, node: &Node) -> Option<(usize, bool)> {
    let loc = node.loc()?;
    let at = source.offset(loc.line, loc.column)?;
    let flow = source.text[at..].starts_with(['{', '[']);
    Some((at, flow))
}

/// Collects the edits that make the block or flow map `map` (whose keys sit
/// at indentation `indent` when block) say `new` instead of `old`.
fn diff_map(source: &Source, map: &Node, indent: usize, old: &Value, new: &Value, edits: &mut Vec<Edit>) -> Option<()> {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return None;
    };
    let NodeKind::Map(entries) = &map.kind else {
        return None;
    };
    for (key, new_value) in new {
        match (old.get(key), entries.iter().find(|(k, _, _)| k == key)) {
            (Some(old_value), _) if old_value == new_value => {}
            (Some(old_value), Some((_, key_loc, child))) => {
                let key_at = source.offset(key_loc.line, key_loc.column)?;
                let key_indent = key_at - source.lines[source.line_of(key_at)].0;
                let descend = matches!((old_value, new_value), (Value::Object(_), Value::Object(_)))
                    && matches!(child.kind, NodeKind::Map(_));
                let nested = child.loc().and_then(|l| source.offset(l.line, l.column));
                match nested {
                    Some(at) if descend => {
                        let child_indent = at - source.lines[source.line_of(at)].0;
                        diff_map(source, child, child_indent, old_value, new_value, edits)?;
                    }
                    _ => edits.push(replace_value(source, key_at, key_indent, child, new_value)?),
                }
            }
            (_, Some((_, key_loc, child))) => {
                // Written in the text though it says what the default says.
                let key_at = source.offset(key_loc.line, key_loc.column)?;
                let key_indent = key_at - source.lines[source.line_of(key_at)].0;
                edits.push(replace_value(source, key_at, key_indent, child, new_value)?);
            }
            (_, None) => edits.push(insert(source, map, indent, key, new_value)?),
        }
    }
    for (key, _) in old.iter().filter(|(k, _)| !new.contains_key(*k)) {
        // A key the text does not write says what the default says: nothing to remove.
        if let Some(found) = entries.iter().find(|(k, _, _)| k == key) {
            edits.push(remove(source, map, found)?);
        }
    }
    Some(())
}

/// The edit that makes the value of the entry whose key starts at `key_at`
/// (indented `key_indent`) say `value`.
fn replace_value(source: &Source, key_at: usize, key_indent: usize, child: &Node, value: &Value) -> Option<Edit> {
    let key_line = source.line_of(key_at);
    if let Some((at, flow)) = start_of(source, child) {
        let same_line = source.line_of(at) == key_line;
        let block_scalar =
            source.text[at..].starts_with(['|', '>']) || (matches!(child.kind, NodeKind::Scalar(_)) && !same_line);
        if flow {
            let end = source.flow_end(at)?;
            return Some(Edit {
                start: at,
                end,
                with: flow_text(value),
            });
        }
        if same_line && !block_scalar && matches!(child.kind, NodeKind::Scalar(_)) {
            let len = usize::try_from(child.loc()?.len).ok()?;
            let end = at
                + source.text[at..]
                    .char_indices()
                    .nth(len)
                    .map_or(source.text.len() - at, |(i, _)| i);
            if source.line_of(end.saturating_sub(1).max(at)) != key_line {
                return None;
            }
            return Some(Edit {
                start: at,
                end,
                with: flow_text(value),
            });
        }
    }
    // A block value (or none): from after the key's colon to the entry's end.
    let line_end = source.lines[key_line].1;
    let colon = key_at + source.text[key_at..line_end].find(':')? + 1;
    let end = source.lines[source.entry_end(key_line, key_indent)].1;
    let with = match value {
        Value::Object(m) if !m.is_empty() => format!("\n{}", block_text(value, key_indent + 2)?.trim_end_matches('\n')),
        Value::Array(a) if !a.is_empty() => format!("\n{}", block_text(value, key_indent + 2)?.trim_end_matches('\n')),
        _ => format!(" {}", flow_text(value)),
    };
    Some(Edit {
        start: colon,
        end,
        with,
    })
}

/// The edit that adds `key: value` to `map` as its last entry.
fn insert(source: &Source, map: &Node, indent: usize, key: &str, value: &Value) -> Option<Edit> {
    let NodeKind::Map(entries) = &map.kind else {
        return None;
    };
    if let Some((at, true)) = start_of(source, map) {
        let close = source.flow_end(at)? - 1;
        let entry = format!("{}: {}", flow_key(key), flow_text(value));
        let Some((_, _, last)) = entries.last() else {
            return Some(Edit {
                start: at + 1,
                end: close,
                with: format!(" {entry} "),
            });
        };
        // Right after the last value, before any comma or comment after it.
        let after_last = value_end(source, last)?;
        return Some(Edit {
            start: after_last,
            end: after_last,
            with: format!(", {entry}"),
        });
    }
    let (_, last_loc, _) = entries.last()?;
    let last_at = source.offset(last_loc.line, last_loc.column)?;
    let end = source.lines[source.entry_end(source.line_of(last_at), indent)].1;
    let mut entry = serde_json::Map::new();
    entry.insert(key.to_string(), value.clone());
    let text = block_text(&Value::Object(entry), indent)?;
    Some(Edit {
        start: end,
        end,
        with: format!("\n{}", text.trim_end_matches('\n')),
    })
}

/// The edit that removes the entry `found` from `map`.
fn remove(source: &Source, map: &Node, found: &(String, spans::Loc, Node)) -> Option<Edit> {
    let (_, key_loc, child) = found;
    let key_at = source.offset(key_loc.line, key_loc.column)?;
    if let Some((_, true)) = start_of(source, map) {
        // In a flow map: the entry and the comma on one side of it.
        let value_end = value_end(source, child)?;
        let after = &source.text[value_end..];
        let trimmed = after.trim_start_matches([' ', '\t']);
        if let Some(rest) = trimmed.strip_prefix(',') {
            let gap = rest.len() - rest.trim_start_matches([' ', '\t']).len();
            let end = value_end + (after.len() - rest.len()) + gap;
            return Some(Edit {
                start: key_at,
                end,
                with: String::new(),
            });
        }
        let before = source.text[..key_at].trim_end_matches([' ', '\t']);
        let start = before.strip_suffix(',').map_or(key_at, |b| b.len());
        return Some(Edit {
            start,
            end: value_end,
            with: String::new(),
        });
    }
    let key_line = source.line_of(key_at);
    if source.text[source.lines[key_line].0..key_at].trim() != "" {
        return None;
    }
    let indent = key_at - source.lines[key_line].0;
    let last = source.entry_end(key_line, indent);
    let start = source.lines[key_line].0;
    let end = source.lines.get(last + 1).map_or(source.text.len(), |&(next, _)| next);
    Some(Edit {
        start,
        end,
        with: String::new(),
    })
}

/// Where a scalar's or a flow collection's text ends.
fn value_end(source: &Source, node: &Node) -> Option<usize> {
    match start_of(source, node)? {
        (at, true) => source.flow_end(at),
        (at, false) => {
            let len = usize::try_from(node.loc()?.len).ok()?;
            Some(
                at + source.text[at..]
                    .char_indices()
                    .nth(len)
                    .map_or(source.text.len() - at, |(i, _)| i),
            )
        }
    }
}

/// `value` in block style, each line indented by `indent` spaces.
fn block_text(value: &Value, indent: usize) -> Option<String> {
    let text = serde_saphyr::to_string(value).ok()?;
    let pad = " ".repeat(indent);
    Some(
        text.split_inclusive('\n')
            .map(|line| {
                if line.trim().is_empty() {
                    line.to_string()
                } else {
                    format!("{pad}{line}")
                }
            })
            .collect(),
    )
}

/// `value` in flow style, valid both inside `{ … }` and after `key: `.
fn flow_text(value: &Value) -> String {
    match value {
        Value::Object(map) if map.is_empty() => "{}".into(),
        Value::Object(map) => format!(
            "{{ {} }}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", flow_key(k), flow_text(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Array(items) => format!("[{}]", items.iter().map(flow_text).collect::<Vec<_>>().join(", ")),
        Value::String(s) => flow_key(s),
        other => other.to_string(),
    }
}

/// A string as a flow scalar: plain when YAML reads it back as that very
/// string, else double-quoted (JSON's escapes are YAML's).
fn flow_key(s: &str) -> String {
    let plain = !s.is_empty()
        && s.trim() == s
        && s.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ' '))
        && !s.starts_with(['-', '.', ' '])
        && !s.contains(" #")
        && serde_saphyr::from_str::<Value>(s).ok().as_ref() == Some(&Value::String(s.to_string()));
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_else(|_| format!("\"{}\"", s.escape_default()))
    }
}

/// Whether every comment of `old` is still in `new`.
pub fn keeps_comments(old: &str, new: &str) -> bool {
    old.lines()
        .filter_map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with('#') {
                Some(trimmed.trim_end())
            } else {
                line.find(" #").map(|i| line[i + 1..].trim_end())
            }
        })
        .all(|comment| new.contains(comment))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Atom;

    const FILE: &str = "\
# my plan
version: 2
objective:
  goal: fix it   # the real goal
  background_intent: b
  deliverables: d
  definition_of_done: done

  base_case: { command: 'cargo test' }   # must pass
  constraints: { max_retries: 2 }
graph:
  atoms:
    # first the build
    build: { run: cargo build }
    test:
      run: |
        cargo test
        echo done
      deps: [build]   # after the build
    lint:
      deps:
        - build
        - test
      run: cargo clippy
";

    fn said(text: &str) -> UserPart {
        serde_saphyr::from_str(text).unwrap()
    }

    /// Patches FILE with `change` and returns the new text.
    fn patched(change: impl FnOnce(&mut UserPart)) -> String {
        let old = said(FILE);
        let mut new = old.clone();
        change(&mut new);
        let text = patch(FILE, &old, &new).expect("patched in place");
        assert_eq!(said(&text), new);
        text
    }

    /// The lines of `text` that FILE does not have, and FILE's that it lost.
    fn changed_lines(text: &str) -> (Vec<String>, Vec<String>) {
        let old: Vec<&str> = FILE.lines().collect();
        let new: Vec<&str> = text.lines().collect();
        (
            new.iter().filter(|l| !old.contains(l)).map(|l| l.to_string()).collect(),
            old.iter().filter(|l| !new.contains(l)).map(|l| l.to_string()).collect(),
        )
    }

    #[test]
    fn an_added_atom_is_appended_and_nothing_else_moves() {
        let text = patched(|u| {
            let mut atom = Atom::command("echo extra");
            atom.deps = vec!["lint".into()];
            u.graph.atoms.insert("extra".into(), atom);
        });
        assert!(text.starts_with(FILE.trim_end_matches('\n')), "{text}");
        assert_eq!(
            &text[FILE.len() - 1..],
            "\n    extra:\n      run: echo extra\n      deps:\n      - lint\n"
        );
    }

    #[test]
    fn a_changed_goal_keeps_its_comment() {
        let text = patched(|u| u.objective.goal = Some("fix it: all of it".into()));
        let (added, lost) = changed_lines(&text);
        assert_eq!(added, ["  goal: \"fix it: all of it\"   # the real goal"]);
        assert_eq!(lost, ["  goal: fix it   # the real goal"]);
    }

    #[test]
    fn a_constraint_is_set_inside_its_flow_map() {
        let text = patched(|u| {
            u.objective.constraints.max_retries = Some(5);
            u.objective.constraints.max_iterations = Some(9);
        });
        let (added, _) = changed_lines(&text);
        assert_eq!(added, ["  constraints: { max_retries: 5, max_iterations: 9 }"]);
    }

    #[test]
    fn a_base_case_command_changes_inside_its_flow_map() {
        let text = patched(|u| u.objective.base_case.as_mut().unwrap().command = "cargo test --all".into());
        let (added, _) = changed_lines(&text);
        assert_eq!(added, ["  base_case: { command: cargo test --all }   # must pass"]);
    }

    #[test]
    fn a_removed_atom_goes_with_its_lines_and_its_name_from_deps() {
        let text = patched(|u| {
            u.graph.atoms.shift_remove("test");
            u.graph.atoms["lint"].deps.retain(|d| d.as_str() != "test");
        });
        let (added, lost) = changed_lines(&text);
        assert!(added.is_empty(), "{added:?}");
        assert_eq!(
            lost,
            [
                "    test:",
                "      run: |",
                "        cargo test",
                "        echo done",
                "      deps: [build]   # after the build",
                "        - test"
            ]
        );
        assert!(
            text.contains("    # first the build\n    build: { run: cargo build }\n    lint:\n"),
            "{text}"
        );
    }

    #[test]
    fn an_atom_in_a_flow_map_is_added_and_removed_in_place() {
        let flow = "version: 2\nobjective: { goal: g, background_intent: b, deliverables: d, definition_of_done: x, base_case: { command: 'true' } }\ngraph:\n  atoms: { a: { run: 'true' }, b: { run: 'false', deps: [a] } }   # two\n";
        let old = said(flow);
        let mut new = old.clone();
        new.graph.atoms.insert("c".into(), Atom::command("echo c"));
        let text = patch(flow, &old, &new).expect("added");
        assert_eq!(
            text.lines().nth(3),
            Some("  atoms: { a: { run: 'true' }, b: { run: 'false', deps: [a] }, c: { run: echo c } }   # two")
        );
        let mut fewer = old.clone();
        fewer.graph.atoms.shift_remove("a");
        fewer.graph.atoms["b"].deps.clear();
        let text = patch(flow, &old, &fewer).expect("removed");
        assert_eq!(text.lines().nth(3), Some("  atoms: { b: { run: 'false' } }   # two"));
    }

    #[test]
    fn an_atom_is_added_to_a_flow_map_written_over_lines_with_comments() {
        let flow = "version: 2\nobjective: { goal: g, background_intent: b, deliverables: d, definition_of_done: x, base_case: { command: 'true' } }\ngraph:\n  atoms: {\n    a: { run: 'true' },   # the first\n    b: { run: 'false', deps: [a] }   # the last\n  }\n";
        let old = said(flow);
        let mut new = old.clone();
        new.graph.atoms.insert("c".into(), Atom::command("echo c"));
        let text = patch(flow, &old, &new).expect("added in place");
        assert_eq!(
            text,
            flow.replace(
                "deps: [a] }   # the last",
                "deps: [a] }, c: { run: echo c }   # the last"
            )
        );
    }

    #[test]
    fn a_missing_section_is_added_under_its_parent() {
        let file = FILE.replace("  constraints: { max_retries: 2 }\n", "");
        let old = said(&file);
        let mut new = old.clone();
        new.objective.constraints.max_replans = Some(7);
        let text = patch(&file, &old, &new).expect("patched");
        assert!(
            text.contains(
                "  base_case: { command: 'cargo test' }   # must pass\n  constraints:\n    max_replans: 7\ngraph:\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_comment_inside_a_rewritten_value_is_noticed() {
        let file = FILE.replace("        - test\n", "        - test   # the tests first\n");
        let old = said(&file);
        let mut new = old.clone();
        new.graph.atoms["lint"].deps.clear();
        let text = patch(&file, &old, &new).expect("patched");
        assert!(!keeps_comments(&file, &text), "{text}");
        assert!(keeps_comments(FILE, &patched(|u| u.objective.goal = Some("g".into()))));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Whatever the words, a patch never panics, and what it gives says
        /// exactly the new content.
        #[test]
        fn a_patch_says_the_new_content_or_declines(
            goal in "\\PC{0,30}",
            command in "\\PC{1,30}",
            id in "[a-z][a-z0-9_-]{0,8}",
            retries in 0u32..10,
            remove in proptest::bool::ANY,
        ) {
            let old = said(FILE);
            let mut new = old.clone();
            new.objective.goal = Some(goal);
            new.objective.constraints.max_retries = Some(retries);
            if remove {
                new.graph.atoms.shift_remove("lint");
            }
            if !new.graph.atoms.contains_key(id.as_str()) {
                new.graph.atoms.insert(id.as_str().into(), Atom::command(command));
            }
            if let Some(text) = patch(FILE, &old, &new) {
                proptest::prop_assert_eq!(said(&text), new);
            }
        }
    }

    #[test]
    fn strings_that_yaml_would_misread_are_quoted() {
        for s in [
            "yes", "null", "1.5", "a: b", "# c", "- x", "x #y", "", " lead", "it's", "a\nb", "{x}", "@at", "~",
        ] {
            let text = format!("k: {}\n", flow_key(s));
            let back: serde_json::Map<String, Value> = serde_saphyr::from_str(&text).unwrap();
            assert_eq!(back["k"], Value::String(s.into()), "{text}");
        }
        assert_eq!(flow_key("cargo test"), "cargo test");
    }

    #[test]
    fn what_cannot_be_placed_is_left_to_a_fresh_rendering() {
        // Removing and adding at the same end of a map would overlap.
        let old = said(FILE);
        let mut new = old.clone();
        new.graph.atoms.shift_remove("lint");
        new.graph.atoms.insert("other".into(), Atom::command("true"));
        if let Some(text) = patch(FILE, &old, &new) {
            assert_eq!(said(&text), new);
        }
    }
}
