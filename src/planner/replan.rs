//! Replanning by a model, the pure part: the PlanDirective prompt built from
//! a GGS decision, the model's answer, and the graft that puts its atoms into
//! the graph. The model's names are local: ids are given here
//! (`r<replan>-<name>`), deps may name its own atoms or atoms already
//! solved, and exactly one of its atoms — the sink — is the new way to solve
//! the failed work:
//!
//! - when the failed atom is an alternative of an OR atom, the sink becomes
//!   that OR atom's next alternative (and the OR atom is reopened);
//! - otherwise an OR atom `<failed>-or` is made of the failed atom and the
//!   sink, the failed atom's dependents depend on it instead, and it switches
//!   to the sink (the failed atom stays, with its record);
//! - when every atom is solved and the base case fails, the sink is a new root.
//!
//! Each added atom carries `planned:` (the replan, the directive, what it
//! answers, the rationale), visible in the file.

use indexmap::IndexMap;

use super::draft::fill;
use crate::engine::roles::PlanRequest;
use crate::ggs::MacroState;
use crate::graph::WorkGraph;
use crate::journal::event::Event;
use crate::llm::Message;
use crate::model::time::Timestamp;
use crate::state::{Atom, AtomId, AtomStatus, Planned, StateFile};

/// The replanner's prompt template (`prompts/replanner.md`).
pub const REPLANNER_PROMPT: &str = include_str!("../../prompts/replanner.md");

/// What the model answers: atoms under local names, and why.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct Proposal {
    /// The atoms, as a plan file's `atoms:`, under the model's names.
    #[serde(default)]
    pub atoms: IndexMap<AtomId, Atom>,
    /// Why this way should work.
    #[serde(default)]
    pub rationale: String,
}

/// A proposal put into the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Grafted {
    /// The events that make it so, in order.
    pub events: Vec<Event>,
    /// The state after them.
    pub state: StateFile,
    /// The atoms added (ids as given), the sink last.
    pub added: Vec<AtomId>,
}

fn directive_meaning(directive: MacroState) -> &'static str {
    match directive {
        MacroState::Refine => "Refine: keep the approach; fix what the evidence shows.",
        MacroState::ChangePath => "Change path: keep the tool, take a different route to the same result.",
        MacroState::ChangeApproach => "Change approach: a different method or tool altogether.",
        MacroState::BreakSymmetry => {
            "Break symmetry: the same things keep failing the same way; do something not tried before (no command already tried)."
        }
        MacroState::Success | MacroState::Abandon => "Make the smallest change that reaches the goal.",
    }
}

/// The PlanDirective: the messages that ask for a new plan after `request`'s decision.
pub fn prompt(request: &PlanRequest<'_>, state: &StateFile, answers: Option<&AtomId>) -> Vec<Message> {
    let decision = request.decision;
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "(none)".to_string()
        } else {
            items.join("\n")
        }
    };
    let ggs = &state.run.ggs;
    let must_not = list(
        ggs.blocked_tools
            .iter()
            .map(|t| format!("- the tool `{t}` (blocked by GGS)"))
            .chain(
                ggs.blocked_targets
                    .iter()
                    .map(|t| format!("- the target `{t}` (blocked by GGS)")),
            )
            .chain(
                request
                    .recall
                    .map(|r| r.avoided())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(tool, target)| format!("- `{tool}` on `{target}` (memory: avoid)")),
            )
            .collect(),
    );
    let should_prefer = match decision.directive {
        MacroState::ChangePath if !decision.failed_tools.is_empty() => {
            format!("- the same tools, another route: {}", decision.failed_tools.join(", "))
        }
        _ => "(none)".to_string(),
    };
    let failed = list(
        decision
            .failed
            .iter()
            .map(|id| {
                let atom = state.graph.atoms.get(id);
                let what = atom
                    .and_then(|a| a.run.clone().or_else(|| a.agent.clone()))
                    .unwrap_or_else(|| "(an OR atom)".into());
                let checks = atom.map(|a| a.check.join("; ")).unwrap_or_default();
                let evidence = state
                    .last_failure(id)
                    .map(|(class, criterion, message)| {
                        format!(
                            "failed {criterion} ({}): {}",
                            format!("{class:?}").to_lowercase(),
                            crate::model::text::last_lines(message, 12)
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "- `{id}`: {what}{}\n  {evidence}",
                    if checks.is_empty() {
                        String::new()
                    } else {
                        format!("\n  checks: {checks}")
                    }
                )
            })
            .chain(request.base_case.map(|e| {
                format!(
                    "- the base case `{}`: {}\n  {}",
                    e.command,
                    e.exit_code.map_or("killed".into(), |c| format!("exit {c}")),
                    crate::model::text::last_lines(&e.output_tail, 12)
                )
            }))
            .collect(),
    );
    let atoms = list(
        state
            .graph
            .atoms
            .iter()
            .map(|(id, a)| {
                let what = a
                    .run
                    .clone()
                    .or_else(|| a.agent.clone())
                    .or_else(|| a.or.as_ref().map(|alts| format!("or: [{}]", alts.join(", "))))
                    .unwrap_or_default();
                let binding = state
                    .bindings
                    .get(id)
                    .filter(|_| a.status == AtomStatus::Solved)
                    .map(|b| format!(" — solved: {}", b.summary))
                    .unwrap_or_default();
                format!("- `{id}` [{}] {what}{binding}", a.status.as_str())
            })
            .collect(),
    );
    let loss = &decision.loss;
    let number = |x: f64| format!("{x:.2}");
    let base_case = state
        .objective
        .base_case
        .as_ref()
        .map_or("(none)".to_string(), |b| b.command.clone());
    let answers = answers.map_or("the base case".to_string(), |a| format!("`{a}`"));
    let system = fill(
        REPLANNER_PROMPT,
        &[
            ("goal", state.objective.goal.as_deref().unwrap_or("(none)")),
            ("base_case", &base_case),
            ("directive", decision.directive.as_str()),
            ("directive_meaning", directive_meaning(decision.directive)),
            ("d", &number(loss.d)),
            ("p", &number(loss.p)),
            ("omega", &number(loss.omega)),
            ("l", &number(loss.l)),
            ("grad", &number(decision.grad_l)),
            ("rationale", &decision.rationale),
            ("must_not", &must_not),
            ("should_prefer", &should_prefer),
            ("answers", &answers),
            ("failed", &failed),
            ("atoms", &atoms),
        ],
    );
    vec![
        Message::system(system),
        Message::user(format!("Make the new plan for {answers}.")),
    ]
}

/// Whether a model's name can be part of an id.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 40 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Puts `proposal` into `state` (the state after the alternatives ran out)
/// as the new way to solve `answers` (none: the base case). Returns every
/// reason it cannot, when it cannot.
pub fn graft(
    state: &StateFile,
    answers: Option<&AtomId>,
    proposal: &Proposal,
    replan: u32,
    directive: MacroState,
    at: Timestamp,
) -> Result<Grafted, Vec<String>> {
    let mut reasons = Vec::new();
    if proposal.atoms.is_empty() {
        return Err(vec!["the plan has no atoms".into()]);
    }
    // Ids: the runtime's, from the model's local names.
    let mut ids: IndexMap<&str, AtomId> = IndexMap::new();
    for name in proposal.atoms.keys() {
        if !valid_name(name) {
            reasons.push(format!(
                "`{name}` is not a usable name (letters, digits, `-`, `_`; at most 40)"
            ));
            continue;
        }
        let mut id = format!("r{replan}-{name}");
        let mut n = 2;
        let taken = |id: &str, ids: &IndexMap<&str, AtomId>| {
            state.graph.atoms.contains_key(id) || ids.values().any(|given| given == id)
        };
        while taken(&id, &ids) {
            id = format!("r{replan}-{name}-{n}");
            n += 1;
        }
        ids.insert(name.as_str(), AtomId::from(id));
    }
    let mut referenced = std::collections::HashSet::new();
    let mut added: IndexMap<AtomId, Atom> = IndexMap::new();
    for (name, atom) in &proposal.atoms {
        let Some(id) = ids.get(name.as_str()) else {
            continue;
        };
        let mut atom = atom.clone();
        let mut deps = Vec::new();
        for dep in &atom.deps {
            if let Some(mapped) = ids.get(dep.as_str()) {
                referenced.insert(dep.as_str().to_string());
                deps.push(mapped.clone());
            } else {
                match state.graph.atoms.get(dep) {
                    Some(existing) if existing.status == AtomStatus::Solved => deps.push(dep.clone()),
                    Some(existing) => reasons.push(format!(
                        "`{name}` depends on `{dep}`, which is {} — deps may name atoms of the plan or solved atoms",
                        existing.status.as_str()
                    )),
                    None => reasons.push(format!(
                        "`{name}` depends on `{dep}`, which is neither in the plan nor solved"
                    )),
                }
            }
        }
        atom.deps = deps;
        if let Some(alternatives) = &atom.or {
            let mut mapped = Vec::new();
            for alt in alternatives {
                match ids.get(alt.as_str()) {
                    Some(m) => {
                        referenced.insert(alt.as_str().to_string());
                        mapped.push(m.clone());
                    }
                    None => reasons.push(format!("`{name}`'s alternative `{alt}` is not in the plan")),
                }
            }
            atom.or = Some(mapped);
        }
        atom.planned = Some(Planned {
            replan,
            directive,
            answers: answers.cloned(),
            rationale: proposal.rationale.trim().to_string(),
        });
        added.insert(id.clone(), atom);
    }
    let sinks: Vec<&str> = proposal
        .atoms
        .keys()
        .map(|k| k.as_str())
        .filter(|k| !referenced.contains(*k) && ids.contains_key(k))
        .collect();
    if sinks.len() != 1 {
        reasons.push(format!(
            "the plan needs exactly one sink (an atom no other atom of the plan depends on); it has {}: {}",
            sinks.len(),
            sinks.join(", ")
        ));
    }
    if !reasons.is_empty() {
        return Err(reasons);
    }
    let sink = ids[sinks[0]].clone();
    // The sink last, so `added` reads in the order things run.
    let sink_atom = added.shift_remove(&sink).into_iter();
    let mut order: Vec<(AtomId, Atom)> = added.into_iter().collect();
    order.extend(sink_atom.map(|a| (sink.clone(), a)));

    let mut edited = state.clone();
    for (id, atom) in &order {
        edited.graph.atoms.insert(id.clone(), atom.clone());
    }
    let owner = answers.and_then(|failed| {
        state
            .graph
            .atoms
            .iter()
            .find(|(_, a)| a.or.as_ref().is_some_and(|alts| alts.contains(failed)))
            .map(|(id, _)| id.clone())
    });
    let mut wrap = None;
    let group = match (answers, owner) {
        (Some(_), Some(group)) => {
            if let Some(or) = edited.graph.atoms.get_mut(&group).and_then(|a| a.or.as_mut()) {
                or.push(sink.clone());
            }
            Some(group)
        }
        (Some(failed), None) => {
            let mut group = AtomId::from(format!("{failed}-or"));
            let mut n = 2;
            while edited.graph.atoms.contains_key(&group) {
                group = AtomId::from(format!("{failed}-or{n}"));
                n += 1;
            }
            for atom in edited.graph.atoms.values_mut() {
                for dep in &mut atom.deps {
                    if dep == failed {
                        *dep = group.clone();
                    }
                }
            }
            let wrapper = Atom {
                or: Some(vec![failed.clone(), sink.clone()]),
                planned: order.last().and_then(|(_, a)| a.planned.clone()),
                ..Atom::default()
            };
            edited.graph.atoms.insert(group.clone(), wrapper);
            wrap = Some(failed.clone());
            Some(group)
        }
        (None, _) => None,
    };
    let problems = crate::state::validate::check_semantics(&edited, None);
    if !problems.is_empty() {
        return Err(problems.into_iter().map(|d| d.message).collect());
    }
    let mut added_ids: Vec<AtomId> = order.iter().map(|(id, _)| id.clone()).collect();
    if wrap.is_some()
        && let Some(group) = &group
    {
        added_ids.insert(0, group.clone());
    }
    let mut board = Board::new(state, at);
    board.apply(vec![
        Event::Replanned {
            replan,
            directive,
            answers: answers.cloned(),
            added: added_ids.clone(),
            group: group.clone(),
            rationale: proposal.rationale.trim().to_string(),
            gates: Vec::new(),
        },
        Event::user_edited(&edited),
    ]);
    if let Some(group) = &group {
        if let Some(failed) = &wrap {
            board.apply(vec![
                Event::OrChosen {
                    group: group.clone(),
                    chosen: failed.clone(),
                    remaining: vec![sink.clone()],
                    reason: format!("`{failed}` failed before the planner made `{group}`"),
                },
                Event::Backtracked {
                    group: group.clone(),
                    from: failed.clone(),
                    to: sink.clone(),
                    reset: Vec::new(),
                },
            ]);
        }
        let graph = WorkGraph::new(&board.state);
        let reopen = graph.reopen_for_choice(group, None);
        board.apply(reopen);
    }
    Ok(Grafted {
        events: board.events,
        state: board.state,
        added: added_ids,
    })
}

/// A scratch state the graft's events are folded into as they are made.
struct Board {
    state: StateFile,
    events: Vec<Event>,
    at: Timestamp,
}

impl Board {
    fn new(state: &StateFile, at: Timestamp) -> Self {
        Self {
            state: state.clone(),
            events: Vec::new(),
            at,
        }
    }

    fn apply(&mut self, events: Vec<Event>) {
        crate::journal::apply_planned(&mut self.state, &mut [], &events, self.at);
        self.events.extend(events);
    }
}

#[cfg(test)]
mod tests;
