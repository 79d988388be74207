//! The command worker: an atom's `run` command, or an agent CLI.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::command::{self, CommandSpec, Exit};
use super::llm::LlmWorker;
use super::prompt::agent_prompt;
use super::template::{self, Parsed};
use crate::engine::roles::{Assignment, BoxFuture, Worked, Worker};
use crate::journal::event::Event;
use crate::model::text::with_evidence;
use crate::model::text::{first_line, head_tail};
use crate::state::{AgentTemplate, Atom, FailureClass};

/// Runs an atom's `run` command in `bash -c`; an `agent` atom runs the agent
/// command with its prompt on stdin, or, with no agent command but a model
/// on the tool tier, the built-in worker ([`LlmWorker`]). Classifies a
/// failure by exit code; on an environmental one, the atom's `probe` says
/// whether the tool itself is down.
#[derive(Clone, Default)]
pub struct CommandWorker {
    /// The agent command from the environment (`AOT_AGENT_CMD`), which wins
    /// over `workers.agent.command` in the state file.
    pub agent_override: Option<String>,
    /// The built-in worker, when a model is configured for the tool tier.
    pub llm: Option<Arc<LlmWorker>>,
    /// Why there is no built-in worker (the settings to add), said by an
    /// `agent` atom that needs one.
    pub no_llm: Option<String>,
}

impl std::fmt::Debug for CommandWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandWorker")
            .field("agent_override", &self.agent_override)
            .field("llm", &self.llm.is_some())
            .field("no_llm", &self.no_llm)
            .finish()
    }
}

impl CommandWorker {
    /// The agent command (the environment's, the file's, else the
    /// template's command line) and the template its output is read as.
    fn agent_command(&self, workers: Option<&crate::state::Workers>) -> Option<(String, Option<AgentTemplate>)> {
        let declared = workers.and_then(|w| w.agent.as_ref());
        let template = declared.and_then(|a| a.template);
        let command = self
            .agent_override
            .clone()
            .or_else(|| declared?.command.clone())
            .or_else(|| template.map(|t| template::command(t).to_string()))?;
        Some((command, template))
    }

    fn spec(assignment: &Assignment, command: String, stdin: Option<String>) -> CommandSpec {
        CommandSpec {
            command,
            cwd: assignment.cwd.clone(),
            env: assignment.env.clone(),
            stdin,
            timeout: assignment.spec.timeout.map(|t| t.0),
            keep_stdout: false,
        }
    }

    async fn attempt(&self, assignment: &Assignment, cancel: &CancellationToken) -> Worked {
        let atom = &assignment.spec;
        let (run, template) = match (&atom.run, &atom.agent) {
            (Some(run), _) => (Self::spec(assignment, run.clone(), None), None),
            (None, Some(task)) => {
                let Some((agent, template)) = self.agent_command(assignment.workers.as_ref()) else {
                    let Some(llm) = &self.llm else {
                        // Nothing can work it: retrying changes nothing until
                        // the settings change, so the atom is blocked.
                        let why = self
                            .no_llm
                            .as_deref()
                            .unwrap_or("no model is configured for the built-in worker");
                        let message = format!(
                            "no worker for this agent atom: {why}; or name an agent CLI (workers.agent.command or template in the state file, or AOT_AGENT_CMD)"
                        );
                        return Worked::Failed {
                            class: FailureClass::Environmental,
                            message,
                            ended: Default::default(),
                            blocked: Some("no retry works before the settings change".into()),
                        };
                    };
                    let worked = llm.work(assignment, task, cancel).await;
                    return Self::probed(worked, assignment, cancel).await;
                };
                let mut spec = Self::spec(assignment, agent, Some(agent_prompt(assignment, task)));
                if let Some(t) = template {
                    // A CLI's spend is known only after it ran: it starts only while some budget is left.
                    if let Some(message) = assignment.report.spent_out() {
                        return Worked::OverBudget { message };
                    }
                    spec.keep_stdout = true;
                    spec.env
                        .extend(template::env(t).iter().map(|(k, v)| (k.to_string(), v.to_string())));
                }
                (spec, template)
            }
            (None, None) => (Self::spec(assignment, "true".into(), None), None),
        };
        let result = command::run(&run, cancel).await;
        if result.exit == Exit::Cancelled {
            return Worked::Cancelled;
        }
        let parsed = template.map(|t| {
            let parsed = template::parse(t, result.stdout.as_deref().unwrap_or(""));
            Self::report_cli(assignment, t, &parsed, &result);
            parsed
        });
        // What a CLI said it did: its final message, else its output.
        let (summary, output) = match parsed.as_ref().and_then(|p| p.message.as_ref()) {
            Some(message) => (command::summary_of(message), head_tail(message, command::KEEP_TAIL * 2)),
            None => (result.summary.clone(), result.output.clone()),
        };
        let reported_error = parsed.as_ref().and_then(|p| p.error.clone());
        if result.exit == Exit::Code(0) && reported_error.is_none() {
            return Worked::Done { summary, output };
        }
        let mut environmental: Vec<i32> = atom
            .environmental_exit_codes
            .clone()
            .unwrap_or_else(|| Atom::DEFAULT_ENVIRONMENTAL_EXIT_CODES.to_vec());
        if let Some(t) = template {
            environmental.extend(template::environmental_exit_codes(t));
        }
        let class = match (&result.exit, &reported_error) {
            (_, Some(error)) if template::environmental_error(error) => FailureClass::Environmental,
            (Exit::Code(code), _) if !environmental.contains(code) => FailureClass::Logical,
            (Exit::Code(0), Some(_)) => FailureClass::Logical,
            _ => FailureClass::Environmental,
        };
        let mut ended = result.ended();
        // An agent's last word on what it did is part of the next attempt's lesson.
        if atom.agent.is_some() && !summary.trim().is_empty() {
            ended.summary = Some(summary);
        }
        let mut how = command::describe(&result.exit);
        if let Some(error) = &reported_error {
            how = format!("{how}; the agent reported: {}", first_line(error));
        }
        // A CLI's own output is JSON: its final message is the evidence, not the JSON around it.
        let evidence = match &parsed {
            Some(p) if p.message.is_some() || p.error.is_some() => p.message.clone().unwrap_or_default(),
            _ => result.output.clone(),
        };
        let failed = Worked::Failed {
            class,
            message: with_evidence(how, &evidence),
            ended,
            blocked: None,
        };
        Self::probed(failed, assignment, cancel).await
    }

    /// A CLI's run, as its output reported it: its spend (`llm_called`, role
    /// `worker`, when it reported tokens or cost) and `agent_ran`.
    fn report_cli(assignment: &Assignment, t: AgentTemplate, parsed: &Parsed, result: &command::CommandResult) {
        let model = parsed.model.clone().unwrap_or_else(|| t.name().to_string());
        if parsed.tokens.is_some() || parsed.cost.is_some() {
            let (prompt, completion) = parsed.tokens.unwrap_or((0, 0));
            let priced = assignment
                .llm
                .as_ref()
                .and_then(|l| l.prices.get(&model))
                .map(|p| p.cost(prompt, completion));
            assignment.report.send(
                Event::LlmCalled {
                    role: crate::llm::Role::Worker.name().into(),
                    model,
                    prompt_tokens: prompt,
                    completion_tokens: completion,
                    estimated: false,
                    latency_ms: result.duration.as_millis() as u64,
                    attempts: 1,
                    error: parsed.error.clone(),
                    atom: Some(assignment.atom.clone()),
                    cost: parsed.cost.or(priced),
                    kept: None,
                },
                None,
            );
        }
        assignment.report.send(
            Event::AgentRan {
                atom: assignment.atom.clone(),
                attempt: assignment.attempt,
                worker: t.name().into(),
                turns: parsed.turns.unwrap_or(0),
                tool_calls: 0,
                refusals: 0,
            },
            None,
        );
    }

    /// An environmental failure asks the atom's `probe`: when it fails too
    /// (two independent signals), the atom is blocked instead of retried.
    async fn probed(worked: Worked, assignment: &Assignment, cancel: &CancellationToken) -> Worked {
        let Worked::Failed {
            class: FailureClass::Environmental,
            message,
            ended,
            blocked: None,
        } = worked
        else {
            return worked;
        };
        let mut blocked = None;
        if let Some(probe) = &assignment.spec.probe {
            let p = command::run(&Self::spec(assignment, probe.clone(), None), cancel).await;
            if !p.success() && p.exit != Exit::Cancelled {
                blocked = Some(format!(
                    "probe `{probe}`: {}",
                    with_evidence(command::describe(&p.exit), &p.output)
                ));
            }
        }
        Worked::Failed {
            class: FailureClass::Environmental,
            message,
            ended,
            blocked,
        }
    }
}

impl Worker for CommandWorker {
    fn work<'a>(&'a self, assignment: &'a Assignment, cancel: &'a CancellationToken) -> BoxFuture<'a, Worked> {
        Box::pin(self.attempt(assignment, cancel))
    }

    fn end_leftovers(&self, atom: &str, attempt: u32) {
        command::kill_attempt_leftovers(atom, attempt);
    }
}
