//! The prompt an agent CLI reads on stdin (`prompts/agent.md`).

use crate::engine::roles::Assignment;

/// The prompt template for agent atoms.
pub const AGENT_PROMPT: &str = include_str!("../../prompts/agent.md");

/// One earlier attempt, as the agent reads it: which criterion failed, by its
/// text; how it ended; what the agent said it did; the evidence.
fn correction(atom: &crate::state::Atom, r: &crate::journal::Reflection) -> String {
    let ended = match (r.ended.exit_code, r.ended.signal) {
        (Some(code), _) => format!(", exit code {code}"),
        (None, Some(signal)) => format!(", killed by signal {signal}"),
        (None, None) => String::new(),
    };
    let class = match r.class {
        crate::model::FailureClass::Logical => "logical: the approach or the result was wrong",
        crate::model::FailureClass::Environmental => "environmental: the tools or the machine got in the way",
    };
    let what = match &r.criterion {
        crate::model::Criterion::Run => format!(
            "run `{}`",
            crate::model::text::first_line(&atom.criterion_text(&r.criterion))
        ),
        other => other.to_string(),
    };
    let mut out = format!("- attempt {} failed {what}{ended} ({class})", r.attempt);
    if let Some(summary) = &r.ended.summary {
        out.push_str(&format!("\n  you said then: {summary}"));
    }
    if let Some(discarded) = &r.ended.discarded {
        out.push_str(&format!("\n  it had changed (discarded): {discarded}"));
    }
    out.push_str("\n  evidence:");
    for line in r.message.lines() {
        out.push_str("\n    ");
        out.push_str(line);
    }
    out
}

/// The prompt the built-in worker (an LLM with tools) is given (`prompts/worker.md`).
pub const WORKER_PROMPT: &str = include_str!("../../prompts/worker.md");

/// Renders the prompt for an agent atom's attempt (`task`: its rendered `agent` text).
pub fn agent_prompt(assignment: &Assignment, task: &str) -> String {
    render(AGENT_PROMPT, assignment, task)
}

/// Renders `template` for an agent atom's attempt: the goal, the atom and
/// its task, the bindings, MUST NOT and SHOULD PREFER, the corrections, and
/// what the work is judged by.
pub fn render(template: &str, assignment: &Assignment, task: &str) -> String {
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
    let mut corrections = list(
        brief
            .corrections
            .iter()
            .map(|r| correction(&assignment.spec, r))
            .collect(),
    );
    if !brief.corrections.is_empty() {
        corrections.push_str(if brief.isolated {
            "\nThe working tree is clean again: what the failed attempts changed was discarded \
             (each line above says what). Start from the tree as it is."
        } else {
            "\nThe working tree still holds the last attempt's edits: aot does not undo files between attempts. \
             Start from what is there, or undo it first."
        });
    }
    let checks = list(assignment.spec.check.iter().map(|c| format!("- `{c}`")).collect());
    let criteria = list(assignment.spec.criteria.iter().map(|c| format!("- {c}")).collect());
    let must_not = list(brief.must_not.iter().map(|m| format!("- {m}")).collect());
    let should_prefer = list(brief.should_prefer.iter().map(|m| format!("- {m}")).collect());
    template
        .replace("{{cwd}}", &assignment.cwd.display().to_string())
        .replace("{{goal}}", &brief.goal)
        .replace("{{atom}}", &assignment.atom)
        .replace("{{task}}", task)
        .replace(
            "{{probe}}",
            if assignment.spec.read_only {
                "\nThis atom is a probe: investigate and report what you find in your summary; change nothing \
                 (what a probe changes is discarded)."
            } else {
                ""
            },
        )
        .replace("{{bindings}}", &bindings)
        .replace("{{must_not}}", &must_not)
        .replace("{{should_prefer}}", &should_prefer)
        .replace("{{corrections}}", &corrections)
        .replace("{{checks}}", &checks)
        .replace("{{criteria}}", &criteria)
}
