//! `aot align "TEXT"` with a planner configured: the model drafts the
//! objective and the atoms from the user's words. This is the pure part —
//! the prompt, the answer's shape, and the merge in which what the user gave
//! wins over the draft. The draft then goes through the same validation as a
//! hand-written file, and through [`super::validate`].

use indexmap::IndexMap;

use crate::llm::Message;
use crate::state::{Atom, AtomId, BaseCase, Objective};

/// The planner's prompt template (`prompts/planner.md`): agreements and atoms.
pub const PLANNER_PROMPT: &str = include_str!("../../prompts/planner.md");

/// The perceiver's prompt template (`prompts/perceiver.md`): agreements only,
/// when the user gave the atoms.
pub const PERCEIVER_PROMPT: &str = include_str!("../../prompts/perceiver.md");

/// Who drafts: the perceiver (R1) when the user's atoms are given and only
/// agreements are missing, else the planner (R2).
pub fn drafter(given_atoms: &IndexMap<AtomId, Atom>) -> crate::llm::Role {
    if given_atoms.is_empty() {
        crate::llm::Role::Planner
    } else {
        crate::llm::Role::Perceiver
    }
}

/// What the planner answers to `aot align`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct Draft {
    /// The drafted agreements.
    #[serde(default)]
    pub objective: DraftObjective,
    /// The drafted atoms, as a plan file's `atoms:`.
    #[serde(default)]
    pub atoms: IndexMap<AtomId, Atom>,
}

/// The drafted agreements (the state file's `objective`, without constraints).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct DraftObjective {
    /// What the work is for.
    #[serde(default)]
    pub goal: Option<String>,
    /// Why it matters.
    #[serde(default)]
    pub background_intent: Option<String>,
    /// What should be produced.
    #[serde(default)]
    pub deliverables: Option<String>,
    /// When it is done, in words.
    #[serde(default)]
    pub definition_of_done: Option<String>,
    /// The command whose exit 0 means done.
    #[serde(default)]
    pub base_case: Option<DraftBaseCase>,
}

/// A drafted base case.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct DraftBaseCase {
    /// The command.
    pub command: String,
}

/// Fills `{{name}}` placeholders in one pass: a value that itself holds
/// `{{…}}` is never filled again.
pub fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        match after.find("}}") {
            Some(close) => {
                let name = &after[..close];
                match vars.iter().find(|(k, _)| *k == name) {
                    Some((_, value)) => out.push_str(value),
                    None => out.push_str(&rest[open..open + 2 + close + 2]),
                }
                rest = &after[close + 2..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The messages that ask for a draft: the request, what the user already
/// decided (kept), and the folder's top-level entries.
pub fn prompt(
    request: &str,
    given: &Objective,
    given_atoms: &IndexMap<AtomId, Atom>,
    listing: &[String],
) -> Vec<Message> {
    let mut decided = Vec::new();
    let field = |name: &str, value: &Option<String>, decided: &mut Vec<String>| {
        if let Some(v) = value.as_deref().filter(|v| !v.trim().is_empty()) {
            decided.push(format!("- {name}: {v}"));
        }
    };
    field("goal", &given.goal, &mut decided);
    field("background_intent", &given.background_intent, &mut decided);
    field("deliverables", &given.deliverables, &mut decided);
    field("definition_of_done", &given.definition_of_done, &mut decided);
    if let Some(base) = &given.base_case {
        decided.push(format!("- base_case.command: {}", base.command));
    }
    if !given_atoms.is_empty() {
        decided.push(format!(
            "- atoms (answer `\"atoms\": {{}}`; these are kept): {}",
            given_atoms.keys().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    let decided = if decided.is_empty() {
        "(nothing)".to_string()
    } else {
        decided.join("\n")
    };
    let listing = if listing.is_empty() {
        "(empty)".to_string()
    } else {
        listing.join("\n")
    };
    let template = match drafter(given_atoms) {
        crate::llm::Role::Perceiver => PERCEIVER_PROMPT,
        _ => PLANNER_PROMPT,
    };
    let system = fill(
        template,
        &[("request", request), ("given", &decided), ("workspace", &listing)],
    );
    vec![Message::system(system), Message::user(request.to_string())]
}

/// The objective and atoms to write: every field the user gave wins over
/// the draft's; the user's atoms, when there are any, replace the draft's.
/// `raw_input` is the user's words, verbatim.
pub fn merge(
    given: &Objective,
    given_atoms: &IndexMap<AtomId, Atom>,
    raw_input: &str,
    draft: Draft,
) -> (Objective, IndexMap<AtomId, Atom>) {
    let pick = |mine: &Option<String>, theirs: Option<String>| {
        mine.clone()
            .filter(|v| !v.trim().is_empty())
            .or(theirs.filter(|v| !v.trim().is_empty()))
    };
    let d = draft.objective;
    let objective = Objective {
        goal: pick(&given.goal, d.goal),
        raw_input: Some(raw_input.to_string()),
        background_intent: pick(&given.background_intent, d.background_intent),
        deliverables: pick(&given.deliverables, d.deliverables),
        definition_of_done: pick(&given.definition_of_done, d.definition_of_done),
        base_case: given.base_case.clone().or_else(|| {
            d.base_case.filter(|b| !b.command.trim().is_empty()).map(|b| BaseCase {
                command: b.command,
                timeout: None,
            })
        }),
        ..given.clone()
    };
    let atoms = if given_atoms.is_empty() {
        draft.atoms
    } else {
        given_atoms.clone()
    };
    (objective, atoms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_each_placeholder_once() {
        assert_eq!(
            fill("a {{x}} b {{y}} {{unknown}} {{", &[("x", "{{y}}"), ("y", "2")]),
            "a {{y}} b 2 {{unknown}} {{"
        );
    }

    #[test]
    fn the_users_fields_and_atoms_win_over_the_draft() {
        let given = Objective {
            goal: Some("mine".into()),
            base_case: Some(BaseCase {
                command: "make test".into(),
                timeout: None,
            }),
            ..Objective::default()
        };
        let draft: Draft = serde_json::from_str(
            r#"{"objective": {"goal": "theirs", "deliverables": "d", "base_case": {"command": "pytest"}}, "atoms": {"a": {"run": "true"}}}"#,
        )
        .unwrap();
        let (objective, atoms) = merge(&given, &IndexMap::new(), " my words ", draft.clone());
        assert_eq!(objective.goal.as_deref(), Some("mine"));
        assert_eq!(objective.deliverables.as_deref(), Some("d"));
        assert_eq!(objective.base_case.unwrap().command, "make test");
        assert_eq!(objective.raw_input.as_deref(), Some(" my words "));
        assert!(atoms.contains_key("a"));
        let mine: IndexMap<AtomId, Atom> = [(AtomId::from("b"), Atom::command("true"))].into_iter().collect();
        let (_, atoms) = merge(&given, &mine, "w", draft);
        assert_eq!(atoms.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn the_prompt_carries_the_request_what_was_decided_and_the_folder() {
        let given = Objective {
            goal: Some("keep this".into()),
            ..Objective::default()
        };
        let messages = prompt("fix {{given}} the tests", &given, &IndexMap::new(), &["src/".into()]);
        let system = &messages[0].content;
        assert!(
            system.contains("fix {{given}} the tests"),
            "a request is not a template"
        );
        assert!(system.contains("- goal: keep this"));
        assert!(system.contains("src/"));
        assert_eq!(messages[1].content, "fix {{given}} the tests");
    }
}
