//! The loop: observe → update → verify → continue or stop.
//!
//! A run passes the gate (the objective is aligned and the graph is
//! runnable), verifies the base case first, then works in iterations. An
//! iteration is a *round*: choices are made at OR atoms, ready atoms are
//! dispatched up to `max_parallel_agents` and replaced as they finish, and
//! failed attempts are retried with a correction signal, until nothing is
//! ready or an atom fails for good. At the round's end (the fan-in gate) a
//! round with failures, or a finished graph whose base case fails, goes to
//! the Goal Gradient Solver, whose directive is applied to the graph
//! ([`replan`]); the file is saved, and the base case is verified per
//! `constraints.verify`. The run stops with exactly one reason.
//!
//! Every transition is journaled as it happens; the state file is written at
//! iteration boundaries and at most once a second in between.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::graph::WorkGraph;
use crate::journal::event::{Event, Record};
use crate::journal::{Folded, History, Reflection};
use crate::model::Criterion;
use crate::model::time::Clock;
use crate::state::template;
use crate::state::{
    Atom, AtomId, AtomStatus, Binding, Evidence, FailureClass, StateFile, StopReason, StopRecord, VerifyPolicy,
};
use crate::store::{Store, StoreError};
use crate::workers::command::{self, CommandSpec, Exit};

/// Bytes of output a binding keeps (the end): bindings stand in for solved
/// atoms in the state file, so 10,000 of them must stay far below the file
/// size limit. Failure messages and base-case evidence keep the worker's 4 KB.
pub const BINDING_TAIL: usize = 1024;

/// Returns the last `max` bytes of `text`, cut after a line break when one is near.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    match cut.find('\n') {
        Some(i) if i + 1 < cut.len() => cut[i + 1..].to_string(),
        _ => cut.to_string(),
    }
}

mod recall;
mod replan;

pub use recall::dream_once;

/// How an atom that finished in a round ended (the fan-in gate's input).
#[derive(Debug, Clone)]
enum Finish {
    Solved,
    Failed { class: FailureClass, criterion: Criterion },
}

/// What a round did.
#[derive(Debug, Default)]
struct Round {
    /// Atoms that finished for good, in order.
    finished: Vec<(AtomId, Finish)>,
    /// Atoms that failed for good (losing racers excluded).
    failures: Vec<(AtomId, FailureClass)>,
    /// Whether the run was stopped meanwhile.
    cancelled: bool,
}

/// The prompt template for agent atoms (`prompts/agent.md`).
pub const AGENT_PROMPT: &str = include_str!("../../prompts/agent.md");

/// How a run is configured beyond the state file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Overrides `constraints.max_iterations`.
    pub max_iterations: Option<u32>,
    /// Run one iteration, then pause (`aot step`).
    pub one_iteration: bool,
    /// The agent command (`AOT_AGENT_CMD`), overriding `workers.agent.command`.
    pub agent_command: Option<String>,
    /// The memory journal (`--memory`, `AOT_MEMORY`); `None`: no memory.
    pub memory: Option<PathBuf>,
    /// Proceed with alternatives memory marks Caution without asking (`--yes`).
    pub yes: bool,
    /// How often the Dreamer runs in the background of a long run (default 5 minutes).
    pub dream_every: Option<Duration>,
}

/// Receives every journaled record as the run makes it.
pub trait Observer: Send {
    /// Called after a record is journaled and applied to `state`.
    fn record(&mut self, record: &Record, state: &StateFile);

    /// Called when something needs the user's attention but the run goes on
    /// (e.g. a hand edit that could not be applied and was saved aside).
    fn warn(&mut self, message: &str) {
        let _ = message;
    }

    /// Asks the user a yes/no question (memory's Caution gate); `false` when
    /// nobody can answer.
    fn confirm(&mut self, question: &str) -> bool {
        let _ = question;
        false
    }
}

/// Why the engine could not run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a run ended: a stop record, or a pause after `aot step`.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// The run stopped for this reason.
    Stopped(StopRecord),
    /// One iteration ran (`aot step`); `aot step` or `aot start` continues.
    Paused,
}

/// Returns what the objective still lacks to be aligned (empty = aligned).
pub fn alignment_gaps(state: &StateFile) -> Vec<&'static str> {
    let o = &state.objective;
    let mut gaps = Vec::new();
    let blank = |v: &Option<String>| v.as_deref().is_none_or(|s| s.trim().is_empty());
    if blank(&o.goal) {
        gaps.push("objective.goal (what the work is for)");
    }
    if blank(&o.background_intent) {
        gaps.push("objective.background_intent (why it matters)");
    }
    if blank(&o.deliverables) {
        gaps.push("objective.deliverables (what should be produced)");
    }
    if blank(&o.definition_of_done) {
        gaps.push("objective.definition_of_done (when it is done, in words)");
    }
    if o.base_case.is_none() {
        gaps.push("objective.base_case.command (a command whose exit 0 means done)");
    }
    if state.graph.atoms.is_empty() {
        gaps.push("graph.atoms (at least one atom)");
    }
    gaps
}

/// One attempt's context, handed to the worker as `AOT_CORRECTION`.
#[derive(Debug, Clone, Serialize)]
pub struct CorrectionSignal {
    /// The atom.
    pub atom: AtomId,
    /// The attempt about to run.
    pub attempt: u32,
    /// The criterion that failed last time.
    pub failed_criterion: Criterion,
    /// Logical or environmental.
    pub class: FailureClass,
    /// What was wrong, from the tool's output.
    pub message: String,
    /// Every earlier failed attempt, oldest first.
    pub history: Vec<Reflection>,
}

/// Work handed to a worker task.
#[derive(Debug, Clone)]
struct Job {
    atom: AtomId,
    run: CommandSpec,
    checks: Vec<CommandSpec>,
    probe: Option<CommandSpec>,
    environmental_codes: Vec<i32>,
}

/// What a worker task reports.
#[derive(Debug)]
enum JobResult {
    Solved {
        summary: String,
        output: String,
    },
    Failed {
        class: FailureClass,
        criterion: Criterion,
        message: String,
        probe_failed: Option<String>,
    },
    Cancelled,
}

fn classify(exit: &Exit, environmental: &[i32]) -> FailureClass {
    match exit {
        Exit::Code(code) if !environmental.contains(code) => FailureClass::Logical,
        _ => FailureClass::Environmental,
    }
}

fn describe(exit: &Exit) -> String {
    match exit {
        Exit::Code(code) => format!("exit {code}"),
        Exit::Signal(signal) => format!("killed by signal {signal}"),
        Exit::TimedOut => "timed out".to_string(),
        Exit::Cancelled => "cancelled".to_string(),
        Exit::SpawnFailed(why) => why.clone(),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

fn last_lines(output: &str, n: usize) -> String {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Returns `what`, followed by the last lines of `output` when there are any.
fn with_output(what: String, output: &str) -> String {
    let tail = last_lines(output, 5);
    if tail.is_empty() {
        what
    } else {
        format!("{what}: {tail}")
    }
}

async fn run_job(job: Job, cancel: CancellationToken) -> (AtomId, JobResult) {
    let result = command::run(&job.run, &cancel).await;
    if result.exit == Exit::Cancelled {
        return (job.atom, JobResult::Cancelled);
    }
    if !result.success() {
        let class = classify(&result.exit, &job.environmental_codes);
        let mut probe_failed = None;
        if class == FailureClass::Environmental
            && let Some(probe) = &job.probe
        {
            let p = command::run(probe, &cancel).await;
            if !p.success() && p.exit != Exit::Cancelled {
                probe_failed = Some(format!(
                    "probe `{}`: {}",
                    probe.command,
                    with_output(describe(&p.exit), &p.output)
                ));
            }
        }
        let message = with_output(describe(&result.exit), &result.output);
        return (
            job.atom,
            JobResult::Failed {
                class,
                criterion: Criterion::Run,
                message,
                probe_failed,
            },
        );
    }
    for (i, check) in job.checks.iter().enumerate() {
        let c = command::run(check, &cancel).await;
        if c.exit == Exit::Cancelled {
            return (job.atom, JobResult::Cancelled);
        }
        if !c.success() {
            return (
                job.atom,
                JobResult::Failed {
                    class: FailureClass::Logical,
                    criterion: Criterion::Check {
                        index: i,
                        command: check.command.clone(),
                    },
                    message: with_output(describe(&c.exit), &c.output),
                    probe_failed: None,
                },
            );
        }
    }
    (
        job.atom,
        JobResult::Solved {
            summary: result.summary,
            output: result.output,
        },
    )
}

/// The engine's picture of the work: the state file, the work graph and the
/// correction history, folded from the same records by the one fold.
struct Views<'v> {
    state: &'v mut StateFile,
    graph: &'v mut WorkGraph,
    history: &'v mut History,
}

impl Folded for Views<'_> {
    fn state(&self) -> &StateFile {
        self.state
    }

    fn apply(&mut self, record: &Record) {
        crate::journal::fold::apply_with(self.state, &mut [self.graph, self.history], record);
    }
}

/// The running loop over one state file.
pub struct Engine<'a> {
    store: &'a mut Store,
    state: StateFile,
    graph: WorkGraph,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    options: Options,
    observer: &'a mut dyn Observer,
    cancel: CancellationToken,
    history: History,
    last_save: Instant,
    watch: Option<crate::store::watch::Watch>,
    /// Cancels the current round only (a redirect); `cancel` ends the run.
    round_cancel: CancellationToken,
    /// The memory as loaded, plus what this run wrote.
    memory: crate::memory::Memory,
    writer: Option<recall::MemoryWriter>,
    /// Caution answers of this run, by `space on entity`.
    cautions: HashMap<String, bool>,
    /// MUST NOT and SHOULD PREFER from this run's calibrations (agent prompts).
    must_not: std::collections::BTreeSet<String>,
    should_prefer: std::collections::BTreeSet<String>,
    megram_seq: u64,
}

impl<'a> Engine<'a> {
    /// Prepares a run over `state` (as returned by `Store::open`).
    pub fn new(
        store: &'a mut Store,
        state: StateFile,
        clock: Arc<dyn Clock>,
        options: Options,
        observer: &'a mut dyn Observer,
        cancel: CancellationToken,
    ) -> Self {
        let dir = store.paths().dir().to_path_buf();
        let graph = WorkGraph::new(&state);
        let history = crate::journal::read(&store.paths().journal)
            .map(|contents| History::of(&contents.records))
            .unwrap_or_default();
        // Memory helps but never stops a run: a memory that cannot be read is
        // reported and the run goes on without it.
        let mut file = options.memory.clone().map(crate::memory::MemoryFile::new);
        let memory = match file.as_ref().map(|f| f.load()) {
            Some(Ok(loaded)) => {
                if !loaded.skipped.is_empty() {
                    observer.warn(&format!(
                        "memory: {} line(s) of {} could not be read and are ignored",
                        loaded.skipped.len(),
                        options.memory.as_deref().unwrap_or(std::path::Path::new("")).display()
                    ));
                }
                loaded.memory
            }
            Some(Err(e)) => {
                // One report: a memory that cannot be read is not written either.
                observer.warn(&format!("memory could not be read ({e}); the run goes on without it"));
                file = None;
                crate::memory::Memory::default()
            }
            None => crate::memory::Memory::default(),
        };
        let writer = file.map(recall::MemoryWriter::start);
        Self {
            store,
            state,
            graph,
            dir,
            clock,
            options,
            observer,
            cancel,
            history,
            last_save: Instant::now(),
            watch: None,
            round_cancel: CancellationToken::new(),
            memory,
            writer,
            cautions: HashMap::new(),
            must_not: Default::default(),
            should_prefer: Default::default(),
            megram_seq: 0,
        }
    }

    /// Runs a store operation that folds what it journals (and what other
    /// processes journaled) into the state, the graph and the history at once.
    fn with_views<R>(&mut self, f: impl FnOnce(&mut Store, &mut dyn Folded) -> R) -> R {
        let Engine {
            store,
            state,
            graph,
            history,
            ..
        } = self;
        f(store, &mut Views { state, graph, history })
    }

    /// Returns the current state.
    pub fn state(&self) -> &StateFile {
        &self.state
    }

    /// Journals `events` (none: only catch up on other processes' records) and
    /// folds every new record into the graph and the observer.
    fn record(&mut self, events: Vec<Event>) -> Result<Vec<Record>, EngineError> {
        let records = self.with_views(|store, views| store.record(views, events))?;
        for record in &records {
            self.observer.record(record, &self.state);
        }
        Ok(records)
    }

    fn save(&mut self) -> Result<(), EngineError> {
        // An edit the file holds now (an editor may be half-way through writing
        // it) is taken in by the hand-edit path once the file is quiet.
        self.with_views(|store, views| store.commit_or_defer(views, Vec::new()))?;
        self.last_save = Instant::now();
        self.report_preserved();
        Ok(())
    }

    /// Reports edits that landed while the file was being saved (kept aside).
    fn report_preserved(&mut self) {
        for kept in self.store.take_preserved() {
            self.observer.warn(&format!(
                "the file was edited while aot was saving it; that edit is kept as {} — apply it again",
                kept.display()
            ));
        }
    }

    fn stop(&mut self, reason: StopReason, message: String, evidence: Option<Evidence>) -> Result<Ended, EngineError> {
        let final_result = (reason == StopReason::Completed).then(|| Box::new(self.accepted()));
        if reason == StopReason::Completed {
            self.remember_end(true, &message);
        }
        self.stop_with(reason, message, evidence, final_result)
    }

    fn stop_with(
        &mut self,
        reason: StopReason,
        message: String,
        evidence: Option<Evidence>,
        final_result: Option<Box<crate::ggs::FinalResult>>,
    ) -> Result<Ended, EngineError> {
        let stop = StopRecord {
            reason,
            at: self.clock.now(),
            message,
            evidence,
            final_result,
        };
        self.record(vec![Event::RunStopped { stop: stop.clone() }])?;
        // The last save does not wait for an editor: an edit it cannot merge is
        // left in the file, aot's document is kept aside, and the run still ends
        // with its reason (everything is in the journal).
        match self.with_views(|store, views| store.commit(views, Vec::new())) {
            Ok(_) => self.report_preserved(),
            Err(conflict @ StoreError::Conflict { .. }) => self.observer.warn(&conflict.to_string()),
            Err(other) => return Err(other.into()),
        }
        Ok(Ended::Stopped(stop))
    }

    fn stop_manual(&mut self) -> Result<Ended, EngineError> {
        let message = match &self.state.control.stop_reason {
            Some(reason) => format!("stopped by the user: {reason}"),
            None => "stopped by the user".to_string(),
        };
        self.stop(StopReason::Manual, message, None)
    }

    fn agent_command(&self) -> Option<String> {
        self.options
            .agent_command
            .clone()
            .or_else(|| self.state.workers.as_ref()?.agent.as_ref().map(|a| a.command.clone()))
    }

    /// Folds in what other processes recorded (e.g. `aot stop`) and cancels
    /// in-flight work when a stop was requested.
    fn sync_external(&mut self) -> Result<(), EngineError> {
        let records = self.record(Vec::new())?;
        if self.state.control.stop_requested {
            self.cancel.cancel();
        }
        // A redirect changed the work: what is in flight was planned for the old
        // graph, so it is interrupted and its results discarded; the loop goes on.
        let corrected = records.iter().any(|r| {
            matches!(
                r.event,
                Event::CorrectionRecorded { .. } | Event::UserEdited { .. } | Event::Snapshot { .. }
            )
        });
        if corrected {
            self.round_cancel.cancel();
        }
        Ok(())
    }

    /// Waits for the next change of the watched files (forever, without a watch).
    async fn next_change(watch: &mut Option<crate::store::watch::Watch>) -> crate::store::watch::Changed {
        match watch {
            Some(w) => match w.changes.recv().await {
                Some(changed) => changed,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }

    /// Reacts to a change of the watched files: other processes' journal
    /// records, or a hand edit of the state file.
    async fn on_change(&mut self, changed: crate::store::watch::Changed) -> Result<(), EngineError> {
        match changed {
            crate::store::watch::Changed::Journal => self.sync_external(),
            crate::store::watch::Changed::State if self.store.disk_is_ours() => Ok(()),
            crate::store::watch::Changed::State => self.take_hand_edit().await,
        }
    }

    /// Takes in a hand edit of the state file: a valid one becomes corrections
    /// (as a redirect would), an invalid one or one of engine-owned fields is
    /// saved aside and reported, and the loop goes on with its last good state.
    async fn take_hand_edit(&mut self) -> Result<(), EngineError> {
        // Another aot process (stop, redirect) writes through the journal: such a
        // file is explained by it and needs no waiting.
        self.sync_external()?;
        if matches!(
            self.with_views(|store, views| store.hand_edit(views))?,
            crate::store::DiskEdit::None
        ) {
            return Ok(());
        }
        // Editors write in several steps (truncate and write, chunks, rename):
        // wait until the file has been quiet for a moment, then read it once.
        loop {
            let quiet = tokio::time::timeout(Duration::from_millis(100), Self::next_change(&mut self.watch)).await;
            if quiet.is_err() {
                break;
            }
        }
        // Stops and redirects that arrived meanwhile are taken in first.
        self.sync_external()?;
        for _ in 0..10 {
            let seen = match self.with_views(|store, views| store.hand_edit(views))? {
                crate::store::DiskEdit::None => return Ok(()),
                crate::store::DiskEdit::Invalid {
                    diagnostics,
                    hash,
                    text,
                } => {
                    let aside = self.store.save_aside(&text)?;
                    self.observer.warn(&format!(
                        "{}the edit was not applied; it is saved as {} and the file holds the last good state",
                        diagnostics.render(false),
                        aside.display()
                    ));
                    hash
                }
                crate::store::DiskEdit::Edited {
                    before,
                    after,
                    hash,
                    text,
                } => {
                    match crate::correct::from_edit(&before, &after.state, self.clock.now()) {
                        Ok(events) => {
                            let corrected = events.iter().any(|e| matches!(e, Event::CorrectionRecorded { .. }));
                            self.record(events)?;
                            if corrected {
                                self.round_cancel.cancel();
                            }
                            if self.state.control.stop_requested {
                                self.cancel.cancel();
                            }
                        }
                        Err(refused) => {
                            let aside = self.store.save_aside(&text)?;
                            self.observer.warn(&format!(
                                "hand edit not applied: {refused}; it is saved as {}",
                                aside.display()
                            ));
                        }
                    }
                    hash
                }
            };
            if self.with_views(|store, views| store.overwrite_if(views, seen))? {
                self.report_preserved();
                return Ok(());
            }
        }
        Ok(())
    }

    /// Runs the loop until a stop reason (or one iteration, for `aot step`).
    pub async fn run(mut self) -> Result<Ended, EngineError> {
        let dreamer = self.start_dreamer(self.options.dream_every.unwrap_or(Duration::from_secs(300)));
        let ended = self.run_loop().await;
        if let Some(dreamer) = dreamer {
            dreamer.abort();
        }
        // Every Megram of the run is written before the run reports its end.
        if let Some(writer) = &mut self.writer {
            writer.finish();
            if let Some(error) = writer.take_error() {
                self.observer.warn(&format!(
                    "memory could not be written ({error}); the run went on without it"
                ));
            }
        }
        ended
    }

    async fn run_loop(&mut self) -> Result<Ended, EngineError> {
        let paths = self.store.paths().clone();
        // Without a watch (an unsupported file system), requests are still seen
        // at the loop's next journal write.
        self.watch = crate::store::watch::watch(&paths.state, &paths.journal).ok();
        let gaps = alignment_gaps(&self.state);
        if !gaps.is_empty() {
            let message = format!("not aligned; missing: {}", gaps.join("; "));
            return self.stop(StopReason::Gate, message, None);
        }
        let agents: Vec<&str> = self
            .state
            .graph
            .atoms
            .iter()
            .filter(|(_, a)| a.agent.is_some())
            .map(|(id, _)| id.as_str())
            .collect();
        if !agents.is_empty() && self.agent_command().is_none() {
            let message = format!(
                "agent atoms ({}) need an agent command: set workers.agent.command in the state file or AOT_AGENT_CMD",
                agents.join(", ")
            );
            return self.stop(StopReason::Gate, message, None);
        }
        // A new run starts after the user had the chance to fix what blocked the
        // last one; work a crash interrupted does not count as an attempt.
        let with = |status: AtomStatus| -> Vec<AtomId> {
            let atoms = &self.state.graph.atoms;
            atoms
                .iter()
                .filter(|(_, a)| a.status == status)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let (blocked, interrupted) = (with(AtomStatus::Blocked), with(AtomStatus::Running));
        let mut events: Vec<Event> = interrupted
            .into_iter()
            .map(|atom| Event::AttemptCancelled { atom })
            .collect();
        if !blocked.is_empty() {
            events.push(Event::AtomsReset { atoms: blocked });
        }
        if self.state.control.stop_requested {
            // A stop requested while nothing ran does not stop this new run.
            let control = crate::state::Control {
                stop_requested: false,
                stop_reason: None,
                ..self.state.control.clone()
            };
            events.push(Event::ControlSet { control });
        }
        events.push(Event::RunStarted {
            pid: std::process::id(),
        });
        self.record(events)?;

        // The base case may already hold: then there is nothing to do.
        if let Some(evidence) = self.verify().await?
            && evidence.exit_code == Some(0)
        {
            return self.stop(StopReason::Completed, "the base case holds".into(), Some(evidence));
        }
        if self.cancel.is_cancelled() {
            return self.stop_manual();
        }
        // A failure the last run did not get to recover from goes to GGS first.
        let unrecovered = self.unrecovered();
        if !unrecovered.is_empty()
            && let Some(ended) = self.replan(&[], unrecovered, None)?
        {
            return Ok(ended);
        }

        let max_iterations = self
            .options
            .max_iterations
            .unwrap_or_else(|| self.state.objective.constraints.max_iterations());
        loop {
            if self.state.run.iteration >= max_iterations {
                let message = format!("{max_iterations} iterations done and the base case does not hold");
                return self.stop(StopReason::IterationLimit, message, None);
            }
            let iteration = self.state.run.iteration + 1;
            self.record(vec![Event::IterationStarted { iteration }])?;
            let round = self.round().await?;
            if round.cancelled {
                return self.stop_manual();
            }
            if !round.failures.is_empty()
                && let Some(ended) = self.replan(&round.finished, round.failures, None)?
            {
                return Ok(ended);
            }
            self.save()?;
            let policy = self.state.objective.constraints.verify();
            let graph_done = self.graph.selected_solved();
            if (policy == VerifyPolicy::EveryIteration || graph_done)
                && let Some(evidence) = self.verify().await?
            {
                if evidence.exit_code == Some(0) {
                    return self.stop(StopReason::Completed, "the base case holds".into(), Some(evidence));
                }
                if graph_done {
                    if let Some(ended) = self.replan(&round.finished, Vec::new(), Some(&evidence))? {
                        return Ok(ended);
                    }
                    self.save()?;
                }
            }
            if self.cancel.is_cancelled() {
                return self.stop_manual();
            }
            if self.graph.ready().next().is_none() && self.graph.choice_points().next().is_none() {
                let blocked: Vec<AtomId> = self
                    .state
                    .graph
                    .atoms
                    .iter()
                    .filter(|(id, a)| a.status == AtomStatus::Blocked && self.graph.is_selected(id))
                    .map(|(id, _)| id.clone())
                    .collect();
                if !blocked.is_empty() {
                    let reasons: Vec<String> = blocked.iter().map(|id| self.block_reason(id)).collect();
                    let message = format!(
                        "blocked: {}; fix the environment, then `aot start` again",
                        reasons.join("; ")
                    );
                    return self.stop(StopReason::Blocked, message, None);
                }
                let failed: Vec<String> = self
                    .state
                    .graph
                    .atoms
                    .iter()
                    .filter(|(id, a)| a.status == AtomStatus::Failed && self.graph.is_selected(id))
                    .map(|(id, _)| self.last_failure(id))
                    .collect();
                let message = if failed.is_empty() {
                    "nothing left that can run".to_string()
                } else {
                    format!("nothing left that can run; failed: {}", failed.join("; "))
                };
                return self.stop(StopReason::Exhausted, message, None);
            }
            if self.options.one_iteration {
                self.record(vec![Event::RunPaused {}])?;
                self.save()?;
                return Ok(Ended::Paused);
            }
        }
    }

    /// Returns "`id`: criterion: message" from the atom's last failure in the trail.
    fn last_failure(&self, id: &str) -> String {
        match self.failure_of(id) {
            Some((_, criterion, message)) => format!("`{id}` ({criterion}): {}", first_line(message)),
            None => format!("`{id}`"),
        }
    }

    fn block_reason(&self, id: &str) -> String {
        self.history
            .of_atom(id)
            .last()
            .map_or_else(|| format!("`{id}` is blocked"), |r| format!("`{id}`: {}", r.message))
    }

    /// Runs the base case; `None` if there is none.
    async fn verify(&mut self) -> Result<Option<Evidence>, EngineError> {
        let Some(base) = self.state.objective.base_case.clone() else {
            return Ok(None);
        };
        let spec = CommandSpec {
            command: base.command.clone(),
            cwd: self.dir.clone(),
            env: vec![("AOT_STATE".into(), self.store.paths().state.display().to_string())],
            stdin: None,
            timeout: Some(base.timeout()),
        };
        // A long base case (a test suite) must not delay a stop request.
        let token = self.cancel.clone();
        let command = command::run(&spec, &token);
        tokio::pin!(command);
        let result = loop {
            tokio::select! {
                result = &mut command => break result,
                changed = Self::next_change(&mut self.watch) => self.on_change(changed).await?,
            }
        };
        if result.exit == Exit::Cancelled {
            return Ok(None);
        }
        let evidence = Evidence {
            command: base.command,
            exit_code: result.code(),
            output_tail: result.output,
            at: self.clock.now(),
            duration_ms: result.duration.as_millis() as u64,
        };
        self.record(vec![Event::BaseCaseChecked {
            evidence: evidence.clone(),
        }])?;
        Ok(Some(evidence))
    }

    /// One round: what finished, what failed for good, and whether it was cancelled.
    async fn round(&mut self) -> Result<Round, EngineError> {
        let parallel = self.state.objective.constraints.max_parallel_agents().max(1) as usize;
        let max_attempts = 1 + self.state.objective.constraints.max_retries();
        let mut running: JoinSet<(AtomId, JobResult)> = JoinSet::new();
        // Which atom each task works on, for a task that panics or is aborted.
        let mut tasks: HashMap<tokio::task::Id, AtomId> = HashMap::new();
        let mut in_flight: HashSet<AtomId> = HashSet::new();
        let mut failures = Vec::new();
        let mut finished: Vec<(AtomId, Finish)> = Vec::new();
        let mut cancelled = Vec::new();
        // Speculative OR atoms being raced: group → (alternative → its cancel token).
        let mut races: HashMap<AtomId, HashMap<AtomId, CancellationToken>> = HashMap::new();
        // The calibrated field of each race: who may run in it, best first.
        let mut race_plans: HashMap<AtomId, Vec<AtomId>> = HashMap::new();
        self.round_cancel = self.cancel.child_token();
        loop {
            if failures.is_empty() && !self.round_cancel.is_cancelled() && !self.state.control.stop_requested {
                // Speculative OR atoms: every eligible alternative runs at once.
                for group in self.speculative_choice_points() {
                    // The race's field is calibrated once: alternatives the blocked
                    // sets refuse never run, and memory's last resorts only when
                    // nothing else may.
                    if !race_plans.contains_key(&group) {
                        let ranked = self.steered(None, |graph, steer, _| {
                            let candidates = graph.untried(&group);
                            crate::graph::ChoiceOrder::rank(steer, graph, &group, &candidates)
                        })?;
                        let preferred: Vec<AtomId> =
                            ranked.iter().filter(|r| !r.last_resort).map(|r| r.id.clone()).collect();
                        let field = if preferred.is_empty() {
                            ranked.into_iter().map(|r| r.id).collect()
                        } else {
                            preferred
                        };
                        race_plans.insert(group.clone(), field);
                    }
                    let untried = self.graph.untried(&group);
                    let racers: Vec<AtomId> = race_plans[&group]
                        .iter()
                        .filter(|alt| untried.contains(&alt.as_str()))
                        .filter(|alt| self.graph.status(alt) == Some(AtomStatus::Pending) && self.deps_solved(alt))
                        .filter(|alt| !in_flight.contains(*alt))
                        .cloned()
                        .collect();
                    for alt in racers {
                        if in_flight.len() >= parallel {
                            break;
                        }
                        let attempt = self.state.graph.atoms[&alt].attempts + 1;
                        self.record(vec![Event::AtomStarted {
                            atom: alt.clone(),
                            attempt,
                        }])?;
                        // A redirect folded in with that record may have removed it.
                        let Some(job) = self.job(&alt, attempt) else { continue };
                        let token = self.cancel.child_token();
                        races
                            .entry(group.clone())
                            .or_default()
                            .insert(alt.clone(), token.clone());
                        tasks.insert(running.spawn(run_job(job, token)).id(), alt.clone());
                        in_flight.insert(alt);
                    }
                }
                let racing: HashSet<AtomId> = races.keys().cloned().collect();
                self.make_choices(&mut failures, &mut finished, &racing)?;
                while in_flight.len() < parallel && failures.is_empty() {
                    let next = self.graph.ready().find(|id| !in_flight.contains(*id)).map(AtomId::from);
                    let Some(atom) = next else { break };
                    let attempt = self.state.graph.atoms[&atom].attempts + 1;
                    self.record(vec![Event::AtomStarted {
                        atom: atom.clone(),
                        attempt,
                    }])?;
                    // A redirect folded in with that record may have removed it.
                    let Some(job) = self.job(&atom, attempt) else { continue };
                    tasks.insert(
                        running.spawn(run_job(job, self.round_cancel.child_token())).id(),
                        atom.clone(),
                    );
                    in_flight.insert(atom);
                }
            }
            if self.state.control.stop_requested {
                self.cancel.cancel();
            }
            if running.is_empty() {
                break;
            }
            let joined = tokio::select! {
                joined = running.join_next_with_id() => joined,
                changed = Self::next_change(&mut self.watch) => {
                    self.on_change(changed).await?;
                    continue;
                }
            };
            let Some(joined) = joined else { break };
            let (atom, result) = match joined {
                Ok((id, (atom, result))) => {
                    tasks.remove(&id);
                    (atom, result)
                }
                // A worker task that panicked or was aborted ends its attempt
                // as an environmental failure: its atom never stays running.
                Err(error) => {
                    let Some(atom) = tasks.remove(&error.id()) else {
                        continue;
                    };
                    let message = format!("the worker task ended abnormally: {error}");
                    let failed = JobResult::Failed {
                        class: FailureClass::Environmental,
                        criterion: Criterion::Run,
                        message,
                        probe_failed: None,
                    };
                    (atom, failed)
                }
            };
            in_flight.remove(&atom);
            // A redirect may have removed, overridden or reset the atom while it
            // ran: its result belongs to work that no longer exists.
            if self.state.graph.atoms.get(&atom).map(|a| a.status) != Some(AtomStatus::Running) {
                continue;
            }
            match result {
                JobResult::Cancelled => cancelled.push(atom),
                JobResult::Solved { summary, output } => {
                    let binding = Binding {
                        summary,
                        output_tail: tail(&output, BINDING_TAIL),
                        artifacts: Vec::new(),
                        at: self.clock.now(),
                        attempt: self.state.graph.atoms[&atom].attempts,
                    };
                    let race = races
                        .iter()
                        .find(|(_, r)| r.contains_key(&atom))
                        .map(|(g, _)| g.clone());
                    if let Some(group) = race {
                        // First success wins the race; the others are cancelled and discarded.
                        let racers = races.remove(&group).unwrap_or_default();
                        let remaining: Vec<AtomId> = self
                            .graph
                            .untried(&group)
                            .into_iter()
                            .filter(|a| *a != atom)
                            .map(AtomId::from)
                            .collect();
                        for (other, token) in &racers {
                            if *other != atom {
                                token.cancel();
                            }
                        }
                        self.record(vec![Event::OrChosen {
                            group,
                            chosen: atom.clone(),
                            remaining,
                            reason: "first to succeed in a speculative race".into(),
                        }])?;
                    }
                    let events = self.graph.solve(&atom, binding);
                    self.record(events)?;
                    finished.push((atom, Finish::Solved));
                }
                JobResult::Failed {
                    class,
                    criterion,
                    message,
                    probe_failed,
                } => {
                    let attempt = self.state.graph.atoms.get(atom.as_str()).map_or(0, |a| a.attempts);
                    if let Some(probe) = probe_failed {
                        // Two independent signals: the environment is down, not the approach.
                        let reason = format!("{message}; {probe}");
                        let mut events = vec![Event::AtomBlocked {
                            atom: atom.clone(),
                            reason: reason.clone(),
                        }];
                        for dependent in self.cascade(&atom) {
                            events.push(Event::AtomBlocked {
                                atom: dependent,
                                reason: format!("depends on blocked `{atom}` with the same tool"),
                            });
                        }
                        self.record(events)?;
                    } else if attempt < max_attempts {
                        self.record(vec![Event::AttemptFailed {
                            atom,
                            attempt,
                            class,
                            criterion,
                            message,
                        }])?;
                    } else {
                        self.record(vec![Event::AtomFailed {
                            atom: atom.clone(),
                            class,
                            criterion: criterion.clone(),
                            message,
                        }])?;
                        let racer = races.values_mut().any(|r| r.remove(&atom).is_some());
                        races.retain(|_, r| !r.is_empty());
                        // A losing racer is not a failure of the graph: its OR atom
                        // fails only when no alternative is left.
                        if !racer {
                            failures.push((atom.clone(), class));
                            finished.push((atom, Finish::Failed { class, criterion }));
                        }
                    }
                }
            }
            if self.last_save.elapsed() > Duration::from_secs(1) {
                self.save()?;
            }
        }
        if !cancelled.is_empty() {
            // Partial results are discarded: the atoms go back to pending, and the
            // interrupted attempts do not count against their retries.
            self.record(
                cancelled
                    .into_iter()
                    .map(|atom| Event::AttemptCancelled { atom })
                    .collect(),
            )?;
        }
        Ok(Round {
            finished,
            failures,
            cancelled: self.cancel.is_cancelled() || self.state.control.stop_requested,
        })
    }

    /// Chooses at every OR atom waiting for a choice; an OR atom with nothing
    /// left to choose fails.
    fn make_choices(
        &mut self,
        failures: &mut Vec<(AtomId, FailureClass)>,
        finished: &mut Vec<(AtomId, Finish)>,
        racing: &HashSet<AtomId>,
    ) -> Result<(), EngineError> {
        loop {
            let next = self
                .graph
                .choice_points()
                .find(|g| !racing.contains(*g))
                .map(AtomId::from);
            let Some(group) = next else { return Ok(()) };
            let (events, refused) = self.steered(None, |graph, steer, bindings| {
                let events = graph.choose(&group, steer, bindings);
                let refused: Vec<String> = if events.is_empty() {
                    graph
                        .untried(&group)
                        .into_iter()
                        .filter_map(|alt| crate::graph::ChoiceOrder::refusal(steer, graph, alt))
                        .collect()
                } else {
                    Vec::new()
                };
                (events, refused)
            })?;
            if events.is_empty() {
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
                }])?;
                failures.push((group.clone(), FailureClass::Logical));
                finished.push((
                    group,
                    Finish::Failed {
                        class: FailureClass::Logical,
                        criterion: Criterion::Or,
                    },
                ));
                return Ok(());
            }
            self.record(events)?;
        }
    }

    /// Returns the speculative OR atoms waiting for a choice.
    fn speculative_choice_points(&self) -> Vec<AtomId> {
        self.graph
            .choice_points()
            .filter(|g| self.state.graph.atoms.get(*g).is_some_and(|a| a.speculative))
            .map(AtomId::from)
            .collect()
    }

    /// Returns whether every dependency of an atom is solved.
    fn deps_solved(&self, atom: &str) -> bool {
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

    /// The work for an attempt; `None` when the atom no longer exists.
    fn job(&self, atom_id: &str, attempt: u32) -> Option<Job> {
        let atom = self.state.graph.atoms.get(atom_id)?;
        let bindings = &self.state.bindings;
        let render = |text: &str| template::render(text, bindings).unwrap_or_else(|_| text.to_string());
        let cwd = atom.cwd.as_ref().map_or_else(|| self.dir.clone(), |c| self.dir.join(c));
        let mut env: Vec<(String, String)> = atom.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.extend(template::binding_env(&self.state, atom_id));
        env.push(("AOT_ATOM".into(), atom_id.to_string()));
        env.push(("AOT_ATTEMPT".into(), attempt.to_string()));
        env.push(("AOT_STATE".into(), self.store.paths().state.display().to_string()));
        let history = self.history.of_atom(atom_id).to_vec();
        if let Some(last) = history.last() {
            let signal = CorrectionSignal {
                atom: atom_id.into(),
                attempt,
                failed_criterion: last.criterion.clone(),
                class: last.class,
                message: last.message.clone(),
                history: history.clone(),
            };
            env.push((
                "AOT_CORRECTION".into(),
                serde_json::to_string(&signal).unwrap_or_default(),
            ));
        }
        let timeout = atom.timeout.map(|t| t.0);
        let spec = |command: String, stdin: Option<String>| CommandSpec {
            command,
            cwd: cwd.clone(),
            env: env.clone(),
            stdin,
            timeout,
        };
        let run = match (&atom.run, &atom.agent) {
            (Some(run), _) => spec(render(run), None),
            (None, Some(task)) => {
                let prompt = self.prompt(atom_id, atom, &render(task), &history);
                spec(self.agent_command().unwrap_or_default(), Some(prompt))
            }
            (None, None) => spec("true".into(), None),
        };
        Some(Job {
            atom: atom_id.into(),
            run,
            checks: atom.check.iter().map(|c| spec(render(c), None)).collect(),
            probe: atom.probe.as_ref().map(|p| spec(render(p), None)),
            environmental_codes: atom
                .environmental_exit_codes
                .clone()
                .unwrap_or_else(|| Atom::DEFAULT_ENVIRONMENTAL_EXIT_CODES.to_vec()),
        })
    }

    fn prompt(&self, atom_id: &str, atom: &Atom, task: &str, history: &[Reflection]) -> String {
        let list = |items: Vec<String>| {
            if items.is_empty() {
                "(none)".to_string()
            } else {
                items.join("\n")
            }
        };
        let bindings = list(
            atom.deps
                .iter()
                .filter_map(|d| self.state.bindings.get(d).map(|b| format!("- {d}: {}", b.summary)))
                .collect(),
        );
        let corrections = list(
            history
                .iter()
                .map(|r| {
                    format!(
                        "- attempt {} failed {} ({:?}): {}",
                        r.attempt, r.criterion, r.class, r.message
                    )
                })
                .collect(),
        );
        let checks = list(atom.check.iter().map(|c| format!("- `{c}`")).collect());
        let mut avoid = crate::steer::Steer::new(&self.state.graph.atoms, &self.state.run.ggs).blocked_constraints();
        avoid.extend(
            self.must_not
                .iter()
                .filter(|m| !avoid.contains(m))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let must_not = list(avoid.into_iter().map(|m| format!("- {m}")).collect());
        let should_prefer = list(self.should_prefer.iter().map(|m| format!("- {m}")).collect());
        AGENT_PROMPT
            .replace("{{goal}}", self.state.objective.goal.as_deref().unwrap_or_default())
            .replace("{{atom}}", atom_id)
            .replace("{{task}}", task)
            .replace("{{bindings}}", &bindings)
            .replace("{{must_not}}", &must_not)
            .replace("{{should_prefer}}", &should_prefer)
            .replace("{{corrections}}", &corrections)
            .replace("{{checks}}", &checks)
    }
}
