//! Checking the base case through the validator, without delaying a stop.

use super::roles::BaseCaseRun;
use super::{Engine, EngineError};
use crate::journal::event::Event;
use crate::state::Evidence;

impl Engine<'_> {
    /// Checks the base case and journals the evidence; `None` if there is no
    /// base case or the run was stopped meanwhile.
    pub(super) async fn verify(&mut self) -> Result<Option<Evidence>, EngineError> {
        let Some(base) = self.state.objective.base_case.clone() else {
            return Ok(None);
        };
        let run = BaseCaseRun {
            command: base.command.clone(),
            cwd: self.dir.clone(),
            env: vec![("AOT_STATE".into(), self.store.paths().state.display().to_string())],
            timeout: base.timeout(),
        };
        // A long base case (a test suite) must not delay a stop request: the
        // watched files are served while it runs.
        let (validator, token) = (self.roles.validator.clone(), self.cancel.clone());
        let check = validator.base_case(&run, &token);
        tokio::pin!(check);
        let checked = loop {
            tokio::select! {
                checked = &mut check => break checked,
                changed = Self::next_change(&mut self.watch) => self.on_change(changed).await?,
            }
        };
        let Some(checked) = checked else { return Ok(None) };
        let evidence = Evidence {
            command: base.command,
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
}
