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
use crate::journal::event::Event;
use crate::llm::{CallError, Client, Message, Reply, Role, estimate_tokens};
use crate::state::{AtomId, AtomStatus, StateFile};

/// Plans asked for per decision: the first and two more after refusals.
const ASKS: usize = 3;

/// The most tokens a plan's answer may take.
pub const PLAN_MAX_TOKENS: u32 = 4000;

/// The planner that asks a model once the written alternatives run out.
pub struct LlmPlanner {
    client: Client,
    workspace: PathBuf,
    confirmed: bool,
    /// Where each conversation is kept (`.aot/llm/`), if anywhere.
    kept: Option<crate::llm::record::Keeper>,
    /// The plan that waits for the user's answers about its destructive
    /// commands, by the decision's round: planned again without a new call.
    waiting: std::sync::Mutex<Option<(u32, Proposal, String)>>,
    /// Plans asked for in a decision's round so far, by round: a decision
    /// that comes back after questions (`Plan::Confirm`) goes on counting.
    asked: std::sync::Mutex<(u32, usize)>,
    /// The built-in worker takes agent atoms the file gives no agent command
    /// (and the environment none either): their commands are checked as they run.
    agents_checked: bool,
}

impl LlmPlanner {
    /// A planner calling `client`; `workspace` is where commands run (Law 1's
    /// inside and outside); `confirmed` is `--yes` (destructive commands allowed).
    pub fn new(client: Client, workspace: PathBuf, confirmed: bool) -> Self {
        Self {
            client,
            workspace,
            confirmed,
            kept: None,
            waiting: std::sync::Mutex::new(None),
            asked: std::sync::Mutex::new((0, 0)),
            agents_checked: false,
        }
    }

    /// Agent atoms without an agent command are worked by the built-in
    /// worker (a tool-tier model, and no `AOT_AGENT_CMD`): a plan's agent
    /// atom needs no confirmation up front, each command being checked at
    /// dispatch.
    pub fn checking_agents(mut self, checked: bool) -> Self {
        self.agents_checked = checked;
        self
    }

    /// Keeps each conversation (prompt, answers, repair re-asks) as a JSON
    /// file in `folder` (the state file's `.aot/llm/`), named in `llm_called`
    /// relative to `base` (the state file's folder).
    pub fn keeping(mut self, folder: PathBuf, base: &std::path::Path) -> Self {
        self.kept = Some(crate::llm::record::Keeper::new(folder, base));
        self
    }

    /// Writes one conversation; returns its path as journaled (`None`: not kept).
    async fn keep(
        &self,
        at: crate::model::time::Timestamp,
        messages: &[Message],
        calls: &[Result<Reply, CallError>],
    ) -> Option<String> {
        let keeper = self.kept.as_ref()?;
        keeper
            .conversation(at.as_millis(), Role::Planner, messages, calls)
            .await
    }

    fn called(
        &self,
        call: &Result<Reply, CallError>,
        atom: Option<&AtomId>,
        state: &StateFile,
        kept: Option<String>,
    ) -> Event {
        let asked = &self.client.endpoint().model;
        crate::llm::record::called(Role::Planner, call, asked, atom, state.llm.as_ref(), kept)
    }

    /// Checks a grafted plan's new atoms under the decision's rules.
    fn refusals(
        &self,
        grafted: &replan::Grafted,
        directive: MacroState,
        avoided: &[(String, String)],
        answers_target: Option<&str>,
        gate_answers: &std::collections::HashMap<String, bool>,
    ) -> plan_check::Verdict {
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
            cwd: None,
        };
        let rules = Rules {
            blocked_tools: &state.run.ggs.blocked_tools,
            blocked_targets: &state.run.ggs.blocked_targets,
            tried: (directive == MacroState::BreakSymmetry).then_some(&tried),
            avoided,
            answers_target,
            confirmed: &|gate: &crate::law::Gate| self.confirmed || gate_answers.get(&gate.command) == Some(&true),
            law: &law,
            // No agent command in the file: agent atoms go to the built-in worker.
            agents_checked: self.agents_checked && state.workers.as_ref().is_none_or(|w| w.agent.is_none()),
        };
        plan_check::check(&atoms, &[], &rules)
    }
}

/// Why the next ask (a call and, if its answer does not parse, one repair
/// re-ask, whose prompt holds the first answer too: twice the prompt and
/// three replies at worst, and a tenth more for the estimate) could pass the
/// task's budget; `None` when it cannot.
fn over_budget(state: &StateFile, messages: &[Message], model: &str) -> Option<String> {
    let c = &state.objective.constraints;
    let spend = &state.run.spend;
    let prompt: u64 = messages.iter().map(|m| estimate_tokens(&m.content) + 4).sum();
    let reply = u64::from(PLAN_MAX_TOKENS);
    let (worst_prompt, worst_reply) = ((2 * prompt + reply) * 11 / 10, (2 * reply) * 11 / 10);
    if let Some(max) = c.max_tokens {
        let worst = worst_prompt + worst_reply;
        if spend.tokens + worst > max {
            return Some(format!(
                "the token budget would not cover the planner's next call: {} of max_tokens {max} spent, and the call could take up to {worst} (`aot redirect --set max_tokens=N` raises it)",
                spend.tokens
            ));
        }
    }
    if let Some(max) = c.max_cost {
        let price = state.llm.as_ref().and_then(|l| l.prices.get(model));
        if let Some(price) = price {
            let worst = price.cost(worst_prompt, worst_reply);
            if spend.cost + worst > max {
                return Some(format!(
                    "the dollar budget would not cover the planner's next call: ${:.4} of max_cost ${max} spent, and the call could cost up to ${worst:.4} (`aot redirect --set max_cost=N` raises it)",
                    spend.cost
                ));
            }
        }
    }
    None
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

impl Planner for LlmPlanner {
    fn plan<'a>(&'a self, request: PlanRequest<'a>) -> BoxFuture<'a, Plan> {
        Box::pin(async move {
            let (mut events, message) = match super::plan(&request) {
                Plan::Exhausted { events, message } => (events, message),
                changes => return changes,
            };
            let board = crate::journal::folded(request.state, &events, request.at);
            let answers = request.failures.first().map(|(atom, _)| atom.clone());
            if answers.is_none() && request.base_case.is_none() {
                return Plan::Exhausted { events, message };
            }
            let directive = request.decision.directive;
            let avoided = request.recall.map(|r| r.avoided()).unwrap_or_default();
            let answers_target = answers
                .as_ref()
                .and_then(|a| board.graph.atoms.get(a).map(|atom| crate::steer::target(a, atom)));
            let number = request.decision.replans + 1;
            let mut messages = replan::prompt(&request, &board, answers.as_ref());
            let mut refused: Vec<String> = Vec::new();
            let mut spent = board.clone();
            let model = self.client.endpoint().model.clone();
            let round = request.decision.round;
            let mut last_reply: String;
            // A plan that waited for answers about its destructive commands
            // is checked again as it is: no new call.
            let mut waiting = self
                .waiting
                .lock()
                .ok()
                .and_then(|mut w| w.take())
                .filter(|(r, ..)| *r == round);
            let mut ask = match self.asked.lock() {
                Ok(asked) if asked.0 == round => asked.1,
                _ => 0,
            };
            let count = |ask: usize| {
                if let Ok(mut asked) = self.asked.lock() {
                    *asked = (round, ask);
                }
            };
            while ask < ASKS || waiting.is_some() {
                let proposal = if let Some((_, proposal, reply)) = waiting.take() {
                    // Checked again with the answers: not a new ask.
                    last_reply = reply;
                    proposal
                } else {
                    ask += 1;
                    count(ask);
                    if let Some(why) = over_budget(&spent, &messages, &model) {
                        return Plan::OverBudget { events, message: why };
                    }
                    let (answer, calls) = self
                        .client
                        .json::<Proposal>(Role::Planner, &messages, PLAN_MAX_TOKENS)
                        .await;
                    let kept = self.keep(request.at, &messages, &calls).await;
                    for call in &calls {
                        let event = self.called(call, answers.as_ref(), &board, kept.clone());
                        crate::journal::apply_planned(&mut spent, &mut [], std::slice::from_ref(&event), request.at);
                        events.push(event);
                    }
                    last_reply = calls
                        .iter()
                        .rev()
                        .find_map(|c| c.as_ref().ok())
                        .map(|r| r.content.clone())
                        .unwrap_or_default();
                    match answer {
                        Ok(proposal) => proposal,
                        Err(e) => {
                            return Plan::Exhausted {
                                events,
                                message: format!("{message}; the planner could not make a new plan: {e}"),
                            };
                        }
                    }
                };
                let reasons = match replan::graft(&board, answers.as_ref(), &proposal, number, directive, request.at) {
                    Ok(grafted) => {
                        let verdict = self.refusals(
                            &grafted,
                            directive,
                            &avoided,
                            answers_target.as_deref(),
                            request.gate_answers,
                        );
                        // Only destructive commands stand in the way, and the
                        // user was not asked about some: ask, then check again.
                        let unasked: Vec<(String, String)> = verdict
                            .gates
                            .iter()
                            .filter(|(_, g)| !self.confirmed && !request.gate_answers.contains_key(&g.command))
                            .map(|(_, g)| (g.command.clone(), g.why.clone()))
                            .collect();
                        if plan_check::only_gates(&verdict) && !unasked.is_empty() {
                            if let Ok(mut w) = self.waiting.lock() {
                                *w = Some((round, proposal, last_reply));
                            }
                            return Plan::Confirm { events, gates: unasked };
                        }
                        if verdict.passed() {
                            let mut planned = grafted.events;
                            if let Some(Event::Replanned { gates, .. }) = planned.first_mut() {
                                *gates = verdict
                                    .gates
                                    .iter()
                                    .map(|(place, gate)| format!("{place}: `{}` {}", gate.command, gate.why))
                                    .collect();
                            }
                            events.extend(planned);
                            return Plan::Changes(events);
                        }
                        verdict.reasons
                    }
                    Err(reasons) => reasons,
                };
                events.push(Event::PlanRefused {
                    replan: number,
                    reasons: reasons.clone(),
                });
                refused = reasons;
                if ask < ASKS {
                    messages.push(Message::assistant(last_reply.clone()));
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
