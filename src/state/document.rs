//! Reading and writing the state file's text: format by extension, size and
//! encoding guards, parsing with every problem reported, and serialization that
//! keeps the user's leading comment block (the editor's schema line).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::state::StateFile;
use crate::state::diag::{Diagnostic, Diagnostics};
use crate::state::spans::{self, Loc, NodeKind};
use crate::state::validate;

/// State files larger than this are refused: a hand-written plan is kilobytes,
/// a 10,000-atom run a few megabytes.
pub const MAX_STATE_BYTES: u64 = 32 * 1024 * 1024;

/// The file format, chosen by extension: `.json` is JSON, anything else YAML.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML (the default).
    Yaml,
    /// JSON.
    Json,
}

impl Format {
    /// Returns the format for a path.
    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Yaml,
        }
    }

    /// Returns the file extension, without a dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
        }
    }
}

/// A state file as read from disk.
#[derive(Debug, Clone)]
pub struct Document {
    /// The parsed, validated state.
    pub state: StateFile,
    /// The leading comment lines, kept on save.
    pub header: String,
    /// The user's part of a YAML file as written, kept byte for byte on save
    /// while it says what the state's user part says.
    pub user_text: Option<UserText>,
    /// Hash of the exact bytes read.
    pub hash: u64,
}

/// The user's part of a YAML state file — everything above the engine's
/// section — as written, with what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct UserText {
    /// The text, byte for byte (a version-1 file's `version:` line bumped).
    pub text: String,
    /// What it says.
    pub says: crate::state::disk::UserPart,
}

/// The comment line that opens the engine's section of a YAML state file.
pub const ENGINE_MARKER: &str =
    "# ── aot's record of the work, below: engine-owned, rewritten on every save (edit with care) ──";

/// Why a state file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// There is no file at the path.
    #[error("no state file at {}", .0.display())]
    NotFound(PathBuf),
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file was read but is not a valid state file.
    #[error("{} is not a valid state file ({} problem{})", .0.file, .0.errors.len(), if .0.errors.len() == 1 { "" } else { "s" })]
    Invalid(Diagnostics),
}

/// Returns a hash of file contents, used to recognise our own writes and to
/// detect edits made since the last read.
pub fn content_hash(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// Reads, parses and validates the state file at `path`.
pub fn read(path: &Path) -> Result<Document, ReadError> {
    let label = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(ReadError::NotFound(path.to_path_buf())),
        Err(source) => {
            return Err(ReadError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if meta.is_dir() {
        return Err(ReadError::Invalid(Diagnostics::single(
            label,
            "is a directory, not a state file",
        )));
    }
    if meta.len() > MAX_STATE_BYTES {
        return Err(ReadError::Invalid(Diagnostics::new(
            label,
            None,
            vec![
                Diagnostic::new(format!(
                    "is {:.1} MiB; state files over {} MiB are refused",
                    meta.len() as f64 / 1048576.0,
                    MAX_STATE_BYTES / 1048576
                ))
                .help("is this the right file? a state file holds a plan, not data"),
            ],
        )));
    }
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    from_bytes(path, &bytes, content_hash(&bytes)).map_err(ReadError::Invalid)
}

/// Parses and validates state-file bytes already read from `path` (whose
/// content hash is `hash`), so a caller that has the bytes need not read again.
pub fn from_bytes(path: &Path, bytes: &[u8], hash: u64) -> Result<Document, Diagnostics> {
    let label = path.display().to_string();
    let text = decode(&label, bytes)?;
    let format = Format::of(path);
    let state = parse(&label, text, format)?;
    let user_text = match format {
        Format::Yaml => user_text_of(text, &state),
        Format::Json => None,
    };
    Ok(Document {
        state,
        header: header_of(text),
        user_text,
        hash,
    })
}

/// Finds the user's part of YAML state-file text: what lies above the engine
/// marker (or, without it, above a top-level `status:`), or the whole text
/// when there is no engine section. `None` when that part alone does not say
/// exactly what `state`'s user part says — a file whose engine section is not
/// last, or a version-1 file with engine fields among the user's — so a save
/// renders the user part afresh rather than lose anything.
pub fn user_text_of(text: &str, state: &StateFile) -> Option<UserText> {
    let marker = format!("\n{ENGINE_MARKER}\n");
    let candidate = match text.find(&marker) {
        Some(i) => &text[..i],
        None => {
            let at = text
                .match_indices("status:")
                .map(|(i, _)| i)
                .find(|&i| (i == 0 || text.as_bytes()[i - 1] == b'\n') && top_level_key_ends(&text[i + 7..]));
            at.map_or(text, |i| &text[..i])
        }
    };
    let mut says: crate::state::disk::UserPart = serde_saphyr::from_str(candidate).ok()?;
    let mut candidate = candidate.to_string();
    if says.version == 1 {
        candidate = bump_version(&candidate)?;
        says.version = crate::state::FORMAT_VERSION;
    }
    says.says_same_as(state).then_some(UserText { text: candidate, says })
}

/// Whether what follows `status:` ends the key (a value or a line break).
fn top_level_key_ends(rest: &str) -> bool {
    rest.is_empty() || rest.starts_with([' ', '\n', '\r', '\t'])
}

/// A version-1 text with its top-level `version: 1` line made `version: 2`.
fn bump_version(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut bumped = false;
    for line in text.split_inclusive('\n') {
        let value = line.strip_prefix("version:").map(str::trim_start);
        match value {
            Some(rest)
                if !bumped
                    && rest.starts_with('1')
                    && !rest[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.') =>
            {
                out.push_str(&format!("version: {}{}", crate::state::FORMAT_VERSION, &rest[1..]));
                bumped = true;
            }
            _ => out.push_str(line),
        }
    }
    bumped.then_some(out)
}

/// The text of a state or plan file: within the size limit, UTF-8 (a BOM
/// dropped), no NUL.
fn decode<'a>(label: &str, bytes: &'a [u8]) -> Result<&'a str, Diagnostics> {
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(Diagnostics::single(
            label,
            format!("is over {} MiB", MAX_STATE_BYTES / 1048576),
        ));
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match std::str::from_utf8(bytes) {
        Ok(text) if text.contains('\0') => {
            let offset = text.find('\0').unwrap_or(0);
            Err(binary(label, bytes, offset))
        }
        Ok(text) => Ok(text),
        Err(e) => Err(binary(label, bytes, e.valid_up_to())),
    }
}

fn binary(label: &str, bytes: &[u8], offset: usize) -> Diagnostics {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() as u64 + 1;
    let byte = bytes.get(offset).copied().unwrap_or(0);
    Diagnostics::new(
        label,
        None,
        vec![
            Diagnostic::new(format!("is not text: byte 0x{byte:02x} at offset {offset}"))
                .at(Some(Loc { line, column, len: 1 }))
                .help("a state file is UTF-8 YAML or JSON"),
        ],
    )
}

/// Parses and validates state-file text; `label` names the file in messages.
pub fn parse(label: &str, text: &str, format: Format) -> Result<StateFile, Diagnostics> {
    let fail = |errors: Vec<Diagnostic>| Diagnostics::new(label, Some(text), errors);
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Err(fail(vec![Diagnostic::new("is empty").help(
            "a state file needs at least `version: 2`, an `objective` and a `graph`; `aot align` writes one",
        )]));
    }
    // Fast path: a valid file is parsed once. Only an invalid one is parsed into
    // the located tree, to place every problem at its line and column.
    let typed: Option<StateFile> = match format {
        Format::Yaml => serde_saphyr::from_str(text).ok(),
        Format::Json => serde_json::from_str(text).ok(),
    };
    if let Some(state) = typed
        && validate::check_semantics(&state, None).is_empty()
    {
        return Ok(state);
    }
    if format == Format::Json
        && let Err(e) = serde_json::from_str::<serde_json::Value>(text)
    {
        let loc = Loc {
            line: e.line() as u64,
            column: e.column().max(1) as u64,
            len: 1,
        };
        let message = strip_json_position(&e.to_string());
        return Err(fail(vec![
            Diagnostic::new(format!("invalid JSON: {message}")).at(Some(loc)),
        ]));
    }
    // A duplicate key is one problem among others: it is reported, and the
    // file is read on (the last value wins) to find the rest.
    let mut errors = Vec::new();
    let root = match spans::parse(text) {
        Ok(root) => root,
        Err(e) if e.to_string().contains("duplicate mapping key") => {
            let (root, repeated) = spans::parse_with_duplicates(text).map_err(|e| fail(vec![saphyr_diagnostic(&e)]))?;
            if repeated.is_empty() {
                errors.push(saphyr_diagnostic(&e));
            }
            errors.extend(repeated.into_iter().map(|(path, loc)| {
                Diagnostic::new("duplicate key")
                    .at(Some(loc))
                    .field(path)
                    .help("each key may appear once in a mapping; merge the two entries (the last one is read to check the rest)")
            }));
            root
        }
        Err(e) => return Err(fail(vec![saphyr_diagnostic(&e)])),
    };
    if !matches!(root.kind, NodeKind::Map(_)) {
        return Err(fail(vec![
            Diagnostic::new(format!(
                "expected a mapping at the top level, found {}",
                root.type_name()
            ))
            .at(root.loc())
            .help("a state file starts with `version: 2`, then `objective:` and `graph:`"),
        ]));
    }
    let shape = validate::check_shape(&root, crate::state::schema::state_schema());
    if !shape.errors.is_empty() || !errors.is_empty() {
        // Read what can be read without the unknown keys, so graph problems are
        // reported in the same run rather than after the first fix.
        errors.extend(shape.errors);
        let lenient = validate::to_json_without(&root, &shape.unknown_keys);
        if let Ok(state) = serde_json::from_value::<StateFile>(lenient) {
            errors.extend(validate::check_semantics(&state, Some(&root)));
        }
        return Err(fail(errors));
    }
    let state: StateFile = match format {
        Format::Yaml => serde_saphyr::from_str(text).map_err(|e| fail(vec![saphyr_diagnostic(&e)]))?,
        Format::Json => serde_json::from_str(text).map_err(|e| {
            let loc = Loc {
                line: e.line() as u64,
                column: e.column().max(1) as u64,
                len: 1,
            };
            fail(vec![Diagnostic::new(strip_json_position(&e.to_string())).at(Some(loc))])
        })?,
    };
    let problems = validate::check_semantics(&state, Some(&root));
    if problems.is_empty() {
        Ok(state)
    } else {
        Err(fail(problems))
    }
}

/// A plan file (`aot align --plan`): an `atoms:` map, the shape of `graph.atoms`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The atoms, in file order.
    pub atoms: indexmap::IndexMap<crate::state::AtomId, crate::state::Atom>,
}

/// Reads a plan file, reporting errors at their line and column.
pub fn read_plan(path: &Path) -> Result<Plan, ReadError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(ReadError::NotFound(path.to_path_buf())),
        Err(source) => {
            return Err(ReadError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    plan_from_bytes(path, &bytes).map_err(ReadError::Invalid)
}

/// Parses plan-file bytes already read from `path` (held to the state file's
/// size limit and text rules).
pub fn plan_from_bytes(path: &Path, bytes: &[u8]) -> Result<Plan, Diagnostics> {
    let label = path.display().to_string();
    let text = decode(&label, bytes)?;
    let parsed = match Format::of(path) {
        Format::Yaml => serde_saphyr::from_str::<Plan>(text).map_err(|e| saphyr_diagnostic(&e)),
        Format::Json => serde_json::from_str::<Plan>(text).map_err(|e| {
            Diagnostic::new(strip_json_position(&e.to_string())).at(Some(Loc {
                line: e.line() as u64,
                column: e.column().max(1) as u64,
                len: 1,
            }))
        }),
    };
    parsed.map_err(|d| Diagnostics::new(label, Some(text), vec![d]))
}

/// Validates a state that did not come from text (e.g. built by a command).
pub fn check(state: &StateFile, label: &str) -> Result<(), Diagnostics> {
    let problems = validate::check_semantics(state, None);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Diagnostics::new(label, None, problems))
    }
}

fn strip_json_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

fn saphyr_diagnostic(error: &serde_saphyr::Error) -> Diagnostic {
    let loc = error.location().map(|l| Loc {
        line: l.line(),
        column: l.column(),
        len: l.span().len(),
    });
    let text = error.without_snippet().to_string();
    // The plain message starts with "line N column M: "; the location is shown separately.
    let message = match text.split_once(": ") {
        Some((prefix, rest)) if prefix.starts_with("line ") && prefix.contains(" column ") => rest.to_string(),
        _ => text.clone(),
    };
    let message = message
        .split_once(" at line ")
        .map_or(message.clone(), |(m, _)| m.to_string());
    let message = message.replace(", set DuplicateKeyPolicy in Options if acceptable", "");
    let message = match message.strip_prefix("budget breached: ") {
        Some(breach) => over_limit(breach),
        None => message,
    };
    let d = Diagnostic::new(message).at(loc.filter(|l| l.line > 0));
    if text.contains("duplicate mapping key") {
        d.help("each key may appear once in a mapping; merge the two entries")
    } else if text.contains("mapping values are not allowed") {
        d.help("a `: ` inside an unquoted value starts a mapping; quote the value ('...') or write it as a block (`run: |` and the command indented on the next line)")
    } else {
        d
    }
}

/// Says which reading limit a document broke, from the parser's
/// `Kind { count: N }` (limits that stop alias bombs and runaway files).
fn over_limit(breach: &str) -> String {
    let kind = breach.split_whitespace().next().unwrap_or_default();
    let count: String = breach.chars().filter(char::is_ascii_digit).collect();
    let what = match kind {
        "Nodes" => "values",
        "Aliases" => "alias uses (`*name`)",
        "Anchors" => "anchors (`&name`)",
        "Documents" => "YAML documents",
        "Events" => "parser events",
        _ => "parts",
    };
    if kind == "Depth" {
        return format!(
            "the document nests too deeply ({count} levels when read; a state file never needs that many) — unclosed `[` or `{{` are the usual cause"
        );
    }
    format!(
        "the document has too many {what} ({count} when read); aliases that repeat large parts are the usual cause — write the parts out, or split the work"
    )
}

/// Returns the leading comment block of a file (kept when the engine saves).
pub fn header_of(text: &str) -> String {
    let mut header = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            header.push_str(line);
            header.push('\n');
        } else {
            break;
        }
    }
    header
}

/// Returns the text of a state in `format`, after `header`.
pub fn to_text(state: &StateFile, format: Format, header: &str) -> Result<String, String> {
    render(state, format, header, None).map(|(text, _)| text)
}

/// Returns the text of a state in `format` and, for YAML, the user's part of
/// it. The user's part is `kept` byte for byte when it says what `state`'s
/// user part says; otherwise `kept` with only the entries that differ
/// rewritten ([`crate::state::patch`]), or, when that cannot be done, the
/// part rendered afresh after `header` (the leading comments). The engine's section follows, after [`ENGINE_MARKER`]: a save
/// rewrites that section and nothing else.
pub fn render(
    state: &StateFile,
    format: Format,
    header: &str,
    kept: Option<&UserText>,
) -> Result<(String, Option<UserText>), String> {
    match format {
        Format::Yaml => {
            let user_text = match kept {
                Some(kept) if kept.says.says_same_as(state) => kept.clone(),
                _ => {
                    let (user, _) = crate::state::disk::split(state.clone());
                    // What changed is edited in place when it can be; else
                    // the part is written afresh.
                    let patched = kept.and_then(|k| crate::state::patch::patch(&k.text, &k.says, &user));
                    let text = match patched {
                        Some(text) => text,
                        None => format!("{header}{}", serde_saphyr::to_string(&user).map_err(|e| e.to_string())?),
                    };
                    UserText { text, says: user }
                }
            };
            let engine = crate::state::disk::engine_part(state);
            let engine_text = serde_saphyr::to_string(&engine).map_err(|e| e.to_string())?;
            let newline = if user_text.text.ends_with('\n') { "" } else { "\n" };
            let text = format!("{}{newline}\n{ENGINE_MARKER}\n{engine_text}", user_text.text);
            Ok((text, Some(user_text)))
        }
        Format::Json => {
            let mut body = serde_json::to_string_pretty(state).map_err(|e| e.to_string())?;
            body.push('\n');
            Ok((body, None))
        }
    }
}

/// Whether `user`'s text is what rendering what it says afresh after
/// `header` gives: nothing in it (a comment, flow style, quoting, blank
/// lines) would be lost by writing it afresh.
pub fn is_rendered(user: &UserText, header: &str) -> bool {
    serde_saphyr::to_string(&user.says).is_ok_and(|body| user.text == format!("{header}{body}"))
}

/// Returns the schema comment that editors (yaml-language-server) read.
pub fn schema_header(schema_path: &str) -> String {
    format!("# yaml-language-server: $schema={schema_path}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_keeps_only_leading_comments() {
        assert_eq!(header_of("# a\n# b\nversion: 1\n# c\n"), "# a\n# b\n");
        assert_eq!(header_of("version: 1\n"), "");
    }

    #[test]
    fn root_must_be_a_mapping() {
        let err = parse("x.yaml", "- a\n- b\n", Format::Yaml).unwrap_err();
        assert!(err.errors[0].message.contains("expected a mapping"), "{err:?}");
    }

    #[test]
    fn unlocated_node_is_not_reported_as_line_zero() {
        let node: spans::Node = spans::parse("a: 1").unwrap();
        assert!(node.get("a").unwrap().loc().is_some());
    }
}
