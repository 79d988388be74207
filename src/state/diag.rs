//! Diagnostics about a hand-edited file: what is wrong, where (file:line:column),
//! and how to fix it, rendered with the offending source line underneath.

use std::fmt::Write as _;

use annotate_snippets::{AnnotationKind, Element, Level, Origin, Renderer, Snippet};
use serde::Serialize;

/// One problem in a file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnostic {
    /// What is wrong.
    pub message: String,
    /// The field it concerns, as a dotted path (`graph.atoms.fetch.deps[0]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// 1-based line, when the problem has a place in the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// 1-based column (in characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    /// Length of the offending text, in characters.
    #[serde(skip)]
    pub len: u64,
    /// How to fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
}

impl Diagnostic {
    /// Returns a diagnostic with only a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            field: None,
            line: None,
            column: None,
            len: 1,
            help: None,
        }
    }

    /// Sets the field path.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Sets the location.
    pub fn at(mut self, loc: Option<crate::state::spans::Loc>) -> Self {
        if let Some(loc) = loc {
            self.line = Some(loc.line);
            self.column = Some(loc.column);
            self.len = loc.len.max(1);
        }
        self
    }

    /// Sets the help line.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// Every problem found in one file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnostics {
    /// The file, as the user named it.
    pub file: String,
    /// The problems, in file order where they have one.
    pub errors: Vec<Diagnostic>,
    #[serde(skip)]
    source: Option<String>,
}

impl Diagnostics {
    /// Returns diagnostics for `file`, keeping `source` to quote lines from.
    pub fn new(file: impl Into<String>, source: Option<&str>, mut errors: Vec<Diagnostic>) -> Self {
        errors.sort_by_key(|d| (d.line.unwrap_or(u64::MAX), d.column.unwrap_or(0)));
        Self {
            file: file.into(),
            errors,
            source: source.map(str::to_string),
        }
    }

    /// Returns a single problem with no place in the text.
    pub fn single(file: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(file, None, vec![Diagnostic::new(message)])
    }

    /// Renders the first [`RENDERED_MAX`] problems, each quoting its source
    /// line (the renderer cuts a long one around the place), then how many there are;
    /// `color` uses ANSI styles. Linear in the size of the file.
    pub fn render(&self, color: bool) -> String {
        let renderer = if color { Renderer::styled() } else { Renderer::plain() };
        // The file's text, and what a model wrote into it, is quoted inert
        // (a control character shows as `�`, column for column): the
        // rendering is written as it is, with its own styles.
        let source = self.source.as_deref().map(crate::model::text::inert_in_place);
        let lines: Vec<&str> = source.as_deref().map(|s| s.lines().collect()).unwrap_or_default();
        let mut out = String::new();
        for d in self.errors.iter().take(RENDERED_MAX) {
            let d = &Diagnostic {
                message: crate::model::text::inert_in_place(&d.message).into_owned(),
                help: d
                    .help
                    .as_deref()
                    .map(|h| crate::model::text::inert_in_place(h).into_owned()),
                field: d
                    .field
                    .as_deref()
                    .map(|f| crate::model::text::inert_in_place(f).into_owned()),
                ..d.clone()
            };
            out.push_str(&self.render_one(d, &renderer, &lines));
            out.push('\n');
        }
        if self.errors.len() > RENDERED_MAX {
            let _ = writeln!(
                out,
                "… and {} more (`--json` lists them all)",
                self.errors.len() - RENDERED_MAX
            );
        }
        if self.errors.len() > 1 {
            let _ = writeln!(out, "{}: {} problems", self.file, self.errors.len());
        }
        out
    }

    fn render_one(&self, d: &Diagnostic, renderer: &Renderer, lines: &[&str]) -> String {
        let title = match &d.field {
            Some(field) if !d.message.contains(field.as_str()) => format!("{}: {}", field, d.message),
            _ => d.message.clone(),
        };
        let line_text = d
            .line
            .and_then(|line| lines.get(line.checked_sub(1)? as usize).copied());
        let mut elements: Vec<Element<'_>> = Vec::new();
        match (line_text, d.line, d.column) {
            (Some(text), Some(line), Some(column)) => {
                let start = char_to_byte(text, column.saturating_sub(1) as usize);
                let end = char_to_byte(&text[start..], d.len as usize) + start;
                let end = if end == start {
                    ceil_boundary(text, start + 1)
                } else {
                    end
                };
                if text.len() <= LONG_LINE {
                    elements.push(
                        Snippet::source(text)
                            .line_start(line as usize)
                            .path(self.file.as_str())
                            .annotation(AnnotationKind::Primary.span(start..end))
                            .into(),
                    );
                } else {
                    // Quote only the place (the renderer's cost grows with the
                    // line), in the renderer's layout.
                    let origin = Origin::path(self.file.as_str())
                        .line(line as usize)
                        .char_column(column as usize);
                    elements.push(origin.into());
                    let group = Level::ERROR.primary_title(title).elements(elements);
                    let pad = " ".repeat(line.to_string().len());
                    let mut out = renderer
                        .render(&[group])
                        .to_string()
                        .replacen("\n--> ", &format!("\n{pad}--> "), 1);
                    out.push_str(&quote_long_line(line, text, start..end, d.help.as_deref()));
                    return out;
                }
            }
            (_, line, column) => {
                let mut origin = Origin::path(self.file.as_str());
                if let Some(line) = line {
                    origin = origin.line(line as usize);
                }
                if let Some(column) = column {
                    origin = origin.char_column(column as usize);
                }
                elements.push(origin.into());
            }
        }
        if let Some(help) = &d.help {
            elements.push(Level::HELP.message(help.as_str()).into());
        }
        let group = Level::ERROR.primary_title(title).elements(elements);
        renderer.render(&[group]).to_string()
    }
}

/// How many problems `render` shows in full.
pub const RENDERED_MAX: usize = 50;

/// Lines longer than this are quoted only around the place.
const LONG_LINE: usize = 400;

/// How much of a long line is quoted on each side of the place.
const QUOTED_AROUND: usize = 80;

/// The part of a long `line` around `place`, with `…` where it was cut, and
/// where `place` falls in it.
fn excerpt(line: &str, place: std::ops::Range<usize>) -> (String, std::ops::Range<usize>) {
    let from = floor_boundary(line, place.start.saturating_sub(QUOTED_AROUND));
    let place_end = floor_boundary(line, place.end.min(place.start + 2 * QUOTED_AROUND)).max(place.start);
    let to = ceil_boundary(line, place_end + QUOTED_AROUND);
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    let shift = out.len();
    out.push_str(&line[from..to]);
    if to < line.len() {
        out.push('…');
    }
    let start = place.start - from + shift;
    let end = (place_end - from + shift).max(start + 1).min(out.len());
    (out, start..end)
}

/// A long line's excerpt with its caret line and the help, laid out as the
/// renderer lays out a snippet.
fn quote_long_line(line: u64, text: &str, place: std::ops::Range<usize>, help: Option<&str>) -> String {
    let (excerpt, span) = excerpt(text, place);
    let number = line.to_string();
    let pad = " ".repeat(number.len());
    let before = excerpt[..span.start].chars().count();
    let carets = excerpt[span].chars().count().max(1);
    let mut out = format!(
        "\n{pad} |\n{number} | {excerpt}\n{pad} | {}{}",
        " ".repeat(before),
        "^".repeat(carets)
    );
    if let Some(help) = help {
        let _ = write!(out, "\n{pad} |\n{pad} = help: {help}");
    }
    out
}

fn floor_boundary(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn char_to_byte(text: &str, chars: usize) -> usize {
    text.char_indices().nth(chars).map_or(text.len(), |(i, _)| i)
}

fn ceil_boundary(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Returns the candidate closest to `word`, if any is close enough to be a likely typo.
/// Costs at most a few comparisons of short words: a candidate whose length
/// is further from `word`'s than the typo budget is never compared.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    const LONGEST: usize = 128;
    if word.len() > LONGEST {
        return None;
    }
    let chars = word.chars().count();
    let budget = (chars / 3).clamp(1, 3);
    candidates
        .into_iter()
        .filter(|c| c.len() <= LONGEST && c.chars().count().abs_diff(chars) <= budget)
        .map(|c| (strsim::osa_distance(word, c), c))
        .filter(|(distance, c)| *distance <= budget && *distance < c.chars().count())
        .min_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| strsim::jaro_winkler(word, b.1).total_cmp(&strsim::jaro_winkler(word, a.1)))
        })
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_finds_typos_and_ignores_strangers() {
        let fields = ["run", "agent", "deps", "check"];
        assert_eq!(nearest("rnu", fields), Some("run"));
        assert_eq!(nearest("dep", fields), Some("deps"));
        assert_eq!(nearest("zzzz", fields), None);
    }

    #[test]
    fn nearest_never_compares_words_of_very_different_length() {
        let long = "z".repeat(200_000);
        let ids: Vec<String> = (0..2_000).map(|i| format!("x{i}")).collect();
        assert_eq!(nearest(&long, ids.iter().map(String::as_str)), None);
        assert_eq!(nearest("x12", [long.as_str(), "x13"]), Some("x13"));
    }
}
