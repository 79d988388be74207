//! The LLM planner: the written alternatives first; when they run out, a
//! model is asked for a new plan with the PlanDirective ([`super::replan`]).
//! What it answers is grafted and checked in code — the graph's own
//! validation and the plan validator (blocked tools and targets,
//! break_symmetry repeats, Law 1) — before anything runs. A refused plan is
//! asked for again with the reasons, at most twice per decision; then the
//! run stops `exhausted`, naming them. Every call is journaled (`llm_called`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::replan::{self, Proposal};
use super::validate::{self as plan_check, Rules};
use crate::engine::roles::{BoxFuture, Plan, PlanRequest, Planner};
use crate::ggs::MacroState;
use crate::journal::event::{Event, RECORD_VERSION, Record};
use crate::llm::{CallError, Client, Message, Reply, Role};
use crate::state::{AtomStatus, StateFile};

/// Plans asked for per decision: the first and two more after refusals.
const ASKS: usize = 3;

/// The most tokens a plan's answer may take.
pub const PLAN_MAX_TOKENS: u32 = 4000;

/// The planner that asks a model once the written alternatives run out.
pub struct LlmPlanner {
    client: Client,
    workspace: PathBuf,
    confirmed: bool,
}

impl LlmPlanner {
    /// A planner calling `client`; `workspace` is where commands run (Law 1's
    /// inside and outside); `confirmed` is `--yes` (destructive commands allowed).
    pub fn new(client: Client, workspace: PathBuf, confirmed: bool) -> Self {
        Self {
            client,
            workspace,
            confirmed,
        }
    }

    fn called(&self, call: &Result<Reply, CallError>) -> Event {
        match call {
            Ok(reply) => Event::LlmCalled {
                role: Role::Planner.name().into(),
                model: reply.model.clone(),
                prompt_tokens: reply.usage.prompt,
                completion_tokens: reply.usage.completion,
                estimated: reply.usage.estimated,
                latency_ms: reply.latency.as_millis() as u64,
                attempts: reply.attempts,
                error: None,
            },
            Err(e) => Event::LlmCalled {
                role: Role::Planner.name().into(),
                model: self.client.endpoint().model.clone(),
                prompt_tokens: e.usage.prompt,
                completion_tokens: e.usage.completion,
                estimated: e.usage.estimated,
                latency_ms: e.latency.as_millis() as u64,
                attempts: e.attempts,
                error: Some(e.message.clone()),
            },
        }
    }

    /// Checks a grafted plan's new atoms under the decision's rules.
    fn refusals(&self, grafted: &replan::Grafted, directive: MacroState) -> Vec<String> {
        let state = &grafted.state;
        let atoms = grafted
            .added
            .iter()
            .filter_map(|id| Some((id.clone(), state.graph.atoms.get(id)?.clone())))
            .filter(|(_, atom)| atom.or.is_none() || atom.run.is_some())
            .map(|(id, mut atom)| {
                // Ours, not the model's: the validator refuses it on a model's atom.
                atom.planned = None;
                (id, atom)
            })
            .collect();
        let tried: BTreeSet<String> = tried_commands(state);
        let exists = |p: &std::path::Path| p.exists();
        let law = crate::law::Context {
            workspace: &self.workspace,
            exists: &exists,
        };
        let rules = Rules {
            blocked_tools: &state.run.ggs.blocked_tools,
            blocked_targets: &state.run.ggs.blocked_targets,
            tried: (directive == MacroState::BreakSymmetry).then_some(&tried),
            confirmed: self.confirmed,
            law: &law,
        };
        plan_check::check(&atoms, &[], &rules).reasons
    }
}

/// The commands of atoms that have run.
fn tried_commands(state: &StateFile) -> BTreeSet<String> {
    state
        .graph
        .atoms
        .values()
        .filter(|a| a.attempts > 0 || a.status != AtomStatus::Pending)
        .flat_map(|a| a.run.iter().chain(a.check.iter()))
        .map(|c| c.trim().to_string())
        .collect()
}

/// `state` with `events` folded in.
fn folded(state: &StateFile, events: &[Event], at: crate::model::time::Timestamp) -> StateFile {
    let mut state = state.clone();
    for event in events {
        let record = Record {
            v: RECORD_VERSION,
            seq: state.run.revision,
            at,
            event: event.clone(),
        };
        crate::journal::fold::apply_with(&mut state, &mut [], &record);
    }
    state
}

impl Planner for LlmPlanner {
    fn plan<'a>(&'a self, request: PlanRequest<'a>) -> BoxFuture<'a, Plan> {
        Box::pin(async move {
            let (mut events, message) = match super::plan(&request) {
                Plan::Exhausted { events, message } => (events, message),
                changes => return changes,
            };
            let board = folded(request.state, &events, request.at);
            let answers = request.failures.first().map(|(atom, _)| atom.clone());
            if answers.is_none() && request.base_case.is_none() {
                return Plan::Exhausted { events, message };
            }
            let directive = request.decision.directive;
            let number = request.decision.replans + 1;
            let mut messages = replan::prompt(&request, &board, answers.as_ref());
            let mut refused: Vec<String> = Vec::new();
            for ask in 0..ASKS {
                let (answer, calls) = self
                    .client
                    .json::<Proposal>(Role::Planner, &messages, PLAN_MAX_TOKENS)
                    .await;
                events.extend(calls.iter().map(|c| self.called(c)));
                let proposal = match answer {
                    Ok(proposal) => proposal,
                    Err(e) => {
                        return Plan::Exhausted {
                            events,
                            message: format!("{message}; the planner could not make a new plan: {e}"),
                        };
                    }
                };
                let reasons = match replan::graft(&board, answers.as_ref(), &proposal, number, directive, request.at) {
                    Ok(grafted) => {
                        let reasons = self.refusals(&grafted, directive);
                        if reasons.is_empty() {
                            events.extend(grafted.events);
                            return Plan::Changes(events);
                        }
                        reasons
                    }
                    Err(reasons) => reasons,
                };
                refused = reasons;
                if ask + 1 < ASKS {
                    let reply = calls
                        .iter()
                        .rev()
                        .find_map(|c| c.as_ref().ok())
                        .map(|r| r.content.clone())
                        .unwrap_or_default();
                    messages.push(Message::assistant(reply));
                    messages.push(Message::user(format!(
                        "The plan was refused and did not run:\n{}\nAnswer again with the whole JSON object.",
                        refused.iter().map(|r| format!("- {r}")).collect::<Vec<_>>().join("\n")
                    )));
                }
            }
            Plan::Exhausted {
                events,
                message: format!(
                    "{message}; the planner's plans were refused {ASKS} times: {}",
                    refused.join("; ")
                ),
            }
        })
    }
}
