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

    /// Renders every problem, quoting its source line; `color` uses ANSI styles.
    pub fn render(&self, color: bool) -> String {
        let renderer = if color { Renderer::styled() } else { Renderer::plain() };
        let mut out = String::new();
        for d in &self.errors {
            out.push_str(&self.render_one(d, &renderer));
            out.push('\n');
        }
        if self.errors.len() > 1 {
            let _ = writeln!(out, "{}: {} problems", self.file, self.errors.len());
        }
        out
    }

    fn render_one(&self, d: &Diagnostic, renderer: &Renderer) -> String {
        let title = match &d.field {
            Some(field) if !d.message.contains(field.as_str()) => format!("{}: {}", field, d.message),
            _ => d.message.clone(),
        };
        let line_text = d
            .line
            .and_then(|line| self.source.as_deref()?.lines().nth(line.checked_sub(1)? as usize));
        let mut elements: Vec<Element<'_>> = Vec::new();
        match (line_text, d.line, d.column) {
            (Some(text), Some(line), Some(column)) => {
                let start = char_to_byte(text, column.saturating_sub(1) as usize);
                let end = char_to_byte(text, (column.saturating_sub(1) + d.len) as usize).max(start);
                let end = if end == start { (start + 1).min(text.len()) } else { end };
                elements.push(
                    Snippet::source(text)
                        .line_start(line as usize)
                        .path(self.file.as_str())
                        .annotation(AnnotationKind::Primary.span(start..end))
                        .into(),
                );
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

fn char_to_byte(text: &str, chars: usize) -> usize {
    text.char_indices().nth(chars).map_or(text.len(), |(i, _)| i)
}

/// Returns the candidate closest to `word`, if any is close enough to be a likely typo.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let budget = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
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
}
