//! Contraction: a solved atom is replaced by its binding. Dependents see the
//! binding through templates in their text — `{{bindings.ID.summary}}` and
//! `{{bindings.ID.output}}` — and through environment variables
//! `AOT_BINDING_<ID>` (the summary). Pure functions.
//!
//! A binding is text an earlier command (or a model) printed, so it never
//! becomes shell code: in a command, a template turns into a reference to a
//! variable that holds the text, written for its place in the command
//! (`ShellText`). Only an agent's task text gets the text itself (`render`).

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

/// Shell commands with their templates replaced by variable references, and
/// the variables those references read. One `ShellText` serves all commands of
/// an attempt, so a name means the same binding in each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellText {
    /// The variables: name and binding text.
    pub env: Vec<(String, String)>,
    /// For each variable: the atom and field it carries.
    sources: Vec<(String, String)>,
}

impl ShellText {
    /// Replaces each binding reference in a shell command with a reference
    /// to a variable holding the binding's text (`AOT_BINDING_<ID>` for a
    /// summary, `AOT_OUTPUT_<ID>` for an output tail), quoted for where it
    /// stands, so that the text reaches the command as one word whatever it
    /// holds: `$(…)`, backticks, quotes and newlines stay text. Returns the
    /// ids whose binding is missing (as `render` does).
    pub fn render(&mut self, text: &str, bindings: &IndexMap<AtomId, Binding>) -> Result<String, Vec<String>> {
        render(text, bindings)?;
        let refs = references(text);
        let spans: Vec<_> = refs.iter().map(|r| r.span.clone()).collect();
        let places = super::shell::quoting_at(text, &spans);
        let mut command = String::with_capacity(text.len());
        let mut last = 0;
        for (r, place) in refs.iter().zip(places) {
            let name = self.variable(&r.atom, &r.field, &bindings[r.atom.as_str()]);
            command.push_str(&text[last..r.span.start]);
            command.push_str(&place.reference(&name));
            last = r.span.end;
        }
        command.push_str(&text[last..]);
        Ok(command)
    }

    /// The variable carrying `atom`'s `field`, added on first use.
    fn variable(&mut self, atom: &str, field: &str, binding: &Binding) -> String {
        if let Some(i) = self.sources.iter().position(|(a, f)| a == atom && f == field) {
            return self.env[i].0.clone();
        }
        let (base, value) = if field == "summary" {
            (env_name(atom), &binding.summary)
        } else {
            (
                env_name(atom).replacen("AOT_BINDING_", "AOT_OUTPUT_", 1),
                &binding.output_tail,
            )
        };
        // Ids that differ only in case or in `-`/`.`/`_` share a name.
        let mut name = base.clone();
        let mut n = 1;
        while self.env.iter().any(|(taken, _)| *taken == name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        // A process's environment cannot hold NUL.
        self.env.push((name.clone(), value.replace('\0', "")));
        self.sources.push((atom.to_string(), field.to_string()));
        name
    }
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
                changes: None,
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
    fn shell_templates_become_quoted_variable_references() {
        let mut b = bindings();
        b.insert("a-b".into(), b["fetch"].clone());
        b.insert("a_B".into(), b["fetch"].clone());
        let text = "echo {{bindings.fetch.summary}} \"({{bindings.fetch.output}})\" '{{bindings.a-b.summary}}' # {{bindings.a_B.summary}}";
        let mut shell = ShellText::default();
        assert_eq!(
            shell.render(text, &b).unwrap(),
            "echo \"${AOT_BINDING_FETCH}\" \"(${AOT_OUTPUT_FETCH})\" ''\"${AOT_BINDING_A_B}\"'' # ${AOT_BINDING_A_B_2}"
        );
        let names: Vec<&str> = shell.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "AOT_BINDING_FETCH",
                "AOT_OUTPUT_FETCH",
                "AOT_BINDING_A_B",
                "AOT_BINDING_A_B_2"
            ]
        );
        assert_eq!(shell.env[1].1, "Downloaded 42 crates");
        assert_eq!(
            shell.render("{{bindings.fetch.summary}}", &b).unwrap(),
            "\"${AOT_BINDING_FETCH}\""
        );
        assert_eq!(shell.env.len(), 4, "a second command reuses the names");
        assert_eq!(
            shell.render("{{bindings.gone.summary}}", &b).unwrap_err(),
            ["gone.summary"]
        );
    }

    #[test]
    fn env_names_are_shell_safe() {
        assert_eq!(env_name("lexer-fix.v2"), "AOT_BINDING_LEXER_FIX_V2");
    }
}
