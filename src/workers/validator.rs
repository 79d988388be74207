//! The command validator: `check` commands and the base case.

use tokio_util::sync::CancellationToken;

use super::command::{self, CommandSpec, Exit};
use crate::engine::roles::{Assignment, BaseCaseRun, BoxFuture, Checked, Judgement, Validator, Work};
use crate::model::Criterion;
use crate::model::text::with_evidence;
use crate::state::FailureClass;

/// Judges `check` criteria by running them (exit 0 passes; any failure is
/// logical: the work is wrong, whatever made the check fail) and checks the
/// base case. Plausible criteria need an LLM validator: not judged here.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandValidator;

impl CommandValidator {
    async fn check(command: String, assignment: &Assignment, cancel: &CancellationToken) -> Judgement {
        let spec = CommandSpec {
            command,
            cwd: assignment.cwd.clone(),
            env: assignment.env.clone(),
            stdin: None,
            timeout: assignment.spec.timeout.map(|t| t.0),
            keep_stdout: false,
        };
        let result = command::run(&spec, cancel).await;
        match &result.exit {
            Exit::Cancelled => Judgement::Cancelled,
            Exit::Code(0) => Judgement::Passed,
            exit => Judgement::Failed {
                class: FailureClass::Logical,
                message: with_evidence(command::describe(exit), &result.output),
                ended: result.ended(),
            },
        }
    }
}

impl Validator for CommandValidator {
    fn judge<'a>(
        &'a self,
        criterion: &'a Criterion,
        assignment: &'a Assignment,
        _work: &'a Work,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Judgement> {
        match criterion {
            // The rendered text: the criterion names the command as written.
            Criterion::Check { index, .. } => match assignment.spec.check.get(*index) {
                Some(command) => Box::pin(Self::check(command.clone(), assignment, cancel)),
                None => Box::pin(std::future::ready(Judgement::NotJudged)),
            },
            _ => Box::pin(std::future::ready(Judgement::NotJudged)),
        }
    }

    fn base_case<'a>(&'a self, run: &'a BaseCaseRun, cancel: &'a CancellationToken) -> BoxFuture<'a, Option<Checked>> {
        Box::pin(async move {
            let spec = CommandSpec {
                command: run.command.clone(),
                cwd: run.cwd.clone(),
                env: run.env.clone(),
                stdin: None,
                timeout: Some(run.timeout),
                keep_stdout: false,
            };
            let result = command::run(&spec, cancel).await;
            (result.exit != Exit::Cancelled).then(|| Checked {
                exit_code: result.code(),
                output: result.output,
                duration: result.duration,
            })
        })
    }
}
