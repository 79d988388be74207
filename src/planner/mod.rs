//! The default planner: acts on a GGS directive with the alternatives the
//! user wrote in advance (SPEC §5).
//!
//! `refine` re-dispatches the failed atoms with their corrections;
//! `change_path`, `change_approach`, `break_symmetry` and `success` recover
//! through OR choices, nearest OR atom first, in the order [`Steer`] gives
//! under the directive (the blocked sets refuse any plan that uses a blocked
//! tool or target; memory calibrates). When every atom is solved but the base
//! case fails, the most recent choice that has an allowed alternative is
//! switched. Nothing left: the plan is [`Plan::Exhausted`].
//!
//! Planning is pure: it works on a scratch copy of the state and the graph,
//! folding its own events as it goes, so each recovery sees the ones before it.

pub mod draft;
pub mod llm;
pub mod replan;
pub mod validate;

use crate::engine::roles::{BoxFuture, Plan, PlanRequest, Planner};
use crate::ggs::MacroState;
use crate::graph::{ChoiceOrder, Recovery, WorkGraph};
use crate::journal::event::Event;
use crate::model::text::headline;
use crate::model::time::Timestamp;
use crate::state::{AtomId, AtomStatus, StateFile, TrailEntry};
use crate::steer::{Recall, Steer};

/// The planner of pre-written OR alternatives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Alternatives;

impl Planner for Alternatives {
    fn plan<'a>(&'a self, request: PlanRequest<'a>) -> BoxFuture<'a, Plan> {
        Box::pin(std::future::ready(plan(&request)))
    }
}

/// The pre-written alternatives where a model could plan anew but none is
/// configured: a run that runs out of them stops as with [`Alternatives`],
/// saying which settings would have asked a model for a new plan.
#[derive(Debug, Clone, Default)]
pub struct WithoutModel {
    /// Why no model plans (the settings to add).
    pub why: String,
}

impl Planner for WithoutModel {
    fn plan<'a>(&'a self, request: PlanRequest<'a>) -> BoxFuture<'a, Plan> {
        let planned = match plan(&request) {
            Plan::Exhausted { events, message } => Plan::Exhausted {
                events,
                message: format!("{message}; no new plan was asked for: {}", self.why),
            },
            other => other,
        };
        Box::pin(std::future::ready(planned))
    }
}

/// The state and graph as the plan so far leaves them, and its events.
struct Board<'r> {
    state: StateFile,
    graph: WorkGraph,
    events: Vec<Event>,
    recall: Option<Recall<'r>>,
    at: Timestamp,
}

impl<'r> Board<'r> {
    fn new(request: &PlanRequest<'r>) -> Self {
        Self {
            state: request.state.clone(),
            graph: request.graph.clone(),
            events: Vec::new(),
            recall: request.recall,
            at: request.at,
        }
    }

    /// Adds events to the plan and folds them into the scratch state and graph.
    fn apply(&mut self, events: Vec<Event>) {
        crate::journal::apply_planned(&mut self.state, &mut [&mut self.graph], &events, self.at);
        self.events.extend(events);
    }

    /// The choice order over the scratch state, under `directive` if given.
    fn steer(&self, directive: Option<(MacroState, &[String])>) -> Steer<'_> {
        let mut steer = Steer::new(&self.state.graph.atoms, &self.state.run.ggs);
        if let Some(recall) = self.recall {
            steer = steer.with_recall(recall);
        }
        if let Some((directive, failed_tools)) = directive {
            steer = steer.directed(directive, failed_tools);
        }
        steer
    }

    /// Switches `group` to the best alternative the order allows; `false` when none does.
    fn switch_choice(&mut self, group: &str, directive: Option<(MacroState, &[String])>) -> bool {
        let steer = self.steer(directive);
        let candidates = self.graph.untried(group);
        let ranking = steer.rank(&self.graph, group, &candidates);
        let mut events: Vec<Event> = ranking.event().into_iter().collect();
        let switched = ranking
            .ranked
            .first()
            .and_then(|best| self.graph.force_choice(group, &best.id, &self.state.bindings));
        drop(steer);
        let done = switched.is_some();
        events.extend(switched.into_iter().flatten());
        self.apply(events);
        done
    }
}

/// Plans the recovery a directive (other than abandon) asks for.
pub fn plan(request: &PlanRequest<'_>) -> Plan {
    let decision = request.decision;
    let directed = Some((decision.directive, decision.failed_tools.as_slice()));
    let mut board = Board::new(request);
    let mut to_recover = request.failures.to_vec();
    if decision.directive == MacroState::Refine {
        // Refine retries an atom in place; an OR atom, or one the blocked sets
        // refuse, needs another way.
        let steer = board.steer(None);
        let (refine, rest): (Vec<_>, Vec<_>) = to_recover.into_iter().partition(|(atom, _)| {
            board.state.graph.atoms.get(atom).is_some_and(|a| a.or.is_none()) && steer.blocked(atom).is_none()
        });
        drop(steer);
        if !refine.is_empty() {
            let atoms = refine.into_iter().map(|(atom, _)| atom).collect();
            board.apply(vec![Event::AtomsRefined { atoms }]);
        }
        to_recover = rest;
    }
    for (failed, class) in to_recover {
        if board.graph.status(&failed) != Some(AtomStatus::Failed) || !board.graph.is_selected(&failed) {
            continue;
        }
        let steer = board.steer(directed);
        let recovery = board.graph.recover(&failed, class, &steer, &board.state.bindings);
        drop(steer);
        match recovery {
            Recovery::Backtrack { events } => board.apply(events),
            Recovery::Exhausted { atom, tried, events } => {
                board.apply(events);
                // No OR atom above the failure has a way left; one it
                // depends on may: its choice made what the failed atom worked
                // on (tests after a patch). The latest such choice switches,
                // and the work built on it runs again.
                if switch_below(&mut board, &failed, directed) {
                    continue;
                }
                let failure = board.state.failure_line(&atom);
                let message = if tried.is_empty() {
                    format!("{failure}; no OR atom above it has an alternative left")
                } else {
                    format!(
                        "{failure}; no alternative left ({}); GGS's decision: {}",
                        tried.join("; "),
                        decision.directive.shown()
                    )
                };
                return Plan::Exhausted {
                    events: board.events,
                    message,
                };
            }
        }
    }
    revise_choices(&mut board);
    if let Some(evidence) = request.base_case
        && !switch_latest(&mut board, directed)
    {
        let code = evidence.exit_code.map_or("killed".into(), |c| format!("exit {c}"));
        let said = if evidence.output_tail.trim().is_empty() {
            format!("{code}: no output")
        } else {
            headline(&format!("{code}:\n{}", evidence.output_tail))
        };
        let message = format!(
            "every atom is solved but the base case still fails ({said}); no alternative left; GGS's decision: {}",
            decision.directive.shown()
        );
        return Plan::Exhausted {
            events: board.events,
            message,
        };
    }
    Plan::Changes(board.events)
}

/// Switches choices made before the latest blocks when nothing they would run
/// has started and their plan now uses a blocked tool or target: a blocked
/// tool is not run again through a choice already made. A choice with no
/// qualifying alternative is left as it is.
fn revise_choices(board: &mut Board<'_>) {
    let atoms = &board.state.graph.atoms;
    let steer = Steer::new(atoms, &board.state.run.ggs);
    let stale: Vec<AtomId> = board
        .graph
        .choice_groups()
        .filter(|g| board.graph.is_selected(g))
        .filter_map(|g| Some((AtomId::from(g), atoms.get(g)?.chosen.clone()?)))
        .filter(|(_, chosen)| {
            let plan = board.graph.plan(chosen);
            let untouched = plan.iter().all(|id| {
                atoms
                    .get(*id)
                    .is_some_and(|a| a.status == AtomStatus::Pending && a.attempts == 0)
            });
            !plan.is_empty() && untouched && steer.refusal(&board.graph, chosen).is_some()
        })
        .map(|(group, _)| group)
        .collect();
    drop(steer);
    for group in stale {
        board.switch_choice(&group, None);
    }
}

/// Switches the most recent OR choice among `atom`'s dependencies (direct or
/// not, through chosen alternatives) that has an alternative the directive
/// allows; false when none has.
fn switch_below(board: &mut Board<'_>, atom: &str, directed: Option<(MacroState, &[String])>) -> bool {
    let atoms = &board.state.graph.atoms;
    let mut below: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut stack: Vec<&str> = atoms
        .get(atom)
        .map(|a| a.deps.iter().map(|d| d.as_str()).collect())
        .unwrap_or_default();
    while let Some(id) = stack.pop() {
        if !below.insert(id) {
            continue;
        }
        if let Some(a) = atoms.get(id) {
            stack.extend(a.deps.iter().map(|d| d.as_str()));
            stack.extend(a.chosen.iter().map(|c| c.as_str()));
        }
    }
    let mut groups: Vec<AtomId> = Vec::new();
    for entry in board.state.trail.iter().rev() {
        let group = match entry {
            TrailEntry::OrChoice { group, .. } | TrailEntry::Backtrack { group, .. } => group,
            _ => continue,
        };
        if below.contains(group.as_str()) && !groups.contains(group) {
            groups.push(group.clone());
        }
    }
    for group in groups {
        if board.graph.is_selected(&group) && board.switch_choice(&group, directed) {
            return true;
        }
    }
    false
}

/// With every atom solved and the base case failing, switches the most recent
/// OR choice that has an alternative the directive allows.
fn switch_latest(board: &mut Board<'_>, directed: Option<(MacroState, &[String])>) -> bool {
    let mut groups: Vec<AtomId> = Vec::new();
    for entry in board.state.trail.iter().rev() {
        let group = match entry {
            TrailEntry::OrChoice { group, .. } | TrailEntry::Backtrack { group, .. } => group,
            _ => continue,
        };
        if !groups.contains(group) {
            groups.push(group.clone());
        }
    }
    for group in groups {
        if board.graph.is_selected(&group) && board.switch_choice(&group, directed) {
            return true;
        }
    }
    false
}
