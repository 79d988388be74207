//! The command worker: an atom's `run` command, or an agent CLI.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::command::{self, CommandSpec, Exit};
use super::llm::LlmWorker;
use super::prompt::agent_prompt;
use crate::engine::roles::{Assignment, BoxFuture, Worked, Worker};
use crate::model::text::with_evidence;
use crate::state::{Atom, FailureClass, StateFile};

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
}

impl std::fmt::Debug for CommandWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandWorker")
            .field("agent_override", &self.agent_override)
            .field("llm", &self.llm.is_some())
            .finish()
    }
}

impl CommandWorker {
    fn agent_command(&self, workers: Option<&crate::state::Workers>) -> Option<String> {
        self.agent_override
            .clone()
            .or_else(|| workers?.agent.as_ref().map(|a| a.command.clone()))
    }

    fn spec(assignment: &Assignment, command: String, stdin: Option<String>) -> CommandSpec {
        CommandSpec {
            command,
            cwd: assignment.cwd.clone(),
            env: assignment.env.clone(),
            stdin,
            timeout: assignment.spec.timeout.map(|t| t.0),
        }
    }

    async fn attempt(&self, assignment: &Assignment, cancel: &CancellationToken) -> Worked {
        let atom = &assignment.spec;
        let run = match (&atom.run, &atom.agent) {
            (Some(run), _) => Self::spec(assignment, run.clone(), None),
            (None, Some(task)) => {
                // The gate made sure there is one; a hand edit may have removed it since.
                let Some(agent) = self.agent_command(assignment.workers.as_ref()) else {
                    let Some(llm) = &self.llm else {
                        return Worked::Failed {
                            class: FailureClass::Environmental,
                            message: "no agent command: set workers.agent.command or AOT_AGENT_CMD".into(),
                            ended: Default::default(),
                            blocked: None,
                        };
                    };
                    let worked = llm.work(assignment, task, cancel).await;
                    return Self::probed(worked, assignment, cancel).await;
                };
                Self::spec(assignment, agent, Some(agent_prompt(assignment, task)))
            }
            (None, None) => Self::spec(assignment, "true".into(), None),
        };
        let result = command::run(&run, cancel).await;
        match result.exit {
            Exit::Cancelled => return Worked::Cancelled,
            Exit::Code(0) => {
                return Worked::Done {
                    summary: result.summary,
                    output: result.output,
                };
            }
            _ => {}
        }
        let environmental = atom
            .environmental_exit_codes
            .as_deref()
            .unwrap_or(&Atom::DEFAULT_ENVIRONMENTAL_EXIT_CODES[..]);
        let class = match &result.exit {
            Exit::Code(code) if !environmental.contains(code) => FailureClass::Logical,
            _ => FailureClass::Environmental,
        };
        let mut ended = result.ended();
        // An agent's last word on what it did is part of the next attempt's lesson.
        if atom.agent.is_some() && !result.summary.trim().is_empty() {
            ended.summary = Some(result.summary.clone());
        }
        let failed = Worked::Failed {
            class,
            message: with_evidence(command::describe(&result.exit), &result.output),
            ended,
            blocked: None,
        };
        Self::probed(failed, assignment, cancel).await
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
    fn gate(&self, state: &StateFile) -> Result<(), String> {
        let agents: Vec<&str> = state
            .graph
            .atoms
            .iter()
            .filter(|(_, a)| a.agent.is_some())
            .map(|(id, _)| id.as_str())
            .collect();
        if agents.is_empty() || self.agent_command(state.workers.as_ref()).is_some() || self.llm.is_some() {
            return Ok(());
        }
        Err(format!(
            "agent atoms ({}) need a worker: set workers.agent.command in the state file or AOT_AGENT_CMD, or a model for the built-in worker (TOOL_MODEL or OPENAI_MODEL, see docs/llm.md)",
            agents.join(", ")
        ))
    }

    fn work<'a>(&'a self, assignment: &'a Assignment, cancel: &'a CancellationToken) -> BoxFuture<'a, Worked> {
        Box::pin(self.attempt(assignment, cancel))
    }
}
