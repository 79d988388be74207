//! The fan-in gate (seed R4b): where a GGS decision is made and applied.
//!
//! After a round with failures, or when every atom is solved but the base case
//! fails, the engine builds a [`ReplanRequest`] from what the round did, asks
//! [`ggs::decide`], journals the decision and writes its Megrams. An abandon
//! stops with a FinalResult; any other directive goes to the [`Planner`], whose
//! plan is journaled — or, when it has no way forward, the run stops
//! `exhausted`.
//!
//! [`Planner`]: super::Planner

use std::collections::HashSet;

use super::roles::{Plan, PlanRequest};
use super::round::Finish;
use super::{Ended, Engine, EngineError};
use crate::ggs::{self, AttemptGap, Decision, FinalResult, MacroState, Outcome, ReplanRequest, Verdict};
use crate::graph::ChoiceOrder;
use crate::journal::event::Event;
use crate::model::Criterion;
use crate::model::text::headline;
use crate::state::{Atom, AtomId, AtomStatus, Evidence, FailureClass, StopReason};
use crate::steer::{Steer, target};

/// Rounds of questions about a planner's destructive commands per decision.
const CONFIRM_ROUNDS: usize = 3;

/// Summaries an abandon's FinalResult lists.
const PARTIAL_MAX: usize = 100;

impl Engine<'_> {
    /// Active time spent on the task: earlier runs plus this one.
    fn elapsed_ms(&self) -> u64 {
        let now = self.clock.now();
        let current = self.state.run.started_at.map_or(0, |s| now.since(s).as_millis() as u64);
        self.state.run.active_ms + current
    }

    fn omega_now(&self) -> f64 {
        let c = &self.state.objective.constraints;
        ggs::omega(
            self.state.run.replans,
            c.max_replans(),
            self.elapsed_ms(),
            c.time_budget().as_millis() as u64,
            self.state.spent_share(),
            &c.ggs(),
        )
    }

    /// The accept path's FinalResult: D = 0; the result is the bindings.
    pub(super) fn accepted(&self) -> FinalResult {
        let c = self.state.objective.constraints.ggs();
        ggs::accept(&self.state.run.ggs, self.omega_now(), self.state.run.replans, &c)
    }

    /// What a run stopped at its iteration limit leaves: the last loss,
    /// the partial result, and the move that goes on.
    pub(super) fn at_limit(&self, max: u32, message: &str) -> FinalResult {
        let c = self.state.objective.constraints.ggs();
        let last = self.state.run.ggs.last.as_deref();
        // Each iteration makes at least one graph transition: the bound on
        // those left is enough to reach the goal or a dead end.
        let left = u32::try_from(self.graph.remaining_bound()).unwrap_or(u32::MAX).max(1);
        let raised = max.saturating_add(left);
        FinalResult {
            accepted: false,
            summary: message.to_string(),
            loss: last.map_or_else(|| ggs::loss(1.0, 0.0, self.omega_now(), &c), |d| d.loss),
            grad_l: last.map_or(0.0, |d| d.grad_l),
            replans: self.state.run.replans,
            partial: self.partial(),
            next_moves: vec![format!(
                "The iteration limit is reached ({max}, counted across the runs of this task; the graph needs at most {left} more): raise it with `aot redirect --set max_iterations={raised}`, then `aot start` (or `aot start --max-iterations {raised}` for one run)."
            )],
        }
    }

    /// The partial result of an abandoned task: the solved atoms' summaries, the
    /// first [`PARTIAL_MAX`] of them (all are in `bindings`).
    fn partial(&self) -> indexmap::IndexMap<AtomId, String> {
        self.state
            .bindings
            .iter()
            .take(PARTIAL_MAX)
            .map(|(id, b)| (id.clone(), b.summary.clone()))
            .collect()
    }

    /// What one finished atom contributes to the request.
    fn outcome(&self, id: &str, finish: &Finish) -> Outcome {
        let atoms = &self.state.graph.atoms;
        let atom = atoms.get(id);
        // Only criteria a validator judged count: plausible ones need an LLM validator.
        let mut criteria = atom.map_or_else(|| vec![Criterion::Run], Atom::criteria);
        if self.roles.validator.plausible_judge().is_err() {
            criteria.retain(Criterion::is_verifiable);
        }
        let verdicts = verdicts(criteria, finish);
        let trajectory = self
            .history
            .of_atom(id)
            .iter()
            .map(|r| AttemptGap {
                attempt: r.attempt,
                criterion: r.criterion.clone(),
                class: r.class,
            })
            .collect();
        let (subtree_tools, subtree_targets) = match finish {
            Finish::Failed { .. } => self.tried_under(id),
            Finish::Solved => (Vec::new(), Vec::new()),
        };
        Outcome {
            atom: Some(id.into()),
            tool: atom
                .and_then(Atom::tool)
                .filter(|_| atom.is_some_and(|a| a.or.is_none())),
            tool_declared: atom.is_some_and(|a| a.tool.is_some()),
            target: atom.filter(|a| a.or.is_none()).map(|a| target(id, a)),
            solved: matches!(finish, Finish::Solved),
            verdicts,
            trajectory,
            attempts: atom.map_or(0, |a| a.attempts),
            subtree_tools,
            subtree_targets,
        }
    }

    /// What was tried in a failed atom's subtree: it, its dependencies and
    /// the alternatives below it, where they ran and did not succeed — the
    /// declared tools, and the targets of atoms whose tools are inferred. A
    /// solved dependency proved its tool, so its tool is not blamed.
    fn tried_under(&self, id: &str) -> (Vec<String>, Vec<String>) {
        let atoms = &self.state.graph.atoms;
        let mut seen = HashSet::new();
        let mut stack = vec![AtomId::from(id)];
        let mut tools = Vec::new();
        let mut targets = Vec::new();
        while let Some(current) = stack.pop() {
            if !seen.insert(current.clone()) {
                continue;
            }
            let Some(atom) = atoms.get(current.as_str()) else {
                continue;
            };
            if atom.status == AtomStatus::Solved {
                continue;
            }
            if atom.or.is_none() && (atom.attempts > 0 || atom.status == AtomStatus::Failed) {
                match &atom.tool {
                    Some(tool) if !tools.contains(tool) => tools.push(tool.clone()),
                    Some(_) => {}
                    None => targets.push(target(&current, atom)),
                }
            }
            stack.extend(atom.deps.iter().cloned());
            stack.extend(atom.or.iter().flatten().cloned());
        }
        (tools, targets)
    }

    /// The base case's outcome; after the meta-validator found an objective
    /// criterion unmet (the command held), that criterion failed, logically.
    fn base_case_outcome(&self, evidence: &Evidence) -> Outcome {
        let (criterion, class) = match &self.objective_unmet {
            Some((index, text)) => (
                Criterion::Plausible {
                    index: *index,
                    text: text.clone(),
                },
                FailureClass::Logical,
            ),
            None => (
                Criterion::BaseCase {
                    command: evidence.command.clone(),
                },
                match evidence.exit_code {
                    Some(code) if !Atom::DEFAULT_ENVIRONMENTAL_EXIT_CODES.contains(&code) => FailureClass::Logical,
                    _ => FailureClass::Environmental,
                },
            ),
        };
        Outcome {
            atom: None,
            tool: None,
            tool_declared: false,
            target: None,
            solved: false,
            verdicts: vec![Verdict {
                criterion,
                passed: false,
                class: Some(class),
            }],
            trajectory: Vec::new(),
            attempts: 1,
            subtree_tools: Vec::new(),
            subtree_targets: Vec::new(),
        }
    }

    /// The atoms that failed for good and were never recovered from (a run that
    /// ended between the failure and its decision), with their class.
    pub(super) fn unrecovered(&self) -> Vec<(AtomId, FailureClass)> {
        self.graph
            .selected_failures()
            .map(|id| {
                let class = self.state.last_failure(id).map_or(FailureClass::Logical, |f| f.0);
                (AtomId::from(id), class)
            })
            .collect()
    }

    /// The fan-in gate: asks GGS about a failed round and applies its directive.
    /// `None`: the run goes on; `Some`: it ended (abandoned or exhausted).
    pub(super) async fn replan(
        &mut self,
        finished: &[(AtomId, Finish)],
        failures: Vec<(AtomId, FailureClass)>,
        base_case: Option<&Evidence>,
    ) -> Result<Option<Ended>, EngineError> {
        let failures: Vec<(AtomId, FailureClass)> = failures
            .into_iter()
            .filter(|(atom, _)| self.graph.status(atom) == Some(AtomStatus::Failed) && self.graph.is_selected(atom))
            .collect();
        if failures.is_empty() && base_case.is_none() {
            return Ok(None);
        }
        let request = self.request(finished, &failures, base_case);
        let config = self.state.objective.constraints.ggs();
        let decision = ggs::decide(&request, &self.state.run.ggs, &config);
        self.record(vec![Event::GgsDecided {
            decision: Box::new(decision.clone()),
        }])?;
        self.remember_decision(&request, &decision);
        if decision.directive == MacroState::Abandon {
            return self.abandon(&decision).map(Some);
        }
        match self.planned(&decision, &failures, base_case).await? {
            Plan::Changes(events) => {
                self.record(events)?;
                Ok(None)
            }
            Plan::Exhausted { events, message } => {
                self.record(events)?;
                let result = self.closing(&decision);
                self.stop_with(
                    StopReason::Exhausted,
                    message,
                    base_case.cloned(),
                    Some(Box::new(result)),
                )
                .map(Some)
            }
            Plan::Confirm { events, .. } => {
                // `planned` asks before it returns; a plan still asking is stuck.
                self.record(events)?;
                let result = self.closing(&decision);
                self.stop_with(
                    StopReason::Exhausted,
                    "the planner's plan waits for a confirmation nobody gave".into(),
                    base_case.cloned(),
                    Some(Box::new(result)),
                )
                .map(Some)
            }
            Plan::OverBudget { events, message } => {
                self.record(events)?;
                let result = self.closing(&decision);
                let message = format!("GGS abandoned the task: {message}");
                self.remember_end(false, &message);
                self.stop_with(StopReason::Abandoned, message, None, Some(Box::new(result)))
                    .map(Some)
            }
        }
    }

    /// What GGS is asked: every finished atom's verdicts, the failures the
    /// round did not finish (carried over from an earlier run), the base case.
    fn request(
        &self,
        finished: &[(AtomId, Finish)],
        failures: &[(AtomId, FailureClass)],
        base_case: Option<&Evidence>,
    ) -> ReplanRequest {
        let mut outcomes: Vec<Outcome> = finished.iter().map(|(id, f)| self.outcome(id, f)).collect();
        for (atom, class) in failures {
            if !finished.iter().any(|(id, _)| id == atom) {
                let criterion = self.state.last_failure(atom).map_or(Criterion::Run, |f| f.1.clone());
                outcomes.push(self.outcome(
                    atom,
                    &Finish::Failed {
                        class: *class,
                        criterion,
                    },
                ));
            }
        }
        outcomes.extend(base_case.map(|e| self.base_case_outcome(e)));
        // Nothing finished: a start facing failures its last run left, or a
        // base case still unmet with every atom solved before it. Nothing new
        // was observed, so the loss is the last one's.
        let carried = finished
            .is_empty()
            .then(|| self.state.run.ggs.last.as_ref().map(|l| (l.loss.d, l.loss.p)))
            .flatten();
        let constraints = &self.state.objective.constraints;
        ReplanRequest {
            outcomes,
            elapsed_ms: self.elapsed_ms(),
            time_budget_ms: constraints.time_budget().as_millis() as u64,
            replans: self.state.run.replans,
            max_replans: constraints.max_replans(),
            spent: self.state.spent_share(),
            carried,
        }
    }

    /// Asks the planner to act on `decision`; a plan whose calibrations met a
    /// Caution pair nobody was asked about is made again after asking.
    async fn planned(
        &mut self,
        decision: &Decision,
        failures: &[(AtomId, FailureClass)],
        base_case: Option<&Evidence>,
    ) -> Result<Plan, EngineError> {
        let planner = self.roles.planner.clone();
        let now = self.clock.now();
        // Questions about destructive commands per decision: each round may
        // have cost a call, so they are bounded like the planner's own asks.
        let mut questions = 0;
        loop {
            let answers = self.gate_answers.clone();
            let plan = planner
                .plan(PlanRequest {
                    decision,
                    failures,
                    base_case,
                    state: &self.state,
                    graph: &self.graph,
                    recall: Some(self.recall(now)),
                    at: now,
                    gate_answers: &answers,
                })
                .await;
            if let Plan::Confirm { events, gates } = plan {
                // The calls made so far are journaled now: the next plan's
                // budget check counts them.
                self.record(events)?;
                questions += 1;
                let mut asked = false;
                for (command, why) in gates {
                    if self.gate_answers.contains_key(&command) {
                        continue;
                    }
                    let question = format!("the planner's new plan runs `{command}`, which {why} (Law 1). Run it?");
                    let answer = self.observer.confirm(&question).await;
                    self.gate_answers.insert(command, answer);
                    asked = true;
                }
                if !asked || questions >= CONFIRM_ROUNDS {
                    return Ok(Plan::Exhausted {
                        events: Vec::new(),
                        message: format!(
                            "the planner's plans kept holding destructive commands (Law 1) after {questions} question round(s); \
                             `aot start --yes` lets them run"
                        ),
                    });
                }
                continue;
            }
            if !self.ask_cautions(&plan).await {
                return Ok(plan);
            }
        }
    }

    /// Stops with the abandon FinalResult: the partial result and what to do next.
    fn abandon(&mut self, decision: &Decision) -> Result<Ended, EngineError> {
        let result = self.closing(decision);
        let message = format!("GGS abandoned the task: {}", decision.rationale);
        self.remember_end(false, &message);
        self.stop_with(StopReason::Abandoned, message, None, Some(Box::new(result)))
    }

    /// The FinalResult of a run that ends unaccepted after `decision`: the
    /// partial result and the next moves.
    fn closing(&self, decision: &Decision) -> FinalResult {
        let failures = decision
            .failed
            .iter()
            .map(|atom| {
                let (criterion, message, environmental) = self
                    .state
                    .last_failure(atom)
                    .map(|(class, criterion, message)| {
                        (
                            criterion.to_string(),
                            headline(message),
                            class == FailureClass::Environmental,
                        )
                    })
                    .unwrap_or_default();
                (atom.clone(), criterion, message, environmental)
            })
            .collect();
        let constraints = &self.state.objective.constraints;
        let situation = ggs::Situation {
            failures,
            untried: self.untried(),
            foundations: self.foundations(),
            max_replans: constraints.max_replans(),
            time_budget_s: constraints.time_budget().as_secs(),
        };
        FinalResult {
            accepted: false,
            summary: decision.rationale.clone(),
            loss: decision.loss,
            grad_l: decision.grad_l,
            // The replans made, this decision's included when it went on.
            replans: self.state.run.replans,
            partial: self.partial(),
            next_moves: ggs::next_moves(decision, &situation),
        }
    }

    /// The solved atoms without dependencies on the selected branches, the
    /// first three: `aot redirect --reset` on them re-runs the plan.
    fn foundations(&self) -> Vec<AtomId> {
        self.state
            .graph
            .atoms
            .iter()
            .filter(|(id, atom)| {
                atom.or.is_none()
                    && atom.deps.is_empty()
                    && atom.status == AtomStatus::Solved
                    && self.graph.is_selected(id)
            })
            .map(|(id, _)| id.clone())
            .take(3)
            .collect()
    }

    /// The alternatives left at each selected OR atom (open, or failed for
    /// want of one): those a plan may still use, and those the blocked sets
    /// refuse (with why), for the next moves.
    fn untried(&self) -> Vec<ggs::Untried> {
        let steer = Steer::new(&self.state.graph.atoms, &self.state.run.ggs);
        self.state
            .graph
            .atoms
            .iter()
            .filter(|(id, atom)| {
                atom.or.is_some()
                    && matches!(
                        atom.status,
                        AtomStatus::Pending | AtomStatus::Running | AtomStatus::Failed
                    )
                    && self.graph.is_selected(id)
            })
            .map(|(id, _)| id.as_str())
            .map(|group| {
                let candidates = self.graph.untried(group);
                let usable: Vec<AtomId> = steer
                    .rank(&self.graph, group, &candidates)
                    .ranked
                    .into_iter()
                    .map(|r| r.id)
                    .collect();
                let refused = candidates
                    .iter()
                    .filter_map(|c| steer.refusal(&self.graph, c).map(|why| (AtomId::from(*c), why)))
                    .collect();
                ggs::Untried {
                    group: group.into(),
                    usable,
                    refused,
                }
            })
            .collect()
    }
}

/// The verdicts of a finished atom's criteria. Criteria run in order and stop
/// at the first failure: those after it were not evaluated and do not count.
fn verdicts(criteria: Vec<Criterion>, finish: &Finish) -> Vec<Verdict> {
    let passed = |criterion: Criterion| Verdict {
        criterion,
        passed: true,
        class: None,
    };
    match finish {
        Finish::Solved => criteria.into_iter().map(passed).collect(),
        Finish::Failed { class, criterion } => {
            let at = criteria.iter().position(|c| c == criterion).unwrap_or(0);
            criteria
                .into_iter()
                .take(at)
                .map(passed)
                .chain(std::iter::once(Verdict {
                    criterion: criterion.clone(),
                    passed: false,
                    class: Some(*class),
                }))
                .collect()
        }
    }
}
