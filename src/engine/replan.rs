//! The fan-in gate (seed R4b) and the application of GGS directives.
//!
//! After a round with failures, or when every atom is solved but the base case
//! fails, the engine builds a [`ReplanRequest`] from what the round did, asks
//! [`ggs::decide`], journals the decision, and applies it to the graph:
//! refine re-dispatches the failed atoms with their corrections; change_path,
//! change_approach, break_symmetry and success recover through OR choices
//! steered by the blocked sets ([`Steer`]); abandon stops with a FinalResult.

use std::collections::HashSet;

use super::{Ended, Engine, EngineError, Finish, first_line, last_lines};
use crate::ggs::{self, AttemptGap, Decision, FinalResult, MacroState, Outcome, ReplanRequest, Verdict};
use crate::graph::{ChoiceOrder, Recovery};
use crate::journal::event::Event;
use crate::model::Criterion;
use crate::state::{Atom, AtomId, AtomStatus, Evidence, FailureClass, StopReason, TrailEntry};
use crate::steer::{Steer, target};

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
            &c.ggs(),
        )
    }

    /// The accept path's FinalResult: D = 0; the result is the bindings.
    pub(super) fn accepted(&self) -> FinalResult {
        let c = self.state.objective.constraints.ggs();
        ggs::accept(&self.state.run.ggs, self.omega_now(), self.state.run.replans, &c)
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
        criteria.retain(Criterion::is_verifiable);
        let verdicts = match finish {
            Finish::Solved => criteria
                .into_iter()
                .map(|criterion| Verdict {
                    criterion,
                    passed: true,
                    class: None,
                })
                .collect(),
            Finish::Failed { class, criterion } => {
                // Criteria run in order and stop at the first failure: those after it
                // were not evaluated and do not count.
                let at = criteria.iter().position(|c| c == criterion);
                let passed = at.map_or(&[][..], |i| &criteria[..i]);
                passed
                    .iter()
                    .map(|c| Verdict {
                        criterion: c.clone(),
                        passed: true,
                        class: None,
                    })
                    .chain(std::iter::once(Verdict {
                        criterion: criterion.clone(),
                        passed: false,
                        class: Some(*class),
                    }))
                    .collect()
            }
        };
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
        let subtree_tools = match finish {
            Finish::Failed { .. } => self.tools_tried_under(id),
            Finish::Solved => Vec::new(),
        };
        Outcome {
            atom: Some(id.into()),
            tool: atom
                .and_then(Atom::tool)
                .filter(|_| atom.is_some_and(|a| a.or.is_none())),
            target: atom.filter(|a| a.or.is_none()).map(|a| target(id, a)),
            solved: matches!(finish, Finish::Solved),
            verdicts,
            trajectory,
            attempts: atom.map_or(0, |a| a.attempts),
            subtree_tools,
        }
    }

    /// The tools tried in a failed atom's subtree: it, its dependencies and the
    /// alternatives below it, where they ran and did not succeed. A solved
    /// dependency proved its tool, so its tool is not blamed.
    fn tools_tried_under(&self, id: &str) -> Vec<String> {
        let atoms = &self.state.graph.atoms;
        let mut seen = HashSet::new();
        let mut stack = vec![AtomId::from(id)];
        let mut tools = Vec::new();
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
            if atom.or.is_none()
                && (atom.attempts > 0 || atom.status == AtomStatus::Failed)
                && let Some(tool) = atom.tool()
                && !tools.contains(&tool)
            {
                tools.push(tool);
            }
            stack.extend(atom.deps.iter().cloned());
            stack.extend(atom.or.iter().flatten().cloned());
        }
        tools
    }

    fn base_case_outcome(evidence: &Evidence) -> Outcome {
        let class = match evidence.exit_code {
            Some(code) if !Atom::DEFAULT_ENVIRONMENTAL_EXIT_CODES.contains(&code) => FailureClass::Logical,
            _ => FailureClass::Environmental,
        };
        Outcome {
            atom: None,
            tool: None,
            target: None,
            solved: false,
            verdicts: vec![Verdict {
                criterion: Criterion::BaseCase {
                    command: evidence.command.clone(),
                },
                passed: false,
                class: Some(class),
            }],
            trajectory: Vec::new(),
            attempts: 1,
            subtree_tools: Vec::new(),
        }
    }

    /// The atoms that failed for good and were never recovered from (a run that
    /// ended between the failure and its decision), with their class.
    pub(super) fn unrecovered(&self) -> Vec<(AtomId, FailureClass)> {
        self.graph
            .selected_failures()
            .map(|id| {
                let class = self.failure_of(id).map_or(FailureClass::Logical, |f| f.0);
                (AtomId::from(id), class)
            })
            .collect()
    }

    /// The fan-in gate: asks GGS about a failed round and applies its directive.
    /// `None`: the run goes on; `Some`: it ended (abandoned or exhausted).
    pub(super) fn replan(
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
        let mut outcomes: Vec<Outcome> = finished.iter().map(|(id, f)| self.outcome(id, f)).collect();
        for (atom, class) in &failures {
            if !finished.iter().any(|(id, _)| id == atom) {
                let criterion = self.failure_of(atom).map_or(Criterion::Run, |f| f.1.clone());
                outcomes.push(self.outcome(
                    atom,
                    &Finish::Failed {
                        class: *class,
                        criterion,
                    },
                ));
            }
        }
        outcomes.extend(base_case.map(Self::base_case_outcome));
        let constraints = &self.state.objective.constraints;
        let request = ReplanRequest {
            outcomes,
            elapsed_ms: self.elapsed_ms(),
            time_budget_ms: constraints.time_budget().as_millis() as u64,
            replans: self.state.run.replans,
            max_replans: constraints.max_replans(),
        };
        let config = constraints.ggs();
        let decision = ggs::decide(&request, &self.state.run.ggs, &config);
        self.record(vec![Event::GgsDecided {
            decision: Box::new(decision.clone()),
        }])?;
        self.remember_decision(&request, &decision);

        if decision.directive == MacroState::Abandon {
            return self.abandon(&decision).map(Some);
        }
        let mut to_recover = failures;
        if decision.directive == MacroState::Refine {
            let steer = Steer::new(&self.state.graph.atoms, &self.state.run.ggs);
            let (refine, rest): (Vec<_>, Vec<_>) = to_recover.into_iter().partition(|(atom, _)| {
                self.state.graph.atoms.get(atom).is_some_and(|a| a.or.is_none()) && steer.blocked(atom).is_none()
            });
            if !refine.is_empty() {
                let atoms = refine.into_iter().map(|(atom, _)| atom).collect();
                self.record(vec![Event::AtomsRefined { atoms }])?;
            }
            to_recover = rest;
        }
        for (atom, class) in to_recover {
            if self.graph.status(&atom) != Some(AtomStatus::Failed) || !self.graph.is_selected(&atom) {
                continue;
            }
            let directed = Some((decision.directive, decision.failed_tools.as_slice()));
            let recovery = self.steered(directed, |graph, steer, bindings| {
                graph.recover(&atom, class, steer, bindings)
            })?;
            match recovery {
                Recovery::Backtrack { events } => {
                    self.record(events)?;
                }
                Recovery::Exhausted { atom, tried, events } => {
                    self.record(events)?;
                    let failure = self.last_failure(&atom);
                    let message = if tried.is_empty() {
                        format!("{failure}; no OR atom above it has an alternative left")
                    } else {
                        format!(
                            "{failure}; no alternative left under {} ({})",
                            decision.directive,
                            tried.join("; ")
                        )
                    };
                    return self.stop(StopReason::Exhausted, message, None).map(Some);
                }
            }
        }
        self.revise_choices()?;
        if let Some(evidence) = base_case
            && !self.switch_latest(&decision)?
        {
            let message = format!(
                "every atom is solved but the base case still fails ({}): {}; no alternative left under {}",
                evidence.exit_code.map_or("killed".into(), |c| format!("exit {c}")),
                last_lines(&evidence.output_tail, 3),
                decision.directive
            );
            return self
                .stop(StopReason::Exhausted, message, Some(evidence.clone()))
                .map(Some);
        }
        Ok(None)
    }

    /// Switches choices made before the latest blocks when nothing they would
    /// run has started and their plan now uses a blocked tool or target: a
    /// blocked tool is not run again through a choice already made. A choice
    /// with no qualifying alternative is left as it is.
    fn revise_choices(&mut self) -> Result<(), EngineError> {
        let atoms = &self.state.graph.atoms;
        let stale: Vec<(AtomId, AtomId)> = self
            .graph
            .choice_groups()
            .filter(|g| self.graph.is_selected(g))
            .filter_map(|g| Some((AtomId::from(g), atoms.get(g)?.chosen.clone()?)))
            .filter(|(_, chosen)| {
                let plan = self.graph.plan(chosen);
                let untouched = plan.iter().all(|id| {
                    atoms
                        .get(*id)
                        .is_some_and(|a| a.status == AtomStatus::Pending && a.attempts == 0)
                });
                let steer = Steer::new(atoms, &self.state.run.ggs);
                !plan.is_empty() && untouched && steer.refusal(&self.graph, chosen).is_some()
            })
            .collect();
        for (group, _) in stale {
            self.switch_choice(&group, None)?;
        }
        Ok(())
    }

    /// An atom's last failure in the trail: class, criterion, message.
    pub(super) fn failure_of(&self, id: &str) -> Option<(FailureClass, &Criterion, &str)> {
        self.state.trail.iter().rev().find_map(|t| match t {
            TrailEntry::Failure {
                atom,
                class,
                criterion,
                message,
                ..
            } if atom == id => Some((*class, criterion, message.as_str())),
            _ => None,
        })
    }

    /// Switches `group` to the best alternative the choice order allows
    /// (`directed`: under a directive); `false` when none qualifies.
    fn switch_choice(&mut self, group: &str, directed: Option<(MacroState, &[String])>) -> Result<bool, EngineError> {
        let events = self.steered(directed, |graph, steer, bindings| {
            let candidates = graph.untried(group);
            let best = steer.rank(graph, group, &candidates).into_iter().next()?;
            graph.force_choice(group, &best.id, bindings)
        })?;
        match events {
            Some(events) => {
                self.record(events)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// With every atom solved and the base case failing, switches the most
    /// recent OR choice that has an alternative the directive allows.
    fn switch_latest(&mut self, decision: &Decision) -> Result<bool, EngineError> {
        let mut groups: Vec<AtomId> = Vec::new();
        for entry in self.state.trail.iter().rev() {
            let group = match entry {
                TrailEntry::OrChoice { group, .. } | TrailEntry::Backtrack { group, .. } => group,
                _ => continue,
            };
            if !groups.contains(group) {
                groups.push(group.clone());
            }
        }
        for group in groups {
            if !self.graph.is_selected(&group) {
                continue;
            }
            let directed = Some((decision.directive, decision.failed_tools.as_slice()));
            if self.switch_choice(&group, directed)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Stops with the abandon FinalResult: the partial result and what to do next.
    fn abandon(&mut self, decision: &Decision) -> Result<Ended, EngineError> {
        let config = self.state.objective.constraints.ggs();
        let failures = decision
            .failed
            .iter()
            .map(|atom| {
                let (criterion, message) = self
                    .failure_of(atom)
                    .map(|(_, criterion, message)| (criterion.to_string(), first_line(message).to_string()))
                    .unwrap_or_default();
                (atom.clone(), criterion, message)
            })
            .collect();
        let steer = Steer::new(&self.state.graph.atoms, &self.state.run.ggs);
        let untried = self
            .graph
            .choice_groups()
            .filter(|g| self.graph.is_selected(g))
            .map(|group| {
                let candidates = self.graph.untried(group);
                let usable: Vec<AtomId> = steer
                    .rank(&self.graph, group, &candidates)
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
            .collect();
        let situation = ggs::Situation { failures, untried };
        let result = FinalResult {
            accepted: false,
            summary: decision.rationale.clone(),
            loss: decision.loss,
            grad_l: decision.grad_l,
            replans: decision.replans,
            partial: self.partial(),
            next_moves: ggs::next_moves(decision, &situation, &config),
        };
        let message = format!("GGS abandoned the task: {}", decision.rationale);
        self.remember_end(false, &message);
        self.stop_with(StopReason::Abandoned, message, None, Some(Box::new(result)))
    }
}
