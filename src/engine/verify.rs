//! Checking the base case through the validator, without delaying a stop:
//! alone (at the start and the end of a round), or in the background while a
//! round's atoms keep running (`verify: every_iteration`).

use tokio::task::JoinHandle;

use super::roles::{BaseCaseRun, Checked, ObjectiveCheck, ObjectiveJudged};
use super::{Engine, EngineError};
use crate::journal::event::Event;
use crate::state::Evidence;

/// Whether a base case that holds completes the task.
pub(super) enum Accepted {
    /// It does: the objective's criteria hold too (or there are none).
    Complete(Evidence),
    /// The meta-validator finds the objective's criteria unmet: the
    /// evidence says which, for GGS as an unmet base case.
    Unmet(Evidence),
    /// Judging them could pass the task's budget: GGS abandons.
    OverBudget(String),
    /// The run was stopped meanwhile.
    Cancelled,
}

/// A base-case check running on a task of its own.
pub(super) struct Verification {
    command: String,
    task: JoinHandle<Option<Checked>>,
}

impl Verification {
    /// Waits for the check; `None` if it was cancelled or its task failed.
    pub async fn checked(&mut self) -> Option<Checked> {
        (&mut self.task).await.ok().flatten()
    }
}

impl Drop for Verification {
    fn drop(&mut self) {
        // A check nobody waits for any more is not left running.
        self.task.abort();
    }
}

/// Waits for `verification` if there is one, else forever (for `select!`).
pub(super) async fn next_check(verification: &mut Option<Verification>) -> Option<Checked> {
    match verification {
        Some(v) => v.checked().await,
        None => std::future::pending().await,
    }
}

impl Engine<'_> {
    /// Starts checking the base case on a task of its own; `None` if there is
    /// no base case. `cancel` (a stop, or a new objective) cancels it.
    pub(super) fn start_verification(&self, cancel: tokio_util::sync::CancellationToken) -> Option<Verification> {
        let base = self.state.objective.base_case.clone()?;
        let run = BaseCaseRun {
            command: base.command.clone(),
            cwd: self.dir.clone(),
            env: vec![
                ("AOT_STATE".into(), self.state_path().display().to_string()),
                (super::roles::RUNNER_VAR.into(), std::process::id().to_string()),
            ],
            timeout: base.timeout(),
        };
        let (validator, token) = (self.roles.validator.clone(), cancel);
        let task = tokio::spawn(async move { validator.base_case(&run, &token).await });
        Some(Verification {
            command: base.command,
            task,
        })
    }

    /// Journals the check `verification` made, once it is done; `None` if it
    /// was cancelled.
    pub(super) fn take_check(
        &mut self,
        verification: Verification,
        checked: Option<Checked>,
    ) -> Result<Option<Evidence>, EngineError> {
        let Some(checked) = checked else { return Ok(None) };
        // A new check: what the meta-validator found of the last one is stale.
        self.objective_unmet = None;
        let evidence = Evidence {
            command: verification.command.clone(),
            exit_code: checked.exit_code,
            output_tail: checked.output,
            at: self.clock.now(),
            duration_ms: checked.duration.as_millis() as u64,
        };
        self.record(vec![Event::BaseCaseChecked {
            evidence: evidence.clone(),
        }])?;
        Ok(Some(evidence))
    }

    /// The base case holds (`evidence`): the objective's plausible criteria
    /// are judged now (seed R4b, the meta-validator), and completion needs
    /// both. `Ok(None)`: complete; else the evidence that it is not, for GGS
    /// as an unmet base case (or the stop, over budget or cancelled).
    pub(super) async fn accept(&mut self, evidence: Evidence) -> Result<Accepted, EngineError> {
        if self.state.objective.criteria.is_empty() {
            return Ok(Accepted::Complete(evidence));
        }
        let check = ObjectiveCheck {
            objective: self.state.objective.clone(),
            evidence: evidence.clone(),
            work: self
                .state
                .bindings
                .iter()
                .take(100)
                .map(|(a, b)| (a.clone(), b.summary.clone()))
                .collect(),
            llm: self.state.llm.clone(),
            report: self.reporter.clone(),
        };
        let validator = self.roles.validator.clone();
        let cancel = self.cancel.clone();
        let mut task = tokio::spawn(async move { validator.objective(&check, &cancel).await });
        // A stop or a redirect is served while the meta-validator judges,
        // and what it reports is journaled as it comes.
        let judged = loop {
            tokio::select! {
                judged = &mut task => break judged.unwrap_or_else(|e| ObjectiveJudged::Failed(format!("the meta-validator's task ended abnormally: {e}"))),
                changed = Self::next_change(&mut self.watch) => self.on_change(changed).await?,
                Some(report) = self.reports.recv() => self.take_report(report)?,
            }
        };
        self.take_reports()?;
        Ok(match judged {
            ObjectiveJudged::Holds => Accepted::Complete(evidence),
            ObjectiveJudged::NotJudged(why) => {
                if !self.warned_unjudged {
                    self.warned_unjudged = true;
                    self.observer.warn(&format!(
                        "the objective's criteria are not judged ({why}); the base case alone decides"
                    ));
                }
                Accepted::Complete(evidence)
            }
            ObjectiveJudged::Unmet { first, lines } => {
                self.objective_unmet = Some(first);
                Accepted::Unmet(Evidence {
                    exit_code: None,
                    output_tail: format!(
                        "the base case exits 0, but the meta-validator finds the objective's criteria unmet:\n{}",
                        lines.iter().map(|u| format!("- {u}")).collect::<Vec<_>>().join("\n")
                    ),
                    ..evidence
                })
            }
            ObjectiveJudged::Failed(why) => Accepted::Unmet(Evidence {
                exit_code: None,
                output_tail: format!("the base case exits 0, but the objective's criteria could not be judged: {why}"),
                ..evidence
            }),
            ObjectiveJudged::OverBudget(message) => Accepted::OverBudget(message),
            ObjectiveJudged::Cancelled => Accepted::Cancelled,
        })
    }

    /// Checks the base case and journals the evidence; `None` if there is no
    /// base case or the run was stopped meanwhile.
    pub(super) async fn verify(&mut self) -> Result<Option<Evidence>, EngineError> {
        let Some(verification) = self.start_verification(self.cancel.clone()) else {
            return Ok(None);
        };
        // A long base case (a test suite) must not delay a stop request: the
        // watched files are served while it runs.
        let mut pending = Some(verification);
        let checked = loop {
            tokio::select! {
                checked = next_check(&mut pending) => break checked,
                changed = Self::next_change(&mut self.watch) => self.on_change(changed).await?,
                Some(report) = self.reports.recv() => self.take_report(report)?,
            }
        };
        match pending {
            Some(verification) => self.take_check(verification, checked),
            None => Ok(None),
        }
    }
}
