//! Contraction: a solved atom is replaced by its binding. Dependents see the
//! binding through templates in their text — `{{bindings.ID.summary}}` and
//! `{{bindings.ID.output}}` — and through environment variables
//! `AOT_BINDING_<ID>` (the summary). Pure functions.

use indexmap::IndexMap;

use crate::state::{AtomId, Binding, StateFile};

/// A `{{bindings.ID.FIELD}}` reference found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The atom referred to.
    pub atom: String,
    /// `summary` or `output` (anything else is reported by validation).
    pub field: String,
    /// Byte range of the whole `{{…}}` in the text.
    pub span: std::ops::Range<usize>,
}

/// Returns every `{{ bindings.ID.FIELD }}` reference in `text`, in order.
/// Other `{{…}}` text is left alone (it may be the command's own syntax).
pub fn references(text: &str) -> Vec<Reference> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find("{{").map(|i| from + i) {
        let Some(close) = text[open + 2..].find("}}").map(|i| open + 2 + i) else {
            break;
        };
        let inner = text[open + 2..close].trim();
        if let Some(path) = inner.strip_prefix("bindings.")
            && let Some((atom, field)) = path.rsplit_once('.')
            && !atom.is_empty()
        {
            out.push(Reference {
                atom: atom.to_string(),
                field: field.to_string(),
                span: open..close + 2,
            });
        }
        from = close + 2;
    }
    out
}

/// Replaces each binding reference with the binding's summary or output tail.
/// Returns the ids whose binding is missing (the text is then left as is).
pub fn render(text: &str, bindings: &IndexMap<AtomId, Binding>) -> Result<String, Vec<String>> {
    let refs = references(text);
    let missing: Vec<String> = refs
        .iter()
        .filter(|r| !bindings.contains_key(r.atom.as_str()) || !matches!(r.field.as_str(), "summary" | "output"))
        .map(|r| format!("{}.{}", r.atom, r.field))
        .collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for r in refs {
        out.push_str(&text[last..r.span.start]);
        let binding = &bindings[r.atom.as_str()];
        out.push_str(if r.field == "summary" {
            &binding.summary
        } else {
            &binding.output_tail
        });
        last = r.span.end;
    }
    out.push_str(&text[last..]);
    Ok(out)
}

/// Returns the environment variable that carries an atom's binding summary:
/// `AOT_BINDING_` and the id upper-cased, with `-` and `.` as `_`.
pub fn env_name(atom: &str) -> String {
    let id: String = atom
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("AOT_BINDING_{id}")
}

/// Returns the binding variables for an atom's process: one per solved
/// dependency (an OR dependency carries its chosen alternative's summary).
pub fn binding_env(state: &StateFile, atom: &str) -> Vec<(String, String)> {
    let Some(a) = state.graph.atoms.get(atom) else {
        return Vec::new();
    };
    a.deps
        .iter()
        .filter_map(|dep| state.bindings.get(dep).map(|b| (env_name(dep), b.summary.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::time::Timestamp;

    fn bindings() -> IndexMap<AtomId, Binding> {
        let mut map = IndexMap::new();
        map.insert(
            "fetch".into(),
            Binding {
                summary: "42 crates".into(),
                output_tail: "Downloaded 42 crates".into(),
                artifacts: vec![],
                at: Timestamp::from_millis(0),
                attempt: 1,
            },
        );
        map
    }

    #[test]
    fn references_are_found_with_or_without_spaces() {
        let refs = references("a {{bindings.fetch.summary}} b {{ bindings.x-1.output }} {{other}} {{bindings.}}");
        let found: Vec<(&str, &str)> = refs.iter().map(|r| (r.atom.as_str(), r.field.as_str())).collect();
        assert_eq!(found, [("fetch", "summary"), ("x-1", "output")]);
    }

    #[test]
    fn render_substitutes_summary_and_output() {
        let text = "echo '{{bindings.fetch.summary}}' && echo \"{{ bindings.fetch.output }}\"";
        assert_eq!(
            render(text, &bindings()).unwrap(),
            "echo '42 crates' && echo \"Downloaded 42 crates\""
        );
        assert_eq!(
            render("no templates {{here}}", &bindings()).unwrap(),
            "no templates {{here}}"
        );
    }

    #[test]
    fn render_reports_missing_bindings_and_unknown_fields() {
        assert_eq!(
            render("{{bindings.build.summary}} {{bindings.fetch.size}}", &bindings()).unwrap_err(),
            ["build.summary", "fetch.size"]
        );
    }

    #[test]
    fn env_names_are_shell_safe() {
        assert_eq!(env_name("lexer-fix.v2"), "AOT_BINDING_LEXER_FIX_V2");
    }
}
