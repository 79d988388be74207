//! A round: OR choices, dispatch of ready atoms to the worker, judging by the
//! validator, joins, retries and blocks — until nothing is ready or an atom
//! fails for good.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::roles::{Assignment, Brief, Judgement, Landed, Landing, Roles, Work, Worked};
use super::verify::{Verification, next_check};
use super::{Engine, EngineError};
use crate::journal::Reflection;
use crate::journal::event::Event;
use crate::model::secret::redact;
use crate::model::text::{MESSAGE_MAX, SUMMARY_MAX, cut, tail};
use crate::model::{Changes, Criterion, Ended};
use crate::state::template;
use crate::state::{Atom, AtomId, AtomStatus, Binding, Evidence, FailureClass, VerifyPolicy};
use crate::steer::Steer;

/// Bytes of output a binding keeps (the end): bindings stand in for solved
/// atoms in the state file, so 10,000 of them must stay far below the file
/// size limit. Failure messages and base-case evidence keep the worker's 4 KB.
pub const BINDING_TAIL: usize = 1024;

/// Files a binding lists of what its atom changed (the journal lists more).
const BINDING_FILES: usize = 20;

/// One attempt's context, handed to the worker as `AOT_CORRECTION` (and to an
/// agent in its prompt): what failed last time, told so it can be acted on.
#[derive(Debug, Clone, Serialize)]
pub struct CorrectionSignal {
    /// The atom.
    pub atom: AtomId,
    /// The attempt about to run.
    pub attempt: u32,
    /// The criterion that failed last time.
    pub failed_criterion: Criterion,
    /// That criterion's text: the command that failed (the atom's `run`, a
    /// `check`), or the agent's task.
    pub command: String,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Logical or environmental.
    pub class: FailureClass,
    /// How it ended, then the evidence from its output: the lines that carry
    /// the error with their context, the first lines and the last ones.
    pub message: String,
    /// What the worker said it did last time (its `summary:` line).
    pub previous_summary: Option<String>,
    /// The working tree: `clean` — with isolation the failed attempt's
    /// changes were discarded — or `kept`: without it, aot does not undo
    /// files between attempts, so the previous attempt's edits are still there.
    pub working_tree: &'static str,
    /// With isolation: what the failed attempt had changed (a short diff
    /// stat), now discarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<String>,
    /// Every earlier failed attempt, oldest first.
    pub history: Vec<Reflection>,
}

impl CorrectionSignal {
    /// The correction for the next attempt of `atom` after `corrections` (oldest first).
    pub fn after(atom_id: &str, atom: &Atom, attempt: u32, corrections: &[Reflection], isolated: bool) -> Option<Self> {
        let last = corrections.last()?;
        Some(CorrectionSignal {
            atom: atom_id.into(),
            attempt,
            failed_criterion: last.criterion.clone(),
            command: atom.criterion_text(&last.criterion),
            exit_code: last.ended.exit_code,
            signal: last.ended.signal,
            class: last.class,
            message: last.message.clone(),
            previous_summary: last.ended.summary.clone(),
            working_tree: if isolated { "clean" } else { "kept" },
            discarded: last.ended.discarded.clone(),
            history: corrections.to_vec(),
        })
    }
}

/// How an atom that finished in a round ended (the fan-in gate's input).
#[derive(Debug, Clone)]
pub(super) enum Finish {
    Solved,
    Failed { class: FailureClass, criterion: Criterion },
}

/// What a round did.
#[derive(Debug, Default)]
pub(super) struct Round {
    /// Atoms that finished for good, in order.
    pub finished: Vec<(AtomId, Finish)>,
    /// Atoms that failed for good (losing racers excluded).
    pub failures: Vec<(AtomId, FailureClass)>,
    /// Whether the run was stopped meanwhile.
    pub cancelled: bool,
    /// The base case held, checked while atoms ran: the round was halted.
    pub completed: Option<Evidence>,
    /// The iteration limit was reached while atoms ran: the round was halted.
    pub limit_reached: bool,
    /// The last check made during the round (the base case did not hold).
    pub last_check: Option<Evidence>,
    /// A role's next call could pass the task's budget: the round was
    /// halted (what ran finished), and GGS abandons.
    pub over_budget: Option<String>,
    /// Results came in after the last check started (or no check ran).
    pub unchecked: bool,
}

/// How an attempt ended: the worker's result judged by the validator.
#[derive(Debug)]
pub(super) enum Attempted {
    Solved {
        summary: String,
        output: String,
    },
    Failed {
        class: FailureClass,
        criterion: Criterion,
        message: String,
        /// Exit code or signal, and the worker's summary.
        ended: Ended,
        /// The probe's evidence that the environment is down.
        blocked: Option<String>,
    },
    /// A call the work needed could pass the task's budget: not made.
    OverBudget(String),
    Cancelled,
}

/// What isolation did with an attempt's changes.
#[derive(Debug)]
pub(super) enum Isolated {
    /// They landed in the user's tree (from this place: its write-ahead
    /// record goes once the landing is journaled).
    Landed(Landed, u64),
    /// They were discarded; a copy of the tree may have been kept.
    Discarded { changes: Changes, kept: Option<PathBuf> },
    /// The workspace failed to settle them (the user is told).
    Unsettled(String),
}

/// What an attempt's task reports.
pub(super) type Reported = (AtomId, Attempted, Option<Isolated>);

/// A round in progress.
#[derive(Default)]
pub(super) struct Dispatch {
    pub running: JoinSet<Reported>,
    /// Which atom each task works on, for a task that panics or is aborted.
    pub tasks: HashMap<tokio::task::Id, AtomId>,
    pub in_flight: HashSet<AtomId>,
    /// Speculative OR atoms being raced: group → (alternative → its cancel token).
    pub races: HashMap<AtomId, HashMap<AtomId, CancellationToken>>,
    /// The calibrated field of each race: who may run in it, best first.
    pub race_plans: HashMap<AtomId, Vec<AtomId>>,
    /// With isolation, each race's claim, by OR atom: the first racer to
    /// land takes it; one that succeeds after it discards its changes.
    pub group_claims: HashMap<AtomId, RaceClaim>,
    /// The same claims, by racer.
    pub race_claims: HashMap<AtomId, RaceClaim>,
    pub round: Round,
    /// Attempts cancelled by a stop or a redirect.
    pub cancelled: Vec<AtomId>,
    /// The base-case check running while atoms run.
    pub verification: Option<Verification>,
    /// Nothing more is started: the run completed, hit its iteration
    /// limit, or (`aot step`) took in its first results.
    pub halted: bool,
    /// Places whose landing is journaled: their write-ahead records go.
    pub to_settle: Vec<u64>,
}

impl Dispatch {
    /// Starts an attempt on a task of its own; with isolation, in a copy.
    pub fn spawn(&mut self, roles: &Roles, assignment: Assignment, cancel: CancellationToken, place: Placing) {
        let atom = assignment.atom.clone();
        let task = self.running.spawn(isolated(roles.clone(), assignment, cancel, place));
        self.tasks.insert(task.id(), atom.clone());
        self.in_flight.insert(atom);
    }

    /// What a joined task reports. A task that panicked or was aborted ends
    /// its attempt as an environmental failure: its atom never stays running.
    fn joined(&mut self, joined: Result<(tokio::task::Id, Reported), tokio::task::JoinError>) -> Option<Reported> {
        let (atom, attempted, isolated) = match joined {
            Ok((id, result)) => {
                self.tasks.remove(&id);
                result
            }
            Err(error) => {
                let atom = self.tasks.remove(&error.id())?;
                let failed = Attempted::Failed {
                    class: FailureClass::Environmental,
                    criterion: Criterion::Run,
                    message: format!("the worker task ended abnormally: {error}"),
                    ended: Ended::default(),
                    blocked: None,
                };
                (atom, failed, None)
            }
        };
        self.in_flight.remove(&atom);
        Some((atom, attempted, isolated))
    }

    fn fail(&mut self, atom: AtomId, class: FailureClass, criterion: Criterion) {
        self.round.failures.push((atom.clone(), class));
        self.round.finished.push((atom, Finish::Failed { class, criterion }));
    }
}

/// A speculative race's claim: whether a racer has landed.
pub(super) type RaceClaim = std::sync::Arc<tokio::sync::Mutex<bool>>;

/// Where an attempt is to work, with isolation.
#[derive(Debug, Clone)]
pub(super) struct Placing {
    /// A failed attempt's tree is kept for inspection (`--keep-failed`).
    pub keep_failed: bool,
    /// For a speculative racer: its race's claim (only the winner lands).
    pub race: Option<RaceClaim>,
}

/// One attempt in its place: without isolation, in the user's tree; with it,
/// in the place the workspace gives, whose changes land when the attempt
/// succeeds and are discarded otherwise.
async fn isolated(roles: Roles, mut assignment: Assignment, cancel: CancellationToken, placing: Placing) -> Reported {
    let Some(workspace) = roles.workspace.clone() else {
        // Without isolation what an attempt leaves running is ended with the
        // run (a scan of the processes per attempt would cost the loop).
        let (atom, attempted) = attempt(roles, assignment, cancel).await;
        return (atom, attempted, None);
    };
    let place = match workspace.enter().await {
        Ok(place) => place,
        Err(error) => {
            let failed = Attempted::Failed {
                class: FailureClass::Environmental,
                criterion: Criterion::Run,
                message: format!("could not prepare the attempt's place in the work tree: {error}"),
                ended: Ended::default(),
                blocked: None,
            };
            return (assignment.atom, failed, None);
        }
    };
    assignment.cwd = place.map(&assignment.cwd);
    assignment.root = place.map(&assignment.root);
    // A folder holding only aot's own files (or ignored ones) is not in a
    // copy of the tree: the work still starts there.
    if place.copy.is_some() {
        let _ = tokio::fs::create_dir_all(&assignment.cwd).await;
    }
    let label = format!("aot: {} (attempt {})", assignment.atom, assignment.attempt);
    let number = assignment.attempt;
    let keep = format!("{}-{}", assignment.atom, assignment.attempt);
    let read_only = assignment.spec.read_only;
    let worker = roles.worker.clone();
    let (atom, attempted) = attempt(roles, assignment, cancel).await;
    // Nothing of the attempt writes on in its copy while its changes are
    // taken, nor into the copy's next attempt.
    end_leftovers(&worker, &atom, number).await;
    let discard = |attempted: Attempted| {
        let place = &place;
        let workspace = &workspace;
        // Kept for inspection: a failure, not a cancelled attempt.
        let keep = (placing.keep_failed && matches!(attempted, Attempted::Failed { .. })).then_some(keep.as_str());
        async move {
            let isolated = match workspace.discard(place, keep).await {
                Ok((changes, kept)) => Isolated::Discarded { changes, kept },
                Err(error) => Isolated::Unsettled(format!("could not discard its changes: {error}")),
            };
            (attempted, Some(isolated))
        }
    };
    let (attempted, isolated) = match attempted {
        // A probe's result is what it found, not what it changed: nothing lands.
        solved @ Attempted::Solved { .. } if read_only => discard(solved).await,
        Attempted::Solved { summary, output } => {
            // A racer lands only if no other racer has; the claim is held
            // while it lands.
            let mut claim = match &placing.race {
                Some(race) => Some(race.clone().lock_owned().await),
                None => None,
            };
            if claim.as_deref() == Some(&true) {
                let (_, isolated) = discard(Attempted::Cancelled).await;
                return (atom, Attempted::Cancelled, isolated);
            }
            let message = match summary.lines().next().filter(|l| !l.trim().is_empty()) {
                Some(line) => format!("{label}: {}", cut(line, 200)),
                None => label,
            };
            // Detached from the attempt's task: a landing, once begun, is
            // never dropped half way (a stop waits for it).
            let landing = {
                let (workspace, place, message, atom) =
                    (workspace.clone(), place.clone(), message.clone(), atom.clone());
                tokio::spawn(async move { workspace.land(&place, &message, &atom, number).await })
            };
            let landing = landing
                .await
                .unwrap_or_else(|e| Err(format!("the landing's task ended abnormally: {e}")));
            match landing {
                Ok(Landing::Landed(landed)) => {
                    if let Some(won) = claim.as_deref_mut() {
                        *won = true;
                    }
                    (
                        Attempted::Solved { summary, output },
                        Some(Isolated::Landed(landed, place.id)),
                    )
                }
                Ok(Landing::Conflict { files }) => {
                    discard(Attempted::Failed {
                        class: FailureClass::Logical,
                        criterion: Criterion::Merge,
                        message: format!(
                            "its changes conflict with work that landed, or with your edits, while it ran: {}",
                            files.join(", ")
                        ),
                        ended: Ended {
                            summary: Some(summary).filter(|s| !s.trim().is_empty()),
                            ..Ended::default()
                        },
                        blocked: None,
                    })
                    .await
                }
                Err(error) => {
                    discard(Attempted::Failed {
                        class: FailureClass::Environmental,
                        criterion: Criterion::Merge,
                        message: format!("could not land its changes: {error}"),
                        ended: Ended::default(),
                        blocked: None,
                    })
                    .await
                }
            }
        }
        other => discard(other).await,
    };
    (atom, attempted, isolated)
}

/// Ends what the attempt left running outside its process group (a
/// `setsid` daemon, a double fork), off the async threads.
async fn end_leftovers(worker: &std::sync::Arc<dyn super::roles::Worker>, atom: &str, attempt: u32) {
    let (worker, atom) = (worker.clone(), atom.to_string());
    let _ = tokio::task::spawn_blocking(move || worker.end_leftovers(&atom, attempt)).await;
}

/// One attempt: the worker's work, then the validator on each criterion in
/// order, stopping at the first that fails.
async fn attempt(roles: Roles, assignment: Assignment, cancel: CancellationToken) -> (AtomId, Attempted) {
    // Criteria no validator here can judge would fail whatever the work
    // did: the atom is blocked before it runs, with the settings to add.
    if let (Some(text), Err(why)) = (assignment.spec.criteria.first(), roles.validator.plausible_judge()) {
        let message = format!("criteria[0] `{}` cannot be judged: {why}", cut(text, 80));
        let attempted = Attempted::Failed {
            class: FailureClass::Environmental,
            criterion: Criterion::Plausible {
                index: 0,
                text: text.clone(),
            },
            message,
            ended: Ended::default(),
            blocked: Some("its work was not run: no retry works before the settings change".into()),
        };
        return (assignment.atom, attempted);
    }
    let attempted = match roles.worker.work(&assignment, &cancel).await {
        Worked::Cancelled => Attempted::Cancelled,
        Worked::OverBudget { message } => Attempted::OverBudget(message),
        Worked::Failed {
            class,
            message,
            ended,
            blocked,
        } => Attempted::Failed {
            class,
            criterion: Criterion::Run,
            message,
            ended,
            blocked,
        },
        Worked::Done { summary, output } => {
            let work = Work { summary, output };
            let judged = judge(&roles, &assignment, &work, &cancel).await;
            let Work { summary, output } = work;
            match judged {
                None => Attempted::Solved { summary, output },
                // A check failed: what the work said it did is part of the lesson.
                Some(Attempted::Failed {
                    class,
                    criterion,
                    message,
                    mut ended,
                    blocked,
                }) => {
                    ended.summary = Some(summary).filter(|s| !s.trim().is_empty());
                    Attempted::Failed {
                        class,
                        criterion,
                        message,
                        ended,
                        blocked,
                    }
                }
                Some(other) => other,
            }
        }
    };
    (assignment.atom, attempted)
}

/// The first criterion the validator finds failing (or a cancellation); `None`: all hold.
async fn judge(roles: &Roles, assignment: &Assignment, work: &Work, cancel: &CancellationToken) -> Option<Attempted> {
    for criterion in assignment.spec.criteria() {
        if matches!(criterion, Criterion::Run | Criterion::Or) {
            continue;
        }
        match roles.validator.judge(&criterion, assignment, work, cancel).await {
            Judgement::Passed | Judgement::NotJudged => {}
            Judgement::Cancelled => return Some(Attempted::Cancelled),
            Judgement::OverBudget(message) => return Some(Attempted::OverBudget(message)),
            Judgement::Failed { class, message, ended } => {
                return Some(Attempted::Failed {
                    class,
                    criterion,
                    message,
                    ended,
                    blocked: None,
                });
            }
        }
    }
    None
}

impl Engine<'_> {
    /// One round: what finished, what failed for good, and whether it was
    /// cancelled. With `verify: every_iteration` the base case is checked
    /// after every fan-in of results while the rest keeps running — one check
    /// at a time, results that arrive meanwhile going to the next — and each
    /// check that finds it unmet ends an iteration. When it holds, in-flight
    /// work is cancelled and nothing more starts.
    pub(super) async fn round(&mut self) -> Result<Round, EngineError> {
        let parallel = self.state.objective.constraints.max_parallel_agents().max(1) as usize;
        let max_attempts = self.state.objective.constraints.max_retries().saturating_add(1);
        let eager = self.state.objective.constraints.verify() == VerifyPolicy::EveryIteration;
        let mut d = Dispatch::default();
        self.round_cancel = self.cancel.child_token();
        self.attempt_tokens.clear();
        self.interrupted.clear();
        loop {
            // The check of what came in starts before new work (work that
            // would run alone waits for it: a chain halts at once).
            if eager
                && d.round.unchecked
                && d.verification.is_none()
                && !d.halted
                && !self.cancel.is_cancelled()
                && !self.state.control.stop_requested
            {
                d.verification = self.start_verification(self.round_cancel.child_token());
                d.round.unchecked = false;
            }
            if d.round.failures.is_empty()
                && !d.halted
                && !self.round_cancel.is_cancelled()
                && !self.state.control.stop_requested
            {
                // A backtrack's undo comes first: the next alternative starts
                // from a tree without the abandoned branch's files.
                if self.landings.owes() {
                    self.undo_abandoned().await?;
                }
                self.start_races(&mut d, parallel).await?;
                self.make_choices(&mut d).await?;
                self.dispatch_ready(&mut d, parallel)?;
            }
            if self.state.control.stop_requested {
                self.cancel.cancel();
            }
            if d.running.is_empty() && d.verification.is_none() {
                break;
            }
            let joined = tokio::select! {
                joined = d.running.join_next_with_id(), if !d.running.is_empty() => joined,
                checked = next_check(&mut d.verification) => {
                    self.checked_in_round(&mut d, checked)?;
                    continue;
                }
                changed = Self::next_change(&mut self.watch) => {
                    self.on_change(changed).await?;
                    continue;
                }
                Some(report) = self.reports.recv() => {
                    self.take_report(report)?;
                    continue;
                }
            };
            let Some((atom, attempted, isolated)) = joined.and_then(|j| d.joined(j)) else {
                continue;
            };
            // What the attempt reported while it worked is journaled before its end.
            self.take_reports()?;
            // A redirect may have removed, overridden or reset the atom while it
            // ran: its result belongs to work that no longer exists.
            if self.state.graph.atoms.get(&atom).map(|a| a.status) == Some(AtomStatus::Running) {
                let cancelled = matches!(attempted, Attempted::Cancelled);
                self.settle(&mut d, atom, attempted, isolated, max_attempts)?;
                d.round.unchecked |= !cancelled;
                // `aot step`: the first fan-in of results ends the iteration;
                // what already runs finishes, nothing more starts.
                d.halted |= !cancelled && self.options.one_iteration;
            } else {
                let attempt = self.state.graph.atoms.get(&atom).map_or(0, |a| a.attempts);
                // What landed stays, recorded (as it always was): its
                // write-ahead record goes.
                if let Some(Isolated::Landed(_, place)) = &isolated {
                    d.to_settle.push(*place);
                }
                self.record_isolated(&atom, attempt, isolated)?;
                // Interrupted by that correction: the journal says why it stopped.
                if let Some(why) = self.interrupted.remove(&atom)
                    && self.state.graph.atoms.contains_key(&atom)
                {
                    self.record(vec![Event::AttemptCancelled { atom, why: Some(why) }])?;
                }
            }
            // The landing is journaled: its write-ahead record goes (awaited
            // here, so no git command of aot's outlives the loop).
            if let Some(workspace) = self.roles.workspace.clone() {
                for place in d.to_settle.drain(..) {
                    workspace.settle(place).await;
                }
            }
            if self.last_save.elapsed() > Duration::from_secs(1) {
                self.save()?;
            }
        }
        if !d.cancelled.is_empty() {
            // Partial results are discarded: the atoms go back to pending, and the
            // interrupted attempts do not count against their retries.
            let events = d
                .cancelled
                .drain(..)
                .map(|atom| {
                    let why = self.interrupted.remove(&atom);
                    Event::AttemptCancelled { atom, why }
                })
                .collect();
            self.record(events)?;
        }
        d.round.cancelled = self.cancel.is_cancelled() || self.state.control.stop_requested;
        Ok(d.round)
    }

    /// Takes in a check made while atoms ran. Held: halt the round, cancelling
    /// what runs. Unmet: the iteration ends — the next starts, unless the
    /// limit is reached (halt, cancelling what runs).
    fn checked_in_round(
        &mut self,
        d: &mut Dispatch,
        checked: Option<super::roles::Checked>,
    ) -> Result<(), EngineError> {
        let Some(verification) = d.verification.take() else {
            return Ok(());
        };
        let Some(evidence) = self.take_check(verification, checked)? else {
            return Ok(());
        };
        // With objective criteria, the meta-validator judges a finished
        // graph: work in flight is not cancelled for a check that may not complete the task.
        let judged_later =
            !self.state.objective.criteria.is_empty() && (!d.running.is_empty() || !self.graph.selected_solved());
        if evidence.exit_code == Some(0) && !judged_later {
            d.round.completed = Some(evidence);
            d.halted = true;
            self.round_cancel.cancel();
            return Ok(());
        }
        d.round.last_check = Some(evidence);
        // Work goes on after this check: the next iteration starts.
        let goes_on = !d.running.is_empty() || d.round.unchecked || self.graph.ready().next().is_some();
        if !goes_on || d.halted {
            return Ok(());
        }
        if self.state.run.iteration >= self.max_iterations() {
            d.round.limit_reached = true;
            d.halted = true;
            self.round_cancel.cancel();
        } else {
            // The journal has every record; the file is saved at the round's
            // end (and every second): a save while an editor writes risks
            // the edit, so the loop does not add saves per check.
            let iteration = self.state.run.iteration + 1;
            self.record(vec![Event::IterationStarted { iteration }])?;
        }
        Ok(())
    }

    /// Journals the start of an attempt and hands it to the worker; `false`
    /// when a redirect folded in with that record removed the atom.
    pub(super) fn start(
        &mut self,
        d: &mut Dispatch,
        atom: &AtomId,
        cancel: CancellationToken,
    ) -> Result<bool, EngineError> {
        let attempt = self.state.graph.atoms.get(atom).map_or(0, |a| a.attempts) + 1;
        self.record(vec![Event::AtomStarted {
            atom: atom.clone(),
            attempt,
        }])?;
        let Some(assignment) = self.assignment(atom, attempt) else {
            return Ok(false);
        };
        self.attempt_tokens.insert(atom.clone(), cancel.clone());
        let placing = super::round::Placing {
            keep_failed: self.options.keep_failed,
            race: d.race_claims.get(atom).cloned(),
        };
        d.spawn(&self.roles, assignment, cancel, placing);
        Ok(true)
    }

    /// Dispatches ready atoms up to `parallel` in flight (with isolation,
    /// each in a copy). One that is the only one to run (a chain, a retry)
    /// starts after the check of what came before, so that a goal reached
    /// halts the run before more work starts and each check ends an
    /// iteration.
    fn dispatch_ready(&mut self, d: &mut Dispatch, parallel: usize) -> Result<(), EngineError> {
        while d.in_flight.len() < parallel && d.round.failures.is_empty() {
            let next: Vec<AtomId> = self
                .graph
                .ready()
                .filter(|id| !d.in_flight.contains(*id))
                .take(2)
                .map(AtomId::from)
                .collect();
            let Some(atom) = next.first().cloned() else {
                return Ok(());
            };
            let alone = next.len() == 1 && d.in_flight.is_empty();
            if alone && d.verification.is_some() {
                // It starts once the check has said the goal does not hold
                // (without isolation it would change the folder the check
                // reads, and a goal its file makes true would cancel it).
                return Ok(());
            }
            let cancel = self.round_cancel.child_token();
            self.start(d, &atom, cancel)?;
        }
        Ok(())
    }

    /// Takes in an attempt's end: a binding, a retry, a block or a failure.
    fn settle(
        &mut self,
        d: &mut Dispatch,
        atom: AtomId,
        attempted: Attempted,
        isolated: Option<Isolated>,
        max_attempts: u32,
    ) -> Result<(), EngineError> {
        let attempt = self.state.graph.atoms.get(&atom).map_or(0, |a| a.attempts);
        // What the attempt changed is part of its record: landed changes go
        // in the binding, discarded ones in the failure (and the correction).
        let discarded = match &isolated {
            Some(Isolated::Discarded { changes, .. }) if !changes.is_empty() => Some(changes.to_string()),
            _ => None,
        };
        match attempted {
            Attempted::OverBudget(message) => {
                // The attempt does not count: with a raised budget it runs again.
                self.record_isolated(&atom, attempt, isolated)?;
                self.record(vec![Event::AttemptCancelled {
                    atom,
                    why: Some(message.clone()),
                }])?;
                d.round.over_budget.get_or_insert(message);
                d.halted = true;
            }
            Attempted::Cancelled => {
                self.record_isolated(&atom, attempt, isolated)?;
                match self.interrupted.remove(&atom) {
                    // Interrupted by a correction while the round goes on: back
                    // to pending now, to run again as the correction left it.
                    Some(why) if !self.round_cancel.is_cancelled() => {
                        self.record(vec![Event::AttemptCancelled { atom, why: Some(why) }])?;
                    }
                    Some(why) => {
                        self.interrupted.insert(atom.clone(), why);
                        d.cancelled.push(atom);
                    }
                    None => d.cancelled.push(atom),
                }
            }
            Attempted::Solved { summary, output } => {
                let changes = match &isolated {
                    Some(Isolated::Landed(landed, _)) if !landed.changes.is_empty() => {
                        Some(landed.changes.listing(BINDING_FILES))
                    }
                    _ => None,
                };
                let settle = match &isolated {
                    Some(Isolated::Landed(_, place)) => Some(*place),
                    _ => None,
                };
                let landed = self.isolated_event(&atom, attempt, isolated);
                let binding = Binding {
                    // A worker's text is bounded and cleaned here, whatever the worker.
                    summary: cut(&redact(&summary, &self.options.secrets), SUMMARY_MAX),
                    output_tail: tail(&redact(&output, &self.options.secrets), BINDING_TAIL),
                    artifacts: Vec::new(),
                    at: self.clock.now(),
                    attempt,
                    changes,
                };
                self.race_won(d, &atom)?;
                // The landing and the solve in one record: a start after a
                // kill finishes a landing whose atom is solved, and takes
                // back one whose atom is not (it runs again).
                let mut events: Vec<Event> = landed.into_iter().collect();
                events.extend(self.graph.solve(&atom, binding));
                self.record(events)?;
                d.to_settle.extend(settle);
                d.round.finished.push((atom, Finish::Solved));
            }
            Attempted::Failed {
                blocked: Some(probe),
                message,
                ..
            } => {
                let message = redact(&format!("{message}; {probe}"), &self.options.secrets);
                self.block(&atom, cut(&message, MESSAGE_MAX))?;
                self.record_isolated(&atom, attempt, isolated)?;
            }
            Attempted::Failed {
                class,
                criterion,
                message,
                mut ended,
                blocked: None,
            } => {
                let mut message = cut(&redact(&message, &self.options.secrets), MESSAGE_MAX);
                ended.summary = ended
                    .summary
                    .map(|s| cut(&redact(&s, &self.options.secrets), SUMMARY_MAX));
                let mut retry = attempt < max_attempts;
                if retry && let Some(before) = self.repeated(&atom, attempt, class, &criterion, &message, &ended) {
                    // No inertia: the next attempt would repeat this one unchanged.
                    retry = false;
                    message.push_str(&format!(
                        "\n(the same failure as attempt {before}: a command atom that fails the same way twice is not retried again)"
                    ));
                }
                ended.discarded = discarded;
                self.failed(d, atom.clone(), attempt, retry, (class, criterion, message, ended))?;
                self.record_isolated(&atom, attempt, isolated)?;
            }
        }
        Ok(())
    }

    /// The attempt before this one when it failed exactly as this one did —
    /// a command atom (an agent's retry is a new conversation), a logical
    /// failure (an environmental one may pass on its own), the same
    /// criterion, exit and message: what a retry would do is already known.
    fn repeated(
        &self,
        atom: &AtomId,
        attempt: u32,
        class: FailureClass,
        criterion: &Criterion,
        message: &str,
        ended: &Ended,
    ) -> Option<u32> {
        let definition = self.state.graph.atoms.get(atom)?;
        if definition.agent.is_some() || definition.run.is_none() || class != FailureClass::Logical {
            return None;
        }
        let before = self.history.of_atom(atom).last()?;
        (before.attempt + 1 == attempt
            && before.class == class
            && before.criterion == *criterion
            && before.message == message
            && before.ended.exit_code == ended.exit_code
            && before.ended.signal == ended.signal)
            .then_some(before.attempt)
    }

    /// Journals what isolation did with an attempt's changes; a landing is
    /// remembered so that a backtrack can undo it.
    pub(super) fn record_isolated(
        &mut self,
        atom: &AtomId,
        attempt: u32,
        isolated: Option<Isolated>,
    ) -> Result<(), EngineError> {
        if let Some(event) = self.isolated_event(atom, attempt, isolated) {
            self.record(vec![event])?;
        }
        Ok(())
    }

    /// The record of what isolation did with an attempt's changes (none
    /// when nothing changed); a landing is remembered for a backtrack's undo.
    fn isolated_event(&mut self, atom: &AtomId, attempt: u32, isolated: Option<Isolated>) -> Option<Event> {
        let event = match isolated {
            Some(Isolated::Landed(landed, _)) if !landed.changes.is_empty() => {
                if let Some(note) = &landed.note {
                    self.observer
                        .warn(&format!("`{atom}`'s changes landed; committing them: {note}"));
                }
                self.landings.landed(atom.clone(), landed.changes.clone());
                Event::ChangesLanded {
                    atom: atom.clone(),
                    attempt,
                    changes: landed.changes,
                    commit: landed.commit,
                }
            }
            Some(Isolated::Discarded { changes, kept }) if !changes.is_empty() || kept.is_some() => {
                Event::ChangesDiscarded {
                    atom: atom.clone(),
                    attempt,
                    changes,
                    kept: kept.map(|p| p.display().to_string()),
                }
            }
            Some(Isolated::Unsettled(why)) => {
                self.observer.warn(&format!(
                    "`{atom}` attempt {attempt}: {why}; your work tree is as it was (the attempt worked in a copy)"
                ));
                return None;
            }
            _ => return None,
        };
        Some(event)
    }

    /// Records a failed attempt: one more try when `retry`, else the atom
    /// fails (and the round with it, unless it lost a race).
    fn failed(
        &mut self,
        d: &mut Dispatch,
        atom: AtomId,
        attempt: u32,
        retry: bool,
        (class, criterion, message, ended): (FailureClass, Criterion, String, Ended),
    ) -> Result<(), EngineError> {
        if retry {
            self.record(vec![Event::AttemptFailed {
                atom,
                attempt,
                class,
                criterion,
                message,
                ended,
            }])?;
            return Ok(());
        }
        self.record(vec![Event::AtomFailed {
            atom: atom.clone(),
            class,
            criterion: criterion.clone(),
            message,
            ended,
        }])?;
        // A losing racer is not a failure of the graph: its OR atom fails
        // only when no alternative is left.
        if !self.race_lost(d, &atom) {
            d.fail(atom, class, criterion);
        }
        Ok(())
    }

    /// Blocks an atom whose environment is down (two independent signals: its
    /// work and its probe failed), and the pending atoms that depend on it
    /// with the same tool.
    fn block(&mut self, atom: &AtomId, reason: String) -> Result<(), EngineError> {
        let mut events = vec![Event::AtomBlocked {
            atom: atom.clone(),
            reason,
        }];
        for dependent in self.cascade(atom) {
            events.push(Event::AtomBlocked {
                atom: dependent,
                reason: format!("depends on blocked `{atom}` with the same tool"),
            });
        }
        self.record(events)?;
        Ok(())
    }

    /// Chooses at every OR atom waiting for a choice (speculative ones being
    /// raced excepted); an OR atom with nothing left to choose fails.
    async fn make_choices(&mut self, d: &mut Dispatch) -> Result<(), EngineError> {
        loop {
            let next = self
                .graph
                .choice_points()
                .find(|g| !d.races.contains_key(*g))
                .map(AtomId::from);
            let Some(group) = next else { return Ok(()) };
            let (events, refused) = self
                .steered(None, |graph, steer, bindings| {
                    let events = graph.choose(&group, steer, bindings);
                    let chosen = events.iter().any(|e| matches!(e, Event::OrChosen { .. }));
                    let refused: Vec<String> = if chosen {
                        Vec::new()
                    } else {
                        graph
                            .untried(&group)
                            .into_iter()
                            .filter_map(|alt| crate::graph::ChoiceOrder::refusal(steer, graph, alt))
                            .collect()
                    };
                    (events, refused)
                })
                .await;
            let chosen = events.iter().any(|e| matches!(e, Event::OrChosen { .. }));
            self.record(events)?;
            if !chosen {
                let message = if refused.is_empty() {
                    "no alternative left to choose".to_string()
                } else {
                    format!("no alternative left that may run: {}", refused.join("; "))
                };
                self.record(vec![Event::AtomFailed {
                    atom: group.clone(),
                    class: FailureClass::Logical,
                    criterion: Criterion::Or,
                    message,
                    ended: Ended::default(),
                }])?;
                d.fail(group, FailureClass::Logical, Criterion::Or);
                return Ok(());
            }
        }
    }

    /// Returns whether every dependency of an atom is solved.
    pub(super) fn deps_solved(&self, atom: &str) -> bool {
        self.state
            .graph
            .atoms
            .get(atom)
            .is_some_and(|a| a.deps.iter().all(|d| self.graph.status(d) == Some(AtomStatus::Solved)))
    }

    /// Returns the atoms that depend (transitively) on `atom` and use its tool.
    fn cascade(&self, atom: &str) -> Vec<AtomId> {
        let atoms = &self.state.graph.atoms;
        let tool = atoms.get(atom).and_then(Atom::tool);
        let mut out = Vec::new();
        let mut frontier = vec![AtomId::from(atom)];
        let mut seen = HashSet::new();
        while let Some(current) = frontier.pop() {
            for (id, a) in atoms {
                if a.deps.contains(&current) && seen.insert(id.clone()) {
                    frontier.push(id.clone());
                    if a.tool() == tool && matches!(a.status, AtomStatus::Pending) {
                        out.push(id.clone());
                    }
                }
            }
        }
        out
    }

    /// The environment of an attempt: the atom's own variables, its
    /// dependencies' bindings, `AOT_ATOM`, `AOT_ATTEMPT`, `AOT_STATE`, and on
    /// a retry `AOT_CORRECTION` (the last failure and the ones before it).
    fn attempt_env(&self, atom_id: &str, attempt: u32, corrections: &[Reflection]) -> Vec<(String, String)> {
        let atom = self.state.graph.atoms.get(atom_id);
        let own = atom.map(|a| &a.env);
        let mut env: Vec<(String, String)> = own.into_iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.extend(template::binding_env(&self.state, atom_id));
        env.push(("AOT_ATOM".into(), atom_id.to_string()));
        env.push(("AOT_ATTEMPT".into(), attempt.to_string()));
        env.push(("AOT_STATE".into(), self.state_path().display().to_string()));
        // Which runner started it: a later runner stops what a killed one left.
        env.push((super::roles::RUNNER_VAR.into(), std::process::id().to_string()));
        if let Some(signal) = atom.and_then(|atom| {
            CorrectionSignal::after(atom_id, atom, attempt, corrections, self.roles.workspace.is_some())
        }) {
            env.push((
                "AOT_CORRECTION".into(),
                serde_json::to_string(&signal).unwrap_or_default(),
            ));
        }
        env
    }

    /// The assignment for an attempt; `None` when the atom no longer exists.
    fn assignment(&self, atom_id: &str, attempt: u32) -> Option<Assignment> {
        let atom = self.state.graph.atoms.get(atom_id)?;
        let bindings = &self.state.bindings;
        // Commands read bindings through variables; an agent's task is prose.
        let mut shell = template::ShellText::default();
        let mut command = |text: &String| shell.render(text, bindings).unwrap_or_else(|_| text.clone());
        let mut spec = atom.clone();
        spec.run = atom.run.as_ref().map(&mut command);
        spec.probe = atom.probe.as_ref().map(&mut command);
        spec.check = atom.check.iter().map(&mut command).collect();
        spec.agent = atom
            .agent
            .as_ref()
            .map(|text| template::render(text, bindings).unwrap_or_else(|_| text.clone()));
        let cwd = atom.cwd.as_ref().map_or_else(|| self.dir.clone(), |c| self.dir.join(c));
        let corrections = self.history.of_atom(atom_id).to_vec();
        let mut env = self.attempt_env(atom_id, attempt, &corrections);
        env.extend(shell.env);
        let mut must_not = Steer::new(&self.state.graph.atoms, &self.state.run.ggs).blocked_constraints();
        must_not.extend(
            self.must_not
                .iter()
                .filter(|m| !must_not.contains(m))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let brief = Brief {
            goal: self.state.objective.goal.clone().unwrap_or_default(),
            deps: atom
                .deps
                .iter()
                .filter_map(|d| Some((d.clone(), self.state.bindings.get(d)?.summary.clone())))
                .collect(),
            corrections,
            must_not,
            should_prefer: self.should_prefer.iter().cloned().collect(),
            isolated: self.roles.workspace.is_some(),
            // The user's explicit choice of an atom overrides the blocked sets.
            blocked_tools: if self.state.run.ggs.allowed.contains(atom_id) {
                Vec::new()
            } else {
                self.state.run.ggs.blocked_tools.iter().cloned().collect()
            },
            confirmed: self.options.yes,
        };
        Some(Assignment {
            atom: atom_id.into(),
            attempt,
            spec,
            cwd,
            root: self.dir.clone(),
            env,
            workers: self.state.workers.clone(),
            llm: self.state.llm.clone(),
            brief,
            report: self.reporter.clone(),
        })
    }
}
