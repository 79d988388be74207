//! The prompt an agent CLI reads on stdin (`prompts/agent.md`).

use crate::engine::roles::Assignment;

/// The prompt template for agent atoms.
pub const AGENT_PROMPT: &str = include_str!("../../prompts/agent.md");

/// Renders the prompt for an agent atom's attempt (`task`: its rendered `agent` text).
pub fn agent_prompt(assignment: &Assignment, task: &str) -> String {
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "(none)".to_string()
        } else {
            items.join("\n")
        }
    };
    let brief = &assignment.brief;
    let bindings = list(
        brief
            .deps
            .iter()
            .map(|(d, summary)| format!("- {d}: {summary}"))
            .collect(),
    );
    let corrections = list(
        brief
            .corrections
            .iter()
            .map(|r| {
                format!(
                    "- attempt {} failed {} ({:?}): {}",
                    r.attempt, r.criterion, r.class, r.message
                )
            })
            .collect(),
    );
    let checks = list(assignment.spec.check.iter().map(|c| format!("- `{c}`")).collect());
    let must_not = list(brief.must_not.iter().map(|m| format!("- {m}")).collect());
    let should_prefer = list(brief.should_prefer.iter().map(|m| format!("- {m}")).collect());
    AGENT_PROMPT
        .replace("{{goal}}", &brief.goal)
        .replace("{{atom}}", &assignment.atom)
        .replace("{{task}}", task)
        .replace("{{bindings}}", &bindings)
        .replace("{{must_not}}", &must_not)
        .replace("{{should_prefer}}", &should_prefer)
        .replace("{{corrections}}", &corrections)
        .replace("{{checks}}", &checks)
}
